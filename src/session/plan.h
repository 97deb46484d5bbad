/* plan: how many conversations a loaded model serves at once, measured at start-up.
 *
 * A server ticks every conversation together once per 80 ms frame (session.h batches), so
 * the limit is the largest n whose tick with its batched codec work, plus n times the caller's
 * own work per conversation (host_ms), fits the frame with headroom (model/admission.h), and
 * whose state fits the free memory. pp_plan_capacity times
 * the LM tick at batch sizes 1, 2, 4, ... (stopping once a size no longer fits the frame or
 * the memory, at most PP_ADMISSION_POINTS sizes), times one conversation's Mimi encode and
 * decode of a frame, reads the free memory where the KV rings live (device or host) and
 * applies an optional configured ceiling. Calibration runs throwaway conversations in the
 * model's KV format, each moved to the model's full context first (the worst case: every query
 * attends over the whole ring): a second or two for PersonaPlex-7B on a GPU, milliseconds for
 * the demo. */
#ifndef PP_SESSION_PLAN_H
#define PP_SESSION_PLAN_H

#include <stddef.h>

#include "session/session.h"

#define PP_PLAN_MAX 256 /* conversations a server holds at most, whatever the machine */
/* A conversation's own one-row LM scratch and bookkeeping, in its bytes beside its KV rings, its
 * codec state and its row of the server's tick batch. */
#define PP_PLAN_SESSION_SCRATCH ((size_t)4 << 20)

typedef struct pp_plan {
    int sessions;             /* conversations to admit: >= 1 even when not one runs in real time */
    int by_time, by_memory;   /* each limit alone (by_memory -1: memory unknown) */
    double tick1_ms;          /* measured LM tick of one conversation at the full context */
    int context;              /* that context (frames): every calibration tick ran at it */
    double codec_ms;          /* measured Mimi encode + decode of one conversation's frame */
    double host_ms;           /* the caller's per-conversation work per frame outside the batch */
    double frame_ms;          /* predicted work per frame at `sessions` */
    size_t per_session_bytes; /* KV rings in the model's format + codec state + scratch + a tick batch row */
    size_t mem_free;
    char why[384]; /* the figure and the binding limit, in words */
} pp_plan;

/* hard_max 0: no configured ceiling (PP_PLAN_MAX still applies); reserved_host: host bytes
 * promised elsewhere (the prompt cache), taken off the free memory on the CPU backend; host_ms:
 * what each conversation's frame costs the caller outside the batched calls, in ms of the tick
 * (a server: its downlink encoding, over the threads that share it), added to every tick. */
int pp_plan_capacity(pp_model *m, int hard_max, size_t reserved_host, double host_ms, pp_plan *out, char *err);

#endif
