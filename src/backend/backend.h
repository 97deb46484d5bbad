/* backend: the table of operations the model code runs on, and nothing else.
 *
 * Model code (src/model) holds a `pp_backend *` and calls be->ops->X(be, ...); it never
 * knows which backend runs it. Activation and state buffers live in backend memory (device
 * memory for CUDA) and are only read on the host through download. Every pointer argument
 * below is backend memory unless its comment says "host". Operations are asynchronous on a
 * device backend: results are ready after sync or download. The CPU backend (cpu.c) is
 * complete and is the reference the others are checked against; a NULL entry means the
 * backend lacks that operation (parity tests report it as skipped).
 *
 * Shapes: a "[n][d]" buffer is n rows of d floats, row-major. */
#ifndef PP_BACKEND_BACKEND_H
#define PP_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "io/weight.h"

typedef struct pp_backend pp_backend;

typedef struct pp_backend_ops {
    const char *name; /* "cpu", "cuda" */

    /* ---- memory ---- */
    void *(*alloc)(pp_backend *be, size_t bytes); /* zero-filled; NULL when out of memory */
    void (*release)(pp_backend *be, void *ptr);
    void (*upload)(pp_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(pp_backend *be, void *host_dst, const void *src, size_t bytes); /* waits */
    void (*copy)(pp_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(pp_backend *be, void *dst, size_t bytes);
    void (*sync)(pp_backend *be);

    /* ---- weights ---- */
    /* Copies a host weight (pointers into an mmap) into backend memory, filling dev with the
     * same descriptor and backend pointers. The CPU backend keeps the host pointers. */
    int (*weight_upload)(pp_backend *be, const pp_weight *host, pp_weight *dev, char *err);
    void (*weight_release)(pp_backend *be, pp_weight *dev);

    /* ---- linear algebra ---- */
    /* y[n][w.rows] = x[n][w.cols] · wᵀ, for every weight format, without a dequantized copy. */
    void (*matmul)(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
    /* y[i][:] (+)= table row ids[i] for i < n; ids are host int32. accumulate=0 overwrites. */
    void (*embed)(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate);
    /* y[i] += x[i] for i < count. */
    void (*add)(pp_backend *be, float *y, const float *x, size_t count);

    /* ---- LM operations (model/lm.c, model/depformer.c) ---- */

    /* ---- codec operations (model/mimi.c, model/seanet.c, model/quantizer.c) ---- */
} pp_backend_ops;

struct pp_backend {
    const pp_backend_ops *ops;
    void *impl; /* backend-private context */
};

/* CPU backend with n_threads threads (0: one per online CPU). */
int pp_backend_cpu_create(int n_threads, pp_backend **out, char *err);
/* CUDA backend on device `device`; PP_EUNSUPPORTED when built without CUDA or no GPU. */
int pp_backend_cuda_create(int device, pp_backend **out, char *err);
/* Picks by name ("cpu", "cuda", or "auto": CUDA when a GPU is present, else CPU). */
int pp_backend_create(const char *name, int n_threads, pp_backend **out, char *err);
void pp_backend_destroy(pp_backend *be);

#endif
