/* plan: see plan.h. */
#include "session/plan.h"

#include "base/clock.h"
#include "base/err.h"
#include "model/admission.h"
#include "session/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Timed codec frames and ticks per batch size; their medians count (pp_admission_median). Five
 * leave the median steady with both a device's recording and a preemption among them. */
#define CODEC_FRAMES 5
#define CALIB_TICKS 5

/* Median wall time of one frame's Mimi encode + decode of n conversations in one batch, as the
 * server's tick runs them; *bytes (when not NULL) gets one conversation's codec state size. */
static int time_codec(const pp_model *m, int n, double *ms, size_t *bytes, char *err) {
    const mimi_model *mm = pp_model_mimi(m);
    mimi_state **st = calloc((size_t)n, sizeof *st);
    int32_t(*codes)[PP_LM_AUDIO_CODEBOOKS] = calloc((size_t)n, sizeof *codes);
    const float **in = calloc((size_t)n, sizeof *in);
    float **out = calloc((size_t)n, sizeof *out);
    int32_t **code_out = calloc((size_t)n, sizeof *code_out);
    const int32_t **code_in = calloc((size_t)n, sizeof *code_in);
    float *pcm = calloc((size_t)n * PP_FRAME_SAMPLES, sizeof *pcm); /* silence: the cost does not depend on it */
    mimi_batch *b = NULL;
    int rc = st && codes && in && out && code_out && code_in && pcm
                 ? pp_mimi_batch_create(mm, n, &b, err)
                 : pp_fail(err, PP_ENOMEM, "capacity plan: out of memory for %d codec states", n);
    for (int i = 0; i < n && !rc; i++) {
        rc = pp_mimi_state_create(mm, &st[i], err);
        in[i] = out[i] = pcm + (size_t)i * PP_FRAME_SAMPLES;
        code_in[i] = code_out[i] = codes[i];
    }
    if (!rc && bytes) *bytes = pp_mimi_state_bytes(st[0]);
    /* Two frames untimed: the rows' start (the decode's first keyed run), then the encode's
     * first keyed run and the decode's recording on a device. The encode's recording falls in
     * the first timed frame, which the median leaves out. */
    double frame_ms[CODEC_FRAMES] = {0};
    for (int i = 0; !rc && i < CODEC_FRAMES + 2; i++) {
        double t0 = pp_now_ms();
        rc = pp_mimi_encode_batch(b, st, n, in, code_out, err);
        if (!rc) rc = pp_mimi_decode_batch(b, st, n, code_in, out, err);
        if (i >= 2) frame_ms[i - 2] = pp_now_ms() - t0;
    }
    *ms = pp_admission_median(frame_ms, CODEC_FRAMES);
    for (int i = 0; st && i < n; i++) pp_mimi_state_destroy(st[i]);
    pp_mimi_batch_destroy(b);
    free(st);
    free(codes);
    free(in);
    free(out);
    free(code_out);
    free(code_in);
    free(pcm);
    return rc;
}

/* Times ticks at 1, 2, 4, ... up to `limit` conversations until one no longer fits the frame,
 * each conversation at the model's full context (its worst case: every query attends over the
 * whole KV ring), each tick with its batched codec frame as the server runs it. */
static int calibrate(const pp_model *m, pp_kv_format kv, const pp_admission_limits *lim, int limit,
                     pp_admission_calib *cal, double *lm1_ms, char *err) {
    const pp_lm *lm = pp_model_lm(m);
    const int context = pp_lm_get_config(lm)->context;
    memset(cal, 0, sizeof *cal);
    double budget = lim->frame_ms * lim->headroom;
    for (int n = 1; cal->n < PP_ADMISSION_POINTS; n = 2 * n < limit ? 2 * n : limit) {
        pp_admission_calib one;
        double codec_ms;
        int rc = pp_admission_calibrate(lm, &n, 1, CALIB_TICKS, kv, context, &one, err);
        if (!rc) rc = time_codec(m, n, &codec_ms, NULL, err);
        if (rc) return rc;
        if (cal->n == 0) *lm1_ms = one.tick_ms[0];
        cal->batch[cal->n] = n;
        cal->tick_ms[cal->n++] = one.tick_ms[0] + codec_ms;
        if (n >= limit || pp_admission_predict(cal, lim, n) > budget) break;
    }
    return PP_OK;
}

/* Bytes a server's tick batch (pp_session_batch) takes per conversation it holds: a one-row
 * batch's, which also carries the few bytes that do not grow with the rows. */
static int batch_row_bytes(pp_model *m, size_t *bytes, char *err) {
    pp_session_batch *b;
    int rc = pp_session_batch_create(m, 1, &b, err);
    if (rc) return rc;
    *bytes = pp_session_batch_bytes(b);
    pp_session_batch_destroy(b);
    return PP_OK;
}

int pp_plan_capacity(pp_model *m, int hard_max, size_t reserved_host, double host_ms, pp_plan *out, char *err) {
    memset(out, 0, sizeof *out);
    const pp_lm *lm = pp_model_lm(m);
    pp_kv_format kv = pp_model_kv_cache(m);
    pp_admission_limits lim;
    pp_admission_limits_default(&lim);
    size_t codec_bytes = 0, batch_bytes = 0;
    double codec1_ms = 0;
    int rc = time_codec(m, 1, &codec1_ms, &codec_bytes, err);
    if (!rc) rc = batch_row_bytes(m, &batch_bytes, err);
    if (rc) return rc;
    lim.per_session_ms = host_ms; /* the caller's; the codec runs batched inside each calibrated tick */
    /* its KV rings, codec state and own scratch, and its row of the server's tick batch, which is
     * allocated for every admitted conversation once the plan is made */
    lim.per_session_bytes =
        pp_lm_ctx_bytes(pp_lm_get_config(lm), kv) + codec_bytes + PP_PLAN_SESSION_SCRATCH + batch_bytes;
    lim.mem_free = pp_admission_free_memory(pp_model_get_backend(m));
    size_t set_aside = pp_backend_uses_host_memory(pp_model_get_backend(m)) ? reserved_host : 0;
    /* the prompt cache's host memory is the conversations' too */
    if (set_aside) lim.mem_free = lim.mem_free > set_aside ? lim.mem_free - set_aside : 1;
    lim.hard_max = hard_max > 0 && hard_max < PP_PLAN_MAX ? hard_max : PP_PLAN_MAX;
    /* Never calibrate more conversations than the memory holds (they are real allocations). */
    int limit = lim.hard_max;
    if (lim.mem_free && lim.per_session_bytes && lim.mem_free / lim.per_session_bytes < (size_t)limit)
        limit = (int)(lim.mem_free / lim.per_session_bytes);
    pp_admission_calib cal;
    if (limit < 1) limit = 1;
    double lm1_ms = 0;
    if ((rc = calibrate(m, kv, &lim, limit, &cal, &lm1_ms, err))) return rc;
    pp_admission_report rep;
    int n = pp_admission_capacity(&cal, &lim, &rep);
    *out = (pp_plan){.sessions = n > 0 ? n : 1,
                     .by_time = rep.by_time,
                     .by_memory = rep.by_memory,
                     .tick1_ms = lm1_ms,
                     .context = pp_lm_get_config(lm)->context,
                     .codec_ms = codec1_ms,
                     .host_ms = host_ms,
                     .frame_ms = pp_admission_predict(&cal, &lim, n > 0 ? n : 1),
                     .per_session_bytes = lim.per_session_bytes,
                     .mem_free = lim.mem_free};
    if (n > 0)
        snprintf(out->why, sizeof out->why,
                 "%s; real time alone allows %d, memory %d (ticks timed at 1..%d conversations, each at the full "
                 "context of %d frames, with their batched codec; %.2f ms of host work added per conversation)",
                 rep.why, rep.by_time, rep.by_memory, cal.batch[cal.n - 1], out->context, host_ms);
    else if (rep.by_memory == 0)
        snprintf(out->why, sizeof out->why,
                 "1 conversation although memory holds none (%.1f MiB free after %.0f MiB set aside for the "
                 "prompt cache, one takes %.1f MiB)",
                 (double)lim.mem_free / (1 << 20), (double)set_aside / (1 << 20),
                 (double)lim.per_session_bytes / (1 << 20));
    else /* the budget, not the frame: a tick of 70 ms "per 80 ms frame" read as one that fits */
        snprintf(out->why, sizeof out->why,
                 "1 conversation although not even one runs in real time (one takes %.1f ms of the %.1f ms a "
                 "frame allows, %.0f %% of %.0f ms): replies will lag",
                 out->frame_ms, lim.frame_ms * lim.headroom, lim.headroom * 100, lim.frame_ms);
    return PP_OK;
}
