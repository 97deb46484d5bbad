/* fuzz_json_socket: the JSON endpoints' client-event path (server/json_socket.c, realtime.c,
 * twilio.c) with its conn, no socket. The first byte picks /v1/realtime or /v1/twilio; the rest
 * is a list of WebSocket pieces as in fuzz_ws (a flags byte: bit 0 binary, bit 1 final; a
 * 16-bit little-endian length; the bytes). An admission request is granted as ws.c would
 * (the output settings fixed), whole frames are taken as the engine takes them, restarts are
 * taken. Nothing may crash or leak; every answer is JSON text; only finite samples come out;
 * a closed input stays closed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "ws_pieces.h"
#include "server/json_socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t g_msg[CONN_JSON_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    static metrics *m;
    char err[PP_ERR_LEN];
    if (!m && metrics_create(&m, err)) abort();
    if (!size) return 0;
    conn_protocol protocol = data[0] & 1 ? CONN_TWILIO : CONN_REALTIME;
    conn *c;
    if (conn_create(1, protocol, &c, err)) abort();
    ws_input in;
    ws_input_init(&in, c, m);
    json_socket js;
    pp_session_params p;
    pp_params_defaults(&p);
    json_socket_init(&js, &in, protocol, &p, NULL, NULL);
    static float pcm[PP_FRAME_SAMPLES];
    ws_piece piece;
    for (size_t at = 1; ws_next_piece(data, size, &at, &piece);) {
        int was_closing = in.closing;
        int todo = json_socket_receive(&js, piece.data, piece.len, piece.binary, piece.final);
        if (was_closing && (todo || !in.closing)) abort();
        if (todo & JSON_SOCKET_ADMIT) conn_set_output(c, js.out_format, js.stream);
        int64_t ready;
        while (conn_take_frame(c, pcm, &ready))
            for (int i = 0; i < PP_FRAME_SAMPLES; i++)
                if (!isfinite(pcm[i]) || fabsf(pcm[i]) > 1.5f) abort();
        pp_session_params restart;
        conn_take_restart(c, &restart);
        size_t n;
        int text;
        while (conn_dequeue(c, g_msg, sizeof g_msg, &n, &text)) {
            pp_json_doc *doc;
            if (!text || n > sizeof g_msg || pp_json_parse((const char *)g_msg, n, &doc, err)) abort();
            pp_json_free(doc);
        }
    }
    json_socket_free(&js);
    conn_destroy(c);
    return 0;
}
