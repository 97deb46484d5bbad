/* session: one conversation, from the prompt phases to the per-frame step.
 *
 * A pp_model holds what every conversation shares and never changes: the backend, the LM
 * and Mimi weights, the tokenizer and the voices directory. A pp_session holds one
 * conversation's state: its LM state (KV caches, token ring, RNG), its streaming Mimi state
 * and its prompt schedule (spec/lm.md §6: voice prompt, 0.5 s silence, <system>-wrapped
 * text prompt, 0.5 s silence). The prompt phases run one frame per pp_session_prefill call,
 * so a scheduler can interleave them with other sessions' conversation frames. After that,
 * pp_session_step turns 1920 input samples into 1920 output samples and at most one text
 * piece. Sessions are independent: any number may exist, each used by one thread at a time;
 * nothing is allocated per frame. */
#ifndef PP_SESSION_SESSION_H
#define PP_SESSION_SESSION_H

#include <stddef.h>

#include "backend/backend.h"
#include "session/params.h"

#define PP_SESSION_FRAME 1920   /* samples per 80 ms frame at 24 kHz */
#define PP_SESSION_PIECE_MAX 64 /* bytes of one text piece, NUL included */

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

/* Runs the next prompt frame. Returns 1 once every prompt frame has run (the client may get
 * its handshake), 0 while frames remain, or a negative code. */
int pp_session_prefill(pp_session *s, char *err);
/* Prompt frames in total (voice + silence + text + silence) and done so far. */
int pp_session_prompt_frames(const pp_session *s);
int pp_session_prompt_done(const pp_session *s);

/* One conversation frame: pcm_in (1920 samples) -> pcm_out (1920 samples). piece receives the
 * frame's text piece as UTF-8 ("" for the padding ids 0 and 3, "▁" already turned into a
 * space). times (may be NULL) receives the stage timings. */
int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err);

#endif
