/* attn: KV append + one query against a ring KV cache (f32, bf16 or int8), flash-decoding
 * style.
 *
 * The block of each head whose split holds the newest position first converts the new key and
 * value to the ring's format and stores them (an int8 head's max|x| is one block reduction).
 * The visible keys (positions max(0, pos − window + 1) .. pos) are cut into splits of
 * PK_ATTN_SPLIT keys; block (head, split, row) runs an online softmax over its keys (each warp
 * PK_ATTN_KEYS keys at a time, lanes over head_dim) and leaves (max, sum, unnormalised output)
 * in the workspace; a second pass merges the splits of each head and row (one split, as in the
 * depformer's short rings: the block writes the output itself, and no merge runs).
 * The split count follows the capacity, not the position (which lives in device memory), so
 * the launch is the same every frame and a captured graph replays it; splits past the window
 * contribute nothing. */
#include "common.cuh"

#define PK_ATTN_SPLIT 64
#define PK_ATTN_THREADS 128
#define PK_ATTN_MAX_DIM 256 /* head_dim limit: 8 values per lane */
#define PK_ATTN_KEYS 4      /* keys a warp loads ahead */

static int attn_splits(int capacity) { return (capacity + PK_ATTN_SPLIT - 1) / PK_ATTN_SPLIT; }

/* bf16 bits of f, round to nearest even, NaN kept NaN (as cpu_lm.c). */
__device__ __forceinline__ uint16_t pk_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Element e of head h at slot `slot`, decoded. */
template <int FMT>
__device__ __forceinline__ float pk_kv_load(const void *base, const float *scales, size_t off, size_t scale_idx) {
    if (FMT == PK_KV_F32) return ((const float *)base)[off];
    if (FMT == PK_KV_BF16) return pk_bf16(((const uint16_t *)base)[off]);
    return (float)((const int8_t *)base)[off] * scales[scale_idx];
}

/* The block stores head h of the new key (which 0) or value (1) at `slot` in the ring's format.
 * Every thread of the block calls it; it ends with a barrier, so the stored values are visible to
 * the block and red is free again. */
template <int FMT>
__device__ __forceinline__ void pk_kv_store_head(const float *__restrict__ qkv, int head_dim, const pk_kv_ring &r,
                                                 size_t slot, int h, int n_heads, int which, float *red) {
    const int dim = n_heads * head_dim;
    const float *src = qkv + (size_t)(1 + which) * dim + (size_t)h * head_dim;
    const size_t off = slot * dim + (size_t)h * head_dim;
    void *base = which ? r.v : r.k;
    if (FMT == PK_KV_F32) {
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) ((float *)base)[off + d] = src[d];
    } else if (FMT == PK_KV_BF16) {
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) ((uint16_t *)base)[off + d] = pk_to_bf16(src[d]);
    } else {
        float mx = 0.0f;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) mx = fmaxf(mx, fabsf(src[d]));
        mx = pk_warp_max(mx);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
        __syncthreads();
        mx = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, red[w]);
        const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        if (threadIdx.x == 0) (which ? r.vscale : r.kscale)[slot * n_heads + h] = mx / 127.0f;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float q = roundf(src[d] * inv);
            if (!(q == q)) q = 0.0f;
            ((int8_t *)base)[off + d] = (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
        }
    }
    __syncthreads();
}

/* Row blockIdx.z's ring: its entry of tables (device: per row, its conversation's rings by
 * layer), or `one` for a single row without tables. */
__device__ __forceinline__ pk_kv_ring pk_row_ring(const pk_kv_ring &one, const pk_kv_ring *const *tables, int layer) {
    return tables ? tables[blockIdx.z][layer] : one;
}

/* Raw loads of BYTES bytes (aligned to their size) into 32-bit words. */
template <int BYTES> __device__ __forceinline__ void pk_load_words(const uint8_t *p, uint32_t *w) {
    if (BYTES == 2) {
        w[0] = *(const uint16_t *)p;
    } else if (BYTES == 4) {
        w[0] = *(const uint32_t *)p;
    } else if (BYTES == 8) {
        const uint2 v = *(const uint2 *)p;
        w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < BYTES / 16; i++) {
            const uint4 v = ((const uint4 *)p)[i];
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    }
}

/* Elements off .. off + valid - 1 of a ring buffer into out (the rest 0), decoded: one load of
 * VPL elements (not one per element) when whole (the head splits into whole lanes, so every
 * lane's offset is a multiple of VPL), else one by one. */
template <int FMT, int VPL>
__device__ __forceinline__ void pk_kv_load_lane(const void *base, const float *scales, size_t off, size_t scale_idx,
                                                bool whole, int valid, float (&out)[VPL]) {
    enum { BYTES = VPL * (FMT == PK_KV_F32 ? 4 : FMT == PK_KV_BF16 ? 2 : 1) };
    if (!whole) {
#pragma unroll
        for (int t = 0; t < VPL; t++) out[t] = t < valid ? pk_kv_load<FMT>(base, scales, off + t, scale_idx) : 0.0f;
        return;
    }
    uint32_t w[BYTES >= 4 ? BYTES / 4 : 1];
    pk_load_words<BYTES>((const uint8_t *)base + off * (BYTES / VPL), w);
    const float sc = FMT == PK_KV_INT8 ? scales[scale_idx] : 1.0f;
#pragma unroll
    for (int t = 0; t < VPL; t++) {
        if (FMT == PK_KV_F32) out[t] = __uint_as_float(w[t]);
        else if (FMT == PK_KV_BF16) out[t] = pk_bf16((uint16_t)(w[t / 2] >> (16 * (t % 2))));
        else out[t] = (float)(int8_t)(uint8_t)(w[t / 4] >> (8 * (t % 4))) * sc;
    }
}

/* Block (head, split, row). VPL: consecutive values of head_dim per lane (head_dim <= 32·VPL),
 * loaded as one vector per key and lane; a 128-wide head keeps 4 registers per key. */
template <int FMT, int VPL>
__global__ void __launch_bounds__(PK_ATTN_THREADS)
    pk_attn_split_kernel(const float *__restrict__ qkv, int head_dim, pk_kv_ring one,
                         const pk_kv_ring *const *__restrict__ tables, int layer, const int32_t *__restrict__ pos,
                         float *__restrict__ part) {
    __shared__ float wm[PK_ATTN_THREADS / 32], wl[PK_ATTN_THREADS / 32];
    __shared__ float wo[PK_ATTN_THREADS / 32][PK_ATTN_MAX_DIM];
    const int h = blockIdx.x, n_heads = gridDim.x, split = blockIdx.y, n_splits = gridDim.y, row = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int dim = n_heads * head_dim;
    const pk_kv_ring r = pk_row_ring(one, tables, layer);
    const float *q = qkv + (size_t)row * 3 * dim;
    const int64_t last = pos[row], first = last - r.window + 1 > 0 ? last - r.window + 1 : 0;
    const int64_t k0 = first + (int64_t)split * PK_ATTN_SPLIT;
    const int64_t k1 = k0 + PK_ATTN_SPLIT - 1 < last ? k0 + PK_ATTN_SPLIT - 1 : last;
    /* The split holding the newest position stores its key and value first, so this query sees
     * them as stored; no other split reads that slot. */
    if (k0 <= last && last < k0 + PK_ATTN_SPLIT) {
        __shared__ float red[32];
        const size_t slot = (size_t)(last % r.capacity);
        pk_kv_store_head<FMT>(q, head_dim, r, slot, h, n_heads, 0, red);
        pk_kv_store_head<FMT>(q, head_dim, r, slot, h, n_heads, 1, red);
    }
    const float scale = rsqrtf((float)head_dim);
    const int d0 = lane * VPL; /* this lane's values: d0 .. d0 + VPL - 1 */
    const bool live = d0 < head_dim, whole = head_dim % VPL == 0;
    float qv[VPL], o[VPL];
#pragma unroll
    for (int t = 0; t < VPL; t++) {
        qv[t] = d0 + t < head_dim ? q[(size_t)h * head_dim + d0 + t] * scale : 0.0f;
        o[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* Warp w takes keys k0 + w, k0 + w + nw, ... in order, PK_ATTN_KEYS of them at a time: their
     * keys and values are loaded before the first is used, so that many memory round trips
     * overlap instead of following one another. */
    for (int64_t p = k0 + warp; p <= k1; p += (int64_t)nw * PK_ATTN_KEYS) {
        float kx[PK_ATTN_KEYS][VPL], vx[PK_ATTN_KEYS][VPL];
#pragma unroll
        for (int u = 0; u < PK_ATTN_KEYS; u++) {
            const int64_t pu = p + (int64_t)u * nw;
            const size_t slot = (size_t)((pu <= k1 ? pu : p) % r.capacity), off = slot * dim + (size_t)h * head_dim;
            const size_t si = slot * n_heads + h;
#pragma unroll
            for (int t = 0; t < VPL; t++) kx[u][t] = vx[u][t] = 0.0f;
            if (live) {
                pk_kv_load_lane<FMT, VPL>(r.k, r.kscale, off + d0, si, whole, head_dim - d0, kx[u]);
                pk_kv_load_lane<FMT, VPL>(r.v, r.vscale, off + d0, si, whole, head_dim - d0, vx[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < PK_ATTN_KEYS; u++) {
            if (p + (int64_t)u * nw > k1) break; /* the same in every lane */
            float s = 0.0f;
#pragma unroll
            for (int t = 0; t < VPL; t++) s += qv[t] * kx[u][t];
            s = pk_warp_sum(s);
            float mn = fmaxf(m, s), f = expf(m - mn), e = expf(s - mn);
            l = l * f + e;
#pragma unroll
            for (int t = 0; t < VPL; t++) o[t] = o[t] * f + e * vx[u][t];
            m = mn;
        }
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < VPL; t++)
        if (d0 + t < head_dim) wo[warp][d0 + t] = o[t];
    __syncthreads();
    /* part is the output itself when there is one split (the launcher's choice) */
    float *dst = n_splits == 1 ? part + ((size_t)row * n_heads + h) * head_dim
                               : part + (((size_t)row * n_heads + h) * n_splits + split) * (head_dim + 2);
    float mx = -INFINITY;
    for (int w = 0; w < nw; w++) mx = fmaxf(mx, wm[w]);
    for (int d = threadIdx.x; d < head_dim + 2; d += blockDim.x) {
        float acc = 0.0f, sum = 0.0f;
        for (int w = 0; w < nw; w++) {
            float f = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx);
            sum += wl[w] * f;
            if (d < head_dim) acc += wo[w][d] * f;
        }
        if (n_splits > 1)
            dst[d] = d < head_dim ? acc : d == head_dim ? mx : sum;
        else if (d < head_dim)
            dst[d] = sum > 0.0f ? acc / sum : 0.0f; /* an empty window: never at pos >= 0 */
    }
}

/* One block per (head, row): merge the splits' partial softmaxes. */
__global__ void pk_attn_merge_kernel(const float *__restrict__ part, int n_splits, int head_dim, float *__restrict__ out) {
    pk_grid_wait();
    const int h = blockIdx.x, n_heads = gridDim.x, row = blockIdx.y;
    const float *ph = part + ((size_t)row * n_heads + h) * n_splits * (head_dim + 2);
    out += (size_t)row * n_heads * head_dim;
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
        out[(size_t)h * head_dim + d] = sum > 0.0f ? acc / sum : 0.0f;
    }
}

template <int FMT>
static void launch(const float *qkv, int n, int n_heads, int head_dim, const pk_kv_ring *one,
                   const pk_kv_ring *const *tables, int layer, const int32_t *pos, float *ws, float *out, int splits,
                   cudaStream_t stream) {
    dim3 grid((unsigned)n_heads, (unsigned)splits, (unsigned)n);
    float *part = splits > 1 ? ws : out; /* one split writes the output itself */
    /* An ordinary launch: on sm_90 the wait of a programmatic one cost the int8 instance 8
     * registers (64 -> 72), a resident block per SM, and 22 % of its time on an H200. */
    if (head_dim <= 64) PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, 2>)
    (qkv, head_dim, *one, tables, layer, pos, part);
    else if (head_dim <= 128) PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, 4>)(
        qkv, head_dim, *one, tables, layer, pos, part);
    else PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, PK_ATTN_MAX_DIM / 32>)(
        qkv, head_dim, *one, tables, layer, pos, part);
}

extern "C" size_t pk_attn_workspace(int n, int n_heads, int head_dim, int capacity) {
    return (size_t)n * n_heads * attn_splits(capacity) * (head_dim + 2);
}

extern "C" int pk_attn_rows(const float *qkv, int n, int n_heads, int head_dim, const pk_kv_ring *ring,
                            const pk_kv_ring *const *tables, int layer, const int32_t *pos, float *out, float *ws,
                            cudaStream_t stream) {
    if (head_dim > PK_ATTN_MAX_DIM || head_dim <= 0 || n_heads <= 0 || ring->capacity <= 0 || n <= 0 ||
        (n > 1 && !tables))
        return (int)cudaErrorInvalidValue;
    int splits = attn_splits(ring->window < ring->capacity ? ring->window : ring->capacity);
    switch (ring->fmt) {
    case PK_KV_F32:
        launch<PK_KV_F32>(qkv, n, n_heads, head_dim, ring, tables, layer, pos, ws, out, splits, stream);
        break;
    case PK_KV_BF16:
        launch<PK_KV_BF16>(qkv, n, n_heads, head_dim, ring, tables, layer, pos, ws, out, splits, stream);
        break;
    case PK_KV_INT8:
        launch<PK_KV_INT8>(qkv, n, n_heads, head_dim, ring, tables, layer, pos, ws, out, splits, stream);
        break;
    default: return (int)cudaErrorInvalidValue;
    }
    if (splits > 1)
        PK_LAUNCH(dim3((unsigned)n_heads, (unsigned)n), head_dim < 128 ? 64 : 128, 0, stream, pk_attn_merge_kernel)
    (ws, splits, head_dim, out);
    return pk_launched();
}
