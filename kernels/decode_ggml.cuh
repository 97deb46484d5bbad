/* decode_ggml: one element of ggml's block formats (io/quant.h gives the layouts), computed in
 * the order of ggml's dequantize_row_* so the value equals the CPU decoder's. Blocks carry
 * their f16 scales, so there is no separate scale array. */
#ifndef PP_KERNELS_DECODE_GGML_CUH
#define PP_KERNELS_DECODE_GGML_CUH

#include "common.cuh"

__device__ __forceinline__ float pk_ld_f16(const uint8_t *p) { return pk_f16((uint16_t)(p[0] | (p[1] << 8))); }

/* Element i (0..31) of a Q4_0 block: low nibbles are elements 0-15, high nibbles 16-31. */
__device__ __forceinline__ float pk_q4_0_at(const uint8_t *blk, int i) {
    uint8_t b = blk[2 + (i & 15)];
    return (float)((i < 16 ? b & 15 : b >> 4) - 8) * pk_ld_f16(blk);
}

__device__ __forceinline__ float pk_q8_0_at(const uint8_t *blk, int i) {
    return (float)(int8_t)blk[2 + i] * pk_ld_f16(blk);
}

/* The 6-bit scale and min of sub-block j (0..7) from a Q4_K block's 12 packed bytes q. */
__device__ __forceinline__ void pk_q4k_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The same from the 12 bytes as three little-endian words (one load each where a warp's lanes
 * want different sub-blocks of one block), without branches on j. */
__device__ __forceinline__ void pk_q4k_scale_min_words(const uint32_t w[3], int j, uint32_t *sc, uint32_t *m) {
    const int k = 8 * (j & 3);
    const uint32_t a = (w[0] >> k) & 255u, b = (w[1] >> k) & 255u, c = (w[2] >> k) & 255u;
    const int high = j >= 4;
    *sc = high ? (c & 15u) | ((a >> 6) << 4) : a & 63u;
    *m = high ? (c >> 4) | ((b >> 6) << 4) : b & 63u;
}

/* u < 2^23 as a float, exactly: the bits of 2^23 + u, less 2^23. Two full-rate operations (ptxas
 * fuses the or into the mask that isolates u) where an integer-to-float conversion runs at an
 * eighth of the float rate (16 a clock per SM on sm_80..sm_90). */
__device__ __forceinline__ float pk_small_u32_f32(uint32_t u) { return __uint_as_float(0x4B000000u | u) - 8388608.0f; }

/* Element i (0..255) of a Q4_K block: sub-block j = i/32 has a 6-bit scale and min; pairs of
 * sub-blocks share 32 bytes, the even one in the low nibbles. */
__device__ __forceinline__ float pk_q4k_at(const uint8_t *blk, int i) {
    int j = i >> 5, sc, m;
    pk_q4k_scale_min(blk + 4, j, &sc, &m);
    uint8_t b = blk[16 + (j >> 1) * 32 + (i & 31)];
    float d = pk_ld_f16(blk) * (float)sc, mn = pk_ld_f16(blk + 2) * (float)m;
    return __fadd_rn(__fmul_rn(d, (float)(j & 1 ? b >> 4 : b & 15)), -mn); /* no FMA: as the CPU */
}

/* Element e of a stored tensor of ggml format fmt. */
__device__ __forceinline__ float pk_ggml_elem(int fmt, const uint8_t *d, int64_t e) {
    if (fmt == PK_Q4_0) return pk_q4_0_at(d + e / 32 * 18, (int)(e % 32));
    if (fmt == PK_Q8_0) return pk_q8_0_at(d + e / 32 * 34, (int)(e % 32));
    return pk_q4k_at(d + e / 256 * 144, (int)(e % 256));
}

#endif
