/* test_server_http: raw HTTP requests an internet client could send to `personaplex-server
 * --demo` on loopback, each on a fresh connection, and everything the server answers on it.
 *
 * usage: test_server_http SERVER_BINARY
 *
 * Body framing: these routes take no body, and lws can follow neither a chunked one nor two
 * Content-Lengths; a request with either gets one 400 and the connection closes, so no bytes a
 * proxy in front forwarded as its body are answered as a request of their own. */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static sh_server g_srv;

/* Sends request on a fresh connection and reads until the server closes it or stays silent for
 * 1.5 s; out gets the NUL-terminated reply. Returns how many responses it holds. */
static int exchange(const char *request, char *out, size_t cap) {
    out[0] = '\0';
    int fd = sp_connect(g_srv.port, 0);
    if (fd < 0) return -1;
    size_t got = 0;
    if (write(fd, request, strlen(request)) == (ssize_t)strlen(request)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (got + 1 < cap && poll(&p, 1, 1500) > 0) {
            ssize_t n = read(fd, out + got, cap - 1 - got);
            if (n <= 0) break;
            got += (size_t)n;
        }
    }
    close(fd);
    out[got] = '\0';
    int responses = 0;
    for (const char *p = out; (p = strstr(p, "HTTP/1.")); p++) responses++;
    return responses;
}

/* The request that follows a body a proxy would forward: if the server answers it, it was
 * smuggled past the proxy. */
#define SMUGGLED "GET /api/voices HTTP/1.1\r\nHost: x\r\n\r\n"

static void body_framing(void) {
    static char reply[16384];
    int n = exchange("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 38\r\n\r\n" SMUGGLED, reply,
                     sizeof reply);
    TEST_COND("two Content-Lengths: one 400, the rest unanswered", n == 1 && strstr(reply, "HTTP/1.1 400") == reply);
    n = exchange("GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" SMUGGLED, reply,
                 sizeof reply);
    TEST_COND("a chunked body: one 400, the rest unanswered", n == 1 && strstr(reply, "HTTP/1.1 400") == reply);
    n = exchange("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" SMUGGLED,
                 reply, sizeof reply);
    TEST_COND("Content-Length with Transfer-Encoding: one 400, the rest unanswered",
              n == 1 && strstr(reply, "HTTP/1.1 400") == reply);
    n = exchange("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 38\r\n\r\n" SMUGGLED, reply, sizeof reply);
    TEST_COND("one Content-Length: its body read as the body (one 200)", n == 1 && strstr(reply, "HTTP/1.1 200") == reply);
    n = exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n" SMUGGLED, reply, sizeof reply);
    TEST_COND("two pipelined requests: both answered", n == 2);
}

int main(int argc, char **argv) {
    if (argc < 2) TEST_SKIP("usage: test_server_http SERVER_BINARY");
    if (sh_start(&g_srv, argv[1], 0, NULL) != 0) {
        sh_cleanup(&g_srv, 1);
        TEST_COND("server starts", 0);
        return test_report();
    }
    body_framing();
    wc_shutdown();
    int st = sh_stop(&g_srv);
    TEST_COND("clean exit", st == 0);
    sh_cleanup(&g_srv, st != 0 || test_failed);
    return test_report();
}
