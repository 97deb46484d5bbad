/* pacing: what a conversation does while its client sends no audio.
 *
 * A client that pauses, or never sends anything, still has a live conversation: once no input
 * frame has come for PACING_GRACE_NS after the last one was processed, the engine feeds the
 * model one frame of silence every 80 ms (it hears what a muted microphone would give, and
 * keeps talking) until audio comes again. The grace is long enough that network jitter never
 * turns into silence frames slipped between real ones. After idle_timeout_s seconds without
 * any audio from the client the conversation ends.
 *
 * Pure bookkeeping on CLOCK_MONOTONIC nanoseconds (the engine passes the clock in), so the
 * rules are unit-tested without threads or sockets. */
#ifndef PP_SERVER_PACING_H
#define PP_SERVER_PACING_H

#include <stdint.h>

#include "base/frame.h"

#define PACING_GRACE_NS 1000000000LL /* input silent this long: the model starts hearing silence */

typedef struct pacing {
    int64_t start_ns;      /* the handshake */
    int64_t last_frame_ns; /* when the last frame (real or silent) was processed */
    int silent;            /* the last frame was a silent one */
    uint64_t silent_frames;
    uint64_t silent_run;   /* silent frames since the client's latest frame */
    uint64_t client_frames;
} pacing;

typedef enum {
    PACING_WAIT,    /* nothing to do yet */
    PACING_SILENCE, /* feed the model one frame of silence now */
    PACING_IDLE,    /* the client has been silent past the idle timeout: end the conversation */
} pacing_action;

/* The conversation starts (the handshake went out) at now. */
void pacing_start(pacing *p, int64_t now);
/* A frame of the client's audio was processed at now. Returns the silent frames the model heard
 * since the client's previous frame: its audio came that late (0 before its first frame: a
 * client that has not begun to talk is not late). */
uint64_t pacing_frame(pacing *p, int64_t now);
/* No input frame is waiting at now; the client's audio last arrived at last_input (0x01 data,
 * whole frame or not). idle_timeout_s 0 never ends the conversation. On PACING_SILENCE the
 * silent frame is counted as processed. */
pacing_action pacing_check(pacing *p, int64_t now, int64_t last_input, int idle_timeout_s);

#endif
