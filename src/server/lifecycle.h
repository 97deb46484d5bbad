/* lifecycle: signals, the SIGTERM drain and the systemd watchdog.
 *
 * A signal thread owns SIGINT, SIGTERM and SIGHUP (main blocks them in every thread).
 * SIGHUP reopens --log-file, for log rotation, and reloads the TLS certificate (tls.h) and the
 * API keys (apikeys.h). The first SIGTERM or SIGINT starts a drain:
 * new conversations are refused, /health answers 503 "draining", and every open
 * conversation gets an 0x05 "server shutting down" message and a close (1001); the serving
 * loop ends once none is left or after --drain-seconds. A second stop signal ends it at
 * once, and ends the process at once while the model still loads. Under systemd the drain is
 * announced (STOPPING=1), and the watchdog is pinged by an lws timer on the serving thread, so a
 * wedged serving loop stops the pings and systemd restarts the service. */
#ifndef PP_SERVER_LIFECYCLE_H
#define PP_SERVER_LIFECYCLE_H

#include "server/server.h"

/* Starts the signal thread and the watchdog timer; s->ctx must exist. wake(arg) must make
 * lws_service return (any thread). */
int lifecycle_start(server *s, void (*wake)(void *arg), void *arg, char *err);
/* Loader thread: the model is loaded (READY=1 with the status line, unless a stop has begun). */
void lifecycle_ready(const char *status);
/* The SIGTERM/SIGINT signals received so far. */
int lifecycle_stop_requests(void);
/* Service thread, after every lws_service: starts the drain when one was asked for.
 * Returns 1 when the serving loop should end. */
int lifecycle_poll(server *s);
/* Cancels the timers; before lws_context_destroy. */
void lifecycle_stop(void);
/* Joins the signal thread, which counts stop signals until then. */
void lifecycle_join(void);

#endif
