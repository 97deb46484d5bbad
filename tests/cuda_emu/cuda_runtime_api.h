/* cuda_emu: the part of the CUDA runtime API that src/backend/cuda.c and kernels/ use, run on
 * the CPU (tests/cuda_emu/emu.cc). It lets CI, which has no GPU, execute the CUDA backend's
 * host code and every kernel: launches run block by block, each block's threads as fibers
 * that meet at __syncthreads and warp shuffles; graphs record and replay the stream's work.
 * Device memory is host memory the emulator tracks, so copies are bounds-checked and the
 * sanitizers see kernel accesses. Only the build's emulation tests include this directory;
 * names and values follow the CUDA 12 runtime. */
#ifndef PK_EMU_CUDA_RUNTIME_API_H
#define PK_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorGraphExecUpdateFailure = 910,
    cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };

/* PK_EMU_INTEGRATED=1 in the environment makes the emulated device an integrated one (as a
 * Jetson's): registered host memory is then what the backend reads weights from in place. */
enum cudaDeviceAttr {
    cudaDevAttrIntegrated = 18,
    cudaDevAttrCanUseHostPointerForRegisteredMem = 91,
    cudaDevAttrHostRegisterReadOnlySupported = 113
};

#define cudaHostRegisterMapped 0x02u
#define cudaHostRegisterReadOnly 0x08u
#define cudaStreamNonBlocking 0x01u
#define cudaEventDisableTiming 0x02u

typedef struct pk_emu_stream *cudaStream_t;
typedef struct pk_emu_event *cudaEvent_t;
typedef struct pk_emu_graph *cudaGraph_t;
typedef struct pk_emu_graph *cudaGraphExec_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
    int integrated;
};

/* What a pointer is: plain host memory (unregistered), pinned or registered host memory, device. */
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
};

typedef struct cudaGraphExecUpdateResultInfo {
    int result;
    void *errorNode, *errorFromNode;
} cudaGraphExecUpdateResultInfo;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr, unsigned flags);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr);

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo *info);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);

/* Test hooks (the emulation's own, no CUDA API): make a call fail as a device can, to drive the
 * backend's error paths. pk_emu_fail_nth(call, n): the n-th call of that kind from now (1: the
 * next) fails once, with the error a device gives for it (out of memory for allocations and
 * instantiation, a launch failure for work and synchronisation, an invalidated capture for
 * cudaStreamEndCapture); n 0 cancels. pk_emu_fail_pending: the calls still to come before the
 * chosen one, itself included (0: it failed, or none is chosen). pk_emu_live_objects: the
 * allocations (device and pinned),
 * streams, events, graphs and cuBLAS handles alive, to find leaks. */
enum pk_emu_call {
    PK_EMU_MALLOC,        /* cudaMalloc */
    PK_EMU_MALLOC_HOST,   /* cudaMallocHost */
    PK_EMU_CREATE,        /* cudaStreamCreateWithFlags, cudaEventCreateWithFlags, cublasCreate */
    PK_EMU_COPY,          /* cudaMemcpyAsync */
    PK_EMU_SET,           /* cudaMemsetAsync */
    PK_EMU_LAUNCH,        /* a kernel launch */
    PK_EMU_GEMM,          /* cublasSgemm */
    PK_EMU_SYNC,          /* cudaStreamSynchronize, cudaEventSynchronize */
    PK_EMU_BEGIN_CAPTURE, /* cudaStreamBeginCapture */
    PK_EMU_END_CAPTURE,   /* cudaStreamEndCapture */
    PK_EMU_INSTANTIATE,   /* cudaGraphInstantiate */
    PK_EMU_GRAPH_LAUNCH,  /* cudaGraphLaunch */
    PK_EMU_CALLS
};
void pk_emu_fail_nth(enum pk_emu_call call, long nth);
long pk_emu_fail_pending(enum pk_emu_call call);
long pk_emu_live_objects(void);

#ifdef __cplusplus
}
#endif

#endif
