/* test_server_http: raw HTTP requests an internet client could send to `personaplex-server
 * --demo` on loopback, each on a fresh connection, and everything the server answers on it.
 *
 * usage: test_server_http SERVER_BINARY
 *
 * Body framing: these routes take no body, and lws can follow neither a chunked one nor two
 * Content-Lengths; a request with either gets one 400 and the connection closes, so no bytes a
 * proxy in front forwarded as its body are answered as a request of their own.
 *
 * Upgrades: only to WebSocket. `Upgrade: h2c` (which lws would take, on any path) gets 400
 * rather than 101: through a proxy that passes Upgrade on it was a tunnel past the proxy. A
 * CONNECT request closes the connection (lws held it as a raw socket, without a timeout).
 *
 * Static paths: encoded '..' segments and backslashes never leave the web directory.
 *
 * Connections per address (--max-per-ip 8): with 8 silent connections open from 127.0.0.1 a
 * ninth from there is closed unanswered, one from 127.0.0.2 is answered, and once one of the
 * eight closes 127.0.0.1 is answered again. */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

static sh_server g_srv;

#define MAX_PER_IP 8

/* A connection to the server from the loopback address `from` (127.0.0.x), or -1. */
static int connect_from(const char *from) {
    struct sockaddr_in local = {.sin_family = AF_INET}, server = {.sin_family = AF_INET};
    inet_pton(AF_INET, from, &local.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
    server.sin_port = htons((uint16_t)g_srv.port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&local, sizeof local) ||
                    connect(fd, (struct sockaddr *)&server, sizeof server))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Sends request on a fresh connection from `from` and reads until the server closes it or stays
 * silent for 1.5 s; out gets the NUL-terminated reply. Returns how many responses it holds. */
static int exchange_from(const char *from, const char *request, char *out, size_t cap) {
    out[0] = '\0';
    int fd = connect_from(from);
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

static int exchange(const char *request, char *out, size_t cap) { return exchange_from("127.0.0.1", request, out, cap); }

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

#define H2C_UPGRADE(path)                                                                                              \
    "GET " path " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"                     \
    "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"

/* The status of the reply's first response, 0 when none. */
static int first_status(const char *reply) {
    int status = 0;
    return sscanf(reply, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

static void upgrades(void) {
    static char reply[4096];
    exchange(H2C_UPGRADE("/health"), reply, sizeof reply);
    TEST_COND("Upgrade: h2c on /health: 400, no switch to HTTP/2", first_status(reply) == 400);
    exchange(H2C_UPGRADE("/api/chat"), reply, sizeof reply);
    TEST_COND("... on /api/chat (a proxy's WebSocket location) too", first_status(reply) == 400);
    exchange("GET /api/chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
             reply, sizeof reply);
    TEST_COND("a WebSocket upgrade still switches", first_status(reply) == 101);
}

/* Static paths that would leave the web directory, encoded as a client may: none is served. */
static void static_paths(void) {
    static const char *const escapes[] = {
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2f..%2fetc%2fpasswd",    "/..\\..\\..\\etc\\passwd",
        "/a/../../../../etc/passwd",        "/%2e%2e%5c%2e%2e%5cetc%5cpasswd", "/.%2e/.%2e/.%2e/etc/passwd",
        "//etc/passwd",                     "/%252e%252e/etc/passwd"};
    static char request[256], reply[16384];
    int served = 0;
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", escapes[i]);
        exchange(request, reply, sizeof reply);
        if (first_status(reply) == 200 || strstr(reply, "root:")) {
            fprintf(stderr, "served: %s\n", escapes[i]);
            served++;
        }
    }
    TEST_COND("no encoded '..' or backslash path leaves the web directory", served == 0);
    exchange("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", reply, sizeof reply);
    TEST_COND("... while / is served", first_status(reply) == 200);
}

/* Whether the server closes a connection that sent request within 3 s (its answer, if any,
 * read and dropped). */
static int closed_after(const char *request) {
    int fd = connect_from("127.0.0.1"), closed = 0;
    if (fd < 0) return 0;
    if (write(fd, request, strlen(request)) == (ssize_t)strlen(request)) {
        char buf[4096];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n = 1;
        while (n > 0 && poll(&p, 1, 3000) > 0) n = read(fd, buf, sizeof buf);
        closed = n <= 0;
    }
    close(fd);
    return closed;
}

/* One address opening connection after connection (slowloris) held every descriptor and
 * request slot: nobody else got an answer. */
static void connections_per_address(void) {
    static char reply[4096];
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    int held[MAX_PER_IP], opened = 0;
    for (int i = 0; i < MAX_PER_IP; i++) opened += (held[i] = connect_from("127.0.0.1")) >= 0;
    TEST_COND("8 silent connections open", opened == MAX_PER_IP);
    usleep(300000); /* all accepted and counted */
    TEST_COND("a ninth from the same address: closed unanswered", exchange(health, reply, sizeof reply) == 0);
    TEST_COND("one from another address: answered", exchange_from("127.0.0.2", health, reply, sizeof reply) == 1);
    close(held[0]);
    usleep(300000);
    TEST_COND("once one closed, the address is answered again", exchange(health, reply, sizeof reply) == 1);
    for (int i = 1; i < MAX_PER_IP; i++) close(held[i]);
}

int main(int argc, char **argv) {
    if (argc < 2) TEST_SKIP("usage: test_server_http SERVER_BINARY");
    char max_per_ip[16];
    snprintf(max_per_ip, sizeof max_per_ip, "%d", MAX_PER_IP);
    const char *const extra[] = {"--max-per-ip", max_per_ip, NULL};
    if (sh_start(&g_srv, argv[1], 0, extra) != 0) {
        sh_cleanup(&g_srv, 1);
        TEST_COND("server starts", 0);
        return test_report();
    }
    body_framing();
    upgrades();
    static_paths();
    /* lws made it a raw socket that no timeout covered: held as long as the client liked */
    TEST_COND("a CONNECT request: the connection closed",
              closed_after("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"));
    connections_per_address();
    wc_shutdown();
    int st = sh_stop(&g_srv);
    TEST_COND("clean exit", st == 0);
    sh_cleanup(&g_srv, st != 0 || test_failed);
    return test_report();
}
