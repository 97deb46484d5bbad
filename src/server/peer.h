/* peer: the client address that log lines name.
 *
 * Directly connected, that is the socket's peer. With --behind-proxy the socket's peer is
 * the proxy, so the address the proxy passes on is used instead: X-Real-IP, else the last
 * entry of X-Forwarded-For (the one the nearest proxy appended; earlier entries come from
 * the client and cannot be trusted). It is only ever logged, never used for access control,
 * and characters outside an IP address are dropped so a header cannot forge log lines. */
#ifndef PP_SERVER_PEER_H
#define PP_SERVER_PEER_H

#include <stddef.h>

struct lws;

/* Writes "ADDR" or, behind a proxy, "ADDR via PROXY" into out. Service thread. */
void peer_address(struct lws *wsi, int behind_proxy, char *out, size_t cap);

#endif
