/* test_server_routes: the HTTP routes of docs/protocol.md §1.1 answer a plain GET as documented.
 *
 * usage: test_server_routes SERVER_BINARY
 *
 * The pages, /api/voices, /health, /health/live and /metrics answer 200; each conversation
 * endpoint (/api/chat, /v1/realtime, /v1/twilio) answers a GET without the WebSocket upgrade
 * with 400 and a body saying it is a WebSocket, not with the 404 of a path that does not
 * exist; an unknown path is 404. The server exits cleanly on SIGTERM. */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"
#include "ws_client.h"

#include <stdio.h>
#include <string.h>

static sh_server g_srv;

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
    wc_shutdown();
    int status = sh_stop(&g_srv);
    TEST_COND("server exits cleanly on SIGTERM (status 0)", status == 0);
    sh_cleanup(&g_srv, status != 0 || test_failed);
    return test_report();
}
