/* admission: see admission.h. */
#include "model/admission.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/hostmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEARCH_MAX 4096 /* no machine holds more conversations than this */

void pp_admission_limits_default(pp_admission_limits *l) {
    memset(l, 0, sizeof *l);
    l->frame_ms = 80;
    l->headroom = 0.8;
}

int pp_admission_time_ticks(const pp_lm *lm, int n, int ticks, pp_kv_format kv, int context, double *tick_ms,
                            char *err) {
    const pp_lm_config *c = pp_lm_get_config(lm);
    pp_lmbatch *b = NULL;
    pp_lmgen **gens = calloc((size_t)n, sizeof *gens);
    int32_t (*user)[PP_LM_AUDIO_CODEBOOKS] = calloc((size_t)n, sizeof *user);
    pp_lmgen_out *outs = calloc((size_t)n, sizeof *outs);
    int rc = gens && user && outs ? PP_OK : pp_fail(err, PP_ENOMEM, "admission: out of memory");
    pp_lmgen_params p;
    pp_lmgen_params_default(&p); /* sampling as a server's conversations do by default */
    p.kv_cache = kv;
    if (!rc) rc = pp_lmbatch_create(lm, n, &b, err);
    for (int i = 0; !rc && i < n; i++) rc = pp_lmgen_create(lm, &p, &gens[i], err);
    /* The first call of a conversation computes nothing; the second is the warm-up. */
    for (int t = 0; !rc && t < ticks + 2; t++) {
        for (int i = 0; i < n; i++)
            for (int k = 0; k < PP_LM_AUDIO_CODEBOOKS; k++) user[i][k] = (t * 37 + i * 101 + k * 13) % c->card;
        for (int i = 0; t == 1 && !rc && i < n; i++) rc = pp_lmgen_skip(gens[i], context, err);
        double t0 = pp_now_ms();
        if (!rc) rc = pp_lmbatch_step(b, gens, n, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])user, outs, err);
        if (t >= 2) tick_ms[t - 2] = pp_now_ms() - t0;
    }
    for (int i = 0; gens && i < n; i++) pp_lmgen_destroy(gens[i]);
    pp_lmbatch_destroy(b);
    free(gens);
    free(user);
    free(outs);
    return rc;
}

double pp_admission_median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n < 1 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Median tick time of n conversations at `context` over `ticks` ticks after a warm-up. */
static int time_batch(const pp_lm *lm, int n, int ticks, pp_kv_format kv, int context, double *ms, char *err) {
    double *tick_ms = calloc((size_t)ticks, sizeof *tick_ms);
    if (!tick_ms) return pp_fail(err, PP_ENOMEM, "admission: out of memory");
    int rc = pp_admission_time_ticks(lm, n, ticks, kv, context, tick_ms, err);
    *ms = pp_admission_median(tick_ms, ticks);
    free(tick_ms);
    return rc;
}

int pp_admission_calibrate(const pp_lm *lm, const int *sizes, int n_sizes, int ticks, pp_kv_format kv, int context,
                           pp_admission_calib *out, char *err) {
    memset(out, 0, sizeof *out);
    if (n_sizes < 1 || n_sizes > PP_ADMISSION_POINTS || ticks < 1)
        return pp_fail(err, PP_EINVAL, "admission: %d batch sizes (1..%d) and %d ticks (>= 1)", n_sizes,
                       PP_ADMISSION_POINTS, ticks);
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1 || (i > 0 && sizes[i] <= sizes[i - 1]))
            return pp_fail(err, PP_EINVAL, "admission: batch sizes must ascend from 1 or more (entry %d = %d)", i,
                           sizes[i]);
    for (int i = 0; i < n_sizes; i++) {
        int rc = time_batch(lm, sizes[i], ticks, kv, context, &out->tick_ms[i], err);
        if (rc) return rc;
        out->batch[i] = sizes[i];
        out->n = i + 1;
    }
    return PP_OK;
}

/* Tick time at n: linear between the measured points; below the first point, the first
 * point's time (a tick never gets cheaper with fewer rows than that); past the last, the last
 * segment's slope (never negative: measurement noise must not promise free conversations). */
static double tick_at(const pp_admission_calib *c, int n) {
    if (c->n == 0) return 0;
    if (n <= c->batch[0]) return c->tick_ms[0];
    if (c->n == 1) return c->tick_ms[0] * n / c->batch[0]; /* one point: assume no batching gain */
    int i = 1;
    while (i < c->n - 1 && c->batch[i] < n) i++;
    double slope = (c->tick_ms[i] - c->tick_ms[i - 1]) / (c->batch[i] - c->batch[i - 1]);
    if (slope < 0) slope = 0;
    return c->tick_ms[i - 1] + slope * (n - c->batch[i - 1]);
}

double pp_admission_predict(const pp_admission_calib *c, const pp_admission_limits *l, int n) {
    return tick_at(c, n) + n * l->per_session_ms;
}

int pp_admission_capacity(const pp_admission_calib *c, const pp_admission_limits *l, pp_admission_report *rep) {
    double budget = l->frame_ms * l->headroom;
    int by_time = 0;
    while (by_time < SEARCH_MAX && pp_admission_predict(c, l, by_time + 1) <= budget) by_time++;
    int by_mem = -1;
    if (l->mem_free && l->per_session_bytes) {
        size_t m = l->mem_free / l->per_session_bytes;
        by_mem = m > SEARCH_MAX ? SEARCH_MAX : (int)m;
    }
    int n = by_time;
    const char *why = "the frame time";
    if (by_mem >= 0 && by_mem < n) n = by_mem, why = "memory";
    if (l->hard_max > 0 && l->hard_max < n) n = l->hard_max, why = "the configured maximum";
    if (rep) {
        rep->by_time = by_time;
        rep->by_memory = by_mem;
        rep->tick_ms = pp_admission_predict(c, l, n);
        snprintf(rep->why, sizeof rep->why, "%d conversations, limited by %s (%.1f of %.1f ms per frame)", n, why,
                 rep->tick_ms, budget);
    }
    return n;
}

size_t pp_admission_free_memory(pp_backend *be) {
    if (be->ops->mem_info) {
        size_t w, b, ws, dev_free = 0, total = 0, in_place;
        be->ops->mem_info(be, &w, &b, &ws, &dev_free, &total, &in_place);
        if (total) return dev_free;
    }
    uint64_t host_total, host_free;
    pp_host_memory(&host_total, &host_free);
    return (size_t)host_free;
}
