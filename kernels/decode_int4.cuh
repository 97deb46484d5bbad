/* decode_int4: symmetric INT4, two per byte, low nibble = even element, value nibble − 8
 * before the group's f16 scale (docs/formats.md §4). */
#ifndef PP_KERNELS_DECODE_INT4_CUH
#define PP_KERNELS_DECODE_INT4_CUH

#include "common.cuh"

/* Element e (0..31) of a 16-byte chunk: nibble e of the little-endian words. */
__device__ __forceinline__ float pk_dec_int4(const uint4 &r, int e) {
    int wd = e >> 3;
    uint32_t u = wd == 0 ? r.x : wd == 1 ? r.y : wd == 2 ? r.z : r.w;
    return (float)((int)((u >> (4 * (e & 7))) & 15u) - 8);
}

__device__ __forceinline__ float pk_int4_code_at(const uint8_t *d, int64_t e) {
    uint8_t b = d[e >> 1];
    return (float)((int)(e & 1 ? b >> 4 : b & 15) - 8);
}

#endif
