/* common: small device helpers shared by the kernel files (reductions, launch sizing). */
#ifndef PP_KERNELS_COMMON_CUH
#define PP_KERNELS_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#define PK_WARP 32

/* Launches, dynamic shared memory and pk_grid_wait go through these so the same sources also
 * build for tests/cuda_emu, the CPU emulation CI runs the backend on (its cuda_runtime.h defines
 * them). A launch counts itself as one node (pk_nodes).
 *
 * PK_LAUNCH allows programmatic dependent launch where the device has it (sm_90 on, see
 * pk_set_programmatic_launch): the kernel may start while the one before it in the stream
 * drains, so it calls pk_grid_wait before it reads or writes anything an earlier kernel touches
 * (it may read weights before: they never change), which also lets the next kernel start. The
 * emulation stops a kernel so launched that never calls it. PK_LAUNCH_PLAIN is an ordinary
 * launch, for a kernel whose registers the wait would cost occupancy (the attention split). */
#ifndef PK_LAUNCH
#include <utility>

template <class... P> struct pk_launcher {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    bool programmatic;
    void (*kernel)(P...);
    template <class... A> void operator()(A &&...args) const {
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cfg.attrs = &attr;
        cfg.numAttrs = programmatic && pk_programmatic_launch() ? 1 : 0;
        cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
    }
};

template <class... P>
static pk_launcher<P...> pk_make_launcher(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool programmatic,
                                          void (*k)(P...)) {
    return pk_launcher<P...>{grid, block, smem, stream, programmatic, k};
}

#define PK_LAUNCH(grid, block, smem, stream, ...)                                                                      \
    pk_count_node(), pk_make_launcher(grid, block, smem, stream, true, __VA_ARGS__)
#define PK_LAUNCH_PLAIN(grid, block, smem, stream, ...)                                                                \
    pk_count_node(), pk_make_launcher(grid, block, smem, stream, false, __VA_ARGS__)
#define PK_DYNAMIC_SHARED(type, name) extern __shared__ type name[]

/* Waits until the kernel before this one in the stream has finished and its writes are
 * visible, then lets the next kernel launch. */
__device__ __forceinline__ void pk_grid_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif

/* Asks L1 for the 128-byte line holding p ahead of its loads. The emulation reads p's byte
 * instead, so an address outside its buffer fails there (ASan, the emulated device's checks). */
__device__ __forceinline__ void pk_prefetch_l1(const void *p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
    (void)*(const volatile char *)p;
#endif
}

/* Asks L2 for the bytes [p, p + bytes) ahead of their loads (a GEMV's weights, before its
 * pk_grid_wait: they stream in while the previous kernel drains). */
__device__ __forceinline__ void pk_prefetch_l2(const void *p, size_t bytes) {
#if defined(__CUDA_ARCH__)
    const char *c = (const char *)p;
    for (size_t off = (size_t)threadIdx.x * 128; off < bytes; off += (size_t)blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
#else
    (void)p, (void)bytes;
#endif
}

__device__ __forceinline__ float pk_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float pk_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
 * red holds 32 floats of shared memory; the trailing barrier lets the caller reuse it. */
__device__ __forceinline__ float pk_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = pk_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    v = pk_warp_sum(v);
    __syncthreads();
    return v;
}

/* Maximum over the block, as pk_block_sum. */
__device__ __forceinline__ float pk_block_max(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = pk_warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    v = pk_warp_max(v);
    __syncthreads();
    return v;
}

/* 1 / rms of the row xi[d] (RMSNorm's factor before alpha), by the whole block; red as
 * pk_block_sum's. */
__device__ __forceinline__ float pk_row_inv_rms(const float *xi, int d, float eps, float *red) {
    float ss = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) ss += xi[j] * xi[j];
    return rsqrtf(eps + pk_block_sum(ss, red) / (float)d);
}

/* The gated FFN's input: silu(g)·v, rounded as the CPU's pp_cpu_silu_mul. */
__device__ __forceinline__ float pk_silu_gate(float g, float v) { return g / (1.0f + expf(-g)) * v; }

__device__ __forceinline__ float pk_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float pk_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

static inline unsigned pk_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* The launch's error, without clearing a sticky one from an earlier fault. */
static inline int pk_launched(void) { return (int)cudaGetLastError(); }

#endif
