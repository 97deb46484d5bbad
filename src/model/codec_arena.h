/* codec_arena: one backend allocation per lifetime for the Mimi codec, handed out by bumping
 * an offset: one for the shared weights, one per session for its state and scratch.
 *
 * The same loader code runs twice over an arena: a sizing pass (base NULL: tensors are only
 * looked up and shape-checked, takes are counted and return NULL), then pp_codec_arena_alloc,
 * then a filling pass that hands out the pointers and uploads the data. Sizes therefore come
 * from one table, the code that uses them, and can never disagree with it. A third mode, the
 * catalog, runs the loaders without a file and reports every tensor they would read (name and
 * shape): the benchmark builds random weights of the real shapes from it. */
#ifndef PP_MODEL_CODEC_ARENA_H
#define PP_MODEL_CODEC_ARENA_H

#include <stddef.h>

#include "backend/backend.h"
#include "io/safetensors.h"

typedef void (*codec_catalog_fn)(void *ctx, const char *name, int ndim, const int64_t *shape);
/* A catalogued convolution weight's stride and groups (what its shape does not say). */
typedef void (*codec_catalog_conv_fn)(void *ctx, const char *weight, int stride, int groups);

typedef struct codec_arena {
    pp_backend *be;
    float *base; /* backend memory; NULL during the sizing and catalog passes */
    size_t used; /* floats handed out (or counted) so far */
    size_t cap;  /* floats allocated */
    codec_catalog_fn catalog; /* catalog mode: called for every tensor; the file is NULL */
    codec_catalog_conv_fn catalog_conv; /* catalog mode, when set: called after a convolution's weight */
    void *catalog_ctx;
} codec_arena;

/* Starts a sizing pass (be may be NULL for a catalog pass). */
void pp_codec_arena_init(codec_arena *a, pp_backend *be);
/* Allocates what the sizing pass counted (zero-filled) and rewinds for the filling pass. */
int pp_codec_arena_alloc(codec_arena *a, const char *what, char *err);
void pp_codec_arena_free(codec_arena *a);
/* True in the sizing and catalog passes: nothing may be read or uploaded. */
int pp_codec_arena_sizing(const codec_arena *a);

/* n floats, 64-byte aligned: their offset in floats from the arena's base, the same in both
 * passes (a layout every arena sized by the same takes shares). */
size_t pp_codec_arena_reserve(codec_arena *a, size_t n);
/* n floats, 64-byte aligned; NULL while sizing. */
float *pp_codec_arena_take(codec_arena *a, size_t n);
/* Takes n floats and uploads host data into them (nothing while sizing). */
const float *pp_codec_arena_put(codec_arena *a, const float *host, size_t n);
/* Checks that tensor `name` exists with exactly this shape (catalog: records it). */
int pp_codec_arena_check(codec_arena *a, const st_file *f, const char *name, int ndim, const int64_t *shape, char *err);
/* Tensor `name` with exactly this shape (F32, or F16/BF16 converted), taken and uploaded;
 * err names the file, key and both shapes. */
int pp_codec_arena_tensor(codec_arena *a, const st_file *f, const char *name, int ndim, const int64_t *shape,
                          const float **out, char *err);
/* Matrix `name` [rows][cols] as a pp_weight in its stored format, uploaded with
 * weight_upload in the filling pass (release it with weight_release). */
int pp_codec_arena_matrix(codec_arena *a, const st_file *f, const char *name, int64_t rows, int64_t cols,
                          pp_weight *out, char *err);
/* Reads tensor `name` (exact shape, any float dtype) into host memory, for values the loader
 * transforms before putting them (codebooks). Filling pass only. */
int pp_codec_arena_read_host(const st_file *f, const char *name, int ndim, const int64_t *shape, float *host,
                             char *err);

#endif
