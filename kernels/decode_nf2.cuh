/* decode_nf2: NF2 + WHT codes, 4 per byte, least-significant first (docs/formats.md §3).
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

/* Threads for a block running pk_wht_shared on np2 values: a stage's np2 / 2 butterflies, at
 * least a warp, at most 256. */
static inline int pk_wht_threads(int np2) { return np2 / 2 < 32 ? 32 : np2 / 2 < 256 ? np2 / 2 : 256; }

/* The orthonormal Walsh-Hadamard transform of each aligned slice of np2 values of v[total] in
 * shared memory, by the whole block (every thread calls it; it ends with a barrier). A stage's
 * butterflies span less than np2, so they never cross slices and one pass over v transforms
 * them all. The same butterflies in the same order as the CPU's pp_quant_fwht, additions only,
 * so both give the same bits. The transform is its own inverse: the GEMV rotates activations
 * with it, the embedding decodes rows with it. */
__device__ __forceinline__ void pk_wht_shared(float *v, int total, int np2) {
    for (int h = 1; h < np2; h *= 2) {
        for (int p = threadIdx.x; p < total / 2; p += blockDim.x) {
            int i = (p / h) * 2 * h + p % h;
            float a = v[i], b = v[i + h];
            v[i] = a + b;
            v[i + h] = a - b;
        }
        __syncthreads();
    }
    const float norm = 1.0f / sqrtf((float)np2);
    for (int i = threadIdx.x; i < total; i += blockDim.x) v[i] *= norm;
    __syncthreads();
}

/* pk_wht_shared's transform with a warp per slice of np2 = 32·K values, the slice in registers
 * (value k of a lane is element lane + 32k): butterflies across lanes by shuffles, then within
 * each lane; the same additions on the same operands in the same stage order, so the same bits,
 * without a barrier per stage. Every thread calls it; it ends with a barrier. */
template <int K> __device__ __forceinline__ void pk_wht_warps(float *v, int total) {
    const int lane = threadIdx.x & 31, np2 = 32 * K;
    const float norm = 1.0f / sqrtf((float)np2);
    for (int s0 = (threadIdx.x >> 5) * np2; s0 < total; s0 += (blockDim.x >> 5) * np2) {
        float x[K];
#pragma unroll
        for (int k = 0; k < K; k++) x[k] = v[s0 + lane + 32 * k];
#pragma unroll
        for (int h = 1; h < 32; h *= 2)
#pragma unroll
            for (int k = 0; k < K; k++) {
                const float o = __shfl_xor_sync(0xffffffffu, x[k], h);
                x[k] = lane & h ? o - x[k] : x[k] + o; /* the upper element of a pair takes a − b */
            }
#pragma unroll
        for (int hk = 1; hk < K; hk *= 2)
#pragma unroll
            for (int k = 0; k < K; k++)
                if (!(k & hk)) {
                    const float a = x[k], b = x[k + hk];
                    x[k] = a + b;
                    x[k + hk] = a - b;
                }
#pragma unroll
        for (int k = 0; k < K; k++) v[s0 + lane + 32 * k] = x[k] * norm;
    }
    __syncthreads();
}

/* pk_wht_shared by the fastest way np2 allows. */
__device__ __forceinline__ void pk_wht(float *v, int total, int np2) {
    switch (np2) {
    case 32: pk_wht_warps<1>(v, total); break;
    case 64: pk_wht_warps<2>(v, total); break;
    case 128: pk_wht_warps<4>(v, total); break;
    case 256: pk_wht_warps<8>(v, total); break;
    default: pk_wht_shared(v, total, np2);
    }
}

#endif
