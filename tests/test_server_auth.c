/* test_server_auth: personaplex-server --demo --api-keys FILE on loopback.
 *
 * usage: test_server_auth SERVER_BINARY
 *
 * /health answers without a key; /metrics, /api/voices and the web UI need one: none or a
 * wrong one gets 401, a key as `Authorization: Bearer`, as ?token= or as the cookie a page
 * opened with ?token= receives (with a 303 to its address without the key) gets through. A
 * conversation's WebSocket upgrade is refused without a key and reaches its handshake with one
 * (header or ?token=). Refusals are counted in /metrics. SIGHUP reloads the file: a removed key
 * stops working, a new one starts, and a file others can read (0644) is warned of. No key ever
 * appears in the log, and the server exits cleanly on SIGTERM. The key cookie opens a WebSocket
 * only from the server's own pages (their Origin), not from another site's. The key cookie is
 * Secure when the page came over TLS: --behind-proxy, a proxy's X-Forwarded-Proto: https says
 * so (a direct client's is not believed). */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"
#include "ws_client.h"

#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static sh_server g_srv;

/* GET path with an Authorization value (or NULL); the status, -1 when no answer came. */
static int get(const char *path, const char *authorization, wc_http *h) {
    memset(h, 0, sizeof *h);
    h->path = path;
    h->authorization = authorization;
    wc_http *list[] = {h};
    wc_run(NULL, 0, list, 1, 10000);
    return h->done ? h->status : -1;
}

static int status(const char *path, const char *authorization) {
    wc_http h;
    int st = get(path, authorization, &h);
    wc_http_free(&h);
    return st;
}

/* A conversation on /api/chat (path with its query): 1 when the handshake arrived. */
static int converse(const char *path, const char *authorization) {
    wc_conn c = {.path = (char *)path, .authorization = authorization, .wait_handshake = 1, .close_at_once = 0,
                 .linger_ms = 300};
    wc_conn *list[] = {&c};
    wc_run(list, 1, NULL, 0, 30000);
    int ok = c.handshakes == 1;
    wc_conn_free(&c);
    return ok;
}

static double unauthorized(void) {
    wc_http h;
    double v = -1;
    if (get("/metrics", "Bearer alpha-key-1", &h) == 200 && h.body) {
        const char *p = strstr(h.body, "\npersonaplex_unauthorized_total ");
        if (p) v = atof(p + strlen("\npersonaplex_unauthorized_total "));
    }
    wc_http_free(&h);
    return v;
}

/* Sends a request as it is on a fresh connection; the reply's HTTP status, 0 when the server
 * closed without one or sent none within 3 s. */
static int raw_status(const char *request) {
    int fd = sp_connect(g_srv.port, 0), status = 0;
    if (fd < 0) return 0;
    char reply[64] = "";
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write(fd, request, strlen(request)) == (ssize_t)strlen(request) && read(fd, reply, sizeof reply - 1) > 0)
        sscanf(reply, "HTTP/1.%*d %d", &status);
    close(fd);
    return status;
}

/* Sends a request as it is on a fresh connection and reads the reply into out (NUL-terminated)
 * until the server closes or is silent for 3 s; the reply's HTTP status, 0 when none came. */
static int raw_reply(const char *request, char *out, size_t cap) {
    int fd = sp_connect(g_srv.port, 0), status = 0;
    size_t got = 0;
    out[0] = '\0';
    if (fd < 0) return 0;
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write(fd, request, strlen(request)) == (ssize_t)strlen(request)) {
        ssize_t n;
        while (got + 1 < cap && (n = read(fd, out + got, cap - 1 - got)) > 0) got += (size_t)n;
    }
    close(fd);
    out[got] = '\0';
    sscanf(out, "HTTP/1.%*d %d", &status);
    return status;
}

/* The value of the reply's header `name` (any case) into value; 0 when absent. */
static int reply_header(const char *reply, const char *name, char *value, size_t cap) {
    size_t n = strlen(name);
    for (const char *line = strstr(reply, "\r\n"); line && line[2] != '\r'; line = strstr(line + 2, "\r\n")) {
        const char *v = line + 2, *eol = strstr(v, "\r\n");
        if (!eol || strncasecmp(v, name, n) || v[n] != ':') continue;
        for (v += n + 1; *v == ' '; v++) {}
        snprintf(value, cap, "%.*s", (int)(eol - v), v);
        return 1;
    }
    return 0;
}

/* Whether the key cookie a page opened with ?token= receives is Secure, its request carrying
 * X-Forwarded-Proto: proto (or none when NULL): 1 yes, 0 no, -1 no cookie. */
static int cookie_secure(const char *proto) {
    char request[256], reply[2048], cookie[512];
    snprintf(request, sizeof request, "GET /?token=gamma-key-3 HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: close\r\n\r\n",
             proto ? "X-Forwarded-Proto: " : "", proto ? proto : "", proto ? "\r\n" : "");
    raw_reply(request, reply, sizeof reply);
    if (!reply_header(reply, "set-cookie", cookie, sizeof cookie) || strncmp(cookie, "pp_token=", 9)) return -1;
    return strstr(cookie, "; Secure") != NULL;
}

/* A page opened with ?token=KEY (path and query given): 1 when it is sent to `to` with the key
 * cookie, the key no longer in the address. */
static int sent_on_without_key(const char *path_and_query, const char *to) {
    char request[256], reply[2048], location[256], cookie[512];
    snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path_and_query);
    return raw_reply(request, reply, sizeof reply) == 303 && reply_header(reply, "location", location, sizeof location) &&
           !strcmp(location, to) && reply_header(reply, "set-cookie", cookie, sizeof cookie) &&
           !strncmp(cookie, "pp_token=alpha-key-1; ", 22) && strstr(cookie, "HttpOnly") && strstr(cookie, "SameSite=Strict");
}

#define UPGRADE(path, protocol)                                                                                       \
    "GET " path " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"                               \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " protocol  \
    "\r\n\r\n"

/* What a client could once do around the checks: a WebSocket on the HTTP protocol (named as a
 * subprotocol, on any path, without a key); a key cookie after a kilobyte of other cookies
 * refused; a few dozen silent connections holding every request slot for 10 s. */
static void around_the_checks(void) {
    TEST_COND("an upgrade to the 'http' subprotocol is refused", raw_status(UPGRADE("/anything", "http")) != 101);
    TEST_COND("... on the chat path too", raw_status(UPGRADE("/api/chat", "http")) != 101);
    static char cookie[1400];
    snprintf(cookie, sizeof cookie, "GET /api/voices HTTP/1.1\r\nHost: x\r\nCookie: other=%01100d; pp_token=alpha-key-1\r\n\r\n",
             0);
    TEST_COND("the key cookie after 1100 bytes of others gets through", raw_status(cookie) == 200);
    int silent[40];
    for (int i = 0; i < 40; i++) silent[i] = sp_connect(g_srv.port, 0);
    usleep(300000);
    TEST_COND("40 silent connections leave /health answering",
              raw_status("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") == 200);
    for (int i = 0; i < 40; i++)
        if (silent[i] >= 0) close(silent[i]);
}

/* The status of a chat upgrade to 127.0.0.1:PORT with these extra header lines (each ending
 * in CRLF); 101 when the WebSocket opened. */
static int upgrade_status(const char *headers) {
    char request[1024];
    snprintf(request, sizeof request,
             "GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
             g_srv.port, headers);
    return raw_status(request);
}

/* A browser sends the key cookie with a WebSocket that any page of the same site opens (another
 * port of the host, a sibling subdomain: SameSite does not look at either), with that page's
 * Origin: the cookie opens a conversation only for the server's own pages. */
static void cross_site_websocket(void) {
    char own[128], other_port[128];
    snprintf(own, sizeof own, "Cookie: pp_token=alpha-key-1\r\nOrigin: http://127.0.0.1:%d\r\n", g_srv.port);
    snprintf(other_port, sizeof other_port, "Cookie: pp_token=alpha-key-1\r\nOrigin: http://127.0.0.1:%d\r\n",
             g_srv.port + 1);
    TEST_COND("the key cookie from the server's own page opens a WebSocket", upgrade_status(own) == 101);
    TEST_COND("... and from a program (no Origin)", upgrade_status("Cookie: pp_token=alpha-key-1\r\n") == 101);
    TEST_COND("the key cookie from another site's page: refused",
              upgrade_status("Cookie: pp_token=alpha-key-1\r\nOrigin: https://evil.example\r\n") == 401);
    TEST_COND("... from a page on another port of the same host: refused", upgrade_status(other_port) == 401);
    TEST_COND("... from a sandboxed page (Origin: null): refused",
              upgrade_status("Cookie: pp_token=alpha-key-1\r\nOrigin: null\r\n") == 401);
    TEST_COND("a Bearer key opens it whatever the Origin",
              upgrade_status("Authorization: Bearer alpha-key-1\r\nOrigin: https://evil.example\r\n") == 101);
}

/* --allowed-origins on an open server: a browser lets any page open a WebSocket to any server (no
 * CORS check), so without the list any site its user visits could hold conversations on it. */
static void allowed_origins(void) {
    char own[128];
    snprintf(own, sizeof own, "Origin: http://127.0.0.1:%d\r\n", g_srv.port);
    TEST_COND("--allowed-origins: the server's own page opens a conversation", upgrade_status(own) == 101);
    TEST_COND("... a program (no Origin)", upgrade_status("") == 101);
    TEST_COND("... a listed origin", upgrade_status("Origin: https://app.example\r\n") == 101);
    TEST_COND("... written otherwise (case, the default port)",
              upgrade_status("Origin: HTTPS://App.Example:443\r\n") == 101);
    TEST_COND("... the second entry of the list", upgrade_status("Origin: http://localhost:5173\r\n") == 101);
    TEST_COND("another site's page: 403", upgrade_status("Origin: https://evil.example\r\n") == 403);
    TEST_COND("... a listed host over another scheme: 403", upgrade_status("Origin: http://app.example\r\n") == 403);
    TEST_COND("... or on another port: 403", upgrade_status("Origin: https://app.example:8443\r\n") == 403);
    TEST_COND("... a sandboxed page (Origin: null): 403", upgrade_status("Origin: null\r\n") == 403);
    TEST_COND("... and logged, naming the page's origin",
              sh_log_count(&g_srv, "a page of https://evil.example is not in --allowed-origins") == 1);
}

static int write_keys(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 2) TEST_SKIP("usage: test_server_auth SERVER_BINARY");
    char keys[] = "/tmp/pp-keys-XXXXXX";
    int fd = mkstemp(keys);
    if (fd < 0) TEST_SKIP("no temporary file");
    close(fd);
    TEST_COND("key file", write_keys(keys, "# the test's keys\nalpha-key-1\n\n  beta-key-2  \n") == 0);
    const char *extra[] = {"--api-keys", keys, NULL};
    if (sh_start(&g_srv, argv[1], 0, extra) != 0) {
        sh_cleanup(&g_srv, 1);
        unlink(keys);
        TEST_COND("server starts", 0);
        return test_report();
    }
    TEST_COND("/health needs no key", status("/health", NULL) == 200);
    TEST_COND("/metrics without a key: 401", status("/metrics", NULL) == 401);
    TEST_COND("/api/voices with a wrong key: 401", status("/api/voices", "Bearer nope") == 401);
    TEST_COND("a Bearer key gets through", status("/api/voices", "Bearer alpha-key-1") == 200);
    TEST_COND("?token= gets through", status("/api/voices?token=beta-key-2", NULL) == 200);
    TEST_COND("the page without a key: 401", status("/", NULL) == 401);
    /* the key would stay in the address bar, the history and every link copied from the page */
    TEST_COND("the page with ?token=: the key as a cookie, 303 to its address without the key",
              sent_on_without_key("/?token=alpha-key-1", "/"));
    TEST_COND("... an asset too", sent_on_without_key("/index.html?token=alpha-key-1", "/index.html"));
    TEST_COND("... and never to another host (//)", sent_on_without_key("//index.html?token=alpha-key-1", "/index.html"));
    wc_http asset = {.path = "/", .cookie = "pp_token=alpha-key-1"};
    wc_http *list[] = {&asset};
    wc_run(NULL, 0, list, 1, 10000);
    TEST_COND("the cookie gets the page's assets through", asset.done && asset.status == 200);
    wc_http_free(&asset);
    around_the_checks();
    double refused = unauthorized();
    TEST_COND("refusals are counted", refused == 3); /* /metrics, /api/voices, / */
    TEST_COND("a conversation without a key is refused", !converse("/api/chat?text_prompt=hi", NULL));
    TEST_COND("a conversation with a Bearer key starts", converse("/api/chat?text_prompt=hi", "Bearer alpha-key-1"));
    TEST_COND("a conversation with ?token= starts", converse("/api/chat?token=beta-key-2&text_prompt=hi", NULL));
    TEST_COND("the refused upgrade is counted", unauthorized() >= refused + 1);
    cross_site_websocket();

    TEST_COND("a key file of mode 0600: no warning", sh_log_count(&g_srv, "open to other users") == 0);
    TEST_COND("new key file", write_keys(keys, "gamma-key-3\n") == 0 && chmod(keys, 0644) == 0);
    kill(g_srv.pid, SIGHUP);
    int reloaded = 0;
    for (int i = 0; i < 50 && !reloaded; i++) {
        usleep(100000);
        reloaded = status("/api/voices", "Bearer gamma-key-3") == 200;
    }
    TEST_COND("SIGHUP: the new key works", reloaded);
    TEST_COND("SIGHUP: the removed key is refused", status("/api/voices", "Bearer alpha-key-1") == 401);
    TEST_COND("... and a key file others can read is warned of", sh_log_count(&g_srv, "open to other users") == 1);
    TEST_COND("no key in the log", sh_log_count(&g_srv, "alpha-key-1") == 0 && sh_log_count(&g_srv, "beta-key-2") == 0 &&
                                       sh_log_count(&g_srv, "gamma-key-3") == 0);
    TEST_COND("plain HTTP: the key cookie is not Secure", cookie_secure(NULL) == 0);
    TEST_COND("... nor when a client (no proxy here) claims X-Forwarded-Proto: https", cookie_secure("https") == 0);
    wc_shutdown();
    int st = sh_stop(&g_srv);
    TEST_COND("clean exit", st == 0);
    sh_cleanup(&g_srv, st != 0 || test_failed);

    /* Behind a TLS-terminating proxy the page came over https: the cookie must be Secure, or the
     * browser sends the key in clear to the same host's http:// (the proxy's redirect). */
    const char *proxied[] = {"--api-keys", keys, "--behind-proxy", NULL};
    if (sh_start(&g_srv, argv[1], 0, proxied) != 0) TEST_COND("server behind a proxy starts", 0);
    else {
        TEST_COND("--behind-proxy, X-Forwarded-Proto: https: the key cookie is Secure", cookie_secure("https") == 1);
        TEST_COND("--behind-proxy, X-Forwarded-Proto: http: not Secure", cookie_secure("http") == 0);
        wc_shutdown();
        st = sh_stop(&g_srv);
        TEST_COND("clean exit behind a proxy", st == 0);
        sh_cleanup(&g_srv, st != 0 || test_failed);
    }

    const char *origins[] = {"--allowed-origins", "https://app.example, http://LOCALHOST:5173", NULL};
    if (sh_start(&g_srv, argv[1], 0, origins) != 0) TEST_COND("server with --allowed-origins starts", 0);
    else {
        allowed_origins();
        st = sh_stop(&g_srv);
        TEST_COND("clean exit with --allowed-origins", st == 0);
        sh_cleanup(&g_srv, st != 0 || test_failed);
    }
    unlink(keys);
    return test_report();
}
