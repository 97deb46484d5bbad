/* mimi_transformer: the codec's streaming transformer (moshi modules/transformer.py
 * ProjectedTransformer with input = output = d_model, so without projections; keys
 * `<prefix>.transformer.layers.{l}.*`). Pre-norm layers:
 *   x += scale_1 ⊙ out_proj(Attn(RoPE(q, k), v))   over LayerNorm1(x)
 *   x += scale_2 ⊙ linear2(GELU(linear1(LayerNorm2(x))))
 * with interleaved RoPE and a ring KV cache of `context` slots that reproduces PersonaPlex's
 * window quirk (docs/codec.md §5.4): in a call that ends at step E a query at position q sees
 * the keys max(0, E − context + 1) .. q. Weights are shared; mtr_state is one session's. */
#ifndef PP_MODEL_MIMI_TRANSFORMER_H
#define PP_MODEL_MIMI_TRANSFORMER_H

#include <stdint.h>

#include "model/codec_arena.h"

#define MTR_MAX_LAYERS 32
#define MTR_MAX_STEPS 64 /* latent steps per call */

typedef struct mtr_config {
    int d_model, num_heads, num_layers, dim_feedforward, context;
    float max_period;
    int layer_scale; /* the layers carry layer_scale_{1,2}.scale */
} mtr_config;

/* StreamingTransformerLayer, `<prefix>.transformer.layers.{l}.` */
typedef struct mtr_layer {
    pp_weight in_proj;  /* self_attn.in_proj_weight [3·d][d]: rows Wq, Wk, Wv */
    pp_weight out_proj; /* self_attn.out_proj.weight [d][d] */
    pp_weight linear1;  /* linear1.weight [ff][d] */
    pp_weight linear2;  /* linear2.weight [d][ff] */
    const float *norm1_w, *norm1_b, *norm2_w, *norm2_b; /* [d] */
    const float *scale1, *scale2;                       /* layer_scale_{1,2}.scale [d], or NULL */
} mtr_layer;

typedef struct mtr_weights {
    mtr_config cfg;
    int n_uploaded; /* layers whose matrices were uploaded (what pp_mtr_free releases) */
    mtr_layer layers[MTR_MAX_LAYERS];
} mtr_weights;

/* Where a transformer's KV rings ([context][d] each) sit in a codec state (floats from the
 * state's base), and its ring descriptors: num_layers·t pp_kv_ring, entry l·t + i the ring of
 * layer l as query i of a call sees it (its window); attn_rows reads them through a batch's
 * tables. The same in every state of a model. */
typedef struct mtr_layout {
    size_t k[MTR_MAX_LAYERS], v[MTR_MAX_LAYERS];
    size_t rings;
    int t;
} mtr_layout;

/* A batch's buffers for calls of t steps on up to `rows` conversations: pos [t][rows] (row r's
 * step i at pos[i·n + r] for a call of n rows), tables [rows] (each row's ring descriptors),
 * and the activations, time-major over the batch: x, h, att [t·rows][d], qkv [t·rows][3d], ff
 * [t·rows][ff]. */
typedef struct mtr_work {
    int64_t *pos;
    const pp_kv_ring **tables;
    float *x, *h, *qkv, *att, *ff;
    int t;
} mtr_work;

/* Loads the layers under `prefix` ("encoder_transformer"); the matrices are uploaded in the
 * filling pass only. On failure call pp_mtr_free. */
int pp_mtr_load(codec_arena *a, const st_file *f, const char *prefix, const mtr_config *cfg, mtr_weights *w, char *err);
void pp_mtr_free(pp_backend *be, mtr_weights *w);
/* Takes the rings and descriptors of calls of t steps from a state arena. */
void pp_mtr_layout(codec_arena *state, const mtr_weights *w, int t, mtr_layout *out);
/* Writes the descriptors of a state whose arena starts at `state` (backend memory). */
void pp_mtr_state_init(pp_backend *be, const mtr_weights *w, const mtr_layout *lay, float *state);
/* Takes a batch's buffers for up to `rows` conversations from its arena. */
void pp_mtr_work_bind(codec_arena *a, const mtr_weights *w, int t, int rows, mtr_work *out);
/* Uploads the positions and tables of a call on n rows (outside any recording): row r's state
 * arena at backend address state[r], steps since its reset offset[r]. pos_host and
 * tables_host: host scratch of t·n int64 and n addresses. */
void pp_mtr_prepare(pp_backend *be, const mtr_layout *lay, const mtr_work *w, const uint64_t *state,
                    const int64_t *offset, int n, int64_t *pos_host, uint64_t *tables_host);
/* One call on n rows: x [n][d][t] (channel-major, as the convs use it) is transformed in place. */
void pp_mtr_step(pp_backend *be, const mtr_weights *w, const mtr_work *work, int n, float *x);

#endif
