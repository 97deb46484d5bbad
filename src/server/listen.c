/* listen: --host parsed, tried and verified. */
#include "server/listen.h"

#include "base/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

int listen_addr_parse(const char *host, listen_addr *out, char *err) {
    unsigned char buf[sizeof(struct in6_addr)];
    /* the one name everybody expects to work; resolving others could bind an address nobody asked for */
    const char *numeric = strcmp(host, "localhost") == 0 ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, numeric, buf) == 1) out->family = AF_INET;
    else if (inet_pton(AF_INET6, numeric, buf) == 1) out->family = AF_INET6;
    else
        return pp_fail(err, PP_EINVAL, "--host: '%s' is not a numeric IPv4 or IPv6 address (or localhost)", host);
    snprintf(out->host, sizeof out->host, "%s", numeric);
    return PP_OK;
}

/* a's address with port 0 in ss; its length. */
static socklen_t to_sockaddr(const listen_addr *a, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    if (a->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        inet_pton(AF_INET, a->host, &in->sin_addr);
        return sizeof *in;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    in6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, a->host, &in6->sin6_addr);
    return sizeof *in6;
}

int listen_addr_available(const listen_addr *a, char *err) {
    struct sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, &ss);
    int fd = socket(a->family, SOCK_STREAM, 0);
    if (fd < 0) return pp_fail(err, PP_EIO, "--host %s: cannot make a socket: %s", a->host, strerror(errno));
    int rc = bind(fd, (struct sockaddr *)&ss, len);
    int e = errno;
    close(fd);
    if (rc) return pp_fail(err, PP_EIO, "--host %s: cannot bind it: %s (not an address of this machine?)", a->host,
                           strerror(e));
    return PP_OK;
}

/* The address part of a bound socket equals a's. */
static int same_address(const listen_addr *a, const struct sockaddr_storage *got) {
    struct sockaddr_storage want;
    to_sockaddr(a, &want);
    if (got->ss_family != a->family) return 0;
    if (a->family == AF_INET)
        return ((const struct sockaddr_in *)got)->sin_addr.s_addr == ((struct sockaddr_in *)&want)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)got)->sin6_addr, &((struct sockaddr_in6 *)&want)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
}

int listen_verify(const listen_addr *a, int port, char *err) {
    /* lws 4.1.6 does not hand out its listening socket: it is the process's accepting TCP socket on
     * the port lws reports (one inherited from a parent may be on another) */
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
    for (int fd = 0; fd < max; fd++) {
        int accepting = 0;
        socklen_t olen = sizeof accepting;
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &olen) || !accepting ||
            getsockname(fd, (struct sockaddr *)&ss, &len) || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
            continue;
        int v4 = ss.ss_family == AF_INET;
        if (ntohs(v4 ? ((struct sockaddr_in *)&ss)->sin_port : ((struct sockaddr_in6 *)&ss)->sin6_port) != port)
            continue;
        if (same_address(a, &ss)) return PP_OK;
        char got[INET6_ADDRSTRLEN] = "?";
        inet_ntop(ss.ss_family, v4 ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                   : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
                  got, sizeof got);
        return pp_fail(err, PP_EIO, "--host %s: the server listens on %s instead", a->host, got);
    }
    return pp_fail(err, PP_EIO, "--host %s: nothing listens on port %d (see lws's message above)", a->host, port);
}
