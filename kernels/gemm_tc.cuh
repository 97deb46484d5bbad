/* gemm_tc: y[n][rows] = x[n][cols]·wᵀ for batches above PK_GEMV_MAX_BATCH, on tensor cores and
 * straight from the packed weight: no dequantized copy of it ever reaches device memory.
 *
 * A block owns PK_TC_ROWS rows of w and up to PK_TC_INPUTS inputs (blockIdx.y picks which), so
 * a weight byte is read once per PK_TC_INPUTS inputs. Per step of PK_TC_K columns its threads
 * decode the rows' slice and copy the inputs' slice into shared memory, each value split once
 * into its TF32 head and the TF32 of the remainder; then each warp multiplies 16 x 16 tiles with
 * wmma in TF32, three products per tile (lo·hi + hi·lo + hi·hi, CUTLASS's "3xTF32"; F16/BF16
 * weights have no remainder: two): about f32's accuracy, which the CPU's f32 product is the
 * reference for, for three times the tensor instructions, which the decode outweighs at these
 * batch sizes. */
#ifndef PP_KERNELS_GEMM_TC_CUH
#define PP_KERNELS_GEMM_TC_CUH

#include <mma.h>

#include "gemv.cuh"

#define PK_TC_ROWS 32
#define PK_TC_INPUTS 64
#define PK_TC_K 32
#define PK_TC_THREADS 128
/* Shared rows padded by 4 floats: wmma wants a multiple of 4, and the shift spreads a tile's
 * rows over the banks. */
#define PK_TC_LD (PK_TC_K + 4)

/* The tile layout above is what these constants assume. */
static_assert(PK_TC_THREADS == 4 * PK_TC_ROWS && PK_TC_K == 4 * 8, "a thread decodes 8 values of one row");
static_assert(PK_TC_THREADS * 16 == PK_TC_INPUTS * PK_TC_K, "a thread copies 16 inputs' values");

/* The kernel's format for weights decoded element by element: any format and shape. */
#define PK_TC_ANY (-1)

/* v[j] = the weight at element e + j, j < 8, scaled (NF2 in the rotated domain); left: values
 * before the row ends. A format's own decode needs e on a multiple of 8 and the 8 values inside
 * one group or ggml block (the launcher checks), reads just their bytes and finds the group with
 * a shift (gshift >= 0: groups of 1 << gshift) or a division; PK_TC_ANY reads element by
 * element. */
/* Two bytes of a ggml block's payload, which is only 2-byte aligned (18- and 34-byte blocks). */
__device__ __forceinline__ unsigned pk_ld_u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }

template <int FMT>
__device__ __forceinline__ void pk_tc_decode8(const pk_weight &w, int64_t e, int64_t left, int gshift, const float *lut,
                                              float (&v)[8]) {
    if constexpr (FMT == PK_TC_ANY) {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = j < left ? pk_weight_elem(w, e + j, lut) : 0.0f;
    } else if constexpr (FMT == PK_Q4K) {
        /* 8 values of one 32-value sub-block: one scale and min, 8 bytes of nibbles (the odd
         * sub-block of a pair in the high ones); the arithmetic of pk_q4k_at, so the same values. */
        const uint8_t *blk = (const uint8_t *)w.data + e / 256 * 144;
        const int i = (int)(e & 255), j = i >> 5, shift = (j & 1) * 4;
        int sc, m;
        pk_q4k_scale_min(blk + 4, j, &sc, &m);
        const float d = pk_ld_f16(blk) * (float)sc, mn = pk_ld_f16(blk + 2) * (float)m;
        const uint2 q = __ldg((const uint2 *)(blk + 16 + (j >> 1) * 32 + (i & 31)));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const unsigned nib = ((k < 4 ? q.x : q.y) >> (8 * (k & 3) + shift)) & 15;
            v[k] = __fadd_rn(__fmul_rn(d, (float)nib), -mn);
        }
    } else if constexpr (FMT == PK_Q4_0 || FMT == PK_Q8_0) {
        /* Q4_0: values 0-15 in the low nibbles of the 16 bytes, 16-31 in the high ones; Q8_0: a
         * byte each. As pk_q4_0_at / pk_q8_0_at compute them. */
        const uint8_t *blk = (const uint8_t *)w.data + e / 32 * (FMT == PK_Q4_0 ? 18 : 34);
        const int i = (int)(e & 31);
        const float d = pk_ld_f16(blk);
        const uint8_t *p = blk + 2 + (FMT == PK_Q4_0 ? (i & 15) : i);
#pragma unroll
        for (int k = 0; k < 8; k += 2) {
            const unsigned two = pk_ld_u16(p + k);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned b = (two >> (8 * h)) & 255;
                v[k + h] = FMT == PK_Q4_0 ? (float)((int)(i < 16 ? b & 15 : b >> 4) - 8) * d : (float)(int8_t)b * d;
            }
        }
    } else {
        typedef pk_fmt<FMT> F;
        const uint8_t *p = (const uint8_t *)w.data + e * F::BITS / 8;
        uint4 raw = {0, 0, 0, 0}; /* the 8 values as the first of a chunk's words */
        if (F::BITS == 2) raw.x = __ldg((const unsigned short *)p);
        if (F::BITS == 4) raw.x = __ldg((const unsigned *)p);
        if (F::BITS == 8) {
            const uint2 u = __ldg((const uint2 *)p);
            raw.x = u.x, raw.y = u.y;
        }
        if (F::BITS == 16) raw = __ldg((const uint4 *)p);
        float s = 1.0f, z = 0.0f;
        if (F::QUANT) {
            const int64_t g = gshift >= 0 ? e >> gshift : e / w.group;
            s = pk_group_scale<FMT>(w, g);
            if (FMT == PK_INT8 && w.zeros) z = (float)w.zeros[g];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float q = pk_decode<FMT>(raw, j, lut);
            v[j] = F::QUANT ? s * (q - z) : q;
        }
    }
}

/* The TF32 head of v and the TF32 of what the head leaves. */
__device__ __forceinline__ float pk_tf32_hi(float v) { return nvcuda::wmma::__float_to_tf32(v); }
__device__ __forceinline__ float pk_tf32_lo(float v) { return nvcuda::wmma::__float_to_tf32(v - pk_tf32_hi(v)); }

/* The 4 values of v, split, at hi and lo (16-byte aligned). */
__device__ __forceinline__ void pk_tf32_store4(float4 v, float *hi, float *lo) {
    *(float4 *)hi = make_float4(pk_tf32_hi(v.x), pk_tf32_hi(v.y), pk_tf32_hi(v.z), pk_tf32_hi(v.w));
    *(float4 *)lo = make_float4(pk_tf32_lo(v.x), pk_tf32_lo(v.y), pk_tf32_lo(v.z), pk_tf32_lo(v.w));
}

/* Warp w owns row tile w % 2 and input tiles w / 2 and w / 2 + 2 of the block's 32 x 64. The
 * weights and inputs enter shared memory split (each value once, not once per warp reading it). */
template <int FMT>
__global__ void __launch_bounds__(PK_TC_THREADS)
    pk_gemm_tc_kernel(pk_weight w, const float *__restrict__ x, int n, int gshift, pk_dst out) {
    using namespace nvcuda;
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> in_frag;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> w_frag;
    /* F16 and BF16 values are TF32 values already: no remainder, one product fewer */
    constexpr bool w_exact = FMT == PK_F16 || FMT == PK_BF16;
    __shared__ __align__(32) float w_hi[PK_TC_ROWS][PK_TC_LD], w_lo[w_exact ? 1 : PK_TC_ROWS][PK_TC_LD];
    __shared__ __align__(32) float x_hi[PK_TC_INPUTS][PK_TC_LD]; /* at the end: the output tile */
    __shared__ __align__(32) float x_lo[PK_TC_INPUTS][PK_TC_LD];
    __shared__ float lut[16];
    pk_grid_wait();
    pk_load_lut(w, lut);
    const int64_t r0 = (int64_t)blockIdx.x * PK_TC_ROWS;
    const int i0 = (int)blockIdx.y * PK_TC_INPUTS, ni = n - i0 < PK_TC_INPUTS ? n - i0 : PK_TC_INPUTS;
    const int warp = threadIdx.x >> 5, rt = warp & 1, in_tiles = (ni + 15) / 16;
    /* what this thread decodes (rows past the end repeat the last; their sums are never stored)
     * and which inputs' values it copies */
    const int dr = threadIdx.x >> 2, dk = (threadIdx.x & 3) * 8, xi = threadIdx.x >> 1, xk = (threadIdx.x & 1) * 16;
    const int64_t e_row = w.elem0 + (r0 + dr < w.rows ? r0 + dr : w.rows - 1) * w.cols;
    const float *x_row = x + (int64_t)(i0 + xi) * w.cols;
    const bool x_vectors = !((uintptr_t)x & 15) && !(w.cols & 3); /* every row's slices 16-byte aligned */
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);

    for (int64_t k0 = 0; k0 < w.cols; k0 += PK_TC_K) {
        float v[8];
        const int64_t left = w.cols - (k0 + dk);
        if (left > 0)
            pk_tc_decode8<FMT>(w, e_row + k0 + dk, left, gshift, lut, v);
        else
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            w_hi[dr][dk + j] = w_exact ? v[j] : pk_tf32_hi(v[j]);
            if constexpr (!w_exact) w_lo[dr][dk + j] = pk_tf32_lo(v[j]);
        }
        if (x_vectors && xi < ni && k0 + xk + 16 <= w.cols) {
#pragma unroll
            for (int j = 0; j < 4; j++)
                pk_tf32_store4(__ldg((const float4 *)(x_row + k0 + xk) + j), &x_hi[xi][xk + 4 * j],
                               &x_lo[xi][xk + 4 * j]);
        } else {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int64_t k = k0 + xk + j;
                const float xv = xi < ni && k < w.cols ? __ldg(x_row + k) : 0.0f;
                x_hi[xi][xk + j] = pk_tf32_hi(xv);
                x_lo[xi][xk + j] = pk_tf32_lo(xv);
            }
        }
        __syncthreads();
        if ((warp >> 1) < in_tiles) {
#pragma unroll
            for (int kk = 0; kk < PK_TC_K; kk += 8) {
                w_frag b_hi, b_lo;
                wmma::load_matrix_sync(b_hi, &w_hi[rt * 16][kk], PK_TC_LD);
                if constexpr (!w_exact) wmma::load_matrix_sync(b_lo, &w_lo[rt * 16][kk], PK_TC_LD);
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int it = (warp >> 1) + 2 * j;
                    if (it >= in_tiles) break;
                    in_frag a_hi, a_lo;
                    wmma::load_matrix_sync(a_hi, &x_hi[it * 16][kk], PK_TC_LD);
                    wmma::load_matrix_sync(a_lo, &x_lo[it * 16][kk], PK_TC_LD);
                    wmma::mma_sync(acc[j], a_lo, b_hi, acc[j]);
                    if constexpr (!w_exact) wmma::mma_sync(acc[j], a_hi, b_lo, acc[j]);
                    wmma::mma_sync(acc[j], a_hi, b_hi, acc[j]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int it = (warp >> 1) + 2 * j;
        if (it < in_tiles) wmma::store_matrix_sync(&x_hi[it * 16][rt * 16], acc[j], PK_TC_LD, wmma::mem_row_major);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < ni * PK_TC_ROWS; idx += PK_TC_THREADS) {
        const int i = idx / PK_TC_ROWS, r = idx % PK_TC_ROWS;
        if (r0 + r >= w.rows) continue;
        float *dst = out.y + (int64_t)(i0 + i) * w.rows + r0 + r;
        *dst = out.accumulate ? *dst + x_hi[i][r] : x_hi[i][r];
    }
}

#endif
