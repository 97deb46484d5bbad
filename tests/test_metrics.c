/* test_metrics: the /metrics exposition (server/metrics.c) as a Prometheus scraper reads it.
 *
 * - Every sample belongs to a family announced by a # TYPE line before it (its name, or the
 *   name less _bucket, _sum or _count).
 * - A histogram's buckets are cumulative, end with le="+Inf", and that bucket equals _count,
 *   with observations past the last bound too.
 * - The start-up capacity gauges are absent until the plan is set: while the model loads, a 0
 *   would read as "not one conversation fits"; once set they are there, by_memory -1 included.
 * - An open conversation's latency summary is exported while it is open and gone once closed;
 *   sessions_active follows starts and ends. */
#include "test.h"

#include "base/err.h"
#include "server/metrics.h"

#include <stdlib.h>
#include <string.h>

#define BODY 262144

static char g_body[BODY];

static const char *render(metrics *m) {
    metrics_render(m, g_body, sizeof g_body, 4);
    return g_body;
}

/* The value of the first sample of `series` (its name, with its labels if any), or -2. */
static double sample(const char *body, const char *series) {
    size_t n = strlen(series);
    for (const char *line = body; *line;) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ') return atof(line + n + 1);
        const char *nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    return -2;
}

/* Whether every sample line's family has a # TYPE line earlier in body. */
static int samples_typed(const char *body) {
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (const char *line = body; *line;) {
        const char *nl = strchr(line, '\n');
        if (!nl) return 0; /* every line ends with a newline */
        if (*line != '#') {
            size_t len = strcspn(line, "{ ");
            int typed = 0;
            for (int s = -1; s < 3 && !typed; s++) {
                size_t cut = s < 0 ? 0 : strlen(suffixes[s]);
                if (cut >= len || (s >= 0 && strncmp(line + len - cut, suffixes[s], cut) != 0)) continue;
                char type[160];
                snprintf(type, sizeof type, "# TYPE %.*s ", (int)(len - cut), line);
                const char *at = strstr(body, type);
                typed = at && at < line;
            }
            if (!typed) {
                fprintf(stderr, "untyped sample: %.*s\n", (int)(nl - line), line);
                return 0;
            }
        }
        line = nl + 1;
    }
    return 1;
}

/* Whether histogram `name`'s buckets (the first series) are cumulative and end with +Inf == _count. */
static int histogram_ok(const char *body, const char *name) {
    char prefix[128], count[128];
    snprintf(prefix, sizeof prefix, "%s_bucket{", name);
    snprintf(count, sizeof count, "\n%s_count", name);
    double last = -1;
    int inf = 0;
    for (const char *p = body; (p = strstr(p, prefix)); p++) {
        const char *end = strchr(p, '}');
        double v = atof(end + 1);
        if (v < last) return 0;
        last = v;
        if (strncmp(end - 6, "\"+Inf\"", 6) == 0) {
            inf = 1;
            break;
        }
    }
    const char *c = strstr(body, count); /* the first series' count, labelled or not */
    return inf && c && last == atof(strchr(c, ' ') + 1);
}

int main(void) {
    char err[PP_ERR_LEN];
    metrics *m = NULL;
    TEST_COND("metrics", metrics_create(&m, err) == PP_OK);
    if (!m) return test_report();

    const char *body = render(m);
    TEST_COND("loading: no capacity gauges yet", !strstr(body, "personaplex_capacity_"));
    TEST_COND("loading: the rest is there", sample(body, "personaplex_sessions_active") == 0 &&
                                                sample(body, "personaplex_sessions_max") == 4);
    metrics_set_capacity(m, &(metrics_capacity){.tick1_ms = 20, .codec_ms = 2, .host_ms = 0.5, .frame_ms = 60,
                                                .by_time = 7, .by_memory = -1, .context = 3000});
    body = render(m);
    TEST_COND("planned: capacity gauges", sample(body, "personaplex_capacity_by_time") == 7 &&
                                              sample(body, "personaplex_capacity_by_memory") == -1 &&
                                              sample(body, "personaplex_capacity_tick_seconds") == 0.02);

    metrics_session_started(m);
    metrics_session_started(m);
    metrics_conv *a = metrics_conv_open(m, 11), *b = metrics_conv_open(m, 12);
    const double stages[METRICS_STAGES] = {1.5, 30, 2, 900}; /* the frame past every bound */
    for (int i = 0; i < 5; i++) {
        metrics_frame(m, stages, 1);
        metrics_tick(m, 30 + 200 * i, 0.5, 2 + 100 * i);
        metrics_conv_frame(m, a, 10 + i);
        metrics_conv_frame(m, b, 2000);
    }
    metrics_prompt(m, 40000, 0);
    metrics_join_wait(m, 5);
    body = render(m);
    TEST_COND("every sample is typed", samples_typed(body));
    TEST_COND("stage histogram cumulative, +Inf is the count", histogram_ok(body, "personaplex_frame_stage_seconds"));
    TEST_COND("tick histogram too", histogram_ok(body, "personaplex_tick_seconds") &&
                                        histogram_ok(body, "personaplex_tick_batch_size") &&
                                        histogram_ok(body, "personaplex_prompt_seconds") &&
                                        histogram_ok(body, "personaplex_join_wait_seconds"));
    TEST_COND("two open conversations", sample(body, "personaplex_sessions_active") == 2 &&
                                            sample(body, "personaplex_conversation_frame_latency_seconds_count{"
                                                         "session=\"11\"}") == 5);
    metrics_conv_close(m, a);
    metrics_session_ended(m);
    body = render(m);
    TEST_COND("a closed conversation's summary is gone",
              !strstr(body, "session=\"11\"") && strstr(body, "session=\"12\""));
    TEST_COND("sessions_active follows", sample(body, "personaplex_sessions_active") == 1 &&
                                             sample(body, "personaplex_sessions_total") == 2);
    metrics_conv_close(m, b);
    metrics_session_ended(m);
    TEST_COND("still typed with none open", samples_typed(render(m)));
    metrics_destroy(m);
    return test_report();
}
