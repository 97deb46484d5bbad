/* session: one conversation, from the prompt phases to the per-frame step.
 *
 * A pp_model holds what every conversation shares: the backend, the LM and Mimi weights, the
 * tokenizer, the voices directory, the KV format of new sessions, and optionally a prompt
 * cache. A pp_session holds one conversation's state: its LM state (KV caches, token ring,
 * sampling seed), its streaming Mimi state and its prompt schedule (spec/lm.md §6: voice prompt, 0.5 s
 * silence, <system>-wrapped text prompt, 0.5 s silence).
 *
 * Prompts: each pp_session_prefill call runs the next PP_SESSION_PREFILL_ROWS prompt frames as
 * one batched pass of the LM (so a scheduler can interleave them with other sessions' frames).
 * With a prompt cache (pp_model_set_prompt_cache) the first call looks for a conversation that
 * ran the same prompts (same model, KV format, voice file and prompt tokens) and copies its
 * state instead: the handshake then takes milliseconds. A session that ran its prompts stores
 * its state there for the next ones.
 *
 * Frames: pp_session_step turns 1920 input samples into 1920 output samples and at most one
 * text piece. It is three stages, which a server runs separately to batch sessions:
 * pp_session_encode (the session's Mimi), one pp_session_batch_step over every session with an
 * encoded frame (one LM tick, each weight read once for all), pp_session_decode. pp_session_step
 * is the one-session case; a batch gives each session exactly what stepping it alone gives (bit
 * for bit on the CPU backend). Sessions are independent: any number may exist, each used by
 * one thread at a time; nothing is allocated per frame. */
#ifndef PP_SESSION_SESSION_H
#define PP_SESSION_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/frame.h"
#include "session/params.h"

#define PP_SESSION_PIECE_MAX 64 /* bytes of one text piece, NUL included */
#define PP_SESSION_PREFILL_ROWS 32 /* prompt frames per pp_session_prefill call (one LM pass) */

typedef struct pp_model pp_model;
typedef struct pp_session pp_session;

typedef struct pp_model_paths {
    const char *weights;    /* LM checkpoint; a config.json beside it sets the architecture */
    const char *mimi;       /* Mimi weights; a mimi config.json may sit beside them */
    const char *tokenizer;  /* SentencePiece model */
    const char *voices_dir; /* NULL: only the built-in silence voice is available */
    const char *name;       /* reported by pp_model_name (e.g. "demo"); NULL: the weights' file name */
} pp_model_paths;

/* Loads the shared weights onto be (which must outlive the model). */
int pp_model_open(pp_backend *be, const pp_model_paths *paths, pp_model **out, char *err);
void pp_model_close(pp_model *m);
const char *pp_model_name(const pp_model *m);
const char *pp_model_backend(const pp_model *m);
pp_backend *pp_model_get_backend(const pp_model *m);
const char *pp_model_voices_dir(const pp_model *m);
/* KV ring format of the sessions created from now on (default f32, the reference). bf16 and
 * int8 need a backend with attn_step_kv (PP_EUNSUPPORTED otherwise). */
int pp_model_set_kv_cache(pp_model *m, pp_kv_format kv, char *err);
pp_kv_format pp_model_kv_cache(const pp_model *m);
/* Keeps up to `bytes` of prompt states in host memory (0, the default: none). Call before any
 * session exists. */
int pp_model_set_prompt_cache(pp_model *m, size_t bytes, char *err);
/* Prompt cache counters (all zero without a cache). */
typedef struct pp_prompt_cache_counts {
    uint64_t hits, misses, evictions;
    int entries;
    size_t bytes, budget;
} pp_prompt_cache_counts;
void pp_model_prompt_cache_counts(const pp_model *m, pp_prompt_cache_counts *out);

/* Wall time of the three stages of the last step, in milliseconds. */
typedef struct pp_step_times {
    double encode_ms, lm_ms, decode_ms;
} pp_step_times;

/* Creates a conversation: resolves the voice, tokenizes the prompt (more than
 * max_prompt_tokens is PP_EFULL with a message fit for the client), allocates the state.
 * Heavy model work waits for pp_session_prefill. */
int pp_session_create(pp_model *m, const pp_session_params *p, int max_prompt_tokens, pp_session **out,
                      char *err);
void pp_session_destroy(pp_session *s);

/* Runs the next PP_SESSION_PREFILL_ROWS prompt frames, or all of them at once from the prompt
 * cache. Returns 1 once every prompt frame has run (the client may get its handshake), 0
 * while frames remain, or a negative code. */
int pp_session_prefill(pp_session *s, char *err);
/* Prompt frames in total (voice + silence + text + silence) and done so far. */
int pp_session_prompt_frames(const pp_session *s);
int pp_session_prompt_done(const pp_session *s);
/* 1 when the prompts came from the prompt cache. */
int pp_session_prompt_cached(const pp_session *s);
/* 1 when a and b run the same prompts (voice, text, KV format) on one model that has a prompt
 * cache: once either has run them, the other can start from the cache. */
int pp_session_shares_prompt(const pp_session *a, const pp_session *b);

/* One conversation frame: pcm_in (1920 samples) -> pcm_out (1920 samples). piece receives the
 * frame's text piece as UTF-8 ("" for the padding ids 0 and 3, "▁" already turned into a
 * space). times (may be NULL) receives the stage timings. */
int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err);

/* ---- the three stages of a frame, for batching sessions ---- */
typedef struct pp_session_batch pp_session_batch;

/* Scratch for LM ticks of up to capacity sessions of m. */
int pp_session_batch_create(pp_model *m, int capacity, pp_session_batch **out, char *err);
void pp_session_batch_destroy(pp_session_batch *b);
/* Stage 1: pcm_in (1920 samples) through the session's Mimi encoder into its user codes. */
int pp_session_encode(pp_session *s, const float *pcm_in, char *err);
/* Stage 2: one LM tick for ss[0..n) (distinct sessions of b's model, each encoded once since its
 * last decode, n <= capacity). Checked before any session changes. */
int pp_session_batch_step(pp_session_batch *b, pp_session *const *ss, int n, char *err);
/* Stage 3: the tick's agent codes through the Mimi decoder into pcm_out, and the text piece. */
int pp_session_decode(pp_session *s, float *pcm_out, char piece[PP_SESSION_PIECE_MAX], char *err);

#endif
