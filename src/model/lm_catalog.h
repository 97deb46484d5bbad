/* lm_catalog: every tensor of a PersonaPlex / Moshi LM checkpoint, the one list of them.
 *
 * Names are the released checkpoint's state-dict keys; shapes follow the configuration
 * (docs/model.md). The loader (lm.c), the demo model writer, the quantizer's selection and
 * the inspector all read this list; nothing else spells a tensor name. Norm scales are
 * stored [1, 1, d]; every other tensor is a [rows, cols] matrix. */
#ifndef PP_MODEL_LM_CATALOG_H
#define PP_MODEL_LM_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "io/weight.h"
#include "model/lm_config.h"

typedef enum pp_lm_part {
    PP_LM_EMB,         /* emb.{i}: audio stream i's embedding, i < n_q */
    PP_LM_TEXT_EMB,    /* text token embedding */
    PP_LM_TEXT_LINEAR, /* text logits */
    PP_LM_OUT_NORM,    /* the temporal transformer's final norm */
    PP_LM_NORM1,       /* layer parts: of the temporal transformer or the depformer */
    PP_LM_NORM2,
    PP_LM_ATTN_IN, /* Q, K, V stacked; the depformer's holds every step's */
    PP_LM_ATTN_OUT,
    PP_LM_FFN_IN, /* gate and value stacked; the depformer has one per step */
    PP_LM_FFN_OUT,
    PP_LM_DEP_IN,       /* depformer_in.{k}: temporal output into depformer step k */
    PP_LM_LINEAR,       /* linears.{k}: codebook k's logits */
    PP_LM_DEP_EMB,      /* depformer_emb.{k}: codebook k's token into step k + 1 */
    PP_LM_DEP_TEXT_EMB, /* the text token into depformer step 0 */
    PP_LM_PART_COUNT
} pp_lm_part;

typedef struct pp_lm_tensor {
    char name[128];
    pp_lm_part part;
    int depformer;        /* a layer part of the depformer (else of the temporal transformer) */
    int layer;            /* layer parts; -1 otherwise */
    int index;            /* stream, step or codebook index; -1 where the part has none */
    int ndim;             /* 2, or 3 for a norm's [1, 1, d] */
    int64_t rows, cols;   /* a norm: 1, d */
    const char *cfg_keys; /* the configuration keys the shape follows, for messages */
} pp_lm_tensor;

/* A short name for logs and tools: "emb", "attn_in", ... */
const char *pp_lm_part_name(pp_lm_part part);
/* A layer part (norms, attention and feed-forward projections). */
int pp_lm_part_in_layer(pp_lm_part part);
/* A projection of a transformer layer: what bitsandbytes' 4-bit recipe quantises when only
 * the temporal transformer is (depformer = 0). */
int pp_lm_part_is_linear(pp_lm_part part);

/* A token embedding table (rows are looked up, not multiplied). */
int pp_lm_part_is_embedding(pp_lm_part part);
/* moshi.cpp stores each step's attention projections apart, where the release stacks them (the
 * temporal transformer's single one as step 0): the name of step `step`'s part of the ATTN_IN
 * or ATTN_OUT entry t. */
void pp_lm_step_projection_name(const pp_lm_tensor *t, int step, char *buf, size_t cap);
/* The stored shape: [rows, cols], or a norm's [1, 1, d]; returns ndim. */
int pp_lm_tensor_shape(const pp_lm_tensor *t, int64_t shape[3]);

/* Quantizing while loading (the server's --quantize): the format (NF2, INT4, NF4 or INT8), its group (0: the format's
 * default; PP_QUANTIZE_ROW: INT8 per row), and whether only the temporal transformer's
 * projections are quantized (bitsandbytes' 4-bit recipe) rather than what the offline tool does. */
typedef struct pp_lm_quantize {
    pp_wformat fmt;
    int group;
    int temporal_only;
} pp_lm_quantize;
/* Whether quantizing with q covers the stored tensor NAME of ndim dims: what personaplex-quantize
 * quantizes for the format (every matrix; bitsandbytes NF4 the temporal projections), narrowed
 * to the temporal transformer's projections when q->temporal_only. */
int pp_lm_quantizes(const pp_lm_quantize *q, const char *name, int ndim);

/* Calls fn once per tensor under c, in the released checkpoint's order; stops at the first
 * nonzero return of fn and returns it (0 when all ran). */
int pp_lm_catalog(const pp_lm_config *c, int (*fn)(void *ctx, const pp_lm_tensor *t), void *ctx);
/* Which catalogued tensor NAME is, by its name alone (part, depformer, layer, index; the shape
 * fields are left 0). 0: found; -1: not an LM tensor name. Also knows `in_proj.weight` for
 * `in_proj_weight`, as some exporters write it. */
int pp_lm_catalog_find(const char *name, pp_lm_tensor *out);

#endif
