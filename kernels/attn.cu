/* attn: one query against a ring KV cache, flash-decoding style.
 *
 * The visible keys (positions max(0, pos − window + 1) .. pos) are cut into splits of
 * PK_ATTN_SPLIT keys; block (head, split) runs an online softmax over its keys (one warp per
 * key at a time, lanes over head_dim) and leaves (max, sum, unnormalised output) in the
 * workspace; a second pass merges the splits of each head. The split count follows the
 * capacity, not the position (which lives in device memory), so the launch is the same every
 * frame and a captured graph replays it; splits past the window contribute nothing. */
#include "common.cuh"

#define PK_ATTN_SPLIT 64
#define PK_ATTN_THREADS 128
#define PK_ATTN_MAX_DIM 256 /* head_dim limit: 8 values per lane */

static int attn_splits(int capacity) { return (capacity + PK_ATTN_SPLIT - 1) / PK_ATTN_SPLIT; }

__global__ void pk_kv_append_kernel(const float *__restrict__ qkv, int dim, float *kcache, float *vcache, int capacity,
                                    const int32_t *__restrict__ pos) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    size_t slot = (size_t)(pos[0] % capacity) * dim;
    kcache[slot + i] = qkv[dim + i];
    vcache[slot + i] = qkv[2 * dim + i];
}

__global__ void __launch_bounds__(PK_ATTN_THREADS)
    pk_attn_split_kernel(const float *__restrict__ q, int head_dim, const float *__restrict__ kcache,
                         const float *__restrict__ vcache, int capacity, int window, const int32_t *__restrict__ pos,
                         float *__restrict__ part) {
    __shared__ float wm[PK_ATTN_THREADS / 32], wl[PK_ATTN_THREADS / 32];
    __shared__ float wo[PK_ATTN_THREADS / 32][PK_ATTN_MAX_DIM];
    const int h = blockIdx.x, split = blockIdx.y, n_splits = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int dim = gridDim.x * head_dim;
    const int64_t last = pos[0], first = last - window + 1 > 0 ? last - window + 1 : 0;
    const int64_t k0 = first + (int64_t)split * PK_ATTN_SPLIT;
    const int64_t k1 = k0 + PK_ATTN_SPLIT - 1 < last ? k0 + PK_ATTN_SPLIT - 1 : last;
    const float scale = rsqrtf((float)head_dim);
    float qv[PK_ATTN_MAX_DIM / 32], o[PK_ATTN_MAX_DIM / 32];
#pragma unroll
    for (int t = 0; t < PK_ATTN_MAX_DIM / 32; t++) {
        int d = lane + 32 * t;
        qv[t] = d < head_dim ? q[(size_t)h * head_dim + d] * scale : 0.0f;
        o[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p = k0 + warp; p <= k1; p += nw) {
        size_t off = (size_t)(p % capacity) * dim + (size_t)h * head_dim;
        float s = 0.0f;
#pragma unroll
        for (int t = 0; t < PK_ATTN_MAX_DIM / 32; t++) {
            int d = lane + 32 * t;
            if (d < head_dim) s += qv[t] * kcache[off + d];
        }
        s = pk_warp_sum(s);
        float mn = fmaxf(m, s), r = expf(m - mn), e = expf(s - mn);
        l = l * r + e;
#pragma unroll
        for (int t = 0; t < PK_ATTN_MAX_DIM / 32; t++) {
            int d = lane + 32 * t;
            if (d < head_dim) o[t] = o[t] * r + e * vcache[off + d];
        }
        m = mn;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < PK_ATTN_MAX_DIM / 32; t++) {
        int d = lane + 32 * t;
        if (d < head_dim) wo[warp][d] = o[t];
    }
    __syncthreads();
    float *dst = part + ((size_t)h * n_splits + split) * (head_dim + 2);
    float mx = -INFINITY;
    for (int w = 0; w < nw; w++) mx = fmaxf(mx, wm[w]);
    for (int d = threadIdx.x; d < head_dim + 2; d += blockDim.x) {
        float acc = 0.0f, sum = 0.0f;
        for (int w = 0; w < nw; w++) {
            float f = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx);
            sum += wl[w] * f;
            if (d < head_dim) acc += wo[w][d] * f;
        }
        dst[d] = d < head_dim ? acc : d == head_dim ? mx : sum;
    }
}

/* One block per head: merge the splits' partial softmaxes. */
__global__ void pk_attn_merge_kernel(const float *__restrict__ part, int n_splits, int head_dim, float *__restrict__ out) {
    const int h = blockIdx.x;
    const float *ph = part + (size_t)h * n_splits * (head_dim + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++) mx = fmaxf(mx, ph[(size_t)s * (head_dim + 2) + head_dim]);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f, sum = 0.0f;
        for (int s = 0; s < n_splits; s++) {
            const float *p = ph + (size_t)s * (head_dim + 2);
            float ms = p[head_dim];
            if (ms == -INFINITY) continue;
            float f = expf(ms - mx);
            sum += p[head_dim + 1] * f;
            acc += p[d] * f;
        }
        out[(size_t)h * head_dim + d] = acc / sum;
    }
}

extern "C" size_t pk_attn_workspace(int n_heads, int head_dim, int capacity) {
    return (size_t)n_heads * attn_splits(capacity) * (head_dim + 2);
}

extern "C" int pk_attn_step(const float *qkv, int n_heads, int head_dim, float *kcache, float *vcache, int capacity,
                            int window, const int32_t *pos, float *out, float *ws, cudaStream_t stream) {
    if (head_dim > PK_ATTN_MAX_DIM || head_dim <= 0 || n_heads <= 0 || capacity <= 0)
        return (int)cudaErrorInvalidValue;
    int dim = n_heads * head_dim;
    pk_kv_append_kernel<<<pk_blocks((size_t)dim, 256), 256, 0, stream>>>(qkv, dim, kcache, vcache, capacity, pos);
    int splits = attn_splits(window < capacity ? window : capacity);
    pk_attn_split_kernel<<<dim3((unsigned)n_heads, (unsigned)splits), PK_ATTN_THREADS, 0, stream>>>(
        qkv, head_dim, kcache, vcache, capacity, window, pos, ws);
    pk_attn_merge_kernel<<<n_heads, head_dim < 128 ? 64 : 128, 0, stream>>>(ws, splits, head_dim, out);
    return pk_launched();
}
