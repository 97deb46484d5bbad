/* session: the shared model and one conversation's prompt schedule and frame step.
 *
 * One conversation frame (spec/protocol.md §1.5, spec/lm.md §5-6):
 *   user pcm [1920] --Mimi encode--> user codes [8] --LM step--> text token + agent codes [8]
 *   agent codes --Mimi decode--> model pcm [1920];  text token --SentencePiece--> piece
 * The prompt schedule runs the reference's phases one frame per call so the caller can
 * interleave sessions: voice embeddings (V frames), 6 silence frames, one frame per prompt
 * token, 6 silence frames. Running the voice phase one frame at a time is the same
 * computation as running it whole: each frame replaces the embedding sum and the token ring
 * is restored from the voice's cache after every frame, the last restore being the one that
 * counts. */
#include "session/session.h"

#include "base/err.h"
#include "base/log.h"
#include "io/voice.h"
#include "model/lmgen.h"
#include "model/mimi.h"
#include "text/spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct pp_model {
    pp_backend *be;
    pp_lm *lm;
    mimi_model *mimi;
    pp_spm *spm;
    char name[256];
    char voices_dir[4096]; /* "" when none */
};

typedef enum { PHASE_VOICE, PHASE_SILENCE1, PHASE_TEXT, PHASE_SILENCE2, PHASE_DONE } prompt_phase;

struct pp_session {
    const pp_model *m;
    pp_lmgen *gen;
    mimi_state *mimi;
    pp_voice voice;      /* frames == 0 when the model has no voices directory */
    int32_t *prompt;     /* [n_prompt] token ids of the <system>-wrapped text prompt */
    int n_prompt;
    prompt_phase phase;
    int pos;             /* frames done within the phase */
    int done;            /* prompt frames done in total */
    int32_t user[PP_LM_AUDIO_CODEBOOKS];
};

/* ---- model ---------------------------------------------------------------------------------- */

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void pp_model_close(pp_model *m) {
    if (!m) return;
    pp_lm_close(m->lm);
    mimi_close(m->mimi);
    pp_spm_free(m->spm);
    free(m);
}

int pp_model_open(pp_backend *be, const pp_model_paths *paths, pp_model **out, char *err) {
    pp_model *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "model: out of memory");
    m->be = be;
    snprintf(m->name, sizeof m->name, "%s", paths->name ? paths->name : base_name(paths->weights));
    if (paths->voices_dir) snprintf(m->voices_dir, sizeof m->voices_dir, "%s", paths->voices_dir);
    /* The LM's architecture comes from a config.json beside its weights, if there is one. */
    char config[4200];
    const char *slash = strrchr(paths->weights, '/');
    snprintf(config, sizeof config, "%.*sconfig.json", slash ? (int)(slash - paths->weights + 1) : 0, paths->weights);
    int rc = pp_lm_open(be, paths->weights, access(config, R_OK) == 0 ? config : NULL, &m->lm, err);
    if (!rc) rc = mimi_open(be, paths->mimi, NULL, &m->mimi, err);
    if (!rc) rc = pp_spm_load_file(&m->spm, paths->tokenizer, err);
    if (!rc && mimi_get_config(m->mimi)->frame_size != PP_SESSION_FRAME)
        rc = pp_fail(err, PP_EUNSUPPORTED, "%s: frame size %d; the protocol needs %d", paths->mimi,
                     mimi_get_config(m->mimi)->frame_size, PP_SESSION_FRAME);
    if (!rc && pp_spm_vocab_size(m->spm) > pp_lm_get_config(m->lm)->text_card)
        rc = pp_fail(err, PP_EINVAL, "%s has %d pieces but the LM's text_card is %d", paths->tokenizer,
                     pp_spm_vocab_size(m->spm), pp_lm_get_config(m->lm)->text_card);
    if (rc) {
        pp_model_close(m);
        return rc;
    }
    *out = m;
    return PP_OK;
}

const char *pp_model_name(const pp_model *m) { return m->name; }
const char *pp_model_backend(const pp_model *m) { return m->be->ops->name; }
pp_backend *pp_model_get_backend(const pp_model *m) { return m->be; }
const char *pp_model_voices_dir(const pp_model *m) { return m->voices_dir[0] ? m->voices_dir : NULL; }

/* ---- session -------------------------------------------------------------------------------- */

void pp_session_destroy(pp_session *s) {
    if (!s) return;
    pp_lmgen_destroy(s->gen);
    mimi_state_destroy(s->mimi);
    pp_voice_free(&s->voice);
    free(s->prompt);
    free(s);
}

static int load_voice(const pp_model *m, const char *name, pp_voice *v, char *err) {
    if (!m->voices_dir[0]) {
        PP_WARN("session", "no voices directory: voice '%s' ignored, no voice prompt", name);
        return PP_OK;
    }
    char path[4200];
    int rc = pp_voice_resolve(m->voices_dir, name, path, sizeof path, err);
    if (!rc) rc = pp_voice_load(path, pp_lm_get_config(m->lm)->dim, v, err);
    return rc;
}

int pp_session_create(pp_model *m, const pp_session_params *p, int max_prompt_tokens, pp_session **out, char *err) {
    pp_session *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "session: out of memory");
    s->m = m;
    size_t n = 0;
    int rc = load_voice(m, p->voice, &s->voice, err);
    if (!rc && !(s->prompt = malloc((size_t)max_prompt_tokens * sizeof *s->prompt)))
        rc = pp_fail(err, PP_ENOMEM, "session: out of memory");
    if (!rc) {
        rc = pp_spm_encode_prompt(m->spm, p->text_prompt, s->prompt, (size_t)max_prompt_tokens, &n, err);
        if (rc == PP_EFULL)
            pp_fail(err, PP_EFULL, "the text prompt is too long: the limit is %d tokens", max_prompt_tokens);
    }
    s->n_prompt = (int)n;
    pp_lmgen_params lp;
    pp_lmgen_params_default(&lp);
    lp.text_temp = p->text_temperature;
    lp.text_top_k = p->text_topk;
    lp.audio_temp = p->audio_temperature;
    lp.audio_top_k = p->audio_topk;
    /* One RNG per conversation: the two client seeds are folded into it. */
    lp.seed = p->text_seed == p->audio_seed ? p->text_seed : p->text_seed * 0x9e3779b97f4a7c15ull ^ p->audio_seed;
    if (!rc) rc = pp_lmgen_create(m->lm, &lp, &s->gen, err);
    if (!rc) rc = mimi_state_create(m->mimi, &s->mimi, err);
    if (rc) {
        pp_session_destroy(s);
        return rc;
    }
    s->phase = s->voice.frames ? PHASE_VOICE : PHASE_SILENCE1;
    *out = s;
    return PP_OK;
}

int pp_session_prompt_frames(const pp_session *s) {
    return (int)s->voice.frames + 2 * PP_LMGEN_SILENCE_FRAMES + s->n_prompt;
}

int pp_session_prompt_done(const pp_session *s) { return s->done; }

/* Frames in each phase, in order. */
static int phase_length(const pp_session *s, prompt_phase ph) {
    switch (ph) {
    case PHASE_VOICE: return (int)s->voice.frames;
    case PHASE_SILENCE1:
    case PHASE_SILENCE2: return PP_LMGEN_SILENCE_FRAMES;
    case PHASE_TEXT: return s->n_prompt;
    case PHASE_DONE: return 0;
    }
    return 0;
}

int pp_session_prefill(pp_session *s, char *err) {
    while (s->phase != PHASE_DONE && s->pos >= phase_length(s, s->phase)) {
        s->phase++;
        s->pos = 0;
    }
    if (s->phase == PHASE_DONE) return 1;
    int rc = PP_OK;
    switch (s->phase) {
    case PHASE_VOICE:
        rc = pp_lmgen_prompt_voice(s->gen, s->voice.embeddings + (size_t)s->pos * (size_t)s->voice.dim, 1,
                                   &s->voice.cache[0][0], err);
        break;
    case PHASE_SILENCE1:
    case PHASE_SILENCE2: rc = pp_lmgen_prompt_silence(s->gen, 1, err); break;
    case PHASE_TEXT: rc = pp_lmgen_prompt_text(s->gen, s->prompt + s->pos, 1, err); break;
    case PHASE_DONE: break;
    }
    if (rc) return rc;
    s->pos++;
    s->done++;
    if (s->done < pp_session_prompt_frames(s)) return 0;
    /* The reference resets the codec before the conversation (spec/lm.md §6.1). */
    mimi_state_reset(s->mimi);
    s->phase = PHASE_DONE;
    return 1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err) {
    piece[0] = '\0';
    if (s->phase != PHASE_DONE) return pp_fail(err, PP_EINVAL, "session: step before the prompts have run");
    double t0 = now_ms();
    int rc = mimi_encode_frame(s->mimi, pcm_in, s->user, NULL, err);
    double t1 = now_ms();
    pp_lmgen_out out;
    if (!rc) rc = pp_lmgen_step(s->gen, s->user, &out, err);
    double t2 = now_ms();
    if (rc) return rc;
    if (out.ready) {
        if ((rc = mimi_decode_frame(s->mimi, out.agent, pcm_out, err))) return rc;
        /* Padding ids (0 EPAD, 3 PAD) are not sent (spec/protocol.md §2.3). A piece that does
         * not fit is dropped rather than cut, so every message stays valid UTF-8. */
        if (out.text != 0 && out.text != PP_LMGEN_TEXT_PAD &&
            pp_spm_piece(s->m->spm, out.text, piece, PP_SESSION_PIECE_MAX, NULL) != PP_OK)
            piece[0] = '\0';
    } else {
        memset(pcm_out, 0, PP_SESSION_FRAME * sizeof *pcm_out);
    }
    if (times) *times = (pp_step_times){t1 - t0, t2 - t1, now_ms() - t2};
    return PP_OK;
}
