/* notify: the systemd service-manager protocol (sd_notify), for a Type=notify unit.
 *
 * Every call is a no-op when the process was not started by systemd (no NOTIFY_SOCKET) or
 * the server was built without libsystemd, so the server behaves the same from a shell. */
#ifndef PP_SERVER_NOTIFY_H
#define PP_SERVER_NOTIFY_H

#include <stdint.h>

/* READY=1 plus a STATUS= line: the model is loaded and conversations are accepted. */
void notify_ready(const char *status);
/* STOPPING=1 plus a STATUS= line: a drain has begun. */
void notify_stopping(const char *status);
/* STATUS= only (shown by `systemctl status`). */
void notify_status(const char *status);
/* The watchdog interval systemd asked for (WatchdogSec=) in microseconds, 0 for none. */
uint64_t notify_watchdog_usec(void);
/* WATCHDOG=1: the serving loop is alive. */
void notify_watchdog(void);

#endif
