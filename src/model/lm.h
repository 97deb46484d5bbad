/* lm: the PersonaPlex language model: weights (spec/lm.md §2) and the per-frame compute
 * (temporal transformer §3, text head, depformer §4) on a backend.
 *
 * pp_lm holds the immutable weights, shared by every conversation. pp_lm_ctx is one
 * conversation's compute state: the temporal and depformer KV caches and the scratch buffers,
 * all allocated once. The generation loop (lmgen.h) decides which tokens go in; this module
 * only computes:
 *   1. the input: pp_lm_embed_tokens (sum of the 17 stream embeddings) or pp_lm_set_embedding
 *      (a stored voice-prompt frame);
 *   2. pp_lm_temporal at a position: the hidden state h = out_norm(transformer(x));
 *   3. optionally pp_lm_text_logits(h) and the depformer steps pp_lm_depformer(k, prev token). */
#ifndef PP_MODEL_LM_H
#define PP_MODEL_LM_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/lm_config.h"

typedef struct pp_lm pp_lm;
typedef struct pp_lm_ctx pp_lm_ctx;

/* Opens the weights at weights_path with the hyper-parameters of config_path (a config.json;
 * NULL uses the PersonaPlex-7B defaults) and uploads them to be, which must outlive the model.
 * Every tensor is checked against the config; a mismatch names the key and the tensor. */
int pp_lm_open(pp_backend *be, const char *weights_path, const char *config_path, pp_lm **out, char *err);
void pp_lm_close(pp_lm *lm);
const pp_lm_config *pp_lm_get_config(const pp_lm *lm);
pp_backend *pp_lm_backend(const pp_lm *lm);

/* One conversation's caches and scratch. */
int pp_lm_ctx_create(const pp_lm *lm, pp_lm_ctx **out, char *err);
void pp_lm_ctx_destroy(pp_lm_ctx *c);

/* x = Σ emb[k-1][col[k]] for k = 1..16, then + text_emb[col[0]] (the reference's order).
 * Ids must be in range (0..card for audio, 0..text_card for text); the caller checks. */
void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_ctx *c, const int32_t col[17]);
/* x = emb (host [dim]): a voice-prompt frame replacing the embedding sum. */
void pp_lm_set_embedding(const pp_lm *lm, pp_lm_ctx *c, const float *emb);
/* Copies the current input x to host [dim] (what a voices/NAME.pt file stores). */
void pp_lm_get_embedding(const pp_lm *lm, pp_lm_ctx *c, float *emb);
/* Runs the temporal transformer on x at position pos, leaving h = out_norm(output). When
 * layer_out (host [num_layers][dim]) is not NULL it receives each layer's output. */
void pp_lm_temporal(const pp_lm *lm, pp_lm_ctx *c, int64_t pos, float *layer_out);
/* Text logits of h into host [text_card]. */
void pp_lm_text_logits(const pp_lm *lm, pp_lm_ctx *c, float *logits);
/* Depformer step k (0 ≤ k < dep_q) of this frame, fed the previous token (the frame's text
 * token at k = 0, else the final token of audio stream k); logits to host [card]. Steps must
 * run in order 0, 1, ... from 0 each frame (the depformer cache restarts every frame). */
void pp_lm_depformer(const pp_lm *lm, pp_lm_ctx *c, int k, int32_t prev, float *logits);

#endif
