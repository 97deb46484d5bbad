/* codec_arena: see codec_arena.h. */
#include "model/codec_arena.h"

#include "base/err.h"

#include <stdlib.h>

#define ALIGN_FLOATS 16 /* 64 bytes: a cache line, and an AVX-512 vector */

void pp_codec_arena_init(codec_arena *a, pp_backend *be) {
    a->be = be;
    a->base = NULL;
    a->used = a->cap = 0;
    a->catalog = NULL;
    a->catalog_conv = NULL;
    a->catalog_ctx = NULL;
}

int pp_codec_arena_sizing(const codec_arena *a) { return a->base == NULL; }

int pp_codec_arena_alloc(codec_arena *a, const char *what, char *err) {
    size_t n = a->used ? a->used : 1;
    a->base = a->be->ops->alloc(a->be, n * sizeof(float));
    if (!a->base) return pp_fail(err, PP_ENOMEM, "%s: cannot allocate %zu MB", what, n * sizeof(float) >> 20);
    a->cap = n;
    a->used = 0;
    return PP_OK;
}

void pp_codec_arena_free(codec_arena *a) {
    if (a->base) a->be->ops->release(a->be, a->base);
    a->base = NULL;
    a->used = a->cap = 0;
}

size_t pp_codec_arena_reserve(codec_arena *a, size_t n) {
    size_t at = a->used;
    a->used += (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    return at;
}

float *pp_codec_arena_take(codec_arena *a, size_t n) {
    size_t at = pp_codec_arena_reserve(a, n);
    /* The filling pass replays the sizing pass's takes, so it never runs past cap. */
    return a->base ? a->base + at : NULL;
}

const float *pp_codec_arena_put(codec_arena *a, const float *host, size_t n) {
    float *dst = pp_codec_arena_take(a, n);
    if (dst) a->be->ops->upload(a->be, dst, host, n * sizeof(float));
    return dst;
}

int pp_codec_arena_check(codec_arena *a, const st_file *f, const char *name, int ndim, const int64_t *shape,
                         char *err) {
    if (a->catalog) {
        a->catalog(a->catalog_ctx, name, ndim, shape);
        return PP_OK;
    }
    const st_tensor *t;
    return pp_st_expect(f, name, ndim, shape, &t, err);
}

int pp_codec_arena_read_host(const st_file *f, const char *name, int ndim, const int64_t *shape, float *host,
                             char *err) {
    const st_tensor *t;
    int rc = pp_st_expect(f, name, ndim, shape, &t, err);
    if (rc) return rc;
    return pp_st_load_f32(f, t, 0, t->numel, host, err);
}

int pp_codec_arena_tensor(codec_arena *a, const st_file *f, const char *name, int ndim, const int64_t *shape,
                          const float **out, char *err) {
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= (size_t)shape[i];
    *out = NULL;
    if (pp_codec_arena_sizing(a)) {
        pp_codec_arena_take(a, numel);
        return pp_codec_arena_check(a, f, name, ndim, shape, err);
    }
    float *host = malloc(numel * sizeof(float) + 1);
    if (!host) return pp_fail(err, PP_ENOMEM, "%s: tensor '%s': out of memory", pp_st_path(f), name);
    int rc = pp_codec_arena_read_host(f, name, ndim, shape, host, err);
    if (rc == PP_OK) *out = pp_codec_arena_put(a, host, numel);
    free(host);
    return rc;
}

int pp_codec_arena_matrix(codec_arena *a, const st_file *f, const char *name, int64_t rows, int64_t cols,
                          pp_weight *out, char *err) {
    if (a->catalog) {
        const int64_t shape[2] = {rows, cols};
        a->catalog(a->catalog_ctx, name, 2, shape);
        return PP_OK;
    }
    pp_weight host;
    int rc = pp_weight_load(f, name, rows, cols, &host, err);
    if (rc || pp_codec_arena_sizing(a)) return rc;
    return a->be->ops->weight_upload(a->be, &host, out, err);
}
