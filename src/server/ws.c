/* ws: the /api/chat WebSocket protocol (spec/protocol.md §2), lws service thread only.
 *
 * Upgrade: only at /api/chat, no subprotocol needed. On ESTABLISHED the query is read into
 * the session parameters, and the conversation is handed to the engine, or refused with an
 * 0x05 message and a close when the server is full, still loading, or the parameters are
 * unusable. Input: 0x01 payloads go to the conn's uplink as they arrive, even before the
 * handshake (the prompts may still be running: the audio is kept). Control (0x03) and ping
 * (0x06) are accepted and ignored; any other kind, text frames and oversized messages are
 * malformed: logged, answered with 0x05 and, past a limit, the socket is closed. Output: one
 * queued message per WRITEABLE callback (conn_write_next). */
#include "server/server.h"

#include "base/log.h"
#include "server/conn.h"
#include "server/lifecycle.h"
#include "server/peer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

/* An Ogg page is at most 64 KiB; nothing a client sends needs more in one message. */
#define MAX_MESSAGE (256 * 1024)
/* Malformed messages answered one by one; one more closes the socket. */
#define MAX_BAD_MESSAGES 32

struct ws_pss {
    ws_pss *next;          /* in server.live */
    struct lws *wsi;
    conn *c;
    int admitted;          /* the engine owns c's model side; it frees c once gone */
    int in_message;        /* a message's first fragment has been seen */
    int kind;              /* of the message being received */
    size_t message_len;
    int bad;               /* malformed inputs so far */
    int closing;           /* a close is queued; input is ignored */
};

size_t ws_pss_size(void) { return sizeof(ws_pss); }

static server *server_of(struct lws *wsi) { return lws_context_user(lws_get_context(wsi)); }

/* Reports one malformed input: log, metrics, an 0x05 answer; closes past the limit. */
static void reject_input(server *s, ws_pss *pss, int close_code, const char *what) {
    metrics_bad_input(s->metrics);
    pss->bad++;
    if (close_code || pss->bad > MAX_BAD_MESSAGES) {
        PP_WARN("ws", "session %llu: %s; closing", (unsigned long long)conn_id(pss->c), what);
        conn_fail(pss->c, close_code ? close_code : CLOSE_POLICY, "%s", what);
        pss->closing = 1;
    } else {
        PP_WARN("ws", "session %llu: %s", (unsigned long long)conn_id(pss->c), what);
        conn_fail(pss->c, 0, "%s", what);
    }
    lws_callback_on_writable(pss->wsi);
}

/* Reads the query's key=value fragments (lws has already undone %XX and '+') into p. */
static int read_query(server *s, struct lws *wsi, pp_session_params *p, char *err) {
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
        int rc = pp_params_set(p, s->scratch, eq ? eq + 1 : "", err);
        if (rc) return rc;
    }
}

static void defaults_from_options(const server_options *o, pp_session_params *p) {
    pp_params_defaults(p);
    snprintf(p->voice, sizeof p->voice, "%s", o->voice);
    snprintf(p->text_prompt, sizeof p->text_prompt, "%s", o->text_prompt);
    if (o->seed >= 0) {
        p->text_seed = p->audio_seed = (uint64_t)o->seed;
    } else {
        uint64_t r = (uint64_t)conn_now_ns() * 0x9e3779b97f4a7c15ull;
        p->text_seed = r;
        p->audio_seed = r ^ 0xd1b54a32d192ed03ull;
    }
}

/* Sets up a new chat socket; returns nonzero to drop it. */
static int on_established(server *s, struct lws *wsi, ws_pss *pss) {
    char err[PP_ERR_LEN], peer[160];
    memset(pss, 0, sizeof *pss);
    pss->wsi = wsi;
    if (conn_create(++s->next_id, &pss->c, err)) {
        PP_ERROR("ws", "%s", err);
        return -1;
    }
    pss->next = s->live;
    s->live = pss;
    /* lws disables Nagle on accepted sockets already; this states the requirement here too:
     * every 80 ms page must leave at once (spec/protocol.md §2.5 item 6). */
    int one = 1;
    setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    peer_address(wsi, s->opt->behind_proxy, peer, sizeof peer);
    PP_INFO("ws", "session %llu: connected from %s", (unsigned long long)conn_id(pss->c), peer);

    pp_session_params params;
    defaults_from_options(s->opt, &params);
    pp_model *model;
    engine *e = server_engine(s, &model);
    int rc = read_query(s, wsi, &params, err);
    if (rc) {
        reject_input(s, pss, CLOSE_POLICY, err);
    } else if (lifecycle_draining()) {
        conn_fail(pss->c, CLOSE_GOING_AWAY, "server shutting down");
        pss->closing = 1;
    } else if (!e) {
        conn_fail(pss->c, CLOSE_TRY_LATER, "the model is still loading; try again in a moment");
        pss->closing = 1;
    } else if ((rc = engine_admit(e, pss->c, &params, err))) {
        PP_WARN("ws", "session %llu: refused: %s", (unsigned long long)conn_id(pss->c), err);
        if (rc == PP_EFULL) metrics_session_rejected(s->metrics);
        conn_fail(pss->c, CLOSE_TRY_LATER, "%s", err);
        pss->closing = 1;
    } else {
        pss->admitted = 1;
    }
    if (pss->closing) lws_callback_on_writable(wsi);
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
    if (pss->admitted) {
        conn_mark_gone(pss->c);
        pp_model *model;
        engine *e = server_engine(s, &model);
        if (e) engine_wake(e);
    } else {
        conn_destroy(pss->c);
    }
    pss->c = NULL;
}

static void on_audio(server *s, ws_pss *pss, const uint8_t *data, size_t len) {
    char err[PP_ERR_LEN];
    int page_errors = 0;
    int frames = conn_push_audio(pss->c, data, len, &page_errors, err);
    if (frames < 0) {
        reject_input(s, pss, CLOSE_BAD_DATA, err);
        return;
    }
    if (page_errors) reject_input(s, pss, 0, "malformed Ogg data skipped (bad page, CRC or stream order)");
    if (frames > 0) {
        pp_model *model;
        engine *e = server_engine(s, &model);
        if (e) engine_wake(e);
    }
}

static void on_receive(server *s, struct lws *wsi, ws_pss *pss, const uint8_t *in, size_t len) {
    if (!pss->c || pss->closing) return;
    metrics_bytes(s->metrics, len, 0);
    int first = !pss->in_message;
    if (first) {
        pss->in_message = 1;
        pss->message_len = 0;
        pss->kind = len ? in[0] : -1;
        if (!lws_frame_is_binary(wsi)) pss->kind = -2;
        if (len) in++, len--;
    }
    pss->message_len += len;
    int final = lws_is_final_fragment(wsi);
    if (final) pss->in_message = 0;

    if (pss->message_len > MAX_MESSAGE) {
        reject_input(s, pss, CLOSE_TOO_BIG, "message too large (the limit is 256 KiB)");
        return;
    }
    char what[96];
    switch (pss->kind) {
    case MSG_AUDIO:
        if (len) on_audio(s, pss, in, len);
        break;
    case MSG_CONTROL:
    case MSG_PING:
        break;
    case -1:
        if (final) reject_input(s, pss, 0, "empty message (no kind byte)");
        break;
    case -2:
        if (first) reject_input(s, pss, 0, "text frame ignored: the protocol uses binary messages only");
        break;
    default:
        snprintf(what, sizeof what, "unknown message kind 0x%02x ignored", pss->kind);
        if (first) reject_input(s, pss, 0, what);
        break;
    }
}

/* Behind a proxy, a conversation that cannot start now (loading, full, draining) is refused
 * before the upgrade with HTTP 503, so the proxy tries another instance (nginx:
 * proxy_next_upstream http_503); a direct client gets the 0x05 message of on_established. */
static int refuse_upgrade_if_busy(server *s, struct lws *wsi) {
    pp_model *model;
    engine *e = server_engine(s, &model);
    if (e && !lifecycle_draining() && engine_active(e) < s->opt->max_sessions) return 0;
    PP_INFO("ws", "upgrade refused with 503: %s", !e ? "loading" : lifecycle_draining() ? "draining" : "full");
    if (e && !lifecycle_draining()) metrics_session_rejected(s->metrics);
    lws_return_http_status(wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, NULL);
    return 1;
}

int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    server *s = server_of(wsi);
    ws_pss *pss = user;
    char uri[64];
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 || strcmp(uri, "/api/chat") != 0) {
            PP_WARN("ws", "WebSocket upgrade refused outside /api/chat");
            metrics_bad_input(s->metrics);
            return 1;
        }
        return s->opt->behind_proxy ? refuse_upgrade_if_busy(s, wsi) : 0;
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(s, wsi, pss);
    case LWS_CALLBACK_CLOSED:
        on_closed(s, pss);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        on_receive(s, wsi, pss, in, len);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return pss->c ? conn_write_next(pss->c, wsi) : 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        /* The engine queued output (or a close) for some sockets: ask lws to call us back. */
        for (ws_pss *p = s ? s->live : NULL; p; p = p->next)
            if (conn_wants_write(p->c)) lws_callback_on_writable(p->wsi);
        return 0;
    default:
        return 0;
    }
}

int ws_close_all(server *s, int close_code, const char *why) {
    int n = 0;
    for (ws_pss *p = s->live; p; p = p->next, n++) {
        if (p->closing) continue;
        conn_fail(p->c, close_code, "%s", why);
        p->closing = 1;
        lws_callback_on_writable(p->wsi);
    }
    return n;
}
