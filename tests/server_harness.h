/* server_harness: `personaplex-server --demo` as a child process for the network tests, and
 * what they measure on it.
 *
 * sh_start runs the server on a free loopback port in a fresh temporary state directory, its
 * output in DIR/server.log, with the test's extra options; the child dies with the test
 * (PR_SET_PDEATHSIG). sh_stop sends SIGTERM and returns the exit status, which is how the
 * sanitizer builds fail a test on a leak or a report inside the server (a status other than
 * 0). The rest reads the process (/proc RSS and open fds), the server (/health, /metrics
 * through ws_client's wc_http) and builds uplink audio (a WAV as Ogg Opus pages, one 80 ms
 * packet per page, each an 0x01 message). */
#ifndef PP_TESTS_SERVER_HARNESS_H
#define PP_TESTS_SERVER_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server_process.h" /* sp_free_port, sp_get, sp_stop, sp_uplink_wav, sp_msgs */
#include "ws_client.h"

typedef struct sh_server {
    pid_t pid;
    int port, tls;
    char dir[256]; /* state directory; server.log inside */
} sh_server;

/* Starts `bin --demo` (--no-tls unless tls) with extra (NULL-terminated, may be NULL) options
 * and waits until /health says ready; wc_init must not have been called yet (it is called
 * here with the server's port). Returns 0, or -1 when it never became ready. */
int sh_start(sh_server *s, const char *bin, int tls, const char *const *extra);
/* SIGTERM, then waits (SIGKILL after 30 s). Returns the exit status (128 + signal when killed
 * by one, -1 when it had to be killed). */
int sh_stop(sh_server *s);
/* Removes the state directory, or keeps it when keep, printing where and the log's tail. */
void sh_cleanup(sh_server *s, int keep);

/* How many lines of the server's log contain text. */
int sh_log_count(const sh_server *s, const char *text);
/* VmRSS in kB and the number of open file descriptors of the server, -1 on error. */
long sh_rss_kb(const sh_server *s);
int sh_fd_count(const sh_server *s);
/* The server's /metrics sample `name` (sp_metric), or -1. */
double sh_metric(const char *name);
/* The "active" count of /health, or -1. */
int sh_active(void);

/* The audio pages of a reply stream, or -1 (and a line on stderr) when it is broken: the
 * OpusHead page as the browser reads it (one lacing value, mono), OpusTags, serial, page
 * sequence, CRC, and one 80 ms packet per audio page. */
int sh_reply_pages(const wc_conn *c);
/* Largest gap between consecutive audio pages of a reply, in ms. */
double sh_max_gap_ms(const wc_conn *c);

#endif
