/* listen: what --host binds, checked before and after lws opens the listening socket.
 *
 * lws 4.1.6 binds [::] (every interface) when given an IPv4 literal with IPv6 enabled, and given
 * a name or an address the machine lacks it logs, leaves nothing listening and starts anyway. So
 * --host takes a numeric address (or "localhost", which is 127.0.0.1), an IPv4 one turns lws's
 * IPv6 off, the address is tried before the model loads, and the socket lws opened is checked. */
#ifndef PP_SERVER_LISTEN_H
#define PP_SERVER_LISTEN_H

#include <netinet/in.h>

typedef struct listen_addr {
    char host[INET6_ADDRSTRLEN]; /* numeric, as lws gets it */
    int family;                  /* AF_INET or AF_INET6 */
} listen_addr;

/* PP_EINVAL naming --host when host is neither a numeric address nor localhost. */
int listen_addr_parse(const char *host, listen_addr *out, char *err);
/* Binds a throwaway socket to the address: PP_EIO naming it when this machine does not have it. */
int listen_addr_available(const listen_addr *a, char *err);
/* Checks this process's listening TCP socket on port (lws's): PP_EIO when none listens there, or
 * it listens on another address than a. */
int listen_verify(const listen_addr *a, int port, char *err);

#endif
