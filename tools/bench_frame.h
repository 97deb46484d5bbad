/* bench_frame: the pieces of `personaplex-bench frame` shared by its two files:
 * bench_frame.c (options, the LM built from synthetic packed weights, timing and the table) and
 * bench_frame_mimi.c (the Mimi codec's per-frame operation sequence on synthetic f32 weights).
 * Everything runs on whichever backend the caller made; nothing is read from a file. */
#ifndef PP_TOOLS_BENCH_FRAME_H
#define PP_TOOLS_BENCH_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Fills n floats with uniform values in [−scale, scale) from *state (xorshift64). */
void bench_fill(uint64_t *state, float *v, size_t n, float scale);
/* A backend buffer of n random floats (NULL when out of memory). */
float *bench_rand_buffer(pp_backend *be, uint64_t *state, size_t n, float scale);

/* The Mimi codec's operations for one 80 ms frame (docs/codec.md §4): SEANet encoder, the
 * 8-layer encoder transformer over 2 steps, downsample, projections and 8 nearest-neighbour
 * searches; and the reverse for decoding. Real shapes, random f32 weights, device state. */
typedef struct bench_mimi bench_mimi;
int bench_mimi_create(pp_backend *be, uint64_t seed, bench_mimi **out, char *err);
void bench_mimi_destroy(bench_mimi *m);
void bench_mimi_encode(bench_mimi *m, int32_t codes[8]);
void bench_mimi_decode(bench_mimi *m, const int32_t codes[8]);
/* Bytes of weights the codec reads per frame (encode + decode). */
size_t bench_mimi_weight_bytes(const bench_mimi *m);

#endif
