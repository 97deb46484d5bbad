/* cpu_attn_simd: the SIMD twin (AVX2+FMA on x86-64, NEON on aarch64; cpu_vf8.h) of cpu_lm.c's
 * attention of one query over a KV ring (f32, bf16 or int8), for head sizes that are multiples
 * of 8.
 *
 * The time of this operation is reading the ring: at context 3000 the temporal transformer's
 * 32 layers read 774 MiB of int8 keys and values per frame. A ring slot holds every head's key
 * side by side, so the portable loop, which walks one head's keys, jumps a whole slot (4 KiB or
 * more: a new page each time, which no prefetcher follows) per key. Here the visible positions
 * are split into a few ranges, one pool task each, and a task walks its range slot by slot
 * through every head, so the ring streams from memory in address order:
 *   - a block of BLOCK slots: every head's scores (q·k in float, q scaled by 1/sqrt(head_dim)
 *     once; int8 keys' scales applied to the sum);
 *   - per head, one rescaling of its running output if the block raised its maximum, then the
 *     block's weights by a vector exp (int8: the value scale folded in);
 *   - head by head, the block's weighted values added to the head's output, SPAN values at a
 *     time in registers (the block's values were prefetched into L2 while its keys streamed).
 * Each task keeps its own maximum, sum and output per head (flash-decoding's split), merged at
 * the end. Results differ from the portable loop by float rounding (test_cpu_simd states the
 * bound). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2 || CPU_HAVE_NEON

#include "backend/cpu_vf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 32      /* slots per block: the scores of every head stay in L1 */
#define MIN_RANGE 128 /* positions per task at least: fewer do not pay for a task */
#define MAX_TASKS 16
/* Output values kept in registers while a block's values are added: 8 vectors, enough chains of
 * multiply-adds to hide their latency (4 left the FMA units half idle). */
#define SPAN 64

/* exp(x) of 8 values x <= 0 (clamped at -87, where it is ~1.6e-38): 2^k·exp(r), x = k·ln2 + r
 * with |r| <= ln2/2 (Cody-Waite split of ln2) and exp(r) by its Taylor series to r^8
 * (truncation below 1e-9 relative). */
INLINE vf8 exp8_nonpositive(vf8 x) {
    x = vf8_max(x, vf8_set1(-87.0f));
    vf8 k = vf8_round(vf8_mul(x, vf8_set1(1.44269504f)));
    vf8 r = vf8_fma(x, k, vf8_set1(-0.693145751953125f));
    r = vf8_fma(r, k, vf8_set1(-1.428606765330187e-6f));
    static const float c[] = {1.0f / 40320, 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    vf8 p = vf8_set1(c[0]);
    for (int i = 1; i < 9; i++) p = vf8_fma(vf8_set1(c[i]), p, r);
    return vf8_mul(p, vf8_pow2(k));
}

/* Eight stored values from element d of a row, as floats. */
INLINE vf8 load8(pp_kv_format fmt, const void *row, int d) {
    if (fmt == PP_KV_INT8) return vf8_from_i8((const int8_t *)row + d);
    if (fmt == PP_KV_BF16) return vf8_from_bf16((const uint16_t *)row + d);
    return vf8_load((const float *)row + d);
}

typedef struct split_job {
    const pp_kv_ring *r;
    int n_heads, head_dim, tasks;
    const float *q;      /* every head's query, scaled */
    int64_t first, last; /* visible positions, inclusive */
    float *part;         /* per task: output [H·D], max [H], sum [H], then the block's scores [H][BLOCK] */
} split_job;

static size_t part_floats(int n_heads, int head_dim) { return (size_t)n_heads * ((size_t)head_dim + 2 + BLOCK); }

/* q·(row's D values), in float; two sums so the multiply-adds overlap. */
INLINE float dot(pp_kv_format fmt, const float *q, const void *row, int D) {
    vf8 a0 = vf8_zero(), a1 = vf8_zero();
    int d = 0;
    for (; d + 16 <= D; d += 16) {
        a0 = vf8_fma(a0, vf8_load(q + d), load8(fmt, row, d));
        a1 = vf8_fma(a1, vf8_load(q + d + 8), load8(fmt, row, d + 8));
    }
    if (d < D) a0 = vf8_fma(a0, vf8_load(q + d), load8(fmt, row, d));
    return vf8_hsum(vf8_add(a0, a1));
}

/* o[d0, d0 + 8·nv) += the block's n values of one head (vh: the first slot's), weighted by w;
 * nv is a constant at each call, so the sums stay in registers (with a count known only at run
 * time the compiler kept them in memory and copied them in and out with rep movs). */
INLINE void add_span(pp_kv_format fmt, const char *vh, size_t slot_bytes, const float *w, int n, int d0, float *o,
                     int nv) {
    vf8 acc[SPAN / 8];
    for (int c = 0; c < nv; c++) acc[c] = vf8_load(o + d0 + 8 * c);
    for (int i = 0; i < n; i++) {
        const char *vr = vh + (size_t)i * slot_bytes;
        vf8 wi = vf8_set1(w[i]);
        for (int c = 0; c < nv; c++) acc[c] = vf8_fma(acc[c], wi, load8(fmt, vr, d0 + 8 * c));
    }
    for (int c = 0; c < nv; c++) vf8_store(o + d0 + 8 * c, acc[c]);
}

/* Slots [slot, slot + n) of the ring (n <= BLOCK) into a task's running outputs o, maxima m,
 * sums l; s: its score scratch. */
INLINE void block(pp_kv_format fmt, const split_job *j, size_t slot, int n, float *o, float *m, float *l, float *s) {
    const pp_kv_ring *r = j->r;
    const int H = j->n_heads, D = j->head_dim;
    const size_t size = pp_kv_elem_bytes(fmt), head_bytes = (size_t)D * size, slot_bytes = (size_t)H * head_bytes;
    const char *k = (const char *)r->k + slot * slot_bytes, *v = (const char *)r->v + slot * slot_bytes;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            /* the block's values, read head by head below, come in while the keys stream */
            for (size_t b = 0; b < head_bytes; b += 64) /* x86-64: prefetcht1 */
                __builtin_prefetch(v + (size_t)i * slot_bytes + (size_t)h * head_bytes + b, 0, 2);
            float x = dot(fmt, j->q + (size_t)h * D, k + (size_t)i * slot_bytes + (size_t)h * head_bytes, D);
            s[h * BLOCK + i] = fmt == PP_KV_INT8 ? x * r->kscale[(slot + (size_t)i) * (size_t)H + (size_t)h] : x;
        }
    for (int h = 0; h < H; h++) {
        float *sh = s + h * BLOCK, bm = sh[0];
        for (int i = 1; i < n; i++) bm = sh[i] > bm ? sh[i] : bm;
        if (bm > m[h]) { /* the running sums were relative to a smaller maximum */
            float f = expf(m[h] - bm);
            for (int d = 0; d < D; d++) o[(size_t)h * D + d] *= f;
            l[h] *= f;
            m[h] = bm;
        }
        vf8 sum = vf8_zero(), mv = vf8_set1(m[h]);
        for (int i = 0; i < n; i += 8) { /* lanes past n are masked to 0 */
            vf8 e = vf8_keep_first(exp8_nonpositive(vf8_sub(vf8_load(sh + i), mv)), n - i);
            sum = vf8_add(sum, e);
            vf8_store(sh + i, e);
        }
        l[h] += vf8_hsum(sum);
        if (fmt == PP_KV_INT8)
            for (int i = 0; i < n; i++) sh[i] *= r->vscale[(slot + (size_t)i) * (size_t)H + (size_t)h];
    }
    for (int h = 0; h < H; h++) { /* head by head from L2, a span of the output in registers */
        const char *vh = v + (size_t)h * head_bytes;
        float *oh = o + (size_t)h * D;
        int d0 = 0;
        for (; d0 + SPAN <= D; d0 += SPAN) add_span(fmt, vh, slot_bytes, s + h * BLOCK, n, d0, oh, SPAN / 8);
        for (; d0 < D; d0 += 8) add_span(fmt, vh, slot_bytes, s + h * BLOCK, n, d0, oh, 1);
    }
}

INLINE void range_of(pp_kv_format fmt, const split_job *j, int task) {
    const int H = j->n_heads, D = j->head_dim;
    int64_t n = j->last - j->first + 1, p = j->first + n * task / j->tasks, end = j->first + n * (task + 1) / j->tasks;
    float *o = j->part + (size_t)task * part_floats(H, D), *m = o + (size_t)H * D, *l = m + H, *s = l + H;
    memset(o, 0, (size_t)H * D * sizeof *o);
    for (int h = 0; h < H; h++) m[h] = -INFINITY, l[h] = 0;
    while (p < end) {
        size_t slot = (size_t)(p % j->r->capacity);
        int64_t len = end - p < BLOCK ? end - p : BLOCK;
        if ((int64_t)((size_t)j->r->capacity - slot) < len)
            len = j->r->capacity - (int64_t)slot; /* to the ring's end */
        block(fmt, j, slot, (int)len, o, m, l, s);
        p += len;
    }
}

SIMD_FN static void range_task(void *ctx, int task) {
    const split_job *j = ctx;
    switch (j->r->fmt) {
    case PP_KV_INT8: range_of(PP_KV_INT8, j, task); break;
    case PP_KV_BF16: range_of(PP_KV_BF16, j, task); break;
    default: range_of(PP_KV_F32, j, task); break;
    }
}

int pp_cpu_attn_simd(pp_pool *pool, const pp_kv_ring *r, int n_heads, int head_dim, const float *q, int64_t first,
                     int64_t last, float *out) {
    int64_t n = last - first + 1, tasks = (n + MIN_RANGE - 1) / MIN_RANGE,
            most = 2 * (pool ? pp_pool_threads(pool) : 1);
    if (tasks > most) tasks = most;
    if (tasks > MAX_TASKS) tasks = MAX_TASKS;
    const size_t dim = (size_t)n_heads * (size_t)head_dim, per = part_floats(n_heads, head_dim);
    float *buf = malloc(sizeof(float) * (dim + (size_t)tasks * per));
    if (!buf) return -1;
    float scale = (float)(1.0 / sqrt((double)head_dim));
    for (size_t i = 0; i < dim; i++) buf[i] = q[i] * scale;
    split_job j = {.r = r,
                   .n_heads = n_heads,
                   .head_dim = head_dim,
                   .tasks = (int)tasks,
                   .q = buf,
                   .first = first,
                   .last = last,
                   .part = buf + dim};
    pp_pool_run(pool, (int)tasks, range_task, &j);
    for (int h = 0; h < n_heads; h++) { /* the tasks' softmax pieces, relative to the largest maximum */
        float top = -INFINITY, total = 0;
        for (int t = 0; t < tasks; t++) top = fmaxf(top, j.part[(size_t)t * per + dim + (size_t)h]);
        float *oh = out + (size_t)h * head_dim;
        memset(oh, 0, sizeof(float) * (size_t)head_dim);
        for (int t = 0; t < tasks; t++) {
            const float *pt = j.part + (size_t)t * per;
            float mt = pt[dim + (size_t)h], f = mt == -INFINITY ? 0 : expf(mt - top);
            total += pt[dim + (size_t)n_heads + (size_t)h] * f;
            for (int d = 0; d < head_dim; d++) oh[d] += pt[(size_t)h * head_dim + d] * f;
        }
        for (int d = 0; d < head_dim; d++) oh[d] /= total;
    }
    free(buf);
    return 0;
}

#endif
