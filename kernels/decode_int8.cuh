/* decode_int8: int8 codes, one f32 absmax per group (a row or a block along it), w = q·absmax/127
 * (docs/formats.md §8). The decoders return q; pk_group_scale gives absmax/127. */
#ifndef PP_KERNELS_DECODE_INT8_CUH
#define PP_KERNELS_DECODE_INT8_CUH

#include "common.cuh"

/* Element e (0..15) of a 16-byte chunk: byte e of the little-endian words, signed. */
__device__ __forceinline__ float pk_dec_int8(const uint4 &r, int e) {
    int wd = e >> 2;
    uint32_t u = wd == 0 ? r.x : wd == 1 ? r.y : wd == 2 ? r.z : r.w;
    return (float)(int8_t)(u >> (8 * (e & 3)));
}

__device__ __forceinline__ float pk_int8_code_at(const uint8_t *d, int64_t e) { return (float)(int8_t)d[e]; }

#endif
