/* cpu: the reference backend. Plain C over host memory, multithreaded through base/pool for
 * the heavy operations. Weights stay where the loader put them (the file's mapping). */
#include "backend/cpu.h"

#include "base/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CPU_ALIGN 64

void *pp_cpu_alloc_aligned(size_t bytes) {
    if (bytes > SIZE_MAX - CPU_ALIGN) return NULL;
    /* aligned_alloc wants a whole number of alignments, and at least one */
    size_t size = bytes ? (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN : CPU_ALIGN;
    return aligned_alloc(CPU_ALIGN, size);
}

static void *cpu_alloc(pp_backend *be, size_t bytes) {
    (void)be;
    void *p = pp_cpu_alloc_aligned(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

static void cpu_release(pp_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static void cpu_upload(pp_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_copy(pp_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(pp_backend *be, void *dst, size_t bytes) {
    (void)be;
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_sync(pp_backend *be) { (void)be; }

/* The mapping outlives every model that uses it, so a CPU weight is the host descriptor. */
static int cpu_weight_upload(pp_backend *be, const pp_weight *host, pp_weight *dev, char *err) {
    (void)be;
    (void)err;
    *dev = *host;
    return PP_OK;
}

static void cpu_weight_release(pp_backend *be, pp_weight *dev) {
    (void)be;
    memset(dev, 0, sizeof *dev);
}

static void cpu_add(pp_backend *be, float *y, const float *x, size_t count) {
    (void)be;
    for (size_t i = 0; i < count; i++) y[i] += x[i];
}

static void cpu_destroy(pp_backend *be) {
    cpu_ctx *ctx = be->impl;
    pp_pool_destroy(ctx->pool);
    pp_cpu_gemv_destroy(ctx->gemv);
    free(ctx);
    free(be);
}

static const pp_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_upload,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .weight_upload = cpu_weight_upload,
    .weight_release = cpu_weight_release,
    .matmul = pp_cpu_matmul,
    .embed = pp_cpu_embed,
    .embed_sum = pp_cpu_embed_sum,
    .add = cpu_add,
    .rmsnorm = pp_cpu_rmsnorm,
    .norm_matmul = pp_cpu_norm_matmul,
    .attn_rows = pp_cpu_attn_rows,
    .matmul_add = pp_cpu_matmul_add,
    .matmul_silu_add = pp_cpu_matmul_silu_add,
    .conv1d = pp_cpu_conv1d,
    .conv_tr1d = pp_cpu_conv_tr1d,
    .elu = pp_cpu_elu,
    .gelu = pp_cpu_gelu,
    .layer_norm = pp_cpu_layer_norm,
    .transpose = pp_cpu_transpose,
    .scale_add = pp_cpu_scale_add,
    .vq_nearest = pp_cpu_vq_nearest,
    .vq_add_row = pp_cpu_vq_add_row,
    .sample = pp_cpu_sample,
};

int pp_backend_cpu_create(int n_threads, pp_backend **out, char *err) {
    pp_backend *be = calloc(1, sizeof *be);
    cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return pp_fail(err, PP_ENOMEM, "cpu backend: out of memory");
    }
    int rc = pp_cpu_simd_detect(&ctx->simd, err);
    if (!rc) rc = pp_pool_create(n_threads, &ctx->pool, err);
    if (!rc) {
        rc = pp_cpu_gemv_create(&ctx->gemv, err);
        if (rc) pp_pool_destroy(ctx->pool);
    }
    if (rc) {
        free(be);
        free(ctx);
        return rc;
    }
    be->ops = &cpu_ops;
    be->impl = ctx;
    *out = be;
    return PP_OK;
}
