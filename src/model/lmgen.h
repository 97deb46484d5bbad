/* lmgen: one conversation's generation loop over the LM (docs/model.md §5-6), the reference's
 * `LMGen` state machine.
 *
 * The state is a ring of the token table X[k][p] (k = 0..16 streams: text, 8 agent, 8 user;
 * column p mod W with W = max_delay + 3 = 4) with "provided" (forced) flags, the call counter
 * n, the KV caches and the sampling settings (no RNG state: the draws of call n are numbered
 * by (seed, n, stream), backend.h's sample). Call n writes the given tokens at
 * column n + delay_k, feeds column n−1 to the temporal transformer at position n−1 (call 0
 * computes nothing), fills the unforced entries of column n from the text head and the
 * depformer, and from n = 2 on returns the aligned column out[k] = X[k][n−1+delay_k].
 *
 * Prompt phases (all streams forced; the text head and depformer are skipped since their
 * output would be discarded): voice embeddings + token-ring restore, silence frames, text
 * prompt tokens, silence frames. Then one pp_lmgen_step per 80 ms frame of user codes.
 *
 * pp_lmbatch advances many conversations of one model by a conversation frame together (one
 * 80 ms tick of a server): every weight is read once for all of them, while each keeps its own
 * position, KV rings, token ring and seed, so the tokens are those of pp_lmgen_step on each in
 * turn (exactly on the CPU backend). Conversations may join or leave between ticks. A lone call
 * is the one-row case. */
#ifndef PP_MODEL_LMGEN_H
#define PP_MODEL_LMGEN_H

#include <stdint.h>

#include "model/lm.h"

#define PP_LMGEN_SILENCE_FRAMES 6 /* int(0.5 s · 12.5 Hz), each side of the text prompt */

/* Mimi codes of the agent's silence and of the user's 440 Hz tone (card 2048 only). */
extern const int32_t pp_lmgen_silence_codes[PP_LM_AUDIO_CODEBOOKS];
extern const int32_t pp_lmgen_sine_codes[PP_LM_AUDIO_CODEBOOKS];

typedef struct pp_lmgen_params {
    float text_temp; /* <= 0: greedy */
    int text_top_k;  /* <= 0: whole vocabulary */
    float audio_temp;
    int audio_top_k;
    int greedy;      /* argmax for every stream regardless of the temperatures */
    uint64_t text_seed;    /* draws of the text stream */
    uint64_t audio_seed;   /* draws of the audio streams */
    pp_kv_format kv_cache; /* storage of the temporal KV rings: f32 (reference), bf16 or int8 */
} pp_lmgen_params;

/* The reference's defaults: text 0.7 / top-25, audio 0.8 / top-250, sampling, seed 42424242;
 * f32 KV rings. */
void pp_lmgen_params_default(pp_lmgen_params *p);

typedef struct pp_lmgen_out {
    int ready;       /* 0 for the first max_delay + 1 calls: nothing is emitted yet */
    int32_t text;    /* text token (0..text_card-1) */
    int32_t agent[PP_LM_AUDIO_CODEBOOKS]; /* one aligned agent Mimi frame */
    int32_t user[PP_LM_AUDIO_CODEBOOKS];  /* the user frame at the same alignment */
} pp_lmgen_out;

/* Optional host buffers receiving the internals of each computing call (for verification). */
typedef struct pp_lmgen_trace {
    float *text_logits;   /* [text_card] */
    float *dep_logits;    /* [8][card]: depformer steps 0..7 (the agent codebooks) */
    float *layer_outputs; /* [num_layers][dim] */
    int heads_ran;        /* set to 1 when the call ran the text head and depformer */
} pp_lmgen_trace;

typedef struct pp_lmgen pp_lmgen;
typedef struct pp_lmbatch pp_lmbatch; /* scratch of a tick (below) */

/* A fresh conversation on lm (which must outlive it); p NULL uses the defaults. */
int pp_lmgen_create(const pp_lm *lm, const pp_lmgen_params *p, pp_lmgen **out, char *err);
void pp_lmgen_destroy(pp_lmgen *g);
/* Starts over (counter and flags, so the draws repeat for the same seed; p NULL keeps the settings; another kv_cache
 * format replaces the KV rings). Stale tokens and keys stay but are never read again, as in
 * the reference. */
int pp_lmgen_reset(pp_lmgen *g, const pp_lmgen_params *p, char *err);

/* Voice prompt of a voices/NAME.pt file: n_frames stored input embeddings (host [n][dim]) run
 * at positions 0..n-1, then the token ring becomes cache ([17][4], row-major). */
int pp_lmgen_prompt_voice(pp_lmgen *g, const float *embeddings, int n_frames, const int64_t *cache, char *err);
/* Whether every token of a voice's cache ([17][4]) is one the LM of c reads: text in
 * [0, text_card], audio in [0, card] (the top one each stream's initial token). label names
 * the voice in the message. */
int pp_lmgen_check_voice_tokens(const pp_lm_config *c, const int64_t *cache, const char *label, char *err);
/* frames forced frames of text PAD, agent silence and user sine. */
int pp_lmgen_prompt_silence(pp_lmgen *g, int frames, char *err);
/* One forced frame per text id (agent silence, user sine). */
int pp_lmgen_prompt_text(pp_lmgen *g, const int32_t *ids, int n, char *err);

/* The whole prompt schedule (docs/model.md §6) as data, for pp_lmgen_prefill: n_voice stored voice
 * embeddings (host [n_voice][dim]) then the ring restore from voice_cache ([17][4]; both unused
 * when n_voice is 0), `silence` forced silence frames, one frame per text id, `silence` frames. */
typedef struct pp_lmgen_prompt {
    const float *voice_emb;
    const int64_t *voice_cache;
    int n_voice;
    int silence;
    const int32_t *text;
    int n_text;
} pp_lmgen_prompt;

/* Frames in the schedule: n_voice + 2 · silence + n_text. */
int pp_lmgen_prompt_length(const pp_lmgen_prompt *p);
/* Runs frames [from, to) of prompt p on g, which has run frames [0, from) of it (from 0: g is
 * fresh). The same state as pp_lmgen_prompt_voice/silence/text frame by frame, but every run of
 * up to pp_lmbatch_capacity(b) consecutive frames is one pass of the temporal transformer over
 * that many rows (each row attends to the keys of the rows before it), so each weight is read
 * once per run instead of once per frame (bit for bit the same on the CPU backend). Every
 * stream of every prompt frame is forced, so nothing is sampled. b must be created on g's
 * model and must not be in use by another thread. On error g must be reset. */
int pp_lmgen_prefill(pp_lmgen *g, pp_lmbatch *b, const pp_lmgen_prompt *p, int from, int to, char *err);

/* ---- snapshots: a conversation's state after its prompts, to start others from ---- */
typedef struct pp_lmgen_snapshot pp_lmgen_snapshot;

/* Copies g's state to host memory: counter, token ring and flags, and of the KV rings only the
 * slots written so far (positions 0 .. n-2), not the whole context. PP_EUNSUPPORTED once g has
 * sampled a token: its state then depends on its seed, which a snapshot does not carry. */
int pp_lmgen_snapshot_take(const pp_lmgen *g, pp_lmgen_snapshot **out, char *err);
/* Makes g (any state, same model and KV format) continue exactly as the conversation the
 * snapshot was taken from, but with g's own sampling settings and seed (the prompts draw
 * nothing, so the seed alone decides what follows). */
int pp_lmgen_snapshot_restore(pp_lmgen *g, const pp_lmgen_snapshot *s, char *err);
/* Host bytes the snapshot holds (its KV slots and its bookkeeping). */
size_t pp_lmgen_snapshot_bytes(const pp_lmgen_snapshot *s);
void pp_lmgen_snapshot_free(pp_lmgen_snapshot *s);

/* A conversation frame: the user's 8 codes in, the generated column out. */
int pp_lmgen_step(pp_lmgen *g, const int32_t user[PP_LM_AUDIO_CODEBOOKS], pp_lmgen_out *out, char *err);
/* The general call: text < 0, agent NULL or user NULL leave that stream to the model. When
 * embedding is not NULL it receives the frame's input embedding (host [dim]) if the call
 * computed (returns 1 then, 0 for the compute-free first call) — what a voices/NAME.pt stores. */
int pp_lmgen_step_forced(pp_lmgen *g, int32_t text, const int32_t *agent, const int32_t *user, pp_lmgen_out *out,
                         float *embedding, char *err);

/* For timing only (admission's calibration): moves g `frames` frames on without computing them,
 * so its next calls attend over as many keys as calls that late do. Its KV cache keeps what it
 * holds (zeros when fresh) and its token ring holds valid tokens; what it says from then on
 * means nothing. g must have made its first call. */
int pp_lmgen_skip(pp_lmgen *g, int64_t frames, char *err);

/* Trace buffers for the following calls, or NULL to stop. */
void pp_lmgen_set_trace(pp_lmgen *g, pp_lmgen_trace *trace);
/* The call counter n (the reference's `offset`). */
int64_t pp_lmgen_offset(const pp_lmgen *g);
/* Width W of the token ring (4 for PersonaPlex) and a copy of it into dst [17][W]. */
int pp_lmgen_ring_width(const pp_lmgen *g);
void pp_lmgen_token_ring(const pp_lmgen *g, int64_t *dst);

/* ---- batches: many conversations, one tick ---- */

/* Scratch for ticks of up to capacity conversations of lm. */
int pp_lmbatch_create(const pp_lm *lm, int capacity, pp_lmbatch **out, char *err);
void pp_lmbatch_destroy(pp_lmbatch *b);
int pp_lmbatch_capacity(const pp_lmbatch *b);
/* Host and backend memory the batch takes. */
size_t pp_lmbatch_bytes(const pp_lmbatch *b);
/* One conversation frame for each of gens[0..n) (distinct, created on b's model, n <= capacity):
 * user[i] in, outs[i] out, exactly as pp_lmgen_step(gens[i], user[i], &outs[i]) for each i.
 * Arguments are checked before any conversation changes. */
int pp_lmbatch_step(pp_lmbatch *b, pp_lmgen *const *gens, int n, const int32_t (*user)[PP_LM_AUDIO_CODEBOOKS],
                    pp_lmgen_out *outs, char *err);

#endif
