/* engine: the one thread that runs every conversation's model work.
 *
 * The engine owns the pp_sessions. Each pass first takes every running conversation's waiting
 * uplink frame (through the echo canceller when it has one) and encodes it, then runs ONE tick
 * over all of them: a single batched LM step (pp_session_batch_step), then each one's decode
 * and downlink page (and text piece). The per-conversation host work of a tick (echo
 * cancellation, the downlink's Opus or μ-law encoding) runs on a pool of host threads, a
 * conversation a task; everything else stays on the engine thread. Ticks start as soon as a
 * frame is waiting, so an idle server adds no latency; under load the frames that arrive during
 * a tick wait for the next one, so the batch grows with the load and every weight is read once
 * per tick for all of them. A batched call that fails is run again a conversation at a time, so a
 * conversation whose frame fails alone ends with that error and the others carry on. After the
 * tick come joins, in arrival order: create the session,
 * run its prompt frames (session.h: a batched pass, or the whole prompt from the prompt cache),
 * send the handshake. Each unit of that work runs only when its estimated cost ends before the
 * next live frame is due, so someone joining never makes a live frame late; a join waits
 * instead (and after 3 s without slack gets a unit anyway). The heap trim after conversations
 * end (memory.h) runs in the same slack. All model calls come from one thread, which keeps the
 * backend free of locking. When a pass finds nothing to do the thread sleeps until engine_wake
 * (new connection, new audio, a closed socket), or while conversations run, for at most 20 ms:
 * a client that sends no audio gets silence frames and, past the idle timeout, a close
 * (pacing.h). Output is handed to the service thread through the conn's queue and the notify
 * callback (lws_cancel_service); the engine never calls lws itself. */
#ifndef PP_SERVER_ENGINE_H
#define PP_SERVER_ENGINE_H

#include "server/conn.h"
#include "server/metrics.h"
#include "session/params.h"
#include "session/session.h"

typedef struct engine engine;

/* --echo-cancel: which conversations run their uplink through the echo canceller (audio/aec.h). */
typedef enum {
    ECHO_CANCEL_OFF,  /* none, whatever the client asks */
    ECHO_CANCEL_AUTO, /* those whose query asks for it (echo_cancel=1) */
    ECHO_CANCEL_ON,   /* all but those whose query refuses it (echo_cancel=0) */
} echo_cancel_mode;
/* "off", "auto" or "on"; -1 for anything else. */
int echo_cancel_parse(const char *s);
/* What one conversation's echo cancellation of a frame costs the host (its far and near
 * halves), measured on this thread like wire_frame_cost: the mean of a few frames after two
 * seconds of them. PP_EUNSUPPORTED in a build without the canceller. */
int engine_echo_cost(double *ms, char *err);

typedef struct engine_config {
    pp_model *model;
    metrics *metrics;
    int max_sessions;          /* admission limit and batch capacity (session/plan.h) */
    int max_prompt_tokens;
    void (*notify)(void *arg); /* wakes the service thread: output is queued; any thread */
    void *notify_arg;
    int idle_timeout;          /* seconds without client audio before a conversation ends; 0: never */
    int trim_after_ms;         /* after a conversation ends and this long passes, the heap is trimmed; -1: never */
    echo_cancel_mode echo_cancel;
    int host_threads; /* threads for the ticks' per-conversation host work (pp_pool_threads_for) */
} engine_config;

/* Starts the engine thread. */
int engine_create(const engine_config *cfg, engine **out, char *err);
/* Stops the thread and frees every session and conn it still holds. Call after the service
 * loop has ended (every conn is then gone). */
void engine_destroy(engine *e);

/* Hands a new conversation to the engine (service thread). PP_EFULL when max_sessions are
 * open; the caller keeps c then. On success the engine owns c's model side and frees c once
 * it is gone. */
int engine_admit(engine *e, conn *c, const pp_session_params *params, char *err);
/* The socket of an admitted conversation closed (service thread): marks c gone and frees its
 * place for admission at once, so a client that reconnects right away is not refused while
 * the engine thread is busy; the engine frees the session itself on its next pass. */
void engine_release(engine *e, conn *c);
/* Conversations held now (including ones whose socket just closed). */
int engine_active(engine *e);
/* Ticks that failed since the last one that ran (0: the last ran, or none has run), and the last
 * failure's message in why (cap bytes). A device that lost its context (a CUDA sticky error)
 * fails every tick, and every conversation with it: /health then says so. */
int engine_failing(engine *e, char *why, size_t cap);
/* 1 when engine_admit would accept another conversation now. */
int engine_has_room(engine *e);
/* Conversations admitted at most (the configured max_sessions). */
int engine_capacity(const engine *e);
/* Something changed for one of the sessions; any thread. */
void engine_wake(engine *e);

#endif
