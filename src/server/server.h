/* server: the state the lws callbacks share, and the two lws protocols.
 *
 * One `server` lives in main for the whole run and is the lws context's user pointer. The
 * model, the engine and the readiness flag are published by the loader thread once the
 * weights are in (so /health can answer "not ready" while a large model loads); everything
 * else belongs to the lws service thread. */
#ifndef PP_SERVER_SERVER_H
#define PP_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <libwebsockets.h>

#include "base/err.h"
#include "server/apikeys.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/peer.h"

/* Request headers lws may hold: the web client's text_prompt (1000 characters) percent-encoded
 * as UTF-8 can reach 9 KB; 32 KB leaves room for the rest (docs/protocol.md §1.3). */
#define SERVER_MAX_HEADER 32768
/* Connections reading their request at once (each may hold SERVER_MAX_HEADER: 8 MB in all),
 * and the seconds one may sit on its slot without a request, a slow TLS handshake included. */
#define SERVER_HEADER_POOL 256
#define SERVER_HEADER_IDLE_S 5

typedef struct ws_pss ws_pss;

typedef struct server {
    const server_options *opt;
    char static_dir[4096];   /* "" when no web UI was found */
    metrics *metrics;
    struct lws_context *ctx;
    const char *cert_path, *key_path; /* the TLS pair (reloaded on SIGHUP); NULL without TLS */
    apikeys *keys;           /* --api-keys (reloaded on SIGHUP); NULL: no key needed */
    peer_table *peers;       /* --max-per-ip; NULL: no limit (service thread) */

    pthread_mutex_t lock;    /* guards the fields up to the next comment */
    engine *engine;          /* NULL until the model is loaded */
    pp_model *model;
    int failed;              /* the model could not be loaded (load_error says why) */
    char load_error[PP_ERR_LEN];
    int ctx_alive;           /* ctx may be woken with lws_cancel_service */

    atomic_int draining; /* a stop signal came: new conversations are refused (any thread) */

    /* lws service thread only */
    uint64_t next_id;
    ws_pss *live;            /* open /api/chat sockets */
    char scratch[SERVER_MAX_HEADER]; /* one decoded query fragment at a time */
} server;

/* server.c. The published engine and model, or NULLs while loading (any thread). */
engine *server_engine(server *s, pp_model **model);
/* Loader thread: publishes the loaded model and its engine, or (load_error not NULL) the
 * reason there are none. */
void server_publish(server *s, pp_model *model, engine *e, const char *load_error);
/* A drain has begun: refuse new conversations, /health says "draining" (any thread). */
int server_draining(const server *s);
void server_start_draining(server *s);
/* Whether a WebSocket upgrade's page may open a conversation (--allowed-origins): no Origin,
 * the server's own, or one listed. origin (cap bytes) gets the header's value for the log. */
int server_origin_allowed(server *s, struct lws *wsi, char *origin, size_t cap);
/* Whether the request on wsi may proceed: no --api-keys, or a valid key presented (apikeys.h).
 * *from_query is set when the key came as ?token= (the page then gets the cookie). */
int server_authorized(server *s, struct lws *wsi, int *from_query);

/* lws protocol callbacks (service thread). */
int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
/* The conversation endpoint (conn_protocol) a request path names, or -1: the WebSocket paths
 * /api/chat, /v1/realtime and /v1/twilio. */
int ws_endpoint(const char *path);
size_t http_pss_size(void);
/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE (either protocol may get it): only a WebSocket upgrade is
 * taken. 0 to let it proceed, 1 once the refusal (400) is sent. */
int http_confirm_upgrade(server *s, struct lws *wsi, const char *upgrade);
size_t ws_pss_size(void);

/* Sends every open conversation an 0x05 message `why` and a close with close_code (the
 * drain of lifecycle.c). Returns how many were open. Service thread. */
int ws_close_all(server *s, int close_code, const char *why);

#endif
