/* lm: the PersonaPlex language model: weights (docs/model.md §2) and the per-frame compute
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
 *   2. pp_lm_prefill (one conversation's prompt frames: h = out_norm(transformer(x))),
 *      or pp_lm_frame: the input rows, the temporal transformer, the text head and
 *      the depformer steps, sampled on the backend, the frame's tokens downloaded once.
 * Rows are computed independently: a row's results do not depend on the other rows (bit for
 * bit on the CPU backend; a device GEMM may sum in another order at another batch size). */
#ifndef PP_MODEL_LM_H
#define PP_MODEL_LM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/lm_catalog.h"
#include "model/lm_config.h"

typedef struct pp_lm pp_lm;
typedef struct pp_lm_ctx pp_lm_ctx;
typedef struct pp_lm_work pp_lm_work;

/* Opens the weights at weights_path with the hyper-parameters of config_path (a config.json;
 * NULL uses the PersonaPlex-7B defaults) and uploads them to be, which must outlive the model.
 * Every tensor is checked against the config; a mismatch names the key and the tensor. */
int pp_lm_open(pp_backend *be, const char *weights_path, const char *config_path, pp_lm **out, char *err);
/* The same, quantizing the weights while they load when quantize is not NULL: each chosen tensor of a BF16/F16/F32
 * checkpoint is quantized exactly as personaplex-quantize would, uploaded, and its source pages released, so host
 * memory peaks near the quantized size plus one tensor. A quantized checkpoint is refused. */
int pp_lm_open_quantized(pp_backend *be, const char *weights_path, const char *config_path,
                         const pp_lm_quantize *quantize, pp_lm **out, char *err);
void pp_lm_close(pp_lm *lm);
/* A GGUF checkpoint, or weights opened without a config, sets the temporal layer count from
 * its tensors (the highest `transformer.layers.N.norm1.alpha` + 1: sts-web's 24-layer file says
 * 32 in its KV block; a number skipped below it is then reported missing at load);
 * logs what it used and where the file's KV `personaplex.block_count` disagrees. A config
 * given beside safetensors weights stays authoritative (a mismatch is refused at load). */
void pp_lm_config_fit_file(pp_lm_config *c, const st_file *f, int have_config);
/* The configuration the checkpoint f runs with: config_path's (NULL: the defaults), fitted to
 * f's tensors as above. What pp_lm_open uses, for tools that check a file without loading it. */
int pp_lm_config_for(const char *config_path, const st_file *f, pp_lm_config *c, char *err);
/* Refuses a file holding more temporal layers, depformer layers or steps than c: loading it would
 * silently drop them (any layer number past the count, not only the next). err names the key
 * and a tensor past it. pp_lm_open checks this. */
int pp_lm_check_extra(const pp_lm_config *c, const st_file *f, char *err);
const pp_lm_config *pp_lm_get_config(const pp_lm *lm);
/* The weight a catalogued matrix of the model loaded as (backend memory; NULL for a norm scale or
 * moshi.cpp's per-step projections): for tools and tests that look at what was loaded. */
const pp_weight *pp_lm_weight(const pp_lm *lm, const pp_lm_tensor *t);
pp_backend *pp_lm_backend(const pp_lm *lm);

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
/* Host and backend memory the scratch takes (its buffers, activations and depformer rings). */
size_t pp_lm_work_bytes(const pp_lm_work *w);

/* Row i's input x = Σ emb[k-1][cols[i][k]] for k = 1..16, then + text_emb[cols[i][0]] (the
 * reference's order), for i < n. Ids must be in range (0..card for audio, 0..text_card for
 * text); the caller checks. */
void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_work *w, int n, const int32_t (*cols)[PP_LM_STREAMS]);
/* Row `row`'s input x = emb (host [dim]): a voice-prompt frame replacing the embedding sum. */
void pp_lm_set_embedding(const pp_lm *lm, pp_lm_work *w, int row, const float *emb);
/* Copies row `row`'s input x to host [dim] (what a voices/NAME.pt file stores). */
void pp_lm_get_embedding(const pp_lm *lm, pp_lm_work *w, int row, float *emb);
/* The prefill's pass: the temporal transformer on the input rows 0..n-1, one conversation's
 * prompt frames at positions first .. first + n − 1 of ctx (row i attends to what rows 0..i−1
 * store), leaving h = out_norm(output); no heads. */
void pp_lm_prefill(const pp_lm *lm, pp_lm_work *w, pp_lm_ctx *ctx, int64_t first, int n);

/* ---- a frame: input rows, temporal transformer, text head, depformer and sampling, all on
 * the backend; where the backend has graph hooks the whole sequence is recorded once per batch
 * shape and replayed, with every input uploaded into fixed buffers before it ---- */

/* Row i of a frame (host). */
typedef struct pp_lm_row {
    int32_t cols[PP_LM_STREAMS];   /* input column (ids in range: the caller checks) */
    pp_lm_ctx *ctx;                /* the row's conversation */
    int64_t pos;                   /* its temporal position */
    pp_sample_param text, audio;   /* stream 0 and streams 1.. (frame: the draw's frame number) */
    int32_t forced[PP_LM_STREAMS]; /* >= 0: stream k's token is given (output and next input); -1: drawn */
} pp_lm_row;

/* Host outputs of a traced frame (run without a graph); each may be NULL. */
typedef struct pp_lm_trace {
    float *const *layer_out; /* [n]: row i's [num_layers][dim], or NULL */
    float *text_logits;      /* [n][text_card] */
    float *dep_logits;       /* [dep_steps][n][card]: steps 0..dep_steps-1 */
    int dep_steps;
} pp_lm_trace;

/* One frame of rows 0..n-1: the input rows from rows[i].cols (unless inputs_ready: the caller
 * set them with pp_lm_embed_tokens / pp_lm_set_embedding), the temporal transformer and, when
 * steps >= 0, the text head and depformer steps 0..steps-1, each stream sampled on the
 * backend (forced entries kept) and fed to the next step from backend memory. tokens (host
 * [1+steps][n], stream k of row i at k·n + i) receives the frame's tokens: the frame's one
 * download. A traced or inputs_ready frame runs unrecorded and gives the same tokens. The
 * rows' KV caches must share one format (EINVAL otherwise). With graph hooks, a frame shape (n, steps, the KV format; any conversations in the rows) runs
 * plainly the first time (the backend's workspace takes its size), is recorded the second and
 * replayed afterwards; a work keeps its last two shapes, and the model's works share the
 * backend's slots (a free or long idle one is taken; while none is, frames run plainly).
 * Frames of one model run on one thread at a time (they share the backend's stream and
 * slots). */
int pp_lm_frame(const pp_lm *lm, pp_lm_work *w, int n, const pp_lm_row *rows, int steps, int inputs_ready,
                const pp_lm_trace *trace, int32_t *tokens, char *err);

#endif
