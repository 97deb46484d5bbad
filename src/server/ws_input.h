/* ws_input: what a chat socket does with the client's messages (docs/protocol.md §2.1), kept
 * apart from lws so that the dispatch can be driven without a socket (tests/fuzz/fuzz_ws.c).
 *
 * The lws callback hands every received piece (a whole message or one fragment of it) to
 * ws_input_receive with the frame's binary and final flags. 0x01 payloads go to the conn's
 * uplink as they arrive; 0x03 (control) and 0x06 (ping) are accepted and ignored. Anything
 * else is malformed: an empty message, a text frame, an unknown kind, an Ogg page that does
 * not check out. Each is logged, counted and answered with 0x05. The bad inputs are limited as a
 * rate (base/fault_budget.h), clocked by the client's audio: past WS_INPUT_MAX_BAD of them with
 * too little audio between them (one forgiven per WS_INPUT_FORGIVE_S seconds) the socket is
 * closed (1008), so a flaky client lasts a long call and a stream of garbage is still cut at
 * once. An unusable Ogg stream closes at once (1007), and so does a message over
 * WS_INPUT_MAX_MESSAGE (1009).
 *
 * A client may not send audio faster than real time for long: once more than
 * WS_INPUT_MAX_AHEAD_S seconds of decoded audio have arrived beyond the wall time since its
 * first audio arrived, the conversation is closed (1008) with a message saying why. (Counted
 * from the first audio, not the socket's opening: a client that waits before it streams earns
 * no extra allowance by waiting.) (The uplink's
 * own buffer cap bounds the memory in any case; this names the client at fault instead of
 * silently dropping its audio.) */
#ifndef PP_SERVER_WS_INPUT_H
#define PP_SERVER_WS_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/fault_budget.h"
#include "server/conn.h"
#include "server/metrics.h"

/* An Ogg page is at most 64 KiB; nothing a client sends needs more in one message. */
#define WS_INPUT_MAX_MESSAGE (256 * 1024)
/* Malformed messages answered one by one back to back; one more closes the socket. */
#define WS_INPUT_MAX_BAD 32
/* Seconds of the client's audio that forgive one malformed message. */
#define WS_INPUT_FORGIVE_S 5
/* Seconds of audio a client may be ahead of real time (a browser's burst after a stall, a
 * file streamed at 2x for a while) before it is closed. */
#define WS_INPUT_MAX_AHEAD_S 10

typedef struct ws_input {
    conn *c;
    metrics *metrics;     /* counts malformed input; may be NULL */
    int64_t t_first_audio; /* CLOCK_MONOTONIC ns when the client's first audio arrived; 0 before */
    int in_message;       /* a message's first piece has been seen */
    int kind;             /* of the message being received: -1 empty, -2 text frame */
    size_t message_len;
    int bad;              /* malformed inputs so far */
    pp_fault_budget bad_budget; /* the rate limit on them, clocked by uplink samples */
    int closing;          /* a close is queued; further input is ignored */
} ws_input;

/* What the caller must do after a call (bit set). */
enum {
    WS_INPUT_WAKE = 1,  /* whole frames are buffered: wake the engine */
    WS_INPUT_WRITE = 2, /* an answer or a close is queued: ask for WRITEABLE */
};

void ws_input_init(ws_input *in, conn *c, metrics *m);
/* One received piece: data[len] of a binary (or text) frame, final when it ends the message.
 * Returns WS_INPUT_* bits. */
int ws_input_receive(ws_input *in, const uint8_t *data, size_t len, int binary, int final);
/* Counts one malformed input (in->bad, metrics) against the rate limit; returns 1 when it
 * passes the limit and the socket must close. */
int ws_input_count_bad(ws_input *in);
/* Reports one malformed input `what` (log, count, 0x05) and closes with close_code, or past
 * the limit when close_code is 0. Returns WS_INPUT_WRITE. */
int ws_input_reject(ws_input *in, int close_code, const char *what);
/* The audio-ahead-of-real-time check (any protocol, after pushing audio): closes the socket
 * and returns WS_INPUT_WRITE when the client is too far ahead, else 0. */
int ws_input_check_pace(ws_input *in);

#endif
