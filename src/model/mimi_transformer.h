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

typedef struct mtr_state {
    float *k[MTR_MAX_LAYERS], *v[MTR_MAX_LAYERS]; /* [context][d] rings */
    int32_t *pos;                                 /* [t] positions of the current call */
    float *x, *h, *qkv, *att, *ff;                /* scratch: [t][d], [t][d], [t][3d], [t][d], [t][ff] */
    int t;
    int64_t offset; /* steps since reset */
} mtr_state;

/* Loads the layers under `prefix` ("encoder_transformer"); the matrices are uploaded in the
 * filling pass only. On failure call pp_mtr_free. */
int pp_mtr_load(codec_arena *a, const st_file *f, const char *prefix, const mtr_config *cfg, mtr_weights *w, char *err);
void pp_mtr_free(pp_backend *be, mtr_weights *w);
/* Takes the state for calls of t steps from a state arena; offset starts at 0. */
void pp_mtr_state_bind(codec_arena *a, const mtr_weights *w, int t, mtr_state *s);
/* One call: x [d][t] (channel-major, as the convs use it) is transformed in place. */
void pp_mtr_step(pp_backend *be, const mtr_weights *w, mtr_state *s, float *x);

#endif
