/* conn: the per-WebSocket mailbox (see conn.h for which thread calls what). */
#include "server/conn.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 48 slots hold about 2 s of output (one page and at most one text piece per 80 ms frame). The
 * engine holds a conversation whose half is queued (conn_backed_up): a client bursting its audio
 * gets its answers as fast as it reads them. One whose oldest message waited CONN_STALL_NS has
 * stopped reading, and dropping its session is kinder than growing; so is a full ring. */
#define CONN_SLOTS 48
#define CONN_STALL_NS (3 * 1000000000LL)
/* Frame-ready stamps kept; the uplink holds at most 10 s (125 frames) by default. */
#define READY_RING 256

typedef struct slot {
    size_t len;        /* chat: kind byte + payload; JSON: the text */
    int text;          /* a JSON text message */
    int64_t queued_ns; /* CLOCK_MONOTONIC */
} slot;

struct conn {
    uint64_t id;
    conn_protocol protocol;
    size_t msg_max;      /* the largest message: CONN_MSG_MAX or CONN_JSON_MAX */
    audio_format format; /* set before admission, read-only afterwards */
    char stream[64];
    pthread_mutex_t lock; /* guards everything below */
    pp_uplink *uplink;
    slot *slots;          /* [CONN_SLOTS] ring */
    unsigned char *bufs;  /* [CONN_SLOTS][LWS_PRE + msg_max]: a message starts LWS_PRE in */
    int head, count;
    uint64_t events; /* JSON event ids handed out */
    int restart;     /* a restart was asked for, with restart_params */
    int responding;  /* realtime: the model is in a turn (a response is open) */
    pp_session_params restart_params;
    char close_reason[124]; /* Twilio: why the socket closes (RFC 6455 allows 123 bytes) */
    int close_code;       /* close once drained; 0: keep open */
    int gone;             /* the socket has closed */
    int stalled;          /* the ring overflowed: drop the socket */
    int64_t last_input_ns;
    uint64_t dropped;
    uint64_t frames_marked, frames_taken;
    int64_t ready_ns[READY_RING];
};

int conn_create(uint64_t id, conn_protocol protocol, conn **out, char *err) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return pp_fail(err, PP_ENOMEM, "connection %llu: out of memory", (unsigned long long)id);
    c->id = id;
    c->protocol = protocol;
    c->msg_max = protocol == CONN_CHAT ? CONN_MSG_MAX : CONN_JSON_MAX;
    c->last_input_ns = pp_now_ns();
    c->slots = malloc(CONN_SLOTS * sizeof *c->slots);
    c->bufs = malloc(CONN_SLOTS * (LWS_PRE + c->msg_max));
    int rc =
        c->slots && c->bufs ? pp_uplink_open(&c->uplink, 0, err) : pp_fail(err, PP_ENOMEM, "connection: out of memory");
    if (rc) {
        free(c->slots);
        free(c->bufs);
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
    free(c->bufs);
    free(c);
}

uint64_t conn_id(const conn *c) { return c->id; }
conn_protocol conn_get_protocol(const conn *c) { return c->protocol; }

void conn_set_output(conn *c, audio_format format, const char *stream) {
    c->format = format;
    snprintf(c->stream, sizeof c->stream, "%s", stream);
}

audio_format conn_output_format(const conn *c) { return c->format; }
const char *conn_stream(const conn *c) { return c->stream; }

static unsigned char *slot_buf(conn *c, int i) { return c->bufs + (size_t)i * (LWS_PRE + c->msg_max) + LWS_PRE; }

/* The next free slot, or NULL when the ring is full (the conn is then stalled). */
static slot *claim_locked(conn *c) {
    if (c->count == CONN_SLOTS) {
        if (!c->dropped++)
            PP_WARN("conn", "session %llu: client is not reading (%d messages queued); dropping the session",
                    (unsigned long long)c->id, CONN_SLOTS);
        c->stalled = 1;
        return NULL;
    }
    c->count++;
    slot *s = &c->slots[(c->head + c->count - 1) % CONN_SLOTS];
    s->queued_ns = pp_now_ns();
    return s;
}

/* The oldest queued message's slot, taken off the ring (its buffer stays valid until the slot
 * is claimed again, which needs the lock). count > 0. */
static slot *pop_locked(conn *c) {
    slot *s = &c->slots[c->head];
    c->head = (c->head + 1) % CONN_SLOTS;
    c->count--;
    return s;
}

static int queue_locked(conn *c, int kind, const void *payload, size_t len) {
    if (len + 1 > c->msg_max) return PP_EFULL;
    slot *s = claim_locked(c);
    if (!s) return PP_EFULL;
    unsigned char *buf = slot_buf(c, (int)(s - c->slots));
    buf[0] = (unsigned char)kind;
    if (len) memcpy(buf + 1, payload, len);
    s->len = len + 1;
    s->text = 0;
    return PP_OK;
}

static int queue_json_locked(conn *c, const char *json, size_t len) {
    if (len > c->msg_max) return PP_EFULL;
    slot *s = claim_locked(c);
    if (!s) return PP_EFULL;
    memcpy(slot_buf(c, (int)(s - c->slots)), json, len);
    s->len = len;
    s->text = 1;
    return PP_OK;
}

int conn_queue_json(conn *c, const char *json, size_t len) {
    pthread_mutex_lock(&c->lock);
    int rc = queue_json_locked(c, json, len);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static void event_id_locked(conn *c, char out[32]) { snprintf(out, 32, "evt_%llu", (unsigned long long)++c->events); }

void conn_event_id(conn *c, char out[32]) {
    pthread_mutex_lock(&c->lock);
    event_id_locked(c, out);
    pthread_mutex_unlock(&c->lock);
}

/* A realtime `error` event (docs/protocol.md §4.4); client_event_id: the event_id of the client
 * event that caused it, or NULL. */
static void error_event_locked(conn *c, const char *type, const char *code, const char *text, size_t len,
                               const char *client_event_id) {
    /* a message and an id of control characters, each \u00XX */
    char id[32], json[6 * PP_ERR_LEN + 6 * CONN_EVENT_ID_MAX + 256];
    event_id_locked(c, id);
    pp_jw w;
    pp_jw_init(&w, json, sizeof json);
    pp_jw_raw(&w, "{\"type\":\"error\",\"event_id\":\"%s\",\"error\":{\"type\":\"%s\",\"code\":", id, type);
    pp_jw_str(&w, code, strlen(code));
    pp_jw_raw(&w, ",\"message\":");
    pp_jw_str(&w, text, len);
    pp_jw_raw(&w, ",\"param\":null,\"event_id\":");
    if (client_event_id)
        pp_jw_str(&w, client_event_id, strlen(client_event_id));
    else
        pp_jw_raw(&w, "null");
    pp_jw_raw(&w, "}}");
    long n = pp_jw_end(&w);
    if (n > 0) queue_json_locked(c, json, (size_t)n);
}

void conn_queue_error(conn *c, const char *type, const char *code, const char *text, const char *client_event_id) {
    pthread_mutex_lock(&c->lock);
    error_event_locked(c, type, code, text, strlen(text), client_event_id);
    pthread_mutex_unlock(&c->lock);
}

/* conn_fail's realtime event: client mistakes (the close codes of bad input) are
 * invalid_request_error, the rest server_error. */
static void fail_event_locked(conn *c, int close_code, const char *text, size_t len) {
    int client =
        close_code == 0 || close_code == CLOSE_POLICY || close_code == CLOSE_BAD_DATA || close_code == CLOSE_TOO_BIG;
    const char *code = close_code == CLOSE_TRY_LATER    ? "server_busy"
                       : close_code == CLOSE_GOING_AWAY ? "server_shutting_down"
                       : client                         ? "invalid_request"
                                                        : "server_error";
    error_event_locked(c, client ? "invalid_request_error" : "server_error", code, text, len, NULL);
}

int conn_queue(conn *c, int kind, const void *payload, size_t len) {
    pthread_mutex_lock(&c->lock);
    int rc = queue_locked(c, kind, payload, len);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The first n bytes of text less a UTF-8 character cut short at their end (a truncation of a
 * message quoting what a client sent: a close reason must be UTF-8). */
static int utf8_whole(const char *text, int n) {
    int p = n;
    while (p > 0 && ((unsigned char)text[p - 1] & 0xC0) == 0x80) p--;
    if (p == 0) return n;
    const unsigned char lead = (unsigned char)text[p - 1];
    const int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return n - (p - 1) < need ? p - 1 : n;
}

void conn_fail(conn *c, int close_code, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof text) n = utf8_whole(text, sizeof text - 1);
    pthread_mutex_lock(&c->lock);
    switch (c->protocol) {
    case CONN_CHAT: queue_locked(c, MSG_ERROR, text, (size_t)n); break;
    case CONN_REALTIME: fail_event_locked(c, close_code, text, (size_t)n); break;
    case CONN_TWILIO: /* the stream has no error message: the close frame says why */
        if (close_code && !c->close_code) {
            int k = utf8_whole(text, n < (int)sizeof c->close_reason ? n : (int)sizeof c->close_reason - 1);
            memcpy(c->close_reason, text, (size_t)k);
            c->close_reason[k] = '\0';
        }
        break;
    }
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
    if (!c->stalled && c->count && pp_now_ns() - c->slots[c->head].queued_ns > CONN_STALL_NS) {
        PP_WARN("conn", "session %llu: client is not reading (%d messages queued for %lld s); dropping the session",
                (unsigned long long)c->id, c->count, CONN_STALL_NS / 1000000000LL);
        c->stalled = 1;
    }
    int s = c->stalled;
    pthread_mutex_unlock(&c->lock);
    return s;
}

int conn_backed_up(conn *c) {
    pthread_mutex_lock(&c->lock);
    int b = c->count >= CONN_SLOTS / 2;
    pthread_mutex_unlock(&c->lock);
    return b;
}

int64_t conn_last_input_ns(conn *c) {
    pthread_mutex_lock(&c->lock);
    int64_t t = c->last_input_ns;
    pthread_mutex_unlock(&c->lock);
    return t;
}

/* Stamps the frames that just became whole; returns how many whole frames are buffered. */
static int stamp_frames_locked(conn *c) {
    uint64_t whole = pp_uplink_buffered(c->uplink) / PP_FRAME_SAMPLES;
    int64_t now = pp_now_ns();
    while (c->frames_marked < c->frames_taken + whole) c->ready_ns[c->frames_marked++ % READY_RING] = now;
    return (int)whole;
}

int conn_push_audio(conn *c, const uint8_t *data, size_t len, int *page_errors, char *err) {
    pthread_mutex_lock(&c->lock);
    c->last_input_ns = pp_now_ns();
    int before = pp_uplink_get_stats(c->uplink).ogg.errors;
    int rc = pp_uplink_push(c->uplink, data, len, err);
    *page_errors = pp_uplink_get_stats(c->uplink).ogg.errors - before;
    if (rc == PP_OK) rc = stamp_frames_locked(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int conn_push_pcm(conn *c, const float *pcm, size_t n) {
    pthread_mutex_lock(&c->lock);
    c->last_input_ns = pp_now_ns();
    pp_uplink_push_pcm(c->uplink, pcm, n);
    int whole = stamp_frames_locked(c);
    pthread_mutex_unlock(&c->lock);
    return whole;
}

void conn_request_restart(conn *c, const pp_session_params *params) {
    pthread_mutex_lock(&c->lock);
    c->restart = 1;
    c->restart_params = *params;
    pthread_mutex_unlock(&c->lock);
}

void conn_set_responding(conn *c, int responding) {
    pthread_mutex_lock(&c->lock);
    c->responding = responding;
    pthread_mutex_unlock(&c->lock);
}

int conn_responding(conn *c) {
    pthread_mutex_lock(&c->lock);
    int r = c->responding;
    pthread_mutex_unlock(&c->lock);
    return r;
}

int conn_take_restart(conn *c, pp_session_params *params) {
    pthread_mutex_lock(&c->lock);
    int r = c->restart;
    if (r) *params = c->restart_params;
    c->restart = 0;
    pthread_mutex_unlock(&c->lock);
    return r;
}

int conn_write_next(conn *c, struct lws *wsi) {
    pthread_mutex_lock(&c->lock);
    if (!c->count) {
        int code = c->close_code;
        char reason[sizeof c->close_reason];
        memcpy(reason, c->close_reason, sizeof reason);
        pthread_mutex_unlock(&c->lock);
        if (!code) return 0;
        lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)reason, strlen(reason));
        return -1;
    }
    int i = c->head;
    slot *s = pop_locked(c);
    /* lws_write takes the whole message or buffers the rest itself: one call, one frame. */
    int n = lws_write(wsi, slot_buf(c, i), s->len, s->text ? LWS_WRITE_TEXT : LWS_WRITE_BINARY);
    int ok = n >= (int)s->len;
    int more = c->count > 0 || c->close_code;
    pthread_mutex_unlock(&c->lock);
    if (!ok) {
        PP_WARN("conn", "session %llu: write failed", (unsigned long long)c->id);
        return -1;
    }
    if (more) lws_callback_on_writable(wsi);
    return 0;
}

int conn_dequeue(conn *c, uint8_t *out, size_t cap, size_t *len, int *text) {
    pthread_mutex_lock(&c->lock);
    int got = c->count > 0;
    if (got) {
        int i = c->head;
        slot *s = pop_locked(c);
        memcpy(out, slot_buf(c, i), s->len < cap ? s->len : cap);
        *len = s->len;
        *text = s->text;
    }
    pthread_mutex_unlock(&c->lock);
    return got;
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
