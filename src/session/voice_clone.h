/* voice_clone: a voice prompt made from a speech clip (docs/model.md §6.1), the same thing the
 * released voices/NAME.pt files hold (§6.2), so a clone can be saved with pp_voice_save_pt
 * and used like a preset.
 *
 * Audio path: resample to the codec's rate (24 kHz), loudness-normalise to -24 LUFS, cut into
 * 1920-sample frames (the last zero-padded), encode each with a fresh streaming Mimi. Codes
 * path: from a fresh generator, each frame's 8 codes are forced as the agent's stream with
 * text PAD and the user's sine codes; the input embedding of every computing call (all but
 * the first, which only seeds the token ring) is kept, and the token ring at the end becomes
 * the cache. N frames give N-1 embeddings. */
#ifndef PP_SESSION_VOICE_CLONE_H
#define PP_SESSION_VOICE_CLONE_H

#include <stdint.h>

#include "io/voice.h"
#include "model/lm.h"
#include "model/mimi.h"

#define PP_VOICE_CLONE_LUFS -24.0

/* codes: [n_frames][8] Mimi codes, n_frames >= 2. out is filled on success (free with
 * pp_voice_free) and zeroed on failure. */
int pp_voice_clone_codes(const pp_lm *lm, const int32_t *codes, int64_t n_frames, pp_voice *out, char *err);

/* pcm: n mono samples at rate. gain_db (may be NULL) receives the loudness correction
 * applied, n_frames (may be NULL) the number of codec frames. */
int pp_voice_clone_audio(const pp_lm *lm, const mimi_model *mimi, const float *pcm, int64_t n, int rate, pp_voice *out,
                         double *gain_db, int64_t *n_frames, char *err);

#endif
