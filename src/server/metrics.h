/* metrics: the server's counters and per-stage frame-time histograms, rendered as
 * Prometheus text for GET /metrics.
 *
 * Written by the engine thread (frames, stages) and the service thread (sessions, bytes),
 * read by the service thread; one mutex guards them, held only for a few additions. */
#ifndef PP_SERVER_METRICS_H
#define PP_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    METRICS_ENCODE, /* Mimi encode of the user's frame */
    METRICS_LM,     /* LM step (temporal transformer + depformer) */
    METRICS_DECODE, /* Mimi decode of the model's frame */
    METRICS_FRAME,  /* the whole frame: ready input to queued output page */
    METRICS_STAGES
} metrics_stage;

typedef struct metrics metrics;

int metrics_create(metrics **out, char *err);
void metrics_destroy(metrics *m);

void metrics_session_started(metrics *m);
void metrics_session_ended(metrics *m);
void metrics_session_rejected(metrics *m);
/* One conversation frame: stage times in ms; late when the frame took longer than its 80 ms. */
void metrics_frame(metrics *m, const double ms[METRICS_STAGES], int late);
/* One engine tick: the batched LM step's time in ms, its per-conversation host work's (echo
 * cancellation, downlink encoding and queueing, on the host pool) and how many conversations
 * it advanced. */
void metrics_tick(metrics *m, double lm_ms, double host_ms, int batch);
/* A conversation's prompts done (admission to handshake, ms), from the prompt cache or not. */
void metrics_prompt(metrics *m, double ms, int cached);
/* A join waited this long (ms) from admission until its first work ran (behind earlier joins and
 * the live conversations' frames). */
void metrics_join_wait(metrics *m, double ms);
/* One unit of joins' work (a session start, a prompt run, a cache restore) took the engine ms
 * outside the ticks. */
void metrics_join_work(metrics *m, double ms);
void metrics_bytes(metrics *m, uint64_t in, uint64_t out);

/* One conversation's frame latencies (input complete to output queued), exported while it is
 * open as its 0.5/0.9/0.99 quantiles. open returns NULL when out of memory; every call takes
 * NULL and then does nothing. */
typedef struct metrics_conv metrics_conv;
metrics_conv *metrics_conv_open(metrics *m, uint64_t id);
void metrics_conv_frame(metrics *m, metrics_conv *c, double ms);
void metrics_conv_close(metrics *m, metrics_conv *c);
/* One uplink frame through the echo canceller: its energy before and after. Exported as their
 * ratio in dB over the last few seconds: the echo return loss enhancement while only echo
 * comes in, less while the client speaks. */
void metrics_conv_echo(metrics *m, metrics_conv *c, double energy_in, double energy_out);
void metrics_bad_input(metrics *m);
/* Client audio the model did not hear as it was sent: silent frames it heard in a conversation
 * between frames of the client's audio (late audio, or a client that paused its stream; for one
 * that streams without pause, such as the load test's, lateness), samples dropped because the
 * uplink buffer was full (the conversation fell behind), Opus packets lost or undecodable and
 * concealed. */
void metrics_uplink_loss(metrics *m, uint64_t silent_frames, uint64_t dropped_samples, uint64_t concealed_packets);
/* A request refused for want of a valid API key. */
void metrics_unauthorized(metrics *m);

int metrics_active(metrics *m);

/* The start-up capacity plan (session/plan.h) as gauges: how the admission limit was found. */
typedef struct metrics_capacity {
    double tick1_ms;        /* one conversation's LM tick at the full context */
    double codec_ms;        /* one conversation's Mimi encode + decode per frame */
    double host_ms;         /* one conversation's host work per frame, over the host threads */
    double echo_ms;         /* its echo cancellation per frame, in host_ms before the division (0: not counted) */
    double frame_ms;        /* predicted work per frame at the admitted maximum */
    int by_time, by_memory; /* the conversations each limit alone allows (-1: memory unknown) */
    int context;            /* the context the ticks were timed at (frames) */
} metrics_capacity;
/* Until it is set (the model loading) the capacity gauges are left out of the exposition. */
void metrics_set_capacity(metrics *m, const metrics_capacity *c);

/* Renders the Prometheus exposition into buf (cap bytes, NUL-terminated), with max_sessions
 * as a gauge. Returns the length written, truncated to cap - 1. */
size_t metrics_render(metrics *m, char *buf, size_t cap, int max_sessions);

#endif
