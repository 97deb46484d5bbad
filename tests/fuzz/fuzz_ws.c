/* fuzz_ws: the chat socket's client-message dispatch (server/ws_input.c) with its conn, no
 * socket: the input is a list of WebSocket pieces, each a flags byte (bit 0 binary, bit 1
 * final fragment), a 16-bit little-endian length and that many bytes, handed to
 * ws_input_receive as lws would. Whenever whole frames are reported the engine side takes
 * them as the engine does. Nothing may crash or leak; only whole frames of finite samples come
 * out; a closed input stays closed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "ws_pieces.h"
#include "server/conn.h"
#include "server/ws_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    static metrics *m;
    char err[PP_ERR_LEN];
    if (!m && metrics_create(&m, err)) abort();
    conn *c;
    if (conn_create(1, CONN_CHAT, &c, err)) abort();
    ws_input in;
    ws_input_init(&in, c, m);
    static float pcm[PP_FRAME_SAMPLES];
    ws_piece piece;
    for (size_t at = 0; ws_next_piece(data, size, &at, &piece);) {
        int was_closing = in.closing;
        int todo = ws_input_receive(&in, piece.data, piece.len, piece.binary, piece.final);
        if (was_closing && (todo || !in.closing)) abort();
        int64_t ready;
        if (todo & WS_INPUT_WAKE)
            while (conn_take_frame(c, pcm, &ready))
                for (int i = 0; i < PP_FRAME_SAMPLES; i++)
                    if (!isfinite(pcm[i])) abort();
    }
    conn_destroy(c);
    return 0;
}
