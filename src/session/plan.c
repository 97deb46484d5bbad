/* plan: see plan.h. */
#include "session/plan.h"

#include "base/clock.h"
#include "base/err.h"
#include "model/admission.h"
#include "session/model_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define CODEC_FRAMES 3               /* timed codec frames, after one warm-up */
#define CALIB_TICKS 3                /* timed ticks per batch size */
#define SESSION_SCRATCH (4u << 20)   /* a conversation's own one-row LM scratch and bookkeeping */

/* Mean wall time of a Mimi encode + decode of one frame; *bytes gets the codec state's size. */
static int time_codec(const pp_model *m, double *ms, size_t *bytes, char *err) {
    mimi_state *st = NULL;
    int rc = pp_mimi_state_create(pp_model_mimi(m), &st, err);
    if (rc) return rc;
    *bytes = pp_mimi_state_bytes(st);
    static float pcm[PP_FRAME_SAMPLES]; /* silence: the codec's cost does not depend on the signal */
    int32_t codes[PP_LM_AUDIO_CODEBOOKS];
    double t0 = 0;
    for (int i = 0; !rc && i <= CODEC_FRAMES; i++) {
        if (i == 1) t0 = pp_now_ms();
        rc = pp_mimi_encode_frame(st, pcm, codes, NULL, err);
        if (!rc) rc = pp_mimi_decode_frame(st, codes, pcm, err);
    }
    *ms = (pp_now_ms() - t0) / CODEC_FRAMES;
    pp_mimi_state_destroy(st);
    return rc;
}

/* Times ticks at 1, 2, 4, ... up to `limit` conversations until one no longer fits the frame,
 * each conversation at the model's full context (its worst case: every query attends over the
 * whole KV ring). */
static int calibrate(const pp_lm *lm, pp_kv_format kv, const pp_admission_limits *lim, int limit,
                     pp_admission_calib *cal, char *err) {
    const int context = pp_lm_get_config(lm)->context;
    memset(cal, 0, sizeof *cal);
    double budget = lim->frame_ms * lim->headroom;
    for (int n = 1; cal->n < PP_ADMISSION_POINTS; n = 2 * n < limit ? 2 * n : limit) {
        pp_admission_calib one;
        int rc = pp_admission_calibrate(lm, &n, 1, CALIB_TICKS, kv, context, &one, err);
        if (rc) return rc;
        cal->batch[cal->n] = n;
        cal->tick_ms[cal->n++] = one.tick_ms[0];
        if (n >= limit || pp_admission_predict(cal, lim, n) > budget) break;
    }
    return PP_OK;
}

int pp_plan_capacity(pp_model *m, int hard_max, size_t reserved_host, pp_plan *out, char *err) {
    memset(out, 0, sizeof *out);
    const pp_lm *lm = pp_model_lm(m);
    pp_kv_format kv = pp_model_kv_cache(m);
    pp_admission_limits lim;
    pp_admission_limits_default(&lim);
    size_t codec_bytes = 0;
    int rc = time_codec(m, &lim.per_session_ms, &codec_bytes, err);
    if (rc) return rc;
    lim.per_session_bytes = pp_lm_ctx_bytes(pp_lm_get_config(lm), kv) + codec_bytes + SESSION_SCRATCH;
    lim.mem_free = pp_admission_free_memory(pp_model_get_backend(m));
    if (pp_backend_uses_host_memory(pp_model_get_backend(m))) /* the prompt cache's host memory is its too */
        lim.mem_free = lim.mem_free > reserved_host ? lim.mem_free - reserved_host : 1;
    lim.hard_max = hard_max > 0 && hard_max < PP_PLAN_MAX ? hard_max : PP_PLAN_MAX;
    /* Never calibrate more conversations than the memory holds (they are real allocations). */
    int limit = lim.hard_max;
    if (lim.mem_free && lim.per_session_bytes && lim.mem_free / lim.per_session_bytes < (size_t)limit)
        limit = (int)(lim.mem_free / lim.per_session_bytes);
    pp_admission_calib cal;
    if (limit < 1) limit = 1;
    if ((rc = calibrate(lm, kv, &lim, limit, &cal, err))) return rc;
    pp_admission_report rep;
    int n = pp_admission_capacity(&cal, &lim, &rep);
    *out = (pp_plan){.sessions = n > 0 ? n : 1,
                     .by_time = rep.by_time,
                     .by_memory = rep.by_memory,
                     .tick1_ms = cal.tick_ms[0],
                     .context = pp_lm_get_config(lm)->context,
                     .codec_ms = lim.per_session_ms,
                     .frame_ms = pp_admission_predict(&cal, &lim, n > 0 ? n : 1),
                     .per_session_bytes = lim.per_session_bytes,
                     .mem_free = lim.mem_free};
    if (n > 0)
        snprintf(out->why, sizeof out->why,
                 "%s; real time alone allows %d, memory %d (ticks timed at 1..%d conversations, each at the full "
                 "context of %d frames)",
                 rep.why, rep.by_time, rep.by_memory, cal.batch[cal.n - 1], out->context);
    else
        snprintf(out->why, sizeof out->why,
                 "1 conversation although %s (one takes %.1f ms per %.0f ms frame): replies will lag",
                 rep.by_memory == 0 ? "memory holds none" : "not even one runs in real time",
                 out->frame_ms, lim.frame_ms);
    return PP_OK;
}
