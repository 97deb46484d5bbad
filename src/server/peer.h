/* peer: the client address that log lines name, and the connections each address holds.
 *
 * Directly connected, that is the socket's peer. With --behind-proxy the socket's peer is
 * the proxy, so the address the proxy passes on is used instead: X-Real-IP, else the last
 * entry of X-Forwarded-For (the one the nearest proxy appended; earlier entries come from
 * the client and cannot be trusted). It is only ever logged, never used for access control,
 * and characters outside an IP address are dropped so a header cannot forge log lines. */
#ifndef PP_SERVER_PEER_H
#define PP_SERVER_PEER_H

#include <stddef.h>
#include <sys/socket.h>

struct lws;

/* Writes "ADDR" or, behind a proxy, "ADDR via PROXY" into out. Service thread. */
void peer_address(struct lws *wsi, int behind_proxy, char *out, size_t cap);

/* The open connections of each client address, so that one address (an IPv4 address, an
 * IPv6 /64) cannot hold every descriptor and request slot of the server (--max-per-ip).
 * The table remembers each accepted socket's peer by descriptor; an entry whose descriptor no
 * longer has that peer (closed, or reused) no longer counts, so no close needs reporting.
 * Service thread only. */
typedef struct peer_table peer_table;

/* max_per_ip > 0. Returns NULL when out of memory. */
peer_table *peer_table_create(int max_per_ip);
void peer_table_free(peer_table *t);
/* A connection just accepted on fd from addr: 1 when its address has room (it is then
 * counted), 0 when it already holds max_per_ip connections (refuse it). */
int peer_table_admit(peer_table *t, int fd, const struct sockaddr *addr, socklen_t len);

#endif
