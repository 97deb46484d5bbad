/* notify: the service-manager notifications (sent here, without waiting) and libsystemd's
 * watchdog settings (PP_HAVE_SYSTEMD), empty otherwise. */
#include "server/notify.h"

#include "base/log.h"

#include <stdio.h>

#ifdef PP_HAVE_SYSTEMD
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

/* One datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace), never waiting:
 * sd_notify(3) sends on a blocking socket, so a notification socket whose queue is full (a
 * manager that is not reading it: 10 datagrams by default) stalled the serving loop, which sends
 * the watchdog pings, and with it the drain a SIGTERM had started. Returns 0 when not under a
 * manager, -1 with errno when the message was not sent (EAGAIN: the queue is full). */
static int notify_send(const char *msg) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    const size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof a.sun_path) {
        errno = EINVAL;
        return -1;
    }
    memcpy(a.sun_path, path, len);
    if (path[0] == '@') a.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT, (struct sockaddr *)&a,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    const int e = errno;
    close(fd);
    errno = e;
    return n < 0 ? -1 : 1;
}

static void send_state(const char *state, const char *status) {
    static atomic_int warned;
    char msg[600];
    if (status) snprintf(msg, sizeof msg, "%s%sSTATUS=%s", state, *state ? "\n" : "", status);
    else snprintf(msg, sizeof msg, "%s", state);
    /* Said once: a manager that does not read would otherwise fill the log with watchdog pings. */
    if (notify_send(msg) < 0 && atomic_fetch_add(&warned, 1) == 0)
        PP_WARN("notify", "%s not sent to the service manager (%s); later failures are not logged", msg,
                strerror(errno));
}

uint64_t notify_watchdog_usec(void) {
    uint64_t usec = 0;
    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}
#else
static void send_state(const char *state, const char *status) {
    (void)state;
    (void)status;
}

uint64_t notify_watchdog_usec(void) { return 0; }
#endif

void notify_ready(const char *status) { send_state("READY=1", status); }
void notify_stopping(const char *status) { send_state("STOPPING=1", status); }
void notify_status(const char *status) { send_state("", status); }
void notify_watchdog(void) { send_state("WATCHDOG=1", NULL); }
