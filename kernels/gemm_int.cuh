/* gemm_int: NF2 and INT4 products of many inputs on the integer tensor cores (mma.sync
 * m16n8k32: 16 inputs x 8 rows x 32 columns of bytes, summed in int32), straight from the packed
 * codes and from the activations gemv_int.cuh's preparation writes: the same byte planes, the same
 * {scale, bias} per chunk, so each chunk's integer sum is the one the GEMV forms with dp4a,
 * exactly, and only the float sum over chunks runs in another order.
 *
 * A product's columns may be taken in any order as long as both operands agree. A thread's
 * fragment registers hold 4 bytes of its input row (a) and 4 of its weight row (b) at the same
 * 4 positions of the 32, so each register is one word of the prepared planes and one masked shift
 * of a code word, the values in the order the code word gives them (gemv_int.cuh's top):
 *   NF2: thread t (of a group of 4) takes run t / 2 of the step's two, code shifts 4(t % 2) and
 *        4(t % 2) + 2, i.e. plane words 2(t % 2) and 2(t % 2) + 1 of that run: one 8-byte load
 *        per plane. Four products a step: c·h, c·l, b0·h, b0·l (c the 2-bit code, b0 its bit 0).
 *   INT4: thread t takes run t of the step's four: its even nibbles (plane word 0) and its odd
 *        ones (word 1), again 8 bytes per plane. Two products: nibble·h, nibble·l.
 * h is signed, l, codes and nibbles unsigned. At the end of a chunk the products join as
 * pk_int_total joins the dp4a sums, then the chunk's activation scale and the row's group scale
 * multiply them into f32 sums. No shared memory: a block's four warps read the same activations,
 * which L1 serves, and each warp its own rows' codes.
 *
 * A warp owns NT tiles of 8 rows and one of 16 inputs (blockIdx.y: the next 16 inputs); COMBOS·NT·4
 * int32 sums a lane, at most 64, and NT·4 floats. Each activation fragment a warp loads (16 inputs
 * by 32 bytes of a plane) feeds COMBOS / 2 · NT products, so a warp takes as many rows as its
 * registers allow rather than more inputs: fewer loads per product, and on an H200 the faster tile
 * on every large weight (gemv.cu's launch_imma). Neither L1's bandwidth (about 7 us of activation
 * loads for NF2 12288 x 4096 at 64 inputs, at 128 bytes a clock an SM) nor the tensor cores bound
 * it yet (0.091 ms): its warps wait on those loads, which is why a block asks L1 for them ahead
 * (PK_IMMA_L1_AHEAD). */
#ifndef PP_KERNELS_GEMM_INT_CUH
#define PP_KERNELS_GEMM_INT_CUH

#include "gemv_int.cuh"

#define PK_IMMA_THREADS 128
/* Blocks an SM must hold: unsaid (0) as in the H200's timings, but 2 for 16 rows a warp, which
 * ptxas otherwise fits in 96 registers with a 4-byte spill (sm_87 and sm_90). */
#define PK_IMMA_MIN_BLOCKS(NT) ((NT) == 2 ? 2 : 0)

template <int FMT> struct pk_imma_fmt;
template <> struct pk_imma_fmt<PK_NF2> {
    enum { COMBOS = 4, PLANE_L = 4 }; /* PLANE_L: words from a run's h plane to its l plane */
    /* the thread's first plane word in a step of 16 words (2 runs of 8) */
    static __device__ __forceinline__ int word(int t) { return (t >> 1) * 8 + 2 * (t & 1); }
};
template <> struct pk_imma_fmt<PK_INT4> {
    enum { COMBOS = 2, PLANE_L = 2 };
    static __device__ __forceinline__ int word(int t) { return t * 4; } /* 4 runs of 4 words */
};

/* c += a·b on one m16n8k32 tile, a signed (the h plane) or not, b unsigned; PTX's fragment
 * layout (the emulation's pk_emu::imma_m16n8k32 follows it). Not volatile: no side effects, so the
 * compiler may issue the next step's loads ahead of it. */
template <bool A_SIGNED>
__device__ __forceinline__ void pk_imma(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef PK_EMU
    pk_emu::imma_m16n8k32(A_SIGNED, c, a, b);
#else
    if constexpr (A_SIGNED)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* The b registers of step `s` of a chunk (its 16 code bytes in w4) for thread t: NF2 the codes
 * and their bit 0 (b[0], b[1]: c; b[2], b[3]: b0), INT4 the even and odd nibbles. */
template <int FMT> __device__ __forceinline__ void pk_imma_codes(const uint4 &w4, int s, int t, uint32_t (&b)[4]) {
    if constexpr (FMT == PK_NF2) {
        const uint32_t u = s == 0 ? ((t >> 1) ? w4.y : w4.x) : ((t >> 1) ? w4.w : w4.z);
        const uint32_t lo = u >> (4 * (t & 1)), hi = lo >> 2;
        b[0] = lo & 0x03030303u, b[1] = hi & 0x03030303u, b[2] = lo & 0x01010101u, b[3] = hi & 0x01010101u;
    } else {
        const uint32_t u = t == 0 ? w4.x : t == 1 ? w4.y : t == 2 ? w4.z : w4.w;
        b[0] = u & 0x0F0F0F0Fu, b[1] = (u >> 4) & 0x0F0F0F0Fu;
    }
}

/* Chunks ahead whose activations a block asks L1 for (pk_gemm_int_kernel's l1_ahead): the planes
 * are L2's, a few hundred cycles away, and a warp's loads of a chunk's activations otherwise go
 * out only as its steps begin, with 12 warps an SM (NF2, 32 rows a warp: 168 registers) to hide
 * them. Two chunks are 4 KB of a block's L1. */
#define PK_IMMA_L1_AHEAD 2

template <int FMT, int NT>
__global__ void __launch_bounds__(PK_IMMA_THREADS, PK_IMMA_MIN_BLOCKS(NT))
    pk_gemm_int_kernel(pk_weight w, const uint32_t *__restrict__ planes, const int2 *__restrict__ meta, int n,
                       int gshift, pk_dst out, int l1_ahead) {
    typedef pk_int_fmt<FMT> F;
    typedef pk_imma_fmt<FMT> I;
    constexpr int STEPS = F::V / 32; /* m16n8k32 steps a chunk */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = ((int64_t)blockIdx.x * (PK_IMMA_THREADS / 32) + (threadIdx.x >> 5)) * (NT * 8);
    const int i0 = (int)blockIdx.y * 16;
    const int chunks = (int)(w.cols / F::V), words = (int)(w.cols / 2); /* a row's, within 32 bits */
    /* this lane's code rows (row0 + 8·nt + g, the last row again past the end) and the group
     * scales' first index of the rows its sums hold (row0 + 8·nt + 2t + e) */
    const uint4 *codes[NT];
    uint32_t g0[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int64_t r = row0 + nt * 8 + g < w.rows ? row0 + nt * 8 + g : w.rows - 1;
        codes[nt] =
            (const uint4 *)((const uint8_t *)w.data + ((uint64_t)(w.elem0 + r * w.cols) >> (FMT == PK_NF2 ? 2 : 1)));
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t rs = row0 + nt * 8 + 2 * t + e < w.rows ? row0 + nt * 8 + 2 * t + e : w.rows - 1;
            g0[nt][e] = (uint32_t)(w.elem0 + rs * w.cols) >> gshift;
        }
    }
    /* this lane's input rows (g and g + 8 of the tile; past n the last again, never stored) */
    int in[2];
#pragma unroll
    for (int h = 0; h < 2; h++) in[h] = i0 + 8 * h + g < n ? i0 + 8 * h + g : n - 1;
    /* The block's warps share the tile's 16 inputs (one L1), so they split the requests: lane
     * j < ASKS of warp w asks for input i0 + ASKS·w + j's chunk c + PK_IMMA_L1_AHEAD (a chunk of an
     * input's planes is one line, NF2's 128 bytes, or half of one, INT4's 64). */
    constexpr int ASKS = 16 / (PK_IMMA_THREADS / 32);
    static_assert(ASKS * (PK_IMMA_THREADS / 32) == 16, "the block's warps split a tile's 16 inputs");
    const int asked = i0 + ASKS * (int)(threadIdx.x >> 5) + lane;
    const uint32_t *ahead = planes + (int64_t)(asked < n ? asked : n - 1) * words;
    const bool asks = l1_ahead && lane < ASKS;
    uint4 next[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) next[nt] = __ldg(codes[nt]);
    pk_grid_wait(); /* the planes and meta come from the kernel before; the weights never change */
    if (asks)
        for (int c = 1; c < PK_IMMA_L1_AHEAD && c < chunks; c++) pk_prefetch_l1(ahead + c * STEPS * 16);
    float acc[NT][4] = {};
    for (int c = 0; c < chunks; c++) {
        uint4 cur[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) cur[nt] = next[nt];
        if (c + 1 < chunks)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) next[nt] = __ldg(codes[nt] + c + 1);
        if (asks && c + PK_IMMA_L1_AHEAD < chunks) pk_prefetch_l1(ahead + (c + PK_IMMA_L1_AHEAD) * STEPS * 16);
        int sum[NT][I::COMBOS][4] = {};
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            uint32_t b[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) pk_imma_codes<FMT>(cur[nt], s, t, b[nt]);
            const int at = (c * STEPS + s) * 16 + I::word(t);
            const uint2 h0 = *(const uint2 *)(planes + (int64_t)in[0] * words + at);
            const uint2 h1 = *(const uint2 *)(planes + (int64_t)in[1] * words + at);
            const uint2 l0 = *(const uint2 *)(planes + (int64_t)in[0] * words + at + I::PLANE_L);
            const uint2 l1 = *(const uint2 *)(planes + (int64_t)in[1] * words + at + I::PLANE_L);
            const uint32_t ah[4] = {h0.x, h1.x, h0.y, h1.y}, al[4] = {l0.x, l1.x, l0.y, l1.y};
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint32_t b_main[2] = {b[nt][0], b[nt][1]};
                pk_imma<true>(sum[nt][0], ah, b_main);
                pk_imma<false>(sum[nt][1], al, b_main);
                if constexpr (FMT == PK_NF2) {
                    const uint32_t b_bit0[2] = {b[nt][2], b[nt][3]};
                    pk_imma<true>(sum[nt][2], ah, b_bit0);
                    pk_imma<false>(sum[nt][3], al, b_bit0);
                }
            }
        }
        /* the chunk's sums, joined by pk_int_total, times the activation and group scales */
        float gs[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                gs[nt][e] =
                    pk_f16(__ldg((const unsigned short *)w.scales + (g0[nt][e] + ((uint32_t)(c * F::V) >> gshift))));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int2 mtc = meta[(int64_t)in[h] * chunks + c];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int k = 2 * h + e; /* c0, c1: input g; c2, c3: input g + 8 */
                    const int(&sm)[I::COMBOS][4] = sum[nt];
                    pk_int_sum<FMT> chunk;
                    if constexpr (FMT == PK_NF2)
                        chunk.hc = sm[0][k], chunk.lc = (uint32_t)sm[1][k], chunk.h0 = sm[2][k],
                        chunk.l0 = (uint32_t)sm[3][k];
                    else
                        chunk.h = sm[0][k], chunk.l = (uint32_t)sm[1][k];
                    acc[nt][k] += gs[nt][e] * __int_as_float(mtc.x) * pk_int_total<FMT>(chunk, mtc.y);
                }
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int i = i0 + 8 * (k >> 1) + g;
        if (i >= n) continue;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int64_t r = row0 + nt * 8 + 2 * t + (k & 1);
            if (r >= w.rows) continue;
            float *dst = out.y + (int64_t)i * w.rows + r;
            *dst = out.accumulate ? *dst + acc[nt][k] : acc[nt][k];
        }
    }
}

#endif
