/* conn: the mailbox between the lws service thread and the engine thread for one WebSocket.
 *
 * Uplink: the service thread pushes each 0x01 payload into the conn's pp_uplink (Ogg demux +
 * Opus decode, under the conn lock) and stamps the time each 1920-sample frame became
 * complete; the engine takes whole frames. Downlink: the engine queues finished messages
 * (kind byte + payload, with LWS_PRE headroom) in a fixed ring of slots and wakes the service
 * thread; the service thread writes exactly one message per WRITEABLE callback, so each Ogg
 * page leaves as its own WebSocket message, immediately. Closing: either side may ask for a
 * close after the queue drains (conn_fail); the service thread marks the conn gone when the
 * socket closes, and from then on only the engine touches it and frees it.
 *
 * Nothing here allocates after conn_create. */
#ifndef PP_SERVER_CONN_H
#define PP_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "audio/opus.h"

struct lws;

/* Message kinds of docs/protocol.md §2.1 (byte 0 of every binary message). */
enum {
    MSG_HANDSHAKE = 0x00,
    MSG_AUDIO = 0x01,
    MSG_TEXT = 0x02,
    MSG_CONTROL = 0x03,
    MSG_METADATA = 0x04,
    MSG_ERROR = 0x05,
    MSG_PING = 0x06,
};

/* WebSocket close codes used (RFC 6455 §7.4). */
enum {
    CLOSE_NORMAL = 1000,
    CLOSE_GOING_AWAY = 1001,
    CLOSE_BAD_DATA = 1007,
    CLOSE_POLICY = 1008,
    CLOSE_TOO_BIG = 1009,
    CLOSE_INTERNAL = 1011,
    CLOSE_TRY_LATER = 1013,
};

#define CONN_MSG_MAX (1 + PP_DOWNLINK_MAX_PAGE) /* kind byte + the largest downlink page */

typedef struct conn conn;

/* Allocates a conn with its uplink and message ring. Service thread. */
int conn_create(uint64_t id, conn **out, char *err);
/* Frees everything. Called by whichever thread owns the conn last (see the file comment). */
void conn_destroy(conn *c);
uint64_t conn_id(const conn *c);

/* ---- any thread ---- */

/* Queues one message (kind + payload of len bytes, len < CONN_MSG_MAX). Returns 0, or PP_EFULL
 * when the ring is full: the message is dropped and counted, and the conn is stalled (the
 * client is not reading; the service thread then drops the socket). */
int conn_queue(conn *c, int kind, const void *payload, size_t len);
/* Queues an 0x05 error with the formatted text; with close_code != 0 the socket is closed
 * with that code once the queue has drained. */
void conn_fail(conn *c, int close_code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* True when messages are queued or a close is pending. */
int conn_wants_write(conn *c);
/* True when a close is pending (it happens once the queue has drained). */
int conn_closing(conn *c);
/* Messages dropped because the ring was full. */
uint64_t conn_dropped(conn *c);
/* The ring overflowed: the client stopped reading and the socket should be dropped now,
 * without waiting for the queue to drain (it never would). */
int conn_stalled(conn *c);
/* When the client's audio last arrived (CLOCK_MONOTONIC ns; the conn's creation before any). */
int64_t conn_last_input_ns(conn *c);

/* ---- service thread ---- */

/* Feeds one 0x01 payload piece to the uplink. Returns the number of whole frames now
 * buffered (>= 0), or a negative code once the Ogg stream is unusable (err says why).
 * *page_errors receives how many recoverable Ogg errors this call added. */
int conn_push_audio(conn *c, const uint8_t *data, size_t len, int *page_errors, char *err);
/* Writes the oldest queued message on wsi. Returns 0 to keep the socket, -1 to close it (a
 * pending close after the last message, or a write error). Re-arms WRITEABLE if more is
 * queued. */
int conn_write_next(conn *c, struct lws *wsi);
/* The socket closed: the service thread lets go of c. */
void conn_mark_gone(conn *c);

/* ---- engine thread ---- */

int conn_is_gone(conn *c);
/* Copies the next whole uplink frame into pcm and sets *ready_ns (CLOCK_MONOTONIC) to when its
 * last sample arrived. Returns 1, or 0 when no whole frame is buffered. */
int conn_take_frame(conn *c, float pcm[PP_FRAME_SAMPLES], int64_t *ready_ns);
/* Uplink counters, for the session's end-of-call log line. */
pp_uplink_stats conn_uplink_stats(conn *c);

#endif
