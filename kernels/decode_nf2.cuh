/* decode_nf2: NF2 + WHT codes, 4 per byte, least-significant first (spec/formats.md §3).
 *
 * The decoders return scale-free centroids C[q] of the ROTATED domain: a product dots them
 * with the Walsh-Hadamard-transformed activation (w·x = s·C[q]·(H x)), so the weight is never
 * inverse-transformed. C = {−a, −b, b, a}: bit 1 of the code is the sign, bit 0 xor bit 1
 * picks b over a, which compiles to selects instead of an indexed (local-memory) table. */
#ifndef PP_KERNELS_DECODE_NF2_CUH
#define PP_KERNELS_DECODE_NF2_CUH

#include "common.cuh"

#define PK_NF2_A 1.5104f
#define PK_NF2_B 0.4528f

__device__ __forceinline__ float pk_nf2_centroid(uint32_t q) {
    float m = ((q ^ (q >> 1)) & 1u) ? PK_NF2_B : PK_NF2_A;
    return (q & 2u) ? m : -m;
}

/* Element e (0..63) of a 16-byte chunk. */
__device__ __forceinline__ float pk_dec_nf2(const uint4 &r, int e) {
    int wd = e >> 4;
    uint32_t u = wd == 0 ? r.x : wd == 1 ? r.y : wd == 2 ? r.z : r.w;
    return pk_nf2_centroid((u >> (2 * (e & 15))) & 3u);
}

/* Element e of the stored tensor (any alignment). */
__device__ __forceinline__ float pk_nf2_code_at(const uint8_t *d, int64_t e) {
    return pk_nf2_centroid((d[e >> 2] >> (2 * (e & 3))) & 3u);
}

#endif
