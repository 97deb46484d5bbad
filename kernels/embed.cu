/* embed: rows of a (possibly packed) embedding table into activations. NF2 rows are decoded
 * for real here (centroids, the inverse WHT in shared memory, the scale): an embedding is a
 * value, not a dot product, so the rotated-domain trick of the GEMV does not apply. */
#include "gemv.cuh"

/* As the CPU backend: id −1 and ids past the table give zeros, other negative ids read row 0. */
__device__ __forceinline__ int64_t pk_embed_row(int32_t id, int64_t rows) {
    if (id == -1 || id >= rows) return -1;
    return id < -1 ? 0 : id;
}

__device__ __forceinline__ void pk_embed_store(float *dst, float v, int accumulate) {
    if (accumulate)
        *dst += v;
    else
        *dst = v;
}

/* One block per (group of the row, input i). */
__global__ void pk_embed_nf2_kernel(pk_weight w, const int32_t *__restrict__ ids, float *__restrict__ y,
                                    int accumulate) {
    pk_grid_wait();
    PK_DYNAMIC_SHARED(float, v);
    const int i = blockIdx.y, gs = w.group, np2 = w.np2;
    const int64_t row = pk_embed_row(ids[i], w.rows);
    float *dst = y + (int64_t)i * w.cols + (int64_t)blockIdx.x * gs;
    if (row < 0) {
        for (int j = threadIdx.x; j < gs; j += blockDim.x) pk_embed_store(dst + j, 0.0f, accumulate);
        return;
    }
    const int64_t e0 = w.elem0 + row * w.cols + (int64_t)blockIdx.x * gs;
    const uint8_t *d = (const uint8_t *)w.data;
    for (int j = threadIdx.x; j < np2; j += blockDim.x) v[j] = j < gs ? pk_nf2_code_at(d, e0 + j) : 0.0f;
    __syncthreads();
    pk_wht_shared(v, np2, np2);
    const float s = pk_group_scale(w, e0 / gs);
    for (int j = threadIdx.x; j < gs; j += blockDim.x) pk_embed_store(dst + j, v[j] * s, accumulate);
}

__global__ void pk_embed_kernel(pk_weight w, const int32_t *__restrict__ ids, float *__restrict__ y, int accumulate) {
    pk_grid_wait();
    __shared__ float lut[16];
    pk_load_lut(w, lut);
    const int i = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= w.cols) return;
    const int64_t row = pk_embed_row(ids[i], w.rows);
    float v = row < 0 ? 0.0f : pk_weight_elem(w, w.elem0 + row * w.cols + c, lut);
    pk_embed_store(y + (int64_t)i * w.cols + c, v, accumulate);
}

/* The ids stay in device memory (the kernels read them), so a recorded frame embeds tokens
 * uploaded or sampled after it was recorded. One grid row per input. */
extern "C" int pk_embed(const pk_weight *table, const int32_t *ids, int n, float *y, int accumulate,
                        cudaStream_t stream) {
    if (n <= 0) return 0;
    if (table->fmt == PK_NF2) {
        int threads = pk_wht_threads(table->np2);
        dim3 grid((unsigned)(table->cols / table->group), (unsigned)n);
        PK_LAUNCH(grid, threads, (size_t)table->np2 * sizeof(float), stream, pk_embed_nf2_kernel)(*table, ids, y,
                                                                                           accumulate);
    } else {
        dim3 grid(pk_blocks((size_t)table->cols, 256), (unsigned)n);
        PK_LAUNCH(grid, 256, 0, stream, pk_embed_kernel)(*table, ids, y, accumulate);
    }
    return pk_launched();
}
