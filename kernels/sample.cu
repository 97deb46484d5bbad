/* sample: tokens from rows of logits without copying them to the host, computing exactly what
 * src/backend/pp_cpu_sample.c computes (same keys, same radix select, same uniforms).
 *
 * One block per row. Each thread owns a contiguous run of indices, so "lowest index" orders match a
 * sequential scan: greedy is a block argmax of (key, −index); sampling finds the k-th largest
 * key by a 4-pass radix select on a shared 256-bin histogram, admits the boundary ties in
 * index order through a block prefix sum, and races the candidates (score, −index). */
#include "common.cuh"

#include "backend/sample_key.h"

#define PK_SAMPLE_THREADS 1024

/* Best (score, index) over the block: larger score, then lower index. Every thread gets it. */
__device__ void pk_block_best(double &score, int &idx, double *ss, int *si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        double os = __shfl_xor_sync(0xffffffffu, score, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (os > score || (os == score && oi < idx)) {
            score = os;
            idx = oi;
        }
    }
    if (lane == 0) {
        ss[warp] = score;
        si[warp] = idx;
    }
    __syncthreads();
    score = ss[0];
    idx = si[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (ss[w] > score || (ss[w] == score && si[w] < idx)) {
            score = ss[w];
            idx = si[w];
        }
    __syncthreads();
}

/* Exclusive prefix sum of v over the threads in order; *total gets the sum. */
__device__ int pk_block_exscan(int v, int *warp_tot, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += u;
    }
    if (lane == 31) warp_tot[warp] = inc;
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
        if (w < warp) before += warp_tot[w];
        all += warp_tot[w];
    }
    __syncthreads();
    *total = all;
    return before + inc - v;
}

/* One block per row; the row's settings (and whether it is forced) come from device memory. */
__global__ void __launch_bounds__(PK_SAMPLE_THREADS)
    pk_sample_kernel(const float *__restrict__ logits_all, int n, const pk_sample_param *__restrict__ params,
                     int stream_id, const int32_t *__restrict__ forced, int32_t *__restrict__ tokens) {
    pk_grid_wait();
    __shared__ double ss[32];
    __shared__ int si[32], hist[256], sel[2];
    const int row = blockIdx.x;
    int32_t *token = tokens + row;
    if (forced && forced[row] >= 0) {
        if (threadIdx.x == 0) *token = forced[row];
        return;
    }
    const float *logits = logits_all + (int64_t)row * n;
    const pk_sample_param p = params[row];
    const float temp = p.temp;
    const int k = p.top_k <= 0 || p.top_k > n ? n : p.top_k;
    const uint64_t seed = p.seed, counter = pp_sk_counter(p.frame, stream_id);
    const int per = (n + blockDim.x - 1) / blockDim.x;
    const int i0 = threadIdx.x * per, i1 = i0 + per < n ? i0 + per : n;
    double score = -INFINITY;
    int idx = n;
    if (!(temp > 0.0f)) {
        for (int i = i0; i < i1; i++) {
            double key = (double)pp_sk_key(logits[i]);
            if (key > score) {
                score = key;
                idx = i;
            }
        }
        pk_block_best(score, idx, ss, si);
        if (threadIdx.x == 0) *token = idx < n ? idx : 0;
        return;
    }
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int i = i0; i < i1; i++) {
            uint32_t key = pp_sk_key(logits[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255, r = remaining;
            while (b > 0 && hist[b] < r) r -= hist[b--];
            sel[0] = b;
            sel[1] = r;
        }
        __syncthreads();
        prefix |= (uint32_t)sel[0] << shift;
        mask |= 255u << shift;
        remaining = sel[1];
        __syncthreads();
    }
    const uint32_t th = prefix;
    int eq = 0, total;
    for (int i = i0; i < i1; i++) eq += pp_sk_key(logits[i]) == th;
    int take = remaining - pk_block_exscan(eq, si, &total); /* boundary ties left for this thread */
    for (int i = i0; i < i1; i++) {
        uint32_t key = pp_sk_key(logits[i]);
        if (key == 0 || key < th) continue;
        if (key == th && take-- <= 0) continue;
        double s = pp_sk_score(logits[i], temp, pp_sk_uniform(seed, counter, (uint32_t)i));
        if (s > score) {
            score = s;
            idx = i;
        }
    }
    pk_block_best(score, idx, ss, si);
    if (threadIdx.x == 0) *token = idx < n ? idx : 0;
}

extern "C" int pk_sample(const float *logits, int rows, int n, const pk_sample_param *params, int stream_id,
                         const int32_t *forced, int32_t *tokens, cudaStream_t stream) {
    if (rows <= 0) return 0;
    if (n <= 0) return (int)cudaMemsetAsync(tokens, 0, (size_t)rows * sizeof *tokens, stream);
    PK_LAUNCH(rows, PK_SAMPLE_THREADS, 0, stream, pk_sample_kernel)(logits, n, params, stream_id, forced, tokens);
    return pk_launched();
}
