/* quant: the arithmetic of the packed weight formats (docs/formats.md §3-§5), on plain memory.
 *
 * Group decoders turn one stored group into f32 values; quantizers turn f32 values into the
 * stored bytes exactly as the published writers do. They are shared by the loader's decode
 * (weight.c), the CPU matrix products (backend/cpu_gemv.c), the quantizer tool and the tests.
 * Nothing here reads a file or allocates. */
#ifndef PP_IO_QUANT_H
#define PP_IO_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* Largest Walsh-Hadamard length we accept: keeps the per-group scratch on the stack. */
#define QUANT_MAX_NP2 4096

/* NF2 centroids by code (§3.2) and the bitsandbytes NF4 table by index (§5.2). */
extern const float pp_quant_nf2_codebook[4];
extern const float pp_quant_nf4_table[16];

/* In-place Sylvester-order Walsh-Hadamard transform of v[0..n), n a power of two, scaled by
 * 1/sqrt(n) so that it is orthonormal and its own inverse. */
void pp_quant_fwht(float *v, int n);

/* Unaligned little-endian loads: the mapping gives no alignment guarantee. */
static inline uint16_t quant_ld16(const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + 2 * i;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline float quant_ldf32(const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + 4 * i;
    union { uint32_t u; float f; } v = {.u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                             (uint32_t)b[3] << 24};
    return v.f;
}
/* INT8 group i's scale from the stored absmax[i] (f32): w = q · absmax / 127. The reference and
 * the SIMD loops both take it from here, so they multiply by the same float. */
static inline float quant_int8_scale(const void *absmax, size_t i) { return quant_ldf32(absmax, i) / 127.0f; }

/* ---- NF2 + WHT: 4 codes per byte, LSB first; RMS scale per group (§3) ---- */
/* Decodes one group: scale * first gs outputs of the normalised WHT of the zero-padded
 * centroids. packed points at the group's gs/4 bytes; tmp holds np2 floats. */
void pp_quant_nf2_decode_group(const uint8_t *packed, float scale, int gs, int np2, float *tmp, float *dst);
/* Quantizes n_groups groups of gs values (x holds n_groups*gs values). */
void pp_quant_nf2_quantize(const float *x, int64_t n_groups, int gs, int np2, uint8_t *packed, uint16_t *scales_f16);

/* ---- INT4 symmetric: low nibble = even element, (nibble-8)*scale, scale = max|x|/7 (§4) ---- */
void pp_quant_int4_decode_group(const uint8_t *packed, float scale, int gs, float *dst);
void pp_quant_int4_quantize(const float *x, int64_t n_groups, int gs, uint8_t *packed, uint16_t *scales_f16);

/* ---- INT8 (docs/formats.md §8): int8 codes, one f32 absmax per group, w = q·absmax/127 ---- */
/* rows × cols values of x in groups of `group` columns (group divides cols): codes round(x·127/absmax)
 * (half to even, as bitsandbytes' int8 quantiser) and each group's absmax. */
void pp_quant_int8_quantize(const float *x, int64_t rows, int64_t cols, int64_t group, int8_t *codes, float *absmax);

/* ---- bitsandbytes NF4: high nibble = even element, table[code]*absmax (§5) ---- */
void pp_quant_nf4_decode_block(const uint8_t *packed, const float *table, float absmax, int bs, float *dst);
/* Block absmax values and codes of n_blocks blocks of bs values; absmax[n_blocks] is f32. */
void pp_quant_nf4_quantize(const float *x, int64_t n_blocks, int bs, uint8_t *packed, float *absmax);
/* The signed 8-bit "dynamic" map bitsandbytes uses for the nested absmax (256 sorted values). */
void pp_quant_nf4_dynamic_map(float map[256]);
/* Double quantization of n_blocks f32 absmax values: offset = mean, then blocks of nbs
 * quantized to the dynamic map against their own absmax. Writes codes[n_blocks] and
 * nested[ceil(n_blocks/nbs)]; returns the offset. */
float pp_quant_nf4_nest(const float *absmax, int64_t n_blocks, int nbs, const float map[256], uint8_t *codes,
                        float *nested);

/* ---- ggml block formats (GGUF files): each block holds its own f16 scales ---- */
/* Elements and bytes per block: Q4_0 32/18 (d, 16 nibble bytes, low nibbles first), Q8_0
 * 32/34 (d, 32 int8), Q4_K 256/144 (d, dmin, 12 bytes of 6-bit scales and mins, 128 nibble
 * bytes). The decoders compute exactly what ggml's dequantize_row_* do, in float32. */
#define QUANT_Q4_0_BLOCK 32
#define QUANT_Q4_0_BYTES 18
#define QUANT_Q8_0_BLOCK 32
#define QUANT_Q8_0_BYTES 34
#define QUANT_Q4_K_BLOCK 256
#define QUANT_Q4_K_BYTES 144
void pp_quant_q4_0_decode_block(const uint8_t *blk, float *dst);
void pp_quant_q8_0_decode_block(const uint8_t *blk, float *dst);
void pp_quant_q4_k_decode_block(const uint8_t *blk, float *dst);
/* Quantizers of n_blocks blocks (x holds n_blocks * block values), for benchmarks and tests:
 * Q4_0 and Q8_0 as ggml's reference quantizers, Q4_K by each sub-block's min and max (ggml's
 * own search for the best scales is slower and a little more accurate). */
void pp_quant_q4_0_quantize(const float *x, int64_t n_blocks, uint8_t *out);
void pp_quant_q8_0_quantize(const float *x, int64_t n_blocks, uint8_t *out);
void pp_quant_q4_k_quantize(const float *x, int64_t n_blocks, uint8_t *out);
/* The first of n_blocks ggml blocks of fmt_bytes bytes (QUANT_*_BYTES) whose f16 scale (d, and
 * Q4_K's dmin) is NaN or infinite, or -1 when all are finite. *which is set to 0 for d, 1 for
 * dmin. One pass with no branch per block: the loader runs it over every block of a GGUF. */
int64_t pp_quant_ggml_bad_scale(const uint8_t *blocks, int64_t n_blocks, int fmt_bytes, int *which);
/* Q4_K sub-block j (0..7) of a block's 12 packed bytes: its 6-bit scale and min. */
static inline void quant_q4_k_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

#endif
