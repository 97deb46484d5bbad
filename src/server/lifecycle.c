/* lifecycle: the signal thread, the drain state machine and the watchdog timer. */
#include "server/lifecycle.h"

#include "base/clock.h"
#include "base/log.h"
#include "server/conn.h"
#include "server/notify.h"
#include "server/tls.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>

/* Process-wide like the signals they stand for. */
static atomic_int g_stop_requests; /* SIGTERM/SIGINT received so far */
static atomic_int g_exiting;       /* lifecycle_join: the signal thread returns */
static atomic_int g_reload;        /* SIGHUP: reload the certificate and API keys on the service thread */
static pthread_t g_thread;
static int g_have_thread;
static void (*g_wake)(void *);
static void *g_wake_arg;
static const char *g_log_file;
static struct lws_context *g_ctx;  /* service thread only from here on */
static lws_sorted_usec_list_t g_watchdog_sul, g_deadline_sul;
static uint64_t g_watchdog_usec;
static int64_t g_deadline_ns;
/* READY=1 (loader thread) never after STOPPING=1 (service thread): a load that ends during the
 * drain would tell systemd the stopping service is up. */
static pthread_mutex_t g_notify_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_stopping;

static void *signal_main(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    int sig;
    while (!g_exiting && sigwait(&set, &sig) == 0) {
        if (g_exiting) break;
        if (sig == SIGHUP) {
            /* pp_log_open swaps the sink under its lock: no line is lost or split. */
            if (g_log_file && pp_log_open(g_log_file) != 0)
                fprintf(stderr, "personaplex-server: SIGHUP: cannot reopen %s\n", g_log_file);
            PP_INFO("server", "SIGHUP: log reopened");
            g_reload = 1;
            g_wake(g_wake_arg);
            continue;
        }
        int n = ++g_stop_requests;
        PP_INFO("server", "signal %d: %s", sig, n == 1 ? "draining" : "stopping now");
        g_wake(g_wake_arg);
    }
    return NULL;
}

static void watchdog_cb(lws_sorted_usec_list_t *sul) {
    notify_watchdog();
    /* Twice per interval, as sd_watchdog_enabled(3) advises. */
    lws_sul_schedule(g_ctx, 0, sul, watchdog_cb, (lws_usec_t)(g_watchdog_usec / 2));
}

/* Only wakes the serving loop at the drain deadline; lifecycle_poll does the rest. */
static void deadline_cb(lws_sorted_usec_list_t *sul) { (void)sul; }

int lifecycle_start(server *s, void (*wake)(void *arg), void *arg, char *err) {
    g_wake = wake;
    g_wake_arg = arg;
    g_log_file = s->opt->log_file;
    g_ctx = s->ctx;
    g_watchdog_usec = notify_watchdog_usec();
    if (g_watchdog_usec) {
        PP_INFO("server", "systemd watchdog: pinging every %.1f s", (double)g_watchdog_usec / 2e6);
        watchdog_cb(&g_watchdog_sul);
    }
    if (pthread_create(&g_thread, NULL, signal_main, NULL) != 0)
        return pp_fail(err, PP_ENOMEM, "cannot start the signal thread");
    g_have_thread = 1;
    return PP_OK;
}

void lifecycle_ready(const char *status) {
    pthread_mutex_lock(&g_notify_lock);
    if (!g_stopping) notify_ready(status);
    pthread_mutex_unlock(&g_notify_lock);
}

int lifecycle_stop_requests(void) { return g_stop_requests; }

int lifecycle_poll(server *s) {
    char err[PP_ERR_LEN];
    if (atomic_exchange(&g_reload, 0)) {
        if (s->cert_path && tls_reload(s->ctx, s->cert_path, s->key_path, err))
            PP_ERROR("tls", "SIGHUP: certificate not reloaded, the old one stays in use: %s", err);
        if (s->keys && apikeys_reload(s->keys, err))
            PP_ERROR("server", "SIGHUP: API keys not reloaded, the old ones stay in force: %s", err);
    }
    int requests = g_stop_requests;
    if (requests >= 2) return 1;
    if (requests == 1 && !server_draining(s)) {
        server_start_draining(s);
        int open = ws_close_all(s, CLOSE_GOING_AWAY, "server shutting down");
        char status[128];
        snprintf(status, sizeof status, "draining %d conversation%s", open, open == 1 ? "" : "s");
        pthread_mutex_lock(&g_notify_lock);
        g_stopping = 1;
        notify_stopping(status);
        pthread_mutex_unlock(&g_notify_lock);
        PP_INFO("server", "%s (at most %d s)", status, s->opt->drain_seconds);
        g_deadline_ns = pp_now_ns() + (int64_t)s->opt->drain_seconds * 1000000000;
        lws_sul_schedule(g_ctx, 0, &g_deadline_sul, deadline_cb, (lws_usec_t)s->opt->drain_seconds * 1000000);
    }
    if (!server_draining(s)) return 0;
    if (!s->live) return 1;
    if (pp_now_ns() >= g_deadline_ns) {
        PP_WARN("server", "drain timed out after %d s; closing the remaining conversations", s->opt->drain_seconds);
        return 1;
    }
    return 0;
}

void lifecycle_stop(void) {
    if (g_ctx) {
        lws_sul_cancel(&g_watchdog_sul);
        lws_sul_cancel(&g_deadline_sul);
    }
}

void lifecycle_join(void) {
    if (g_have_thread) {
        g_exiting = 1;
        pthread_kill(g_thread, SIGTERM);
        pthread_join(g_thread, NULL);
        g_have_thread = 0;
    }
}
