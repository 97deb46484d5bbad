/* lm_config: the language model's hyper-parameters (docs/model.md §1).
 *
 * Read from a config.json that uses the reference's key names (`dim`, `num_heads`,
 * `depformer_dim`, `delays`, ...); keys absent from the file keep the PersonaPlex-7B values.
 * Options the engine does not implement (another gating, norm or positional embedding,
 * LayerScale, a non-causal model) are refused; keys it does not use (unknown ones, and
 * depformer_context / depformer_max_period, which the reference overrides) are logged once and
 * ignored. Derived sizes (FFN hidden widths, head dims) are computed here so the loader can
 * check every tensor against them. */
#ifndef PP_MODEL_LM_CONFIG_H
#define PP_MODEL_LM_CONFIG_H

#include <stddef.h>

/* Streams of the token table: text, 8 agent codebooks, 8 user codebooks. */
#define PP_LM_STREAMS 17
#define PP_LM_AUDIO_CODEBOOKS 8
#define PP_LM_MAX_DEP_Q 16
#define PP_LM_TEXT_PAD 3 /* the text stream's pad token (existing_text_padding_id): every non-text frame's */

typedef struct pp_lm_config {
    /* temporal transformer */
    int dim, num_heads, num_layers;
    double hidden_scale;
    int ffn_hidden;      /* derived: gate (= value) width of `gating.linear_in` */
    int context;         /* KV ring capacity; a query sees context-1 keys (spec §3.4) */
    double max_period;   /* RoPE base */
    float norm_eps;      /* RMSNorm epsilon (1e-8, fixed by `rms_norm_f32`) */
    /* vocabularies and streams */
    int n_q, dep_q, card, text_card, existing_text_padding_id;
    int delays[PP_LM_STREAMS];
    /* depformer */
    int dep_dim, dep_num_heads, dep_num_layers;
    int dep_dim_feedforward;
    int dep_ffn_hidden;  /* derived */
} pp_lm_config;

/* The PersonaPlex-7B values of docs/model.md §1. */
void pp_lm_config_default(pp_lm_config *c);
/* Fills c with the defaults, then the keys of config.json text (label names it in messages),
 * and validates the result. */
int pp_lm_config_parse(const char *text, size_t len, const char *label, pp_lm_config *c, char *err);
/* Reads and parses the file at path. */
int pp_lm_config_load(const char *path, pp_lm_config *c, char *err);
/* The config.json beside a checkpoint (same directory; inside it for an ONNX bundle folder),
 * written into buf: buf when it is readable, else NULL (the checkpoint runs with the defaults). */
const char *pp_lm_config_beside(const char *weights_path, char *buf, size_t cap);
/* Checks ranges and derives the hidden widths; called by both functions above. */
int pp_lm_config_validate(pp_lm_config *c, const char *label, char *err);
/* Largest stream delay (1 for PersonaPlex). */
int pp_lm_config_max_delay(const pp_lm_config *c);

#endif
