/* lm: the PersonaPlex language model: weights (spec/lm.md §2) and the per-frame compute
 * (temporal transformer §3, text head, depformer §4) on a backend.
 *
 * pp_lm holds the immutable weights, shared by every conversation. pp_lm_ctx is one
 * conversation's state: its temporal KV rings (f32, bf16 or int8). pp_lm_work is the scratch
 * of up to `rows` conversations advancing one frame together: row i of every call below
 * belongs to one conversation, and each weight is read once for all rows (n = 1 for a lone
 * conversation). The depformer's cache restarts every frame, so it lives in the work too. The
 * generation loop (lmgen.h) decides which tokens go in; this module only computes:
 *   1. the input rows: pp_lm_embed_tokens (sum of the 17 stream embeddings) or
 *      pp_lm_set_embedding (a stored voice-prompt frame);
 *   2. pp_lm_temporal, each row at its conversation's position: h = out_norm(transformer(x));
 *   3. optionally pp_lm_text_logits(h) and the depformer steps pp_lm_depformer(k, prev tokens).
 * Rows are computed independently: a row's results do not depend on the other rows (bit for
 * bit on the CPU backend; a device GEMM may sum in another order at another batch size). */
#ifndef PP_MODEL_LM_H
#define PP_MODEL_LM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/lm_config.h"

typedef struct pp_lm pp_lm;
typedef struct pp_lm_ctx pp_lm_ctx;
typedef struct pp_lm_work pp_lm_work;

/* Opens the weights at weights_path with the hyper-parameters of config_path (a config.json;
 * NULL uses the PersonaPlex-7B defaults) and uploads them to be, which must outlive the model.
 * Every tensor is checked against the config; a mismatch names the key and the tensor. */
int pp_lm_open(pp_backend *be, const char *weights_path, const char *config_path, pp_lm **out, char *err);
void pp_lm_close(pp_lm *lm);
const pp_lm_config *pp_lm_get_config(const pp_lm *lm);
pp_backend *pp_lm_backend(const pp_lm *lm);

/* Calls fn once per tensor of a checkpoint for config c (spec/lm.md §2 names and shapes, the
 * RMSNorm scales as [1, 1, d]): what a synthetic model writer needs. */
void pp_lm_tensors(const pp_lm_config *c, void (*fn)(void *ctx, const char *name, int ndim, const int64_t *shape),
                   void *ctx);

/* One conversation's temporal KV rings in format kv. */
int pp_lm_ctx_create(const pp_lm *lm, pp_kv_format kv, pp_lm_ctx **out, char *err);
void pp_lm_ctx_destroy(pp_lm_ctx *c);
/* Bytes of backend memory one conversation's rings take (a config's full context). */
size_t pp_lm_ctx_bytes(const pp_lm_config *c, pp_kv_format kv);
pp_kv_format pp_lm_ctx_format(const pp_lm_ctx *c);
int pp_lm_ctx_capacity(const pp_lm_ctx *c);
/* The first `slots` slots of every ring to host (pp_lm_ctx_slots_bytes bytes) and back: what a
 * saved prompt state holds. slots <= pp_lm_ctx_capacity. */
size_t pp_lm_ctx_slots_bytes(const pp_lm_ctx *c, int slots);
void pp_lm_ctx_export(const pp_lm_ctx *c, int slots, void *host);
void pp_lm_ctx_import(pp_lm_ctx *c, int slots, const void *host);

/* Scratch for up to rows conversations per call. */
int pp_lm_work_create(const pp_lm *lm, int rows, pp_lm_work **out, char *err);
void pp_lm_work_destroy(pp_lm_work *w);
int pp_lm_work_rows(const pp_lm_work *w);

/* Row i's input x = Σ emb[k-1][cols[i][k]] for k = 1..16, then + text_emb[cols[i][0]] (the
 * reference's order), for i < n. Ids must be in range (0..card for audio, 0..text_card for
 * text); the caller checks. */
void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_work *w, int n, const int32_t (*cols)[PP_LM_STREAMS]);
/* Row `row`'s input x = emb (host [dim]): a voice-prompt frame replacing the embedding sum. */
void pp_lm_set_embedding(const pp_lm *lm, pp_lm_work *w, int row, const float *emb);
/* Copies row `row`'s input x to host [dim] (what a voices/NAME.pt file stores). */
void pp_lm_get_embedding(const pp_lm *lm, pp_lm_work *w, int row, float *emb);
/* Runs the temporal transformer on rows 0..n-1, row i on the rings of ctxs[i] at position
 * pos[i] (host), leaving h = out_norm(output). When layer_out is not NULL, layer_out[i] (host
 * [num_layers][dim], may be NULL) receives row i's layer outputs. */
void pp_lm_temporal(const pp_lm *lm, pp_lm_work *w, pp_lm_ctx *const *ctxs, int n, const int64_t *pos,
                    float *const *layer_out);
/* Text logits of the n rows of h into host [n][text_card]. */
void pp_lm_text_logits(const pp_lm *lm, pp_lm_work *w, int n, float *logits);
/* Depformer step k (0 ≤ k < dep_q) of this frame for n rows, row i fed prev[i] (host: the
 * frame's text token at k = 0, else the final token of audio stream k); logits to host
 * [n][card]. Steps must run in order 0, 1, ... from 0 each frame on the same rows (the
 * depformer cache restarts every frame). */
void pp_lm_depformer(const pp_lm *lm, pp_lm_work *w, int n, int k, const int32_t *prev, float *logits);

#endif
