/* cpu_gemv: y = x·wᵀ for every weight format, straight from the stored bytes.
 *
 * Rows are split across the pool; each weight row is read once for all n inputs. Dense rows
 * are converted a chunk at a time into a small f32 buffer and dotted with every input.
 * Quantized rows are expanded a group at a time into unscaled values through a per-byte
 * table (one 16- or 8-byte copy per packed byte), dotted with every input, then scaled.
 *
 * NF2 never applies the inverse Walsh-Hadamard transform to the weight: each group slice of
 * the input gets the (self-inverse) normalised transform once per call instead, since
 * w_g·x_g = s_g · C[q_g]·(H x_g) (docs/formats.md §3.4). The transformed copy lives in a
 * grow-only scratch owned by the backend.
 *
 * These loops are the portable reference; on CPUs with AVX2 the row tasks run
 * cpu_gemv_avx2.c's register-blocked twins instead, on the same prepared inputs (on aarch64,
 * cpu_gemv_neon.c's), and the low-bit formats run integer products on activations rounded to int16:
 * cpu_gemv_vnni.c's on CPUs with AVX-512 VNNI, cpu_gemv_i16.c's on the other AVX2 ones. On the VNNI CPUs the
 * dense formats run cpu_gemv_avx512.c's loops, on a copy of the inputs aligned to the weights' rows. */
#include "backend/cpu.h"

#include "base/err.h"
#include "base/log.h"
#include "io/quant.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DENSE_CHUNK 1024

struct cpu_gemv {
    pthread_mutex_t lock; /* the scratch serves one product at a time */
    float *xp;            /* NF2's rotated inputs, or the AVX-512 dense loops' aligned copy of them */
    size_t cap;
    int16_t *vq; /* integer products: int16 activations [vq_cap] */
    float *runs; /* integer products: their scales [runs_cap] */
    size_t vq_cap, runs_cap;
    /* The accumulating products' scratch (matmul_add, matmul_silu_add), apart from the products':
     * the gated input and the product before it joins y. */
    pthread_mutex_t gate_lock;
    float *gate, *sum;
    size_t gate_cap, sum_cap;
    float nf2_lut[256][4]; /* byte -> its 4 centroids, LSB code first */
    float int4_lut[256][2]; /* byte -> (low nibble - 8, high nibble - 8) */
};

int pp_cpu_gemv_create(cpu_gemv **out, char *err) {
    cpu_gemv *g = calloc(1, sizeof *g);
    if (!g) return pp_fail(err, PP_ENOMEM, "cpu backend: out of memory");
    pthread_mutex_init(&g->lock, NULL);
    pthread_mutex_init(&g->gate_lock, NULL);
    for (int b = 0; b < 256; b++) {
        for (int k = 0; k < 4; k++) g->nf2_lut[b][k] = pp_quant_nf2_codebook[(b >> (2 * k)) & 3];
        g->int4_lut[b][0] = (float)((b & 15) - 8);
        g->int4_lut[b][1] = (float)((b >> 4) - 8);
    }
    *out = g;
    return PP_OK;
}

void pp_cpu_gemv_destroy(cpu_gemv *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->lock);
    pthread_mutex_destroy(&g->gate_lock);
    free(g->gate);
    free(g->sum);
    free(g->xp);
    free(g->vq);
    free(g->runs);
    free(g);
}

/* 16 independent partial sums: a fixed-width inner loop the compiler turns into SIMD without
 * reassociating float adds itself. */
static float dot(const float *a, const float *b, int64_t n) {
    float s[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++) s[j] += a[k + j] * b[k + j];
    float t = 0;
    for (; k < n; k++) t += a[k] * b[k];
    for (int j = 0; j < 16; j++) t += s[j];
    return t;
}

/* IEEE half to float without branches on the value (vectorisable): the magnitude bits moved
 * into a float's place and rescaled by 2^112 give normals and subnormals alike. */
static inline float half_to_float(uint16_t h) {
    uint32_t mag = (uint32_t)(h & 0x7fff) << 13, u;
    float f;
    memcpy(&f, &mag, 4);
    f *= 0x1p112f;
    memcpy(&u, &f, 4);
    uint32_t special = -(uint32_t)((h & 0x7c00) == 0x7c00); /* inf and NaN keep their payload */
    u = (u & ~special) | ((mag | 0x7f800000u) & special);
    u |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &u, 4);
    return f;
}

/* Elements [e, e+len) of a dense weight as f32. */
static void load_dense(const pp_weight *w, int64_t e, int64_t len, float *buf) {
    const uint8_t *d = w->data;
    if (w->fmt == PP_WF_F32) {
        memcpy(buf, d + 4 * e, (size_t)len * 4);
    } else if (w->fmt == PP_WF_BF16) {
        for (int64_t i = 0; i < len; i++) {
            uint16_t h;
            memcpy(&h, d + 2 * (e + i), 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&buf[i], &u, 4);
        }
    } else {
        for (int64_t i = 0; i < len; i++) {
            uint16_t h;
            memcpy(&h, d + 2 * (e + i), 2);
            buf[i] = half_to_float(h);
        }
    }
}

/* Rows [r0, r1) of y[n][rows] = x[n][cols]·wᵀ (cpu.h's SIMD row loops). */
typedef void (*rows_fn)(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);

typedef struct {
    const pp_weight *w;
    const float *x; /* [n][cols]: raw for dense, prepared for quantized formats */
    float *y;       /* [n][rows] */
    int n;
    int64_t rows_per_task;
    const float *lut; /* quantized: byte -> values, 4 per byte (NF2) or 2 (INT4, NF4) */
    /* set: the SIMD twin of the loops below takes these rows (cpu_gemv_avx2.c, cpu_gemv_neon.c,
     * cpu_gemv_avx512.c) */
    rows_fn simd_rows;
    const cpu_int_gemv *ig; /* set: these integer loops take the rows, on the activations ix */
    const cpu_int_x *ix;
} gemv_job;

static void dense_rows(const gemv_job *j, int64_t r0, int64_t r1) {
    const pp_weight *w = j->w;
    float buf[DENSE_CHUNK];
    for (int64_t r = r0; r < r1; r++) {
        int64_t e = w->elem0 + r * w->cols;
        for (int i = 0; i < j->n; i++) j->y[i * w->rows + r] = 0;
        for (int64_t c = 0; c < w->cols; c += DENSE_CHUNK) {
            int64_t len = w->cols - c < DENSE_CHUNK ? w->cols - c : DENSE_CHUNK;
            load_dense(w, e + c, len, buf);
            for (int i = 0; i < j->n; i++) j->y[i * w->rows + r] += dot(buf, j->x + i * w->cols + c, len);
        }
    }
}

/* Quantized rows: whole groups are expanded and scaled into buf, up to QUANT_CHUNK values at a
 * time, so every dot runs over a long span (its final reduction is paid per chunk, not per
 * group). */
#define QUANT_CHUNK 1024

static void quant_rows(const gemv_job *j, int64_t r0, int64_t r1) {
    const pp_weight *w = j->w;
    const uint8_t *d = w->data;
    int gs = w->group, nf2 = w->fmt == PP_WF_NF2;
    int64_t bytes_per_group = nf2 ? gs / 4 : gs / 2;
    int64_t chunk = gs >= QUANT_CHUNK ? gs : QUANT_CHUNK / gs * gs;
    float buf[QUANT_MAX_NP2 > QUANT_CHUNK ? QUANT_MAX_NP2 : QUANT_CHUNK], scales[QUANT_CHUNK / 2];
    for (int64_t r = r0; r < r1; r++) {
        int64_t g0 = (w->elem0 + r * w->cols) / gs;
        for (int i = 0; i < j->n; i++) j->y[i * w->rows + r] = 0;
        for (int64_t c = 0; c < w->cols; c += chunk) {
            int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
            pp_weight_group_scales(w, g0 + c / gs, len / gs, scales);
            for (int64_t k = 0; k < len; k += gs) {
                int64_t g = g0 + (c + k) / gs;
                const uint8_t *p = d + g * bytes_per_group;
                float *o = buf + k, s = scales[k / gs];
                /* fixed-size copies of a byte's 4 (2) values: the compiler emits one vector move each */
                if (nf2)
                    for (int e = 0; e < gs; e += 4) memcpy(o + e, j->lut + 4 * p[e / 4], 16);
                else
                    for (int e = 0; e < gs; e += 2) memcpy(o + e, j->lut + 2 * p[e / 2], 8);
                for (int e = 0; e < gs; e++) o[e] *= s;
            }
            for (int i = 0; i < j->n; i++) j->y[i * w->rows + r] += dot(buf, j->x + i * w->cols + c, len);
        }
    }
}

/* INT8: each group's Σ (q − zero)·x, then the group's scale once. */
static void int8_rows(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    const int8_t *q = w->data;
    for (int64_t r = r0; r < r1; r++) {
        int64_t e0 = w->elem0 + r * w->cols;
        for (int i = 0; i < n; i++) y[i * w->rows + r] = 0;
        for (int64_t c = 0; c < w->cols; c += w->group) {
            float s;
            int64_t g = (e0 + c) / w->group;
            pp_weight_group_scales(w, g, 1, &s);
            int zero = w->zeros ? w->zeros[g] : 0;
            for (int i = 0; i < n; i++) {
                const float *xi = x + i * w->cols + c;
                float acc = 0;
                for (int64_t k = 0; k < w->group; k++) acc += (float)(q[e0 + c + k] - zero) * xi[k];
                y[i * w->rows + r] += acc * s;
            }
        }
    }
}

/* Rows [r0, r1) decoded in block-aligned chunks and dotted: the ggml block formats' loop (their
 * scales sit inside each block), and the fallback of a quantized product whose scratch could
 * not be allocated (slower, same result). */
static void decoded_rows(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    float buf[QUANT_MAX_NP2];
    int64_t chunk = QUANT_MAX_NP2 / w->group * w->group;
    for (int64_t r = r0; r < r1; r++) {
        for (int i = 0; i < n; i++) y[i * w->rows + r] = 0;
        for (int64_t c = 0; c < w->cols; c += chunk) {
            int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
            pp_weight_decode_span(w, r, c, len, buf);
            for (int i = 0; i < n; i++) y[i * w->rows + r] += dot(buf, x + i * w->cols + c, len);
        }
    }
}

static void gemv_task(void *ctx, int task) {
    const gemv_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->w->rows) r1 = j->w->rows;
    if (r0 >= r1) return;
#if CPU_HAVE_AVX2
    if (j->ig) {
        j->ig->rows(j->w, j->ix, j->n, j->y, r0, r1);
        return;
    }
#endif
    if (j->simd_rows) {
        j->simd_rows(j->w, j->x, j->n, j->y, r0, r1);
        return;
    }
    if (j->w->fmt <= PP_WF_BF16)
        dense_rows(j, r0, r1);
    else if (j->w->fmt == PP_WF_INT8)
        int8_rows(j->w, j->x, j->n, j->y, r0, r1);
    else if (pp_wformat_block_bytes(j->w->fmt))
        decoded_rows(j->w, j->x, j->n, j->y, r0, r1);
    else
        quant_rows(j, r0, r1);
}

/* NF2: the normalised Walsh-Hadamard transform of every group slice of every input. */
static void rotate_x(pp_backend *be, const pp_weight *w, const float *x, int n, float *xp) {
    int gs = w->group;
    float tmp[QUANT_MAX_NP2];
    void (*fwht)(float *, int) = pp_quant_fwht;
#if CPU_HAVE_AVX2
    /* it runs on one thread before the rows are shared out; scalar, it was about a twentieth of
     * a 2-thread NF2 product of 4096 x 14336 */
    if (cpu_simd_of(be) >= CPU_SIMD_AVX2 && w->np2 >= 8) fwht = pp_cpu_fwht_avx2;
#elif CPU_HAVE_NEON
    if (cpu_simd_of(be) == CPU_SIMD_NEON && w->np2 >= 8) fwht = pp_cpu_fwht_neon;
#else
    (void)be;
#endif
    for (int64_t s = 0; s < (int64_t)n * w->cols; s += gs) {
        memcpy(tmp, x + s, (size_t)gs * sizeof *tmp);
        for (int k = gs; k < w->np2; k++) tmp[k] = 0;
        fwht(tmp, w->np2);
        memcpy(xp + s, tmp, (size_t)gs * sizeof *tmp);
    }
}

/* The SIMD float loops this CPU runs for w, NULL for the portable ones. */
static rows_fn float_rows_for(pp_backend *be, const pp_weight *w) {
#if CPU_HAVE_AVX2
    if (cpu_simd_of(be) >= CPU_SIMD_AVX2 && pp_cpu_gemv_avx2_handles(w)) return pp_cpu_gemv_rows_avx2;
#elif CPU_HAVE_NEON
    if (cpu_simd_of(be) == CPU_SIMD_NEON && pp_cpu_gemv_neon_handles(w)) return pp_cpu_gemv_rows_neon;
#else
    (void)be, (void)w;
#endif
    return NULL;
}

/* The product's rows shared out over the pool: the integer loops ig when set, else simd_rows when set,
 * else the portable loops. */
static void run_rows(pp_backend *be, const pp_weight *w, const float *x, rows_fn simd_rows, const cpu_int_gemv *ig,
                     const cpu_int_x *ix, int n, float *y, const float *lut) {
    pp_pool *pool = cpu_pool(be);
    int threads = pool ? pp_pool_threads(pool) : 1;
    /* A few tasks per thread so uneven progress balances; at least 8 rows so small products
     * do not drown in scheduling. */
    int64_t tasks = (int64_t)threads * 4;
    int64_t per = (w->rows + tasks - 1) / tasks;
    if (per < 8) per = 8;
    per = (per + 3) / 4 * 4; /* whole 4-row passes for the SIMD loops */
    gemv_job j = {
        .w = w, .x = x, .y = y, .n = n, .rows_per_task = per, .lut = lut, .simd_rows = simd_rows, .ig = ig, .ix = ix};
    pp_pool_run(pool, (int)((w->rows + per - 1) / per), gemv_task, &j);
}

/* Grows a scratch array to hold need elements of size bytes, aligned as the backend's buffers (its old
 * contents are not kept: every use writes it first); 0 when out of memory. */
static int reserve(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 1;
    void *q = need <= SIZE_MAX / size ? pp_cpu_alloc_aligned(need * size) : NULL;
    if (!q) return 0;
    free(*p);
    *p = q;
    *cap = need;
    return 1;
}

/* NF2's rotated activations in g->xp (lock held); NULL without memory for them. */
static const float *rotated(pp_backend *be, cpu_gemv *g, const pp_weight *w, const float *x, int n) {
    if (!reserve((void **)&g->xp, &g->cap, (size_t)n * (size_t)w->cols, sizeof(float))) return NULL;
    rotate_x(be, w, x, n, g->xp);
    return g->xp;
}

#if CPU_HAVE_AVX2
const cpu_int_gemv *pp_cpu_int_gemv_for(cpu_simd simd, const pp_weight *w) {
    if (simd == CPU_SIMD_VNNI && pp_cpu_int_gemv_vnni.handles(w)) return &pp_cpu_int_gemv_vnni;
    if (simd >= CPU_SIMD_AVX2_INT16 && pp_cpu_int_gemv_avx2.handles(w)) return &pp_cpu_int_gemv_avx2;
    return NULL;
}

/* The integer products; 0 when they cannot take this product (the caller then runs the float
 * loops). */
static int int_matmul(pp_backend *be, cpu_gemv *g, const pp_weight *w, const float *x, int n, float *y) {
    const cpu_int_gemv *ig = pp_cpu_int_gemv_for(cpu_simd_of(be), w);
    if (!ig) return 0;
    size_t q_elems, scales;
    ig->sizes(w, n, &q_elems, &scales);
    pthread_mutex_lock(&g->lock);
    const float *src = w->fmt == PP_WF_NF2 ? rotated(be, g, w, x, n) : x;
    int ok = src && reserve((void **)&g->vq, &g->vq_cap, q_elems, sizeof *g->vq) &&
             reserve((void **)&g->runs, &g->runs_cap, scales, sizeof *g->runs);
    if (ok) {
        cpu_int_x ix = {.q = g->vq, .scale = g->runs};
        ig->prepare(w, src, n, &ix);
        run_rows(be, w, NULL, NULL, ig, &ix, n, y, NULL);
    }
    pthread_mutex_unlock(&g->lock);
    return ok;
}

/* The AVX-512 dense products, on their aligned copy of the inputs; 0 when they cannot take this
 * product (the caller then runs the AVX2 loops). */
static int dense512_matmul(pp_backend *be, cpu_gemv *g, const pp_weight *w, const float *x, int n, float *y) {
    if (cpu_simd_of(be) != CPU_SIMD_VNNI || w->fmt > PP_WF_BF16) return 0;
    pthread_mutex_lock(&g->lock);
    int ok = reserve((void **)&g->xp, &g->cap, pp_cpu_dense512_floats(w, n), sizeof(float));
    if (ok) {
        pp_cpu_dense512_prepare(w, x, n, g->xp);
        run_rows(be, w, g->xp, pp_cpu_dense512_rows, NULL, NULL, n, y, NULL);
    }
    pthread_mutex_unlock(&g->lock);
    return ok;
}
#endif

void pp_cpu_matmul(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    if (n <= 0 || w->rows <= 0) return;
    cpu_gemv *g = ((cpu_ctx *)be->impl)->gemv;
#if CPU_HAVE_AVX2
    if (int_matmul(be, g, w, x, n, y) || dense512_matmul(be, g, w, x, n, y)) return;
#endif
    rows_fn simd_rows = float_rows_for(be, w);
    if (w->fmt <= PP_WF_BF16 || pp_wformat_block_bytes(w->fmt) || w->fmt == PP_WF_INT8) {
        run_rows(be, w, x, simd_rows, NULL, NULL, n, y, NULL);
        return;
    }
    if (w->fmt == PP_WF_INT4) {
        run_rows(be, w, x, simd_rows, NULL, NULL, n, y, &g->int4_lut[0][0]);
        return;
    }
    if (w->fmt == PP_WF_NF4) {
        float lut[256][2], table[16];
        for (int i = 0; i < 16; i++) table[i] = quant_ldf32(w->quant_map, (size_t)i);
        for (int b = 0; b < 256; b++) {
            lut[b][0] = table[b >> 4]; /* bitsandbytes: high nibble first */
            lut[b][1] = table[b & 15];
        }
        run_rows(be, w, x, simd_rows, NULL, NULL, n, y, &lut[0][0]);
        return;
    }
    pthread_mutex_lock(&g->lock);
    const float *xp = rotated(be, g, w, x, n);
    if (xp) {
        run_rows(be, w, xp, simd_rows, NULL, NULL, n, y, &g->nf2_lut[0][0]);
    } else {
        PP_ERROR("cpu", "matmul '%s': no memory for %d x %lld activations, decoding rows instead",
                 w->name ? w->name : "?", n, (long long)w->cols);
        decoded_rows(w, x, n, y, 0, w->rows);
    }
    pthread_mutex_unlock(&g->lock);
}

void pp_cpu_embed_sum(pp_backend *be, const pp_weight *const *tables, const int *id_rows, int n_tables,
                      const int32_t *ids, int n, float *y) {
    for (int t = 0; t < n_tables; t++) pp_cpu_embed(be, tables[t], ids + (size_t)id_rows[t] * n, n, y, t > 0);
}

void pp_cpu_embed(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate) {
    (void)be;
    float buf[QUANT_MAX_NP2];
    int64_t cols = table->cols;
    /* dense and INT8 rows decode from any column; the other formats by whole groups */
    int64_t chunk = table->fmt <= PP_WF_BF16 || table->fmt == PP_WF_INT8 ? QUANT_MAX_NP2
                                                                         : QUANT_MAX_NP2 / table->group * table->group;
    for (int i = 0; i < n; i++) {
        float *dst = y + (int64_t)i * cols;
        /* As ScaledEmbedding: id -1 embeds to exact zeros, other negative ids read row 0. An id
         * past the table (never produced by the model) also gives zeros rather than a fault. */
        int64_t id = ids[i] < -1 ? 0 : ids[i];
        if (id == -1 || id >= table->rows) {
            if (!accumulate) memset(dst, 0, (size_t)cols * sizeof *dst);
            continue;
        }
        if (!accumulate) {
            pp_weight_decode_span(table, id, 0, cols, dst);
            continue;
        }
        for (int64_t c = 0; c < cols; c += chunk) {
            int64_t len = cols - c < chunk ? cols - c : chunk;
            pp_weight_decode_span(table, id, c, len, buf);
            for (int64_t k = 0; k < len; k++) dst[c + k] += buf[k];
        }
    }
}

/* y += x·wᵀ through g->sum (gate_lock held); 0 without memory for it. */
static int add_product(pp_backend *be, cpu_gemv *g, const pp_weight *w, const float *x, int n, float *y) {
    size_t count = (size_t)n * (size_t)w->rows;
    if (!reserve((void **)&g->sum, &g->sum_cap, count, sizeof(float))) return 0;
    pp_cpu_matmul(be, w, x, n, g->sum);
    for (size_t i = 0; i < count; i++) y[i] += g->sum[i];
    return 1;
}

static void no_memory(const pp_weight *w, int n) {
    PP_ERROR("cpu", "matmul '%s': no memory for %d rows of its product; it is not added", w->name ? w->name : "?", n);
}

void pp_cpu_matmul_add(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    if (n <= 0 || w->rows <= 0) return;
    cpu_gemv *g = ((cpu_ctx *)be->impl)->gemv;
    pthread_mutex_lock(&g->gate_lock);
    if (!add_product(be, g, w, x, n, y)) no_memory(w, n);
    pthread_mutex_unlock(&g->gate_lock);
}

void pp_cpu_matmul_silu_add(pp_backend *be, const pp_weight *w, const float *u, int n, float *y) {
    if (n <= 0 || w->rows <= 0) return;
    cpu_gemv *g = ((cpu_ctx *)be->impl)->gemv;
    pthread_mutex_lock(&g->gate_lock);
    int ok = reserve((void **)&g->gate, &g->gate_cap, (size_t)n * (size_t)w->cols, sizeof(float));
    if (ok) pp_cpu_silu_mul(be, u, n, (int)w->cols, g->gate);
    if (!ok || !add_product(be, g, w, g->gate, n, y)) no_memory(w, n);
    pthread_mutex_unlock(&g->gate_lock);
}
