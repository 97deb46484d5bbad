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
 * with FMA, picked by the backend's detected variant. On the VNNI variant's CPUs (AVX-512) the
 * direct and the transposed convs run 512-bit tiles written with intrinsics, whose sums are the
 * AVX2 tiles' term for term. */
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

#if CPU_HAVE_AVX2
#define FN512 CPU_VNNI static inline __attribute__((always_inline)) /* the VNNI variant's loops */
/* NAME_avx512 on the VNNI variant's CPUs, else CPU_PICK's choice */
#define PICK512(simd, name) ((simd) == CPU_SIMD_VNNI ? name##_avx512 : CPU_PICK(simd, name))
#else
#define PICK512(simd, name) CPU_PICK(simd, name)
#endif

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

/* The gathered windows of every conversation in the call, one product: column g is output g % tout
 * of conversation g / tout, so each weight row is read once for all of them. */
typedef struct conv_job {
    const pp_conv *c;
    const float *col; /* [cols][len] input windows */
    float *y;         /* [cols / tout][cout][tout] */
    int tout, cols, len, accumulate;
    int row_tiles, col_tile; /* tasks: row_tiles × ceil(cols / col_tile) */
    int rows_per_tile;
} conv_job;

INLINE void conv_task_body(void *ctx, int task) {
    const conv_job *j = ctx;
    const pp_conv *c = j->c;
    int r_begin = (task % j->row_tiles) * j->rows_per_tile;
    int r_end = r_begin + j->rows_per_tile < c->cout ? r_begin + j->rows_per_tile : c->cout;
    int c_begin = (task / j->row_tiles) * j->col_tile;
    int c_end = c_begin + j->col_tile < j->cols ? c_begin + j->col_tile : j->cols;
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
                    const int g = t + k;
                    float v = (c->b ? c->b[r + i] : 0.0f) + out[i][k];
                    float *dst = j->y + ((size_t)(g / j->tout) * c->cout + r + i) * j->tout + g % j->tout;
                    *dst = j->accumulate ? *dst + v : v;
                }
        }
    }
}
CPU_TASK_VARIANTS(conv_task)

/* The direct path reads windows straight from the input's phases, time in the vector lanes.
 * Phase b of channel i holds every stride-th column of [hist, x] from column b (for stride 1,
 * [hist, x] itself), so output o's tap q = stride·a + b is column o + a of that phase: a
 * strided conv is a stride-1 conv over cin·stride phase rows and k/stride taps. A tile of up
 * to 6 rows × 16 times of accumulators (a GEMM micro-kernel) sums each output over its window
 * in (channel, phase, tap) order from 0 and adds the bias last, so every output's sum is the
 * same whatever the tile. Each input vector loaded feeds every row of the tile, each weight
 * broadcast both vectors. It also takes the windows of fewer than 8 values (the first conv:
 * 1 channel, k 7) that dot_tile cannot vectorise.
 *
 * A strided conv's phases are gathered into scratch first. A stride-1 conv reads x where it
 * stands, its first time tile a copy of [hist, x] (the head): a copy of all of x was serial work
 * on the calling thread, and the other core's tasks then fetched their inputs from its cache. */
typedef struct direct_job {
    const pp_conv *c;
    const float *xin;  /* phase row u of conversation 0 at xin + u·xin_stride, its column m at m − shift */
    const float *head; /* stride 1 with history: [hist, x] for the first time tile, head_stride a channel */
    float *y;          /* conversation 0's output; conversation r's is y_row floats on */
    size_t xin_row, head_row, y_row; /* floats from one conversation's to the next */
    int xin_stride, shift, head_stride;
    int tout, accumulate;
    int row_tile, row_tiles; /* rows per task, and tasks per time tile */
    int tiles;               /* tasks per conversation: row_tiles × time tiles */
} direct_job;

#define DIRECT_ROWS 6      /* rows per tile */
#define DIRECT_ROW_TILE 24 /* a task's rows are a multiple of this */
#define DIRECT_COL_TILE 64 /* times per task */

static inline void direct_store(const direct_job *j, int r, int t, float acc) {
    float v = (j->c->b ? j->c->b[r] : 0.0f) + acc, *dst = j->y + (size_t)r * j->tout + t;
    *dst = j->accumulate ? *dst + v : v;
}

/* Rows [r, r + nr) × times [t, t + 8·nv); nr and nv are constants at each call. */
INLINE void direct_tile(const direct_job *j, int r, int t, int nr, int nv) {
    const pp_conv *c = j->c;
    const int s = c->stride, k = c->k, taps = k / s, len = c->cin * k;
    v8f acc[DIRECT_ROWS][2] = {{{0}}};
    for (int i = 0; i < c->cin; i++)
        for (int b = 0; b < s; b++)
            for (int a = 0; a < taps; a++) {
                const float *xs = j->xin + (size_t)(i * s + b) * j->xin_stride + t - j->shift + a;
                v8f x0 = LD8(xs), x1 = x0;
                if (nv > 1) x1 = LD8(xs + 8);
                for (int u = 0; u < nr; u++) {
                    float wv = c->w[(size_t)(r + u) * len + i * k + s * a + b];
                    acc[u][0] += wv * x0;
                    if (nv > 1) acc[u][1] += wv * x1;
                }
            }
    /* direct_store's sum, 8 outputs at a time: one at a time, the stores cost as much as the
     * products of a short window (a 1 x 1 conv over 32 channels) */
    for (int u = 0; u < nr; u++) {
        const float bias = c->b ? c->b[r + u] : 0.0f;
        const v8f b8 = {bias, bias, bias, bias, bias, bias, bias, bias};
        for (int v = 0; v < nv; v++) {
            float *dst = j->y + (size_t)(r + u) * j->tout + t + 8 * v;
            v8f out = b8 + acc[u][v];
            if (j->accumulate) out = LD8(dst) + out;
            ST8(dst, out);
        }
    }
}

INLINE void direct_rows(const direct_job *j, int r, int t, int nr, int nv) {
    switch (nr) {
    case 6: nv > 1 ? direct_tile(j, r, t, 6, 2) : direct_tile(j, r, t, 6, 1); break;
    case 5: nv > 1 ? direct_tile(j, r, t, 5, 2) : direct_tile(j, r, t, 5, 1); break;
    case 4: nv > 1 ? direct_tile(j, r, t, 4, 2) : direct_tile(j, r, t, 4, 1); break;
    case 3: nv > 1 ? direct_tile(j, r, t, 3, 2) : direct_tile(j, r, t, 3, 1); break;
    case 2: nv > 1 ? direct_tile(j, r, t, 2, 2) : direct_tile(j, r, t, 2, 1); break;
    default: nv > 1 ? direct_tile(j, r, t, 1, 2) : direct_tile(j, r, t, 1, 1); break;
    }
}

/* A direct task's rows [r_begin, r_end) and times [t_begin, t_end) in its conversation. */
typedef struct direct_span {
    int r_begin, r_end, t_begin, t_end;
} direct_span;

/* Task `task` of a batched call: *row is the job of its conversation, reading the head in the
 * first time tile when there is one; returns the task's rows and times there. */
static inline direct_span direct_row(const direct_job *j, int task, direct_job *row) {
    const int r = task / j->tiles, tile = task % j->tiles;
    *row = *j;
    if (j->head && tile < j->row_tiles) {
        row->xin = j->head + r * j->head_row;
        row->xin_stride = j->head_stride;
        row->shift = 0;
    } else {
        row->xin += r * j->xin_row;
    }
    row->y += r * j->y_row;
    direct_span sp = {.r_begin = tile % j->row_tiles * j->row_tile, .t_begin = tile / j->row_tiles * DIRECT_COL_TILE};
    sp.r_end = sp.r_begin + j->row_tile < j->c->cout ? sp.r_begin + j->row_tile : j->c->cout;
    sp.t_end = sp.t_begin + DIRECT_COL_TILE < j->tout ? sp.t_begin + DIRECT_COL_TILE : j->tout;
    return sp;
}

INLINE void direct_task_body(void *ctx, int task) {
    direct_job row;
    const direct_span sp = direct_row(ctx, task, &row);
    const direct_job *j = &row;
    const pp_conv *c = j->c;
    const int s = c->stride, k = c->k, taps = k / s, len = c->cin * k;
    for (int r = sp.r_begin; r < sp.r_end; r += DIRECT_ROWS) {
        int nr = sp.r_end - r < DIRECT_ROWS ? sp.r_end - r : DIRECT_ROWS, t = sp.t_begin;
        for (; t + 16 <= sp.t_end; t += 16) direct_rows(j, r, t, nr, 2);
        if (t + 8 <= sp.t_end) {
            direct_rows(j, r, t, nr, 1);
            t += 8;
        }
        for (; t < sp.t_end; t++) /* the last few times, one output at a time in the same order */
            for (int u = r; u < r + nr; u++) {
                const float *w = c->w + (size_t)u * len;
                float acc = 0.0f;
                for (int i = 0; i < c->cin; i++)
                    for (int b = 0; b < s; b++) {
                        const float *xs = j->xin + (size_t)(i * s + b) * j->xin_stride + t - j->shift;
                        for (int a = 0; a < taps; a++) acc += w[i * k + s * a + b] * xs[a];
                    }
                direct_store(j, u, t, acc);
            }
    }
}
CPU_TASK_VARIANTS(direct_task)

#if CPU_HAVE_AVX2
/* The direct path on 512-bit vectors, for the VNNI variant's CPUs (AVX-512 F): a tile is nr rows
 * x nv vectors of 16 times, up to 24 vectors of accumulators (of 32 registers), each weight
 * broadcast once into a register and multiplied into its row's nv vectors. So a step loads nv
 * input vectors and nr weights for nr x nv multiply-adds: the widest tiles (6 x 4) load 10 for 24,
 * where the AVX2 tile loads 8 for 12 of half the width. The last vector of a task's times is
 * masked (masked lanes are neither read nor written), so there is no scalar tail. Each output's
 * sum is the AVX2 tile's, term for term: the same chain of multiply-adds from 0 in (channel,
 * phase, tap) order, then the bias, then the output it accumulates into. So both variants give
 * the same bits (test_cpu_simd). The loops over rows and vectors are unrolled by pragma: left to
 * itself GCC kept the sums in registers but also stored each one at every step. */
FN512 void direct512_tile(const direct_job *j, int r, int t, int nr, int nv, __mmask16 last) {
    const pp_conv *c = j->c;
    const int s = c->stride, k = c->k, taps = k / s, len = c->cin * k;
    __m512 acc[24];
#pragma GCC unroll 24
    for (int q = 0; q < nr * nv; q++) acc[q] = _mm512_setzero_ps();
    for (int i = 0; i < c->cin; i++)
        for (int b = 0; b < s; b++) {
            const float *xs = j->xin + (size_t)(i * s + b) * j->xin_stride + t - j->shift;
            const float *w = c->w + (size_t)r * len + i * k + b;
            for (int a = 0; a < taps; a++) {
                __m512 x[4];
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) x[v] = _mm512_maskz_loadu_ps(v == nv - 1 ? last : 0xFFFF, xs + a + 16 * v);
#pragma GCC unroll 12
                for (int u = 0; u < nr; u++) {
                    const __m512 wv = _mm512_set1_ps(w[(size_t)u * len + s * a]);
#pragma GCC unroll 4
                    for (int v = 0; v < nv; v++) acc[u * nv + v] = _mm512_fmadd_ps(wv, x[v], acc[u * nv + v]);
                }
            }
        }
#pragma GCC unroll 12
    for (int u = 0; u < nr; u++) {
        const __m512 bias = _mm512_set1_ps(c->b ? c->b[r + u] : 0.0f);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            const __mmask16 live = v == nv - 1 ? last : 0xFFFF;
            float *dst = j->y + (size_t)(r + u) * j->tout + t + 16 * v;
            __m512 out = _mm512_add_ps(bias, acc[u * nv + v]);
            if (j->accumulate) out = _mm512_add_ps(_mm512_maskz_loadu_ps(live, dst), out);
            _mm512_mask_storeu_ps(dst, live, out);
        }
    }
}

/* Rows [r, r_end) at nv vectors of times from t: tiles of `wide` rows, then 4, then 1 (every
 * count a constant, so the accumulators stay in registers). */
FN512 void direct512_rows(const direct_job *j, int r, int r_end, int t, int wide, int nv, __mmask16 last) {
    for (; r + wide <= r_end; r += wide) direct512_tile(j, r, t, wide, nv, last);
    for (; r + 4 <= r_end; r += 4) direct512_tile(j, r, t, 4, nv, last);
    for (; r < r_end; r++) direct512_tile(j, r, t, 1, nv, last);
}

CPU_VNNI static void direct_task_avx512(void *ctx, int task) {
    direct_job row;
    const direct_span sp = direct_row(ctx, task, &row);
    const direct_job *j = &row;
    /* a task's times (at most DIRECT_COL_TILE = 4 vectors) in one tile width */
    const int times = sp.t_end - sp.t_begin, nv = (times + 15) / 16;
    const __mmask16 last = (__mmask16)(0xFFFFu >> (16 * nv - times));
    switch (nv) {
    case 4: direct512_rows(j, sp.r_begin, sp.r_end, sp.t_begin, 6, 4, last); break;
    case 3: direct512_rows(j, sp.r_begin, sp.r_end, sp.t_begin, 8, 3, last); break;
    case 2: direct512_rows(j, sp.r_begin, sp.r_end, sp.t_begin, 12, 2, last); break;
    default: direct512_rows(j, sp.r_begin, sp.r_end, sp.t_begin, 12, 1, last); break;
    }
}
_Static_assert(DIRECT_COL_TILE == 64, "direct_task_avx512 takes a task's times as at most 4 vectors of 16");
#endif

/* Convs over at least 16 times whose kernel is whole strides, and stride-1 convs whose windows
 * are too short for dot_tile, take the direct path; the rest (a few times) gather windows for
 * dot_tile, where each weight row is read once for all of them. */
static int is_direct(const pp_conv *c, int t) {
    int s = c->stride;
    return t % s == 0 && c->k % s == 0 && (t / s >= 16 || (s == 1 && c->cin * c->k < 8));
}

/* xin[i·s + b][m] = [hist, x][i][s·m + b] for m < span, channels [i0, i1): the phases of the
 * direct path (span (t + p)/s), or a stride-1 conv's head (fewer columns). Fits the scratch:
 * cin·(t + p) <= cin·k·t/s when t >= s. */
static void phases(const pp_conv *c, const float *x, int t, const float *hist, float *xin, int span, int i0, int i1) {
    int s = c->stride, p = c->k - s;
    for (int i = i0; i < i1; i++) {
        const float *hi = p ? hist + (size_t)i * p : NULL, *xi = x + (size_t)i * t; /* no history: hist NULL */
        if (s == 1) {
            if (p) memcpy(xin + (size_t)i * span, hi, (size_t)p * sizeof(float));
            memcpy(xin + (size_t)i * span + p, xi, (size_t)(span - p) * sizeof(float));
            continue;
        }
        for (int b = 0; b < s; b++) {
            float *dst = xin + (size_t)(i * s + b) * span;
            int m = 0;
            for (; s * m + b < p; m++) dst[m] = hi[s * m + b];
            for (; m < span; m++) dst[m] = xi[s * m + b - p];
        }
    }
}

/* row o of col [tout][cin·k] = the input window of output o, from [hist, x]; channels [i0, i1). */
static void im2col(const pp_conv *c, const float *x, int t, const float *hist, float *col, int i0, int i1) {
    int k = c->k, s = c->stride, p = k - s, tout = t / s, len = c->cin * k;
    for (int o = 0; o < tout; o++) {
        float *row = col + (size_t)o * len;
        for (int i = i0; i < i1; i++) {
            const float *hi = p ? hist + (size_t)i * p : NULL, *xi = x + (size_t)i * t; /* no history: hist NULL */
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

/* Conversation r's state buffer: row r's of a batched call (backend.h pp_state_rows; the CPU's
 * backend memory is host memory), NULL for a conv without state, or a lone call's (rows NULL). */
static float *row_state(const pp_state_rows *rows, int r, float *lone) {
    if (!rows) return lone;
    return rows->base ? (float *)(uintptr_t)(rows->base[r] + rows->offset) : NULL;
}

/* What a conv call copies before its products, per conversation, into its scratch: the windows
 * (im2col), the phases, or a stride-1 conv's head (span columns of each, or none). A task takes
 * `per_task` channels of one conversation: its history (first filled when PP_CONV_REPLICATE), its
 * copy, then its history moved on to the last p columns of [hist, x]. */
typedef struct prepare_job {
    const pp_conv *c;
    const float *x;
    const pp_state_rows *rows;
    float *hist; /* a lone call's (rows NULL) */
    float *scratch;
    size_t per_row; /* scratch floats per conversation */
    int t, flags, windows, span;
    int per_task, chunks; /* channels per task, tasks per conversation */
} prepare_job;

static void prepare_task(void *ctx, int task) {
    const prepare_job *j = ctx;
    const pp_conv *c = j->c;
    const int r = task / j->chunks, i0 = task % j->chunks * j->per_task, t = j->t, p = c->k - c->stride;
    const int i1 = i0 + j->per_task < c->cin ? i0 + j->per_task : c->cin;
    const float *x = j->x + (size_t)r * c->cin * t;
    float *hist = row_state(j->rows, r, j->hist), *scratch = j->scratch + r * j->per_row;
    if (j->flags & PP_CONV_REPLICATE)
        for (int i = i0; i < i1; i++)
            for (int q = 0; q < p; q++) hist[(size_t)i * p + q] = x[(size_t)i * t];
    if (j->windows) {
        im2col(c, x, t, hist, scratch, i0, i1);
    } else if (j->span) {
        phases(c, x, t, hist, scratch, j->span, i0, i1);
    }
    /* Reading ahead of the write position keeps the in-place shift safe when t < p. A conv without
     * history (p = 0) has hist NULL. */
    for (int i = i0; p > 0 && i < i1; i++) {
        float *hi = hist + (size_t)i * p;
        const float *xi = x + (size_t)i * t;
        for (int q = 0; q < p; q++) hi[q] = t + q < p ? hi[t + q] : xi[t + q - p];
    }
}

/* A copied value costs about as much as this many multiply-adds: the phases of a stride-4 conv
 * took 0.5 ns a value on a Zen 5 core. */
#define COPY_MACS 32

/* Runs prepare over every conversation: span columns of phases (0: none), or the windows. */
static void conv1d_prepare(pp_backend *be, const pp_conv *c, const float *x, int t, float *hist,
                           const pp_state_rows *rows, float *scratch, int windows, int span, int flags) {
    const int n = rows ? rows->n : 1;
    const double copies = windows ? (double)(t / c->stride) * c->k : (double)span * c->stride + c->k;
    const int tasks = task_count(be, COPY_MACS * copies * c->cin * n, 8 * n);
    prepare_job job = {.c = c, .x = x, .rows = rows, .hist = hist, .scratch = scratch,
                       .per_row = pp_conv_scratch(c, t, 0), .t = t, .flags = flags, .windows = windows, .span = span};
    job.chunks = (tasks + n - 1) / n;
    job.per_task = (c->cin + job.chunks - 1) / job.chunks;
    job.chunks = (c->cin + job.per_task - 1) / job.per_task;
    run_tasks(be, COPY_MACS * copies * c->cin * n, n * job.chunks, prepare_task, &job);
}

/* Every conversation of the call in one pool job: the direct path's tiles of all of them, or one
 * product over all their windows, which reads each weight row once for the whole batch (the
 * convs over a few times stream 4-34 MB of weights each). Each output's sum is the one a lone
 * call forms. */
void pp_cpu_conv1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *hist, const pp_state_rows *rows,
                   float *y, float *scratch, int flags) {
    const int n = rows ? rows->n : 1, s = c->stride, p = c->k - s, tout = t / s, len = c->cin * c->k;
    const size_t in = (size_t)c->cin * t, out = (size_t)c->cout * tout, per_row = pp_conv_scratch(c, t, 0);
    const double macs = (double)n * c->cout * tout * len;
    if (is_direct(c, t)) {
        direct_job job = {.c = c, .xin = scratch, .y = y, .xin_row = per_row, .y_row = out,
                          .xin_stride = (t + p) / s, .tout = tout, .accumulate = flags & PP_CONV_ACCUMULATE};
        int copied = job.xin_stride; /* columns of each phase row that prepare copies */
        if (s == 1 && p <= DIRECT_COL_TILE) { /* x in place, the first time tile from the head */
            job.xin = x;
            job.xin_row = in;
            job.xin_stride = t;
            job.shift = p;
            job.head = p ? scratch : NULL;
            job.head_row = per_row;
            job.head_stride = (tout < DIRECT_COL_TILE ? tout : DIRECT_COL_TILE) + p;
            copied = p ? job.head_stride : 0;
        }
        conv1d_prepare(be, c, x, t, hist, rows, scratch, 0, copied, flags);
        /* Each task takes every row of its times where the time tiles alone make tasks enough (four a
         * thread), else rows split as evenly as tiles of 24 allow: tasks on two cores that share a window
         * both fetch it from the core that wrote it (on two Zen 5 cores the encoder's 1 x 1 conv over 1920
         * times took 105 us with 24 rows a task, 56 with all 64, and 58 on one core). */
        const int time_tiles = (tout + DIRECT_COL_TILE - 1) / DIRECT_COL_TILE;
        const int want = 4 * pp_pool_threads(cpu_pool(be)), split = (want + n * time_tiles - 1) / (n * time_tiles);
        job.row_tile = ((c->cout + split - 1) / split + DIRECT_ROW_TILE - 1) / DIRECT_ROW_TILE * DIRECT_ROW_TILE;
        job.row_tiles = (c->cout + job.row_tile - 1) / job.row_tile;
        job.tiles = job.row_tiles * time_tiles;
        run_tasks(be, macs, n * job.tiles, PICK512(cpu_simd_of(be), direct_task), &job);
        return;
    }
    conv1d_prepare(be, c, x, t, hist, rows, scratch, 1, 0, flags);
    int rows_per_tile = 16, col_tile = 64;
    int row_tiles = (c->cout + rows_per_tile - 1) / rows_per_tile;
    int col_tiles = (n * tout + col_tile - 1) / col_tile;
    conv_job job = {.c = c, .col = scratch, .y = y, .tout = tout, .cols = n * tout, .len = len,
                    .accumulate = flags & PP_CONV_ACCUMULATE, .row_tiles = row_tiles, .col_tile = col_tile,
                    .rows_per_tile = rows_per_tile};
    run_tasks(be, macs, row_tiles * col_tiles, CPU_PICK(cpu_simd_of(be), conv_task), &job);
}

/* ==== ConvTranspose1d ============================================================ */

/* Every conversation of a call runs as one job, whose z rows are the conversations' columns one
 * after another (cols = conversations × t), so each weight row is read, or each panel packed, once
 * for all of them. */
typedef struct convtr_job {
    const float *x; /* [cols / t][cin][t] */
    const float *w; /* [cin][n] */
    float *z;       /* [cols][n]: z[g][o·k + q] = Σ_i x[g / t][i][g % t]·w[i][o·k + q] */
    int cin, t, n, cols;
    int width; /* columns of z per task */
} convtr_job;

/* The long inputs' weights are packed a panel at a time: up to CONVTR_BLOCKS blocks of 16
 * columns of CONVTR_PANEL_ROWS input channels, 32 KB, which stay in L1 and L2 while every tile
 * of inputs runs over them. */
#define CONVTR_BLOCKS 8
#define CONVTR_PANEL_ROWS 64
#define CONVTR_FETCH_ROWS 8

/* Long inputs: z columns [c0, c0 + 16) for input columns [t, t + nt) (nt <= 6, a constant at
 * each call) over channels [i0, i0 + rows), whose weights are packed in panel[rows][16]: a GEMM
 * micro-kernel's 6 × 16 tile (12 accumulators), so each weight vector loaded feeds nt columns.
 * The sums go on from where the previous channels left them in z (i0 > 0), so each is the same
 * chain of multiply-adds in channel order as in one pass. */
INLINE void convtr_tile(const convtr_job *j, const float *panel, int i0, int rows, int c0, int t, int nt) {
    v8f acc[6][2] = {{{0}}};
    for (int u = 0; u < nt && i0 > 0; u++) {
        acc[u][0] = LD8(j->z + (size_t)(t + u) * j->n + c0);
        acc[u][1] = LD8(j->z + (size_t)(t + u) * j->n + c0 + 8);
    }
    for (int i = 0; i < rows; i++) {
        const float *xi = j->x + (size_t)(i0 + i) * j->t + t;
        v8f w0 = LD8(panel + 16 * i), w1 = LD8(panel + 16 * i + 8);
        for (int u = 0; u < nt; u++) {
            acc[u][0] += xi[u] * w0;
            acc[u][1] += xi[u] * w1;
        }
    }
    for (int u = 0; u < nt; u++) {
        ST8(j->z + (size_t)(t + u) * j->n + c0, acc[u][0]);
        ST8(j->z + (size_t)(t + u) * j->n + c0 + 8, acc[u][1]);
    }
}

/* Packs panel[b] = z columns [c0 + 16·b, c0 + 16·b + 16) of weight rows [i0, i0 + rows), for b <
 * blocks, from whole spans of each weight row, 64 bytes a block: read in place, a tile's walk
 * down the rows jumped a whole weight row per step, a new DRAM line and page each time, and the
 * decoder's 512 -> 256 channel, k 12 transposed conv on 16 columns ran at a fifth of the FMA
 * rate. */
INLINE void convtr_pack(const convtr_job *j, int i0, int rows, int c0, int blocks,
                        float panel[CONVTR_BLOCKS][CONVTR_PANEL_ROWS * 16]) {
    for (int i = 0; i < rows; i++) {
        const float *wi = j->w + (size_t)(i0 + i) * j->n + c0;
        for (int b = 0; b < blocks; b++) {
            if (i0 + i + CONVTR_FETCH_ROWS < j->cin) __builtin_prefetch(wi + (size_t)CONVTR_FETCH_ROWS * j->n + 16 * b);
            memcpy(panel[b] + 16 * i, wi + 16 * b, 16 * sizeof(float));
        }
    }
}

/* Panel rows: the channels of one panel from i0. */
static inline int convtr_panel_rows(const convtr_job *j, int i0) {
    return j->cin - i0 < CONVTR_PANEL_ROWS ? j->cin - i0 : CONVTR_PANEL_ROWS;
}

/* z columns [c0, c0 + 16·blocks) for every input column, a panel at a time. */
/* Conversation r's part of a job: its input and its z rows, as a job of its own. The panels' tiles
 * run over one conversation's columns at a time, each panel packed once for all of them. */
static inline convtr_job convtr_conversation(const convtr_job *j, int r) {
    convtr_job v = *j;
    v.x += (size_t)r * j->cin * j->t;
    v.z += (size_t)r * j->t * j->n;
    v.cols = j->t;
    return v;
}

INLINE void convtr_blocks(const convtr_job *j, int c0, int blocks) {
    float panel[CONVTR_BLOCKS][CONVTR_PANEL_ROWS * 16] __attribute__((aligned(32)));
    for (int i0 = 0; i0 < j->cin; i0 += CONVTR_PANEL_ROWS) {
        const int rows = convtr_panel_rows(j, i0);
        convtr_pack(j, i0, rows, c0, blocks, panel);
        for (int r = 0; r < j->cols / j->t; r++) {
            const convtr_job v = convtr_conversation(j, r);
            for (int b = 0; b < blocks; b++) {
                int t = 0;
                for (; t + 6 <= v.t; t += 6) convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 6);
                switch (v.t - t) { /* constant tile widths for the last columns */
                case 5: convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 5); break;
                case 4: convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 4); break;
                case 3: convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 3); break;
                case 2: convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 2); break;
                case 1: convtr_tile(&v, panel[b], i0, rows, c0 + 16 * b, t, 1); break;
                default: break;
                }
            }
        }
    }
}

/* Input column g's value for channel 0 (channel i is i·t floats on). */
static inline const float *convtr_column(const convtr_job *j, int g) {
    return j->x + (size_t)(g / j->t) * j->cin * j->t + g % j->t;
}

/* Short inputs (a few columns, wide weights): stream the weight rows' spans and add them,
 * scaled, into the few z rows, which stay in L1. Walking a 16-column block down all input
 * channels instead would jump a whole weight row per step and miss the TLB every time. Four
 * rows are added per pass over z, each z vector taking them one after another in channel order
 * (the sums the tiles make), so z is loaded and stored once per four rows, not per row: with a
 * load and a store per row and column the 33 MB of the decoder's first transposed conv streamed
 * at half the rate of a plain dot product over the same bytes. */
INLINE void convtr_rows(const convtr_job *j, int c0, int width) {
    for (int g = 0; g < j->cols; g++)
        for (int c = 0; c < width; c++) j->z[(size_t)g * j->n + c0 + c] = 0.0f;
    int i = 0;
    for (; i + 4 <= j->cin; i += 4) {
        const float *w0 = j->w + (size_t)i * j->n + c0, *w1 = w0 + j->n, *w2 = w1 + j->n, *w3 = w2 + j->n;
        for (int g = 0; g < j->cols; g++) {
            const float *xt = convtr_column(j, g) + (size_t)i * j->t;
            const float x0 = xt[0], x1 = xt[j->t], x2 = xt[2 * j->t], x3 = xt[3 * j->t];
            float *zt = j->z + (size_t)g * j->n + c0;
            int c = 0;
            for (; c + 8 <= width; c += 8) {
                v8f z = LD8(zt + c);
                z = z + x0 * LD8(w0 + c);
                z = z + x1 * LD8(w1 + c);
                z = z + x2 * LD8(w2 + c);
                z = z + x3 * LD8(w3 + c);
                ST8(zt + c, z);
            }
            for (; c < width; c++) zt[c] = (((zt[c] + x0 * w0[c]) + x1 * w1[c]) + x2 * w2[c]) + x3 * w3[c];
        }
    }
    for (; i < j->cin; i++) {
        const float *wi = j->w + (size_t)i * j->n + c0;
        for (int g = 0; g < j->cols; g++) {
            float xv = convtr_column(j, g)[(size_t)i * j->t], *zt = j->z + (size_t)g * j->n + c0;
            int c = 0;
            for (; c + 8 <= width; c += 8) ST8(zt + c, LD8(zt + c) + xv * LD8(wi + c));
            for (; c < width; c++) zt[c] += xv * wi[c];
        }
    }
}

#define CONVTR_SHORT 4 /* inputs of at most this many columns take convtr_rows */

/* A task's z columns [*c0, *c0 + width); returns width. */
static inline int convtr_task_columns(const convtr_job *j, int task, int *c0) {
    *c0 = task * j->width;
    return j->n - *c0 < j->width ? j->n - *c0 : j->width;
}

/* Blocks of 16 columns in the next panel from column c of width: up to CONVTR_BLOCKS, 0 at the end
 * (fewer than 16 left, for convtr_rows). */
static inline int panel_blocks(int width, int c) {
    return (width - c) / 16 < CONVTR_BLOCKS ? (width - c) / 16 : CONVTR_BLOCKS;
}

/* Long inputs go by panels, their last few columns and short inputs by convtr_rows. */
INLINE void convtr_task_body(void *ctx, int task) {
    const convtr_job *j = ctx;
    int c0, width = convtr_task_columns(j, task, &c0), c = 0;
    if (j->t > CONVTR_SHORT)
        for (int blocks; (blocks = panel_blocks(width, c)) > 0; c += 16 * blocks) convtr_blocks(j, c0 + c, blocks);
    if (c < width) convtr_rows(j, c0 + c, width - c);
}
CPU_TASK_VARIANTS(convtr_task)

#if CPU_HAVE_AVX2
/* Long inputs on 512-bit vectors (the VNNI variant's CPUs): a tile is nt <= 12 input columns x nb
 * <= 2 panel blocks, one vector of 16 z columns per (column, block), so a channel's step loads nb
 * weight vectors and nt inputs for nt x nb multiply-adds (12 x 2: 14 loads for 24, where the AVX2
 * tile loads 8 for 12 of half the width). Each z value's sum is convtr_tile's, term for term (the
 * same chain in channel order from where the previous panel left it), so both variants give the
 * same bits (test_cpu_simd). Its loops are unrolled by pragma, as direct512_tile's. */
FN512 void convtr512_tile(const convtr_job *j, const float *panel0, const float *panel1, int i0, int rows, int c0,
                          int t, int nt, int nb) {
    __m512 acc0[12], acc1[12];
#pragma GCC unroll 12
    for (int u = 0; u < nt; u++) {
        float *zt = j->z + (size_t)(t + u) * j->n + c0;
        acc0[u] = i0 > 0 ? _mm512_loadu_ps(zt) : _mm512_setzero_ps();
        acc1[u] = i0 > 0 && nb > 1 ? _mm512_loadu_ps(zt + 16) : _mm512_setzero_ps();
    }
    for (int i = 0; i < rows; i++) {
        const float *xi = j->x + (size_t)(i0 + i) * j->t + t;
        const __m512 w0 = _mm512_load_ps(panel0 + 16 * i), w1 = nb > 1 ? _mm512_load_ps(panel1 + 16 * i) : w0;
#pragma GCC unroll 12
        for (int u = 0; u < nt; u++) {
            const __m512 xv = _mm512_set1_ps(xi[u]);
            acc0[u] = _mm512_fmadd_ps(xv, w0, acc0[u]);
            if (nb > 1) acc1[u] = _mm512_fmadd_ps(xv, w1, acc1[u]);
        }
    }
#pragma GCC unroll 12
    for (int u = 0; u < nt; u++) {
        float *zt = j->z + (size_t)(t + u) * j->n + c0;
        _mm512_storeu_ps(zt, acc0[u]);
        if (nb > 1) _mm512_storeu_ps(zt + 16, acc1[u]);
    }
}

/* Every input column against panel block panel0 (and with nb = 2 the next one, panel1): whole tiles
 * of 12 columns, then one of the rest (a constant width each, so the sums stay in registers). */
FN512 void convtr512_columns(const convtr_job *j, const float *panel0, const float *panel1, int i0, int rows, int c0,
                             int nb) {
    int t = 0;
    for (; t + 12 <= j->t; t += 12) convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 12, nb);
    switch (j->t - t) {
    case 11: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 11, nb); break;
    case 10: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 10, nb); break;
    case 9: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 9, nb); break;
    case 8: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 8, nb); break;
    case 7: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 7, nb); break;
    case 6: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 6, nb); break;
    case 5: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 5, nb); break;
    case 4: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 4, nb); break;
    case 3: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 3, nb); break;
    case 2: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 2, nb); break;
    case 1: convtr512_tile(j, panel0, panel1, i0, rows, c0, t, 1, nb); break;
    default: break;
    }
}

FN512 void convtr512_blocks(const convtr_job *j, int c0, int blocks) {
    float panel[CONVTR_BLOCKS][CONVTR_PANEL_ROWS * 16] __attribute__((aligned(64)));
    for (int i0 = 0; i0 < j->cin; i0 += CONVTR_PANEL_ROWS) {
        const int rows = convtr_panel_rows(j, i0);
        convtr_pack(j, i0, rows, c0, blocks, panel);
        for (int r = 0; r < j->cols / j->t; r++) {
            const convtr_job v = convtr_conversation(j, r);
            int b = 0;
            for (; b + 2 <= blocks; b += 2) convtr512_columns(&v, panel[b], panel[b + 1], i0, rows, c0 + 16 * b, 2);
            if (b < blocks) convtr512_columns(&v, panel[b], panel[b], i0, rows, c0 + 16 * b, 1);
        }
    }
}

/* convtr_rows compiled as in the AVX2 task, where its additions contract into FMAs. */
CPU_AVX2 static void convtr_rows_avx2(const convtr_job *j, int c0, int width) { convtr_rows(j, c0, width); }

/* convtr_task_body with the 512-bit panels; short inputs and a task's last few columns take the
 * AVX2 task's convtr_rows, so every z value is the AVX2 task's. */
CPU_VNNI static void convtr_task_avx512(void *ctx, int task) {
    const convtr_job *j = ctx;
    int c0, width = convtr_task_columns(j, task, &c0), c = 0;
    if (j->t > CONVTR_SHORT)
        for (int blocks; (blocks = panel_blocks(width, c)) > 0; c += 16 * blocks) convtr512_blocks(j, c0 + c, blocks);
    if (c < width) convtr_rows_avx2(j, c0 + c, width - c);
}
#endif

/* The overlap-add of a call: each output column is its tail's partial sum (the first p) or 0, plus
 * the products of every input column that reaches it, in input order; y is that plus the bias, and
 * the last p sums are the new tail. A task takes OVERLAP_CHANNELS channels of one conversation. */
typedef struct overlap_job {
    const pp_conv *c;
    const float *x, *z; /* depthwise: x [n][cin][t]; else z [n·t][cout·k] (convtr_job's) */
    const pp_state_rows *rows;
    float *tail; /* a lone call's (rows NULL) */
    float *full; /* [n][cout][t·stride + p]: the sums */
    float *y;    /* [n][cout][t·stride] */
    int t, chunks;
} overlap_job;

#define OVERLAP_CHANNELS 8
#define OVERLAP_MACS 4.0 /* an addition's cost in multiply-adds: loads and stores, a few taps per vector */

static void overlap_task(void *ctx, int task) {
    const overlap_job *j = ctx;
    const pp_conv *c = j->c;
    const int k = c->k, s = c->stride, p = k - s, t = j->t, span = t * s + p, nz = c->cout * k, r = task / j->chunks;
    const int o0 = task % j->chunks * OVERLAP_CHANNELS;
    const int o1 = o0 + OVERLAP_CHANNELS < c->cout ? o0 + OVERLAP_CHANNELS : c->cout;
    const float *x = j->x + (size_t)r * c->cin * t, *z = j->z + (size_t)r * t * nz;
    float *tail = row_state(j->rows, r, j->tail), *y = j->y + (size_t)r * c->cout * t * s;
    for (int o = o0; o < o1; o++) {
        float *restrict f = j->full + ((size_t)r * c->cout + o) * span;
        for (int u = 0; u < span; u++) f[u] = u < p ? tail[(size_t)o * p + u] : 0.0f;
        /* one loop per case, so that each vectorises over the kernel's taps */
        if (c->groups != 1) {
            const float *restrict w = c->w + (size_t)o * k;
            for (int i = 0; i < t; i++) {
                const float xv = x[(size_t)o * t + i];
                for (int q = 0; q < k; q++) f[i * s + q] += xv * w[q];
            }
        } else {
            for (int i = 0; i < t; i++) {
                const float *restrict zi = z + (size_t)i * nz + (size_t)o * k;
                for (int q = 0; q < k; q++) f[i * s + q] += zi[q];
            }
        }
        float b = c->b ? c->b[o] : 0.0f;
        for (int u = 0; u < t * s; u++) y[(size_t)o * t * s + u] = f[u] + b;
        for (int u = 0; u < p; u++) tail[(size_t)o * p + u] = f[t * s + u];
    }
}

/* The products in z, then the overlap-add, each one pool job over every conversation of the call.
 * A depthwise conv (groups = channels) needs no product. */
void pp_cpu_conv_tr1d(pp_backend *be, const pp_conv *c, const float *x, int t, float *tail, const pp_state_rows *rows,
                      float *y, float *scratch) {
    const int n = rows ? rows->n : 1, nz = c->cout * c->k, depthwise = c->groups != 1;
    float *full = depthwise ? scratch : scratch + (size_t)n * t * nz;
    if (!depthwise) {
        convtr_job job = {.x = x, .w = c->w, .z = scratch, .cin = c->cin, .t = t, .n = nz, .cols = n * t};
        /* long inputs: whole panels where there are columns enough for two tasks a thread */
        int per_task = nz / (2 * pp_pool_threads(cpu_pool(be))) / 16 * 16;
        job.width = t <= CONVTR_SHORT               ? 1024
                    : per_task < 16                 ? 16
                    : per_task > 16 * CONVTR_BLOCKS ? 16 * CONVTR_BLOCKS
                                                    : per_task;
        run_tasks(be, (double)c->cin * job.cols * nz, (nz + job.width - 1) / job.width,
                  PICK512(cpu_simd_of(be), convtr_task), &job);
    }
    overlap_job job = {.c = c, .x = x, .z = scratch, .rows = rows, .tail = tail, .full = full, .y = y, .t = t,
                       .chunks = (c->cout + OVERLAP_CHANNELS - 1) / OVERLAP_CHANNELS};
    run_tasks(be, OVERLAP_MACS * n * c->cout * t * c->k, n * job.chunks, overlap_task, &job);
}

/* ==== elementwise and normalisation ============================================ */

/* An elementwise map over n values (ELU, GELU), split across the pool when it is large. */
typedef struct map_job {
    const float *x;
    float *y;
    size_t n, per_task;
} map_job;

/* fn over x -> y; each value costs about as much as macs_per_value multiply-adds. */
static void run_map(pp_backend *be, double macs_per_value, pp_pool_fn fn, const float *x, float *y, size_t n) {
    int n_tasks = task_count(be, macs_per_value * (double)n, 64);
    map_job job = {.x = x, .y = y, .n = n, .per_task = (n + (size_t)n_tasks - 1) / (size_t)n_tasks};
    pp_pool_run(cpu_pool(be), n_tasks, fn, &job);
}

/* A map task's values [*i0, return). */
static inline size_t map_range(const map_job *j, int task, size_t *i0) {
    *i0 = (size_t)task * j->per_task;
    return *i0 + j->per_task < j->n ? *i0 + j->per_task : j->n;
}

typedef int32_t v8i __attribute__((vector_size(32)));
#define SPLAT(v) ((v8f){0} + (v))

#define SELECT8(m, a, b) ((v8f)(((m) & (v8i)(a)) | (~(m) & (v8i)(b))))

/* ELU of 8 values, branch-free so it vectorises: x where x > 0 (or NaN), else expm1(x) as
 * 2^k·expm1(r) + (2^k − 1) with x = k·ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), and
 * expm1(r) by its Taylor series to r^8 (truncation below 2e-8 relative). k = 0 returns the
 * series itself, so small x keep full relative precision; the result is within a few ulp of
 * expm1f. x is clamped to [-87, 0] for k (2^k stays a normal float; expm1 is -1 below). */
INLINE void elu8(const float *in, float *out) {
    v8f x = LD8(in);
    v8i pass = (x > SPLAT(0.0f)) | (x != x);
    v8f xk = SELECT8(x < SPLAT(-87.0f), SPLAT(-87.0f), SELECT8(pass, SPLAT(0.0f), x));
    v8f kf = (xk * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest via 1.5·2^23 */
    v8f r = (xk - kf * 0.693145751953125f) - kf * 1.428606765330187e-6f;
    v8f p = r + r * r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 +
                                                         r * (1.0f / 5040 + r * (1.0f / 40320)))))));
    v8f two = (v8f)((__builtin_convertvector(kf, v8i) + 127) << 23);
    ST8(out, SELECT8(pass, x, two * p + (two - 1.0f)));
}

INLINE void elu_task_body(void *ctx, int task) {
    const map_job *j = ctx;
    size_t i0, i1 = map_range(j, task, &i0), i = i0;
    for (; i + 8 <= i1; i += 8) elu8(j->x + i, j->y + i);
    if (i < i1) { /* the last few through the same arithmetic */
        float v[8] = {0};
        memcpy(v, j->x + i, (i1 - i) * sizeof *v);
        elu8(v, v);
        memcpy(j->y + i, v, (i1 - i) * sizeof *v);
    }
}
CPU_TASK_VARIANTS(elu_task)

void pp_cpu_elu(pp_backend *be, const float *x, float *y, size_t n) {
    run_map(be, 2.0, CPU_PICK(cpu_simd_of(be), elu_task), x, y, n); /* elu8: about 2 multiply-adds a value */
}

static void gelu_task(void *ctx, int task) {
    const map_job *j = ctx;
    size_t i0, i1 = map_range(j, task, &i0);
    for (size_t i = i0; i < i1; i++) j->y[i] = 0.5f * j->x[i] * (1.0f + erff(j->x[i] * 0.70710678118654752f));
}

void pp_cpu_gelu(pp_backend *be, float *x, size_t n) {
    /* libm's erff takes about 9 ns a value on a Zen 5 core, the time of some 400 multiply-adds: the
     * Mimi transformer's 2 x 2048 values a layer took 37 us on the calling thread alone */
    run_map(be, 256.0, gelu_task, x, x, n);
}

void pp_cpu_layer_norm(pp_backend *be, const float *x, const float *w, const float *b, int n, int d, float eps,
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

void pp_cpu_transpose(pp_backend *be, const float *x, int n, int rows, int cols, float *y) {
    (void)be;
    for (int b = 0; b < n; b++)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) y[((size_t)c * n + b) * rows + r] = x[((size_t)b * rows + r) * cols + c];
}

void pp_cpu_scale_add(pp_backend *be, float *y, const float *x, const float *scale, int n, int d) {
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
#define VQ_ROWS 8 /* conversations' rows a task compares with each codebook row it reads */

/* The nearest codebook rows of up to VQ_ROWS rows x [rows][dim]: each task takes a range of the
 * codebook and every row, so the codebook (2 MB a level in the released codec) is read once for
 * the batch, not once per conversation. */
typedef struct vq_job {
    const float *cb, *cb_sq, *x;
    float xx[VQ_ROWS];
    int bins, dim, rows, per_task;
    float best[VQ_MAX_TASKS][VQ_ROWS];
    int32_t arg[VQ_MAX_TASKS][VQ_ROWS];
} vq_job;

INLINE void vq_task_body(void *ctx, int task) {
    vq_job *j = ctx;
    int b0 = task * j->per_task, b1 = b0 + j->per_task < j->bins ? b0 + j->per_task : j->bins;
    float best[VQ_ROWS];
    int32_t arg[VQ_ROWS];
    for (int r = 0; r < j->rows; r++) {
        best[r] = INFINITY;
        arg[r] = b0;
    }
    for (int b = b0; b < b1; b++) {
        const float *e = j->cb + (size_t)b * j->dim;
        for (int r = 0; r < j->rows; r++) {
            float d2 = (j->xx[r] - 2.0f * dot(j->x + (size_t)r * j->dim, e, j->dim)) + j->cb_sq[b];
            /* The reference takes argmin of sqrt(max(d², 0)), where rounding may merge near ties. */
            float d = sqrtf(d2 > 0.0f ? d2 : 0.0f);
            if (d < best[r]) {
                best[r] = d;
                arg[r] = b;
            }
        }
    }
    for (int r = 0; r < j->rows; r++) {
        j->best[task][r] = best[r];
        j->arg[task][r] = arg[r];
    }
}
CPU_TASK_VARIANTS(vq_task)

void pp_cpu_vq_nearest(pp_backend *be, const float *cb, const float *cb_sq, int bins, int dim, float *x, int n,
                       int subtract, int32_t *code, int code_stride) {
    for (int r0 = 0; r0 < n; r0 += VQ_ROWS) {
        vq_job job = {.cb = cb, .cb_sq = cb_sq, .x = x + (size_t)r0 * dim, .bins = bins, .dim = dim,
                      .rows = n - r0 < VQ_ROWS ? n - r0 : VQ_ROWS};
        for (int r = 0; r < job.rows; r++) job.xx[r] = dot(job.x + (size_t)r * dim, job.x + (size_t)r * dim, dim);
        int n_tasks = task_count(be, (double)bins * dim * job.rows, VQ_MAX_TASKS);
        job.per_task = (bins + n_tasks - 1) / n_tasks;
        n_tasks = (bins + job.per_task - 1) / job.per_task;
        pp_pool_run(cpu_pool(be), n_tasks, CPU_PICK(cpu_simd_of(be), vq_task), &job);
        for (int r = 0; r < job.rows; r++) {
            /* Strictly smaller wins, in task order: the first index among equal distances. */
            int best = 0;
            for (int i = 1; i < n_tasks; i++)
                if (job.best[i][r] < job.best[best][r]) best = i;
            int32_t *out = code + (size_t)(r0 + r) * code_stride;
            *out = job.arg[best][r];
            if (subtract)
                for (int i = 0; i < dim; i++) x[(size_t)(r0 + r) * dim + i] -= cb[(size_t)*out * dim + i];
        }
    }
}

void pp_cpu_vq_add_row(pp_backend *be, const float *cb, int bins, int dim, const int32_t *code, int code_stride, int n,
                       float *y) {
    (void)be;
    for (int r = 0; r < n; r++) {
        int32_t row = code[(size_t)r * code_stride];
        if (row < 0 || row >= bins) continue;
        for (int i = 0; i < dim; i++) y[(size_t)r * dim + i] += cb[(size_t)row * dim + i];
    }
}
