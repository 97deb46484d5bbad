/* admission: how many conversations this machine can hold in real time.
 *
 * Every 80 ms tick advances all conversations together (pp_lmbatch_step, and the server's
 * batched codec), so the limit is the largest batch n whose tick, plus any per-conversation work
 * outside the batch, fits in the frame with some headroom, and whose state fits in the free
 * memory. pp_admission_calibrate
 * measures the tick at a few batch sizes with throwaway conversations (a second or two at
 * start-up); pp_admission_capacity predicts the tick at any n from those points (piecewise
 * linear, extrapolated with the last segment's slope) and applies both limits.
 *
 * Memory, PersonaPlex-7B (32 layers × 2 (K, V) × 3000 slots × 4096 values per conversation):
 * f32 3.15 GB, bf16 1.57 GB, int8 0.79 GB + 0.02 GB of scales (one f32 per slot and head) =
 * 0.81 GB. 64 full-length conversations on an 80 GB card with NF2 weights (about 2.2 GB):
 * int8 64 × 0.81 = 51.9 GB + 2.2 GB + Mimi and workspace (< 2 GB) ≈ 56 GB: fits, with room to
 * spare; bf16 needs 64 × 1.57 = 100.7 GB and holds about 48; f32 about 24.
 *
 * Use (e.g. the server at start-up, with its LM and backend):
 *     pp_admission_calib cal;
 *     static const int sizes[] = {1, 2, 4, 8};
 *     pp_admission_calibrate(lm, sizes, 4, 3, PP_KV_INT8, cfg->context, &cal, err);
 *     pp_admission_limits lim;
 *     pp_admission_limits_default(&lim);
 *     lim.per_session_ms = host work per conversation outside the batch (session/plan.c: the
 *                          server's downlink encoding; the codec runs batched, inside each point)
 *     lim.mem_free = pp_admission_free_memory(be);
 *     lim.per_session_bytes = pp_lm_ctx_bytes(cfg, PP_KV_INT8) + codec state bytes;
 *     pp_admission_report rep;
 *     int max_sessions = pp_admission_capacity(&cal, &lim, &rep);   (rep.why says which limit)
 */
#ifndef PP_MODEL_ADMISSION_H
#define PP_MODEL_ADMISSION_H

#include <stddef.h>

#include "model/lmgen.h"

#define PP_ADMISSION_POINTS 8

/* Measured LM tick times: tick_ms[i] for batch[i] conversations, batch ascending. */
typedef struct pp_admission_calib {
    int n;
    int batch[PP_ADMISSION_POINTS];
    double tick_ms[PP_ADMISSION_POINTS];
} pp_admission_calib;

typedef struct pp_admission_limits {
    double frame_ms;          /* 80: one Mimi frame */
    double headroom;          /* fraction of the frame the work may take (0.8: 20 % for jitter) */
    double per_session_ms;    /* per conversation and frame outside the batch (0 when the codec is batched) */
    size_t mem_free;          /* bytes available for new conversations (0: memory not limiting) */
    size_t per_session_bytes; /* one conversation's state (pp_lm_ctx_bytes + codec state) */
    int hard_max;             /* a configured ceiling (0: none) */
} pp_admission_limits;

typedef struct pp_admission_report {
    int by_time, by_memory;   /* each limit alone (by_memory -1: not limiting) */
    double tick_ms;           /* predicted frame work at the chosen n */
    char why[128];            /* which limit binds, in words */
} pp_admission_report;

/* frame 80 ms, headroom 0.8, nothing else limiting. */
void pp_admission_limits_default(pp_admission_limits *l);

/* The milliseconds of each of `ticks` ticks (tick_ms[ticks]) of n conversations advancing
 * together with KV format kv, after their compute-free first call and one warm-up tick, each
 * moved `context` frames on first (pp_lmgen_skip): at the model's context every query attends
 * over the whole ring, the worst case a conversation reaches; 0 times fresh ones. They sample
 * at the default temperatures and top-k, as a server's conversations do: a greedy draw is one
 * pass over the logits, a sampled one a radix select and a race (2.5 times the tick of the
 * demo model on the CPU). */
int pp_admission_time_ticks(const pp_lm *lm, int n, int ticks, pp_kv_format kv, int context, double *tick_ms,
                            char *err);
/* Times `ticks` ticks (after one warm-up tick) of sizes[i] conversations as above, for each of
 * the n_sizes (<= PP_ADMISSION_POINTS, ascending) sizes; tick_ms[i] is their median. */
int pp_admission_calibrate(const pp_lm *lm, const int *sizes, int n_sizes, int ticks, pp_kv_format kv, int context,
                           pp_admission_calib *out, char *err);

/* The median of v[0..n) (0 when n < 1), v sorted in place. A calibration takes it rather than
 * the mean: one slow tick among a few, the one in which a device records the frame's graph
 * (a key's second run, backend.h) or one the scheduler preempted, would otherwise set the
 * steady tick and with it the admission limit for the server's whole life. */
double pp_admission_median(double *v, int n);

/* Predicted frame work of n conversations: tick(n) + n · per_session_ms (ms). */
double pp_admission_predict(const pp_admission_calib *c, const pp_admission_limits *l, int n);

/* The most conversations this machine holds in real time (0 when not even one; rep may be NULL). */
int pp_admission_capacity(const pp_admission_calib *c, const pp_admission_limits *l, pp_admission_report *rep);

/* Free memory where conversation state lives: the device's (mem_info) or what the host lets the
 * process take (base/hostmem.h). */
size_t pp_admission_free_memory(pp_backend *be);

#endif
