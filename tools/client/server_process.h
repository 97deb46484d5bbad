/* server_process: a personaplex-server run as a child process, and the uplink a client sends
 * it, for the tools and tests that drive a real server (personaplex-loadtest, tests/).
 *
 * Readiness is polled over HTTP with ws_client (wc_init must have been called for the port). */
#ifndef PP_TOOLS_SERVER_PROCESS_H
#define PP_TOOLS_SERVER_PROCESS_H

#include <sys/types.h>

#include "ws_client.h"

/* A loopback TCP port nobody listens on right now, or -1. */
int sp_free_port(void);
/* A plain TCP connection to the loopback port, for what a WebSocket or HTTP client library
 * will not send; rcvbuf > 0 sets its receive buffer (a small one makes a client that does not
 * read back its server up quickly). The fd, or -1. */
int sp_connect(int port, int rcvbuf);
/* Starts argv[0] with argv (NULL-terminated), stdout and stderr to log_path; the child gets
 * SIGTERM when the caller dies. The pid, or -1. */
pid_t sp_spawn(const char *const *argv, const char *log_path);
/* GET path from the server into h (free with wc_http_free); the HTTP status, or -1. */
int sp_get(const char *path, wc_http *h, double timeout_ms);
/* The value of the first line of a /metrics body starting with name and a space (a full sample
 * name with labels, e.g. "personaplex_frames_total"), or -1. */
double sp_metric(const char *body, const char *name);
/* Polls /health until it says ready (1), or the process exits or timeout_s pass (0). */
int sp_wait_ready(pid_t pid, double timeout_s);
/* SIGTERM, then waits (SIGKILL after 30 s). Returns the exit status (128 + signal when killed
 * by one, -1 when it had to be killed). */
int sp_stop(pid_t pid);

/* Uplink messages (0x01 + an Ogg page each): OpusHead, OpusTags, then one page per 80 ms
 * frame of a 24 kHz WAV, looped to `frames` frames. */
typedef struct sp_msgs {
    wc_msg *m;
    int n;
} sp_msgs;
int sp_uplink_wav(const char *wav_path, int frames, sp_msgs *out, char *err);
void sp_msgs_free(sp_msgs *l);

#endif
