/* personaplex-loadtest: N simulated clients on one personaplex-server over loopback WebSockets.
 *
 *   personaplex-loadtest (--server BINARY | --port P) [--tls] [--clients N] [--seconds S]
 *                        [--wav FILE] [--slack MS] [--query Q] [--burst N [--burst-at S]]
 *                        [--server-arg ARG]... [--ticks-from S] [--max-latency MS] [--fail-on-input-loss]
 *
 * Each client opens /api/chat (plus ?Q), waits for the 0x00 handshake, then streams a 24 kHz
 * mono WAV (looped to S seconds; default tests/data/golden/speech-24k.wav) as Ogg Opus — the
 * downlink encoder's OpusHead and OpusTags pages, then one 80 ms page every 80 ms, as a browser
 * does — and records every reply message with its arrival time (tests/ws_client.c's lws
 * client, all clients on one lws context). Per client and over all clients it reports: the
 * handshake time after the upgrade; inter-arrival of the reply's audio pages (p50/p90/p99,
 * max) and late pages (a gap over 80 ms + slack); reply latency, from the sending of the frame a
 * page answers to the page's arrival (p50/p99/max), and pages behind (a latency over 80 ms +
 * slack: a server slower than real time keeps its gaps even while it falls behind); audio
 * continuity: a valid Ogg stream (one page per message, OpusHead/OpusTags, one serial, page
 * sequence without gaps, CRCs) with an audio page for every frame sent (less the one frame of Opus pre-skip the server drops).
 * --burst N opens N more clients all at once S seconds into the run (default a third of it);
 * each runs its prompts (a text prompt of its own, about 150 tokens, unless --query has one:
 * the prompt cache cannot answer for it), sends the two header pages and leaves half a second after its
 * handshake. The report then gives the page gaps of the first (live) clients apart, and the
 * joiners' handshake times: how a crowd joining disturbs conversations already running.
 * The server's own account of the run follows, from its /metrics before and after: how many
 * batched LM ticks ran, of how many conversations, and their times, and the host work of those
 * ticks (each conversation's echo cancellation and downlink encoding); then its conversation
 * frames' time from input complete to output queued (the codec and any wait included). Each
 * as mean, share within a frame, p50 and p99 to the histograms' bounds. With --ticks-from S,
 * the same again for the run's end from S seconds on (e.g. once every conversation's ring holds
 * the model's full context: that context less its prompt frames, plus the handshakes). With
 * --server it starts `BINARY --demo` on a free loopback port (--no-tls unless --tls), adding
 * each --server-arg (e.g. --demo-size released), and stops it with SIGTERM afterwards.
 *
 * Continuous streams do not prove the model heard the clients' audio: a server that dropped some
 * (its uplink full while it fell behind) or heard silence while it came late still answers one
 * page per frame, the silence it fed the model filling the count. So the report ends with the
 * server's own account from /metrics (personaplex_uplink_*_total, over the whole server): frames
 * of silence heard between a client's frames, samples dropped, packets concealed.
 *
 * Exit status 0 when every client got its handshake and a continuous stream of every frame;
 * timing is reported, not judged (slow machines are slow, not broken), unless --max-latency MS
 * sets a goal: then exit status 3 when the (live) clients' reply latency p99 passes MS, every
 * page counted, the first ones and a backlog too (an acceptance run's pass or fail); and with
 * --fail-on-input-loss, exit status 4 when the streams are continuous but the server did not
 * hear all of the clients' audio as sent (or does not say). */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700 /* nftw */
#include "server_process.h"
#include "ws_client.h"

#include "audio/opus.h"
#include "audio/wav.h"
#include "base/err.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <ogg/ogg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PP_TEST_DATA
#define PP_TEST_DATA "tests/data"
#endif

#define FRAME_MS 80.0
#define MAX_CLIENTS 256
#define JOINER_STAY_MS 500 /* a joiner's time after its handshake */
#define MAX_SERVER_ARGS 8
#define READY_TIMEOUT_S 300 /* the released-size demo is written and calibrated first */
#define HIST_BOUNDS 16      /* at least the server's histograms' bounds */

typedef struct lt_opts {
    const char *server, *wav, *query;
    const char *server_args[MAX_SERVER_ARGS];
    int port, tls, clients, burst, n_server_args;
    double seconds, slack_ms, burst_at, ticks_from;
    double max_latency_ms; /* --max-latency: the goal for the reply latency's p99 (0: none) */
    int fail_on_input_loss; /* --fail-on-input-loss: exit 4 unless the server heard all the audio as sent */
} lt_opts;

/* ---- the server process (--server) ---- */

static pid_t start_server(const lt_opts *o, const char *dir) {
    char port[16], max[16], log[600];
    snprintf(port, sizeof port, "%d", o->port);
    snprintf(max, sizeof max, "%d", o->clients + o->burst);
    snprintf(log, sizeof log, "%s/server.log", dir);
    const char *argv[16 + MAX_SERVER_ARGS] = {
        o->server, "--demo", "--host", "127.0.0.1", "--port", port, "--state-dir", dir, "--max-sessions", max,
        "--max-per-ip", "0" /* every client comes from this machine */};
    int argc = 12;
    if (!o->tls) argv[argc++] = "--no-tls";
    for (int i = 0; i < o->n_server_args; i++) argv[argc++] = o->server_args[i];
    return sp_spawn(argv, log);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- what came back ---- */

typedef struct lt_result {
    int audio_pages, bad_pages; /* pages after the two header pages; pages out of order or invalid */
    int late, behind;           /* pages after a gap over the limit; pages answering over the limit */
    double handshake_ms, p50, p90, p99, max;
    double lag_p50, lag_p99, lag_max; /* reply latency: input frame sent to its page back, ms */
} lt_result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, int n, double p) { return n ? sorted[(int)(p * (n - 1) + 0.5)] : 0; }

/* Ogg continuity of the reply (libogg checks each CRC): headers first, one serial, sequence
 * numbers 0, 1, 2, ... without gaps. */
static void continuity(const wc_conn *c, lt_result *r) {
    ogg_sync_state sy;
    ogg_sync_init(&sy);
    if (c->out_len) {
        memcpy(ogg_sync_buffer(&sy, (long)c->out_len), c->out, c->out_len);
        ogg_sync_wrote(&sy, (long)c->out_len);
    }
    ogg_page pg;
    long serial = -1, pages = 0;
    int got;
    while ((got = ogg_sync_pageout(&sy, &pg)) != 0) {
        if (got < 0) { /* bytes between pages or a bad CRC */
            r->bad_pages++;
            continue;
        }
        if (serial < 0) serial = ogg_page_serialno(&pg);
        int head_ok = pages == 0   ? ogg_page_bos(&pg) && pg.body_len >= 8 && !memcmp(pg.body, "OpusHead", 8)
                      : pages == 1 ? pg.body_len >= 8 && !memcmp(pg.body, "OpusTags", 8)
                                   : ogg_page_packets(&pg) == 1;
        if (ogg_page_serialno(&pg) != serial || ogg_page_pageno(&pg) != pages || !head_ok) r->bad_pages++;
        else if (pages >= 2) r->audio_pages++;
        pages++;
    }
    ogg_sync_clear(&sy);
    r->bad_pages += c->bad_pages;
}

/* The page gaps (inter-arrival of audio pages) and reply latencies of c into r, each also appended
 * to all / all_lag. Gaps show jitter but not a server slower than real time: at 88 ms a frame its
 * pages come evenly spaced while each is later than the last, so a page's latency is counted from
 * the moment the frame it answers was sent (audio page k answers uplink frame k + the pre-skip
 * frames the server drops), and the first pages and a growing backlog count too. */
static int timing(const wc_conn *c, double slack_ms, lt_result *r, double *all, int *n_all, double *all_lag,
                  int *n_all_lag) {
    r->handshake_ms = c->handshakes ? (double)(c->t_handshake - c->t_established) / 1e6 : -1;
    const int dropped = PP_DOWNLINK_PRESKIP / 2 / PP_FRAME_SAMPLES;
    int n = 0, n_lag = 0;
    double *gaps = malloc((size_t)(c->n_out > 0 ? c->n_out : 1) * sizeof *gaps);
    double *lags = malloc((size_t)(c->n_out > 0 ? c->n_out : 1) * sizeof *lags);
    if (!gaps || !lags) {
        free(gaps), free(lags);
        return -1;
    }
    for (int i = 2; i < c->n_out; i++) { /* the two header pages come first */
        if (i > 2) {
            double d = (double)(c->out_times[i] - c->out_times[i - 1]) / 1e6;
            gaps[n++] = d;
            all[(*n_all)++] = d;
            r->late += d > FRAME_MS + slack_ms;
        }
        int frame = i - 2 + dropped;
        if (frame < c->next_audio && c->audio_sent_at) {
            double d = (double)(c->out_times[i] - c->audio_sent_at[frame]) / 1e6;
            lags[n_lag++] = d;
            all_lag[(*n_all_lag)++] = d;
            r->behind += d > FRAME_MS + slack_ms;
        }
    }
    qsort(gaps, (size_t)n, sizeof *gaps, cmp_double);
    r->p50 = pct(gaps, n, 0.5);
    r->p90 = pct(gaps, n, 0.9);
    r->p99 = pct(gaps, n, 0.99);
    r->max = n ? gaps[n - 1] : 0;
    qsort(lags, (size_t)n_lag, sizeof *lags, cmp_double);
    r->lag_p50 = pct(lags, n_lag, 0.5);
    r->lag_p99 = pct(lags, n_lag, 0.99);
    r->lag_max = n_lag ? lags[n_lag - 1] : 0;
    free(gaps), free(lags);
    return 0;
}

/* ---- the run ---- */

#define MAX_SECONDS 86400.0 /* a day of frames still counts in an int */

/* *out = v when v is all a number in [lo, hi] (a whole one when whole); else says which option
 * it was given to and returns -1 (atoi read "2x" as 2 and "1e12" s overflowed the frame count). */
static int number(const char *opt, const char *v, double lo, double hi, int whole, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi) || (whole && x != (double)(long)x)) {
        fprintf(stderr, "loadtest: %s takes a %s in [%g, %g], not '%s'\n", opt, whole ? "whole number" : "number", lo,
                hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* 0, or 1 for -h/--help, or -1 for a usage error. */
static int parse(int argc, char **argv, lt_opts *o) {
    *o = (lt_opts){.wav = PP_TEST_DATA "/golden/speech-24k.wav", .query = "", .clients = 3, .seconds = 10,
                   .slack_ms = 40, .burst_at = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return 1;
        if (strcmp(a, "--tls") == 0) {
            o->tls = 1;
            continue;
        }
        if (strcmp(a, "--fail-on-input-loss") == 0) {
            o->fail_on_input_loss = 1;
            continue;
        }
        if (!v) return -1;
        i++;
        double x = 0;
        if (strcmp(a, "--server") == 0) o->server = v;
        else if (strcmp(a, "--port") == 0) {
            if (number(a, v, 1, 65535, 1, &x)) return -1;
            o->port = (int)x;
        } else if (strcmp(a, "--clients") == 0) {
            if (number(a, v, 1, MAX_CLIENTS, 1, &x)) return -1;
            o->clients = (int)x;
        } else if (strcmp(a, "--burst") == 0) {
            if (number(a, v, 0, MAX_CLIENTS, 1, &x)) return -1;
            o->burst = (int)x;
        } else if (strcmp(a, "--seconds") == 0) {
            if (number(a, v, 0.08, MAX_SECONDS, 0, &o->seconds)) return -1;
        } else if (strcmp(a, "--slack") == 0) {
            if (number(a, v, 0, 1e3 * MAX_SECONDS, 0, &o->slack_ms)) return -1;
        } else if (strcmp(a, "--burst-at") == 0) {
            if (number(a, v, 0, MAX_SECONDS, 0, &o->burst_at)) return -1;
        } else if (strcmp(a, "--ticks-from") == 0) {
            if (number(a, v, 0, MAX_SECONDS, 0, &o->ticks_from)) return -1;
        } else if (strcmp(a, "--max-latency") == 0) {
            if (number(a, v, 1, 1e3 * MAX_SECONDS, 0, &o->max_latency_ms)) return -1;
        } else if (strcmp(a, "--wav") == 0) o->wav = v;
        else if (strcmp(a, "--query") == 0) o->query = v;
        else if (strcmp(a, "--server-arg") == 0 && o->n_server_args < MAX_SERVER_ARGS)
            o->server_args[o->n_server_args++] = v;
        else return -1;
    }
    if (o->burst_at < 0) o->burst_at = o->seconds / 3;
    int where = (o->server != NULL) + (o->port > 0);
    if ((o->n_server_args && !o->server) || o->ticks_from < 0 || o->ticks_from >= o->seconds) return -1;
    return where == 1 && o->clients >= 1 && o->burst >= 0 && o->clients + o->burst <= MAX_CLIENTS && o->seconds > 0
               ? 0
               : -1;
}

/* ---- the server's account (/metrics) ---- */

/* One /metrics histogram: cumulative counts at each upper bound. */
typedef struct lt_hist {
    double le[HIST_BOUNDS], cum[HIST_BOUNDS]; /* le in ms; the last bound is +Inf */
    int n;
    double count, sum_s;
} lt_hist;

/* The LM ticks (personaplex_tick_seconds, and the batch sizes' sum) and the conversation frames'
 * time from input complete to output queued, codec and waiting included (the "frame" stage). */
typedef struct lt_metrics {
    lt_hist tick, frame;
    lt_hist host; /* the ticks' per-conversation host work; count 0 from a server without it */
    double batch_sum;
    int have_ticks; /* the tick and frame histograms were there */
    /* Client audio the model did not hear as sent (metrics.h, metrics_uplink_loss); -1 when the
     * server does not export it. */
    double silent_frames, dropped_samples, concealed_packets;
} lt_metrics;

/* Histogram `name` with the label `label` ("" for none) from a /metrics body; 0 when found. */
static int parse_hist(const char *body, const char *name, const char *label, lt_hist *h) {
    char key[160];
    memset(h, 0, sizeof *h);
    int len = snprintf(key, sizeof key, "%s_bucket{%s%sle=\"", name, label, *label ? "," : "");
    for (const char *p = body; p && (p = strstr(p, key)) && h->n < HIST_BOUNDS;) {
        p += len;
        h->le[h->n] = strncmp(p, "+Inf", 4) == 0 ? 1e300 : 1e3 * atof(p);
        const char *value = strstr(p, "} ");
        if (value) h->cum[h->n++] = atof(value + 2);
    }
    const char *open = *label ? "{" : "", *close = *label ? "}" : "";
    snprintf(key, sizeof key, "%s_count%s%s%s", name, open, label, close);
    h->count = sp_metric(body, key);
    snprintf(key, sizeof key, "%s_sum%s%s%s", name, open, label, close);
    h->sum_s = sp_metric(body, key);
    return h->n > 0 && h->count >= 0 ? 0 : -1;
}

/* 0 with m filled from a /metrics request (its tick figures, its uplink counters, or both), or
 * its HTTP status (-1: no answer or not ours) when it failed (an --api-keys server asks for a key
 * the load test does not have). */
static int parse_metrics(const wc_http *h, lt_metrics *m) {
    int status = h->done ? h->status : -1; /* 0 when the connection closed before an answer */
    if (status != 200 || !h->body) return status > 0 && status != 200 ? status : -1;
    m->silent_frames = sp_metric(h->body, "personaplex_uplink_silent_frames_total");
    m->dropped_samples = sp_metric(h->body, "personaplex_uplink_dropped_samples_total");
    m->concealed_packets = sp_metric(h->body, "personaplex_uplink_concealed_packets_total");
    m->batch_sum = sp_metric(h->body, "personaplex_tick_batch_size_sum");
    m->have_ticks = !parse_hist(h->body, "personaplex_tick_seconds", "", &m->tick) &&
                    !parse_hist(h->body, "personaplex_frame_stage_seconds", "stage=\"frame\"", &m->frame);
    parse_hist(h->body, "personaplex_tick_host_seconds", "", &m->host);
    return m->have_ticks || m->silent_frames >= 0 ? 0 : -1;
}

static int fetch_metrics(lt_metrics *m) {
    wc_http h;
    sp_get("/metrics", &h, 10e3);
    int rc = parse_metrics(&h, m);
    wc_http_free(&h);
    return rc;
}

/* after less before, bucket by bucket. */
static lt_hist hist_between(const lt_hist *before, const lt_hist *after) {
    lt_hist d = *after;
    for (int b = 0; b < d.n; b++) d.cum[b] -= b < before->n ? before->cum[b] : 0;
    d.count -= before->count;
    d.sum_s -= before->sum_s;
    return d;
}

/* Prints "mean, share within a frame, p50 and p99 to the histogram's bounds" of d. */
static void print_hist(const lt_hist *d) {
    double within = 0;
    for (int b = 0; b < d->n; b++)
        if (d->le[b] <= FRAME_MS) within = d->cum[b];
    printf("mean %.1f ms, %.1f %% within %.0f ms", 1e3 * d->sum_s / d->count, 100 * within / d->count, FRAME_MS);
    static const double quantiles[] = {0.5, 0.99};
    for (int q = 0; q < 2; q++) {
        int b = 0;
        while (b < d->n - 1 && d->cum[b] < quantiles[q] * d->count) b++;
        double lo = b ? d->le[b - 1] : 0, hi = d->le[b];
        if (hi > 1e299) printf("; p%.0f > %g ms", 100 * quantiles[q], lo);
        else printf("; p%.0f in (%g, %g] ms", 100 * quantiles[q], lo, hi);
    }
    printf("\n");
}

/* What the server did between two snapshots of it. */
static void report_metrics(const char *who, const lt_metrics *before, const lt_metrics *after) {
    if (!before->have_ticks || !after->have_ticks) {
        printf("%s: no LM ticks in its /metrics (not a personaplex-server?)\n", who);
        return;
    }
    lt_hist tick = hist_between(&before->tick, &after->tick), frame = hist_between(&before->frame, &after->frame);
    if (tick.count <= 0 || frame.count <= 0) {
        printf("%s: no LM ticks ran\n", who);
        return;
    }
    printf("%s: %.0f LM ticks of %.1f conversations on average: ", who, tick.count,
           (after->batch_sum - before->batch_sum) / tick.count);
    print_hist(&tick);
    lt_hist host = hist_between(&before->host, &after->host);
    if (host.count > 0) {
        printf("%s: the same ticks' host work (echo cancellation, downlink encoding, queueing): ", who);
        print_hist(&host);
    }
    printf("%s: %.0f conversation frames, input to output (codec and waiting included): ", who, frame.count);
    print_hist(&frame);
}

/* What the server says of the clients' audio between two snapshots: whether the model heard it
 * all as it was sent. Returns 1 when some was not (silence heard between a client's frames, audio
 * dropped from a full uplink, packets concealed), 0 when all was, -1 when the server does not
 * say. Counted over the whole server: with --port, other clients' audio counts too. */
static int report_uplink(const lt_metrics *before, const lt_metrics *after) {
    if (before->silent_frames < 0 || after->silent_frames < 0 || after->dropped_samples < 0 ||
        after->concealed_packets < 0) {
        printf("server: its /metrics does not say whether it heard the clients' audio as sent\n");
        return -1;
    }
    double silent = after->silent_frames - before->silent_frames;
    double dropped = after->dropped_samples - before->dropped_samples;
    double concealed = after->concealed_packets - before->concealed_packets;
    if (silent <= 0 && dropped <= 0 && concealed <= 0) {
        printf("server: heard all of the clients' audio as it was sent\n");
        return 0;
    }
    printf("server: did NOT hear all of the clients' audio as sent: %.0f frames of silence between their frames "
           "(their audio came late), %.0f samples (%.2f s) dropped from full uplinks, %.0f packets concealed\n",
           silent, dropped, dropped / PP_SAMPLE_RATE, concealed);
    return 1;
}

/* Prints the summary of clients [from, to) whose page gaps are all[0..n_all) and reply latencies
 * all_lag[0..n_lag). */
static void summary(const char *who, int from, int to, int frames, double limit_ms, double *all, int n_all, int late,
                    double *all_lag, int n_lag, int behind, int ok) {
    qsort(all, (size_t)n_all, sizeof *all, cmp_double);
    qsort(all_lag, (size_t)n_lag, sizeof *all_lag, cmp_double);
    printf("%s %d clients, %d frames each: page gaps p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; "
           "late (> %.0f ms) %d of %d; reply latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; behind (> %.0f ms) %d "
           "of %d; streams %s\n",
           who, to - from, frames, pct(all, n_all, 0.5), pct(all, n_all, 0.9), pct(all, n_all, 0.99),
           n_all ? all[n_all - 1] : 0, limit_ms, late, n_all, pct(all_lag, n_lag, 0.5), pct(all_lag, n_lag, 0.99),
           n_lag ? all_lag[n_lag - 1] : 0, limit_ms, behind, n_lag, ok ? "continuous" : "BROKEN");
}

/* Runs the clients against the server on o->port, with the request `extra` (NULL: none) beside
 * them; prints the report; 0 when all continuous, 1 when not, 3 when continuous but the reply
 * latency's p99 passed --max-latency. */
static int drive(const lt_opts *o, const wc_msg *head, const wc_msg *audio, int frames, wc_http *extra) {
    char path[1024];
    snprintf(path, sizeof path, "/api/chat%s%s", *o->query ? "?" : "", o->query);
    int n = o->clients + o->burst;
    wc_conn *conns = calloc((size_t)n, sizeof *conns);
    wc_conn **list = calloc((size_t)n, sizeof *list);
    lt_result *res = calloc((size_t)n, sizeof *res);
    double *joins = malloc((size_t)n * sizeof *joins);
    char(*join_path)[sizeof path + 1024] = calloc((size_t)n, sizeof *join_path);
    int n_joined = 0;
    if (!conns || !list || !res || !joins || !join_path) {
        free(conns), free(list), free(res), free(joins), free(join_path);
        fprintf(stderr, "loadtest: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        int joiner = i >= o->clients;
        int len = snprintf(join_path[i], sizeof join_path[i], "%s", path);
        if (!strstr(o->query, "text_prompt=")) {
            len += snprintf(join_path[i] + len, sizeof join_path[i] - (size_t)len, "%ctext_prompt=joiner+%d",
                            *o->query ? '&' : '?', i);
            for (int k = 0; k < 24; k++)
                len += snprintf(join_path[i] + len, sizeof join_path[i] - (size_t)len, "+tell+me+about+the+sea");
        }
        conns[i] = (wc_conn){.path = joiner ? join_path[i] : path, .wait_handshake = 1, .extra = head, .n_extra = 2, .audio = audio,
                             .n_audio = joiner ? 0 : frames, .interval_ms = FRAME_MS,
                             .linger_ms = joiner ? JOINER_STAY_MS : 5000,
                             .expect_pages = joiner ? 0 : frames + 1, /* 2 header pages, frames - 1 audio pages */
                             .connect_after_ms = joiner ? 1e3 * o->burst_at : 0};
        list[i] = &conns[i];
    }
    wc_run(list, n, &extra, extra != NULL, 1e3 * (o->seconds + o->burst_at + 120));
    /* sized by what came back, not by the frames sent: a server may send more pages than asked for */
    size_t pages = 1;
    for (int i = 0; i < n; i++) pages += (size_t)conns[i].n_out;
    double *all = malloc(pages * sizeof *all), *all_lag = malloc(pages * sizeof *all_lag);
    const int have_memory = all && all_lag;
    if (!have_memory) fprintf(stderr, "loadtest: out of memory for %zu pages' times\n", pages);
    printf("%-7s %10s %8s %8s %8s %8s %8s %8s %9s %6s %6s %s\n", "client", "handshake", "p50", "p90", "p99", "max",
           "lat p50", "lat p99", "pages", "late", "behind", "continuity");
    int ok_all = 1, goal_missed = 0;
    for (int group = 0; have_memory && group < 2; group++) { /* the live clients, then the joiners */
        int from = group ? o->clients : 0, to = group ? n : o->clients, n_all = 0, ok_group = 1, late = 0, refused = 0;
        int n_lag = 0, behind = 0;
        int sent = from < to ? conns[from].n_audio : 0;
        /* The server drops the uplink's pre-skip (3840 at 48 kHz: one 1920-sample frame at
         * 24 kHz), so one frame fewer comes back than went in. */
        int expect = sent - PP_DOWNLINK_PRESKIP / 2 / PP_FRAME_SAMPLES;
        for (int i = from; i < to; i++) {
            wc_conn *c = &conns[i];
            lt_result *r = &res[i];
            continuity(c, r);
            timing(c, o->slack_ms, r, all, &n_all, all_lag, &n_lag);
            int ok = c->handshakes == 1 && !c->failed && r->bad_pages == 0 && (group || r->audio_pages == expect);
            if (ok && group) joins[n_joined++] = r->handshake_ms;
            /* A joiner past the server's capacity is turned away before its handshake: expected. */
            int full = group && !c->handshakes && c->errors && strstr(c->first_error, "server full");
            refused += full;
            ok_group &= ok || full;
            late += r->late;
            behind += r->behind;
            printf("%-7d %8.0fms %6.1fms %6.1fms %6.1fms %6.1fms %6.1fms %6.1fms %4d/%-4d %5d %6d  %s", i,
                   r->handshake_ms, r->p50, r->p90, r->p99, r->max, r->lag_p50, r->lag_p99, r->audio_pages, expect,
                   r->late, r->behind, ok ? "ok" : full ? "refused (server full)" : "BROKEN");
            if (!ok && !full)
                printf(" (handshakes %d, %d bad pages%s%s%s%s)", c->handshakes, r->bad_pages,
                       c->failed ? ", failed: " : "", c->failed ? c->fail_reason : "", c->errors ? ", server error: " : "",
                       c->errors ? c->first_error : "");
            printf("\n");
        }
        if (!group) {
            summary(o->burst ? "live:" : "all", from, to, sent, FRAME_MS + o->slack_ms, all, n_all, late, all_lag, n_lag,
                    behind, ok_group);
            double p99 = pct(all_lag, n_lag, 0.99); /* summary sorted them */
            if (o->max_latency_ms > 0 && (p99 > o->max_latency_ms || !n_lag)) {
                printf("goal missed: reply latency p99 %.1f ms over --max-latency %.0f ms\n", p99, o->max_latency_ms);
                goal_missed = 1;
            }
        }
        else if (from < to) {
            qsort(joins, (size_t)n_joined, sizeof *joins, cmp_double);
            printf("joiners: %d joined (handshake p50 %.0f ms, p90 %.0f ms, max %.0f ms), %d refused because the "
                   "server was full, %d broken\n",
                   n_joined, pct(joins, n_joined, 0.5), pct(joins, n_joined, 0.9), n_joined ? joins[n_joined - 1] : 0,
                   refused, to - from - n_joined - refused);
        }
        ok_all &= ok_group;
    }
    for (int i = 0; i < n; i++) {
        conns[i].path = NULL; /* static: wc_conn_free must not free it */
        wc_conn_free(&conns[i]);
    }
    free(conns), free(list), free(res), free(all), free(all_lag), free(joins), free(join_path);
    return !ok_all || !have_memory ? 1 : goal_missed ? 3 : 0;
}

int main(int argc, char **argv) {
    lt_opts o;
    int help = parse(argc, argv, &o);
    if (help) {
        fprintf(help > 0 ? stdout : stderr,
                "usage: personaplex-loadtest (--server BINARY | --port P) [--tls] [--clients N (1-%d)] "
                "[--seconds S] [--wav FILE] [--slack MS] [--query Q] [--burst N [--burst-at S]] "
                "[--server-arg ARG (with --server, up to %d)]... [--ticks-from S (< --seconds)] "
                "[--max-latency MS (exit 3 when the reply latency p99 passes it)] [--fail-on-input-loss (exit 4 when "
                "the server did not hear all of the clients' audio as sent)]\n",
                MAX_CLIENTS, MAX_SERVER_ARGS);
        return help > 0 ? 0 : 2;
    }
    char err[PP_ERR_LEN] = "", dir[] = "/tmp/pp-loadtest-XXXXXX";
    int frames = (int)(o.seconds * 1000 / FRAME_MS + 0.5);
    sp_msgs up; /* OpusHead, OpusTags, then the frames */
    int rc = sp_uplink_wav(o.wav, frames, &up, err);
    pid_t pid = -1;
    if (!rc && o.server) {
        o.port = sp_free_port();
        if (o.port < 0 || !mkdtemp(dir)) rc = pp_fail(err, PP_EIO, "no free loopback port or temporary directory");
        else pid = start_server(&o, dir);
    }
    int status = 1;
    if (!rc && wc_init(o.tls, o.port) != 0) rc = pp_fail(err, PP_EIO, "cannot create the lws client context");
    if (!rc) {
        if (pid > 0 && !sp_wait_ready(pid, READY_TIMEOUT_S)) {
            fprintf(stderr, "loadtest: the server did not become ready (log: %s/server.log)\n", dir);
        } else {
            printf("loadtest: %d clients, %.0f s of %s each, %s://127.0.0.1:%d", o.clients, o.seconds, o.wav,
                   o.tls ? "wss" : "ws", o.port);
            if (o.burst) printf("; %d more join at once after %.1f s", o.burst, o.burst_at);
            printf("\n");
            lt_metrics before, at_from, after;
            wc_http from = {.path = "/metrics", .connect_after_ms = 1e3 * o.ticks_from};
            int metrics = fetch_metrics(&before);
            status = drive(&o, up.m, up.m + 2, frames, o.ticks_from > 0 ? &from : NULL);
            if (!metrics) metrics = fetch_metrics(&after);
            if (!metrics) report_metrics("server", &before, &after);
            else printf("server: /metrics unavailable (HTTP %d): no server figures\n", metrics);
            int lost = metrics ? -1 : report_uplink(&before, &after);
            if (o.fail_on_input_loss && lost != 0 && status != 1) {
                printf("input check failed: %s\n", lost > 0 ? "the server did not hear all of the clients' audio as sent"
                                                             : "the server does not say whether it heard the audio");
                status = 4;
            }
            if (!metrics && o.ticks_from > 0) {
                char who[64];
                snprintf(who, sizeof who, "server, from %.0f s on", o.ticks_from);
                if (parse_metrics(&from, &at_from) == 0) report_metrics(who, &at_from, &after);
                else printf("%s: /metrics did not answer\n", who);
            }
            wc_http_free(&from);
        }
        wc_shutdown();
    }
    if (pid > 0) {
        int st = sp_stop(pid);
        if (st != 0) fprintf(stderr, "loadtest: the server exited with status %d (log: %s/server.log)\n", st, dir);
        if (st == 0 && status == 0) nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); /* keep it to debug a failure */
    }
    if (rc) fprintf(stderr, "loadtest: %s\n", err);
    if (!rc) sp_msgs_free(&up);
    return rc ? 2 : status;
}
