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

/* Group blockIdx.x of table row `row` decoded into v [np2] (codes, then the inverse WHT: it ends
 * with a barrier); returns the group's scale. Every thread calls it. */
__device__ __forceinline__ float pk_embed_nf2_group(const pk_weight &w, int64_t row, float *v) {
    const int64_t e0 = w.elem0 + row * w.cols + (int64_t)blockIdx.x * w.group;
    const uint8_t *d = (const uint8_t *)w.data;
    for (int j = threadIdx.x; j < w.np2; j += blockDim.x) v[j] = j < w.group ? pk_nf2_code_at(d, e0 + j) : 0.0f;
    __syncthreads();
    pk_wht(v, w.np2, w.np2);
    return pk_group_scale(w, e0 / w.group);
}

/* One block per (group of the row, input i). */
__global__ void pk_embed_nf2_kernel(pk_weight w, const int32_t *__restrict__ ids, float *__restrict__ y,
                                    int accumulate) {
    pk_grid_wait();
    PK_DYNAMIC_SHARED(float, v);
    const int i = blockIdx.y, gs = w.group;
    const int64_t row = pk_embed_row(ids[i], w.rows);
    float *dst = y + (int64_t)i * w.cols + (int64_t)blockIdx.x * gs;
    if (row < 0) {
        for (int j = threadIdx.x; j < gs; j += blockDim.x) pk_embed_store(dst + j, 0.0f, accumulate);
        return;
    }
    const float s = pk_embed_nf2_group(w, row, v);
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

/* ---- the sum of several tables' rows (the LM's input: 17 streams) in one launch ---- */

#define PK_EMBED_MAX_TABLES 24
/* Passed by value (a kernel parameter, ~2.5 KB): a recording keeps its own copy. */
struct pk_embed_set {
    pk_weight w[PK_EMBED_MAX_TABLES];
    const int32_t *ids[PK_EMBED_MAX_TABLES]; /* device: table t's n ids */
    int n;
};

/* Adds v to the sum so far, the first table's value taken as is (as embed without accumulate). */
__device__ __forceinline__ float pk_embed_add(float acc, float v, int t) { return t ? acc + v : v; }

/* All tables NF2 with one group layout: one block per (group of the row, input i), each table's
 * group decoded and transformed in turn; a thread keeps its values' sums (np2 <= 2·threads). */
__global__ void pk_embed_sum_nf2_kernel(pk_embed_set s, float *__restrict__ y) {
    pk_grid_wait();
    PK_DYNAMIC_SHARED(float, v);
    const int i = blockIdx.y, gs = s.w[0].group;
    float acc[2] = {0.0f, 0.0f};
    for (int t = 0; t < s.n; t++) {
        const pk_weight &w = s.w[t];
        const int64_t row = pk_embed_row(s.ids[t][i], w.rows);
        if (row < 0) { /* zeros */
#pragma unroll
            for (int a = 0; a < 2; a++) acc[a] = pk_embed_add(acc[a], 0.0f, t);
            continue;
        }
        __syncthreads(); /* the previous table's values are read */
        const float sc = pk_embed_nf2_group(w, row, v);
#pragma unroll
        for (int a = 0; a < 2; a++) {
            const int j = threadIdx.x + a * blockDim.x;
            if (j < gs) acc[a] = pk_embed_add(acc[a], v[j] * sc, t);
        }
    }
    float *dst = y + (int64_t)i * s.w[0].cols + (int64_t)blockIdx.x * gs;
#pragma unroll
    for (int a = 0; a < 2; a++) {
        const int j = threadIdx.x + a * blockDim.x;
        if (j < gs) dst[j] = acc[a];
    }
}

/* No NF2 table: a thread per (column, input), each table's element in turn (NF4's table read
 * where it lies). */
__global__ void pk_embed_sum_kernel(pk_embed_set s, float *__restrict__ y) {
    pk_grid_wait();
    const int i = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, cols = s.w[0].cols;
    if (c >= cols) return;
    float acc = 0.0f;
    for (int t = 0; t < s.n; t++) {
        const pk_weight &w = s.w[t];
        const int64_t row = pk_embed_row(s.ids[t][i], w.rows);
        acc = pk_embed_add(acc, row < 0 ? 0.0f : pk_weight_elem(w, w.elem0 + row * cols + c, w.quant_map), t);
    }
    y[(int64_t)i * cols + c] = acc;
}

extern "C" int pk_embed_sum(const pk_weight *tables, const int *id_rows, int n_tables, const int32_t *ids, int n,
                            float *y, cudaStream_t stream) {
    if (n <= 0 || n_tables <= 0) return 0;
    int nf2 = 0, same = n_tables <= PK_EMBED_MAX_TABLES;
    for (int t = 0; t < n_tables; t++) {
        nf2 += tables[t].fmt == PK_NF2;
        same &=
            tables[t].cols == tables[0].cols && tables[t].group == tables[0].group && tables[t].np2 == tables[0].np2;
    }
    if (!same || (nf2 && nf2 < n_tables) || (nf2 && 2 * pk_wht_threads(tables[0].np2) < tables[0].np2)) {
        for (int t = 0; t < n_tables; t++) { /* one launch per table */
            int rc = pk_embed(&tables[t], ids + (size_t)id_rows[t] * n, n, y, t > 0, stream);
            if (rc) return rc;
        }
        return 0;
    }
    pk_embed_set s;
    s.n = n_tables;
    for (int t = 0; t < n_tables; t++) {
        s.w[t] = tables[t];
        s.ids[t] = ids + (size_t)id_rows[t] * n;
    }
    if (nf2) {
        const int threads = pk_wht_threads(tables[0].np2);
        dim3 grid((unsigned)(tables[0].cols / tables[0].group), (unsigned)n);
        PK_LAUNCH(grid, threads, (size_t)tables[0].np2 * sizeof(float), stream, pk_embed_sum_nf2_kernel)(s, y);
    } else {
        dim3 grid(pk_blocks((size_t)tables[0].cols, 256), (unsigned)n);
        PK_LAUNCH(grid, 256, 0, stream, pk_embed_sum_kernel)(s, y);
    }
    return pk_launched();
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
