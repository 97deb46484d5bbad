/* common: small device helpers shared by the kernel files (reductions, launch sizing). */
#ifndef PP_KERNELS_COMMON_CUH
#define PP_KERNELS_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#define PK_WARP 32

/* Launches and dynamic shared memory go through these so the same sources also build for
 * tests/cuda_emu, the CPU emulation CI runs the backend on (its cuda_runtime.h defines both).
 * A launch counts itself as one node (pk_nodes). */
#ifndef PK_LAUNCH
#define PK_LAUNCH(grid, block, smem, stream, ...) pk_count_node(), __VA_ARGS__<<<grid, block, smem, stream>>>
#define PK_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

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

/* The gated FFN's input: silu(g)·v, rounded as the CPU's pp_cpu_silu_mul. */
__device__ __forceinline__ float pk_silu_gate(float g, float v) { return g / (1.0f + expf(-g)) * v; }

__device__ __forceinline__ float pk_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float pk_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

static inline unsigned pk_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* The launch's error, without clearing a sticky one from an earlier fault. */
static inline int pk_launched(void) { return (int)cudaGetLastError(); }

#endif
