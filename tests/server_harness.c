/* server_harness: the demo server as a child process, and measurements on it (see the header). */
#define _DEFAULT_SOURCE
#include "server_harness.h"

#include "audio/opus.h"
#include "audio/wav.h"
#include "base/err.h"
#include "test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <ogg/ogg.h>
#include <opus/opus.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int sh_start(sh_server *s, const char *bin, int tls, const char *const *extra) {
    memset(s, 0, sizeof *s);
    s->tls = tls;
    snprintf(s->dir, sizeof s->dir, "/tmp/pp-test-XXXXXX");
    if (!mkdtemp(s->dir) || (s->port = sp_free_port()) < 0) return -1;
    char port[16], log[300];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(log, sizeof log, "%s/server.log", s->dir);
    const char *argv[64] = {bin, "--demo", "--host", "127.0.0.1", "--port", port, "--state-dir", s->dir, "--log-level",
                            "debug"};
    int n = 10;
    if (!tls) argv[n++] = "--no-tls";
    for (int i = 0; extra && extra[i] && n < 63; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    s->pid = sp_spawn(argv, log);
    if (s->pid < 0 || wc_init(tls, s->port)) return -1;
    return sp_wait_ready(s->pid, 60) ? 0 : -1;
}

int sh_stop(sh_server *s) { return sp_stop(s->pid); }

void sh_cleanup(sh_server *s, int keep) {
    if (keep) { /* the tail shows a sanitizer report or the last errors in CI's output */
        char cmd[400];
        fprintf(stderr, "server log kept: %s/server.log; its last lines:\n", s->dir);
        snprintf(cmd, sizeof cmd, "tail -n 40 '%s/server.log' >&2", s->dir);
        if (system(cmd) != 0) fprintf(stderr, "(cannot read it)\n");
        return;
    }
    test_remove_dir(s->dir);
}

int sh_log_count(const sh_server *s, const char *text) {
    char path[300], line[4096];
    snprintf(path, sizeof path, "%s/server.log", s->dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, text) != NULL;
    if (f) fclose(f);
    return n;
}

long sh_rss_kb(const sh_server *s) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

int sh_fd_count(const sh_server *s) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)s->pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

double sh_metric(const char *name) {
    wc_http h;
    double v = sp_get("/metrics", &h, 5000) == 200 ? sp_metric(h.body, name) : -1;
    wc_http_free(&h);
    return v;
}

int sh_active(void) {
    wc_http h;
    int active = -1;
    if (sp_get("/health", &h, 5000) >= 0 && h.body) {
        const char *p = strstr(h.body, "\"active\":");
        if (p) active = atoi(p + 9);
    }
    wc_http_free(&h);
    return active;
}

int sh_reply_pages(const wc_conn *c) {
    ogg_sync_state sy;
    ogg_sync_init(&sy);
    memcpy(ogg_sync_buffer(&sy, (long)c->out_len), c->out, c->out_len);
    ogg_sync_wrote(&sy, (long)c->out_len);
    ogg_page pg;
    int pages = 0, audio = 0, bad = 0, r;
    long serial = -1;
    while ((r = ogg_sync_pageout(&sy, &pg)) != 0) {
        if (r < 0) { /* lost sync: a bad CRC or bytes between pages */
            bad++;
            continue;
        }
        if (serial < 0) serial = ogg_page_serialno(&pg);
        if (ogg_page_serialno(&pg) != serial || ogg_page_pageno(&pg) != pages) bad++;
        if (pages == 0) {
            /* The browser reads the channel count at page offset 37: one lacing value. */
            if (!ogg_page_bos(&pg) || pg.header_len != 28 || pg.body_len != 19 || memcmp(pg.body, "OpusHead", 8) ||
                pg.body[9] != 1)
                bad++;
        } else if (pages == 1) {
            if (ogg_page_bos(&pg) || pg.body_len < 8 || memcmp(pg.body, "OpusTags", 8)) bad++;
        } else {
            if (ogg_page_packets(&pg) != 1 ||
                opus_packet_get_nb_samples(pg.body, pg.body_len, PP_SAMPLE_RATE) != PP_FRAME_SAMPLES)
                bad++;
            else
                audio++;
        }
        pages++;
    }
    ogg_sync_clear(&sy);
    if (bad) fprintf(stderr, "reply stream: %d bad pages of %d\n", bad, pages);
    return bad ? -1 : audio;
}

double sh_max_gap_ms(const wc_conn *c) {
    double max = 0;
    for (int i = 3; i < c->n_out; i++) { /* audio pages follow the two header pages */
        double d = (double)(c->out_times[i] - c->out_times[i - 1]) / 1e6;
        if (d > max) max = d;
    }
    return max;
}
