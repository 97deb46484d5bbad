/* demo: a tiny built-in model for --demo and the end-to-end tests.
 *
 * pp_demo_write generates, deterministically and with no download, everything a pp_model
 * needs into a directory: an LM (dim 64, 2 layers, a 2-layer depformer) and a Mimi (the
 * sizes of tests/data/golden/mimi-synth) as safetensors with their config.json files, a small
 * SentencePiece tokenizer trained on built-in text, and the 18 preset voice prompts of the
 * official client (NATF0.pt ... VARM4.pt; the default is NATF2.pt). The
 * weights are random with scales chosen so the decoded audio is audible but bounded. It
 * speaks nonsense; it exists so the whole pipeline runs in real time on a small CPU. */
#ifndef PP_SESSION_DEMO_H
#define PP_SESSION_DEMO_H

#define PP_DEMO_PATH_MAX 4096

typedef struct pp_demo_files {
    char weights[PP_DEMO_PATH_MAX];    /* dir/lm.safetensors (config.json beside it) */
    char mimi[PP_DEMO_PATH_MAX];       /* dir/mimi/mimi.safetensors (config.json beside it) */
    char tokenizer[PP_DEMO_PATH_MAX];  /* dir/tokenizer.model */
    char voices_dir[PP_DEMO_PATH_MAX]; /* dir/voices */
} pp_demo_files;

/* Writes the demo model into dir (created if missing; existing files are replaced) and fills
 * out with the paths. */
int pp_demo_write(const char *dir, pp_demo_files *out, char *err);
/* The same with the LM's context (KV ring frames) set to lm_context (0: the default 3000), so
 * that tests outgrow the attention window in seconds. */
int pp_demo_write_context(const char *dir, int lm_context, pp_demo_files *out, char *err);

#endif
