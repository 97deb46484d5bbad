/* lm_ops: the LM's small per-token operations (residual add, RMSNorm, SiLU gating).
 * Memory-bound and tiny at batch 1: one pass each, statistics in fp32 with a block reduction
 * (the CPU accumulates in double; the difference is within the parity limits). */
#include "common.cuh"

static uint64_t nodes_issued; /* every CUDA backend of the process: relaxed atomics */

extern "C" void pk_count_node(void) { __atomic_fetch_add(&nodes_issued, 1, __ATOMIC_RELAXED); }
extern "C" uint64_t pk_nodes(void) { return __atomic_load_n(&nodes_issued, __ATOMIC_RELAXED); }

static int programmatic_launch;
extern "C" void pk_set_programmatic_launch(int on) { __atomic_store_n(&programmatic_launch, on, __ATOMIC_RELAXED); }
extern "C" int pk_programmatic_launch(void) { return __atomic_load_n(&programmatic_launch, __ATOMIC_RELAXED); }

static int self_prepare;
extern "C" void pk_set_self_prepare(int on) { __atomic_store_n(&self_prepare, on, __ATOMIC_RELAXED); }
extern "C" int pk_self_prepare(void) { return __atomic_load_n(&self_prepare, __ATOMIC_RELAXED); }

static int imma_min_batch; /* 0: each format's own (gemv.cu) */
extern "C" void pk_set_imma_min_batch(int n) { __atomic_store_n(&imma_min_batch, n, __ATOMIC_RELAXED); }
extern "C" int pk_imma_min_batch(void) { return __atomic_load_n(&imma_min_batch, __ATOMIC_RELAXED); }

static int attn_span; /* 0: attn.cu chooses */
extern "C" void pk_set_attn_span(int keys) { __atomic_store_n(&attn_span, keys, __ATOMIC_RELAXED); }
extern "C" int pk_attn_span(void) { return __atomic_load_n(&attn_span, __ATOMIC_RELAXED); }

static int imma_l1_ahead = 1;
extern "C" void pk_set_imma_l1_ahead(int on) { __atomic_store_n(&imma_l1_ahead, on, __ATOMIC_RELAXED); }
extern "C" int pk_imma_l1_ahead(void) { return __atomic_load_n(&imma_l1_ahead, __ATOMIC_RELAXED); }

static int attn_ahead = 1;
extern "C" void pk_set_attn_ahead(int on) { __atomic_store_n(&attn_ahead, on, __ATOMIC_RELAXED); }
extern "C" int pk_attn_ahead(void) { return __atomic_load_n(&attn_ahead, __ATOMIC_RELAXED); }

static int device_sms = 1;
extern "C" void pk_set_device_sms(int n) { __atomic_store_n(&device_sms, n, __ATOMIC_RELAXED); }
extern "C" int pk_device_sms(void) { return __atomic_load_n(&device_sms, __ATOMIC_RELAXED); }

#ifndef PK_EMU /* the emulation counts traffic (tests/cuda_emu/emu.cc); a GPU's is not visible here */
extern "C" int pk_device_traffic(pk_traffic_fn fn, void *arg) {
    (void)fn;
    (void)arg;
    return -1;
}
#endif

__global__ void pk_add_kernel(float *__restrict__ y, const float *__restrict__ x, size_t count) {
    pk_grid_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) y[i] += x[i];
}

extern "C" int pk_add(float *y, const float *x, size_t count, cudaStream_t stream) {
    if (!count) return 0;
    PK_LAUNCH(pk_blocks(count, 256), 256, 0, stream, pk_add_kernel)(y, x, count);
    return pk_launched();
}

/* One block per row; y may equal x (every thread reads its values before the reduction's
 * barriers and writes only after). */
__global__ void __launch_bounds__(1024)
    pk_rmsnorm_kernel(const float *x, const float *__restrict__ alpha, int d, float eps, float *y) {
    pk_grid_wait();
    __shared__ float red[32];
    const float *xi = x + (size_t)blockIdx.x * d;
    float *yi = y + (size_t)blockIdx.x * d;
    const float inv = pk_row_inv_rms(xi, d, eps, red);
    for (int j = threadIdx.x; j < d; j += blockDim.x) yi[j] = xi[j] * (alpha[j] * inv);
}

extern "C" int pk_rmsnorm(const float *x, const float *alpha, int n, int d, float eps, float *y, cudaStream_t stream) {
    if (n <= 0) return 0;
    PK_LAUNCH(n, d >= 1024 ? 1024 : (d + 31) / 32 * 32, 0, stream, pk_rmsnorm_kernel)(x, alpha, d, eps, y);
    return pk_launched();
}

__global__ void pk_silu_mul_kernel(const float *__restrict__ u, int n, int hidden, float *__restrict__ y) {
    pk_grid_wait();
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * hidden) return;
    int64_t i = idx / hidden, j = idx % hidden;
    y[idx] = pk_silu_gate(u[i * 2 * hidden + j], u[i * 2 * hidden + hidden + j]);
}

extern "C" int pk_silu_mul(const float *u, int n, int hidden, float *y, cudaStream_t stream) {
    size_t total = (size_t)n * hidden;
    if (!total) return 0;
    PK_LAUNCH(pk_blocks(total, 256), 256, 0, stream, pk_silu_mul_kernel)(u, n, hidden, y);
    return pk_launched();
}
