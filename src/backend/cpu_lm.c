/* cpu_lm: the CPU backend's LM operations (RMSNorm, interleaved RoPE, ring-cache attention,
 * SiLU gating). fp32 arithmetic throughout, whatever format a KV ring stores; reductions
 * accumulate in double so the results do not depend on the summation order the way a tree
 * reduction would. */
#include "backend/cpu.h"

#include <math.h>
#include <string.h>

void pp_cpu_rmsnorm(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *y) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        float *yi = y + (size_t)i * d;
        double ss = 0;
        for (int j = 0; j < d; j++) ss += (double)xi[j] * xi[j];
        /* eps is added inside the root, before rsqrt, as the reference does. */
        float inv = (float)(1.0 / sqrt((double)(eps + (float)(ss / d))));
        for (int j = 0; j < d; j++) yi[j] = xi[j] * (alpha[j] * inv);
    }
}

void pp_cpu_norm_matmul(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *h,
                        const pp_weight *w, float *y) {
    pp_cpu_rmsnorm(be, x, alpha, n, d, eps, h);
    pp_cpu_matmul(be, w, h, n, y);
}

/* Interleaved rotary embedding, in place, on n rows of x (row i starts at x + i·stride), each
 * n_heads heads of head_dim at position pos[i] (attn_rows's rope). */
static void rope_rows(float *x, int n, int stride, int n_heads, int head_dim, const int64_t *pos, float max_period) {
    int half = head_dim / 2;
    /* The reference forms freq_j = exp(j·c) with c rounded to fp32, then angle = freq_j·t in fp32. */
    float c = (float)(-log((double)max_period) * 2.0 / head_dim);
    for (int i = 0; i < n; i++) {
        float t = (float)pos[i];
        float *row = x + (size_t)i * stride;
        for (int j = 0; j < half; j++) {
            float freq = expf((float)j * c);
            float angle = freq * t;
            float co = cosf(angle), si = sinf(angle);
            for (int h = 0; h < n_heads; h++) {
                float *p = row + (size_t)h * head_dim + 2 * j;
                float a = p[0], b = p[1];
                p[0] = a * co - b * si;
                p[1] = a * si + b * co;
            }
        }
    }
}

typedef struct attn_job {
    const float *q;
    const pp_kv_ring *ring;
    float *out;
    int head_dim, n_heads;
    int64_t first, last; /* positions of the visible keys, inclusive */
} attn_job;

/* Element offset of head h of slot `slot`. */
static size_t head_off(const attn_job *j, size_t slot, int h) {
    return slot * (size_t)j->n_heads * j->head_dim + (size_t)h * j->head_dim;
}

/* q · (stored key of head h at slot), the key converted from the ring's format. */
static double key_dot(const attn_job *j, size_t slot, int h, const float *q) {
    const pp_kv_ring *r = j->ring;
    size_t off = head_off(j, slot, h);
    double s = 0;
    if (r->fmt == PP_KV_BF16) {
        const uint16_t *k = (const uint16_t *)r->k + off;
        for (int d = 0; d < j->head_dim; d++) s += (double)q[d] * pp_bf16_to_f32(k[d]);
    } else if (r->fmt == PP_KV_INT8) {
        const int8_t *k = (const int8_t *)r->k + off;
        float sc = r->kscale[slot * j->n_heads + h];
        for (int d = 0; d < j->head_dim; d++) s += (double)q[d] * ((float)k[d] * sc);
    } else {
        const float *k = (const float *)r->k + off;
        for (int d = 0; d < j->head_dim; d++) s += (double)q[d] * k[d];
    }
    return s;
}

/* o += w · (stored value of head h at slot). */
static void value_axpy(const attn_job *j, size_t slot, int h, float w, float *o) {
    const pp_kv_ring *r = j->ring;
    size_t off = head_off(j, slot, h);
    if (r->fmt == PP_KV_BF16) {
        const uint16_t *v = (const uint16_t *)r->v + off;
        for (int d = 0; d < j->head_dim; d++) o[d] += w * pp_bf16_to_f32(v[d]);
    } else if (r->fmt == PP_KV_INT8) {
        const int8_t *v = (const int8_t *)r->v + off;
        float sc = r->vscale[slot * j->n_heads + h];
        for (int d = 0; d < j->head_dim; d++) o[d] += w * ((float)v[d] * sc);
    } else {
        const float *v = (const float *)r->v + off;
        for (int d = 0; d < j->head_dim; d++) o[d] += w * v[d];
    }
}

/* Stores one head of src into slot `slot` of a ring buffer in the ring's format. */
static void ring_store(const pp_kv_ring *r, void *base, float *scales, size_t slot, int h, int n_heads,
                       int head_dim, const float *src) {
    size_t off = slot * (size_t)n_heads * head_dim + (size_t)h * head_dim;
    if (r->fmt == PP_KV_BF16) {
        for (int d = 0; d < head_dim; d++) ((uint16_t *)base)[off + d] = pp_f32_to_bf16(src[d]);
    } else if (r->fmt == PP_KV_INT8) {
        float mx = 0;
        for (int d = 0; d < head_dim; d++) mx = fmaxf(mx, fabsf(src[d]));
        float scale = mx / 127.0f, inv = mx > 0 ? 127.0f / mx : 0;
        scales[slot * n_heads + h] = scale;
        for (int d = 0; d < head_dim; d++) {
            float q = roundf(src[d] * inv);
            if (!(q == q)) q = 0; /* NaN or an infinite head: the cast below would be undefined */
            ((int8_t *)base)[off + d] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
    } else {
        memcpy((float *)base + off, src, (size_t)head_dim * sizeof *src);
    }
}

static void attn_head(void *ctx, int h) {
    const attn_job *j = ctx;
    const float *q = j->q + (size_t)h * j->head_dim;
    float *o = j->out + (size_t)h * j->head_dim;
    double scale = 1.0 / sqrt((double)j->head_dim);
    /* Online softmax: one pass, rescaling the running sum whenever the maximum grows. */
    double mx = -INFINITY, sum = 0;
    for (int d = 0; d < j->head_dim; d++) o[d] = 0;
    for (int64_t p = j->first; p <= j->last; p++) {
        size_t slot = (size_t)(p % j->ring->capacity);
        double s = key_dot(j, slot, h, q) * scale;
        if (s > mx) {
            float r = (float)exp(mx - s);
            for (int d = 0; d < j->head_dim; d++) o[d] *= r;
            sum *= exp(mx - s);
            mx = s;
        }
        float w = (float)exp(s - mx);
        sum += w;
        value_axpy(j, slot, h, w, o);
    }
    float inv = (float)(1.0 / sum);
    for (int d = 0; d < j->head_dim; d++) o[d] *= inv;
}

/* One row of attn_rows against its ring. */
static void attn_row(pp_backend *be, const float *qkv, int n_heads, int head_dim, const pp_kv_ring *ring,
                     const int64_t *pos, float *out) {
    int dim = n_heads * head_dim;
    int64_t s = pos[0];
    size_t slot = (size_t)(s % ring->capacity);
    for (int h = 0; h < n_heads; h++) {
        ring_store(ring, ring->k, ring->kscale, slot, h, n_heads, head_dim, qkv + dim + (size_t)h * head_dim);
        ring_store(ring, ring->v, ring->vscale, slot, h, n_heads, head_dim, qkv + 2 * dim + (size_t)h * head_dim);
    }
    attn_job job = {
        .q = qkv, .ring = ring, .out = out, .head_dim = head_dim, .n_heads = n_heads,
        .first = s - ring->window + 1 > 0 ? s - ring->window + 1 : 0, .last = s,
    };
#if CPU_HAVE_AVX2 || CPU_HAVE_NEON
    if (cpu_simd_of(be) != CPU_SIMD_PORTABLE && head_dim % 8 == 0 &&
        pp_cpu_attn_simd(cpu_pool(be), ring, n_heads, head_dim, qkv, job.first, job.last, out) == 0)
        return;
#endif
    pp_pool_run(cpu_pool(be), n_heads, attn_head, &job);
}

void pp_cpu_attn_rows(pp_backend *be, float *qkv, int n, int n_heads, int head_dim, float rope, const pp_kv_ring *ring,
                      const pp_kv_ring *const *tables, int layer, const int64_t *pos, float *out) {
    size_t dim = (size_t)n_heads * head_dim;
    /* q and k at once: the k heads follow the q heads in each row */
    if (rope > 0) rope_rows(qkv, n, 3 * (int)dim, 2 * n_heads, head_dim, pos, rope);
    for (int i = 0; i < n; i++)
        attn_row(be, qkv + (size_t)i * 3 * dim, n_heads, head_dim, tables ? &tables[i][layer] : ring, pos + i,
                 out + (size_t)i * dim);
}

void pp_cpu_silu_mul(pp_backend *be, const float *u, int n, int hidden, float *y) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *g = u + (size_t)i * 2 * hidden, *v = g + hidden;
        float *yi = y + (size_t)i * hidden;
        for (int j = 0; j < hidden; j++) yi[j] = g[j] / (1.0f + expf(-g[j])) * v[j];
    }
}
