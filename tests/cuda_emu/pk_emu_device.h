/* cuda_emu: the device side for kernel sources compiled as C++ (see cuda_runtime_api.h).
 *
 * A launch runs its blocks one after another; a block's threads are fibers on the calling
 * thread, so __shared__ variables can be statics and atomics plain updates. A fiber
 * runs until it reaches __syncthreads (all live threads of the block meet) or a warp shuffle
 * (the lanes of its warp meet). Launches take four schedules in turn (threads ascending or
 * descending; warps in step or one running ahead), so a read of shared memory that lacks its
 * barrier sees stale data under some of them. Misuse the hardware leaves undefined (a
 * full-mask shuffle in a partial warp or with exited lanes, mismatched barriers, a block's
 * threads at different __syncthreads) stops the program with a message.
 *
 * Blocks that hand data to each other (the last block to draw a ticket from a global atomic
 * merges the others' partial results) need __threadfence between their stores and the atomic;
 * running blocks in turn would hide a missing one, so a launch may hold stores: each block's
 * stores to device memory stay invisible to the other blocks until the block executes
 * __threadfence, and land when the launch ends if it never does; atomics are never held, and a
 * block reads its own stores. Every other such launch takes its blocks in descending order. With
 * PK_EMU_HELD_STORES=1 every launch holds stores (emu.cc); ctest runs the self-test and the
 * parity test so. */
#ifndef PK_EMU_DEVICE_H
#define PK_EMU_DEVICE_H

#define PK_EMU 1 /* kernel sources built for the emulation (lm_ops.cu leaves pk_device_traffic to it) */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* Shared variables are statics in one section, which every block starts by filling with NaN
 * bytes: as on the device, a block sees neither zeros nor the previous block's values. (GCC
 * ignores the attribute in templates; the linker gathers those, cuda_emu/shared.ld.) */
#define __shared__ __attribute__((section("pk_emu_shared"))) static

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};

struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};

struct __attribute__((aligned(8))) float2 {
    float x, y;
};

struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};

struct __attribute__((aligned(8))) int2 {
    int x, y;
};

static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

namespace pk_emu {

struct launch_dims {
    uint3 block_idx;
    dim3 block_dim, grid_dim;
};
extern launch_dims dims;

/* The running fiber's thread index. */
const uint3 &thread_idx();
/* __syncthreads at file:line. */
void sync_block(const char *file, int line);
/* Lane exchange among the warp's lanes: writes `size` bytes of value, returns lane src's. */
void shuffle(unsigned mask, const void *value, size_t size, int src_lane, void *out);
/* Every lane of the full warp writes `size` (<= 32) bytes of value; all receives the 32 lanes'
 * values in lane order. */
void gather(const void *value, size_t size, void *all);
/* Device-side misuse the hardware leaves undefined: stops the run with the message. */
[[noreturn]] void misuse(const char *what);
int lane_id();
void *dynamic_shared();

/* Errors, as on the device, reach the caller through cudaGetLastError. `name` (the launch
 * expression) is what the launch's device traffic is counted under. A programmatic launch (the
 * kernel may start while its predecessor drains, common.cuh) must call pk_grid_wait: one that
 * ends without doing so stops the run (on a device it would race its predecessor). `kernel`
 * identifies the kernel (its address), whose shared variables the emulation learns. */
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name, uintptr_t kernel,
            bool programmatic, std::function<void()> body);
/* pk_grid_wait was called by the running launch. */
void grid_waited();
/* __threadfence: publishes the block's held stores (emu.cc). */
void thread_fence();
/* After an atomic stored `bytes` at p: an atomic on device memory is never held back. */
void atomic_stored(const void *p, size_t bytes);

/* kernel<<<grid, block, smem, stream>>>(args): the arguments are converted to the kernel's
 * parameter types once, and every thread gets its own copy (as kernel parameters are). */
template <class... P> struct launcher {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *name;
    bool programmatic;
    void (*kernel)(P...);
    template <class... A> void operator()(A &&...args) const {
        std::tuple<P...> params(std::forward<A>(args)...);
        void (*k)(P...) = kernel;
        launch(grid, block, smem, stream, name, reinterpret_cast<uintptr_t>(k), programmatic,
               [k, params]() { std::apply(k, params); });
    }
};

template <class... P>
launcher<P...> make_launcher(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name,
                             bool programmatic, void (*kernel)(P...)) {
    return launcher<P...>{grid, block, smem, stream, name, programmatic, kernel};
}

} // namespace pk_emu

extern "C" void pk_count_node(void); /* kernels/lm_ops.cu: every launch is one node */

#define PK_LAUNCH(grid, block, smem, stream, ...)                                                                      \
    pk_count_node(), pk_emu::make_launcher(grid, block, smem, stream, #__VA_ARGS__, true, __VA_ARGS__)
#define PK_LAUNCH_PLAIN(grid, block, smem, stream, ...)                                                                \
    pk_count_node(), pk_emu::make_launcher(grid, block, smem, stream, #__VA_ARGS__, false, __VA_ARGS__)
#define PK_DYNAMIC_SHARED(type, name) type *name = (type *)pk_emu::dynamic_shared()

#define threadIdx (pk_emu::thread_idx())
#define blockIdx (pk_emu::dims.block_idx)
#define blockDim (pk_emu::dims.block_dim)
#define gridDim (pk_emu::dims.grid_dim)

/* A macro, so that each barrier knows its place in the source: a block's threads must all wait at
 * the same __syncthreads (one in code only some threads reach is undefined: on a device the
 * others may pass a different barrier, or hang). */
#define __syncthreads() pk_emu::sync_block(__FILE__, __LINE__)
/* On the device the launch fails and the context with it; here the run stops. */
[[noreturn]] static inline void __trap(void) { pk_emu::misuse("a kernel trapped (__trap)"); }

/* Launches run one after another, so the previous kernel is always done; the call is recorded
 * (pk_emu::launch). */
static inline void pk_grid_wait(void) { pk_emu::grid_waited(); }

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    T out;
    pk_emu::shuffle(mask, &v, sizeof v, pk_emu::lane_id() ^ lane_mask, &out);
    return out;
}

/* Lane src_lane's value (within the warp: the low 5 bits). */
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src_lane) {
    T out;
    pk_emu::shuffle(mask, &v, sizeof v, src_lane & 31, &out);
    return out;
}

/* Lanes below delta keep their own value. */
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
    T out;
    int lane = pk_emu::lane_id();
    pk_emu::shuffle(mask, &v, sizeof v, lane >= (int)delta ? lane - (int)delta : lane, &out);
    return out;
}

static inline void __threadfence(void) { pk_emu::thread_fence(); }

/* One host thread runs every fiber and never preempts one: a plain update is atomic. */
template <class T, class F> static inline T pk_emu_atomic(T *p, F update) {
    T old = *p;
    *p = update(old);
    pk_emu::atomic_stored(p, sizeof *p);
    return old;
}

static inline int atomicAdd(int *p, int v) {
    return pk_emu_atomic(p, [v](int old) { return (int)((unsigned)old + (unsigned)v); }); /* wraps, as the device */
}
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return pk_emu_atomic(p, [v](unsigned old) { return old + v; });
}
static inline unsigned atomicExch(unsigned *p, unsigned v) {
    return pk_emu_atomic(p, [v](unsigned) { return v; });
}

/* A device load of T takes an address aligned to T's size (a float4 or uint4 one a multiple of
 * 16 bytes) and faults otherwise; the host would load from any address, so the run stops. */
template <class T> static inline void pk_emu_check_aligned(const T *p) {
    if ((uintptr_t)p & (alignof(T) - 1)) pk_emu::misuse("a load from an address not aligned to its type (__ldg, __ldcg)");
}
template <class T> static inline T __ldg(const T *p) {
    pk_emu_check_aligned(p);
    return *p;
}
/* Skips L1 on the device (reads what other blocks published); one memory here. */
template <class T> static inline T __ldcg(const T *p) {
    pk_emu_check_aligned(p);
    return *p;
}

template <class To, class From> static inline To pk_emu_bits(From v) {
    static_assert(sizeof(To) == sizeof(From), "a reinterpretation keeps the size");
    To t;
    memcpy(&t, &v, sizeof t);
    return t;
}

static inline float __uint_as_float(uint32_t u) { return pk_emu_bits<float>(u); }
static inline uint32_t __float_as_uint(float f) { return pk_emu_bits<uint32_t>(f); }
static inline float __int_as_float(int i) { return pk_emu_bits<float>(i); }
static inline int __float_as_int(float f) { return pk_emu_bits<int>(f); }

/* The host rounds to nearest even, as cvt.rni does. */
static inline int __float2int_rn(float x) { return (int)lrintf(x); }

/* Four byte products added to c: bytes as signed (int) or unsigned (unsigned) values. */
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++)
        c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * k)) * (int8_t)(uint8_t)((uint32_t)b >> (8 * k));
    return c;
}

static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int k = 0; k < 4; k++) c += ((a >> (8 * k)) & 255u) * ((b >> (8 * k)) & 255u);
    return c;
}

namespace pk_emu {
/* mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.u8.s32 with c as both sums (warp-collective):
 * the 16 x 32 bytes of a and 32 x 8 of b gathered from the lanes' fragments in PTX's layout
 * (lane = 4·group + t: a's registers rows group, group + 8, group, group + 8 at columns 4t..4t+3,
 * then 16 + 4t..; b's rows 4t.., 16 + 4t.. of column group; c's elements (group, 2t), (group,
 * 2t + 1), (group + 8, 2t), (group + 8, 2t + 1)), summed exactly in int32 (wrapping). */
static inline void imma_m16n8k32(bool a_signed, int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    struct frag {
        uint32_t a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
    gather(&mine, sizeof mine, all);
    int ma[16][32], mb[32][8];
    for (int lane = 0; lane < 32; lane++) {
        const int grp = lane >> 2, t = lane & 3;
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) {
                const uint8_t byte = (uint8_t)(all[lane].a[r] >> (8 * j));
                ma[grp + 8 * (r & 1)][16 * (r >> 1) + 4 * t + j] = a_signed ? (int)(int8_t)byte : (int)byte;
            }
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 4; j++) mb[16 * r + 4 * t + j][grp] = (int)(uint8_t)(all[lane].b[r] >> (8 * j));
    }
    const int lane = lane_id(), grp = lane >> 2, t = lane & 3;
    for (int k = 0; k < 4; k++) {
        const int row = grp + 8 * (k >> 1), col = 2 * t + (k & 1);
        uint32_t s = (uint32_t)c[k];
        for (int j = 0; j < 32; j++) s += (uint32_t)(ma[row][j] * mb[j][col]);
        c[k] = (int)s;
    }
}
} // namespace pk_emu

/* 1 + the index of the lowest set bit, 0 for 0. */
static inline int __ffs(int x) { return __builtin_ffs(x); }

/* CUDA's documented __byte_perm: byte n of the result is byte (s >> 4n) & 7 of y:x; a selector
 * nibble's bit 3 and s's upper half are unused (nvcc masks them off before its prmt). */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t bytes = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned)((bytes >> (8 * ((s >> (4 * n)) & 7u))) & 255u) << (8 * n);
    return r;
}

/* The emulation builds with -ffp-contract=off, so these round once each as on the device. */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

#endif
