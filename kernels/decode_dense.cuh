/* decode_dense: F32 / F16 / BF16 weights, one 16-byte load at a time. */
#ifndef PP_KERNELS_DECODE_DENSE_CUH
#define PP_KERNELS_DECODE_DENSE_CUH

#include "common.cuh"

/* Element e of a 16-byte chunk: 4 floats, or 8 halves (LSB half of each word first). */
__device__ __forceinline__ float pk_dec_f32(const uint4 &r, int e) {
    uint32_t u = e == 0 ? r.x : e == 1 ? r.y : e == 2 ? r.z : r.w;
    return __uint_as_float(u);
}

__device__ __forceinline__ uint16_t pk_half_of(const uint4 &r, int e) {
    uint32_t u = (e >> 1) == 0 ? r.x : (e >> 1) == 1 ? r.y : (e >> 1) == 2 ? r.z : r.w;
    return (uint16_t)(e & 1 ? u >> 16 : u & 0xffffu);
}

__device__ __forceinline__ float pk_dec_f16(const uint4 &r, int e) { return pk_f16(pk_half_of(r, e)); }
__device__ __forceinline__ float pk_dec_bf16(const uint4 &r, int e) { return pk_bf16(pk_half_of(r, e)); }

#endif
