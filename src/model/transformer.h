/* transformer: a stack of pre-norm streaming transformer layers, one token per call.
 *
 * Each layer does x += Wo·Attn(RoPE?(Wqkv·RMSNorm1(x))) and x += Wout·(silu(g)·v) with
 * [g; v] = Win·RMSNorm2(x) (spec/lm.md §3.3-3.5). Attention reads a ring KV cache of
 * `capacity` slots and sees `window` keys including the query's own (the reference's ring
 * quirk: window = capacity − 1). The same code runs the temporal transformer (RoPE, one weight
 * set) and the depformer (no positional embedding, one weight set per step, `multi_linear`).
 * Weights (pp_tf) are immutable and shared; the KV cache and scratch (pp_tf_state) are per
 * conversation. */
#ifndef PP_MODEL_TRANSFORMER_H
#define PP_MODEL_TRANSFORMER_H

#include <stdint.h>

#include "backend/backend.h"
#include "io/safetensors.h"

typedef struct pp_tf_shape {
    const char *prefix; /* "transformer" or "depformer" */
    int dim, num_heads, hidden, num_layers;
    int n_steps;        /* 1: shared weights; >1: per-step slices (`weights_per_step`) */
    int rope;           /* apply interleaved RoPE with max_period */
    float max_period, eps;
    const char *cfg_keys; /* config keys that set these sizes, for error messages */
} pp_tf_shape;

typedef struct pp_tf_step {
    pp_weight qkv, out, ffn_in, ffn_out; /* views into the layer's stored tensors */
} pp_tf_step;

typedef struct pp_tf_layer {
    float *norm1, *norm2;    /* backend [dim] */
    pp_weight in_proj, out_proj; /* whole stored tensors (all steps) */
    pp_weight *ffn_in, *ffn_out; /* [n_steps] */
    pp_tf_step *steps;           /* [n_steps] */
} pp_tf_layer;

typedef struct pp_tf {
    pp_tf_shape shape;
    pp_tf_layer *layers;
} pp_tf;

typedef struct pp_tf_state {
    int capacity, window;
    float **k, **v;                /* per layer: backend [capacity][dim] */
    float *h, *qkv, *att, *tmp, *u, *m; /* backend scratch */
} pp_tf_state;

/* Loads every layer's tensors from f and uploads them to be. On failure tf is left empty. */
int pp_tf_load(pp_backend *be, const st_file *f, const pp_tf_shape *shape, pp_tf *tf, char *err);
void pp_tf_free(pp_backend *be, pp_tf *tf);
/* Adds every stored tensor of tf (not the per-step views) to the per-format load totals. */
void pp_tf_weight_stats(const pp_tf *tf, pp_weight_stats *stats);

int pp_tf_state_init(pp_backend *be, const pp_tf *tf, int capacity, int window, pp_tf_state *st, char *err);
void pp_tf_state_free(pp_backend *be, const pp_tf *tf, pp_tf_state *st);

/* Runs all layers on x (backend [dim], updated in place) at position *pos (backend int32),
 * with the weight slice of `step`. When layer_out (backend [num_layers][dim]) is not NULL each
 * layer's output is copied there. */
void pp_tf_forward(pp_backend *be, const pp_tf *tf, pp_tf_state *st, float *x, const int32_t *pos, int step,
                   float *layer_out);

/* Loads the 2-D weight `name` as [rows, cols] and uploads it; a shape mismatch is reported as a
 * contradiction between the config keys cfg_keys and the tensor. */
int pp_tf_load_weight(pp_backend *be, const st_file *f, const char *name, int64_t rows, int64_t cols,
                      const char *cfg_keys, pp_weight *out, char *err);
/* Loads an RMSNorm scale (`NAME` of d values, any float dtype) into a new backend buffer. */
int pp_tf_load_alpha(pp_backend *be, const st_file *f, const char *name, int d, const char *cfg_keys, float **out,
                     char *err);

#endif
