/* lm_case: a golden LM case (tests/data/golden/lm-* and heldout/lm-*) loaded for tests that
 * replay it in other ways than the golden runner: its model on the CPU backend (on the
 * emulated CUDA backend in the tests/cuda_emu build), the prompt inputs, the user codes of
 * every step and the reference's emitted tokens. */
#ifndef PP_TESTS_LM_CASE_H
#define PP_TESTS_LM_CASE_H

#include <stdint.h>

#include "model/lmgen.h"

#define LM_CASE_MAX 16

#ifndef LM_CASE_DEVICE
#define LM_CASE_DEVICE "cpu"
#endif

typedef struct lm_case {
    char dir[512];
    const char *name;       /* "lm-bf16", "heldout/lm-nf2-s5", ... */
    pp_backend *be;
    pp_lm *lm;
    const pp_lm_config *cfg;
    float *voice_emb;       /* [n_voice][dim] */
    int64_t *voice_cache;   /* [17][4] */
    int n_voice, silence, n_text, n_steps;
    int32_t *text;          /* [n_text] */
    int32_t (*user)[PP_LM_AUDIO_CODEBOOKS]; /* [n_steps] */
    int64_t *tokens;        /* [n_steps][17]: reference out tokens, -1 where nothing is emitted */
} lm_case;

/* The case directories under PP_TEST_DATA/golden, sorted; returns how many (<= LM_CASE_MAX). */
int lm_case_list(char dirs[LM_CASE_MAX][512]);
/* Loads dir's model (on LM_CASE_DEVICE, `threads` CPU threads) and golden inputs. */
int lm_case_open(const char *dir, int threads, lm_case *c, char *err);
void lm_case_close(lm_case *c);
/* Runs every prompt phase of the case on g (voice, silence, text, silence). */
int lm_case_prompt(const lm_case *c, pp_lmgen *g, char *err);

#endif
