/* kernels: the CUDA kernels' launchers, the only kernel header host C code includes.
 *
 * Every launcher enqueues its work on `stream` and returns the launch's cudaError_t as an int
 * (0 = cudaSuccess), so the host side (src/backend/cuda.c) can turn it into PP_EDEVICE with
 * the statement that failed. Pointers are device memory unless marked "host". Semantics are
 * those of the matching operation in src/backend/backend.h; the CPU backend is the reference.
 * Kernels live one family per .cu file: kernel first, launcher second. */
#ifndef PP_KERNELS_KERNELS_H
#define PP_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A packed weight as the kernels see it: the same fields as io/weight.h's pp_weight, with
 * device pointers. Format numbers equal pp_wformat (cuda.c checks this at compile time). */
enum { PK_F32, PK_F16, PK_BF16, PK_NF2, PK_INT4, PK_NF4, PK_Q4_0, PK_Q8_0, PK_Q4K, PK_INT8 };

typedef struct pk_weight {
    int fmt, group, np2, nested_block;
    int64_t rows, cols, elem0;
    const void *data;           /* values or packed codes of the whole stored tensor */
    const void *scales;         /* f16 per group (NF2, INT4); u8 codes or f32 per block (NF4); f32 absmax (INT8) */
    const int8_t *zeros;        /* INT8: zero point per group, NULL when symmetric */
    const float *quant_map;     /* NF4 [16] */
    const float *nested_absmax; /* NF4 nested only */
    const float *nested_map;    /* NF4 nested only, [256] */
    float nested_offset;
    int latency_bound; /* io/weight.h's: a product of few blocks, where a launch costs more than redundant work */
} pk_weight;

/* ---- handing the next product its input (gemv.cu, attn.cu) ----
 * An integer product (NF2, INT4, NF4) reads its input prepared: NF2 slices rotated, every chunk of
 * inputs rounded to integers with a scale (gemv_int.cuh). Where a product or an attention writes
 * the next integer product's input, the block that completes a slice of `len` of those inputs
 * (counted with a fence and an atomic) prepares that slice as it finishes, and the next product
 * reads it: no preparation launch between them. The host (cuda.c) holds each such operation back
 * until the next one arrives to know whether it feeds an integer product.
 *   PLAIN: the inputs are the producer's output [n][cols].
 *   GATED: the producer writes u [n][2·cols]; input j is silu(u[j])·u[cols + j].
 *   NORM:  the producer writes x [n][cols] (a residual stream); the slices prepared are of
 *          x·alpha, and each slice's block leaves the slice's Σx² (sumsq); the next product's
 *          blocks form each row's 1/rms from them (in slice order), multiply their sums by it
 *          and write h = x·alpha/rms between them: no block finishes a row alone. */
enum { PK_NEXT_NONE, PK_NEXT_PLAIN, PK_NEXT_GATED, PK_NEXT_NORM };
typedef struct pk_next {
    int prep;          /* PK_NEXT_* */
    int fmt, len, np2; /* the next product's format, inputs per slice, NF2 rotation length */
    int n;             /* rows */
    int64_t cols;      /* the next product's inputs per row */
    const float *x;    /* the producer's output */
    const float *alpha;
    float eps;
    float *h;         /* NORM: [n][cols] */
    uint32_t *planes; /* the prepared input: planes, run metadata ({scale, bias} int32 pairs), sumsq */
    int32_t *meta;
    float *sumsq;     /* NORM: [n][cols/len] */
    unsigned *counts; /* [n·cols/len], zero before the producer and left zero after it */
} pk_next;
/* Fills nx's shape (prep, fmt, len, np2, n, cols) when the product of n inputs by next reads a
 * handed-over input (the integer kernel, not one that prepares in its own blocks, for NORM with
 * d == next->cols); returns 0 when it does not. */
int pk_next_plan(const pk_weight *next, int n, int d, int prep, pk_next *nx);
/* Bytes of the prepared input (planes, metadata, sumsq) and counters of a plan. */
size_t pk_next_bytes(const pk_next *nx);
size_t pk_next_counts(const pk_next *nx);
/* Points a plan's planes, meta and sumsq into buf (pk_next_bytes) and its counters at counts. */
void pk_next_place(pk_next *nx, void *buf, unsigned *counts);
/* Whether a product of n inputs by w (normalized first when d > 0) can hand over its output, and
 * whether an attention of heads of head_dim can hand over for plan nx. */
int pk_matmul_hands_over(const pk_weight *w, int n, int d);
int pk_attn_hands_over(int head_dim, const pk_next *nx);

/* ---- gemv.cu: y[n][rows] = x[n][cols]·wᵀ ---- */
/* x_gated: x is the gated FFN's u [n][2·cols] and the product's input silu(u[i][j])·u[i][cols + j],
 * formed on the way in (by the integer products' preparation, else into the workspace first).
 * Floats of workspace pk_matmul needs: the prepared or rotated activations and the gated input. */
#define PK_GEMV_MAX_BATCH 8
size_t pk_matmul_workspace(const pk_weight *w, int n, int x_gated);
/* cublas: a cublasHandle_t already bound to stream (used only for f32 weights at n > PK_GEMV_MAX_BATCH).
 * accumulate: y += the product (a residual add) instead of y =. */
/* in: the input as handed over by the operation before (NULL: prepared here); next: the plan of
 * the product after, whose input this one's output is (NULL: none); both pk_next above. */
int pk_matmul(const pk_weight *w, const float *x, int n, int x_gated, int accumulate, float *y, float *ws,
              size_t ws_floats, void *cublas, const pk_next *in, const pk_next *next, cudaStream_t stream);
/* h = rmsnorm(x)·alpha, then y = h·wᵀ. The same workspace as pk_matmul(w, n, 0); where the
 * integer product takes w, one kernel (a few blocks per row) normalizes and prepares, or the
 * operation before handed the input over (in, NORM). */
int pk_norm_matmul(const float *x, const float *alpha, int n, int d, float eps, float *h, const pk_weight *w, float *y,
                   float *ws, size_t ws_floats, void *cublas, const pk_next *in, const pk_next *next,
                   cudaStream_t stream);
/* NULL when a product of n inputs by w takes a kernel made for its format, else which slow
 * kernel it takes instead (the caller says so once: a shape must never be slowed silently). */
const char *pk_matmul_slow_path(const pk_weight *w, int n);
/* Bytes of w read per product (the packed bytes of its rows), for bandwidth figures. */
size_t pk_weight_read_bytes(const pk_weight *w);

/* ---- embed.cu: y[i][:] (+)= row ids[i] of the table (ids device int32) ---- */
int pk_embed(const pk_weight *table, const int32_t *ids, int n, float *y, int accumulate, cudaStream_t stream);
/* y[i] = Σ_t row ids[id_rows[t]·n + i] of tables[t] (host array), in table order: one launch
 * where the tables share their width and group layout (all NF2 or none), else one per table. */
int pk_embed_sum(const pk_weight *tables, const int *id_rows, int n_tables, const int32_t *ids, int n, float *y,
                 cudaStream_t stream);

/* ---- lm_ops.cu ---- */
int pk_add(float *y, const float *x, size_t count, cudaStream_t stream);
int pk_rmsnorm(const float *x, const float *alpha, int n, int d, float eps, float *y, cudaStream_t stream);
/* y [n][hidden] = silu(u[i][j])·u[i][hidden + j]: pk_matmul's gated input where it needs it apart. */
int pk_silu_mul(const float *u, int n, int hidden, float *y, cudaStream_t stream);

/* ---- attn.cu: KV append + one query over the ring, split across the context ---- */
/* A KV ring as backend.h's pp_kv_ring (format numbers equal pp_kv_format): k, v
 * [capacity][n_heads·head_dim] of f32, bf16 bits or int8 with f32 scales [capacity][n_heads]. */
enum { PK_KV_F32, PK_KV_BF16, PK_KV_INT8 };
typedef struct pk_kv_ring {
    int fmt, capacity, window;
    void *k, *v;
    float *kscale, *vscale;
} pk_kv_ring;
#define PK_ATTN_MAX_DIM 256 /* head_dim limit: 8 values per lane */
/* Floats of workspace pk_attn_rows needs for n rows of capacity slots (the splits' partial
 * results). */
size_t pk_attn_workspace(int n, int n_heads, int head_dim, int capacity);
/* n rows of qkv [n][3·dim], each one query against its own ring: tables (device) holds per row a
 * pointer to its conversation's rings by layer, the ring used is [layer]; ring (host) gives the
 * format, capacity and window (>= 1) every row shares, and is the ring itself when tables is NULL
 * (then the rows are one conversation's, in position order, as backend.h's attn_rows says: all
 * are stored, then all attend). pos [n], out [n][dim]. rope_period > 0: q and k rotated first
 * (qkv left as is). tickets: n·n_heads device counters, zero before the call and left zero after
 * it (the splits' merge draws from them). */
int pk_attn_rows(const float *qkv, int n, int n_heads, int head_dim, float rope_period, const pk_kv_ring *ring,
                 const pk_kv_ring *const *tables, int layer, const int64_t *pos, float *out, float *ws,
                 unsigned *tickets, const pk_next *next, cudaStream_t stream);

/* A head's attention run by the product that computes its q, k and v (gemv.cu): where that
 * product prepares its inputs in its own blocks (the depformer's), the block completing a head's
 * q, k and v rows of a row runs that head's attention over the row's ring, as pk_attn_rows would
 * (one split: the window holds at most 64 keys). */
typedef struct pk_attn_args {
    int n_heads, head_dim;
    float rope_period;
    pk_kv_ring ring; /* as pk_attn_rows' ring, tables, layer, pos, out */
    const pk_kv_ring *const *tables;
    int layer;
    const int64_t *pos;
    float *out;
    unsigned *counts; /* [n·n_heads] device counters, zero before and left zero */
} pk_attn_args;
/* Whether the normalized product of n inputs by w (d = w.cols) can run a's attention so. */
int pk_norm_matmul_attends(const pk_weight *w, int n, int d, const pk_attn_args *a);
/* pk_norm_matmul into qkv, then a's attention, in one launch (where pk_norm_matmul_attends). */
int pk_norm_matmul_attn(const float *x, const float *alpha, int n, int d, float eps, float *h, const pk_weight *w,
                        float *qkv, const pk_attn_args *a, cudaStream_t stream);

/* ---- codec.cu ---- */
typedef struct pk_conv {
    const float *w, *b;
    int cin, cout, k, stride, groups;
} pk_conv;
/* The rows of a batched conv: backend.h's pp_state_rows, field for field (cuda.c checks the
 * layout at compile time). With rows NULL a conv is one row whose state is hist or tail. */
typedef struct pk_state_rows {
    int n;
    const uint64_t *base; /* device: [n] byte addresses of the rows' states, NULL when stateless */
    size_t offset;
} pk_state_rows;
int pk_conv1d(const pk_conv *c, const float *x, int t, float *hist, const pk_state_rows *rows, float *y, int accumulate,
              int replicate, cudaStream_t stream);
/* scratch: n·cout·(k − stride) floats for the new tails. */
int pk_conv_tr1d(const pk_conv *c, const float *x, int t, float *tail, const pk_state_rows *rows, float *y,
                 float *scratch, cudaStream_t stream);
int pk_elu(const float *x, float *y, size_t n, cudaStream_t stream);
int pk_gelu(float *x, size_t n, cudaStream_t stream);
int pk_layer_norm(const float *x, const float *w, const float *b, int n, int d, float eps, float *y,
                  cudaStream_t stream);
int pk_transpose(const float *x, int n, int rows, int cols, float *y, cudaStream_t stream);
int pk_scale_add(float *y, const float *x, const float *scale, int n, int d, cudaStream_t stream);
/* code: device int32, row r's index at code[r·code_stride]. */
int pk_vq_nearest(const float *cb, const float *cb_sq, int bins, int dim, float *x, int n, int subtract, int32_t *code,
                  int code_stride, cudaStream_t stream);
int pk_vq_add_row(const float *cb, int bins, int dim, const int32_t *code, int code_stride, int n, float *y,
                  cudaStream_t stream);

/* ---- sample.cu: tokens (device int32) of rows of n logits, see backend.h's sample ---- */
/* backend.h's pp_sample_param, field for field (cuda.c checks the layout at compile time). */
typedef struct pk_sample_param {
    uint64_t seed;
    int64_t frame;
    float temp;
    int32_t top_k;
} pk_sample_param;
/* params, forced (or NULL) and tokens are device memory, one entry per row. */
int pk_sample(const float *logits, int rows, int n, const pk_sample_param *params, int stream_id,
              const int32_t *forced, int32_t *tokens, cudaStream_t stream);

/* ---- lm_ops.cu: what the device ran ----
 * Device work items issued in this process: every kernel launch (PK_LAUNCH), cuBLAS call and
 * device-side copy or fill, each counted once when issued, also while a graph records (the
 * recording then runs once). A replayed graph's items are counted by the backend (cuda.c). */
void pk_count_node(void);
uint64_t pk_nodes(void);
/* Whether launches allow programmatic dependent launch (common.cuh): on for devices of compute
 * capability 9.0 and later unless PP_CUDA_PDL=0 (cuda.c decides, once per process). */
void pk_set_programmatic_launch(int on);
int pk_programmatic_launch(void);
/* Whether products of latency-bound weights prepare their inputs in their own blocks (gemv.cu):
 * off unless PP_CUDA_SELF_PREP=1 (cuda.c decides, once per process), to time both ways. */
void pk_set_self_prepare(int on);
int pk_self_prepare(void);
/* Inputs from which NF2 and INT4 products run on the integer tensor cores (gemm_int.cuh) rather
 * than the integer GEMV or, above PK_GEMV_MAX_BATCH, the TF32 tensor-core product: 0 (each
 * format's own, gemv.cu) unless PP_CUDA_IMMA_MIN=N (cuda.c, once per process; 2..9, or 0 for
 * never: INT_MAX). */
void pk_set_imma_min_batch(int n);
int pk_imma_min_batch(void);
/* Whether the integer tensor-core product asks L1 for its activations chunks ahead (gemm_int.cuh,
 * PK_IMMA_L1_AHEAD): 1 unless PP_CUDA_IMMA_L1_AHEAD=0 (cuda.c, once per process), to time the two. */
void pk_set_imma_l1_ahead(int on);
int pk_imma_l1_ahead(void);
/* Keys each block of the attention takes: 0 (attn.cu chooses by the launch's size) unless
 * PP_CUDA_ATTN_SPAN=N (cuda.c, once per process; a multiple of 64), to time the choices. */
void pk_set_attn_span(int keys);
int pk_attn_span(void);
/* Whether an int8 ring's attention loads a warp's next keys before computing on the present ones
 * (attn.cuh, pk_attn_block's AHEAD): 1 unless PP_CUDA_ATTN_AHEAD=0 (cuda.c, once per process), to time
 * the two. */
void pk_set_attn_ahead(int on);
int pk_attn_ahead(void);
/* The device's SMs, for launchers that size their tiles to fill them (cuda.c sets it). */
void pk_set_device_sms(int n);
int pk_device_sms(void);
/* Device memory traffic per work item, where it is counted: the CUDA emulation (tests/cuda_emu)
 * counts it from the first call on, in device memory allocated from then on; a GPU build does
 * not and returns -1. Each call passes fn (NULL: drops them), in the order they ran, the items
 * run since the previous call: name (a kernel's launch expression, or "memset", "cublasSgemm",
 * "memcpy host to device", ...), bytes read and bytes written; returns 0. */
typedef void (*pk_traffic_fn)(void *arg, const char *name, uint64_t read, uint64_t written);
int pk_device_traffic(pk_traffic_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
