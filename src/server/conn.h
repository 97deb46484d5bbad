/* conn: the mailbox between the lws service thread and the engine thread for one WebSocket.
 *
 * A conn speaks one protocol: /api/chat (binary messages, a kind byte first), /v1/realtime or
 * /v1/twilio (JSON text messages). Uplink: the service thread pushes each chat 0x01 payload
 * into the conn's pp_uplink (Ogg demux + Opus decode, under the conn lock), or the 24 kHz
 * samples a JSON protocol decoded, and stamps the time each 1920-sample frame became
 * complete; the engine takes whole frames. Downlink: the engine queues finished messages
 * (with LWS_PRE headroom) in a fixed ring of slots and wakes the service thread; the service
 * thread writes exactly one message per WRITEABLE callback, so each Ogg page leaves as its
 * own WebSocket message, immediately. A JSON protocol may also ask the engine to restart the
 * conversation from its prompts with new settings (response.cancel, session.update). Closing: either side may ask for a
 * close after the queue drains (conn_fail); the service thread marks the conn gone when the
 * socket closes, and from then on only the engine touches it and frees it.
 *
 * Nothing here allocates after conn_create. */
#ifndef PP_SERVER_CONN_H
#define PP_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "audio/opus.h"
#include "personaplex.h"

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

#define CONN_MSG_MAX (1 + PP_DOWNLINK_MAX_PAGE) /* chat: kind byte + the largest downlink page */
/* JSON protocols: an audio delta (80 ms of 16-bit PCM in base64, 5 KiB) with its envelope, or a
 * session description that repeats the longest text prompt. */
#define CONN_JSON_MAX 16384

typedef enum { CONN_CHAT, CONN_REALTIME, CONN_TWILIO } conn_protocol;

/* Audio on a JSON socket: 16-bit PCM at 24 kHz (Mimi's rate), or G.711 at 8 kHz. */
typedef enum { AUDIO_PCM16, AUDIO_ULAW, AUDIO_ALAW } audio_format;
#define AUDIO_FORMAT_RATE(f) ((f) == AUDIO_PCM16 ? PP_SAMPLE_RATE : 8000)

typedef struct conn conn;

/* Allocates a conn with its uplink and message ring. Service thread. */
int conn_create(uint64_t id, conn_protocol protocol, conn **out, char *err);
/* Frees everything. Called by whichever thread owns the conn last (see the file comment). */
void conn_destroy(conn *c);
uint64_t conn_id(const conn *c);
conn_protocol conn_get_protocol(const conn *c);

/* Before admission (service thread), what the engine's downlink needs of a JSON protocol: the
 * output format, and the stream's name (Twilio's streamSid; "" otherwise). Fixed afterwards. */
void conn_set_output(conn *c, audio_format format, const char *stream);
audio_format conn_output_format(const conn *c);
const char *conn_stream(const conn *c);

/* ---- any thread ---- */

/* Queues one message (kind + payload of len bytes, len < CONN_MSG_MAX). Returns 0, or PP_EFULL
 * when the ring is full: the message is dropped and counted, and the conn is stalled (the
 * client is not reading; the service thread then drops the socket). */
int conn_queue(conn *c, int kind, const void *payload, size_t len);
/* Queues one JSON text message (JSON protocols). Same results as conn_queue. */
int conn_queue_json(conn *c, const char *json, size_t len);
/* A fresh event id ("evt_N") for a JSON message, unique on this conn. */
void conn_event_id(conn *c, char out[32]);
/* Queues a realtime `error` event of type and code with the message text (JSON protocols);
 * client_event_id (NULL: none; at most CONN_EVENT_ID_MAX bytes) is the event_id of the client
 * event it answers, which the event repeats as error.event_id for the client to match. */
#define CONN_EVENT_ID_MAX 128
void conn_queue_error(conn *c, const char *type, const char *code, const char *text, const char *client_event_id);
/* Queues an error with the formatted text (chat: 0x05; realtime: an `error` event; Twilio has
 * no error message: the text is logged and becomes the close reason); with close_code != 0
 * the socket is closed with that code once the queue has drained. */
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
/* The client stopped reading (the ring overflowed, or its oldest message has waited for
 * seconds): the socket should be dropped now, without waiting for the queue to drain. */
int conn_stalled(conn *c);
/* Half the ring is queued: the client reads slower than its conversation speaks (after a burst
 * of its audio), and the engine waits with its next frame. */
int conn_backed_up(conn *c);
/* When the client's audio last arrived (CLOCK_MONOTONIC ns; the conn's creation before any). */
int64_t conn_last_input_ns(conn *c);
/* Realtime: whether a response (a turn of the model's, wire.h) is open, which the engine sets
 * and response.cancel asks. */
void conn_set_responding(conn *c, int responding);
int conn_responding(conn *c);

/* ---- service thread ---- */

/* Feeds one 0x01 payload piece to the uplink. Returns the number of whole frames now
 * buffered (>= 0), or a negative code once the Ogg stream is unusable (err says why).
 * *page_errors receives how many recoverable Ogg errors this call added. */
int conn_push_audio(conn *c, const uint8_t *data, size_t len, int *page_errors, char *err);
/* Pushes n samples at 24 kHz (a JSON protocol's decoded audio). Returns the number of whole
 * frames now buffered. */
int conn_push_pcm(conn *c, const float *pcm, size_t n);
/* Asks the engine to restart the conversation from its prompts with params (the latest ask
 * wins). */
void conn_request_restart(conn *c, const pp_session_params *params);
/* Writes the oldest queued message on wsi. Returns 0 to keep the socket, -1 to close it (a
 * pending close after the last message, or a write error). Re-arms WRITEABLE if more is
 * queued. */
int conn_write_next(conn *c, struct lws *wsi);
/* Takes the oldest queued message without a socket (tests and fuzzers): copies at most cap
 * bytes of it into out and sets *len (its whole length) and *text. Returns 1, or 0 when none
 * is queued. */
int conn_dequeue(conn *c, uint8_t *out, size_t cap, size_t *len, int *text);
/* The socket closed: the service thread lets go of c. */
void conn_mark_gone(conn *c);

/* ---- engine thread ---- */

int conn_is_gone(conn *c);
/* Copies the next whole uplink frame into pcm and sets *ready_ns (CLOCK_MONOTONIC) to when its
 * last sample arrived. Returns 1, or 0 when no whole frame is buffered. */
int conn_take_frame(conn *c, float pcm[PP_FRAME_SAMPLES], int64_t *ready_ns);
/* Takes a pending restart: 1 and *params set, or 0. */
int conn_take_restart(conn *c, pp_session_params *params);
/* Uplink counters, for the session's end-of-call log line. */
pp_uplink_stats conn_uplink_stats(conn *c);

#endif
