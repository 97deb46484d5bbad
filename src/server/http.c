/* http: plain HTTP routes, lws service thread only.
 *
 *   GET /health      JSON: status, ready, model, backend, sessions {active, max}; 503 unless
 *                    a conversation would be accepted now (loading, full, draining) and the
 *                    last tick ran ("failing", with its error, after a failed one)
 *   GET /health/live the same JSON; 503 only when the model failed to load or is failing
 *   GET /metrics     Prometheus text (metrics.c)
 *   GET /api/voices  JSON: {"voices": [names], "default": name} from the voices directory
 *   GET /...         the web UI's static files, index.html at "/"
 *
 * Static paths are checked here, not only by lws's URI clean-up: no segment may start with a
 * dot (no "..", no hidden files), no backslash, and the resolved file must lie inside the
 * static directory (symlinks included). Types come from a fixed table; the browser needs
 * exact JavaScript and WebAssembly types (docs/protocol.md §1.1).
 *
 * What lws would otherwise let through is refused here too: a body framed by a
 * Transfer-Encoding or two Content-Lengths, an upgrade to anything but WebSocket (h2c), a
 * CONNECT, and a connection from an address that holds --max-per-ip already. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "server/server.h"

#include "backend/backend.h"
#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "io/voice.h"
#include "server/memory.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct http_pss {
    char *body;  /* LWS_PRE + len bytes, malloc'd; sent on the next HTTP_WRITEABLE */
    size_t len;
    int head;    /* a HEAD request: the headers of the GET, no body */
} http_pss;

size_t http_pss_size(void) { return sizeof(http_pss); }

static const struct {
    const char *ext, *type;
} g_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".wasm", "application/wasm"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".webmanifest", "application/manifest+json"},
};

static const char *mime_type(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof g_types / sizeof g_types[0]; i++)
            if (strcmp(dot, g_types[i].ext) == 0) return g_types[i].type;
    return "application/octet-stream";
}

/* Sends status + body (copied). The body goes out on HTTP_WRITEABLE. Returns the callback's
 * return value. */
static int respond(struct lws *wsi, http_pss *pss, unsigned status, const char *type, const char *body, size_t len) {
    unsigned char head[LWS_PRE + 512], *start = head + LWS_PRE, *p = start, *end = head + sizeof head - 1;
    free(pss->body);
    pss->body = malloc(LWS_PRE + len + 1);
    if (!pss->body) return -1;
    memcpy(pss->body + LWS_PRE, body, len);
    pss->len = len;
    if (lws_add_http_common_headers(wsi, status, type, len, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    lws_callback_on_writable(wsi);
    return 0;
}

/* /health: 200 only when a new conversation would be accepted, so a load balancer or a
 * readiness probe skips an instance that is loading, full or draining (503, same JSON).
 * /health/live: 200 unless the model failed to load, for liveness probes: a full instance
 * is busy, not broken. A failed tick (its conversations all closed) makes both 503 until a
 * tick runs again: a device that lost its context fails every tick, and only a restart
 * brings it back, which a liveness probe does. */
static int route_health(server *s, struct lws *wsi, http_pss *pss, int live) {
    pp_model *model;
    engine *e = server_engine(s, &model);
    char body[4096 + 6 * PP_ERR_LEN]; /* room for a file-name model name and the error escaped at 6 bytes a byte */
    char why[PP_ERR_LEN] = "";
    pthread_mutex_lock(&s->lock);
    int failed = s->failed;
    pthread_mutex_unlock(&s->lock);
    int active = e ? engine_active(e) : 0, draining = server_draining(s);
    int failing = e && engine_failing(e, why, sizeof why) > 0;
    const char *status = !e ? (failed ? "failed" : "loading") : draining ? "draining" : failing ? "failing"
                         : !engine_has_room(e) ? "full" : "ok";
    int accepting = strcmp(status, "ok") == 0;
    const char *name = s->opt->demo ? "demo" : model ? pp_model_name(model) : "";
    const char *backend = model ? pp_model_backend(model) : "";
    pp_jw w;
    pp_jw_init(&w, body, sizeof body);
    pp_jw_raw(&w, "{\"status\":\"%s\",\"ready\":%s,\"model\":", status, e ? "true" : "false");
    pp_jw_str(&w, name, strlen(name));
    pp_jw_raw(&w, ",\"backend\":");
    pp_jw_str(&w, backend, strlen(backend));
    if (failing) {
        pp_jw_raw(&w, ",\"error\":");
        pp_jw_str(&w, why, strlen(why));
    }
    pp_jw_raw(&w, ",\"version\":\"%s\",\"sessions\":{\"active\":%d,\"max\":%d}}\n", PP_VERSION, active,
              e ? engine_capacity(e) : 0);
    long len = pp_jw_end(&w);
    if (len < 0) return -1;
    int ok = live ? !failed && !failing : accepting;
    return respond(wsi, pss, ok ? HTTP_STATUS_OK : HTTP_STATUS_SERVICE_UNAVAILABLE, "application/json", body,
                   (size_t)len);
}

/* Appends the device memory gauges when the backend reports them (the CUDA backend). */
static size_t render_memory(server *s, char *buf, size_t cap) {
    pp_model *model;
    server_engine(s, &model);
    pp_backend *be = model ? pp_model_get_backend(model) : NULL;
    if (!be || !be->ops->mem_info || !cap) return 0;
    size_t v[6];
    be->ops->mem_info(be, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
    /* weights_in_place: read from the mapped file in host memory (on a Jetson the same DRAM) */
    static const char *const kinds[6] = {"weights", "buffers", "workspace", "free", "total", "weights_in_place"};
    size_t len = (size_t)snprintf(buf, cap, "# HELP personaplex_gpu_memory_bytes Device memory by use.\n"
                                            "# TYPE personaplex_gpu_memory_bytes gauge\n");
    for (int i = 0; i < 6 && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "personaplex_gpu_memory_bytes{kind=\"%s\"} %zu\n", kinds[i], v[i]);
    return len < cap ? len : cap - 1;
}

static int route_metrics(server *s, struct lws *wsi, http_pss *pss) {
    static char body[262144]; /* service thread only; room for every conversation's lateness (256 at 0.5 KB) */
    pp_model *model;
    engine *e = server_engine(s, &model);
    size_t len = metrics_render(s->metrics, body, sizeof body, e ? engine_capacity(e) : 0);
    len += render_memory(s, body + len, sizeof body - len);
    len += memory_render(body + len, sizeof body - len);
    return respond(wsi, pss, HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8", body, len);
}

static int route_voices(server *s, struct lws *wsi, http_pss *pss) {
    pp_model *model;
    server_engine(s, &model);
    const char *dir = model ? pp_model_voices_dir(model) : s->opt->voices_dir;
    char **names = NULL, err[PP_ERR_LEN];
    size_t count = 0;
    if (dir && pp_voice_list(dir, &names, &count, err) != PP_OK) PP_WARN("http", "/api/voices: %s", err);
    /* every name escaped at worst (6 bytes a byte) */
    size_t prompts = model ? pp_model_prompt_count(model) : 0;
    size_t cap = 96 + (count + prompts) * (6 * PP_VOICE_NAME_MAX + 4) + 6 * strlen(s->opt->voice);
    char *body = malloc(cap);
    if (!body) {
        free(names);
        return -1;
    }
    pp_jw w;
    pp_jw_init(&w, body, cap);
    pp_jw_raw(&w, "{\"voices\":[");
    for (size_t i = 0; i < count; i++) {
        if (i) pp_jw_raw(&w, ",");
        pp_jw_str(&w, names[i], strlen(names[i]));
    }
    pp_jw_raw(&w, "],\"default\":");
    pp_jw_str(&w, s->opt->voice, strlen(s->opt->voice));
    if (prompts) { /* a bundle's named system prompts, for text_prompt "@NAME" */
        pp_jw_raw(&w, ",\"prompts\":[");
        for (size_t i = 0; i < prompts; i++) {
            const char *name = pp_model_prompt_name(model, i);
            if (i) pp_jw_raw(&w, ",");
            pp_jw_str(&w, name, strlen(name));
        }
        pp_jw_raw(&w, "]");
    }
    pp_jw_raw(&w, "}\n");
    long len = pp_jw_end(&w);
    int rc = len < 0 ? -1 : respond(wsi, pss, HTTP_STATUS_OK, "application/json", body, (size_t)len);
    free(body);
    free(names);
    return rc;
}

/* Maps a request path to a file under the static directory; 0 and the path, or -1. */
static int static_path(const server *s, const char *uri, char *out, size_t cap) {
    if (!s->static_dir[0] || uri[0] != '/' || strchr(uri, '\\')) return -1;
    for (const char *p = uri; (p = strchr(p, '/')); p++)
        if (p[1] == '.') return -1;
    const char *tail = uri[strlen(uri) - 1] == '/' ? "index.html" : "";
    if ((size_t)snprintf(out, cap, "%s%s%s", s->static_dir, uri, tail) >= cap) return -1;
    char real[PATH_MAX];
    size_t n = strlen(s->static_dir);
    if (!realpath(out, real) || strncmp(real, s->static_dir, n) != 0 || real[n] != '/') return -1;
    struct stat st;
    return stat(real, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
}

/* Whether the browser reached us over TLS: ours, or (--behind-proxy) the proxy's, as its
 * X-Forwarded-Proto says (the shipped nginx.conf sends it). */
static int browser_on_tls(server *s, struct lws *wsi) {
    if (lws_is_ssl(wsi)) return 1;
#if defined(LWS_WITH_CUSTOM_HEADERS)
    static const char name[] = "x-forwarded-proto:";
    char proto[16];
    if (s->opt->behind_proxy && lws_hdr_custom_copy(wsi, proto, sizeof proto, name, (int)sizeof name - 1) > 0)
        return strcasecmp(proto, "https") == 0;
#else
    (void)s;
#endif
    return 0;
}

/* A page opened with ?token= gets the key as a cookie, so its assets and its WebSocket carry it
 * (a browser cannot set headers on a WebSocket). Secure when the page came over TLS, so that the
 * browser never sends the key over plain HTTP (to the proxy's port-80 redirect, say). The
 * cookie's value into out; its length, or 0. */
static int token_cookie(server *s, struct lws *wsi, char *out, size_t cap) {
    char arg[APIKEYS_MAX_KEY + 8];
    const char *token = lws_get_urlarg_by_name(wsi, "token=", arg, sizeof arg); /* past "token=" */
    if (!token) return 0;
    int n = snprintf(out, cap, "%s=%s; Path=/; HttpOnly; SameSite=Strict%s", APIKEYS_COOKIE, token,
                     browser_on_tls(s, wsi) ? "; Secure" : "");
    return n > 0 && (size_t)n < cap ? n : 0;
}

/* The page opened with ?token=KEY is sent, with the key cookie, to its own path without the
 * query (303): the key leaves the address bar, the history and any link copied from it. */
static int redirect_keyless(server *s, struct lws *wsi, const char *uri) {
    unsigned char head[LWS_PRE + 1024], *start = head + LWS_PRE, *p = start, *end = head + sizeof head - 1;
    char cookie[APIKEYS_MAX_KEY + 96];
    int n = token_cookie(s, wsi, cookie, sizeof cookie);
    while (uri[1] == '/') uri++; /* "//host" would be another site's address */
    if (!n || lws_add_http_common_headers(wsi, HTTP_STATUS_SEE_OTHER, "text/plain; charset=utf-8", 0, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_LOCATION, (const unsigned char *)uri, (int)strlen(uri), &p,
                                     end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_SET_COOKIE, (const unsigned char *)cookie, n, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int route_static(server *s, struct lws *wsi, http_pss *pss, const char *uri, int key_in_query) {
    char path[PATH_MAX + 64];
    if (static_path(s, uri, path, sizeof path) != 0) {
        static const char nf[] = "not found\n";
        return respond(wsi, pss, HTTP_STATUS_NOT_FOUND, "text/plain; charset=utf-8", nf, sizeof nf - 1);
    }
    if (key_in_query) return redirect_keyless(s, wsi, uri);
    int n = lws_serve_http_file(wsi, path, mime_type(path), NULL, 0);
    if (n < 0) return -1;
    if (n > 0 && lws_http_transaction_completed(wsi)) return -1;
    return 0;
}

/* Whether the request comes with a body framing lws cannot follow: a Transfer-Encoding (lws
 * 4.1 reads a chunked body as the connection's next request), or two Content-Lengths (lws takes
 * the first). A proxy in front that frames the body otherwise would forward bytes that lws
 * answers as a request of their own, past the proxy's rules (RFC 9112 6.3, 11.2). */
static int unframed_body(struct lws *wsi) {
    return lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0 ||
           lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, 1) > 0;
}

static int on_http(server *s, struct lws *wsi, http_pss *pss, const char *uri) {
    if (unframed_body(wsi)) {
        /* what follows on the connection cannot be told from a body: answer and close */
        metrics_bad_input(s->metrics);
        lws_return_http_status(wsi, HTTP_STATUS_BAD_REQUEST, "Transfer-Encoding or two Content-Lengths");
        return -1;
    }
    /* HEAD as every server must (RFC 9110 9.1): probes such as `wget --spider` send it */
    pss->head = lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0;
    if (!pss->head && !lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI)) {
        static const char na[] = "method not allowed\n";
        metrics_bad_input(s->metrics);
        return respond(wsi, pss, HTTP_STATUS_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", na, sizeof na - 1);
    }
    if (strcmp(uri, "/health") == 0) return route_health(s, wsi, pss, 0);
    if (strcmp(uri, "/health/live") == 0) return route_health(s, wsi, pss, 1);
    int from_query;
    if (!server_authorized(s, wsi, &from_query)) {
        static const char no[] = "a valid API key is needed (Authorization: Bearer KEY, or ?token=KEY)\n";
        return respond(wsi, pss, HTTP_STATUS_UNAUTHORIZED, "text/plain; charset=utf-8", no, sizeof no - 1);
    }
    if (strcmp(uri, "/metrics") == 0) return route_metrics(s, wsi, pss);
    if (strcmp(uri, "/api/voices") == 0) return route_voices(s, wsi, pss);
    /* every conversation endpoint alike: a plain GET there (a probe, a proxy that dropped the
     * Upgrade header) learns what is wrong instead of a 404 that says the path does not exist */
    if (ws_endpoint(uri) >= 0) {
        static const char up[] = "this endpoint is a WebSocket (GET with Upgrade: websocket)\n";
        return respond(wsi, pss, HTTP_STATUS_BAD_REQUEST, "text/plain; charset=utf-8", up, sizeof up - 1);
    }
    return route_static(s, wsi, pss, uri, from_query);
}

static int on_writeable(struct lws *wsi, http_pss *pss) {
    if (!pss->body) return 0;
    int n = pss->head ? (int)pss->len : lws_write(wsi, (unsigned char *)pss->body + LWS_PRE, pss->len, LWS_WRITE_HTTP_FINAL);
    free(pss->body);
    pss->body = NULL;
    if (n < (int)pss->len) return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* A connection just accepted: 0 to keep it, 1 to close it (its address holds --max-per-ip). */
static int on_accept(server *s, const struct lws_filter_network_conn_args *a) {
    if (!s->peers || peer_table_admit(s->peers, a->accept_fd, (const struct sockaddr *)&a->cli_addr, a->clilen))
        return 0;
    static int64_t last_warned;
    int64_t now = pp_now_ns();
    if (now - last_warned > 10 * 1000000000LL) { /* a flood must not flood the log too */
        char ip[64] = "?";
        const struct sockaddr *sa = (const struct sockaddr *)&a->cli_addr;
        inet_ntop(sa->sa_family, sa->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                                                          : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr,
                  ip, sizeof ip);
        PP_WARN("http", "connection from %s refused: it holds --max-per-ip %d already (further refusals unlogged "
                "for 10 s)", ip, s->opt->max_per_ip);
        last_warned = now;
    }
    return 1;
}

/* lws 4.1 would switch a plain-HTTP connection that asks `Upgrade: h2c` to HTTP/2 (despite ALPN
 * http/1.1 on TLS). Behind a proxy that passes Upgrade on (the WebSocket locations must) that
 * makes a tunnel straight to this server, past the proxy's rules and its X-Forwarded-* and
 * X-Real-IP headers: h2c smuggling. */
int http_confirm_upgrade(server *s, struct lws *wsi, const char *upgrade) {
    if (upgrade && !strcasecmp(upgrade, "websocket")) return 0;
    PP_WARN("http", "an upgrade to another protocol than WebSocket (h2c?) refused");
    metrics_bad_input(s->metrics);
    lws_return_http_status(wsi, HTTP_STATUS_BAD_REQUEST, "only WebSocket upgrades are served");
    return 1;
}

int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    http_pss *pss = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: /* user: the accept's arguments, not a pss */
        return on_accept(lws_context_user(lws_get_context(wsi)), user);
    case LWS_CALLBACK_HTTP:
        return on_http(lws_context_user(lws_get_context(wsi)), wsi, pss, in);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return on_writeable(wsi, pss);
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return http_confirm_upgrade(lws_context_user(lws_get_context(wsi)), wsi, in);
    case LWS_CALLBACK_RAW_ADOPT:
        /* lws turns a CONNECT request into a raw socket, which no timeout covers: held for ever,
         * a descriptor a client could pile up past every request and idle limit. Nothing here
         * serves a raw socket: it is closed. */
        PP_WARN("http", "a CONNECT request refused: this is no proxy");
        metrics_bad_input(((server *)lws_context_user(lws_get_context(wsi)))->metrics);
        return -1;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* A client naming this protocol in Sec-WebSocket-Protocol would get a WebSocket here,
         * past the chat protocol's path and API-key checks: only personaplex-chat upgrades. */
        PP_WARN("http", "WebSocket upgrade for the 'http' subprotocol refused");
        return 1;
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
    case LWS_CALLBACK_CLOSED_HTTP:
        if (pss) {
            free(pss->body);
            pss->body = NULL;
        }
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}
