/* notify: thin wrappers over libsystemd's sd_notify (PP_HAVE_SYSTEMD), empty otherwise. */
#include "server/notify.h"

#include "base/log.h"

#include <stdio.h>

#ifdef PP_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

static void send_state(const char *state, const char *status) {
    char msg[600];
    if (status) snprintf(msg, sizeof msg, "%s%sSTATUS=%s", state, *state ? "\n" : "", status);
    else snprintf(msg, sizeof msg, "%s", state);
    /* < 0 is a real failure; 0 only means "not under systemd". */
    if (sd_notify(0, msg) < 0) PP_WARN("notify", "sd_notify(%s) failed", state);
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
