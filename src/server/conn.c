/* conn: the per-WebSocket mailbox (see conn.h for which thread calls what). */
#include "server/conn.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 48 slots hold about 2 s of output (one page and at most one text piece per 80 ms frame):
 * beyond that the client is not reading, and dropping its session is kinder than growing. */
#define CONN_SLOTS 48
/* Frame-ready stamps kept; the uplink holds at most 10 s (125 frames) by default. */
#define READY_RING 256

typedef struct slot {
    size_t len;                                /* kind byte + payload */
    unsigned char buf[LWS_PRE + CONN_MSG_MAX]; /* message starts at buf + LWS_PRE */
} slot;

struct conn {
    uint64_t id;
    pthread_mutex_t lock; /* guards everything below */
    pp_uplink *uplink;
    slot *slots;          /* [CONN_SLOTS] ring */
    int head, count;
    int close_code;       /* close once drained; 0: keep open */
    int gone;             /* the socket has closed */
    int stalled;          /* the ring overflowed: drop the socket */
    int64_t last_input_ns;
    uint64_t dropped;
    uint64_t frames_marked, frames_taken;
    int64_t ready_ns[READY_RING];
};

int conn_create(uint64_t id, conn **out, char *err) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return pp_fail(err, PP_ENOMEM, "connection %llu: out of memory", (unsigned long long)id);
    c->id = id;
    c->last_input_ns = pp_now_ns();
    c->slots = malloc(CONN_SLOTS * sizeof *c->slots);
    int rc = c->slots ? pp_uplink_open(&c->uplink, 0, err) : pp_fail(err, PP_ENOMEM, "connection: out of memory");
    if (rc) {
        free(c->slots);
        free(c);
        return rc;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return PP_OK;
}

void conn_destroy(conn *c) {
    if (!c) return;
    pp_uplink_close(c->uplink);
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    free(c);
}

uint64_t conn_id(const conn *c) { return c->id; }

static int queue_locked(conn *c, int kind, const void *payload, size_t len) {
    if (len + 1 > CONN_MSG_MAX) return PP_EFULL;
    if (c->count == CONN_SLOTS) {
        if (!c->dropped++)
            PP_WARN("conn", "session %llu: client is not reading (%d messages queued); dropping the session",
                    (unsigned long long)c->id, CONN_SLOTS);
        c->stalled = 1;
        return PP_EFULL;
    }
    slot *s = &c->slots[(c->head + c->count) % CONN_SLOTS];
    s->buf[LWS_PRE] = (unsigned char)kind;
    if (len) memcpy(s->buf + LWS_PRE + 1, payload, len);
    s->len = len + 1;
    c->count++;
    return PP_OK;
}

int conn_queue(conn *c, int kind, const void *payload, size_t len) {
    pthread_mutex_lock(&c->lock);
    int rc = queue_locked(c, kind, payload, len);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void conn_fail(conn *c, int close_code, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof text) n = sizeof text - 1;
    pthread_mutex_lock(&c->lock);
    queue_locked(c, MSG_ERROR, text, (size_t)n);
    if (close_code && !c->close_code) c->close_code = close_code;
    pthread_mutex_unlock(&c->lock);
}

int conn_wants_write(conn *c) {
    pthread_mutex_lock(&c->lock);
    int r = c->count > 0 || c->close_code;
    pthread_mutex_unlock(&c->lock);
    return r;
}

int conn_closing(conn *c) {
    pthread_mutex_lock(&c->lock);
    int r = c->close_code != 0;
    pthread_mutex_unlock(&c->lock);
    return r;
}

uint64_t conn_dropped(conn *c) {
    pthread_mutex_lock(&c->lock);
    uint64_t d = c->dropped;
    pthread_mutex_unlock(&c->lock);
    return d;
}

int conn_stalled(conn *c) {
    pthread_mutex_lock(&c->lock);
    int s = c->stalled;
    pthread_mutex_unlock(&c->lock);
    return s;
}

int64_t conn_last_input_ns(conn *c) {
    pthread_mutex_lock(&c->lock);
    int64_t t = c->last_input_ns;
    pthread_mutex_unlock(&c->lock);
    return t;
}

int conn_push_audio(conn *c, const uint8_t *data, size_t len, int *page_errors, char *err) {
    pthread_mutex_lock(&c->lock);
    c->last_input_ns = pp_now_ns();
    int before = pp_uplink_get_stats(c->uplink).ogg.errors;
    int rc = pp_uplink_push(c->uplink, data, len, err);
    *page_errors = pp_uplink_get_stats(c->uplink).ogg.errors - before;
    if (rc == PP_OK) {
        uint64_t whole = pp_uplink_buffered(c->uplink) / PP_FRAME_SAMPLES;
        int64_t now = pp_now_ns();
        while (c->frames_marked < c->frames_taken + whole) c->ready_ns[c->frames_marked++ % READY_RING] = now;
        rc = (int)whole;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int conn_write_next(conn *c, struct lws *wsi) {
    pthread_mutex_lock(&c->lock);
    if (!c->count) {
        int code = c->close_code;
        pthread_mutex_unlock(&c->lock);
        if (!code) return 0;
        lws_close_reason(wsi, (enum lws_close_status)code, NULL, 0);
        return -1;
    }
    slot *s = &c->slots[c->head];
    /* lws_write takes the whole message or buffers the rest itself: one call, one frame. */
    int n = lws_write(wsi, s->buf + LWS_PRE, s->len, LWS_WRITE_BINARY);
    int ok = n >= (int)s->len;
    c->head = (c->head + 1) % CONN_SLOTS;
    c->count--;
    int more = c->count > 0 || c->close_code;
    pthread_mutex_unlock(&c->lock);
    if (!ok) {
        PP_WARN("conn", "session %llu: write failed", (unsigned long long)c->id);
        return -1;
    }
    if (more) lws_callback_on_writable(wsi);
    return 0;
}

void conn_mark_gone(conn *c) {
    pthread_mutex_lock(&c->lock);
    c->gone = 1;
    pthread_mutex_unlock(&c->lock);
}

int conn_is_gone(conn *c) {
    pthread_mutex_lock(&c->lock);
    int g = c->gone;
    pthread_mutex_unlock(&c->lock);
    return g;
}

int conn_take_frame(conn *c, float pcm[PP_FRAME_SAMPLES], int64_t *ready_ns) {
    pthread_mutex_lock(&c->lock);
    int got = pp_uplink_frame(c->uplink, pcm);
    if (got) {
        /* Frames the uplink dropped for overflow leave the stamps ahead; clamp to "now-ish". */
        *ready_ns = c->frames_taken < c->frames_marked ? c->ready_ns[c->frames_taken % READY_RING] : pp_now_ns();
        c->frames_taken++;
    }
    pthread_mutex_unlock(&c->lock);
    return got;
}

pp_uplink_stats conn_uplink_stats(conn *c) {
    pthread_mutex_lock(&c->lock);
    pp_uplink_stats s = pp_uplink_get_stats(c->uplink);
    pthread_mutex_unlock(&c->lock);
    return s;
}
