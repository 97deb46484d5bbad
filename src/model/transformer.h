/* transformer: a stack of pre-norm streaming transformer layers, one token per row and call.
 *
 * Each layer does x += Wo·Attn(RoPE?(Wqkv·RMSNorm1(x))) and x += Wout·(silu(g)·v) with
 * [g; v] = Win·RMSNorm2(x) (docs/model.md §3.3-3.5). Attention reads a ring KV cache of
 * `capacity` slots and sees `window` keys including the query's own (the reference's ring
 * quirk: window = capacity − 1). The same code runs the temporal transformer (RoPE, one weight
 * set) and the depformer (no positional embedding, one weight set per step, `multi_linear`).
 * Weights (pp_tf) are immutable and shared; the KV rings (pp_tf_cache) are per conversation;
 * the activation scratch (pp_tf_scratch) serves n rows, one per conversation advancing in the
 * same call, so a batch of conversations reads every weight once (a single conversation is
 * the n = 1 case). */
#ifndef PP_MODEL_TRANSFORMER_H
#define PP_MODEL_TRANSFORMER_H

#include <stdint.h>

#include "backend/backend.h"
#include "io/quant_tensor.h"
#include "io/safetensors.h"
#include "model/lm_catalog.h"

typedef struct pp_tf_shape {
    const char *prefix; /* "transformer" or "depformer" */
    int dim, num_heads, hidden, num_layers;
    int n_steps;        /* 1: shared weights; >1: per-step slices (`weights_per_step`) */
    int rope;           /* apply interleaved RoPE with max_period */
    float max_period, eps;
} pp_tf_shape;

typedef struct pp_tf_step {
    pp_weight qkv, out, ffn_in, ffn_out; /* views into the layer's stored tensors */
} pp_tf_step;

typedef struct pp_tf_layer {
    float *norm1, *norm2;    /* backend [dim] */
    pp_weight in_proj, out_proj; /* whole stored tensors (all steps) */
    pp_weight *step_proj;        /* moshi.cpp's per-step tensors instead: [n_steps][2] (in, out) */
    pp_weight *ffn_in, *ffn_out; /* [n_steps] */
    pp_tf_step *steps;           /* [n_steps] */
} pp_tf_layer;

typedef struct pp_tf {
    pp_tf_shape shape;
    pp_tf_layer *layers;
} pp_tf;

/* One conversation's KV rings, one per layer (per-conversation state). */
typedef struct pp_tf_cache {
    pp_kv_ring *rings; /* [num_layers] */
    int num_layers;
    pp_kv_ring *table; /* backend memory: the same descriptors, for attn_rows (pp_tf_forward's tables) */
} pp_tf_cache;

/* Activation scratch for up to `rows` rows advancing together (shared by a batch). */
typedef struct pp_tf_scratch {
    int rows;
    float *h, *qkv, *att, *u; /* backend [rows][...] */
} pp_tf_scratch;

/* Quantization while loading (the server's --quantize): the format, its group, and what it
 * covers; the tensors chosen must be stored dense (F32, F16, BF16). */
typedef struct pp_tf_quant {
    pp_lm_quantize opts; /* its group resolved (never 0) */
    pp_qtensor *held;    /* quantized buffers a backend reads in place (the CPU's), freed by pp_tf_quant_free */
    size_t n_held, cap_held;
    int tensors;                            /* quantized so far, */
    uint64_t source_bytes, quantized_bytes; /* from this many bytes to this many */
} pp_tf_quant;
void pp_tf_quant_free(pp_tf_quant *q);

/* Loading, driven by the LM catalogue: pp_tf_init sizes tf for shape (no weights yet; on
 * failure pp_tf_free it); pp_tf_load_tensor loads and uploads one catalogued layer tensor
 * into its place; pp_tf_link, once all are in, points each step at its weights (marked
 * latency-bound, pp_weight's, when asked). pp_tf_free releases whatever was loaded. */
int pp_tf_init(const pp_tf_shape *shape, pp_tf *tf, char *err);
int pp_tf_load_tensor(pp_backend *be, const st_file *f, pp_tf_quant *q, pp_tf *tf, const pp_lm_tensor *t, char *err);
void pp_tf_link(pp_tf *tf, int latency_bound);
void pp_tf_free(pp_backend *be, pp_tf *tf);
/* Adds every stored tensor of tf (not the per-step views) to the per-format load totals. */
void pp_tf_weight_stats(const pp_tf *tf, pp_weight_stats *stats);

/* Bytes of one conversation's rings of `capacity` slots in format fmt. */
size_t pp_tf_cache_bytes(const pp_tf_shape *s, int capacity, pp_kv_format fmt);
/* A query sees `window` keys including its own (window <= capacity). */
int pp_tf_cache_init(pp_backend *be, const pp_tf *tf, int capacity, int window, pp_kv_format fmt, pp_tf_cache *c,
                     char *err);
void pp_tf_cache_free(pp_backend *be, pp_tf_cache *c);
/* Copies slots [0, slots) of every layer's rings (K, V, then for INT8 their scales) to host
 * (pp_tf_cache_bytes(shape, slots, fmt) bytes), or back: a prompt's state without the empty
 * rest of the ring. slots <= the rings' capacity. */
void pp_tf_cache_export(pp_backend *be, const pp_tf *tf, const pp_tf_cache *c, int slots, void *host);
void pp_tf_cache_import(pp_backend *be, const pp_tf *tf, pp_tf_cache *c, int slots, const void *host);
int pp_tf_scratch_init(pp_backend *be, const pp_tf *tf, int rows, pp_tf_scratch *sc, char *err);
/* Backend bytes pp_tf_scratch_init takes for rows. */
size_t pp_tf_scratch_bytes(const pp_tf_shape *s, int rows);
void pp_tf_scratch_free(pp_backend *be, pp_tf_scratch *sc);

/* Runs all layers on n rows of x (backend [n][dim], updated in place; n <= sc->rows) with the
 * weight slice of `step`: row i is one token of the conversation whose rings are caches[i] (host
 * array; n different conversations), at position pos[i] (backend int64 [n]); tables (backend
 * [n]) holds caches[i]->table, uploaded by the caller before a recorded frame. Every weight is
 * read once for all n rows, and one attn_rows per layer attends each row over its own rings (all
 * rings of one format and size). When layer_out (backend [n][num_layers][dim]) is not NULL each
 * row's layer outputs are copied there. */
void pp_tf_forward(pp_backend *be, const pp_tf *tf, pp_tf_scratch *sc, pp_tf_cache *const *caches,
                   const pp_kv_ring *const *tables, int n, float *x, const int64_t *pos, int step, float *layer_out);
/* The same for n rows of one conversation (a prompt's frames, weight slice 0) at positions
 * first .. first + n − 1 (pos: those, backend int64 [n]): row i attends to the keys rows 0..i−1
 * store. One attn_rows per layer while the rows' stores fit the rings (pp_kv_ring_takes_rows:
 * a prompt from position 0 always does), else one a row. */
void pp_tf_prefill(pp_backend *be, const pp_tf *tf, pp_tf_scratch *sc, pp_tf_cache *cache, int64_t first, int n,
                   float *x, const int64_t *pos);

/* Loads the 2-D weight `name` as [rows, cols] (catalogue entry t: what part it is) and uploads
 * it, quantized first when q (may be NULL) covers it; a shape mismatch is reported as a
 * contradiction between t's config keys and the tensor. */
int pp_tf_load_weight(pp_backend *be, const st_file *f, pp_tf_quant *q, const pp_lm_tensor *t, const char *name,
                      int64_t rows, int64_t cols, pp_weight *out, char *err);
/* Loads an RMSNorm scale (`NAME` of d values, any float dtype) into a new backend buffer. */
int pp_tf_load_alpha(pp_backend *be, const st_file *f, const char *name, int d, const char *cfg_keys, float **out,
                     char *err);

#endif
