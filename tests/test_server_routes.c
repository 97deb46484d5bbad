/* test_server_routes: the HTTP routes of docs/protocol.md §1.1 answer a plain GET as documented.
 *
 * usage: test_server_routes SERVER_BINARY
 *
 * The pages, /api/voices, /health, /health/live and /metrics answer 200; each conversation
 * endpoint (/api/chat, /v1/realtime, /v1/twilio) answers a GET without the WebSocket upgrade
 * with 400 and a body saying it is a WebSocket, not with the 404 of a path that does not
 * exist; an unknown path is 404. A /v1/realtime upgrade with the ?model= that OpenAI's clients
 * put in the URL gets its session.created and no "unknown query parameter" warning for model
 * (docs/protocol.md §4), while a really unknown key still gets one. The server exits cleanly on
 * SIGTERM. */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"
#include "ws_client.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static sh_server g_srv;

/* Upgrades GET path to a WebSocket on a raw socket and reads until the first server event;
 * 1 when it was session.created. */
static int realtime_session_created(const char *path) {
    int fd = sp_connect(g_srv.port, 0);
    if (fd < 0) return 0;
    char req[512], got[4096];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     path);
    size_t have = 0;
    int created = 0;
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) == n) {
        for (int64_t end = wc_now_ns() + 10000000000LL; !created && have < sizeof got - 1 && wc_now_ns() < end;) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 100) != 1) continue;
            ssize_t r = recv(fd, got + have, sizeof got - 1 - have, 0);
            if (r <= 0) break;
            have += (size_t)r;
            got[have] = '\0';
            for (size_t i = 0; !created && i + 17 <= have; i++) created = !memcmp(got + i, "\"session.created\"", 17);
        }
    }
    close(fd);
    return created;
}

int main(int argc, char **argv) {
    if (argc < 2) TEST_SKIP("usage: test_server_routes SERVER_BINARY");
    if (sh_start(&g_srv, argv[1], 0, NULL) != 0) {
        sh_cleanup(&g_srv, 1);
        TEST_COND("server starts", 0);
        return test_report();
    }
    static const char *const pages[] = {"/", "/api/voices", "/health", "/health/live", "/metrics"};
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        wc_http h;
        int st = sp_get(pages[i], &h, 10000);
        printf("GET %s: %d\n", pages[i], st);
        TEST_COND("a documented page answers 200", st == 200);
        wc_http_free(&h);
    }
    static const char *const sockets[] = {"/api/chat", "/v1/realtime", "/v1/twilio"};
    for (size_t i = 0; i < sizeof sockets / sizeof sockets[0]; i++) {
        wc_http h;
        int st = sp_get(sockets[i], &h, 10000);
        printf("GET %s without the upgrade: %d %s", sockets[i], st, h.body ? h.body : "\n");
        TEST_COND("a conversation endpoint without the upgrade answers 400", st == 400);
        TEST_COND("... saying it is a WebSocket", h.body && strstr(h.body, "WebSocket") != NULL);
        wc_http_free(&h);
    }
    wc_http h;
    TEST_COND("an unknown path is 404", sp_get("/no-such-route", &h, 10000) == 404);
    wc_http_free(&h);
    TEST_COND("a realtime client's ?model= opens a session",
              realtime_session_created("/v1/realtime?model=gpt-realtime&colour=red"));
    for (int i = 0; i < 50 && sh_log_count(&g_srv, "'colour'") == 0; i++) usleep(100000);
    printf("log: %d warnings for model, %d for colour\n", sh_log_count(&g_srv, "unknown query parameter 'model'"),
           sh_log_count(&g_srv, "unknown query parameter 'colour'"));
    TEST_COND("... an unknown key is warned about", sh_log_count(&g_srv, "unknown query parameter 'colour'") == 1);
    TEST_COND("... the realtime model key is not", sh_log_count(&g_srv, "unknown query parameter 'model'") == 0);
    wc_shutdown();
    int status = sh_stop(&g_srv);
    TEST_COND("server exits cleanly on SIGTERM (status 0)", status == 0);
    sh_cleanup(&g_srv, status != 0 || test_failed);
    return test_report();
}
