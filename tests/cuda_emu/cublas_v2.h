/* cuda_emu: the cuBLAS calls the CUDA backend makes (a handle bound to a stream, SGEMM),
 * enqueued on the emulated stream so a recorded graph replays them too. */
#ifndef PK_EMU_CUBLAS_V2_H
#define PK_EMU_CUBLAS_V2_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
               CUBLAS_STATUS_INVALID_VALUE = 7,
               CUBLAS_STATUS_EXECUTION_FAILED = 13 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef struct pk_emu_blas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
/* The workspace cuBLAS uses instead of allocating its own: device memory of `bytes`. */
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes);
/* Column-major C = alpha·op(A)·op(B) + beta·C, alpha and beta read from the host at the call. */
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k,
                           const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
                           float *c, int ldc);

#ifdef __cplusplus
}
#endif

#endif
