/* ws_pieces: how the socket fuzzers (fuzz_ws, fuzz_json_socket) cut their input into the
 * pieces lws would deliver: a flags byte (bit 0 binary, bit 1 final fragment), a 16-bit
 * little-endian length, that many bytes (fewer at the end of the input). */
#ifndef PP_FUZZ_WS_PIECES_H
#define PP_FUZZ_WS_PIECES_H

#include <stddef.h>
#include <stdint.h>

typedef struct ws_piece {
    const uint8_t *data;
    size_t len;
    int binary, final;
} ws_piece;

/* The piece at *at, advancing *at past it. Returns 0 when the input has no more. */
static inline int ws_next_piece(const uint8_t *data, size_t size, size_t *at, ws_piece *p) {
    if (*at + 3 > size) return 0;
    int flags = data[*at];
    size_t len = (size_t)data[*at + 1] | (size_t)data[*at + 2] << 8;
    *at += 3;
    if (len > size - *at) len = size - *at;
    p->data = data + *at;
    p->len = len;
    p->binary = flags & 1;
    p->final = (flags & 2) != 0;
    *at += len;
    return 1;
}

#endif
