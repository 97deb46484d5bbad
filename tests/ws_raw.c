/* ws_raw: see ws_raw.h. Reads are bounded by a poll timeout; frames from the server are
 * unmasked (RFC 6455 §5.1), so parsing them needs only the length forms. */
#define _DEFAULT_SOURCE
#include "ws_raw.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct raw_link {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    int timeout_ms;
} raw_link;

static int link_write(raw_link *l, const char *buf, size_t len) {
    while (len) {
        int n = l->ssl ? SSL_write(l->ssl, buf, (int)len) : (int)send(l->fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads exactly len bytes; -1 on EOF, error or timeout. */
static int link_read(raw_link *l, void *buf, size_t len) {
    char *p = buf;
    while (len) {
        if (!(l->ssl && SSL_pending(l->ssl))) {
            struct pollfd pfd = {l->fd, POLLIN, 0};
            if (poll(&pfd, 1, l->timeout_ms) <= 0) return -1;
        }
        int n = l->ssl ? SSL_read(l->ssl, p, (int)len) : (int)recv(l->fd, p, len, 0);
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int link_open(raw_link *l, int port, int tls) {
    memset(l, 0, sizeof *l);
    l->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l->fd < 0 || connect(l->fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    if (!tls) return 0;
    l->ctx = SSL_CTX_new(TLS_client_method()); /* no verification: the server's cert is self-signed */
    l->ssl = l->ctx ? SSL_new(l->ctx) : NULL;
    if (!l->ssl || !SSL_set_fd(l->ssl, l->fd) || SSL_connect(l->ssl) != 1) return -1;
    return 0;
}

static void link_close(raw_link *l) {
    if (l->ssl) SSL_free(l->ssl);
    if (l->ctx) SSL_CTX_free(l->ctx);
    if (l->fd >= 0) close(l->fd);
}

/* Reads the reply head up to the blank line; returns its status code or 0. */
static int read_head(raw_link *l) {
    char head[4096];
    size_t n = 0;
    while (n + 1 < sizeof head) {
        if (link_read(l, head + n, 1)) break;
        n++;
        if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0) break;
    }
    head[n] = '\0';
    int status = 0;
    return sscanf(head, "HTTP/1.1 %d", &status) == 1 ? status : 0;
}

static void read_messages(raw_link *l, ws_raw_result *out) {
    for (;;) {
        uint8_t h[2], ext[8];
        if (link_read(l, h, 2)) return;
        uint64_t len = h[1] & 0x7f;
        if (len == 126 || len == 127) {
            size_t k = len == 126 ? 2 : 8;
            if (link_read(l, ext, k)) return;
            len = 0;
            for (size_t i = 0; i < k; i++) len = len << 8 | ext[i];
        }
        if (len > (1u << 20)) return;
        uint8_t *m = malloc(len + 1);
        if (!m || link_read(l, m, len)) {
            free(m);
            return;
        }
        int op = h[0] & 0x0f, done = 0;
        if (op == 0x8) {
            out->close_code = len >= 2 ? m[0] << 8 | m[1] : 0;
            done = 1;
        } else if (op == 0x2 && len >= 1 && m[0] == 0x00) {
            out->handshake = 1;
            done = 1;
        } else if (op == 0x2 && len >= 1 && m[0] == 0x05) {
            out->error = 1;
            size_t n = len - 1 < sizeof out->error_text - 1 ? len - 1 : sizeof out->error_text - 1;
            memcpy(out->error_text, m + 1, n);
            out->error_text[n] = '\0';
        }
        free(m);
        if (done) return;
    }
}

int ws_raw_chat(int port, int tls, const char *path, int timeout_ms, ws_raw_result *out) {
    memset(out, 0, sizeof *out);
    raw_link l;
    if (link_open(&l, port, tls)) {
        link_close(&l);
        return -1;
    }
    l.timeout_ms = timeout_ms;
    size_t cap = strlen(path) + 512;
    char *req = malloc(cap);
    int n = snprintf(req, cap,
                     "GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     path);
    int rc = link_write(&l, req, (size_t)n);
    free(req);
    if (!rc) {
        out->status = read_head(&l);
        if (out->status == 101) read_messages(&l, out);
    }
    link_close(&l);
    return rc;
}
