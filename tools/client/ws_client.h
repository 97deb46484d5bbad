/* ws_client: a scripted WebSocket and HTTP client on libwebsockets' client API, for the
 * server's end-to-end tests and personaplex-loadtest.
 *
 * A wc_conn is a script plus what came back: connect to `path`, optionally wait for the 0x00
 * handshake, send the `extra` messages, then the `audio` messages one per `interval_ms` (the
 * pace a browser or Kyutai's clients keep), then linger for the reply and close. Everything
 * the server sends is recorded with arrival times. wc_http fetches one URL. wc_run drives any
 * number of both on one lws context until all are done or a deadline passes. */
#ifndef PP_TOOLS_WS_CLIENT_H
#define PP_TOOLS_WS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

typedef struct wc_msg {
    uint8_t *data; /* kind byte + payload (or the text for a text frame) */
    size_t len;
    int text; /* send as a text frame */
} wc_msg;

typedef struct wc_conn {
    /* ---- script ---- */
    char *path;          /* "/api/chat?..." (malloc'd or static) */
    const char *authorization; /* an Authorization header's value (e.g. "Bearer KEY"), or NULL */
    int wait_handshake;  /* hold extra and audio until 0x00 arrives (the web client) */
    const wc_msg *extra; /* sent first, back to back */
    int n_extra;
    const wc_msg *audio; /* then one per interval_ms */
    int n_audio;
    /* When set, gives audio message `index` instead of audio[index], made when it is due (an
     * uplink built from what came back); NULL fails the conversation. */
    const wc_msg *(*make_audio)(struct wc_conn *c, int index);
    void *user;
    double interval_ms;
    double linger_ms;        /* after the last message, wait this long for output, then close */
    int expect_pages;        /* close early once this many 0x01 messages arrived (0: linger) */
    int close_at_once;       /* disconnect right after the upgrade (mid-prompt) */
    double connect_after_ms; /* open the connection this long after wc_run starts (a later joiner) */

    /* ---- results ---- */
    int established, failed, closed;
    int close_code; /* from the server's close frame, 0 if none */
    char fail_reason[256];
    int64_t t_established, t_handshake, t_last_send; /* ns, CLOCK_MONOTONIC */
    int handshake_len;                               /* payload bytes of the 0x00 message */
    int handshakes;
    int audio_before_handshake;
    uint8_t *out; /* every 0x01 payload, concatenated */
    size_t out_len, out_cap;
    int n_out;                /* 0x01 messages */
    int64_t *out_times;       /* [n_out] arrival times */
    int64_t *audio_sent_at;   /* [next_audio] when each audio message went out */
    int out_before_last_send; /* 0x01 messages that arrived before the last audio was sent */
    int bad_pages;            /* 0x01 messages that were not exactly one Ogg page */
    int texts, bad_texts;     /* 0x02 messages; ones that were not valid UTF-8 */
    char transcript[8192];
    int errors; /* 0x05 messages */
    char first_error[256], last_error[256];
    int other_kinds; /* any other kind */

    /* ---- internal ---- */
    struct lws *wsi;
    lws_sorted_usec_list_t sul;
    int connecting, started, next_extra, next_audio, closing;
    int64_t t_next, t_deadline;
    uint8_t *rx; /* message being reassembled */
    size_t rx_len, rx_cap;
} wc_conn;

typedef struct wc_http {
    const char *path;
    const char *authorization; /* an Authorization header's value, or NULL */
    const char *cookie;        /* a Cookie header's value, or NULL */
    char set_cookie[512];      /* the response's Set-Cookie, "" if none */
    int status;
    char type[128];
    char *body; /* NUL-terminated */
    size_t len, cap;
    int done, failed;
    double connect_after_ms; /* send the request this long after wc_run starts */
    int connecting;
    struct lws *wsi;
} wc_http;

/* One client context for the process. tls: wss/https, accepting the self-signed certificate. */
int wc_init(int tls, int port);
void wc_shutdown(void);
/* Runs until every conn and request is done or timeout_ms passes (then the rest fail). */
void wc_run(wc_conn **conns, int n_conns, wc_http **reqs, int n_reqs, double timeout_ms);
void wc_conn_free(wc_conn *c);
void wc_http_free(wc_http *h);
int64_t wc_now_ns(void);

#endif
