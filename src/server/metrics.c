/* metrics: counters, histograms and their Prometheus rendering. */
#include "server/metrics.h"

#include "base/err.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Upper bounds in ms: fine below the 80 ms frame budget, coarse above it. */
static const double g_bounds[] = {1, 2, 5, 10, 20, 40, 60, 80, 120, 160, 320, 640};
#define N_BOUNDS (sizeof g_bounds / sizeof g_bounds[0])

static const char *const g_stage_names[METRICS_STAGES] = {"encode", "lm", "decode", "frame"};
/* Conversations per tick: powers of two up to the largest batch a server holds. */
static const double g_batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
/* Join waits in ms: none on a quiet server, seconds behind a crowd. */
static const double g_wait_bounds[] = {1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};
/* A conversation's frame latencies: 1 ms bins up to CONV_BINS ms, the last bin holds the rest. */
#define CONV_BINS 1000
/* Per frame: the echo energies forget over about 25 frames (2 s). */
#define ECHO_DECAY 0.96
/* Prompt phases in ms: from a cache hit (a few ms) to a long prompt on a slow machine. */
static const double g_prompt_bounds[] = {5, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};

typedef struct histogram {
    uint64_t buckets[N_BOUNDS + 1]; /* last one is +Inf (sized for the longest bounds list) */
    uint64_t count;
    double sum;
} histogram;

#define N_OF(a) (sizeof a / sizeof a[0])
_Static_assert(N_OF(g_batch_bounds) <= N_BOUNDS && N_OF(g_prompt_bounds) <= N_BOUNDS &&
                   N_OF(g_wait_bounds) <= N_BOUNDS,
               "histogram too small");

struct metrics_conv {
    metrics_conv *next, *prev;
    uint64_t id, count;
    uint32_t bins[CONV_BINS + 1];
    int echo;                 /* its uplink goes through the echo canceller */
    double echo_in, echo_out; /* energies, decayed by ECHO_DECAY per frame */
};

struct metrics {
    pthread_mutex_t lock;
    int active;
    uint64_t sessions_total, sessions_rejected, frames, late_frames, bytes_in, bytes_out, bad_input, unauthorized;
    uint64_t uplink_silent_frames, uplink_dropped_samples, uplink_concealed_packets; /* metrics_uplink_loss */
    histogram stage[METRICS_STAGES];
    histogram tick, tick_host, tick_batch, prompt[2]; /* prompt[1]: from the prompt cache */
    histogram join_wait;
    double join_work_ms;
    uint64_t join_work_units;
    metrics_conv *convs; /* open conversations, newest first */
    metrics_capacity capacity;
    int capacity_set; /* the plan is made: before, its gauges are absent, not 0 ("none fits") */
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
    while (m->convs) metrics_conv_close(m, m->convs);
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

/* Adds v (in the bounds' unit) to h; sum_scale converts it to the exported sum's unit. */
static void observe(histogram *h, const double *bounds, size_t n, double v, double sum_scale) {
    size_t b = 0;
    while (b < n && v > bounds[b]) b++;
    h->buckets[b]++;
    h->count++;
    h->sum += v * sum_scale;
}

void metrics_frame(metrics *m, const double ms[METRICS_STAGES], int late) {
    pthread_mutex_lock(&m->lock);
    m->frames++;
    m->late_frames += late != 0;
    for (int s = 0; s < METRICS_STAGES; s++) observe(&m->stage[s], g_bounds, N_BOUNDS, ms[s], 1e-3);
    pthread_mutex_unlock(&m->lock);
}

void metrics_tick(metrics *m, double lm_ms, double host_ms, int batch) {
    pthread_mutex_lock(&m->lock);
    observe(&m->tick, g_bounds, N_BOUNDS, lm_ms, 1e-3);
    observe(&m->tick_host, g_bounds, N_BOUNDS, host_ms, 1e-3);
    observe(&m->tick_batch, g_batch_bounds, N_OF(g_batch_bounds), batch, 1);
    pthread_mutex_unlock(&m->lock);
}

void metrics_prompt(metrics *m, double ms, int cached) {
    pthread_mutex_lock(&m->lock);
    observe(&m->prompt[cached != 0], g_prompt_bounds, N_OF(g_prompt_bounds), ms, 1e-3);
    pthread_mutex_unlock(&m->lock);
}

void metrics_join_wait(metrics *m, double ms) {
    pthread_mutex_lock(&m->lock);
    observe(&m->join_wait, g_wait_bounds, N_OF(g_wait_bounds), ms, 1e-3);
    pthread_mutex_unlock(&m->lock);
}

void metrics_join_work(metrics *m, double ms) {
    pthread_mutex_lock(&m->lock);
    m->join_work_ms += ms;
    m->join_work_units++;
    pthread_mutex_unlock(&m->lock);
}

metrics_conv *metrics_conv_open(metrics *m, uint64_t id) {
    metrics_conv *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->id = id;
    pthread_mutex_lock(&m->lock);
    c->next = m->convs;
    if (m->convs) m->convs->prev = c;
    m->convs = c;
    pthread_mutex_unlock(&m->lock);
    return c;
}

void metrics_conv_frame(metrics *m, metrics_conv *c, double ms) {
    if (!c) return;
    size_t bin = ms <= 0 ? 0 : ms >= CONV_BINS ? CONV_BINS : (size_t)ms;
    pthread_mutex_lock(&m->lock);
    c->bins[bin]++;
    c->count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_conv_close(metrics *m, metrics_conv *c) {
    if (!c) return;
    pthread_mutex_lock(&m->lock);
    if (c->prev) c->prev->next = c->next;
    else m->convs = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&m->lock);
    free(c);
}

void metrics_conv_echo(metrics *m, metrics_conv *c, double energy_in, double energy_out) {
    if (!c) return;
    pthread_mutex_lock(&m->lock);
    c->echo = 1;
    c->echo_in = c->echo_in * ECHO_DECAY + energy_in;
    c->echo_out = c->echo_out * ECHO_DECAY + energy_out;
    pthread_mutex_unlock(&m->lock);
}

/* The upper edge (ms) of the bin holding quantile q of c's frames. */
static double conv_quantile(const metrics_conv *c, double q) {
    uint64_t rank = (uint64_t)(q * (double)(c->count - 1)) + 1, seen = 0;
    for (size_t b = 0; b <= CONV_BINS; b++)
        if ((seen += c->bins[b]) >= rank) return (double)(b + 1);
    return CONV_BINS + 1;
}

void metrics_bytes(metrics *m, uint64_t in, uint64_t out) {
    pthread_mutex_lock(&m->lock);
    m->bytes_in += in;
    m->bytes_out += out;
    pthread_mutex_unlock(&m->lock);
}

void metrics_unauthorized(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->unauthorized++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_bad_input(metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->bad_input++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_uplink_loss(metrics *m, uint64_t silent_frames, uint64_t dropped_samples, uint64_t concealed_packets) {
    pthread_mutex_lock(&m->lock);
    m->uplink_silent_frames += silent_frames;
    m->uplink_dropped_samples += dropped_samples;
    m->uplink_concealed_packets += concealed_packets;
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

/* Whole lines only: a line that does not fit is left out, not cut (a scraper refuses the whole
 * exposition over one broken line). */
static void put(out_buf *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < o->cap - o->len) o->len += (size_t)n;
    else o->p[o->len] = '\0';
}

static void put_counter(out_buf *o, const char *name, const char *type, const char *help, uint64_t v) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, (unsigned long long)v);
}

/* One histogram's series; label ("key=\"v\"") may be NULL; bounds times scale give le. */
static void put_histogram(out_buf *o, const char *name, const char *label, const histogram *h, const double *bounds,
                          size_t n, double scale) {
    const char *sep = label ? "," : "";
    label = label ? label : "";
    uint64_t cum = 0;
    for (size_t b = 0; b <= n; b++) {
        cum += h->buckets[b];
        if (b < n) put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep, bounds[b] * scale, (unsigned long long)cum);
        else put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep, (unsigned long long)cum);
    }
    const char *open = *label ? "{" : "", *close = *label ? "}" : "";
    put(o, "%s_sum%s%s%s %.6f\n", name, open, label, close, h->sum);
    put(o, "%s_count%s%s%s %llu\n", name, open, label, close, (unsigned long long)h->count);
}

void metrics_set_capacity(metrics *m, const metrics_capacity *c) {
    pthread_mutex_lock(&m->lock);
    m->capacity = *c;
    m->capacity_set = 1;
    pthread_mutex_unlock(&m->lock);
}

static void put_gauge(out_buf *o, const char *name, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.6g\n", name, help, name, name, v);
}

static void put_capacity(out_buf *o, const metrics_capacity *c) {
    put_gauge(o, "personaplex_capacity_tick_seconds",
              "Start-up calibration: one conversation's LM tick at the full context.", c->tick1_ms / 1e3);
    put_gauge(o, "personaplex_capacity_codec_seconds",
              "Start-up calibration: one conversation's Mimi encode and decode of a frame.", c->codec_ms / 1e3);
    put_gauge(o, "personaplex_capacity_host_seconds",
              "Start-up calibration: one conversation's downlink encoding (and echo cancellation) of a frame, over "
              "the host threads.",
              c->host_ms / 1e3);
    put_gauge(o, "personaplex_capacity_echo_seconds",
              "Start-up calibration: one conversation's echo cancellation of a frame, counted in the host work "
              "unless --echo-cancel is off (0: not counted).",
              c->echo_ms / 1e3);
    put_gauge(o, "personaplex_capacity_frame_seconds",
              "Start-up calibration: predicted work per 80 ms frame at the admitted maximum.", c->frame_ms / 1e3);
    put_gauge(o, "personaplex_capacity_by_time", "Conversations the frame time alone allows.", c->by_time);
    put_gauge(o, "personaplex_capacity_by_memory", "Conversations the free memory alone allows (-1: unknown).",
              c->by_memory);
    put_gauge(o, "personaplex_capacity_context_frames", "The context the calibration's ticks ran at (frames).",
              c->context);
}

size_t metrics_render(metrics *m, char *buf, size_t cap, int max_sessions) {
    out_buf o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    pthread_mutex_lock(&m->lock);
    put_counter(&o, "personaplex_sessions_active", "gauge", "Conversations open now.", (uint64_t)m->active);
    put_counter(&o, "personaplex_sessions_max", "gauge", "Conversations allowed at once.", (uint64_t)max_sessions);
    if (m->capacity_set) put_capacity(&o, &m->capacity);
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
    put_counter(&o, "personaplex_unauthorized_total", "counter",
                "Requests refused with 401 for want of a valid API key (--api-keys).", m->unauthorized);
    put_counter(&o, "personaplex_uplink_silent_frames_total", "counter",
                "Frames of silence the model heard between frames of a client's audio (it stopped coming for over "
                "a second: a stalled client or network, or a client that pauses its stream).",
                m->uplink_silent_frames);
    put_counter(&o, "personaplex_uplink_dropped_samples_total", "counter",
                "Samples (24 kHz) of client audio dropped because the uplink buffer was full.",
                m->uplink_dropped_samples);
    put_counter(&o, "personaplex_uplink_concealed_packets_total", "counter",
                "Client Opus packets lost or undecodable, replaced by loss concealment.", m->uplink_concealed_packets);
    put(&o, "# HELP personaplex_frame_stage_seconds Time per conversation frame, by stage.\n"
            "# TYPE personaplex_frame_stage_seconds histogram\n");
    for (int s = 0; s < METRICS_STAGES; s++) {
        char label[32];
        snprintf(label, sizeof label, "stage=\"%s\"", g_stage_names[s]);
        put_histogram(&o, "personaplex_frame_stage_seconds", label, &m->stage[s], g_bounds, N_BOUNDS, 1e-3);
    }
    put(&o, "# HELP personaplex_tick_seconds Time of one batched LM step over every conversation with a frame.\n"
            "# TYPE personaplex_tick_seconds histogram\n");
    put_histogram(&o, "personaplex_tick_seconds", NULL, &m->tick, g_bounds, N_BOUNDS, 1e-3);
    put(&o, "# HELP personaplex_tick_host_seconds Host work of one tick around its batched calls: every "
            "conversation's echo cancellation, downlink encoding and queueing, on the host threads.\n"
            "# TYPE personaplex_tick_host_seconds histogram\n");
    put_histogram(&o, "personaplex_tick_host_seconds", NULL, &m->tick_host, g_bounds, N_BOUNDS, 1e-3);
    put(&o, "# HELP personaplex_tick_batch_size Conversations advanced by one tick.\n"
            "# TYPE personaplex_tick_batch_size histogram\n");
    put_histogram(&o, "personaplex_tick_batch_size", NULL, &m->tick_batch, g_batch_bounds, N_OF(g_batch_bounds), 1);
    put(&o, "# HELP personaplex_prompt_seconds Admission to handshake: the prompt phases, run or from the prompt "
            "cache.\n# TYPE personaplex_prompt_seconds histogram\n");
    for (int c = 0; c < 2; c++)
        put_histogram(&o, "personaplex_prompt_seconds", c ? "source=\"cache\"" : "source=\"model\"", &m->prompt[c],
                      g_prompt_bounds, N_OF(g_prompt_bounds), 1e-3);
    put(&o, "# HELP personaplex_join_wait_seconds Admission to a join's first work: how long it waited for the "
            "frames of live conversations and earlier joins.\n# TYPE personaplex_join_wait_seconds histogram\n");
    put_histogram(&o, "personaplex_join_wait_seconds", NULL, &m->join_wait, g_wait_bounds, N_OF(g_wait_bounds), 1e-3);
    put(&o, "# HELP personaplex_join_work_seconds_total Engine time spent on joins (session starts, prompt runs, "
            "cache restores) between ticks.\n# TYPE personaplex_join_work_seconds_total counter\n"
            "personaplex_join_work_seconds_total %.6f\n", m->join_work_ms * 1e-3);
    put_counter(&o, "personaplex_join_work_units_total", "counter",
                "Units of joins' work (a session start, a prompt run, a cache restore).", m->join_work_units);
    put(&o, "# HELP personaplex_conversation_frame_latency_seconds Per open conversation: input frame complete to "
            "output queued (1 ms resolution).\n# TYPE personaplex_conversation_frame_latency_seconds summary\n");
    static const double quantiles[] = {0.5, 0.9, 0.99};
    for (const metrics_conv *c = m->convs; c; c = c->next) {
        if (!c->count) continue;
        for (size_t q = 0; q < N_OF(quantiles); q++)
            put(&o, "personaplex_conversation_frame_latency_seconds{session=\"%llu\",quantile=\"%g\"} %.3f\n",
                (unsigned long long)c->id, quantiles[q], conv_quantile(c, quantiles[q]) * 1e-3);
        put(&o, "personaplex_conversation_frame_latency_seconds_count{session=\"%llu\"} %llu\n",
            (unsigned long long)c->id, (unsigned long long)c->count);
    }
    put(&o, "# HELP personaplex_conversation_echo_removed_db Per open conversation with echo cancellation: "
            "uplink energy before over after the canceller, last seconds (its ERLE while only echo comes in).\n"
            "# TYPE personaplex_conversation_echo_removed_db gauge\n");
    for (const metrics_conv *c = m->convs; c; c = c->next)
        if (c->echo && c->echo_in > 0)
            put(&o, "personaplex_conversation_echo_removed_db{session=\"%llu\"} %.1f\n", (unsigned long long)c->id,
                10 * log10(c->echo_in / (c->echo_out > 1e-30 ? c->echo_out : 1e-30)));
    pthread_mutex_unlock(&m->lock);
    return o.len;
}
