/* peer: socket peer or proxy-reported client address, for logs; connections per address. */
#include "server/peer.h"

#include <libwebsockets.h>

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

/* Copies the IP-address characters of src[0..len) into out (NUL-terminated); 0 if none. */
static size_t keep_address(const char *src, size_t len, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++) {
        char c = src[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':')
            out[o++] = c;
    }
    out[o] = '\0';
    return o;
}

/* The proxy-reported client address, or 0 when the request carries none. */
static size_t forwarded_address(struct lws *wsi, char *out, size_t cap) {
    char h[512];
#if defined(LWS_WITH_HTTP_UNCOMMON_HEADERS) || defined(LWS_HTTP_HEADERS_ALL)
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_HTTP_X_REAL_IP) > 0 && keep_address(h, strlen(h), out, cap))
        return strlen(out);
#endif
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_X_FORWARDED_FOR) > 0) {
        const char *last = strrchr(h, ',');
        last = last ? last + 1 : h;
        return keep_address(last, strlen(last), out, cap);
    }
    return 0;
}

void peer_address(struct lws *wsi, int behind_proxy, char *out, size_t cap) {
    char sock[64], client[64];
    lws_get_peer_simple(wsi, sock, sizeof sock);
    if (behind_proxy && forwarded_address(wsi, client, sizeof client)) snprintf(out, cap, "%s via %s", client, sock);
    else snprintf(out, cap, "%s", sock);
}

/* The address a connection counts against: IPv4 (also IPv4-mapped IPv6) as ::ffff:a.b.c.d,
 * IPv6 by its /64, which one subscriber usually holds whole. */
typedef struct peer_key {
    unsigned char bytes[16];
} peer_key;

typedef struct peer_entry {
    peer_key key;
    struct sockaddr_storage addr; /* the full peer, to tell this socket from a reuse of fd */
    socklen_t len;                /* 0: free */
} peer_entry;

struct peer_table {
    int max_per_ip, cap; /* cap: entries, one per descriptor number */
    peer_entry *entries;
};

peer_table *peer_table_create(int max_per_ip) {
    struct rlimit rl;
    int cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
    peer_table *t = calloc(1, sizeof *t);
    if (!t || !(t->entries = calloc((size_t)cap, sizeof *t->entries))) {
        free(t);
        return NULL;
    }
    t->max_per_ip = max_per_ip;
    t->cap = cap;
    return t;
}

void peer_table_free(peer_table *t) {
    if (!t) return;
    free(t->entries);
    free(t);
}

static int key_of(const struct sockaddr *addr, peer_key *k) {
    memset(k, 0, sizeof *k);
    if (addr->sa_family == AF_INET) {
        k->bytes[10] = k->bytes[11] = 0xff;
        memcpy(k->bytes + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return 0;
    }
    if (addr->sa_family != AF_INET6) return -1;
    const unsigned char *a = ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(k->bytes, a, memcmp(a, mapped, sizeof mapped) == 0 ? 16 : 8);
    return 0;
}

/* Whether fd is still the socket the entry recorded: the same peer address and port. */
static int still_open(int fd, const peer_entry *e) {
    struct sockaddr_storage now;
    socklen_t len = sizeof now;
    return getpeername(fd, (struct sockaddr *)&now, &len) == 0 && len == e->len && memcmp(&now, &e->addr, len) == 0;
}

int peer_table_admit(peer_table *t, int fd, const struct sockaddr *addr, socklen_t len) {
    peer_key k;
    if (fd < 0 || fd >= t->cap || len > sizeof t->entries[0].addr || key_of(addr, &k)) return 1; /* not counted */
    int open = 0;
    for (int i = 0; i < t->cap; i++) {
        peer_entry *e = &t->entries[i];
        if (!e->len || i == fd || memcmp(&e->key, &k, sizeof k)) continue;
        if (still_open(i, e)) open++;
        else e->len = 0;
    }
    if (open >= t->max_per_ip) return 0;
    peer_entry *e = &t->entries[fd];
    e->key = k;
    memset(&e->addr, 0, sizeof e->addr);
    memcpy(&e->addr, addr, len);
    e->len = len;
    return 1;
}
