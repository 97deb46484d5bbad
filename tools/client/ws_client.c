/* ws_client: see ws_client.h. Single-threaded: everything runs in wc_run's service loop. */
#include "ws_client.h"

#include "text/utf8.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct lws_context *g_ctx;
static int g_tls, g_port;

int64_t wc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int append(uint8_t **buf, size_t *len, size_t *cap, const void *data, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 4096);
        while (c < *len + n + 1) c *= 2;
        uint8_t *p = realloc(*buf, c);
        if (!p) return -1;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* True when msg is exactly one whole Ogg page (what the protocol promises per 0x01 message). */
static int is_one_page(const uint8_t *p, size_t len) {
    if (len < 27 || memcmp(p, "OggS", 4) != 0) return 0;
    size_t nseg = p[26], body = 0;
    if (len < 27 + nseg) return 0;
    for (size_t i = 0; i < nseg; i++) body += p[27 + i];
    return len == 27 + nseg + body;
}

static void copy_text(char *dst, size_t cap, const uint8_t *src, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- WebSocket conversations ---------------------------------------------------------------- */

static void arm(wc_conn *c, int64_t at_ns);

static void on_timer(lws_sorted_usec_list_t *sul) {
    wc_conn *c = lws_container_of(sul, wc_conn, sul);
    if (!c->wsi) return;
    int64_t now = wc_now_ns();
    if (c->t_deadline && now >= c->t_deadline) c->closing = 1;
    lws_callback_on_writable(c->wsi);
    if (!c->closing) arm(c, c->next_audio < c->n_audio ? c->t_next : c->t_deadline);
}

static void arm(wc_conn *c, int64_t at_ns) {
    int64_t us = (at_ns - wc_now_ns()) / 1000;
    lws_sul_schedule(g_ctx, 0, &c->sul, on_timer, us > 0 ? us : 1);
}

static void start_sending(wc_conn *c) {
    if (c->started) return;
    c->started = 1;
    c->t_next = wc_now_ns();
    if (!c->n_audio && !c->n_extra) c->t_deadline = c->t_next + (int64_t)(c->linger_ms * 1e6);
    lws_callback_on_writable(c->wsi);
    arm(c, c->t_next);
}

static int send_msg(struct lws *wsi, const wc_msg *m) {
    unsigned char *buf = malloc(LWS_PRE + m->len + 1);
    if (!buf) return -1;
    memcpy(buf + LWS_PRE, m->data, m->len);
    int n = lws_write(wsi, buf + LWS_PRE, m->len, m->text ? LWS_WRITE_TEXT : LWS_WRITE_BINARY);
    free(buf);
    return n < (int)m->len ? -1 : 0;
}

static int on_writeable(wc_conn *c, struct lws *wsi) {
    if (c->closing) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
        return -1;
    }
    if (!c->started) return 0;
    int64_t now = wc_now_ns();
    if (c->next_extra < c->n_extra) {
        if (send_msg(wsi, &c->extra[c->next_extra++])) return -1;
    } else if (c->next_audio < c->n_audio && now >= c->t_next) {
        const wc_msg *m = c->make_audio ? c->make_audio(c, c->next_audio) : &c->audio[c->next_audio];
        if (!c->audio_sent_at && !(c->audio_sent_at = malloc((size_t)c->n_audio * sizeof *c->audio_sent_at)))
            return -1;
        c->audio_sent_at[c->next_audio++] = now;
        if (!m || send_msg(wsi, m)) return -1;
        c->t_next += (int64_t)(c->interval_ms * 1e6);
    } else {
        return 0;
    }
    if (c->next_extra == c->n_extra && c->next_audio == c->n_audio && !c->t_last_send) {
        c->t_last_send = now;
        c->t_deadline = now + (int64_t)(c->linger_ms * 1e6);
        arm(c, c->t_deadline);
    }
    lws_callback_on_writable(wsi);
    return 0;
}

static void on_message(wc_conn *c, const uint8_t *m, size_t len) {
    if (!len) {
        c->other_kinds++;
        return;
    }
    const uint8_t *p = m + 1;
    size_t n = len - 1;
    switch (m[0]) {
    case 0x00:
        c->handshakes++;
        c->t_handshake = wc_now_ns();
        c->handshake_len = (int)n;
        start_sending(c);
        break;
    case 0x01:
        if (!c->handshakes) c->audio_before_handshake++;
        if (!is_one_page(p, n)) c->bad_pages++;
        append(&c->out, &c->out_len, &c->out_cap, p, n);
        c->out_times = realloc(c->out_times, (size_t)(c->n_out + 1) * sizeof *c->out_times);
        if (c->out_times) c->out_times[c->n_out] = wc_now_ns();
        c->n_out++;
        if (!c->t_last_send) c->out_before_last_send++;
        if (c->expect_pages && c->n_out >= c->expect_pages) {
            c->closing = 1;
            lws_callback_on_writable(c->wsi);
        }
        break;
    case 0x02:
        c->texts++;
        if (!pp_utf8_valid((const char *)p, n))
            c->bad_texts++;
        else if (strlen(c->transcript) + n < sizeof c->transcript)
            strncat(c->transcript, (const char *)p, n);
        break;
    case 0x05:
        if (!c->errors++) copy_text(c->first_error, sizeof c->first_error, p, n);
        copy_text(c->last_error, sizeof c->last_error, p, n);
        break;
    default: c->other_kinds++;
    }
}

/* A request header (value, or NULL for none), while lws writes the request. */
static int add_header(struct lws *wsi, enum lws_token_indexes token, const char *value, void *in, size_t len) {
    if (!value) return 0;
    unsigned char **p = in, *end = *p + len;
    return lws_add_http_header_by_token(wsi, token, (const unsigned char *)value, (int)strlen(value), p, end) ? -1 : 0;
}

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    wc_conn *c = user;
    if (!c) return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
        return add_header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, c->authorization, in, len);
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        c->established = 1;
        c->t_established = wc_now_ns();
        if (c->close_at_once) {
            c->closing = 1;
            lws_callback_on_writable(wsi);
        } else if (!c->wait_handshake) {
            start_sending(c);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (append(&c->rx, &c->rx_len, &c->rx_cap, in, len)) return -1;
        if (lws_is_final_fragment(wsi)) {
            on_message(c, c->rx, c->rx_len);
            c->rx_len = 0;
        }
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE: return on_writeable(c, wsi);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) c->close_code = ((const uint8_t *)in)[0] << 8 | ((const uint8_t *)in)[1];
        return 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        c->failed = 1;
        copy_text(c->fail_reason, sizeof c->fail_reason, in ? in : (void *)"", in ? strlen(in) : 0);
        c->wsi = NULL;
        lws_sul_cancel(&c->sul);
        return 0;
    case LWS_CALLBACK_CLIENT_CLOSED:
        c->closed = 1;
        c->wsi = NULL;
        lws_sul_cancel(&c->sul);
        return 0;
    default: return 0;
    }
}

/* ---- HTTP requests -------------------------------------------------------------------------- */

static int http_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    wc_http *h = user;
    if (!h) return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
        return add_header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, h->authorization, in, len) ||
                       add_header(wsi, WSI_TOKEN_HTTP_COOKIE, h->cookie, in, len)
                   ? -1
                   : 0;
    case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP:
        h->status = (int)lws_http_client_http_response(wsi);
        if (lws_hdr_copy(wsi, h->type, sizeof h->type, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0) h->type[0] = '\0';
        if (lws_hdr_copy(wsi, h->set_cookie, sizeof h->set_cookie, WSI_TOKEN_HTTP_SET_COOKIE) < 0) h->set_cookie[0] = '\0';
        return 0;
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP: {
        char buf[LWS_PRE + 4096], *p = buf + LWS_PRE;
        int n = sizeof buf - LWS_PRE;
        return lws_http_client_read(wsi, &p, &n) < 0 ? -1 : 0;
    }
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP_READ: return append((uint8_t **)&h->body, &h->len, &h->cap, in, len) ? -1 : 0;
    case LWS_CALLBACK_COMPLETED_CLIENT_HTTP: h->done = 1; return -1; /* no keep-alive: h must not outlive its request */
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
        h->done = 1;
        h->wsi = NULL;
        return 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        h->failed = 1;
        h->wsi = NULL;
        return 0;
    default: return 0;
    }
}

/* ---- context and loop ------------------------------------------------------------------------ */

static const struct lws_protocols g_protocols[] = {
    {"e2e-ws", ws_cb, 0, 65536, 0, NULL, 0},
    {"e2e-http", http_cb, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

int wc_init(int tls, int port) {
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = g_protocols;
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.pt_serv_buf_size = 65536;      /* room for the long request lines the tests send */
    info.max_http_header_data2 = 65536; /* the client keeps its request path there too */
    info.fd_limit_per_thread = 64;
    /* WC_LOG=<lws log bitmask> shows the client library's own log when a test needs debugging. */
    const char *log_mask = getenv("WC_LOG");
    lws_set_log_level(log_mask ? atoi(log_mask) : LLL_ERR, NULL);
    g_ctx = lws_create_context(&info);
    g_tls = tls;
    g_port = port;
    return g_ctx ? 0 : -1;
}

void wc_shutdown(void) {
    lws_context_destroy(g_ctx);
    g_ctx = NULL;
}

static void connect_common(struct lws_client_connect_info *ci, const char *path) {
    memset(ci, 0, sizeof *ci);
    ci->context = g_ctx;
    ci->address = "127.0.0.1";
    ci->port = g_port;
    ci->path = path;
    ci->host = "localhost";
    ci->origin = "localhost";
    ci->ietf_version_or_minus_one = -1;
    if (g_tls) ci->ssl_connection = LCCSCF_USE_SSL | LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK;
}

static int all_done(wc_conn **conns, int n_conns, wc_http **reqs, int n_reqs) {
    for (int i = 0; i < n_conns; i++)
        if (!conns[i]->closed && !conns[i]->failed) return 0;
    for (int i = 0; i < n_reqs; i++)
        if ((!reqs[i]->done && !reqs[i]->failed) || reqs[i]->wsi) return 0;
    return 1;
}

static void on_tick(lws_sorted_usec_list_t *sul) { lws_sul_schedule(g_ctx, 0, sul, on_tick, 50000); }

/* Opens the connections and sends the requests whose connect_after_ms has come. */
static void connect_due(wc_conn **conns, int n_conns, wc_http **reqs, int n_reqs, int64_t t0) {
    struct lws_client_connect_info ci;
    int64_t elapsed = wc_now_ns() - t0;
    for (int i = 0; i < n_conns; i++) {
        wc_conn *c = conns[i];
        if (c->connecting || elapsed < (int64_t)(c->connect_after_ms * 1e6)) continue;
        c->connecting = 1;
        connect_common(&ci, c->path);
        ci.local_protocol_name = "e2e-ws";
        ci.userdata = c;
        ci.pwsi = &c->wsi;
        if (!lws_client_connect_via_info(&ci) && !c->failed) {
            c->failed = 1;
            strcpy(c->fail_reason, "connect failed at once");
        }
    }
    for (int i = 0; i < n_reqs; i++) {
        wc_http *h = reqs[i];
        if (h->connecting || elapsed < (int64_t)(h->connect_after_ms * 1e6)) continue;
        h->connecting = 1;
        connect_common(&ci, h->path);
        ci.method = "GET";
        ci.local_protocol_name = "e2e-http";
        ci.userdata = h;
        ci.pwsi = &h->wsi;
        if (!lws_client_connect_via_info(&ci)) h->failed = 1;
    }
}

void wc_run(wc_conn **conns, int n_conns, wc_http **reqs, int n_reqs, double timeout_ms) {
    int64_t t0 = wc_now_ns();
    connect_due(conns, n_conns, reqs, n_reqs, t0);
    /* A periodic tick keeps lws_service returning so the deadline is checked. */
    lws_sorted_usec_list_t tick;
    memset(&tick, 0, sizeof tick);
    lws_sul_schedule(g_ctx, 0, &tick, on_tick, 50000);
    int64_t deadline = wc_now_ns() + (int64_t)(timeout_ms * 1e6);
    while (!all_done(conns, n_conns, reqs, n_reqs) && wc_now_ns() < deadline) {
        lws_service(g_ctx, 0);
        connect_due(conns, n_conns, reqs, n_reqs, t0);
    }
    lws_sul_cancel(&tick);
    for (int i = 0; i < n_conns; i++) {
        wc_conn *c = conns[i];
        if (c->closed || c->failed) continue;
        c->failed = 1;
        strcpy(c->fail_reason, "timed out");
        if (c->wsi) {
            c->closing = 1;
            lws_callback_on_writable(c->wsi);
        }
    }
    for (int i = 0; i < n_reqs; i++)
        if (!reqs[i]->done) reqs[i]->failed = 1;
    /* Let the timed-out sockets close before their structs go away. */
    int64_t grace = wc_now_ns() + 500000000;
    while (wc_now_ns() < grace) {
        int open = 0;
        for (int i = 0; i < n_conns; i++) open |= conns[i]->wsi != NULL;
        for (int i = 0; i < n_reqs; i++) open |= reqs[i]->wsi != NULL;
        if (!open) break;
        lws_sul_schedule(g_ctx, 0, &tick, on_tick, 50000);
        lws_service(g_ctx, 0);
        lws_sul_cancel(&tick);
    }
}

void wc_conn_free(wc_conn *c) {
    free(c->out);
    free(c->out_times);
    free(c->audio_sent_at);
    free(c->rx);
    c->out = NULL;
    c->out_times = NULL;
    c->audio_sent_at = NULL;
    c->rx = NULL;
}

void wc_http_free(wc_http *h) {
    free(h->body);
    h->body = NULL;
}
