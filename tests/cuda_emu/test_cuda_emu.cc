/* test_cuda_emu: the emulation's own checks, so its power to fail a wrong kernel cannot rot
 * unnoticed: a correct block reduction is right under every schedule, the same kernel without
 * its barrier is wrong under at least one, unwritten shared (a template kernel's and the dynamic
 * buffer too, in every block) and device memory read as NaN,
 * copies outside an allocation and host transfers inside a capture are refused, a recorded
 * graph replays on new data, SGEMM matches a plain product for each transpose, a
 * full-mask shuffle in a partial warp or a programmatic launch that never waits stops the
 * program, the tensor-core fragments (mma.h) multiply TF32 tiles as the device does, the
 * device traffic counter (pk_device_traffic) gives exact bytes per kernel, copy and fill,
 * replays included, and under held stores a last-block merge without its __threadfence (or that
 * picks the last block by index) comes out wrong while one with it, a block's reads of its own
 * stores and atomics stay right; under the host guard a host read of device memory dies as on a
 * GPU; a block's static and dynamic shared memory past 48 KiB, a vector __ldg from an address
 * not aligned to it, or threads of a block at different __syncthreads stop the program. */
#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "kernels.h"
#include "test.h"

#include <mma.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

enum { THREADS = 128 };

/* Thread 0 writes what every thread then reads: with the barrier, or (racy) without it. */
__global__ void broadcast_kernel(const float *x, float *y, int with_barrier) {
    __shared__ float v;
    if (threadIdx.x == 0) v = x[blockIdx.x];
    if (with_barrier) __syncthreads();
    y[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

/* A block sum over warp shuffles; without the final barrier warp 0 reads the partials early. */
__global__ void block_sum_kernel(const float *x, float *y, int with_barrier) {
    __shared__ float part[THREADS / 32];
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    if (with_barrier) __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < THREADS / 32; w++) s += part[w];
        y[blockIdx.x] = s;
    }
}

__global__ void read_unwritten_shared_kernel(float *y) {
    __shared__ float never_written[THREADS];
    y[threadIdx.x] = never_written[threadIdx.x];
}

/* A template kernel's shared variable (GCC keeps it apart from the others' unless the linker
 * gathers it, cuda_emu/shared.ld): the blocks whose bit is set in `writers` write it, then every
 * block reads it. */
template <int N> __global__ void template_shared_kernel(unsigned writers, float *y) {
    __shared__ float buf[N];
    if (writers >> blockIdx.x & 1) buf[threadIdx.x] = 1.0f;
    __syncthreads();
    y[blockIdx.x * N + threadIdx.x] = buf[threadIdx.x];
}

/* The same with the dynamic buffer (THREADS floats). */
__global__ void dynamic_shared_kernel(unsigned writers, float *y) {
    PK_DYNAMIC_SHARED(float, buf);
    if (writers >> blockIdx.x & 1) buf[threadIdx.x] = 1.0f;
    __syncthreads();
    y[blockIdx.x * THREADS + threadIdx.x] = buf[threadIdx.x];
}

__global__ void scale_kernel(const float *x, float k, float *y) { y[threadIdx.x] = k * x[threadIdx.x]; }

static float *device_copy(const float *h, size_t n) {
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof *d) == cudaSuccess)
        cudaMemcpyAsync(d, h, n * sizeof *d, cudaMemcpyHostToDevice, NULL);
    return d;
}

/* Runs `launch` on four consecutive launches (the emulation's four schedules) and counts the
 * launches whose result differs from want. */
template <class F> static int wrong_schedules(F launch, float *y_dev, const float *want, int n) {
    int wrong = 0;
    for (int rep = 0; rep < 4; rep++) {
        float got[1024];
        launch();
        cudaMemcpyAsync(got, y_dev, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, NULL);
        for (int i = 0; i < n; i++)
            if (got[i] != want[i]) {
                wrong++;
                break;
            }
    }
    return wrong;
}

static void test_schedules(void) {
    enum { BLOCKS = 3 };
    float x[BLOCKS * THREADS], want_b[BLOCKS * THREADS], want_s[BLOCKS];
    for (int i = 0; i < BLOCKS * THREADS; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int b = 0; b < BLOCKS; b++) {
        want_s[b] = 0.0f;
        for (int t = 0; t < THREADS; t++) {
            want_b[b * THREADS + t] = x[b];
            want_s[b] += x[b * THREADS + t];
        }
    }
    float *xd = device_copy(x, BLOCKS * THREADS), *yd = device_copy(x, BLOCKS * THREADS);
    for (int with_barrier = 1; with_barrier >= 0; with_barrier--) {
        int wb =
            wrong_schedules([&] { PK_LAUNCH_PLAIN(BLOCKS, THREADS, 0, NULL, broadcast_kernel)
                                  (xd, yd, with_barrier); },
                            yd, want_b, BLOCKS * THREADS);
        int ws =
            wrong_schedules([&] { PK_LAUNCH_PLAIN(BLOCKS, THREADS, 0, NULL, block_sum_kernel)
                                  (xd, yd, with_barrier); },
                            yd, want_s, BLOCKS);
        printf("  %s barrier: broadcast wrong under %d of 4 schedules, block sum under %d of 4\n",
               with_barrier ? "with its" : "without the", wb, ws);
        TEST_COND(with_barrier ? "broadcast right under every schedule" : "missing barrier (broadcast) caught",
                  with_barrier ? wb == 0 : wb > 0);
        TEST_COND(with_barrier ? "block sum right under every schedule" : "missing barrier (block sum) caught",
                  with_barrier ? ws == 0 : ws > 0);
    }
    cudaFree(xd);
    cudaFree(yd);
}

static void test_unwritten_memory(void) {
    float *d = NULL, h[THREADS];
    TEST_COND("cudaMalloc", cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("fresh device memory reads as NaN", h[0] != h[0] && h[THREADS - 1] != h[THREADS - 1]);
    PK_LAUNCH_PLAIN(1, THREADS, 0, NULL, read_unwritten_shared_kernel)(d);
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, NULL);
    int nan = 0;
    for (int i = 0; i < THREADS; i++) nan += h[i] != h[i];
    TEST_COND("unwritten shared memory reads as NaN", nan == THREADS);
    /* Block 0 writes the template kernel's buffer, block 1 reads it unwritten: NaN, not block 0's
     * values, nor zeros in a first launch that writes nothing. */
    float *d2 = NULL, h2[2 * THREADS];
    cudaMalloc((void **)&d2, sizeof h2);
    int template_nan[2] = {0, 0};
    for (unsigned writers = 0; writers < 2; writers++) {
        PK_LAUNCH_PLAIN(2, THREADS, 0, NULL, template_shared_kernel<THREADS>)(writers, d2);
        cudaMemcpyAsync(h2, d2, sizeof h2, cudaMemcpyDeviceToHost, NULL);
        for (int i = 0; i < THREADS; i++) template_nan[writers] += h2[THREADS + i] != h2[THREADS + i];
    }
    printf("  template kernel: unwritten shared floats read as NaN %d and %d of %d (a first launch; after "
           "a block that wrote them)\n",
           template_nan[0], template_nan[1], THREADS);
    TEST_COND("a template kernel's unwritten shared memory reads as NaN, in every block",
              template_nan[0] == THREADS && template_nan[1] == THREADS);
    PK_LAUNCH_PLAIN(2, THREADS, THREADS * sizeof(float), NULL, dynamic_shared_kernel)(1u, d2);
    cudaMemcpyAsync(h2, d2, sizeof h2, cudaMemcpyDeviceToHost, NULL);
    int dynamic_nan = 0;
    for (int i = 0; i < THREADS; i++) dynamic_nan += h2[THREADS + i] != h2[THREADS + i];
    printf("  dynamic shared memory: %d of %d floats read as NaN in the block after one that wrote them\n",
           dynamic_nan, THREADS);
    TEST_COND("unwritten dynamic shared memory reads as NaN in every block", dynamic_nan == THREADS);
    cudaFree(d2);
    TEST_COND("a copy past the allocation is refused",
              cudaMemcpyAsync(h, d + 1, sizeof h, cudaMemcpyDeviceToHost, NULL) == cudaErrorInvalidValue);
    TEST_COND("a device pointer given as host is refused",
              cudaMemcpyAsync(d, d, 4, cudaMemcpyHostToDevice, NULL) == cudaErrorInvalidValue);
    TEST_COND("a launch of 1025 threads is refused", (PK_LAUNCH_PLAIN(1, 1025, 0, NULL, scale_kernel)(d, 1.0f, d),
                                                      cudaGetLastError() == cudaErrorInvalidConfiguration));
    cudaFree(d);
}

static void test_graph(void) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float h[32], out[32];
    for (int i = 0; i < 32; i++) h[i] = (float)i;
    float *x = device_copy(h, 32), *y = device_copy(h, 32);
    cudaGraph_t g;
    cudaGraphExec_t exec;

    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    TEST_COND("a host transfer inside a capture is refused",
              cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, s) == cudaErrorStreamCaptureUnsupported);
    TEST_COND("... and spoils the capture", cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);

    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    PK_LAUNCH_PLAIN(1, 32, 0, s, scale_kernel)(x, 2.0f, y);
    TEST_COND("capture ends", cudaStreamEndCapture(s, &g) == cudaSuccess);
    TEST_COND("instantiate", cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
    cudaMemcpyAsync(y, h, sizeof h, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(out, y, sizeof out, cudaMemcpyDeviceToHost, s);
    TEST_COND("recording ran nothing", out[5] == 5.0f);
    for (int i = 0; i < 32; i++) h[i] = (float)(100 + i);
    cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, s); /* new input, then replay */
    TEST_COND("replay", cudaGraphLaunch(exec, s) == cudaSuccess);
    cudaMemcpyAsync(out, y, sizeof out, cudaMemcpyDeviceToHost, s);
    TEST_COND("the replay read the new input", out[5] == 210.0f && out[31] == 262.0f);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(s);
}

static void test_sgemm(void) {
    enum { M = 5, N = 3, K = 4 };
    float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)(i % 3) + 0.5f;
    float *ad = device_copy(a, M * K), *bd = device_copy(b, K * N), *cd = device_copy(c, M * N);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1.0f, zero = 0.0f;
    /* The same product with A stored as M×K (op N, lda M) and as K×M transposed (op T, lda K). */
    for (int ta = 0; ta < 2; ta++) {
        float at[M * K];
        for (int i = 0; i < M; i++)
            for (int p = 0; p < K; p++) at[ta ? i * K + p : p * M + i] = a[p * M + i];
        cudaMemcpyAsync(ad, at, sizeof at, cudaMemcpyHostToDevice, NULL);
        cublasStatus_t st = cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, ad,
                                        ta ? K : M, bd, K, &zero, cd, M);
        cudaMemcpyAsync(c, cd, sizeof c, cudaMemcpyDeviceToHost, NULL);
        int ok = st == CUBLAS_STATUS_SUCCESS;
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                float want = 0.0f;
                for (int p = 0; p < K; p++) want += a[p * M + i] * b[j * K + p];
                ok &= c[j * M + i] == want;
            }
        TEST_COND(ta ? "sgemm, A transposed" : "sgemm, A as stored", ok);
    }
    TEST_COND("sgemm past an operand is refused", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K + 1, &one, ad, M,
                                                               bd, K + 1, &zero, cd, M) != CUBLAS_STATUS_SUCCESS);
    cublasDestroy(h);
    cudaFree(ad);
    cudaFree(bd);
    cudaFree(cd);
}

__global__ void partial_warp_sum_kernel(float *y) {
    float v = 1.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    y[threadIdx.x] = v;
}

/* Whether run(), in a child, stops the program (the emulation aborts rather than compute an
 * answer the device would leave undefined). */
template <class F> static bool stops_the_run(F run) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        run();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void test_partial_warp_stops(void) {
    TEST_COND("a full-mask shuffle in a 16-lane warp stops the run", stops_the_run([] {
                  float *d = NULL;
                  cudaMalloc((void **)&d, 48 * sizeof *d);
                  PK_LAUNCH_PLAIN(1, 48, 0, NULL, partial_warp_sum_kernel)(d);
              }));
}

/* Threads below `split` pass a barrier of their own before the common one: on a device the others'
 * first barrier is then that one (or the block hangs). */
__global__ void divergent_barrier_kernel(float *y, int split) {
    if ((int)threadIdx.x < split) {
        y[threadIdx.x] = 1.0f;
        __syncthreads();
    }
    __syncthreads();
    y[threadIdx.x] = 2.0f;
}

static void test_divergent_barrier(void) {
    float *d = NULL, y[64] = {0};
    cudaMalloc((void **)&d, sizeof y);
    PK_LAUNCH_PLAIN(1, 64, 0, NULL, divergent_barrier_kernel)(d, 0);
    cudaMemcpyAsync(y, d, sizeof y, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("a barrier every thread reaches runs", y[0] == 2.0f && y[63] == 2.0f);
    TEST_COND("a __syncthreads only 32 of 64 threads reach stops the run", stops_the_run([d] {
                  PK_LAUNCH_PLAIN(1, 64, 0, NULL, divergent_barrier_kernel)(d, 32);
              }));
    cudaFree(d);
}

__global__ void waiting_kernel(float *y) {
    pk_grid_wait();
    y[threadIdx.x] = 1.0f;
}

/* A programmatic launch (PK_LAUNCH) runs when its kernel calls pk_grid_wait, and stops the run
 * (in a child) when the kernel never does: on a device it would race the kernel before it. */
static void test_programmatic_launch(void) {
    float *d = NULL, y[32] = {0};
    cudaMalloc((void **)&d, 32 * sizeof *d);
    PK_LAUNCH(1, 32, 0, NULL, waiting_kernel)(d);
    cudaMemcpyAsync(y, d, sizeof y, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("a programmatic launch that waits runs", y[0] == 1.0f && y[31] == 1.0f);
    TEST_COND("a programmatic launch whose kernel never waits stops the run",
              stops_the_run([d] { PK_LAUNCH(1, 32, 0, NULL, scale_kernel)
                                  (d, 2.0f, d); }));
    cudaFree(d);
}

/* Writes a static buffer of `statics` floats (at most 8192: 32 KiB) and, after it, touches the
 * dynamic buffer's first float. */
__global__ void shared_use_kernel(float *y, int statics) {
    __shared__ float big[8192];
    PK_DYNAMIC_SHARED(float, dyn);
    for (int i = threadIdx.x; i < statics; i += blockDim.x) big[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) dyn[0] = big[statics - 1], y[0] = dyn[0];
}

/* A device refuses a block more than 48 KiB of static and dynamic shared memory together (unless
 * the kernel opts in): 32 KiB of statics with 8 KiB dynamic runs, with 20 KiB dynamic stops the
 * run, as do 49 KiB dynamic alone (refused at the launch). */
static void test_shared_limit(void) {
    float *d = NULL, y = 0.0f;
    cudaMalloc((void **)&d, sizeof *d);
    cudaGetLastError(); /* the earlier tests' refused calls */
    PK_LAUNCH_PLAIN(2, 64, 8 * 1024, NULL, shared_use_kernel)(d, 8192);
    cudaMemcpyAsync(&y, d, sizeof y, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("32 KiB of static and 8 KiB of dynamic shared memory run", cudaGetLastError() == cudaSuccess && y == 8191.0f);
    TEST_COND("32 KiB of static and 20 KiB of dynamic shared memory stop the run", stops_the_run([d] {
                  PK_LAUNCH_PLAIN(2, 64, 20 * 1024, NULL, shared_use_kernel)(d, 8192);
              }));
    PK_LAUNCH_PLAIN(1, 64, 49 * 1024, NULL, shared_use_kernel)(d, 1);
    TEST_COND("49 KiB of dynamic shared memory are refused", cudaGetLastError() == cudaErrorInvalidConfiguration);
    cudaFree(d);
}

/* Each thread loads a float4 with __ldg from x + offset floats onward. */
__global__ void vector_load_kernel(const float *x, int offset, float *y) {
    const float4 v = __ldg((const float4 *)(x + offset) + threadIdx.x);
    y[threadIdx.x] = v.x + v.y + v.z + v.w;
}

/* A float4 load from an address 16-byte aligned runs; one float further (4-byte aligned, as a
 * row of an odd width gives) faults on a device, and stops the run here. */
static void test_misaligned_load(void) {
    float *x = NULL, *y = NULL, h[36], got[8] = {0};
    for (int i = 0; i < 36; i++) h[i] = (float)i;
    x = device_copy(h, 36);
    cudaMalloc((void **)&y, sizeof got);
    PK_LAUNCH_PLAIN(1, 8, 0, NULL, vector_load_kernel)(x, 4, y);
    cudaMemcpyAsync(got, y, sizeof got, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("an aligned float4 __ldg runs", got[0] == 4 + 5 + 6 + 7 && got[7] == 32 + 33 + 34 + 35);
    TEST_COND("a float4 __ldg from a 4-byte-aligned address stops the run", stops_the_run([x, y] {
                  PK_LAUNCH_PLAIN(1, 8, 0, NULL, vector_load_kernel)(x, 1, y);
              }));
    cudaFree(x);
    cudaFree(y);
}

/* c [16][16] = a [16][8] (row-major) · b [8][16] (stored column by column) on the emulated
 * tensor cores, the operands staged in shared memory at offset `skew` floats (0: aligned);
 * round: each operand element through __float_to_tf32 first. */
__global__ void wmma_kernel(const float *a, const float *b, float *c, int round, int skew) {
    using namespace nvcuda;
    __shared__ __align__(32) float sa[16 * 8 + 8], sb[8 * 16 + 8];
    for (int i = threadIdx.x; i < 128; i += 32) sa[skew + i] = a[i], sb[skew + i] = b[i];
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, sa + skew, 8);
    wmma::load_matrix_sync(fb, sb + skew, 8);
    for (int t = 0; round && t < fa.num_elements; t++) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    for (int t = 0; round && t < fb.num_elements; t++) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
    wmma::fill_fragment(fc, 0.0f);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

/* The emulated tensor cores: a product of TF32 values is exact; an operand with bits below
 * TF32's loses them unless rounded first (as on the device); a misaligned tile or a partial
 * warp stops the run. */
static void test_wmma(void) {
    float a[128], b[128], c[256];
    for (int i = 0; i < 128; i++) a[i] = (float)(i % 13) - 6.0f, b[i] = (float)(i % 7) * 0.25f - 0.5f;
    float *ad = device_copy(a, 128), *bd = device_copy(b, 128), *cd = device_copy(c, 256);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, wmma_kernel)(ad, bd, cd, 0, 0);
    cudaMemcpyAsync(c, cd, sizeof c, cudaMemcpyDeviceToHost, NULL);
    bool exact = true;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float want = 0.0f;
            for (int k = 0; k < 8; k++) want += a[i * 8 + k] * b[j * 8 + k];
            exact &= c[i * 16 + j] == want;
        }
    TEST_COND("wmma: a product of TF32 tiles is exact", exact);
    const float fine = 1.0f + 0x3p-12f; /* 3/4 of a TF32 step above 1: rounds up to 1 + 2^-10 */
    for (int i = 0; i < 128; i++) a[i] = fine, b[i] = 1.0f;
    cudaMemcpyAsync(ad, a, sizeof a, cudaMemcpyHostToDevice, NULL);
    cudaMemcpyAsync(bd, b, sizeof b, cudaMemcpyHostToDevice, NULL);
    float got[2];
    for (int round = 0; round < 2; round++) {
        PK_LAUNCH_PLAIN(1, 32, 0, NULL, wmma_kernel)(ad, bd, cd, round, 0);
        cudaMemcpyAsync(&got[round], cd + 17, sizeof(float), cudaMemcpyDeviceToHost, NULL);
    }
    printf("  wmma: 8 x (1 + 3·2^-12) read unrounded %.9g, rounded %.9g\n", got[0], got[1]);
    TEST_COND("wmma: an operand not rounded to TF32 loses its low bits", got[0] == 8.0f);
    TEST_COND("wmma: __float_to_tf32 rounds to nearest", got[1] == 8.0f * (1.0f + 0x1p-10f));
    TEST_COND("wmma: a tile that is not 32-byte aligned stops the run",
              stops_the_run([=] { PK_LAUNCH_PLAIN(1, 32, 0, NULL, wmma_kernel)
                                  (ad, bd, cd, 0, 4); }));
    TEST_COND("wmma: a partial warp stops the run",
              stops_the_run([=] { PK_LAUNCH_PLAIN(1, 16, 0, NULL, wmma_kernel)
                                  (ad, bd, cd, 0, 0); }));
    cudaFree(ad);
    cudaFree(bd);
    cudaFree(cd);
}

/* Thread 0 reads n_in bytes of in, then writes n_out bytes of out (in and out may overlap). */
__global__ void traffic_kernel(const unsigned char *in, int n_in, unsigned char *out, int n_out) {
    if (threadIdx.x) return;
    const volatile unsigned char *v = in; /* every byte is read even when nothing uses the sum */
    unsigned sum = 0;
    for (int i = 0; i < n_in; i++) sum += v[i];
    for (int i = 0; i < n_out; i++) out[i] = (unsigned char)(sum + (unsigned)i);
}

struct counted_item {
    std::string name;
    uint64_t read, written;
};

static void collect(void *arg, const char *name, uint64_t read, uint64_t written) {
    ((std::vector<counted_item> *)arg)->push_back(counted_item{name, read, written});
}

static std::vector<counted_item> traffic_since_last(void) {
    std::vector<counted_item> items;
    pk_device_traffic(collect, &items);
    return items;
}

static int item_is(const std::vector<counted_item> &v, size_t i, const char *name, uint64_t read, uint64_t written) {
    if (i < v.size() && v[i].name == name && v[i].read == read && v[i].written == written) return 1;
    printf("  item %zu: want %s %llu read %llu written, got %s %llu %llu\n", i, name, (unsigned long long)read,
           (unsigned long long)written, i < v.size() ? v[i].name.c_str() : "(none)",
           i < v.size() ? (unsigned long long)v[i].read : 0, i < v.size() ? (unsigned long long)v[i].written : 0);
    return 0;
}

/* Counting, once on, stays on for the process: test_held_stores, after it, relies on that. */
static void test_traffic(void) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), in_bytes = 3 * page + 100;
    unsigned char *before = NULL, *in = NULL, *out = NULL, *a = NULL, *b = NULL, h[5000], back[5000];
    cudaMalloc((void **)&before, 100);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(before, 100, before, 100);
    TEST_COND("counting off counts nothing; the first call starts counting", traffic_since_last().empty());

    cudaMalloc((void **)&in, in_bytes);
    cudaMalloc((void **)&out, 1000);
    cudaMalloc((void **)&a, sizeof h);
    cudaMalloc((void **)&b, sizeof h);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(in, (int)in_bytes, out, 1000);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(in, 1, in + 3 * page, 1);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(out, 1000, out, 1000);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(before, 100, before, 100);
    std::vector<counted_item> v = traffic_since_last();
    TEST_COND("a kernel reading 3 pages + 100 bytes and writing 1000 bytes counts exactly those",
              v.size() == 4 && item_is(v, 0, "traffic_kernel", in_bytes, 1000));
    TEST_COND("a byte counts its whole page, up to the allocation's end",
              v.size() == 4 && item_is(v, 1, "traffic_kernel", page, 100));
    TEST_COND("a page read then written counts both ways",
              v.size() == 4 && item_is(v, 2, "traffic_kernel", 1000, 1000));
    TEST_COND("memory allocated before counting began is not counted",
              v.size() == 4 && item_is(v, 3, "traffic_kernel", 0, 0));

    for (size_t i = 0; i < sizeof h; i++) h[i] = (unsigned char)(i * 7);
    cudaMemcpyAsync(a, h, sizeof h, cudaMemcpyHostToDevice, NULL);
    cudaMemcpyAsync(b, a, sizeof h, cudaMemcpyDeviceToDevice, NULL);
    cudaMemcpyAsync(back, b, sizeof back, cudaMemcpyDeviceToHost, NULL);
    cudaMemsetAsync(a, 0, sizeof h, NULL);
    v = traffic_since_last();
    TEST_COND("copies count their device sides, a fill what it writes",
              v.size() == 4 && item_is(v, 0, "memcpy host to device", 0, sizeof h) &&
                  item_is(v, 1, "memcpy device to device", sizeof h, sizeof h) &&
                  item_is(v, 2, "memcpy device to host", sizeof h, 0) && item_is(v, 3, "memset", 0, sizeof h));
    TEST_COND("counted copies move the data", memcmp(h, back, sizeof h) == 0);

    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    PK_LAUNCH_PLAIN(1, 32, 0, s, traffic_kernel)(in, (int)in_bytes, out, 1000);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&exec, g, 0);
    TEST_COND("recording counts nothing", traffic_since_last().empty());
    cudaGraphLaunch(exec, s);
    cudaGraphLaunch(exec, s);
    v = traffic_since_last();
    TEST_COND("each replay counts again", v.size() == 2 && item_is(v, 0, "traffic_kernel", in_bytes, 1000) &&
                                              item_is(v, 1, "traffic_kernel", in_bytes, 1000));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);

    /* A fault outside counted memory still ends the run (the default action, or ASan's report). */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(2);
        void *closed = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (closed != MAP_FAILED) *(volatile int *)closed = 1;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    TEST_COND("a stray access still faults while counting", !(WIFEXITED(status) && WEXITSTATUS(status) == 0));

    unsigned char *ptrs[] = {before, in, out, a, b};
    for (unsigned char *p : ptrs) cudaFree(p);
    cudaMalloc((void **)&a, 100);
    PK_LAUNCH_PLAIN(1, 32, 0, NULL, traffic_kernel)(a, 0, a, 100);
    v = traffic_since_last();
    TEST_COND("after frees, a new allocation counts from scratch",
              v.size() == 1 && item_is(v, 0, "traffic_kernel", 0, 100));
    cudaFree(a);
}

enum { MERGE_BLOCKS = 8 };
enum merge_kind { FENCED, UNFENCED, BY_INDEX }; /* the last two are wrong */

/* The last-block pattern: each block sums its slice of x into partial[block], fences (except
 * UNFENCED) and draws a ticket; the block that draws the last (BY_INDEX: the last by index)
 * merges the partials into *out and resets the counter for the next launch. */
__global__ void last_block_sum_kernel(const float *x, float *partial, unsigned *counter, float *out, int kind) {
    __shared__ float part[THREADS / 32];
    __shared__ unsigned ticket;
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < THREADS / 32; w++) s += part[w];
        partial[blockIdx.x] = s;
        if (kind != UNFENCED) __threadfence();
        ticket = atomicAdd(counter, 1u);
    }
    __syncthreads();
    if ((kind == BY_INDEX ? blockIdx.x : ticket) != gridDim.x - 1 || threadIdx.x) return;
    float s = 0.0f;
    for (unsigned b = 0; b < gridDim.x; b++) s += __ldcg(&partial[b]);
    *out = s;
    atomicExch(counter, 0u);
}

/* buf: the counter, then per block its stored value, its ticket and what it read back. Block b
 * stores b + 1 and draws a ticket from the counter in the same page (even blocks store first,
 * odd ones draw first, so the atomic meets a page held before it and one it holds itself). */
__global__ void own_stores_kernel(unsigned *buf) {
    unsigned *counter = buf, *stored = buf + 1, *ticket = stored + gridDim.x, *read_back = ticket + gridDim.x;
    unsigned b = blockIdx.x;
    if (threadIdx.x == 0) {
        if (b % 2) ticket[b] = atomicAdd(counter, 1u);
        stored[b] = b + 1;
        if (b % 2 == 0) ticket[b] = atomicAdd(counter, 1u);
    }
    __syncthreads();
    if (threadIdx.x == 32) read_back[b] = stored[b];
}

/* Held stores: with PK_EMU_HELD_STORES=1 every launch holds stores (ctest's cuda_emu_self_held),
 * without it none does, and every other holding launch takes the blocks in descending order: a
 * merge without its fence then reads the stale partials (zeros), one by index the partials of
 * the blocks that come after it. */
static void test_held_stores(void) {
    const char *env = getenv("PK_EMU_HELD_STORES");
    const int holding_per_4 = env && strcmp(env, "1") == 0 ? 4 : 0;
    float x[MERGE_BLOCKS * THREADS], zeros[MERGE_BLOCKS] = {0}, want = 0.0f, got = 0.0f;
    for (int i = 0; i < MERGE_BLOCKS * THREADS; i++) want += x[i] = (float)(i % 5 + 1);
    float *xd = device_copy(x, MERGE_BLOCKS * THREADS), *partial = device_copy(zeros, MERGE_BLOCKS),
          *out = device_copy(zeros, 1);
    unsigned *counter = NULL, count = 1;
    cudaMalloc((void **)&counter, sizeof *counter);
    cudaMemsetAsync(counter, 0, sizeof *counter, NULL);
    auto merge = [&](cudaStream_t s, merge_kind kind) {
        cudaMemsetAsync(partial, 0, MERGE_BLOCKS * sizeof *partial, s); /* the stale partials */
        PK_LAUNCH_PLAIN(MERGE_BLOCKS, THREADS, 0, s, last_block_sum_kernel)(xd, partial, counter, out, kind);
    };
    int wrong[3];
    for (int kind = FENCED; kind <= UNFENCED; kind++)
        wrong[kind] = wrong_schedules([&] { merge(NULL, (merge_kind)kind); }, out, &want, 1);
    cudaMemcpyAsync(&count, counter, sizeof count, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("the last block resets the counter", count == 0);
    wrong[BY_INDEX] = wrong_schedules(
        [&] {
            cudaMemsetAsync(counter, 0, sizeof *counter, NULL); /* the wrong block may reset it early */
            merge(NULL, BY_INDEX);
        },
        out, &want, 1);
    printf("  last-block merge wrong under %d, %d and %d of 4 launches (%d of them holding stores) with its "
           "fence, without it, by index\n",
           wrong[FENCED], wrong[UNFENCED], wrong[BY_INDEX], holding_per_4);
    TEST_COND("a last-block merge with its fence is right under held stores and without", wrong[FENCED] == 0);
    TEST_COND("a missing fence is caught under held stores, and only there", wrong[UNFENCED] == holding_per_4);
    TEST_COND("a merge by the last block index is caught when blocks run descending",
              wrong[BY_INDEX] == holding_per_4 / 2);

    /* Replays of a recorded merge: each one resets the counter for the next. */
    cudaMemsetAsync(counter, 0, sizeof *counter, NULL);
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    merge(s, FENCED);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&exec, g, 0);
    int right = 0;
    for (int rep = 0; rep < 4; rep++) {
        cudaMemsetAsync(out, 0, sizeof *out, NULL);
        cudaGraphLaunch(exec, s);
        cudaMemcpyAsync(&got, out, sizeof got, cudaMemcpyDeviceToHost, NULL);
        right += got == want;
    }
    cudaMemcpyAsync(&count, counter, sizeof count, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("a replayed last-block merge is right every time", right == 4 && count == 0);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);

    /* Holding stores changes no traffic figure. */
    traffic_since_last();
    for (int rep = 0; rep < 4; rep++) merge(NULL, FENCED);
    std::vector<counted_item> v = traffic_since_last(), kernels;
    for (const counted_item &item : v)
        if (item.name == "last_block_sum_kernel") kernels.push_back(item);
    bool same = kernels.size() == 4;
    for (size_t i = 1; same && i < kernels.size(); i++)
        same = kernels[i].read == kernels[0].read && kernels[i].written == kernels[0].written;
    TEST_COND("held stores count the same traffic as plain launches", same && kernels[0].written > 0);

    enum { BLOCKS = 16, WORDS = 1 + 3 * BLOCKS };
    unsigned *buf = NULL, h[WORDS];
    cudaMalloc((void **)&buf, sizeof h);
    int right_own = 0, right_atomic = 0;
    for (int rep = 0; rep < 4; rep++) {
        cudaMemsetAsync(buf, 0, sizeof h, NULL);
        PK_LAUNCH_PLAIN(BLOCKS, 64, 0, NULL, own_stores_kernel)(buf);
        cudaMemcpyAsync(h, buf, sizeof h, cudaMemcpyDeviceToHost, NULL);
        unsigned drawn = 0; /* a bit per ticket */
        bool own = true;
        for (unsigned b = 0; b < BLOCKS; b++) {
            own &= h[1 + b] == b + 1 && h[1 + 2 * BLOCKS + b] == b + 1;
            if (h[1 + BLOCKS + b] < BLOCKS) drawn |= 1u << h[1 + BLOCKS + b];
        }
        right_own += own;
        right_atomic += h[0] == BLOCKS && drawn == (1u << BLOCKS) - 1;
    }
    TEST_COND("a block reads its own stores", right_own == 4);
    TEST_COND("atomics are never held: every block draws its own ticket", right_atomic == 4);
    cudaFree(buf);
    cudaFree(xd);
    cudaFree(partial);
    cudaFree(out);
    cudaFree(counter);
}

/* With PK_EMU_HOST_GUARD=1 (ctest's cuda_emu_self_held) host code that reads device memory
 * through a pointer dies with SIGSEGV, as on a GPU, while kernels and copies still reach it;
 * without it the read succeeds (device memory is host memory here). */
static void test_host_guard(void) {
    const char *env = getenv("PK_EMU_HOST_GUARD");
    const bool guarded = env && strcmp(env, "1") == 0;
    float x[THREADS], y[THREADS] = {0};
    for (int i = 0; i < THREADS; i++) x[i] = (float)i;
    float *xd = device_copy(x, THREADS), *yd = NULL;
    cudaMalloc((void **)&yd, sizeof y);
    PK_LAUNCH_PLAIN(1, THREADS, 0, NULL, scale_kernel)(xd, 2.0f, yd);
    cudaMemcpyAsync(y, yd, sizeof y, cudaMemcpyDeviceToHost, NULL);
    TEST_COND("kernels and copies reach device memory", y[5] == 10.0f);
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        volatile float host_read = yd[5]; /* what a download without cudaMemcpy does */
        (void)host_read;
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    const bool died = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
    TEST_COND(guarded ? "under the host guard a host read of device memory dies with SIGSEGV"
                      : "without the host guard a host read of device memory succeeds",
              died == guarded);
    cudaFree(xd);
    cudaFree(yd);
}

int main(void) {
    test_schedules();
    test_unwritten_memory();
    test_graph();
    test_sgemm();
    test_partial_warp_stops();
    test_divergent_barrier();
    test_programmatic_launch();
    test_wmma();
    test_shared_limit();
    test_misaligned_load();
    test_traffic();
    test_held_stores();
    test_host_guard();
    return test_report();
}
