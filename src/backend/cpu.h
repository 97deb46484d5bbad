/* cpu: private declarations shared by the CPU backend's files (cpu.c holds the table and
 * memory; cpu_gemv.c the matrix products per weight format; cpu_lm.c the LM operations;
 * cpu_codec.c the codec operations). Not for model code: it sees only backend.h. */
#ifndef PP_BACKEND_CPU_H
#define PP_BACKEND_CPU_H

#include "backend/backend.h"
#include "backend/cpu_simd.h"
#include "base/pool.h"

typedef struct cpu_gemv cpu_gemv; /* cpu_gemv.c's activation scratch */

typedef struct cpu_ctx {
    pp_pool *pool;
    cpu_gemv *gemv;
    cpu_simd simd; /* which loop variants run (cpu_simd.h); tests may switch it */
} cpu_ctx;

static inline pp_pool *cpu_pool(pp_backend *be) { return ((cpu_ctx *)be->impl)->pool; }
static inline cpu_simd cpu_simd_of(pp_backend *be) { return ((cpu_ctx *)be->impl)->simd; }

/* cpu.c: `bytes` of memory starting on a 64-byte boundary (a cache line, and an AVX-512 vector), for the
 * backend's buffers and scratch: with malloc's 16-byte alignment every 512-bit load of an activation vector
 * spans two lines, and the AVX-512 integer products of 8 inputs took 1.3 times as long (median; 2 Zen 5
 * cores). Not zeroed; free() releases it; NULL when out of memory. */
void *pp_cpu_alloc_aligned(size_t bytes);

/* cpu_gemv.c */
int pp_cpu_gemv_create(cpu_gemv **out, char *err);
void pp_cpu_gemv_destroy(cpu_gemv *g);
void pp_cpu_matmul(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
void pp_cpu_matmul_add(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
void pp_cpu_matmul_silu_add(pp_backend *be, const pp_weight *w, const float *u, int n, float *y);
void pp_cpu_embed(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate);
void pp_cpu_embed_sum(pp_backend *be, const pp_weight *const *tables, const int *id_rows, int n_tables,
                      const int32_t *ids, int n, float *y);

/* cpu_gemv_avx2.c (x86-64): whether its loops take this weight (format and group size), and
 * rows [r0, r1) of y[n][rows] = x[n][cols]·wᵀ with x already prepared as for cpu_gemv.c. */
int pp_cpu_gemv_avx2_handles(const pp_weight *w);
void pp_cpu_gemv_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);
/* f32 scales of groups [g, g + count) of an NF2, INT4 or NF4 weight: the f16 ones converted eight
 * at a time, NF4's nested absmax through the reference (pp_weight_group_scales). */
void pp_cpu_group_scales_avx2(const pp_weight *w, int64_t g, int64_t count, float *out);
/* pp_quant_fwht's transform of v[0..n), n a power of two >= 8, 8 lanes at a time: the same
 * additions in the same stages, so the same values bit for bit. */
void pp_cpu_fwht_avx2(float *v, int n);
/* cpu_gemv_avx512.c (x86-64, CPU_SIMD_VNNI): the dense formats (F32, F16, BF16) on 512-bit vectors. The
 * inputs are first copied (prepare, into `floats` floats of scratch from pp_cpu_alloc_aligned) so that they
 * meet the weight's rows on 64-byte boundaries; then rows [r0, r1) of y[n][rows] = x[n][cols]·wᵀ from
 * the copy xs. */
size_t pp_cpu_dense512_floats(const pp_weight *w, int n);
void pp_cpu_dense512_prepare(const pp_weight *w, const float *x, int n, float *xs);
void pp_cpu_dense512_rows(const pp_weight *w, const float *xs, int n, float *y, int64_t r0, int64_t r1);
/* cpu_gemv_blocks.c (x86-64): the same for the ggml block formats Q4_K, Q4_0 and Q8_0
 * (pp_cpu_gemv_rows_avx2 hands them on). */
void pp_cpu_gemv_block_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);
/* cpu_gemv_int8.c (x86-64 with AVX2, aarch64): the same for INT8 weights, whose groups and first element it
 * handles when they are multiples of 8 (pp_cpu_gemv_int8_handles). */
int pp_cpu_gemv_int8_handles(const pp_weight *w);
void pp_cpu_gemv_int8_rows_simd(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);

/* cpu_gemv_neon.c (aarch64): the NEON twins of cpu_gemv_avx2.c's loops for the dense formats, NF2, INT4, NF4
 * and INT8 (the ggml block formats run the portable loops), and of its transform. */
int pp_cpu_gemv_neon_handles(const pp_weight *w);
void pp_cpu_gemv_rows_neon(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);
void pp_cpu_fwht_neon(float *v, int n);

/* cpu_attn_simd.c (x86-64 with AVX2, aarch64): every head's attention over ring positions [first, last] (q and
 * out: [n_heads·head_dim]), as cpu_lm.c's loop computes it, on the pool; for head sizes that are multiples of 8.
 * -1 (nothing done) without memory for its scratch. */
int pp_cpu_attn_simd(pp_pool *pool, const pp_kv_ring *r, int n_heads, int head_dim, const float *q, int64_t first,
                     int64_t last, float *out);

/* Integer products for the low-bit formats (x86-64): the activations rounded to int16 in the order
 * a family's loops read them, with their scales (buffers sized by the caller from `sizes`), then
 * rows [r0, r1) of y[n][rows] = x[n][cols]·wᵀ from them. cpu_gemv_vnni.c's (CPU_SIMD_VNNI: NF2, INT4,
 * NF4 with one scale per run of 2W inputs, W weights per 16-bit word of codes; Q4_K per 256-input
 * block plus its sub-blocks' sums; Q4_0, Q8_0 per pair of 32-input blocks; INT8 per 128 inputs)
 * and cpu_gemv_i16.c's (CPU_SIMD_AVX2_INT16 and up, on 256-bit vectors: NF2, INT4, NF4 with a scale per
 * 8-lane run, Q4_K as VNNI's in another order, Q4_0 and Q8_0 per 32-input block). */
typedef struct cpu_int_x {
    int16_t *q;
    float *scale;
    float *sums;   /* Q4_K: each 32-input sub-block's Σx; INT8 with zero points: each block's Σ of its rounded
                      inputs (set by prepare, inside the scale buffer) */
    int32_t *bias; /* Q4_0: each pair of blocks' lane sums of −8·x (set by prepare, inside it too) */
} cpu_int_x;
typedef struct cpu_int_gemv {
    int (*handles)(const pp_weight *w);
    void (*sizes)(const pp_weight *w, int n, size_t *q, size_t *scales);
    void (*prepare)(const pp_weight *w, const float *x, int n, cpu_int_x *out);
    void (*rows)(const pp_weight *w, const cpu_int_x *x, int n, float *y, int64_t r0, int64_t r1);
} cpu_int_gemv;
extern const cpu_int_gemv pp_cpu_int_gemv_vnni, pp_cpu_int_gemv_avx2;
/* cpu_gemv.c (x86-64): the integer products variant simd runs for w, NULL when neither family takes
 * it (the float loops do). */
const cpu_int_gemv *pp_cpu_int_gemv_for(cpu_simd simd, const pp_weight *w);
/* The 16 codes of NF2, INT4 or NF4 as the integer loops' int16 values (NF2's 4 repeated), what one
 * unit of them is worth before the group scale, and the largest |x| an activation is rounded to. */
void pp_cpu_int16_codes(const pp_weight *w, int16_t values[16], float *unit, float *act_max);

/* cpu_lm.c */
void pp_cpu_rmsnorm(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *y);
void pp_cpu_norm_matmul(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *h,
                        const pp_weight *w, float *y);
void pp_cpu_attn_rows(pp_backend *be, float *qkv, int n, int n_heads, int head_dim, float rope, const pp_kv_ring *ring,
                      const pp_kv_ring *const *tables, int layer, const int64_t *pos, float *out);
void pp_cpu_silu_mul(pp_backend *be, const float *u, int n, int hidden, float *y);

/* cpu_codec.c */
void pp_cpu_conv1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *hist, const pp_state_rows *rows,
                   float *y, float *scratch, int flags);
void pp_cpu_conv_tr1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *tail, const pp_state_rows *rows,
                      float *y, float *scratch);
void pp_cpu_elu(pp_backend *be, const float *x, float *y, size_t n);
void pp_cpu_gelu(pp_backend *be, float *x, size_t n);
void pp_cpu_layer_norm(pp_backend *be, const float *x, const float *w, const float *b, int n, int d, float eps,
                       float *y);
void pp_cpu_transpose(pp_backend *be, const float *x, int n, int rows, int cols, float *y);
void pp_cpu_scale_add(pp_backend *be, float *y, const float *x, const float *scale, int n, int d);
void pp_cpu_vq_nearest(pp_backend *be, const float *cb, const float *cb_sq, int bins, int dim, float *x, int n,
                       int subtract, int32_t *code, int code_stride);
void pp_cpu_vq_add_row(pp_backend *be, const float *cb, int bins, int dim, const int32_t *code, int code_stride, int n,
                       float *y);

/* pp_cpu_sample.c */
void pp_cpu_sample(pp_backend *be, const float *logits, int rows, int n, const pp_sample_param *params, int stream,
                   const int32_t *forced, int32_t *tokens);

#endif
