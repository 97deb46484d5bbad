/* metrics: counters, histograms and their Prometheus rendering. */
#include "server/metrics.h"

#include "base/err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Upper bounds in ms: fine below the 80 ms frame budget, coarse above it. */
static const double g_bounds[] = {1, 2, 5, 10, 20, 40, 60, 80, 120, 160, 320, 640};
#define N_BOUNDS (sizeof g_bounds / sizeof g_bounds[0])

static const char *const g_stage_names[METRICS_STAGES] = {"encode", "lm", "decode", "frame"};

typedef struct histogram {
    uint64_t buckets[N_BOUNDS + 1]; /* last one is +Inf */
    uint64_t count;
    double sum;
} histogram;

struct metrics {
    pthread_mutex_t lock;
    int active;
    uint64_t sessions_total, sessions_rejected, frames, late_frames, bytes_in, bytes_out, bad_input;
    histogram stage[METRICS_STAGES];
};

int metrics_create(metrics **out, char *err) {
    metrics *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "metrics: out of memory");
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return PP_OK;
}

void metrics_destroy(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void metrics_session_started(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->active++;
    m->sessions_total++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_session_ended(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->active--;
    pthread_mutex_unlock(&m->lock);
}

void metrics_session_rejected(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->sessions_rejected++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_frame(metrics *m, const double ms[METRICS_STAGES], int late) {
    pthread_mutex_lock(&m->lock);
    m->frames++;
    m->late_frames += late != 0;
    for (int s = 0; s < METRICS_STAGES; s++) {
        histogram *h = &m->stage[s];
        size_t b = 0;
        while (b < N_BOUNDS && ms[s] > g_bounds[b]) b++;
        h->buckets[b]++;
        h->count++;
        h->sum += ms[s] / 1000.0;
    }
    pthread_mutex_unlock(&m->lock);
}

void metrics_bytes(metrics *m, uint64_t in, uint64_t out) {
    pthread_mutex_lock(&m->lock);
    m->bytes_in += in;
    m->bytes_out += out;
    pthread_mutex_unlock(&m->lock);
}

void metrics_bad_input(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->bad_input++;
    pthread_mutex_unlock(&m->lock);
}

int metrics_active(metrics *m) {
    pthread_mutex_lock(&m->lock);
    int a = m->active;
    pthread_mutex_unlock(&m->lock);
    return a;
}

typedef struct out_buf {
    char *p;
    size_t cap, len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void put(out_buf *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

static void put_counter(out_buf *o, const char *name, const char *type, const char *help, uint64_t v) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, (unsigned long long)v);
}

size_t metrics_render(metrics *m, char *buf, size_t cap, int max_sessions) {
    out_buf o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    pthread_mutex_lock(&m->lock);
    put_counter(&o, "personaplex_sessions_active", "gauge", "Conversations open now.", (uint64_t)m->active);
    put_counter(&o, "personaplex_sessions_max", "gauge", "Conversations allowed at once.", (uint64_t)max_sessions);
    put_counter(&o, "personaplex_sessions_total", "counter", "Conversations started.", m->sessions_total);
    put_counter(&o, "personaplex_sessions_rejected_total", "counter", "Connections refused because the server was full.",
                m->sessions_rejected);
    put_counter(&o, "personaplex_frames_total", "counter", "80 ms conversation frames produced.", m->frames);
    put_counter(&o, "personaplex_late_frames_total", "counter",
                "Frames whose output was queued more than 80 ms after their input was complete.", m->late_frames);
    put_counter(&o, "personaplex_bytes_in_total", "counter", "WebSocket payload bytes received.", m->bytes_in);
    put_counter(&o, "personaplex_bytes_out_total", "counter", "WebSocket payload bytes queued for sending.",
                m->bytes_out);
    put_counter(&o, "personaplex_bad_input_total", "counter",
                "Malformed messages, pages or queries answered with an error.", m->bad_input);
    put(&o, "# HELP personaplex_frame_stage_seconds Time per conversation frame, by stage.\n"
            "# TYPE personaplex_frame_stage_seconds histogram\n");
    for (int s = 0; s < METRICS_STAGES; s++) {
        const histogram *h = &m->stage[s];
        uint64_t cum = 0;
        for (size_t b = 0; b <= N_BOUNDS; b++) {
            cum += h->buckets[b];
            if (b < N_BOUNDS)
                put(&o, "personaplex_frame_stage_seconds_bucket{stage=\"%s\",le=\"%g\"} %llu\n", g_stage_names[s],
                    g_bounds[b] / 1000.0, (unsigned long long)cum);
            else
                put(&o, "personaplex_frame_stage_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %llu\n", g_stage_names[s],
                    (unsigned long long)cum);
        }
        put(&o, "personaplex_frame_stage_seconds_sum{stage=\"%s\"} %.6f\n", g_stage_names[s], h->sum);
        put(&o, "personaplex_frame_stage_seconds_count{stage=\"%s\"} %llu\n", g_stage_names[s],
            (unsigned long long)h->count);
    }
    pthread_mutex_unlock(&m->lock);
    return o.len;
}
