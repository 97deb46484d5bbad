/* codec: Mimi's operations: streaming Conv1d / ConvTranspose1d with their state kept on the
 * device, ELU, GELU, LayerNorm, transpose, LayerScale residual and the RVQ nearest neighbour.
 * The convolutions are direct (no im2col): per frame they are small, and the state update is
 * a separate pass so no thread reads history another thread is rewriting. The convolutions,
 * the transpose and the quantizer take the rows of n conversations in one launch each. */
#include "common.cuh"

/* The state of a conv call's rows: row r's at byte base[r] + offset (each conversation's own
 * arena), or, with base NULL, the one buffer given (a single row, or a conv without state). */
struct pk_conv_state {
    float *one;
    const uint64_t *base;
    size_t offset;
    __device__ __forceinline__ float *row(int r) const { return base ? (float *)(uintptr_t)(base[r] + offset) : one; }
};

static pk_conv_state pk_state_of(float *one, const pk_state_rows *rows) {
    return pk_conv_state{one, rows ? rows->base : NULL, rows ? rows->offset : 0};
}

/* ==== Conv1d ==================================================================== */

/* Input column u of the virtual [hist, x] (p history columns, then t inputs). A row's state is
 * read-only while a conv kernel runs (a separate pass rewrites it), so it takes the read-only
 * path as a const __restrict__ parameter would; a pointer read from base would not. */
__device__ __forceinline__ float pk_conv_in(const float *hist, const float *x, int i, int u, int p, int t) {
    return u < p ? __ldg(hist + (size_t)i * p + u) : x[(size_t)i * t + u - p];
}

/* Thread per output (r, o, j): for long outputs. blockIdx.y = o, so the weight row is shared;
 * blockIdx.z = r. */
__global__ void pk_conv1d_thread_kernel(pk_conv c, const float *__restrict__ x, int t, pk_conv_state st, float *y,
                                        int accumulate) {
    pk_grid_wait();
    const int o = blockIdx.y, r = blockIdx.z, tout = t / c.stride, p = c.k - c.stride;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= tout) return;
    const float *w = c.w + (size_t)o * c.cin * c.k, *hist = st.row(r), *xr = x + (size_t)r * c.cin * t;
    float s = 0.0f;
    for (int i = 0; i < c.cin; i++)
        for (int q = 0; q < c.k; q++) s += w[i * c.k + q] * pk_conv_in(hist, xr, i, j * c.stride + q, p, t);
    float v = (c.b ? c.b[o] : 0.0f) + s;
    float *dst = y + ((size_t)r * c.cout + o) * tout + j;
    *dst = accumulate ? *dst + v : v;
}

/* Warp per output (o, j) of row blockIdx.y: for short outputs with long reductions (deep
 * layers, one frame). */
__global__ void pk_conv1d_warp_kernel(pk_conv c, const float *__restrict__ x, int t, pk_conv_state st, float *y,
                                      int accumulate) {
    pk_grid_wait();
    const int r = blockIdx.y, tout = t / c.stride, p = c.k - c.stride, lane = threadIdx.x & 31;
    const int64_t out = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (out >= (int64_t)c.cout * tout) return;
    const int o = (int)(out / tout), j = (int)(out % tout), len = c.cin * c.k;
    const float *w = c.w + (size_t)o * len, *hist = st.row(r), *xr = x + (size_t)r * c.cin * t;
    float s = 0.0f;
    for (int e = lane; e < len; e += 32) s += w[e] * pk_conv_in(hist, xr, e / c.k, j * c.stride + e % c.k, p, t);
    s = pk_warp_sum(s);
    if (lane) return;
    float v = (c.b ? c.b[o] : 0.0f) + s;
    float *dst = y + (size_t)r * c.cout * tout + out;
    *dst = accumulate ? *dst + v : v;
}

/* Row blockIdx.y's history = copies of its x[:, 0]. */
__global__ void pk_conv_replicate_kernel(const float *__restrict__ x, int cin, int t, int p, pk_conv_state st) {
    pk_grid_wait();
    const int r = blockIdx.y, idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < cin * p) st.row(r)[idx] = x[((size_t)r * cin + idx / p) * t];
}

/* The new history of row blockIdx.y: the last p columns of [hist, x]. One thread per channel
 * walks upwards, as the CPU does, so the in-place shift (t < p) reads ahead of its writes. */
__global__ void pk_conv_hist_kernel(const float *__restrict__ x, int cin, int t, int p, pk_conv_state st) {
    pk_grid_wait();
    const int r = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cin) return;
    float *hi = st.row(r) + (size_t)i * p;
    const float *xi = x + ((size_t)r * cin + i) * t;
    for (int q = 0; q < p; q++) hi[q] = t + q < p ? hi[t + q] : xi[t + q - p];
}

extern "C" int pk_conv1d(const pk_conv *c, const float *x, int t, float *hist, const pk_state_rows *rows, float *y,
                         int accumulate, int replicate, cudaStream_t stream) {
    const int p = c->k - c->stride, tout = t / c->stride, n = rows ? rows->n : 1;
    const pk_conv_state st = pk_state_of(hist, rows);
    if (n <= 0) return 0;
    if (replicate && p > 0) {
        dim3 grid(pk_blocks((size_t)c->cin * p, 256), (unsigned)n);
        PK_LAUNCH(grid, 256, 0, stream, pk_conv_replicate_kernel)(x, c->cin, t, p, st);
    }
    if (tout >= 64) {
        dim3 grid(pk_blocks((size_t)tout, 128), (unsigned)c->cout, (unsigned)n);
        PK_LAUNCH(grid, 128, 0, stream, pk_conv1d_thread_kernel)(*c, x, t, st, y, accumulate);
    } else if (tout > 0) {
        dim3 grid(pk_blocks((size_t)c->cout * tout, 4), (unsigned)n);
        PK_LAUNCH(grid, 128, 0, stream, pk_conv1d_warp_kernel)(*c, x, t, st, y, accumulate);
    }
    if (p > 0) {
        dim3 grid(pk_blocks((size_t)c->cin, 128), (unsigned)n);
        PK_LAUNCH(grid, 128, 0, stream, pk_conv_hist_kernel)(x, c->cin, t, p, st);
    }
    return pk_launched();
}

/* ==== ConvTranspose1d ============================================================ */

/* Thread per (r, o, u), u over the t·stride outputs and the p tail columns: the previous tail
 * plus every (input column j, tap q) with j·stride + q = u. Outputs go to y, the new tail to
 * scratch [n][cout][p] (the old one is still being read). */
__global__ void pk_conv_tr_kernel(pk_conv c, const float *__restrict__ x, int t, pk_conv_state st,
                                  float *__restrict__ y, float *__restrict__ new_tail) {
    pk_grid_wait();
    const int s = c.stride, k = c.k, p = k - s, span = t * s + p;
    const int o = blockIdx.y, r = blockIdx.z, u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= span) return;
    const int cpg = c.groups == 1 ? c.cout : 1; /* w is [cin][cout/groups][k] */
    const float *xr = x + (size_t)r * c.cin * t;
    float f = u < p ? __ldg(st.row(r) + (size_t)o * p + u) : 0.0f; /* read-only: see pk_conv_in */
    int j_hi = u / s < t - 1 ? u / s : t - 1;
    for (int j = j_hi; j >= 0 && u - j * s < k; j--) {
        int q = u - j * s;
        if (c.groups == 1) {
            float z = 0.0f;
            for (int i = 0; i < c.cin; i++) z += xr[(size_t)i * t + j] * c.w[((size_t)i * cpg + o) * k + q];
            f += z;
        } else {
            f += xr[(size_t)o * t + j] * c.w[(size_t)o * k + q];
        }
    }
    const size_t ro = (size_t)r * c.cout + o;
    if (u < t * s)
        y[ro * t * s + u] = f + (c.b ? c.b[o] : 0.0f);
    else
        new_tail[ro * p + u - t * s] = f;
}

/* Row blockIdx.y's new tail, scratch's [cout·p] of that row, into its state. */
__global__ void pk_conv_tr_tail_kernel(const float *__restrict__ new_tail, int len, pk_conv_state st) {
    pk_grid_wait();
    const int r = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) st.row(r)[i] = new_tail[(size_t)r * len + i];
}

extern "C" int pk_conv_tr1d(const pk_conv *c, const float *x, int t, float *tail, const pk_state_rows *rows, float *y,
                            float *scratch, cudaStream_t stream) {
    const int p = c->k - c->stride, span = t * c->stride + p, n = rows ? rows->n : 1;
    const pk_conv_state st = pk_state_of(tail, rows);
    if (t <= 0 || n <= 0) return 0;
    dim3 grid(pk_blocks((size_t)span, 128), (unsigned)c->cout, (unsigned)n);
    PK_LAUNCH(grid, 128, 0, stream, pk_conv_tr_kernel)(*c, x, t, st, y, scratch);
    if (p > 0) {
        dim3 tail_grid(pk_blocks((size_t)c->cout * p, 256), (unsigned)n);
        PK_LAUNCH(tail_grid, 256, 0, stream, pk_conv_tr_tail_kernel)(scratch, c->cout * p, st);
    }
    return pk_launched();
}

/* ==== elementwise and normalisation ============================================ */

__global__ void pk_elu_kernel(const float *x, float *y, size_t n) {
    pk_grid_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

extern "C" int pk_elu(const float *x, float *y, size_t n, cudaStream_t stream) {
    if (!n) return 0;
    PK_LAUNCH(pk_blocks(n, 256), 256, 0, stream, pk_elu_kernel)(x, y, n);
    return pk_launched();
}

__global__ void pk_gelu_kernel(float *x, size_t n) {
    pk_grid_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

extern "C" int pk_gelu(float *x, size_t n, cudaStream_t stream) {
    if (!n) return 0;
    PK_LAUNCH(pk_blocks(n, 256), 256, 0, stream, pk_gelu_kernel)(x, n);
    return pk_launched();
}

/* One block per row; two passes (mean, then variance around it) as the CPU. */
__global__ void pk_layer_norm_kernel(const float *x, const float *__restrict__ w, const float *__restrict__ b, int d,
                                     float eps, float *y) {
    pk_grid_wait();
    __shared__ float red[32];
    const float *xi = x + (size_t)blockIdx.x * d;
    float *yi = y + (size_t)blockIdx.x * d;
    float s = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) s += xi[j];
    float mean = pk_block_sum(s, red) / (float)d;
    float v = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) v += (xi[j] - mean) * (xi[j] - mean);
    float inv = rsqrtf(pk_block_sum(v, red) / (float)d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) yi[j] = (xi[j] - mean) * inv * w[j] + b[j];
}

extern "C" int pk_layer_norm(const float *x, const float *w, const float *b, int n, int d, float eps, float *y,
                             cudaStream_t stream) {
    if (n <= 0) return 0;
    PK_LAUNCH(n, d >= 512 ? 512 : (d + 31) / 32 * 32, 0, stream, pk_layer_norm_kernel)(x, w, b, d, eps, y);
    return pk_launched();
}

/* 32×32 tiles through shared memory (padded a column against bank conflicts) so both the
 * reads and the writes are coalesced. blockIdx.z = b, the matrix x[b] of x [n][rows][cols],
 * whose column j lands in y [cols][n][rows] at row j·n + b. */
__global__ void pk_transpose_kernel(const float *__restrict__ x, int rows, int cols, float *__restrict__ y) {
    pk_grid_wait();
    __shared__ float tile[32][33];
    const int r0 = (int)blockIdx.y * 32, c0 = (int)blockIdx.x * 32, tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int b = (int)blockIdx.z, n = (int)gridDim.z;
    x += (size_t)b * rows * cols;
    for (int r = r0 + ty; r < r0 + 32; r += 8)
        if (r < rows && c0 + tx < cols) tile[r - r0][tx] = x[(size_t)r * cols + c0 + tx];
    __syncthreads();
    for (int c = c0 + ty; c < c0 + 32; c += 8)
        if (c < cols && r0 + tx < rows) y[((size_t)c * n + b) * rows + r0 + tx] = tile[tx][c - c0];
}

extern "C" int pk_transpose(const float *x, int n, int rows, int cols, float *y, cudaStream_t stream) {
    if (n <= 0 || rows <= 0 || cols <= 0) return 0;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32), (unsigned)n), block(32, 8);
    PK_LAUNCH(grid, block, 0, stream, pk_transpose_kernel)(x, rows, cols, y);
    return pk_launched();
}

__global__ void pk_scale_add_kernel(float *y, const float *__restrict__ x, const float *__restrict__ scale, int n, int d) {
    pk_grid_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * d) y[i] += scale[i % d] * x[i];
}

extern "C" int pk_scale_add(float *y, const float *x, const float *scale, int n, int d, cudaStream_t stream) {
    size_t total = (size_t)n * d;
    if (!total) return 0;
    PK_LAUNCH(pk_blocks(total, 256), 256, 0, stream, pk_scale_add_kernel)(y, x, scale, n, d);
    return pk_launched();
}

/* ==== vector quantization ======================================================= */

/* One block per row x[blockIdx.x]: warp per codebook row (lanes over dim, coalesced), then a
 * block argmin in which the smaller distance and, among equal ones, the lower index wins; then
 * the optional residual update. */
#define PK_VQ_THREADS 1024

__global__ void __launch_bounds__(PK_VQ_THREADS)
    pk_vq_kernel(const float *__restrict__ cb, const float *__restrict__ cb_sq, int bins, int dim, float *x,
                 int subtract, int32_t *code, int code_stride) {
    pk_grid_wait();
    __shared__ float red[32], bd[32];
    __shared__ int bi[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x += (size_t)blockIdx.x * dim;
    float xx = 0.0f;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) xx += x[j] * x[j];
    xx = pk_block_sum(xx, red);
    float best = INFINITY;
    int arg = bins;
    for (int b = warp; b < bins; b += nw) {
        const float *e = cb + (size_t)b * dim;
        float s = 0.0f;
        for (int j = lane; j < dim; j += 32) s += x[j] * e[j];
        s = pk_warp_sum(s);
        float d2 = (xx - 2.0f * s) + cb_sq[b];
        float d = sqrtf(d2 > 0.0f ? d2 : 0.0f);
        if (d < best) { /* b rises within a warp: strictly smaller keeps the first */
            best = d;
            arg = b;
        }
    }
    if (lane == 0) {
        bd[warp] = best;
        bi[warp] = arg;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < nw ? bd[lane] : INFINITY;
        arg = lane < nw ? bi[lane] : bins;
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oa = __shfl_xor_sync(0xffffffffu, arg, o);
            if (ob < best || (ob == best && oa < arg)) {
                best = ob;
                arg = oa;
            }
        }
        if (lane == 0) bi[0] = arg < bins ? arg : 0;
    }
    __syncthreads();
    const int c = bi[0];
    if (threadIdx.x == 0) code[(size_t)blockIdx.x * code_stride] = c;
    if (subtract)
        for (int j = threadIdx.x; j < dim; j += blockDim.x) x[j] -= cb[(size_t)c * dim + j];
}

extern "C" int pk_vq_nearest(const float *cb, const float *cb_sq, int bins, int dim, float *x, int n, int subtract,
                             int32_t *code, int code_stride, cudaStream_t stream) {
    if (bins <= 0 || dim <= 0) return (int)cudaErrorInvalidValue;
    if (n <= 0) return 0;
    PK_LAUNCH(n, PK_VQ_THREADS, 0, stream, pk_vq_kernel)(cb, cb_sq, bins, dim, x, subtract, code, code_stride);
    return pk_launched();
}

/* The codes are read on the device, so a recorded frame adds the rows of the codes it is given.
 * blockIdx.y = r. */
__global__ void pk_vq_add_row_kernel(const float *__restrict__ cb, int bins, int dim, const int32_t *__restrict__ code,
                                     int code_stride, float *y) {
    pk_grid_wait();
    const int r = blockIdx.y, c = code[(size_t)r * code_stride], i = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < 0 || c >= bins || i >= dim) return;
    y[(size_t)r * dim + i] += cb[(size_t)c * dim + i];
}

extern "C" int pk_vq_add_row(const float *cb, int bins, int dim, const int32_t *code, int code_stride, int n, float *y,
                             cudaStream_t stream) {
    if (dim <= 0 || n <= 0) return 0;
    dim3 grid(pk_blocks((size_t)dim, 256), (unsigned)n);
    PK_LAUNCH(grid, 256, 0, stream, pk_vq_add_row_kernel)(cb, bins, dim, code, code_stride, y);
    return pk_launched();
}
