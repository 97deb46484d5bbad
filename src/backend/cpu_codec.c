/* cpu_codec: the CPU backend's codec operations (streaming Conv1d and ConvTranspose1d, ELU,
 * GELU, LayerNorm, transpose, LayerScale residual, RVQ nearest neighbour).
 *
 * The convolutions are matrix products: a Conv1d gathers its input windows into rows
 * (im2col) so every output is a contiguous dot product with a weight row; a ConvTranspose1d
 * multiplies each input column by the weight's [cin][cout·k] rows and overlap-adds the
 * products. The inner loops use GCC/Clang vector types with explicit partial sums, so they
 * vectorise without -ffast-math (which would let the compiler reorder every float sum).
 *
 * The hot loops are pool tasks compiled twice from one body (cpu_simd.h): portable, and AVX2
 * with FMA, picked by the backend's detected variant. */
#include "backend/cpu.h"

#include <math.h>
#include <string.h>

typedef cpu_v8f v8f;
#define LD8 CPU_LD8
#define ST8 CPU_ST8

static inline float hsum8(const v8f *v) {
    return (((*v)[0] + (*v)[4]) + ((*v)[1] + (*v)[5])) + (((*v)[2] + (*v)[6]) + ((*v)[3] + (*v)[7]));
}

#define INLINE static inline __attribute__((always_inline))

/* Work below this many multiply-adds per task is not worth waking the pool for. */
#define MIN_TASK_MACS (1 << 16)

static int task_count(pp_backend *be, double macs, int max_tasks) {
    int n = (int)(macs / MIN_TASK_MACS);
    int cap = 8 * pp_pool_threads(cpu_pool(be));
    if (n > cap) n = cap;
    if (n > max_tasks) n = max_tasks;
    return n < 1 ? 1 : n;
}

/* Runs fn over n_tasks fixed pieces of work: inline when small, else across the pool. */
static void run_tasks(pp_backend *be, double macs, int n_tasks, pp_pool_fn fn, void *job) {
    if (task_count(be, macs, n_tasks) == 1) {
        for (int i = 0; i < n_tasks; i++) fn(job, i);
    } else {
        pp_pool_run(cpu_pool(be), n_tasks, fn, job);
    }
}

/* ==== Conv1d =================================================================== */

/* out[r][c] = dot(w[r], x[c]) over len values for an nr-row × 2-column tile (nr <= 4, a
 * constant at each call): each loaded x vector feeds nr products and each w vector two. Every
 * output's sum runs in the same order whatever the tile, so results never depend on tiling. */
INLINE void dot_tile(const float *const w[4], int nr, const float *const x[2], int len, float out[4][2]) {
    v8f acc[4][2] = {{{0}}};
    int l = 0;
    for (; l + 8 <= len; l += 8) {
        v8f x0 = LD8(x[0] + l), x1 = LD8(x[1] + l);
        for (int r = 0; r < nr; r++) {
            v8f wr = LD8(w[r] + l);
            acc[r][0] += wr * x0;
            acc[r][1] += wr * x1;
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < 2; c++) {
            float s = hsum8(&acc[r][c]);
            for (int i = l; i < len; i++) s += w[r][i] * x[c][i];
            out[r][c] = s;
        }
}

typedef struct conv_job {
    const pp_conv *c;
    const float *col; /* [tout][len] input windows */
    float *y;         /* [cout][tout] */
    int tout, len, accumulate;
    int row_tiles, col_tile; /* tasks: row_tiles × ceil(tout / col_tile) */
    int rows_per_tile;
} conv_job;

INLINE void conv_task_body(void *ctx, int task) {
    const conv_job *j = ctx;
    const pp_conv *c = j->c;
    int r_begin = (task % j->row_tiles) * j->rows_per_tile;
    int r_end = r_begin + j->rows_per_tile < c->cout ? r_begin + j->rows_per_tile : c->cout;
    int c_begin = (task / j->row_tiles) * j->col_tile;
    int c_end = c_begin + j->col_tile < j->tout ? c_begin + j->col_tile : j->tout;
    for (int r = r_begin; r < r_end; r += 4) {
        const int nr = r_end - r < 4 ? r_end - r : 4;
        const float *w[4];
        for (int i = 0; i < 4; i++) w[i] = c->w + (size_t)(r + (i < nr ? i : 0)) * j->len;
        for (int t = c_begin; t < c_end; t += 2) {
            /* An odd last column repeats the previous one; its result is dropped. */
            const float *x[2] = {j->col + (size_t)t * j->len,
                                 j->col + (size_t)(t + 1 < c_end ? t + 1 : t) * j->len};
            float out[4][2];
            if (nr == 4) {
                dot_tile(w, 4, x, j->len, out);
            } else {
                for (int i = 0; i < nr; i++) dot_tile(w + i, 1, x, j->len, out + i);
            }
            for (int i = 0; i < nr; i++)
                for (int k = 0; k < 2 && t + k < c_end; k++) {
                    float v = (c->b ? c->b[r + i] : 0.0f) + out[i][k];
                    float *dst = j->y + (size_t)(r + i) * j->tout + t + k;
                    *dst = j->accumulate ? *dst + v : v;
                }
        }
    }
}
CPU_TASK_VARIANTS(conv_task)

/* Stride-1 convs whose window holds fewer than 8 values (the first conv: 1 channel, k 7)
 * never reach dot_tile's vector loop; this runs the same per-output sum (0, then each
 * product in window order, then the bias: bit-identical) with time in the vector lanes.
 * xin is [cin][t + k − 1], the history followed by the input. */
typedef struct short_job {
    const pp_conv *c;
    const float *xin;
    float *y;
    int tout, accumulate;
} short_job;

INLINE void short_task_body(void *ctx, int o) {
    const short_job *j = ctx;
    const pp_conv *c = j->c;
    const int k = c->k, span = j->tout + k - 1;
    const float *w = c->w + (size_t)o * c->cin * k;
    const float b = c->b ? c->b[o] : 0.0f;
    float *y = j->y + (size_t)o * j->tout;
    int t = 0;
    for (; t + 32 <= j->tout; t += 32) {
        v8f acc[4] = {{0}};
        for (int i = 0; i < c->cin; i++)
            for (int q = 0; q < k; q++)
                for (int v = 0; v < 4; v++) acc[v] += w[i * k + q] * LD8(j->xin + (size_t)i * span + t + q + 8 * v);
        for (int v = 0; v < 4; v++)
            for (int l = 0; l < 8; l++) {
                float *dst = y + t + 8 * v + l;
                *dst = j->accumulate ? *dst + (b + acc[v][l]) : b + acc[v][l];
            }
    }
    for (; t < j->tout; t++) {
        float acc = 0.0f;
        for (int i = 0; i < c->cin; i++)
            for (int q = 0; q < k; q++) acc += w[i * k + q] * j->xin[(size_t)i * span + t + q];
        y[t] = j->accumulate ? y[t] + (b + acc) : b + acc;
    }
}
CPU_TASK_VARIANTS(short_task)

static int is_short(const pp_conv *c) { return c->stride == 1 && c->cin * c->k < 8; }

/* row o of col [tout][cin·k] = the input window of output o, from [hist, x]. */
static void im2col(const pp_conv *c, const float *x, int t, const float *hist, float *col) {
    int k = c->k, s = c->stride, p = k - s, tout = t / s, len = c->cin * k;
    for (int o = 0; o < tout; o++) {
        float *row = col + (size_t)o * len;
        for (int i = 0; i < c->cin; i++) {
            const float *hi = hist + (size_t)i * p, *xi = x + (size_t)i * t;
            float *dst = row + (size_t)i * k;
            int start = o * s;
            if (start >= p) { /* the whole window is in x: a plain copy */
                memcpy(dst, xi + (start - p), (size_t)k * sizeof(float));
                continue;
            }
            for (int q = 0; q < k; q++) dst[q] = start + q < p ? hi[start + q] : xi[start + q - p];
        }
    }
}

void cpu_conv1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *hist, float *y, float *scratch,
                int flags) {
    int k = c->k, s = c->stride, p = k - s, tout = t / s, len = c->cin * k;
    if (flags & PP_CONV_REPLICATE)
        for (int i = 0; i < c->cin; i++)
            for (int q = 0; q < p; q++) hist[(size_t)i * p + q] = x[(size_t)i * t];
    if (is_short(c)) { /* [hist, x] per channel; fits: (k − 1 + t)·cin <= t·cin·k */
        for (int i = 0; i < c->cin; i++)
            for (int q = 0; q < p + t; q++)
                scratch[(size_t)i * (p + t) + q] = q < p ? hist[(size_t)i * p + q] : x[(size_t)i * t + q - p];
    } else {
        im2col(c, x, t, hist, scratch);
    }
    /* The new history is the last p columns of [hist, x]; reading ahead of the write
     * position keeps the in-place shift safe when t < p. */
    for (int i = 0; i < c->cin; i++) {
        float *hi = hist + (size_t)i * p;
        const float *xi = x + (size_t)i * t;
        for (int q = 0; q < p; q++) hi[q] = t + q < p ? hi[t + q] : xi[t + q - p];
    }
    double macs = (double)c->cout * tout * len;
    if (is_short(c)) {
        short_job job = {.c = c, .xin = scratch, .y = y, .tout = tout, .accumulate = flags & PP_CONV_ACCUMULATE};
        run_tasks(be, macs, c->cout, CPU_PICK(cpu_simd_of(be), short_task), &job);
        return;
    }
    int rows_per_tile = 16, col_tile = 64;
    int row_tiles = (c->cout + rows_per_tile - 1) / rows_per_tile;
    int col_tiles = (tout + col_tile - 1) / col_tile;
    conv_job job = {.c = c, .col = scratch, .y = y, .tout = tout, .len = len,
                    .accumulate = flags & PP_CONV_ACCUMULATE, .row_tiles = row_tiles, .col_tile = col_tile,
                    .rows_per_tile = rows_per_tile};
    run_tasks(be, macs, row_tiles * col_tiles, CPU_PICK(cpu_simd_of(be), conv_task), &job);
}

/* ==== ConvTranspose1d ============================================================ */

typedef struct convtr_job {
    const float *x; /* [cin][t] */
    const float *w; /* [cin][n] */
    float *z;       /* [t][n]: z[j][o·k + q] = Σ_i x[i][j]·w[i][o·k + q] */
    int cin, t, n;
    int width; /* columns of z per task */
} convtr_job;

/* Long inputs: columns [c0, c0 + 32) of z for two input columns at a time, accumulated in
 * registers over all input channels; each weight vector loaded feeds both columns. */
INLINE void convtr_block(const convtr_job *j, int c0) {
    for (int t = 0; t < j->t; t += 2) {
        int t1 = t + 1 < j->t ? t + 1 : t;
        v8f acc[2][4] = {{{0}}};
        for (int i = 0; i < j->cin; i++) {
            const float *wi = j->w + (size_t)i * j->n + c0;
            float x0 = j->x[(size_t)i * j->t + t], x1 = j->x[(size_t)i * j->t + t1];
            for (int v = 0; v < 4; v++) {
                v8f wv = LD8(wi + 8 * v);
                acc[0][v] += x0 * wv;
                acc[1][v] += x1 * wv;
            }
        }
        for (int v = 0; v < 4; v++) {
            ST8(j->z + (size_t)t * j->n + c0 + 8 * v, acc[0][v]);
            if (t1 != t) ST8(j->z + (size_t)t1 * j->n + c0 + 8 * v, acc[1][v]);
        }
    }
}

/* Short inputs (a few columns, wide weights): stream each weight row's span once and add it,
 * scaled, into the few z rows, which stay in L1. Walking a 32-column block down all input
 * channels instead would jump a whole weight row per step and miss the TLB every time. */
INLINE void convtr_rows(const convtr_job *j, int c0, int width) {
    for (int t = 0; t < j->t; t++)
        for (int c = 0; c < width; c++) j->z[(size_t)t * j->n + c0 + c] = 0.0f;
    for (int i = 0; i < j->cin; i++) {
        const float *wi = j->w + (size_t)i * j->n + c0;
        for (int t = 0; t < j->t; t++) {
            float xv = j->x[(size_t)i * j->t + t], *zt = j->z + (size_t)t * j->n + c0;
            int c = 0;
            for (; c + 8 <= width; c += 8) ST8(zt + c, LD8(zt + c) + xv * LD8(wi + c));
            for (; c < width; c++) zt[c] += xv * wi[c];
        }
    }
}

#define CONVTR_SHORT 4 /* inputs of at most this many columns take convtr_rows */

INLINE void convtr_task_body(void *ctx, int task) {
    const convtr_job *j = ctx;
    int c0 = task * j->width, width = j->n - c0 < j->width ? j->n - c0 : j->width;
    if (j->t <= CONVTR_SHORT) {
        convtr_rows(j, c0, width);
        return;
    }
    int c = 0;
    for (; c + 32 <= width; c += 32) convtr_block(j, c0 + c);
    if (c < width) convtr_rows(j, c0 + c, width - c);
}
CPU_TASK_VARIANTS(convtr_task)

void cpu_conv_tr1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *tail, float *y,
                   float *scratch) {
    int k = c->k, s = c->stride, p = k - s, span = t * s + p;
    int depthwise = c->groups != 1;
    float *z = scratch, *full = depthwise ? scratch : scratch + (size_t)t * c->cout * k;
    if (!depthwise) {
        convtr_job job = {.x = x, .w = c->w, .z = z, .cin = c->cin, .t = t, .n = c->cout * k};
        job.width = t <= CONVTR_SHORT ? 1024 : 32;
        run_tasks(be, (double)c->cin * t * job.n, (job.n + job.width - 1) / job.width,
                  CPU_PICK(cpu_simd_of(be), convtr_task), &job);
    }
    for (int o = 0; o < c->cout; o++) {
        float *f = full + (size_t)o * span;
        for (int u = 0; u < span; u++) f[u] = u < p ? tail[(size_t)o * p + u] : 0.0f;
        for (int j = 0; j < t; j++)
            for (int q = 0; q < k; q++)
                f[j * s + q] += depthwise ? x[(size_t)o * t + j] * c->w[(size_t)o * k + q]
                                          : z[(size_t)j * c->cout * k + (size_t)o * k + q];
        float b = c->b ? c->b[o] : 0.0f;
        for (int u = 0; u < t * s; u++) y[(size_t)o * t * s + u] = f[u] + b;
        for (int u = 0; u < p; u++) tail[(size_t)o * p + u] = f[t * s + u];
    }
}

/* ==== elementwise and normalisation ============================================ */

typedef struct elu_job {
    const float *x;
    float *y;
    size_t n, per_task;
} elu_job;

static void elu_task(void *ctx, int task) {
    const elu_job *j = ctx;
    size_t i0 = (size_t)task * j->per_task, i1 = i0 + j->per_task < j->n ? i0 + j->per_task : j->n;
    for (size_t i = i0; i < i1; i++) j->y[i] = j->x[i] > 0.0f ? j->x[i] : expm1f(j->x[i]);
}

void cpu_elu(pp_backend *be, const float *x, float *y, size_t n) {
    /* expm1f costs about as much as 16 multiply-adds: split large tensors across the pool. */
    int n_tasks = task_count(be, 16.0 * (double)n, 64);
    elu_job job = {.x = x, .y = y, .n = n, .per_task = (n + (size_t)n_tasks - 1) / (size_t)n_tasks};
    pp_pool_run(cpu_pool(be), n_tasks, elu_task, &job);
}

void cpu_gelu(pp_backend *be, float *x, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void cpu_layer_norm(pp_backend *be, const float *x, const float *w, const float *b, int n, int d, float eps,
                    float *y) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        float *yi = y + (size_t)i * d;
        /* Two passes in double: the statistics do not depend on summation order. */
        double mean = 0, var = 0;
        for (int j = 0; j < d; j++) mean += xi[j];
        mean /= d;
        for (int j = 0; j < d; j++) var += (xi[j] - mean) * (xi[j] - mean);
        float inv = (float)(1.0 / sqrt(var / d + eps));
        for (int j = 0; j < d; j++) yi[j] = (float)(xi[j] - mean) * inv * w[j] + b[j];
    }
}

void cpu_transpose(pp_backend *be, const float *x, int rows, int cols, float *y) {
    (void)be;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
}

void cpu_scale_add(pp_backend *be, float *y, const float *x, const float *scale, int n, int d) {
    (void)be;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++) y[(size_t)i * d + j] += scale[j] * x[(size_t)i * d + j];
}

/* ==== vector quantization ======================================================= */

INLINE float dot(const float *a, const float *b, int n) {
    v8f acc = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) acc += LD8(a + i) * LD8(b + i);
    float s = hsum8(&acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

#define VQ_MAX_TASKS 64

typedef struct vq_job {
    const float *cb, *cb_sq, *x;
    float xx;
    int bins, dim, per_task;
    float best[VQ_MAX_TASKS];
    int32_t arg[VQ_MAX_TASKS];
} vq_job;

INLINE void vq_task_body(void *ctx, int task) {
    vq_job *j = ctx;
    int b0 = task * j->per_task, b1 = b0 + j->per_task < j->bins ? b0 + j->per_task : j->bins;
    float best = INFINITY;
    int32_t arg = b0;
    for (int b = b0; b < b1; b++) {
        float d2 = (j->xx - 2.0f * dot(j->x, j->cb + (size_t)b * j->dim, j->dim)) + j->cb_sq[b];
        /* The reference takes argmin of sqrt(max(d², 0)), where rounding may merge near ties. */
        float d = sqrtf(d2 > 0.0f ? d2 : 0.0f);
        if (d < best) {
            best = d;
            arg = b;
        }
    }
    j->best[task] = best;
    j->arg[task] = arg;
}
CPU_TASK_VARIANTS(vq_task)

void cpu_vq_nearest(pp_backend *be, const float *cb, const float *cb_sq, int bins, int dim, float *x, int subtract,
                    int32_t *code) {
    vq_job job = {.cb = cb, .cb_sq = cb_sq, .x = x, .xx = dot(x, x, dim), .bins = bins, .dim = dim};
    int n_tasks = task_count(be, (double)bins * dim, VQ_MAX_TASKS);
    job.per_task = (bins + n_tasks - 1) / n_tasks;
    n_tasks = (bins + job.per_task - 1) / job.per_task;
    pp_pool_run(cpu_pool(be), n_tasks, CPU_PICK(cpu_simd_of(be), vq_task), &job);
    /* Strictly smaller wins, in task order: the first index among equal distances. */
    int best = 0;
    for (int i = 1; i < n_tasks; i++)
        if (job.best[i] < job.best[best]) best = i;
    *code = job.arg[best];
    if (subtract)
        for (int i = 0; i < dim; i++) x[i] -= cb[(size_t)*code * dim + i];
}

void cpu_vq_add_row(pp_backend *be, const float *cb, int dim, int32_t code, float *y) {
    (void)be;
    for (int i = 0; i < dim; i++) y[i] += cb[(size_t)code * dim + i];
}
