/* cpu_lm: the CPU backend's LM operations (RMSNorm, interleaved RoPE, ring-cache attention,
 * SiLU gating). fp32 throughout; reductions accumulate in double so the results do not depend
 * on the summation order the way a tree reduction would. */
#include "backend/cpu.h"

#include <math.h>

void cpu_rmsnorm(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *y) {
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

void cpu_rope(pp_backend *be, float *x, int n, int stride, int n_heads, int head_dim, const int32_t *pos,
              float max_period) {
    (void)be;
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
    const float *kcache, *vcache;
    float *out;
    int head_dim, dim, capacity;
    int64_t first, last; /* positions of the visible keys, inclusive */
} attn_job;

static void attn_head(void *ctx, int h) {
    const attn_job *j = ctx;
    const float *q = j->q + (size_t)h * j->head_dim;
    float *o = j->out + (size_t)h * j->head_dim;
    double scale = 1.0 / sqrt((double)j->head_dim);
    /* Online softmax: one pass, rescaling the running sum whenever the maximum grows. */
    double mx = -INFINITY, sum = 0;
    for (int d = 0; d < j->head_dim; d++) o[d] = 0;
    for (int64_t p = j->first; p <= j->last; p++) {
        size_t off = (size_t)(p % j->capacity) * j->dim + (size_t)h * j->head_dim;
        const float *k = j->kcache + off, *v = j->vcache + off;
        double s = 0;
        for (int d = 0; d < j->head_dim; d++) s += (double)q[d] * k[d];
        s *= scale;
        if (s > mx) {
            float r = (float)exp(mx - s);
            for (int d = 0; d < j->head_dim; d++) o[d] *= r;
            sum *= exp(mx - s);
            mx = s;
        }
        float w = (float)exp(s - mx);
        sum += w;
        for (int d = 0; d < j->head_dim; d++) o[d] += w * v[d];
    }
    float inv = (float)(1.0 / sum);
    for (int d = 0; d < j->head_dim; d++) o[d] *= inv;
}

void cpu_attn_step(pp_backend *be, const float *qkv, int n_heads, int head_dim, float *kcache, float *vcache,
                   int capacity, int window, const int32_t *pos, float *out) {
    int dim = n_heads * head_dim;
    int64_t s = pos[0];
    size_t slot = (size_t)(s % capacity) * dim;
    for (int i = 0; i < dim; i++) {
        kcache[slot + i] = qkv[dim + i];
        vcache[slot + i] = qkv[2 * dim + i];
    }
    attn_job job = {
        .q = qkv, .kcache = kcache, .vcache = vcache, .out = out, .head_dim = head_dim, .dim = dim,
        .capacity = capacity, .first = s - window + 1 > 0 ? s - window + 1 : 0, .last = s,
    };
    pp_pool_run(cpu_pool(be), n_heads, attn_head, &job);
}

void cpu_silu_mul(pp_backend *be, const float *u, int n, int hidden, float *y) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *g = u + (size_t)i * 2 * hidden, *v = g + hidden;
        float *yi = y + (size_t)i * hidden;
        for (int j = 0; j < hidden; j++) yi[j] = g[j] / (1.0f + expf(-g[j])) * v[j];
    }
}
