/* gemv: the batch-1..8 matrix-vector product template, instantiated once per weight format
 * in gemv.cu.
 *
 * A warp owns RPW consecutive rows; each lane walks its rows in 16-byte chunks (one uint4 load
 * per row per step, all RPW loads issued before the first use so several are in flight),
 * decodes the chunk in registers and multiplies it with the matching activations of all n
 * inputs, so each weight byte is read once per call whatever n is. A chunk never straddles a
 * quantization group (the launcher checks group % values-per-chunk == 0), so the group scale
 * multiplies the chunk's partial sum once. Lanes' sums meet in a warp shuffle reduction. */
#ifndef PP_KERNELS_GEMV_CUH
#define PP_KERNELS_GEMV_CUH

#include "common.cuh"
#include "decode_dense.cuh"
#include "decode_ggml.cuh"
#include "decode_int4.cuh"
#include "decode_int8.cuh"
#include "decode_nf2.cuh"
#include "decode_nf4.cuh"

/* Per format: values per 16-byte chunk, stored bits per value, rows per warp at one input (more
 * for the dense formats' long rows would cut parallelism; the packed ones want loads in flight;
 * the launcher halves it for several inputs, whose sums take the registers). */
template <int FMT> struct pk_fmt;
template <> struct pk_fmt<PK_F32> { enum { V = 4, BITS = 32, RPW = 2, QUANT = 0 }; };
template <> struct pk_fmt<PK_F16> { enum { V = 8, BITS = 16, RPW = 2, QUANT = 0 }; };
template <> struct pk_fmt<PK_BF16> { enum { V = 8, BITS = 16, RPW = 2, QUANT = 0 }; };
template <> struct pk_fmt<PK_NF2> { enum { V = 64, BITS = 2, RPW = 4, QUANT = 1 }; };
template <> struct pk_fmt<PK_INT4> { enum { V = 32, BITS = 4, RPW = 4, QUANT = 1 }; };
template <> struct pk_fmt<PK_NF4> { enum { V = 32, BITS = 4, RPW = 4, QUANT = 1 }; };
template <> struct pk_fmt<PK_INT8> { enum { V = 16, BITS = 8, RPW = 4, QUANT = 1 }; };

template <int FMT>
__device__ __forceinline__ float pk_decode(const uint4 &r, int e, const float *lut) {
    if (FMT == PK_F32) return pk_dec_f32(r, e);
    if (FMT == PK_F16) return pk_dec_f16(r, e);
    if (FMT == PK_BF16) return pk_dec_bf16(r, e);
    if (FMT == PK_NF2) return pk_dec_nf2(r, e);
    if (FMT == PK_INT4) return pk_dec_int4(r, e);
    if (FMT == PK_INT8) return pk_dec_int8(r, e);
    return pk_dec_nf4(r, e, lut);
}

/* f32 scale of group (block) g; FMT, where the caller knows it, spares the test of w.fmt. */
template <int FMT = -1> __device__ __forceinline__ float pk_group_scale(const pk_weight &w, int64_t g) {
    const int fmt = FMT < 0 ? w.fmt : FMT;
    if (fmt == PK_NF4) return pk_nf4_absmax(w, g);
    /* absmax / 127 divided, as the CPU does: times 1/127 differs in the last bit (embeddings must
     * match exactly; the parity test's int8 rows caught it) */
    if (fmt == PK_INT8) return __ldg((const float *)w.scales + g) / 127.0f;
    return pk_f16(__ldg((const unsigned short *)w.scales + g));
}

/* Element e of the stored tensor, scaled; NF2 in the rotated domain (see decode_nf2.cuh).
 * The slow path for shapes the chunked kernel does not take, and the tile dequantizer. */
__device__ __forceinline__ float pk_weight_elem(const pk_weight &w, int64_t e, const float *lut) {
    const uint8_t *d = (const uint8_t *)w.data;
    switch (w.fmt) {
    case PK_F32: return ((const float *)d)[e];
    case PK_F16: return pk_f16(((const uint16_t *)d)[e]);
    case PK_BF16: return pk_bf16(((const uint16_t *)d)[e]);
    case PK_NF2: return pk_nf2_code_at(d, e) * pk_group_scale(w, e / w.group);
    case PK_INT4: return pk_int4_code_at(d, e) * pk_group_scale(w, e / w.group);
    case PK_INT8:
        return (pk_int8_code_at(d, e) - (w.zeros ? (float)w.zeros[e / w.group] : 0.0f)) *
               pk_group_scale(w, e / w.group);
    case PK_Q4_0:
    case PK_Q8_0:
    case PK_Q4K: return pk_ggml_elem(w.fmt, d, e);
    default: return pk_nf4_code_at(d, e, lut) * pk_group_scale(w, e / w.group);
    }
}

/* Loads the NF4 table into shared memory (a no-op for other formats); all threads call it. */
__device__ __forceinline__ void pk_load_lut(const pk_weight &w, float *lut) {
    if (w.fmt == PK_NF4) {
        if (threadIdx.x < 16) lut[threadIdx.x] = w.quant_map[threadIdx.x];
        __syncthreads();
    }
}

/* The first of this warp's RPW consecutive rows (past the end: the warp has none) and each row's
 * first element; rows past the end repeat the last, their sums never stored. */
template <int RPW> __device__ __forceinline__ int64_t pk_warp_rows(const pk_weight &w, int64_t *e0) {
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * RPW;
#pragma unroll
    for (int r = 0; r < RPW; r++) e0[r] = w.elem0 + (r0 + r < w.rows ? r0 + r : w.rows - 1) * w.cols;
    return r0;
}

/* The rows [*b0, returned) of w the block's warps take (as pk_warp_rows), cut at w's last row. */
template <int RPW> __device__ __forceinline__ int64_t pk_block_rows(const pk_weight &w, int64_t *b0) {
    *b0 = (int64_t)blockIdx.x * (blockDim.x >> 5) * RPW;
    return *b0 + (blockDim.x >> 5) * RPW < w.rows ? *b0 + (blockDim.x >> 5) * RPW : w.rows;
}

/* Streams this block's rows of w (bits per weight) toward L2. A GEMV does it before its
 * pk_grid_wait: the weights never change, so they may load while the previous kernel drains. */
template <int RPW> __device__ __forceinline__ void pk_prefetch_block_rows(const pk_weight &w, int bits) {
    const int64_t per_block = (int64_t)(blockDim.x >> 5) * RPW, rb0 = (int64_t)blockIdx.x * per_block;
    if (rb0 >= w.rows) return;
    const int64_t nr = w.rows - rb0 < per_block ? w.rows - rb0 : per_block;
    pk_prefetch_l2((const uint8_t *)w.data + (w.elem0 + rb0 * w.cols) * bits / 8, (size_t)(nr * w.cols * bits / 8));
}

/* A product's destination: y [n][rows], overwritten, or added to when accumulate (a residual
 * add: each row has one owner, so in place is safe). */
struct pk_dst {
    float *y;
    int accumulate;
};

/* Each lane's sums meet in a warp reduction; lane 0 stores the n live inputs' rows. n is the same
 * in every lane, so the shuffles stay converged. */
template <int NB, int RPW>
__device__ __forceinline__ void pk_store_rows(const float (&acc)[NB][RPW], const pk_weight &w, int64_t r0, int n,
                                              pk_dst out) {
#pragma unroll
    for (int i = 0; i < NB; i++) {
        if (i >= n) break;
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            float v = pk_warp_sum(acc[i][r]);
            float *dst = out.y + (int64_t)i * w.rows + r0 + r;
            if ((threadIdx.x & 31) == 0 && r0 + r < w.rows) *dst = out.accumulate ? *dst + v : v;
        }
    }
}

template <int FMT, int NB, int RPW>
__global__ void __launch_bounds__(128) pk_gemv_kernel(pk_weight w, const float *__restrict__ x, int n, pk_dst out) {
    typedef pk_fmt<FMT> F;
    __shared__ float lut[16];
    pk_prefetch_block_rows<RPW>(w, F::BITS);
    pk_grid_wait();
    pk_load_lut(w, lut);
    const int lane = threadIdx.x & 31;
    int64_t e0[RPW];
    const int64_t r0 = pk_warp_rows<RPW>(w, e0);
    if (r0 >= w.rows) return;
    const int64_t chunks = w.cols / F::V;
    const uint8_t *base = (const uint8_t *)w.data;
    float acc[NB][RPW] = {};
    /* Each row's group of the lane's chunk and the chunk's offset in it, stepped without dividing
     * (the lane's chunks are PK_WARP·V elements apart; element indices fit 32 bits:
     * weight_chunkable). Dense weights have no groups (gsize 1, never stepped). */
    const uint32_t gsize = F::QUANT ? (uint32_t)w.group : 1u, gstep = PK_WARP * F::V / gsize,
                   ostep = PK_WARP * F::V % gsize;
    uint32_t grp[RPW], off[RPW];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const uint32_t e = (uint32_t)(e0[r] + lane * F::V);
        grp[r] = e / gsize;
        off[r] = e % gsize;
    }

    for (int64_t c = lane; c < chunks; c += PK_WARP) {
        uint4 raw[RPW];
#pragma unroll
        for (int r = 0; r < RPW; r++) raw[r] = __ldg((const uint4 *)(base + (e0[r] + c * F::V) * F::BITS / 8));
        float part[NB][RPW], xsum[NB]; /* xsum: Σ x of the chunk, for INT8's zero points */
#pragma unroll
        for (int i = 0; i < NB; i++) {
            xsum[i] = 0.0f;
#pragma unroll
            for (int r = 0; r < RPW; r++) part[i][r] = 0.0f;
        }
#pragma unroll
        for (int q = 0; q < F::V / 4; q++) {
            float4 xv[NB];
#pragma unroll
            for (int i = 0; i < NB; i++)
                xv[i] = i < n ? __ldg((const float4 *)(x + (int64_t)i * w.cols + c * F::V) + q)
                              : make_float4(0.f, 0.f, 0.f, 0.f);
            if (FMT == PK_INT8)
#pragma unroll
                for (int i = 0; i < NB; i++) xsum[i] += xv[i].x + xv[i].y + xv[i].z + xv[i].w;
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                float v0 = pk_decode<FMT>(raw[r], 4 * q, lut), v1 = pk_decode<FMT>(raw[r], 4 * q + 1, lut);
                float v2 = pk_decode<FMT>(raw[r], 4 * q + 2, lut), v3 = pk_decode<FMT>(raw[r], 4 * q + 3, lut);
#pragma unroll
                for (int i = 0; i < NB; i++)
                    part[i][r] += v0 * xv[i].x + v1 * xv[i].y + v2 * xv[i].z + v3 * xv[i].w;
            }
        }
#pragma unroll
        for (int r = 0; r < RPW; r++) {
            const uint32_t g = grp[r];
            float s = F::QUANT ? pk_group_scale<FMT>(w, g) : 1.0f;
            float z = FMT == PK_INT8 && w.zeros ? (float)w.zeros[g] : 0.0f;
#pragma unroll
            for (int i = 0; i < NB; i++) acc[i][r] += F::QUANT ? s * (part[i][r] - z * xsum[i]) : part[i][r];
            if (F::QUANT) {
                const uint32_t o = off[r] + ostep, wrap = o >= gsize;
                grp[r] += gstep + wrap;
                off[r] = wrap ? o - gsize : o;
            }
        }
    }
    pk_store_rows<NB, RPW>(acc, w, r0, n, out);
}

#endif
