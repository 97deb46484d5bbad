/* gemv_int: NF2, INT4 and NF4 products for 1..8 inputs in integer arithmetic (dp4a), so the
 * packed bytes rather than the decode instructions set the pace (the float template of gemv.cuh
 * spends ~15 PTX instructions per weight on these formats, this loop 3 to 6 at one input).
 *
 * Activations are prepared once per product, as the CPU's integer loops prepare theirs
 * (backend/cpu_gemv_vnni.c): NF2 rotates each group slice (the same WHT, the same bits), then
 * every chunk of V consecutive inputs (NF2 64 and INT4 32: the 16 bytes of codes a lane takes
 * at once; NF4 64: its 32 bytes, one bitsandbytes block, so one absmax a chunk; runs of RUN
 * inputs, each one 32-bit code word) gets the scale max|x|/ACT and is rounded to integers q of
 * at most ACT (NF2 16383, INT4 32767, NF4 32639; the CPU rounds per 16 to 32767, so the two
 * differ by the rounding, within the tolerances of the tests). dp4a multiplies bytes, so
 * q = 256·h + l is stored as two byte planes, h signed, each in the order the code word's
 * values come out:
 *   NF2:  (u >> 2k) & 0x03030303 holds codes 4j + k (2 bits, c = 2·b1 + b0) in byte j
 *         (k = 0..3), and (u >> 2k) & 0x01010101 their bit 0. The centroids ±283, ±944 (units
 *         of 0.0016) are 1227·b1 + 661·b0 − 944, i.e. (1227·c + 95·b0 − 1888) / 2, so twice a
 *         chunk's Σ c·q is 1227·C + 95·B − 1888·Q with C = Σ c·q, B = Σ b0·q (each 256·Σ·h +
 *         Σ·l, l unsigned): one shift and two masks per byte position. The terms pass 2^31
 *         (1227·C reaches 3.9e9) but the result is within ±2.0e9, so the sums are formed modulo
 *         2^32 (unsigned) and are exact; the half goes into the chunk's scale.
 *   INT4: u & 0x0F0F0F0F holds the nibbles of elements 2j, (u >> 4) & 0x0F0F0F0F of 2j + 1;
 *         Σ (nibble − 8)·q = Σ nibble·q − 8·Q (l unsigned).
 *   NF4:  the code's value in the weight's 16-entry table, rounded to T = 256·H + L of at most
 *         32639 in units of the table's largest |value| / 32639 (error ≤ 1.5e-5 of the block's
 *         absmax in bitsandbytes' table, whose largest is 1), comes out of byte permutes of the
 *         table's H and L bytes (8 registers) indexed by the code word's nibbles in place:
 *         nibbles 0..3 give elements 1, 0, 3, 2 (bitsandbytes puts the even element high),
 *         4..7 elements 5, 4, 7, 6. Weights and activations are both signed byte pairs
 *         (l = q − 256·h in −128..127), so the byte products are signed dp4a:
 *         Σ T·q = 256·(256·Σ H·h + Σ (H·l + L·h)) + Σ L·l. The last term is left out: a
 *         product's L·l is at most 2^14 where T·q reaches 2^30 (1.5e-5 of the range, the size of
 *         the table's own rounding, and of either sign), and it would cost two of a word's eight
 *         dp4a. The other two sums are exact in int32 over a chunk; the 256 is in its scale.
 * The −1888·Q or −8·Q term is prepared with the chunk's scale (its "bias"), so each run costs
 * its plane extractions (NF4: permutes) and its dp4a, chained into the chunk's byte-product sums,
 * and each chunk the sums' joining (a few integer multiply-adds), one or two conversions and the
 * multiplies by its activation scale and its group's scale (f16; NF4 the absmax, nested or not).
 * Weights whose groups are not a power of two of whole chunks, or slices the group layout does
 * not align with, take the float template instead (int_gemv_takes in gemv.cu). */
#ifndef PP_KERNELS_GEMV_INT_CUH
#define PP_KERNELS_GEMV_INT_CUH

#include "attn.cuh" /* pk_attn_block: the attention a qkv product runs as its heads complete */
#include "gemv.cuh" /* pk_warp_rows, pk_store_rows; decode_nf2.cuh's transform */

#define PK_NF2_UNIT 0.0016f   /* the NF2 centroids are ±283 and ±944 of these */
#define PK_INT_PREP_SLICE 256 /* INT4, NF4: inputs a preparation block rounds (no transform) */
/* Blocks of 128 threads an SM must hold at once: caps registers at 128 per thread, no spills. */
#ifndef PK_INT_MIN_BLOCKS
#define PK_INT_MIN_BLOCKS 4
#endif
#define PK_SELF_THREADS 256 /* a self-preparing product's block (pk_gemv_int_self_kernel) */

/* RUN: inputs of one 32-bit code word; V: of a chunk of CW 16-byte loads (4·CW runs), which also
 * shares one activation scale; ACT: the largest rounded activation. NF2's 16383 keeps a chunk's sum
 * (2·944·64·16383 < 2^31) in int32; INT4's chunk sums stay far below at 32767; NF4's 32639 is
 * the largest q whose signed bytes h = (q + 128) >> 8 and l = q − 256·h both fit. */
template <int FMT> struct pk_int_fmt;
template <> struct pk_int_fmt<PK_NF2> {
    enum { RUN = 16, V = 64, CW = 1, ACT = 16383 };
};
template <> struct pk_int_fmt<PK_INT4> {
    enum { RUN = 8, V = 32, CW = 1, ACT = 32767 };
};
template <> struct pk_int_fmt<PK_NF4> {
    enum { RUN = 8, V = 64, CW = 2, ACT = 32639 };
};
#define PK_NF4_TABLE_ONE 32639 /* NF4's largest table value as an integer (the same signed byte pair) */

/* V of an integer product's format. */
__host__ __device__ static inline int pk_int_v(int fmt) {
    return fmt == PK_INT4 ? (int)pk_int_fmt<PK_INT4>::V : (int)pk_int_fmt<PK_NF2>::V; /* NF2's = NF4's */
}

/* The prepared activations of n inputs of `cols`: byte planes [n][cols/RUN][2][RUN/4] words
 * (h words, then l words), then each chunk's {scale, bias} [n][cols/V]. */
static inline size_t pk_int_plane_bytes(int64_t n, int64_t cols) { return (size_t)(n * cols * 2); }
static inline size_t pk_int_workspace_bytes(int fmt, int64_t n, int64_t cols) {
    return pk_int_plane_bytes(n, cols) + (size_t)(n * cols / pk_int_v(fmt)) * sizeof(int2);
}

__device__ __forceinline__ uint32_t pk_dp4a_u(uint32_t a, uint32_t b, uint32_t c) { return __dp4a(a, b, c); }
__device__ __forceinline__ int pk_dp4a_s(int a, int b, int c) { return __dp4a(a, b, c); }

/* Rounds the V inputs at `in` to integers of at most ACT as chunk g (its index over all inputs):
 * its runs' byte planes and its {scale, bias}. */
template <int FMT>
__device__ __forceinline__ void pk_int_prepare_chunk(const float *in, int64_t g, uint32_t *__restrict__ planes,
                                                     int2 *__restrict__ meta) {
    typedef pk_int_fmt<FMT> F;
    const float act = (float)F::ACT;
    float m = 0.0f;
#pragma unroll 8
    for (int t = 0; t < F::V; t++) m = fmaxf(m, fabsf(in[t]));
    const float inv = m > 0 ? act / m : 0.0f;
    int sum = 0;
    for (int s = 0; s < F::V / F::RUN; s++) { /* the chunk's runs */
        const float *run = in + s * F::RUN;
        uint32_t h[F::RUN / 4], l[F::RUN / 4];
#pragma unroll
        for (int k = 0; k < F::RUN / 4; k++) h[k] = l[k] = 0;
#pragma unroll
        for (int t = 0; t < F::RUN; t++) {
            int q = __float2int_rn(fminf(fmaxf(run[t] * inv, -act), act));
            sum += q;
            /* byte j of word k, as the code word's values come out (see the top of the file) */
            const int k = FMT == PK_NF4 ? t / 4 : t % (F::RUN / 4), j = FMT == PK_NF4 ? (t % 4) ^ 1 : t / (F::RUN / 4);
            const int hi = FMT == PK_NF4 ? (q + 128) >> 8 : q >> 8; /* NF4: l signed too */
            h[k] |= (uint32_t)(hi & 255) << (8 * j);
            l[k] |= (uint32_t)((q - 256 * hi) & 255) << (8 * j);
        }
        uint32_t *dst = planes + (g * (F::V / F::RUN) + s) * (F::RUN / 2);
#pragma unroll
        for (int k = 0; k < F::RUN / 4; k++) {
            dst[k] = h[k];
            dst[F::RUN / 4 + k] = l[k];
        }
    }
    const float unit = FMT == PK_NF2 ? PK_NF2_UNIT / 2 : FMT == PK_NF4 ? 256.0f / PK_NF4_TABLE_ONE : 1.0f;
    const int bias = FMT == PK_NF2 ? -1888 * sum : FMT == PK_INT4 ? -8 * sum : 0;
    meta[g] = make_int2(__float_as_int(m > 0 ? m / act * unit : 0.0f), bias);
}

/* ---- handing the next product its input (kernels.h's pk_next) ---- */
#define PK_NEXT_MAX_LEN 1024 /* inputs of one slice: the block's shared buffer */
#define PK_NEXT_MIN_LEN 32   /* keeps the slices one block can complete within PK_NEXT_MAX_DONE */
#define PK_NEXT_MAX_DONE 64  /* a GEMV block's 16 rows of 8 inputs, an attention head of 256; gemv.cu keeps the qkv
                              * product's attending blocks within it (attn_completions_fit) */

/* Input j of row `row` as the next product takes it, read through L2: other blocks of this
 * launch wrote it. NORM: x·alpha, and ss gains x². */
__device__ __forceinline__ float pk_next_input(const pk_next &nx, int64_t row, int64_t j, float &ss) {
    if (nx.prep == PK_NEXT_GATED) {
        const float *u = nx.x + row * 2 * nx.cols;
        return pk_silu_gate(__ldcg(u + j), __ldcg(u + nx.cols + j));
    }
    const float x = __ldcg(nx.x + row * nx.cols + j);
    if (nx.prep != PK_NEXT_NORM) return x;
    ss += x * x;
    return x * nx.alpha[j];
}

/* pk_int_prepare_chunk of format fmt. Not inlined: the hand-over's rounding stays out of the
 * registers of the kernels that end with it (the attention's int8 instance spilled). */
static __device__ __attribute__((noinline)) void pk_next_round(int fmt, const float *in, int64_t g, uint32_t *planes,
                                                               int2 *meta) {
    if (fmt == PK_NF2)
        pk_int_prepare_chunk<PK_NF2>(in, g, planes, meta);
    else if (fmt == PK_NF4)
        pk_int_prepare_chunk<PK_NF4>(in, g, planes, meta);
    else
        pk_int_prepare_chunk<PK_INT4>(in, g, planes, meta);
}

/* Slice s of row `row` prepared as pk_int_prepare_kernel prepares it, by the whole block through
 * v (red: pk_block_sum's); ends with a barrier. */
__device__ __forceinline__ void pk_next_prepare_slice(const pk_next &nx, int64_t row, int64_t s, float *v, float *red) {
    const int64_t c0 = s * nx.len;
    float ss = 0.0f; /* NORM: the slice's Σx², for the next product's 1/rms */
    for (int j = threadIdx.x; j < nx.len; j += blockDim.x) v[j] = pk_next_input(nx, row, c0 + j, ss);
    if (nx.prep == PK_NEXT_NORM) {
        ss = pk_block_sum(ss, red); /* its barriers also end the loads into v */
        if (threadIdx.x == 0) nx.sumsq[row * (nx.cols / nx.len) + s] = ss;
    }
    __syncthreads();
    if (nx.fmt == PK_NF2) pk_wht(v, nx.len, nx.np2);
    const int v_len = pk_int_v(nx.fmt);
    for (int r = threadIdx.x; r < nx.len / v_len; r += blockDim.x)
        pk_next_round(nx.fmt, v + r * v_len, (row * nx.cols + c0) / v_len + r, nx.planes, (int2 *)nx.meta);
    __syncthreads();
}

/* The counting step of a product's or attention's epilogue, by every thread of the block: publishes
 * the block's outputs [e0, e1) of rows [row0, row0 + rows) (a fence), counts them toward groups
 * of `group` consecutive outputs (output e of a row in group (e mod span) / group, span / group
 * groups a row), each complete at `target`, and leaves in done the groups this block completed
 * (row · groups + group; their counters reset for the next launch: nothing else counts them in
 * this one). Returns their number; the other blocks' outputs of those groups are then visible
 * (a second fence: the CUDA programming guide's last-block pattern). */
static __device__ __forceinline__ int pk_count_completed(unsigned *counts, int64_t row0, int rows, int64_t e0,
                                                         int64_t e1, int64_t span, int64_t group, unsigned target,
                                                         int *done) {
    __shared__ int n_done;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t groups = span / group;
        int k = 0;
        for (int64_t r = row0; r < row0 + rows; r++)
            for (int64_t a = e0; a < e1;) {
                const int64_t c = a % span, g = c / group;
                const int64_t b = a + (g + 1) * group - c < e1 ? a + (g + 1) * group - c : e1;
                unsigned *count = counts + r * groups + g;
                if (atomicAdd(count, (unsigned)(b - a)) + (unsigned)(b - a) == target) {
                    *count = 0;
                    if (k == PK_NEXT_MAX_DONE) __trap(); /* a launch past the bounds PK_NEXT_MAX_DONE names */
                    done[k++] = (int)(r * groups + g);
                }
                a = b;
            }
        n_done = k;
    }
    __syncthreads();
    const int completed = n_done;
    if (completed) __threadfence();
    return completed;
}

/* After the block wrote outputs [e0, e1) of rows [row0, row0 + rows) of nx.x (GATED: columns of
 * u, of which c and cols + c both feed input c): counts them toward their slices (fenced as
 * pk_count_completed) and prepares each slice it completes. Every thread calls it. Not inlined:
 * its registers stay out of the caller's loops. */
static __device__ __attribute__((noinline)) void pk_next_after_store(const pk_next &nx, int64_t row0, int rows,
                                                                     int64_t e0, int64_t e1) {
    __shared__ int done[PK_NEXT_MAX_DONE];
    __shared__ float v[PK_NEXT_MAX_LEN], red[32];
    const int64_t slices = nx.cols / nx.len;
    const int completed = pk_count_completed(nx.counts, row0, rows, e0, e1, nx.cols, nx.len,
                                             (unsigned)(nx.prep == PK_NEXT_GATED ? 2 * nx.len : nx.len), done);
    for (int i = 0; i < completed; i++) pk_next_prepare_slice(nx, done[i] / slices, done[i] % slices, v, red);
}

/* The consumer's side of a NORM hand-over (in), by every thread of a product's block after its
 * grid wait: each row's 1/rms from the slices' Σx² in slice order (the same in every block) into
 * inv [n <= NB], then this block's share of h = x·alpha·inv (the blocks split the n·cols values).
 * Not inlined, as pk_next_after_store. */
static __device__ __attribute__((noinline, unused)) void pk_norm_handed(const pk_next &in, int n, float *inv) {
    const int slices = (int)(in.cols / in.len), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < n; r += blockDim.x >> 5) {
        float ss = 0.0f;
        for (int s = lane; s < slices; s += 32) ss += in.sumsq[(int64_t)r * slices + s];
        ss = pk_warp_sum(ss);
        if (lane == 0) inv[r] = rsqrtf(in.eps + ss / (float)in.cols);
    }
    __syncthreads();
    const int64_t total = (int64_t)n * in.cols, per = (total + gridDim.x - 1) / gridDim.x;
    const int64_t end = (blockIdx.x + 1) * per < total ? (blockIdx.x + 1) * per : total;
    for (int64_t e = blockIdx.x * per + threadIdx.x; e < end; e += blockDim.x)
        in.h[e] = in.x[e] * (in.alpha[e % in.cols] * inv[e / in.cols]);
}

/* One block per slice of `len` inputs (NF2: a group, rotated first; INT4: PK_INT_PREP_SLICE or
 * less); a thread per run. Slices never straddle input rows (the launcher checks cols % len).
 * GATED: x is u [n][2·cols] and the inputs are silu(u[i][j])·u[i][cols + j]. */
template <int FMT, int GATED>
__global__ void pk_int_prepare_kernel(const float *__restrict__ x, int64_t cols, int len, uint32_t *__restrict__ planes,
                                      int2 *__restrict__ meta) {
    pk_grid_wait();
    typedef pk_int_fmt<FMT> F;
    PK_DYNAMIC_SHARED(float, v);
    const int64_t row = (int64_t)blockIdx.x * len / cols, col = (int64_t)blockIdx.x * len % cols;
    const float *src = x + row * (GATED ? 2 * cols : cols) + col;
    for (int i = threadIdx.x; i < len; i += blockDim.x) v[i] = GATED ? pk_silu_gate(src[i], src[cols + i]) : src[i];
    __syncthreads();
    if (FMT == PK_NF2) pk_wht(v, len, len);
    for (int r = threadIdx.x; r < len / F::V; r += blockDim.x)
        pk_int_prepare_chunk<FMT>(v + r * F::V, (int64_t)blockIdx.x * (len / F::V) + r, planes, meta);
}

/* The normalization before a product and the product's preparation in one pass: block
 * (slice, row) sums the squares of the row's d inputs (each block of the row the same sum in
 * the same order), writes h = x·alpha/rms for its `len` of them, and rounds those as
 * pk_int_prepare_kernel does (NF2: each aligned np2 of them rotated first). Every block reads
 * the whole row, so none may write x: a residual joins x in the product before (accumulate). */
template <int FMT>
__global__ void __launch_bounds__(256)
    pk_int_norm_prepare_kernel(const float *__restrict__ x, const float *__restrict__ alpha, int d, float eps, int len,
                               int np2, float *__restrict__ h, uint32_t *__restrict__ planes, int2 *__restrict__ meta) {
    pk_grid_wait();
    typedef pk_int_fmt<FMT> F;
    PK_DYNAMIC_SHARED(float, v);
    __shared__ float red[32];
    const int64_t row = blockIdx.y, c0 = (int64_t)blockIdx.x * len;
    const float *xi = x + row * d;
    const float inv = pk_row_inv_rms(xi, d, eps, red);
    for (int j = threadIdx.x; j < len; j += blockDim.x) h[row * d + c0 + j] = v[j] = xi[c0 + j] * (alpha[c0 + j] * inv);
    __syncthreads();
    if (FMT == PK_NF2) pk_wht(v, len, np2);
    for (int q = threadIdx.x; q < len / F::V; q += blockDim.x)
        pk_int_prepare_chunk<FMT>(v + q * F::V, (row * d + c0) / F::V + q, planes, meta);
}

/* NF4's table as byte planes: byte c % 4 of word c / 4 holds code c's H (h) and L (l), signed,
 * in units of top / PK_NF4_TABLE_ONE (top: the largest |value|, 1 in bitsandbytes' table). */
struct pk_nf4_table {
    uint32_t h[4], l[4];
    float top;
};

/* The table of a weight's quant_map, by each thread (16 loads, once per product). */
__device__ __forceinline__ pk_nf4_table pk_nf4_int_table(const float *quant_map) {
    pk_nf4_table t = {};
    float value[16];
#pragma unroll
    for (int c = 0; c < 16; c++) t.top = fmaxf(t.top, fabsf(value[c] = __ldg(quant_map + c)));
    const float unit = t.top > 0 ? PK_NF4_TABLE_ONE / t.top : 0.0f;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        const int v = __float2int_rn(value[c] * unit);
        const int hi = (v + 128) >> 8;
        t.h[c / 4] |= (uint32_t)(hi & 255) << (8 * (c % 4));
        t.l[c / 4] |= (uint32_t)((v - 256 * hi) & 255) << (8 * (c % 4));
    }
    return t;
}

/* A chunk's sums for one input and row, each a dp4a chain over its four runs: NF2 Σ c·h, Σ b0·h
 * (h signed) and Σ c·l, Σ b0·l (l unsigned); INT4 Σ nibble·h and Σ nibble·l; NF4 Σ H·h and
 * Σ (H·l + L·h). All far within 32 bits; pk_int_total joins them once per chunk. */
template <int FMT> struct pk_int_sum;
template <> struct pk_int_sum<PK_NF2> {
    int hc, h0;
    uint32_t lc, l0;
};
template <> struct pk_int_sum<PK_INT4> {
    int h;
    uint32_t l;
};
template <> struct pk_int_sum<PK_NF4> { int hh, mix; };

/* Adds one run to a chunk's sums: code word u against the run's planes p (h words, then l words;
 * tab: NF4's table, unused by the others). */
template <int FMT>
__device__ __forceinline__ void pk_int_run(uint32_t u, const uint32_t *p, const pk_nf4_table &tab,
                                           pk_int_sum<FMT> &sum) {
    if constexpr (FMT == PK_NF2) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t t = u >> (2 * k), c = t & 0x03030303u, b0 = t & 0x01010101u;
            sum.hc = pk_dp4a_s((int)c, (int)p[k], sum.hc);
            sum.h0 = pk_dp4a_s((int)b0, (int)p[k], sum.h0);
            sum.lc = pk_dp4a_u(c, p[4 + k], sum.lc);
            sum.l0 = pk_dp4a_u(b0, p[4 + k], sum.l0);
        }
    } else if constexpr (FMT == PK_NF4) {
        /* permute selectors: a nibble's low 3 bits pick the byte in each half of the table
         * (__byte_perm reads a selector nibble's low 3 bits, of the low 16 bits), then its bit 3
         * the half */
        const uint32_t half = ((u >> 1) & 0x44444444u) | 0x32103210u;
#pragma unroll
        for (int k = 0; k < 2; k++) { /* nibbles 4k .. 4k + 3 */
            const uint32_t i = u >> (16 * k), m = half >> (16 * k);
            const int th = (int)__byte_perm(__byte_perm(tab.h[0], tab.h[1], i), __byte_perm(tab.h[2], tab.h[3], i), m);
            const int tl = (int)__byte_perm(__byte_perm(tab.l[0], tab.l[1], i), __byte_perm(tab.l[2], tab.l[3], i), m);
            sum.hh = pk_dp4a_s(th, (int)p[k], sum.hh);
            sum.mix = pk_dp4a_s(th, (int)p[2 + k], pk_dp4a_s(tl, (int)p[k], sum.mix));
        }
    } else {
        const uint32_t n0 = u & 0x0F0F0F0Fu, n1 = (u >> 4) & 0x0F0F0F0Fu;
        sum.h = pk_dp4a_s((int)n0, (int)p[0], pk_dp4a_s((int)n1, (int)p[1], sum.h));
        sum.l = pk_dp4a_u(n0, p[2], pk_dp4a_u(n1, p[3], sum.l));
    }
}

/* A chunk's Σ code·q with its bias, in float: NF2 and INT4 exact modulo 2^32; NF4's over 256 (see
 * the top). */
template <int FMT> __device__ __forceinline__ float pk_int_total(const pk_int_sum<FMT> &sum, int bias) {
    if constexpr (FMT == PK_NF2)
        return (float)(int)((uint32_t)bias + 1227u * 256u * (uint32_t)sum.hc + 1227u * sum.lc +
                            95u * 256u * (uint32_t)sum.h0 + 95u * sum.l0); /* four multiply-adds */
    else if constexpr (FMT == PK_NF4)
        return (float)(256 * sum.hh + sum.mix); /* within 2^29: exact to 2^-24 */
    else
        return (float)(int)((uint32_t)bias + 256u * (uint32_t)sum.h + sum.l);
}

/* Each row's group scales, read at a chunk's group offset dg from the row's first group: f16
 * (NF2, INT4), or NF4's absmax (pk_nf4_absmax_at; nested, its second-level block is
 * g >> nested_shift), whose kind the branch here tests once per chunk rather than once per row. */
template <int FMT, int RPW> struct pk_int_scales {
    uint32_t g0[RPW]; /* each row's first group */
    int nested_shift;

    __device__ __forceinline__ pk_int_scales(const pk_weight &w, const int64_t (&e0)[RPW], int gshift) {
        /* NF4's nested blocks: a power of two of groups (int_gemv_takes) */
        nested_shift = FMT == PK_NF4 && w.nested_block > 1 ? __ffs(w.nested_block) - 1 : 0;
        /* rows start on groups, element indices within 32 bits (int_gemv_takes) */
#pragma unroll
        for (int r = 0; r < RPW; r++) g0[r] = (uint32_t)e0[r] >> gshift;
    }

    __device__ __forceinline__ void get(const pk_weight &w, uint32_t dg, float (&g)[RPW]) const {
        if constexpr (FMT == PK_NF4) {
            if (w.nested_absmax) {
#pragma unroll
                for (int r = 0; r < RPW; r++) g[r] = pk_nf4_absmax_at(w, g0[r] + dg, (g0[r] + dg) >> nested_shift);
            } else {
#pragma unroll
                for (int r = 0; r < RPW; r++) g[r] = pk_nf4_absmax_at(w, g0[r] + dg, 0);
            }
        } else {
#pragma unroll
            for (int r = 0; r < RPW; r++) g[r] = pk_f16(__ldg((const unsigned short *)w.scales + (g0[r] + dg)));
        }
    }
};

/* The CW 16-byte loads of codes of chunk c of each row (first elements e0, multiples of the
 * chunk's V elements). */
template <int FMT, int RPW>
__device__ __forceinline__ void pk_int_chunk_codes(const pk_weight &w, const int64_t (&e0)[RPW], int c,
                                                   uint4 (&raw)[RPW][pk_int_fmt<FMT>::CW]) {
    typedef pk_int_fmt<FMT> F;
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const uint4 *row = (const uint4 *)((const uint8_t *)w.data + ((uint64_t)e0[r] >> (FMT == PK_NF2 ? 2 : 1)));
#pragma unroll
        for (int j = 0; j < F::CW; j++) raw[r][j] = __ldg(row + c * F::CW + j);
    }
}

/* A warp's RPW consecutive rows (first elements e0) against n <= NB prepared inputs, each lane a
 * chunk (CW 16-byte loads) of each row at a time, as in gemv.cuh; inputs load their planes once
 * per run for all RPW rows. The planes and meta are global (read-only for the kernel) or the
 * block's shared memory; plain loads, so their offsets within a chunk fold into the loads. first
 * holds the lane's first chunk of each row, loaded by the caller (before its pk_grid_wait: weights
 * never change); the loop over the others loads each chunk as it starts (the rows' loads in
 * flight together; holding the next chunk's codes in registers cost a move per word, and on an
 * H200 it gained within the run-to-run spread). */
template <int FMT, int NB, int RPW>
__device__ __forceinline__ void pk_int_rows(const pk_weight &w, const uint32_t *__restrict__ planes,
                                            const int2 *__restrict__ meta, int n, int gshift, const int64_t (&e0)[RPW],
                                            const uint4 (&first)[RPW][pk_int_fmt<FMT>::CW], float (&acc)[NB][RPW]) {
    typedef pk_int_fmt<FMT> F;
    const int lane = threadIdx.x & 31;
    const int chunks = (int)(w.cols / F::V), runs = (int)(w.cols / F::RUN); /* a row's, within 32 bits */
    pk_nf4_table tab = {};
    if (FMT == PK_NF4) tab = pk_nf4_int_table(w.quant_map);
    const pk_int_scales<FMT, RPW> scales(w, e0, gshift);
    auto chunk = [&](const uint4(&raw)[RPW][F::CW], int c) {
        pk_int_sum<FMT> sum[NB][RPW];
#pragma unroll
        for (int i = 0; i < NB; i++)
#pragma unroll
            for (int r = 0; r < RPW; r++) sum[i][r] = {};
#pragma unroll
        for (int s = 0; s < F::V / F::RUN; s++) { /* the chunk's runs, one code word each */
#pragma unroll
            for (int i = 0; i < NB; i++) {
                if (NB > 1 && i >= n) break; /* NB = 1 runs n = 1 only */
                /* run s of the chunk of input i: RUN / 2 words */
                const uint4 *p4 =
                    (const uint4 *)planes + (int64_t)(i * runs + c * (F::V / F::RUN)) * (F::RUN / 8) + s * (F::RUN / 8);
                uint32_t p[F::RUN / 2];
#pragma unroll
                for (int v = 0; v < F::RUN / 8; v++) {
                    const uint4 q = p4[v];
                    p[4 * v] = q.x, p[4 * v + 1] = q.y, p[4 * v + 2] = q.z, p[4 * v + 3] = q.w;
                }
#pragma unroll
                for (int r = 0; r < RPW; r++) {
                    const uint4 &w4 = raw[r][s / 4];
                    const uint32_t u = s % 4 == 0 ? w4.x : s % 4 == 1 ? w4.y : s % 4 == 2 ? w4.z : w4.w;
                    pk_int_run<FMT>(u, p, tab, sum[i][r]);
                }
            }
        }
        /* the chunk's activation scale and bias, then the weights' group scale */
        float g[RPW];
        scales.get(w, (uint32_t)(c * F::V) >> gshift, g);
#pragma unroll
        for (int i = 0; i < NB; i++) {
            if (NB > 1 && i >= n) break;
            const int2 mt = meta[i * chunks + c];
#pragma unroll
            for (int r = 0; r < RPW; r++)
                acc[i][r] += g[r] * __int_as_float(mt.x) * pk_int_total<FMT>(sum[i][r], mt.y);
        }
    };
    if (lane < chunks) chunk(first, lane);
    for (int c = lane + PK_WARP; c < chunks; c += PK_WARP) {
        uint4 raw[RPW][F::CW];
        pk_int_chunk_codes<FMT, RPW>(w, e0, c, raw);
        chunk(raw, c);
    }
    if (FMT == PK_NF4)
#pragma unroll
        for (int i = 0; i < NB; i++)
#pragma unroll
            for (int r = 0; r < RPW; r++) acc[i][r] *= tab.top; /* the table's unit (1: exact) */
}

/* The lane's first chunk of each of its rows; past the row (a lane's first chunk of a row shorter
 * than a warp's chunks, loaded before the lane knows it has none) the row's last chunk again, so
 * the load takes no branch. */
template <int FMT, int RPW>
__device__ __forceinline__ void pk_int_first_codes(const pk_weight &w, const int64_t (&e0)[RPW],
                                                   uint4 (&first)[RPW][pk_int_fmt<FMT>::CW]) {
    const int chunks = (int)(w.cols / pk_int_fmt<FMT>::V), lane = threadIdx.x & 31;
    pk_int_chunk_codes<FMT, RPW>(w, e0, lane < chunks ? lane : chunks - 1, first);
}

/* norm: the NORM hand-over this product's input came by (pk_norm_handed; its prep NONE
 * otherwise), whose 1/rms multiplies input i's sums. With nx.prep set, the block then hands its
 * output over (pk_next_after_store). Warps past the last row stay for either's barriers. */
template <int FMT, int NB, int RPW>
__global__ void __launch_bounds__(128, PK_INT_MIN_BLOCKS)
    pk_gemv_int_kernel(pk_weight w, const uint32_t *__restrict__ planes, const int2 *__restrict__ meta, pk_next norm,
                       int n, int gshift, pk_dst out, pk_next nx) {
    __shared__ float inv[NB];
    int64_t e0[RPW];
    const int64_t r0 = pk_warp_rows<RPW>(w, e0);
    pk_prefetch_block_rows<RPW>(w, FMT == PK_NF2 ? 2 : 4); /* the wait comes after the first codes */
    if (r0 >= w.rows && !nx.prep && !norm.prep) return;
    uint4 first[RPW][pk_int_fmt<FMT>::CW];
    pk_int_first_codes<FMT, RPW>(w, e0, first);
    pk_grid_wait(); /* the planes and meta come from the kernel before */
    if (norm.prep) pk_norm_handed(norm, n, inv);
    if (r0 < w.rows) {
        float acc[NB][RPW] = {};
        pk_int_rows<FMT, NB, RPW>(w, planes, meta, n, gshift, e0, first, acc);
        if (norm.prep)
#pragma unroll
            for (int i = 0; i < NB; i++)
#pragma unroll
                for (int r = 0; r < RPW; r++) acc[i][r] *= i < n ? inv[i] : 0.0f;
        pk_store_rows<NB, RPW>(acc, w, r0, n, out);
    }
    if (nx.prep) {
        int64_t b0;
        const int64_t b1 = pk_block_rows<RPW>(w, &b0);
        pk_next_after_store(nx, 0, n, b0, b1);
    }
}

/* ---- products that prepare their own inputs ----
 * A small product (the depformer's: a few hundred blocks at most, so its time is latency, not
 * bandwidth) spends a launch on the preparation kernel before it, about as long as the product
 * itself. Here every block prepares all inputs in its shared memory instead (the same values,
 * bit for bit, as pk_int_prepare_kernel's; normalised first or gated as the preparation kernels
 * do) and then runs the rows of pk_gemv_int_kernel on them: redundant work, n/(rows per block)
 * of the weights' element count, traded for a launch. NB inputs at a time (as shared memory
 * holds), all n in turn. */
enum { PK_PREP_PLAIN, PK_PREP_GATED, PK_PREP_NORM };

/* Shared bytes one input's prepared planes and run metadata take. */
static inline size_t pk_int_self_input_bytes(int fmt, int64_t cols) { return pk_int_workspace_bytes(fmt, 1, cols); }

/* Prepares input row `row` of x into slot `slot` of the block's planes and meta, `slice` inputs at
 * a time through v (NF2: whole rotation slices). NORM also writes h = rmsnorm(x)·alpha (block 0
 * only: every block computes the same). Every thread calls it; it ends with a barrier. */
template <int FMT>
__device__ __forceinline__ void pk_int_self_prepare(const float *__restrict__ x, int prep,
                                                    const float *__restrict__ alpha, float eps, float *__restrict__ h,
                                                    int64_t row, int slot, int64_t cols, int np2, int slice, float *v,
                                                    uint32_t *planes, int2 *meta, float *red) {
    typedef pk_int_fmt<FMT> F;
    const float *src = x + row * (prep == PK_PREP_GATED ? 2 * cols : cols);
    const float inv = prep == PK_PREP_NORM ? pk_row_inv_rms(src, (int)cols, eps, red) : 1.0f;
    for (int64_t c0 = 0; c0 < cols; c0 += slice) {
        for (int j = threadIdx.x; j < slice; j += blockDim.x) {
            const int64_t c = c0 + j;
            float val = src[c];
            if (prep == PK_PREP_GATED) val = pk_silu_gate(val, src[cols + c]);
            if (prep == PK_PREP_NORM) {
                val = val * (alpha[c] * inv);
                if (blockIdx.x == 0) h[row * cols + c] = val;
            }
            v[j] = val;
        }
        __syncthreads();
        if (FMT == PK_NF2) pk_wht(v, slice, np2);
        for (int q = threadIdx.x; q < slice / F::V; q += blockDim.x)
            pk_int_prepare_chunk<FMT>(v + q * F::V, (slot * cols + c0) / F::V + q, planes, meta);
        __syncthreads();
    }
}

/* kernels.h's pk_attn_args as a self-preparing product's blocks take it (on: there is one). */
struct pk_attn_after {
    int on, n_heads, head_dim;
    pk_rope rope;
    pk_kv_ring one;
    const pk_kv_ring *const *tables;
    int layer;
    const int64_t *pos;
    float *out;
    unsigned *counts;
};

/* After the block wrote outputs [e0, e1) of the n rows of qkv [n][3·dim]: counts them toward their
 * (row, head)'s q, k and v, and runs the attention of each head it completes (fenced and counted
 * as pk_next_after_store). Every thread calls it; not inlined, as that one. */
template <int VPL>
static __device__ __attribute__((noinline)) void pk_attn_after_store(const pk_attn_after a, const float *qkv, int n,
                                                                     int64_t e0, int64_t e1) {
    __shared__ int done[PK_NEXT_MAX_DONE];
    const int completed = pk_count_completed(a.counts, 0, n, e0, e1, (int64_t)a.n_heads * a.head_dim, a.head_dim,
                                             3u * (unsigned)a.head_dim, done);
    for (int i = 0; i < completed; i++) {
        const int r = done[i] / a.n_heads, head = done[i] % a.n_heads;
        const pk_kv_ring ring = a.tables ? a.tables[r][a.layer] : a.one;
        pk_attn_block<PK_KV_F32, VPL, true, PK_SELF_THREADS / 32, false>(
            qkv, a.head_dim, a.rope, ring, a.pos, NULL, NULL, a.out, head, a.n_heads, 0, 1, PK_ATTN_SPLIT, r,
            true);
        __syncthreads(); /* the next head reuses the block's shared buffers */
    }
}

/* Dynamic shared memory: NB inputs' planes, then their run metadata, then `slice` floats. Blocks
 * of PK_SELF_THREADS: twice the rows of the other products' blocks, so half the blocks repeat
 * the preparation, each in half the time. */
template <int FMT, int NB, int RPW>
__global__ void __launch_bounds__(PK_SELF_THREADS, PK_INT_MIN_BLOCKS / 2)
    pk_gemv_int_self_kernel(pk_weight w, const float *__restrict__ x, int prep, const float *__restrict__ alpha,
                            float eps, float *__restrict__ h, int n, int gshift, int slice, pk_dst out,
                            pk_attn_after attn) {
    typedef pk_int_fmt<FMT> F;
    PK_DYNAMIC_SHARED(uint32_t, planes);
    __shared__ float red[32];
    int2 *meta = (int2 *)((uint8_t *)planes + NB * w.cols * 2); /* as pk_int_plane_bytes */
    float *v = (float *)(meta + NB * (w.cols / F::V));
    int64_t e0[RPW];
    const int64_t r0 = pk_warp_rows<RPW>(w, e0);
    pk_prefetch_block_rows<RPW>(w, FMT == PK_NF2 ? 2 : 4);
    uint4 first[RPW][pk_int_fmt<FMT>::CW];
    pk_int_first_codes<FMT, RPW>(w, e0, first);
    pk_grid_wait(); /* x comes from the kernel before */
    for (int i0 = 0; i0 < n; i0 += NB) {
        const int m = n - i0 < NB ? n - i0 : NB;
        for (int i = 0; i < m; i++)
            pk_int_self_prepare<FMT>(x, prep, alpha, eps, h, i0 + i, i, w.cols, w.np2, slice, v, planes, meta, red);
        if (r0 < w.rows) { /* a warp past the last row still prepares: the barriers need it */
            if (i0) pk_int_first_codes<FMT, RPW>(w, e0, first);
            float acc[NB][RPW] = {};
            pk_int_rows<FMT, NB, RPW>(w, planes, meta, m, gshift, e0, first, acc);
            pk_store_rows<NB, RPW>(acc, w, r0, m, pk_dst{out.y + (int64_t)i0 * w.rows, out.accumulate});
        }
        __syncthreads(); /* the next inputs overwrite the planes */
    }
    if (attn.on) {
        int64_t b0;
        const int64_t b1 = pk_block_rows<RPW>(w, &b0);
        if (attn.head_dim <= 64)
            pk_attn_after_store<2>(attn, out.y, n, b0, b1);
        else
            pk_attn_after_store<4>(attn, out.y, n, b0, b1);
    }
}

#endif
