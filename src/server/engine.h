/* engine: the one thread that runs every conversation's model work.
 *
 * The engine owns the pp_sessions. Each pass over its list gives every session at most one
 * unit of work: create the session, run one prompt frame, or turn one whole uplink frame into
 * a downlink page (and a text piece). A session's prompt therefore never stalls the others'
 * conversations, and all model calls come from one thread, which keeps the backend free of
 * locking and leaves room to batch the sessions' frames later. When a pass finds nothing to
 * do the thread sleeps until engine_wake (new connection, new audio, a closed socket).
 * Output is handed to the service thread through the conn's queue and the notify callback
 * (lws_cancel_service); the engine never calls lws itself. */
#ifndef PP_SERVER_ENGINE_H
#define PP_SERVER_ENGINE_H

#include "server/conn.h"
#include "server/metrics.h"
#include "session/params.h"
#include "session/session.h"

typedef struct engine engine;

typedef struct engine_config {
    pp_model *model;
    metrics *metrics;
    int max_sessions;
    int max_prompt_tokens;
    void (*notify)(void *arg); /* wakes the service thread: output is queued; any thread */
    void *notify_arg;
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
/* Conversations held now (including ones whose socket just closed). */
int engine_active(engine *e);
/* Something changed for one of the sessions; any thread. */
void engine_wake(engine *e);

#endif
