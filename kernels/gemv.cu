/* gemv: y = x·wᵀ for every weight format (the launcher picks the kernel).
 *   NF2, INT4 and NF4, n <= PK_GEMV_MAX_BATCH, power-of-two groups: integer dot products on
 *                                           prepared activations (gemv_int.cuh);
 *   n <= PK_GEMV_MAX_BATCH, aligned shapes: the chunked template of gemv.cuh;
 *   n <= PK_GEMV_MAX_BATCH, other shapes:   one warp per row, one element at a time;
 *   larger n: tensor cores on tiles decoded in shared memory (gemm_tc.cuh); dense f32 weights
 *             by cuBLAS's SGEMM.
 * NF2 first rotates every group slice of x (the WHT, in shared memory) into the workspace. Every
 * path writes y or adds to it (pk_dst: a residual add in the product's epilogue);
 * pk_norm_matmul puts the RMSNorm before a product into the integer path's preparation, and
 * weights marked latency-bound prepare their inputs in the product's own blocks. */
#include <cublas_v2.h>

#include <type_traits>

#include "gemm_int.cuh"
#include "gemm_tc.cuh"
#include "gemv.cuh"
#include "gemv_int.cuh"

/* ---- NF2 activation rotation: one block per (input row, group) slice ---- */

__global__ void pk_rotate_kernel(const float *__restrict__ x, int gs, int np2, float *__restrict__ xr) {
    pk_grid_wait();
    PK_DYNAMIC_SHARED(float, v);
    const float *src = x + (int64_t)blockIdx.x * gs;
    for (int i = threadIdx.x; i < np2; i += blockDim.x) v[i] = i < gs ? src[i] : 0.0f;
    __syncthreads();
    pk_wht_shared(v, np2, np2);
    for (int i = threadIdx.x; i < gs; i += blockDim.x) xr[(int64_t)blockIdx.x * gs + i] = v[i];
}

/* ---- any shape: one warp per row ---- */

__global__ void __launch_bounds__(128)
    pk_gemv_scalar_kernel(pk_weight w, const float *__restrict__ x, int n, pk_dst out) {
    pk_grid_wait();
    __shared__ float lut[16];
    pk_load_lut(w, lut);
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    float acc[PK_GEMV_MAX_BATCH][1] = {};
    for (int64_t c = lane; c < w.cols; c += PK_WARP) {
        float v = pk_weight_elem(w, w.elem0 + r * w.cols + c, lut);
#pragma unroll
        for (int i = 0; i < PK_GEMV_MAX_BATCH; i++)
            if (i < n) acc[i][0] += v * x[(int64_t)i * w.cols + c];
    }
    pk_store_rows<PK_GEMV_MAX_BATCH, 1>(acc, w, r, n, out);
}

/* ---- Q4_K: one warp per row, a whole 256-weight block per step ----
 * A block's codes are four runs of 32 bytes: byte b of run c holds weight 64c + b in its low
 * nibble (sub-block 2c) and weight 64c + 32 + b in its high nibble (sub-block 2c + 1), and
 * sub-block j is d·sc_j·q − dmin·m_j. Lane L takes bytes 4(L % 8)..+3 of run L / 8, so the warp
 * reads a block's 128 code bytes in one coalesced load and each input's 256 activations in two
 * float4 loads, consecutive across the lanes. (A lane per sub-block reads activations 128 bytes
 * apart, 32 cache lines per warp load: on an H200 that product ran at 4 % of the bandwidth.)
 * Each lane sums q·x and x over its four weights of two sub-blocks and applies their scales and
 * mins, read from the block's 16 header bytes as four words (the same addresses across the
 * warp). Four blocks per iteration keep several of a row's loads in flight
 * (tools/kernel-report.sh counts 4 x 144 / 32 bytes a lane). */
template <int NB>
__global__ void __launch_bounds__(128) pk_gemv_q4k_kernel(pk_weight w, const float *__restrict__ x, int n, pk_dst out) {
    pk_grid_wait();
    const int lane = threadIdx.x & 31, run = lane >> 3, byte = 32 * run + 4 * (lane & 7), at = byte + 32 * run;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    const uint8_t *row = (const uint8_t *)w.data + (w.elem0 + r * w.cols) / 256 * 144;
    const int64_t blocks = w.cols / 256;
    float acc[NB][1] = {};
#pragma unroll 4
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = row + b * 144;
        const uint32_t q = __ldg((const unsigned int *)(blk + 16 + byte));
        const uint32_t head = __ldg((const unsigned int *)blk);
        const uint32_t sm[3] = {__ldg((const unsigned int *)(blk + 4)), __ldg((const unsigned int *)(blk + 8)),
                                __ldg((const unsigned int *)(blk + 12))};
        uint32_t sc_lo, m_lo, sc_hi, m_hi;
        pk_q4k_scale_min_words(sm, 2 * run, &sc_lo, &m_lo);
        pk_q4k_scale_min_words(sm, 2 * run + 1, &sc_hi, &m_hi);
        const float d = pk_f16((uint16_t)head), dmin = pk_f16((uint16_t)(head >> 16));
        const float d_lo = d * pk_small_u32_f32(sc_lo), d_hi = d * pk_small_u32_f32(sc_hi),
                    m_lo_f = dmin * pk_small_u32_f32(m_lo), m_hi_f = dmin * pk_small_u32_f32(m_hi);
        float lo[4], hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            lo[k] = pk_small_u32_f32((q >> (8 * k)) & 15u), hi[k] = pk_small_u32_f32((q >> (8 * k + 4)) & 15u);
#pragma unroll
        for (int i = 0; i < NB; i++) {
            if (i >= n) break;
            const float *xi = x + (int64_t)i * w.cols + b * 256 + at;
            const float4 a = __ldg((const float4 *)xi), c = __ldg((const float4 *)(xi + 32));
            const float sq_lo = lo[0] * a.x + lo[1] * a.y + lo[2] * a.z + lo[3] * a.w;
            const float sq_hi = hi[0] * c.x + hi[1] * c.y + hi[2] * c.z + hi[3] * c.w;
            acc[i][0] +=
                d_lo * sq_lo - m_lo_f * (a.x + a.y + a.z + a.w) + d_hi * sq_hi - m_hi_f * (c.x + c.y + c.z + c.w);
        }
    }
    pk_store_rows<NB, 1>(acc, w, r, n, out);
}

/* ---- launcher ---- */

static const int gemv_threads = 128;

/* Blocks of `threads` (gemv_threads unless given) covering w's rows at rpw rows per warp. */
static unsigned row_blocks(const pk_weight *w, int rpw, int threads = gemv_threads) {
    int64_t rows_per_block = (threads / PK_WARP) * rpw;
    return (unsigned)((w->rows + rows_per_block - 1) / rows_per_block);
}

static int values_per_chunk(int fmt) {
    switch (fmt) {
    case PK_F32: return pk_fmt<PK_F32>::V;
    case PK_F16: return pk_fmt<PK_F16>::V;
    case PK_BF16: return pk_fmt<PK_BF16>::V;
    case PK_NF2: return pk_fmt<PK_NF2>::V;
    case PK_INT4: return pk_fmt<PK_INT4>::V;
    case PK_INT8: return pk_fmt<PK_INT8>::V;
    default: return pk_fmt<PK_NF4>::V;
    }
}

/* Whether w's element indices fit 32 bits, as the chunked and integer kernels index groups. */
static int indices_fit_32(const pk_weight *w) {
    return (uint64_t)w->elem0 + (uint64_t)w->rows * (uint64_t)w->cols <= UINT32_MAX;
}

/* The chunked decode needs every row to start on a chunk (16 bytes), chunks inside groups and
 * element indices within 32 bits. */
static int weight_chunkable(const pk_weight *w) {
    if (w->fmt == PK_Q4_0 || w->fmt == PK_Q8_0 || w->fmt == PK_Q4K) return 0; /* ggml blocks: the per-row kernel */
    int v = values_per_chunk(w->fmt);
    if (w->cols % v || w->elem0 % v || ((uintptr_t)w->data & 15) || !indices_fit_32(w)) return 0;
    return w->fmt <= PK_BF16 || w->group % v == 0;
}

/* ggml blocks the tensor-core product decodes 8 values at a time: rows of whole blocks, whose
 * loads are aligned (Q4_K's 8 bytes of nibbles; Q4_0's and Q8_0's pairs of bytes). */
static int ggml_tc_decodes(const pk_weight *w) {
    if (w->fmt != PK_Q4_0 && w->fmt != PK_Q8_0 && w->fmt != PK_Q4K) return 0;
    const int64_t block = w->fmt == PK_Q4K ? 256 : 32;
    const uintptr_t align = w->fmt == PK_Q4K ? 8 : 2;
    return w->cols % block == 0 && w->elem0 % block == 0 && !((uintptr_t)w->data & (align - 1));
}

/* The chunked GEMV also reads x in 16-byte vectors. */
static int chunkable(const pk_weight *w, const float *x) { return weight_chunkable(w) && !((uintptr_t)x & 15); }

/* Q4_K's own kernel: whole-block rows (every Q4_K tensor), its code words and (x when given)
 * float4 activations aligned. */
static int q4k_rows_take(const pk_weight *w, const float *x) {
    return w->fmt == PK_Q4K && w->cols % 256 == 0 && w->elem0 % 256 == 0 && !((uintptr_t)w->data & 3) &&
           !((uintptr_t)x & 15);
}

template <int FMT, int NB, int RPW>
static void launch_rows(const pk_weight *w, const float *x, int n, pk_dst out, cudaStream_t stream) {
    PK_LAUNCH(row_blocks(w, RPW), gemv_threads, 0, stream, pk_gemv_kernel<FMT, NB, RPW>)(*w, x, n, out);
}

/* One instance per input count range, each within 128 registers (tools/kernel-report.sh): the
 * quantized formats' 4 rows per warp pass it at 3..4 inputs (~150 registers) and take 2 there,
 * 1 at 5..8 (~210 registers at 4 rows). They run here only for shapes the integer kernel refuses
 * (INT8: always). */
template <int FMT>
static void launch_chunked(const pk_weight *w, const float *x, int n, pk_dst out, cudaStream_t stream) {
    const int rpw = pk_fmt<FMT>::RPW, rpw_many = pk_fmt<FMT>::QUANT ? 2 : rpw; /* 3..4 inputs */
    const int rpw_most = pk_fmt<FMT>::QUANT ? 1 : rpw_many;                    /* 5..8 */
    if (n == 1)
        launch_rows<FMT, 1, rpw>(w, x, n, out, stream);
    else if (n == 2)
        launch_rows<FMT, 2, rpw>(w, x, n, out, stream);
    else if (n <= 4)
        launch_rows<FMT, 4, rpw_many>(w, x, n, out, stream);
    else
        launch_rows<FMT, PK_GEMV_MAX_BATCH, rpw_most>(w, x, n, out, stream);
}

/* s where v = 1 << s, else -1. */
static int log2_exact(int v) {
    int s = 0;
    while (s < 30 && (1 << s) < v) s++;
    return (1 << s) == v ? s : -1;
}

static int is_pow2(int v) { return log2_exact(v) >= 0; }

/* The preparation slice of INT4 and NF4 (no rotation): the largest power of two up to
 * PK_INT_PREP_SLICE dividing cols. */
static int unrotated_slice(int64_t cols) {
    int s = PK_INT_PREP_SLICE;
    while (s > pk_int_fmt<PK_INT4>::V && cols % s) s /= 2;
    return s;
}

/* Whether the integer kernels (the GEMV, the tensor cores) can take this weight's products, on
 * activations prepared for it: its chunks inside power-of-two groups, rows
 * starting on groups, element indices within 32 bits, for NF2 the rotation slices on the weight's
 * groups (as the float path assumes them to be), for nested NF4 second-level blocks of a power of
 * two of groups (a shift finds them). */
static int int_prepares(const pk_weight *w) {
    if (w->fmt != PK_NF2 && w->fmt != PK_INT4 && w->fmt != PK_NF4) return 0;
    /* whole groups of whole chunks a row: rows start on chunks too */
    if (!is_pow2(w->group) || w->group % pk_int_v(w->fmt) || w->cols % w->group || w->elem0 % w->group) return 0;
    if (((uintptr_t)w->data & 15) || !indices_fit_32(w)) return 0;
    if (w->fmt == PK_NF4) return w->quant_map && (!w->nested_absmax || is_pow2(w->nested_block));
    return w->fmt == PK_INT4 || w->np2 == w->group;
}

/* Whether the product of n inputs takes the integer tensor cores (gemm_int.cuh): NF2 and INT4
 * prepared as for the integer GEMV. Unless pk_imma_min_batch() says otherwise: NF2 from 8
 * inputs, and from 4 where its smallest tiles give every SM a block; INT4 past
 * PK_GEMV_MAX_BATCH. On an H200, ms, GEMV against tensor cores:
 *   NF2 12288 x 4096:  4 inputs 0.068 / 0.044, 8 inputs 0.237 / 0.051 (2: 0.038 / 0.048)
 *   NF2 4096 x 11264:  4 inputs 0.061 / 0.095 (128 blocks of 32 rows), 8 inputs 0.255 / 0.103
 *   NF2 5632 x 1024:   4 inputs 0.019 / 0.013
 *   INT4 12288 x 4096: 4 inputs 0.054 / 0.077, 8 inputs 0.101 / 0.080; 4096 x 11264 at 8:
 *                      0.085 / 0.199 (before the launcher's smaller tiles). */
static int imma_takes(const pk_weight *w, int n) {
    if ((w->fmt != PK_NF2 && w->fmt != PK_INT4) || !int_prepares(w)) return 0;
    /* weights that prepare their inputs in the product's blocks (PP_CUDA_SELF_PREP=1) keep the GEMV */
    if (w->latency_bound && pk_self_prepare() && n <= PK_GEMV_MAX_BATCH) return 0;
    const int asked = pk_imma_min_batch();
    if (asked) return n >= asked;
    if (w->fmt == PK_INT4) return n > PK_GEMV_MAX_BATCH;
    const int64_t smallest_tile_rows = (PK_IMMA_THREADS / PK_WARP) * 8;
    return n >= 8 || (n >= 4 && w->rows >= smallest_tile_rows * pk_device_sms());
}

/* Whether the integer GEMV (gemv_int.cuh) takes it: 1..8 inputs the tensor cores leave. */
static int int_gemv_takes(const pk_weight *w, int n) {
    return n >= 1 && n <= PK_GEMV_MAX_BATCH && !imma_takes(w, n) && int_prepares(w);
}

/* Whether the product reads prepared activations: either of the two. */
static int int_takes(const pk_weight *w, int n) { return int_gemv_takes(w, n) || imma_takes(w, n); }

/* f(std::integral_constant<int, FMT>{}) for the format FMT of an integer product. */
template <class F> static int with_int_format(int fmt, F &&f) {
    switch (fmt) {
    case PK_NF2: return f(std::integral_constant<int, PK_NF2>{});
    case PK_NF4: return f(std::integral_constant<int, PK_NF4>{});
    default: return f(std::integral_constant<int, PK_INT4>{});
    }
}

/* Floats of workspace before the gated input's place (which follows them): NF2's rotated x. */
static size_t base_workspace(const pk_weight *w, int n) { return w->fmt == PK_NF2 ? (size_t)n * (size_t)w->cols : 0; }

extern "C" size_t pk_matmul_workspace(const pk_weight *w, int n, int x_gated) {
    if (int_takes(w, n)) return (pk_int_workspace_bytes(w->fmt, n, w->cols) + sizeof(float) - 1) / sizeof(float);
    return base_workspace(w, n) + (x_gated ? (size_t)n * (size_t)w->cols : 0);
}

extern "C" const char *pk_matmul_slow_path(const pk_weight *w, int n) {
    if (n > PK_GEMV_MAX_BATCH)
        return w->fmt == PK_F32 || imma_takes(w, n) || weight_chunkable(w) || ggml_tc_decodes(w)
                   ? NULL
                   : "the tensor-core product, decoding element by element";
    if (int_takes(w, n) || q4k_rows_take(w, NULL) || weight_chunkable(w)) return NULL;
    return "the GEMV that decodes one element at a time";
}

extern "C" size_t pk_weight_read_bytes(const pk_weight *w) {
    size_t numel = (size_t)w->rows * (size_t)w->cols;
    switch (w->fmt) {
    case PK_F32: return numel * 4;
    case PK_F16:
    case PK_BF16: return numel * 2;
    case PK_NF2: return numel / 4 + numel / (size_t)w->group * 2;
    case PK_INT4: return numel / 2 + numel / (size_t)w->group * 2;
    case PK_Q4_0: return numel / 32 * 18;
    case PK_Q8_0: return numel / 32 * 34;
    case PK_Q4K: return numel / 256 * 144;
    case PK_INT8: return numel + numel / (size_t)w->group * 4;
    default: return numel / 2 + numel / (size_t)w->group * (w->nested_absmax ? 1 : 4);
    }
}

template <int FMT> static void launch_tc(const pk_weight *w, const float *x, int n, pk_dst out, cudaStream_t stream) {
    const dim3 grid((unsigned)((w->rows + PK_TC_ROWS - 1) / PK_TC_ROWS),
                    (unsigned)((n + PK_TC_INPUTS - 1) / PK_TC_INPUTS));
    PK_LAUNCH(grid, PK_TC_THREADS, 0, stream, pk_gemm_tc_kernel<FMT>)(*w, x, n, log2_exact(w->group), out);
}

/* n > PK_GEMV_MAX_BATCH: f32 weights by SGEMM (nothing to decode), the rest on tensor cores. */
static int gemm(const pk_weight *w, const float *x, int n, pk_dst out, void *cublas, cudaStream_t stream) {
    if (w->fmt == PK_F32) {
        cublasHandle_t h = (cublasHandle_t)cublas;
        const float one = 1.0f, beta = out.accumulate ? 1.0f : 0.0f;
        if (!h) return (int)cudaErrorInvalidValue;
        pk_count_node();
        int st =
            cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)w->cols, &one,
                        (const float *)w->data + w->elem0, (int)w->cols, x, (int)w->cols, &beta, out.y, (int)w->rows);
        return st == CUBLAS_STATUS_SUCCESS ? 0 : (int)cudaErrorUnknown;
    }
    if (ggml_tc_decodes(w)) {
        if (w->fmt == PK_Q4K)
            launch_tc<PK_Q4K>(w, x, n, out, stream);
        else if (w->fmt == PK_Q4_0)
            launch_tc<PK_Q4_0>(w, x, n, out, stream);
        else
            launch_tc<PK_Q8_0>(w, x, n, out, stream);
        return pk_launched();
    }
    if (!weight_chunkable(w)) {
        launch_tc<PK_TC_ANY>(w, x, n, out, stream);
        return pk_launched();
    }
    switch (w->fmt) {
    case PK_F16: launch_tc<PK_F16>(w, x, n, out, stream); break;
    case PK_BF16: launch_tc<PK_BF16>(w, x, n, out, stream); break;
    case PK_NF2: launch_tc<PK_NF2>(w, x, n, out, stream); break;
    case PK_INT4: launch_tc<PK_INT4>(w, x, n, out, stream); break;
    case PK_NF4: launch_tc<PK_NF4>(w, x, n, out, stream); break;
    case PK_INT8: launch_tc<PK_INT8>(w, x, n, out, stream); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return pk_launched();
}

/* Rows per warp for one input. A -D override builds the variants timed against each other: on
 * an H200, NF2 12288 x 4096, 4 rows 0.020 ms, 2 rows 0.025, 2 rows in 64 registers 0.028, 1 row
 * 0.039 (PK_INT_MIN_BLOCKS 8 for the last two). */
#ifndef PK_INT_RPW_1
#define PK_INT_RPW_1 4
#endif

/* The prepared input of a product: its planes and run metadata, and norm: the NORM plan that
 * handed it over (its prep PK_NEXT_NONE otherwise), whose rows' 1/rms the product forms. */
typedef struct int_input {
    const uint32_t *planes;
    const int2 *meta;
    pk_next norm;
} int_input;

template <int FMT, int NB, int RPW>
static void launch_int(const pk_weight *w, const int_input &in, int n, pk_dst out, const pk_next &next,
                       cudaStream_t stream) {
    const int gshift = log2_exact(w->group);
    PK_LAUNCH(row_blocks(w, RPW), gemv_threads, 0, stream, pk_gemv_int_kernel<FMT, NB, RPW>)
    (*w, in.planes, in.meta, in.norm, n, gshift, out, next);
}

/* The integer tensor-core product (gemm_int.cuh) on tiles of 16 inputs by NT x 8 rows a warp, four
 * warps a block (blockIdx.y: the next 16 inputs). */
static dim3 imma_grid(const pk_weight *w, int n, int nt) {
    const int64_t rows_per_block = (PK_IMMA_THREADS / PK_WARP) * nt * 8;
    return dim3((unsigned)((w->rows + rows_per_block - 1) / rows_per_block), (unsigned)((n + 15) / 16));
}

template <int FMT, int NT>
static void launch_imma_tiles(const pk_weight *w, const int_input &in, int n, pk_dst out, cudaStream_t stream) {
    PK_LAUNCH(imma_grid(w, n, NT), PK_IMMA_THREADS, 0, stream, pk_gemm_int_kernel<FMT, NT>)
    (*w, in.planes, in.meta, n, log2_exact(w->group), out, pk_imma_l1_ahead());
}

/* 32 rows a warp (the most the sums' registers hold: 64 for NF2), fewer while the blocks would not
 * give every SM one. Rows rather than inputs: on an H200 at 64 inputs, NF2 ms by tile (inputs x
 * rows a warp) 64 x 8 / 32 x 16 / 16 x 16 / 16 x 32:
 *   12288 x 4096  0.161 / 0.105 / 0.122 / 0.093
 *   22528 x 4096  0.312 / 0.197 / 0.198 / 0.168
 *   4096 x 11264  0.284 / 0.207 / 0.120 / 0.158 (128 blocks of 16 x 32: fewer than the SMs)
 *   5632 x 1024   0.037 / 0.027 / 0.025 / 0.024
 * and INT4 12288 x 4096 0.231 / 0.163 / 0.155 / 0.144 (each tile's registers allowing). */
template <int FMT>
static void launch_imma(const pk_weight *w, const int_input &in, int n, pk_dst out, cudaStream_t stream) {
    int nt = 4;
    for (dim3 g = imma_grid(w, n, nt); nt > 1 && (int64_t)g.x * g.y < pk_device_sms(); g = imma_grid(w, n, nt)) nt /= 2;
    if (nt == 4)
        launch_imma_tiles<FMT, 4>(w, in, n, out, stream);
    else if (nt == 2)
        launch_imma_tiles<FMT, 2>(w, in, n, out, stream);
    else
        launch_imma_tiles<FMT, 1>(w, in, n, out, stream);
}

/* One instance per input count range. Every row of a warp reuses each input's activations, so
 * rows per warp stay as high as the 128 registers allow without spilling (tools/kernel-report.sh;
 * a row holds 2 to 4 sums per input, pk_int_sum, and a chunk of codes, NF4's twice as wide):
 * 4 rows for 1 input (NF4 2); at 2, 4 rows for INT4, 2 for NF2 and NF4; at 3..4, 2 (NF4 1); at
 * 5..8, 2 for INT4, 1 for NF2 and NF4. */
template <int FMT>
static void launch_int_batch(const pk_weight *w, const int_input &in, int n, pk_dst out, const pk_next &next,
                             cudaStream_t stream) {
    constexpr int cw = pk_int_fmt<FMT>::CW;
    if constexpr (FMT != PK_NF4)
        if (imma_takes(w, n)) { /* no hand-overs there: pk_next_plan and pk_norm_matmul keep to the GEMV */
            launch_imma<FMT>(w, in, n, out, stream);
            return;
        }
    if (n == 1)
        launch_int<FMT, 1, PK_INT_RPW_1 / cw>(w, in, n, out, next, stream);
    else if (n == 2)
        launch_int<FMT, 2, FMT == PK_INT4 ? 4 : 2>(w, in, n, out, next, stream);
    else if (n <= 4)
        launch_int<FMT, 4, 2 / cw>(w, in, n, out, next, stream);
    else
        launch_int<FMT, 8, FMT == PK_INT4 ? 2 : 1>(w, in, n, out, next, stream);
}

static int_input workspace_input(const pk_weight *w, int n, float *ws) {
    return int_input{(const uint32_t *)ws, (const int2 *)((uint8_t *)ws + pk_int_plane_bytes(n, w->cols)), pk_next{}};
}

static int_input handed_input(const pk_next *in) {
    return int_input{in->planes, (const int2 *)in->meta, in->prep == PK_NEXT_NORM ? *in : pk_next{}};
}

template <int FMT, int GATED>
static void int_prepare(const pk_weight *w, const float *x, int n, uint32_t *planes, int2 *meta, cudaStream_t stream) {
    const int len = FMT == PK_NF2 ? w->group : unrotated_slice(w->cols);
    const int threads = FMT == PK_NF2 ? pk_wht_threads(len) : 32;
    const unsigned slices = (unsigned)((int64_t)n * w->cols / len);
    PK_LAUNCH(slices, threads, (size_t)len * sizeof(float), stream, pk_int_prepare_kernel<FMT, GATED>)
    (x, w->cols, len, planes, meta);
}

/* The preparation kernel first unless the input was handed over (in). */
template <int FMT>
static void int_matmul_as(const pk_weight *w, const float *x, int n, int x_gated, pk_dst out, float *ws,
                          const pk_next *in, const pk_next &next, cudaStream_t stream) {
    const int_input input = in ? handed_input(in) : workspace_input(w, n, ws);
    if (!in && x_gated)
        int_prepare<FMT, 1>(w, x, n, (uint32_t *)input.planes, (int2 *)input.meta, stream);
    else if (!in)
        int_prepare<FMT, 0>(w, x, n, (uint32_t *)input.planes, (int2 *)input.meta, stream);
    launch_int_batch<FMT>(w, input, n, out, next, stream);
}

static int int_matmul(const pk_weight *w, const float *x, int n, int x_gated, pk_dst out, float *ws, const pk_next *in,
                      const pk_next &next, cudaStream_t stream) {
    return with_int_format(w->fmt, [&](auto fmt) {
        int_matmul_as<decltype(fmt)::value>(w, x, n, x_gated, out, ws, in, next, stream);
        return pk_launched();
    });
}

/* ---- small products that prepare their inputs in each block (gemv_int.cuh) ---- */

/* Inputs a self-preparing block rounds per pass (the shared float buffer): whole rotation
 * slices (NF2) or runs, at most 1024, dividing the row. 0: none does. */
static int self_slice(const pk_weight *w) {
    const int unit = w->fmt == PK_NF2 ? w->np2 : pk_int_v(w->fmt);
    for (int len = 1024 / unit * unit; len >= unit; len -= unit)
        if (w->cols % len == 0) return len;
    return 0;
}

/* The shared memory every device grants a block without opting in, less what the kernel
 * declares itself: its reduction buffer and the fused attention's and hand-over's buffers,
 * 17,808 bytes by ptxas for sm_87 and sm_90 (tools/kernel-report.sh fails above
 * PK_SELF_STATIC_SMEM). A GPU refuses a launch whose static and dynamic shared memory pass
 * 48 KB (an H200 did, at 4 inputs of 4096); the emulation adds only the static bytes a block
 * writes, not the declared sizes, so this margin is the check. */
#define PK_SELF_STATIC_SMEM (18 * 1024)
#define PK_SELF_SMEM (48 * 1024 - PK_SELF_STATIC_SMEM)

static size_t self_smem(const pk_weight *w, int nb, int slice) {
    return (size_t)nb * pk_int_self_input_bytes(w->fmt, w->cols) + (size_t)slice * sizeof(float);
}

/* Inputs a self-preparing block holds at once for n inputs (its kernel instance), 0 when the
 * product does not prepare in its blocks: only weights the model marks latency-bound, on the
 * integer path, whose one input fits. */
static int self_inputs(const pk_weight *w, int n) {
    const int slice = self_slice(w);
    if (!w->latency_bound || !pk_self_prepare() || !int_gemv_takes(w, n) || !slice) return 0;
    int nb = n == 1 ? 1 : n == 2 ? 2 : 4;
    while (nb > 1 && self_smem(w, nb, slice) > PK_SELF_SMEM) nb /= 2;
    return self_smem(w, nb, slice) <= PK_SELF_SMEM ? nb : 0;
}

/* The inputs of a self-preparing product: x, prepared as `prep` (PK_PREP_*: normalized with
 * alpha, eps into h, gated, or plain), and the attention it runs after (attn.on). */
typedef struct self_input {
    const float *x;
    int prep;
    const float *alpha;
    float eps;
    float *h;
    pk_attn_after attn;
} self_input;

template <int FMT, int NB, int RPW>
static void launch_self(const pk_weight *w, const self_input &in, int n, pk_dst out, cudaStream_t stream) {
    const int slice = self_slice(w);
    PK_LAUNCH(row_blocks(w, RPW, PK_SELF_THREADS), PK_SELF_THREADS, self_smem(w, NB, slice), stream,
              pk_gemv_int_self_kernel<FMT, NB, RPW>)
    (*w, in.x, in.prep, in.alpha, in.eps, in.h, n, log2_exact(w->group), slice, out, in.attn);
}

/* Rows per warp as launch_int_batch's for the same inputs at once, but 2 at 2 inputs: with the
 * preparation's and the attention's registers, 4 rows spilled there (48 bytes, sm_87 and sm_90). */
template <int FMT>
static int int_self_as(const pk_weight *w, const self_input &in, int n, pk_dst out, cudaStream_t stream) {
    constexpr int cw = pk_int_fmt<FMT>::CW;
    switch (self_inputs(w, n)) {
    case 1: launch_self<FMT, 1, PK_INT_RPW_1 / cw>(w, in, n, out, stream); break;
    case 2: launch_self<FMT, 2, 2>(w, in, n, out, stream); break;
    default: launch_self<FMT, 4, 2 / cw>(w, in, n, out, stream); break;
    }
    return pk_launched();
}

static int int_self(const pk_weight *w, const self_input &in, int n, pk_dst out, cudaStream_t stream) {
    return with_int_format(w->fmt, [&](auto fmt) { return int_self_as<decltype(fmt)::value>(w, in, n, out, stream); });
}

/* Inputs one normalizing block prepares (each block sums the whole row, then rounds its slice):
 * enough blocks that no single SM does a row's work, each slice whole groups (NF2) or runs. A
 * -D override of 0 builds the unfused variant (a norm kernel, then the preparation), to time
 * one against the other. */
#ifndef PK_NORM_SLICE
#define PK_NORM_SLICE 256
#endif

static int norm_slice(const pk_weight *w, int d) {
    const int unit = w->fmt == PK_NF2 ? w->np2 : pk_int_v(w->fmt);
    for (int len = PK_NORM_SLICE / unit * unit; len >= unit; len -= unit)
        if (d % len == 0) return len;
    return 0;
}

/* The normalizing preparation kernel first unless the input was handed over (in). */
template <int FMT>
static void int_norm_matmul_as(const float *x, const float *alpha, int n, int d, float eps, float *h,
                               const pk_weight *w, pk_dst out, int len, float *ws, const pk_next *in,
                               const pk_next &next, cudaStream_t stream) {
    const int_input input = in ? handed_input(in) : workspace_input(w, n, ws);
    if (!in) {
        PK_LAUNCH(dim3((unsigned)(d / len), (unsigned)n), 256, (size_t)len * sizeof(float), stream,
                  pk_int_norm_prepare_kernel<FMT>)
        (x, alpha, d, eps, len, w->np2, h, (uint32_t *)input.planes, (int2 *)input.meta);
    }
    launch_int_batch<FMT>(w, input, n, out, next, stream);
}

/* Whether a normalized product takes the normalizing preparation kernel and an integer product
 * (norm_prepares), and whether that is the GEMV, which alone takes hand-overs (int_norm_takes). */
static int norm_prepares(const pk_weight *w, int n, int d) {
    return int_takes(w, n) && w->cols == d && norm_slice(w, d) && !self_inputs(w, n);
}
static int int_norm_takes(const pk_weight *w, int n, int d) { return int_gemv_takes(w, n) && norm_prepares(w, n, d); }

extern "C" int pk_norm_matmul(const float *x, const float *alpha, int n, int d, float eps, float *h, const pk_weight *w,
                              float *y, float *ws, size_t ws_floats, void *cublas, const pk_next *in,
                              const pk_next *next, cudaStream_t stream) {
    if (n <= 0) return 0;
    if ((in && (in->prep != PK_NEXT_NORM || !int_norm_takes(w, n, d))) || (next && !int_norm_takes(w, n, d)))
        return (int)cudaErrorInvalidValue; /* cuda.c plans hand-overs with pk_next_plan and pk_matmul_hands_over */
    if (w->cols == d && self_inputs(w, n))
        return int_self(w, self_input{x, PK_PREP_NORM, alpha, eps, h, pk_attn_after{}}, n, pk_dst{y, 0}, stream);
    if (!norm_prepares(w, n, d)) {
        int rc = pk_rmsnorm(x, alpha, n, d, eps, h, stream);
        return rc ? rc : pk_matmul(w, h, n, 0, 0, y, ws, ws_floats, cublas, NULL, NULL, stream);
    }
    if (pk_matmul_workspace(w, n, 0) > ws_floats) return (int)cudaErrorInvalidValue;
    const int len = norm_slice(w, d);
    const pk_next nx = next ? *next : pk_next{};
    return with_int_format(w->fmt, [&](auto fmt) {
        int_norm_matmul_as<decltype(fmt)::value>(x, alpha, n, d, eps, h, w, pk_dst{y, 0}, len, ws, in, nx, stream);
        return pk_launched();
    });
}

/* ---- the qkv product running the attention (kernels.h's pk_attn_args) ---- */

/* Whether one block of the product can list every (row, head) it completes: its outputs of a row
 * (at most PK_SELF_THREADS / 32 warps of PK_INT_RPW_1 rows, int_self_as's widest) span at most
 * (outputs - 1) / head_dim + 2 heads, and it may complete them for each of the n rows at once.
 * Narrow heads over many rows take the plain path. */
static int attn_completions_fit(int n, int n_heads, int head_dim) {
    const int outputs = PK_SELF_THREADS / 32 * PK_INT_RPW_1, spanned = (outputs - 1) / head_dim + 2;
    return (int64_t)n * (n_heads < spanned ? n_heads : spanned) <= PK_NEXT_MAX_DONE;
}

extern "C" int pk_norm_matmul_attends(const pk_weight *w, int n, int d, const pk_attn_args *a) {
    return w->cols == d && self_inputs(w, n) && a->ring.fmt == PK_KV_F32 && a->head_dim > 0 && a->head_dim <= 128 &&
           a->n_heads > 0 && a->ring.window > 0 && a->ring.window <= PK_ATTN_SPLIT && a->ring.capacity > 0 &&
           (n == 1 || a->tables) && w->rows == 3 * (int64_t)a->n_heads * a->head_dim &&
           attn_completions_fit(n, a->n_heads, a->head_dim);
}

extern "C" int pk_norm_matmul_attn(const float *x, const float *alpha, int n, int d, float eps, float *h,
                                   const pk_weight *w, float *qkv, const pk_attn_args *a, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (!pk_norm_matmul_attends(w, n, d, a)) return (int)cudaErrorInvalidValue;
    const pk_attn_after attn = {1,       a->n_heads, a->head_dim, pk_rope_of(a->rope_period, a->head_dim),
                                a->ring, a->tables,  a->layer,    a->pos,
                                a->out,  a->counts};
    return int_self(w, self_input{x, PK_PREP_NORM, alpha, eps, h, attn}, n, pk_dst{qkv, 0}, stream);
}

/* ---- hand-overs (kernels.h's pk_next) ---- */

/* Whether a plain or gated product takes the integer kernel with the preparation kernel. */
static int int_plain_takes(const pk_weight *w, int n) { return int_gemv_takes(w, n) && !self_inputs(w, n); }

extern "C" int pk_next_plan(const pk_weight *next, int n, int d, int prep, pk_next *nx) {
    *nx = pk_next{};
    if (prep == PK_NEXT_NORM ? !int_norm_takes(next, n, d) : !int_plain_takes(next, n)) return 0;
    const int len = next->fmt == PK_NF2 ? next->group : unrotated_slice(next->cols);
    if (len < PK_NEXT_MIN_LEN || len > PK_NEXT_MAX_LEN || next->cols % len) return 0;
    nx->prep = prep;
    nx->fmt = next->fmt;
    nx->len = len;
    nx->np2 = next->np2;
    nx->n = n;
    nx->cols = next->cols;
    return 1;
}

extern "C" size_t pk_next_counts(const pk_next *nx) { return (size_t)nx->n * (size_t)(nx->cols / nx->len); }

extern "C" size_t pk_next_bytes(const pk_next *nx) {
    return pk_int_workspace_bytes(nx->fmt, nx->n, nx->cols) + pk_next_counts(nx) * sizeof(float);
}

extern "C" void pk_next_place(pk_next *nx, void *buf, unsigned *counts) {
    nx->planes = (uint32_t *)buf;
    nx->meta = (int32_t *)((uint8_t *)buf + pk_int_plane_bytes(nx->n, nx->cols));
    nx->sumsq = (float *)((uint8_t *)buf + pk_int_workspace_bytes(nx->fmt, nx->n, nx->cols));
    nx->counts = counts;
}

extern "C" int pk_matmul_hands_over(const pk_weight *w, int n, int d) {
    return d > 0 ? int_norm_takes(w, n, d) : int_plain_takes(w, n);
}

extern "C" int pk_matmul(const pk_weight *w, const float *x, int n, int x_gated, int accumulate, float *y, float *ws,
                         size_t ws_floats, void *cublas, const pk_next *in, const pk_next *next, cudaStream_t stream) {
    if (n <= 0 || w->rows <= 0) return 0;
    if (pk_matmul_workspace(w, n, x_gated) > ws_floats) return (int)cudaErrorInvalidValue;
    if ((in && in->prep != (x_gated ? PK_NEXT_GATED : PK_NEXT_PLAIN)) || ((in || next) && !int_plain_takes(w, n)))
        return (int)cudaErrorInvalidValue; /* as pk_norm_matmul */
    const pk_dst out = {y, accumulate};
    if (self_inputs(w, n))
        return int_self(w, self_input{x, x_gated ? PK_PREP_GATED : PK_PREP_PLAIN, NULL, 0.0f, NULL, pk_attn_after{}}, n,
                        out, stream);
    if (int_takes(w, n)) return int_matmul(w, x, n, x_gated, out, ws, in, next ? *next : pk_next{}, stream);
    if (x_gated) { /* the gated input apart, after the product's own workspace */
        float *gate = ws + base_workspace(w, n);
        int rc = pk_silu_mul(x, n, (int)w->cols, gate, stream);
        if (rc) return rc;
        x = gate;
    }
    if (w->fmt == PK_NF2) {
        unsigned slices = (unsigned)((int64_t)n * w->cols / w->group);
        int threads = pk_wht_threads(w->np2);
        PK_LAUNCH(slices, threads, (size_t)w->np2 * sizeof(float), stream, pk_rotate_kernel)(x, w->group, w->np2, ws);
        x = ws;
    }
    if (n > PK_GEMV_MAX_BATCH) return gemm(w, x, n, out, cublas, stream);
    if (q4k_rows_take(w, x)) {
        unsigned blocks = row_blocks(w, 1);
        if (n == 1)
            PK_LAUNCH(blocks, gemv_threads, 0, stream, pk_gemv_q4k_kernel<1>)(*w, x, n, out);
        else
            PK_LAUNCH(blocks, gemv_threads, 0, stream, pk_gemv_q4k_kernel<PK_GEMV_MAX_BATCH>)(*w, x, n, out);
        return pk_launched();
    }
    if (!chunkable(w, x)) {
        unsigned blocks = row_blocks(w, 1);
        PK_LAUNCH(blocks, gemv_threads, 0, stream, pk_gemv_scalar_kernel)(*w, x, n, out);
        return pk_launched();
    }
    switch (w->fmt) {
    case PK_F32: launch_chunked<PK_F32>(w, x, n, out, stream); break;
    case PK_F16: launch_chunked<PK_F16>(w, x, n, out, stream); break;
    case PK_BF16: launch_chunked<PK_BF16>(w, x, n, out, stream); break;
    case PK_NF2: launch_chunked<PK_NF2>(w, x, n, out, stream); break;
    case PK_INT4: launch_chunked<PK_INT4>(w, x, n, out, stream); break;
    case PK_NF4: launch_chunked<PK_NF4>(w, x, n, out, stream); break;
    case PK_INT8: launch_chunked<PK_INT8>(w, x, n, out, stream); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return pk_launched();
}
