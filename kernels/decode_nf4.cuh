/* decode_nf4: bitsandbytes NF4, two per byte, HIGH nibble = even element, value table[code]
 * times the block absmax; the absmax may itself be 8-bit quantized ("nested", §5). The
 * 16-entry table sits in shared memory: a run-time index into registers would spill. */
#ifndef PP_KERNELS_DECODE_NF4_CUH
#define PP_KERNELS_DECODE_NF4_CUH

#include "common.cuh"

__device__ __forceinline__ float pk_dec_nf4(const uint4 &r, int e, const float *lut) {
    int wd = e >> 3, byte = (e & 7) >> 1;
    uint32_t u = wd == 0 ? r.x : wd == 1 ? r.y : wd == 2 ? r.z : r.w;
    uint32_t b = (u >> (8 * byte)) & 255u;
    return lut[e & 1 ? b & 15u : b >> 4];
}

__device__ __forceinline__ float pk_nf4_code_at(const uint8_t *d, int64_t e, const float *lut) {
    uint8_t b = d[e >> 1];
    return lut[e & 1 ? b & 15 : b >> 4];
}

/* Block absmax of block g: f32, or nested map[code]·absmax2[nested] + offset (nested: the
 * second-level block holding g) rounded as the CPU does (no fused multiply-add). */
__device__ __forceinline__ float pk_nf4_absmax_at(const pk_weight &w, int64_t g, int64_t nested) {
    if (!w.nested_absmax) return __ldg((const float *)w.scales + g);
    uint8_t code = ((const uint8_t *)w.scales)[g];
    return __fadd_rn(__fmul_rn(__ldg(w.nested_map + code), __ldg(w.nested_absmax + nested)), w.nested_offset);
}

__device__ __forceinline__ float pk_nf4_absmax(const pk_weight &w, int64_t g) {
    /* g < 2^32: a tensor would need 2^38 weights to pass it */
    return pk_nf4_absmax_at(w, g, w.nested_absmax ? (uint32_t)g / (uint32_t)w.nested_block : 0);
}

#endif
