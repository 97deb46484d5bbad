/* ws: the WebSocket endpoints, lws service thread only: /api/chat (docs/protocol.md §2),
 * /v1/realtime (§4) and /v1/twilio (§5).
 *
 * Upgrade: only at those paths, no subprotocol needed. On ESTABLISHED the query is read into
 * the session parameters. A chat conversation is handed to the engine at once; a JSON one once
 * its client has said how it wants it (json_socket.h). Either is refused with an error message
 * and a close when the server is full, still loading, or the parameters are unusable. Chat
 * input goes through ws_input.c (0x01 payloads to the conn's uplink as they arrive, even
 * before the handshake: the prompts may still be running and the audio is kept), JSON input
 * through json_socket.c. Output:
 * one queued message per WRITEABLE callback (conn_write_next). A client that stops reading
 * (its conn stalls) is dropped at once; a close that waits for the queue to drain is bounded by
 * the lws timeout. */
#include "server/server.h"

#include "base/clock.h"
#include "base/log.h"
#include "server/conn.h"
#include "server/json_socket.h"
#include "server/peer.h"
#include "server/ws_input.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The kernel's send buffer of a chat socket (Linux doubles it): a few seconds of output. More
 * would only hide a client that stopped reading behind latency, and cost memory, before the
 * conn's queue overflows and drops it. */
#define SEND_BUFFER (8 * 1024)

struct ws_pss {
    ws_pss *next;          /* in server.live */
    struct lws *wsi;
    conn *c;
    conn_protocol protocol;
    int admitted;          /* the engine owns c's model side; it frees c once gone */
    ws_input in;           /* message dispatch; in.closing: a close is queued */
    json_socket *js;       /* the JSON protocols' input; NULL for chat */
    int close_timer;       /* the pending close has its drain timeout */
};

size_t ws_pss_size(void) { return sizeof(ws_pss); }

static server *server_of(struct lws *wsi) { return lws_context_user(lws_get_context(wsi)); }

/* Asks for WRITEABLE when output or a close is queued. A client that stopped reading would
 * hold its socket forever: a stalled one is dropped at once, and a pending close gets
 * --io-timeout seconds to drain. */
static void want_write(server *s, ws_pss *p) {
    if (conn_stalled(p->c)) {
        lws_set_timeout(p->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return;
    }
    if (!p->close_timer && conn_closing(p->c)) {
        p->close_timer = 1;
        lws_set_timeout(p->wsi, PENDING_TIMEOUT_CLOSE_SEND, s->opt->io_timeout);
    }
    if (conn_wants_write(p->c)) lws_callback_on_writable(p->wsi);
}

/* Hands the conversation to the engine, or refuses it (the client is told why). */
static void admit(server *s, ws_pss *pss, const pp_session_params *params) {
    char err[PP_ERR_LEN];
    pp_model *model;
    engine *e = server_engine(s, &model);
    int rc;
    if (server_draining(s)) {
        conn_fail(pss->c, CLOSE_GOING_AWAY, "server shutting down");
        pss->in.closing = 1;
    } else if (!e) {
        conn_fail(pss->c, CLOSE_TRY_LATER, "the model is still loading; try again in a moment");
        pss->in.closing = 1;
    } else if ((rc = engine_admit(e, pss->c, params, err))) {
        PP_WARN("ws", "session %llu: refused: %s", (unsigned long long)conn_id(pss->c), err);
        if (rc == PP_EFULL) metrics_session_rejected(s->metrics);
        conn_fail(pss->c, CLOSE_TRY_LATER, "%s", err);
        pss->in.closing = 1;
    } else {
        pss->admitted = 1;
    }
}

/* Acts on the input's WS_INPUT_* / JSON_SOCKET_* bits. */
static void after_input(server *s, ws_pss *pss, int todo) {
    if (todo & JSON_SOCKET_ADMIT) {
        conn_set_output(pss->c, pss->js->out_format, pss->js->stream);
        admit(s, pss, &pss->js->params);
        if (pss->admitted) lws_set_timeout(pss->wsi, NO_PENDING_TIMEOUT, 0); /* the engine's idle rule from now on */
        todo |= WS_INPUT_WRITE;
    }
    pp_model *model;
    engine *e = todo & WS_INPUT_WAKE ? server_engine(s, &model) : NULL;
    if (e) engine_wake(e);
    if (todo & WS_INPUT_WRITE) want_write(s, pss);
}

/* Reads the query's key=value fragments (lws has already undone %XX and '+') into p. */
static int read_query(server *s, struct lws *wsi, conn_protocol protocol, pp_session_params *p, char *err) {
    for (int i = 0;; i++) {
        int n = lws_hdr_copy_fragment(wsi, s->scratch, sizeof s->scratch, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (n < 0) {
            /* -1 both past the last fragment and for one longer than the buffer. */
            if (lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_URI_ARGS, i) > 0)
                return pp_fail(err, PP_EFULL, "query parameter %d is too long", i);
            return PP_OK;
        }
        char *eq = strchr(s->scratch, '=');
        if (eq) *eq = '\0';
        if (!strcmp(s->scratch, "token")) continue; /* the API key (server_authorized), never a setting */
        /* OpenAI's realtime clients name their model in the URL (?model=gpt-realtime): expected
         * there and meaningless to this server, so ignored without the unknown key's warning */
        if (protocol == CONN_REALTIME && !strcmp(s->scratch, "model")) continue;
        int rc = pp_params_set(p, s->scratch, eq ? eq + 1 : "", err);
        if (rc) return rc;
    }
}

/* conversation: the connection's number. Callers who say the same words hear different answers
 * unless a client picks its seed. */
static void defaults_from_options(const server_options *o, uint64_t conversation, pp_session_params *p) {
    pp_params_defaults(p);
    snprintf(p->voice, sizeof p->voice, "%s", o->voice);
    snprintf(p->text_prompt, sizeof p->text_prompt, "%s", o->text_prompt);
    if (o->seed >= 0) {
        p->text_seed = p->audio_seed = pp_params_conversation_seed((uint64_t)o->seed, conversation);
    } else {
        uint64_t r = (uint64_t)pp_now_ns() * 0x9e3779b97f4a7c15ull;
        p->text_seed = r;
        p->audio_seed = r ^ 0xd1b54a32d192ed03ull;
    }
}

int ws_endpoint(const char *path) {
    return !strcmp(path, "/api/chat")      ? CONN_CHAT
           : !strcmp(path, "/v1/realtime") ? CONN_REALTIME
           : !strcmp(path, "/v1/twilio")   ? CONN_TWILIO
                                           : -1;
}

/* Sets up a new socket; returns nonzero to drop it. */
static int on_established(server *s, struct lws *wsi, ws_pss *pss) {
    char err[PP_ERR_LEN], peer[160], path[64];
    memset(pss, 0, sizeof *pss);
    pss->wsi = wsi;
    int protocol = lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0 ? -1 : ws_endpoint(path);
    if (protocol < 0) return -1; /* the filter let only the three paths through */
    pss->protocol = (conn_protocol)protocol;
    if (conn_create(++s->next_id, pss->protocol, &pss->c, err)) {
        PP_ERROR("ws", "%s", err);
        return -1;
    }
    ws_input_init(&pss->in, pss->c, s->metrics);
    pss->next = s->live;
    s->live = pss;
    /* lws disables Nagle on accepted sockets already; this states the requirement here too:
     * every 80 ms page must leave at once (docs/protocol.md §2.3). */
    int one = 1, sndbuf = SEND_BUFFER;
    setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    peer_address(wsi, s->opt->behind_proxy, peer, sizeof peer);
    PP_INFO("ws", "session %llu: %s connected from %s", (unsigned long long)conn_id(pss->c), path, peer);

    pp_session_params params;
    defaults_from_options(s->opt, conn_id(pss->c), &params);
    pp_model *model;
    if (read_query(s, wsi, pss->protocol, &params, err)) {
        ws_input_reject(&pss->in, CLOSE_POLICY, err);
    } else if (pss->protocol == CONN_CHAT) {
        admit(s, pss, &params);
    } else if (server_draining(s) || !server_engine(s, &model)) {
        admit(s, pss, &params); /* refused now rather than after the client's setup */
    } else if ((pss->js = malloc(sizeof *pss->js))) {
        json_socket_init(pss->js, &pss->in, pss->protocol, &params, pp_model_voices_dir(model), s->opt->voice);
        json_socket_set_model(pss->js, model, s->opt->max_prompt_tokens, s->opt->text_prompt);
        /* A client that never starts its conversation is held no longer than a silent one. */
        if (s->opt->idle_timeout > 0) lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, s->opt->idle_timeout);
    } else {
        conn_fail(pss->c, CLOSE_INTERNAL, "out of memory for the socket");
        pss->in.closing = 1;
    }
    want_write(s, pss);
    return 0;
}

static void on_closed(server *s, ws_pss *pss) {
    if (!pss->c) return;
    for (ws_pss **link = &s->live; *link; link = &(*link)->next)
        if (*link == pss) {
            *link = pss->next;
            break;
        }
    PP_INFO("ws", "session %llu: socket closed", (unsigned long long)conn_id(pss->c));
    if (pss->js) {
        json_socket_free(pss->js);
        free(pss->js);
        pss->js = NULL;
    }
    if (pss->admitted) {
        pp_model *model;
        engine *e = server_engine(s, &model);
        if (e) engine_release(e, pss->c);
        else conn_mark_gone(pss->c);
    } else {
        conn_destroy(pss->c);
    }
    pss->c = NULL;
}

/* Behind a proxy, a conversation that cannot start now (loading, full, draining) is refused
 * before the upgrade with HTTP 503, so the proxy tries another instance (nginx:
 * proxy_next_upstream http_503); a direct client gets the 0x05 message of on_established. */
static int refuse_upgrade_if_busy(server *s, struct lws *wsi) {
    pp_model *model;
    engine *e = server_engine(s, &model);
    if (e && !server_draining(s) && engine_has_room(e)) return 0;
    PP_INFO("ws", "upgrade refused with 503: %s", !e ? "loading" : server_draining(s) ? "draining" : "full");
    if (e && !server_draining(s)) metrics_session_rejected(s->metrics);
    lws_return_http_status(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, NULL);
    return 1;
}

int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    server *s = server_of(wsi);
    ws_pss *pss = user;
    char uri[64], origin[256];
    int from_query;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 || ws_endpoint(uri) < 0) {
            PP_WARN("ws", "WebSocket upgrade refused outside /api/chat, /v1/realtime and /v1/twilio");
            metrics_bad_input(s->metrics);
            return 1;
        }
        if (!server_origin_allowed(s, wsi, origin, sizeof origin)) {
            PP_WARN("ws", "WebSocket upgrade refused: a page of %.200s is not in --allowed-origins", origin);
            lws_return_http_status(wsi, HTTP_STATUS_FORBIDDEN, NULL);
            return 1;
        }
        if (!server_authorized(s, wsi, &from_query)) {
            PP_WARN("ws", "WebSocket upgrade refused: no valid API key");
            lws_return_http_status(wsi, HTTP_STATUS_UNAUTHORIZED, NULL);
            return 1;
        }
        return s->opt->behind_proxy ? refuse_upgrade_if_busy(s, wsi) : 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return http_confirm_upgrade(s, wsi, in);
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(s, wsi, pss);
    case LWS_CALLBACK_CLOSED:
        on_closed(s, pss);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        if (pss->c && pss->js)
            after_input(s, pss,
                        json_socket_receive(pss->js, in, len, lws_frame_is_binary(wsi), lws_is_final_fragment(wsi)));
        else if (pss->c)
            after_input(s, pss, ws_input_receive(&pss->in, in, len, lws_frame_is_binary(wsi), lws_is_final_fragment(wsi)));
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return pss->c ? conn_write_next(pss->c, wsi) : 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        /* The engine queued output (or a close) for some sockets: ask lws to call us back. */
        for (ws_pss *p = s ? s->live : NULL; p; p = p->next) want_write(s, p);
        return 0;
    default:
        return 0;
    }
}

int ws_close_all(server *s, int close_code, const char *why) {
    int n = 0;
    for (ws_pss *p = s->live; p; p = p->next, n++) {
        if (p->in.closing) continue;
        conn_fail(p->c, close_code, "%s", why);
        p->in.closing = 1;
        want_write(s, p);
    }
    return n;
}
