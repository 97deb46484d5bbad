/* lm_catalog: see lm_catalog.h. */
#include "model/lm_catalog.h"

#include "io/quant_file.h"

#include <stdio.h>
#include <string.h>

#define KEYS_TEMPORAL "dim, num_heads, num_layers, hidden_scale"
#define KEYS_DEPFORMER "depformer_dim, depformer_num_heads, depformer_num_layers, depformer_dim_feedforward, dep_q"

/* A part's key: a printf format taking the layer then the index, as the part has them. The
 * second column is the depformer's where its layers name it differently. */
static const char *const NAMES[PP_LM_PART_COUNT][2] = {
    [PP_LM_EMB] = {"emb.%d.weight"},
    [PP_LM_TEXT_EMB] = {"text_emb.weight"},
    [PP_LM_TEXT_LINEAR] = {"text_linear.weight"},
    [PP_LM_OUT_NORM] = {"out_norm.alpha"},
    [PP_LM_NORM1] = {"transformer.layers.%d.norm1.alpha", "depformer.layers.%d.norm1.alpha"},
    [PP_LM_NORM2] = {"transformer.layers.%d.norm2.alpha", "depformer.layers.%d.norm2.alpha"},
    [PP_LM_ATTN_IN] = {"transformer.layers.%d.self_attn.in_proj_weight",
                       "depformer.layers.%d.self_attn.in_proj_weight"},
    [PP_LM_ATTN_OUT] = {"transformer.layers.%d.self_attn.out_proj.weight",
                        "depformer.layers.%d.self_attn.out_proj.weight"},
    [PP_LM_FFN_IN] = {"transformer.layers.%d.gating.linear_in.weight",
                      "depformer.layers.%d.gating.%d.linear_in.weight"},
    [PP_LM_FFN_OUT] = {"transformer.layers.%d.gating.linear_out.weight",
                       "depformer.layers.%d.gating.%d.linear_out.weight"},
    [PP_LM_DEP_IN] = {"depformer_in.%d.weight"},
    [PP_LM_LINEAR] = {"linears.%d.weight"},
    [PP_LM_DEP_EMB] = {"depformer_emb.%d.weight"},
    [PP_LM_DEP_TEXT_EMB] = {"depformer_text_emb.weight"},
};

/* moshi.cpp stores each step's attention projections apart (layer, step): the depformer's 16,
 * and the temporal transformer's one as step 0. */
#define STEP_IN_PROJ "depformer.layers.%d.self_attn.in_projs.%d.weight"
#define STEP_OUT_PROJ "depformer.layers.%d.self_attn.out_projs.%d.weight"
#define TEMPORAL_IN_PROJ "transformer.layers.%d.self_attn.in_projs.%d.weight"
#define TEMPORAL_OUT_PROJ "transformer.layers.%d.self_attn.out_projs.%d.weight"

/* Other spellings of catalogued tensors that files in the wild use, for find: the attention
 * input as a module weight, and moshi.cpp's per-step projections. */
static const struct {
    pp_lm_part part;
    int depformer;
    const char *fmt;
} ALIASES[] = {
    {PP_LM_ATTN_IN, 0, "transformer.layers.%d.self_attn.in_proj.weight"},
    {PP_LM_ATTN_IN, 1, "depformer.layers.%d.self_attn.in_proj.weight"},
    {PP_LM_ATTN_IN, 1, STEP_IN_PROJ},
    {PP_LM_ATTN_OUT, 1, STEP_OUT_PROJ},
    {PP_LM_ATTN_IN, 0, TEMPORAL_IN_PROJ},
    {PP_LM_ATTN_OUT, 0, TEMPORAL_OUT_PROJ},
};

void pp_lm_step_projection_name(const pp_lm_tensor *t, int step, char *buf, size_t cap) {
    const char *fmt = t->part == PP_LM_ATTN_IN ? (t->depformer ? STEP_IN_PROJ : TEMPORAL_IN_PROJ)
                                               : (t->depformer ? STEP_OUT_PROJ : TEMPORAL_OUT_PROJ);
    snprintf(buf, cap, fmt, t->layer, step);
}

const char *pp_lm_part_name(pp_lm_part part) {
    static const char *const names[PP_LM_PART_COUNT] = {
        [PP_LM_EMB] = "emb",
        [PP_LM_TEXT_EMB] = "text_emb",
        [PP_LM_TEXT_LINEAR] = "text_linear",
        [PP_LM_OUT_NORM] = "out_norm",
        [PP_LM_NORM1] = "norm1",
        [PP_LM_NORM2] = "norm2",
        [PP_LM_ATTN_IN] = "attn_in",
        [PP_LM_ATTN_OUT] = "attn_out",
        [PP_LM_FFN_IN] = "ffn_in",
        [PP_LM_FFN_OUT] = "ffn_out",
        [PP_LM_DEP_IN] = "dep_in",
        [PP_LM_LINEAR] = "linears",
        [PP_LM_DEP_EMB] = "dep_emb",
        [PP_LM_DEP_TEXT_EMB] = "dep_text_emb",
    };
    return part >= 0 && part < PP_LM_PART_COUNT ? names[part] : "?";
}

int pp_lm_part_in_layer(pp_lm_part part) { return part >= PP_LM_NORM1 && part <= PP_LM_FFN_OUT; }

int pp_lm_part_is_linear(pp_lm_part part) { return part >= PP_LM_ATTN_IN && part <= PP_LM_FFN_OUT; }

int pp_lm_part_is_embedding(pp_lm_part part) {
    return part == PP_LM_EMB || part == PP_LM_TEXT_EMB || part == PP_LM_DEP_EMB || part == PP_LM_DEP_TEXT_EMB;
}

static int part_has_index(pp_lm_part part, int depformer) {
    switch (part) {
    case PP_LM_EMB:
    case PP_LM_DEP_IN:
    case PP_LM_LINEAR:
    case PP_LM_DEP_EMB: return 1;
    case PP_LM_FFN_IN:
    case PP_LM_FFN_OUT: return depformer;
    default: return 0;
    }
}

/* Fills t's name and shape from the part, the stack, the layer and the index. */
static void describe(const pp_lm_config *c, pp_lm_part part, int depformer, int layer, int index, pp_lm_tensor *t) {
    memset(t, 0, sizeof *t);
    t->part = part;
    t->depformer = depformer;
    t->layer = pp_lm_part_in_layer(part) ? layer : -1;
    t->index = part_has_index(part, depformer) ? index : -1;
    const char *fmt = NAMES[part][depformer];
    if (t->layer >= 0 && t->index >= 0)
        snprintf(t->name, sizeof t->name, fmt, layer, index);
    else if (t->layer >= 0)
        snprintf(t->name, sizeof t->name, fmt, layer);
    else if (t->index >= 0)
        snprintf(t->name, sizeof t->name, fmt, index);
    else
        snprintf(t->name, sizeof t->name, "%s", fmt);
    int64_t d = depformer ? c->dep_dim : c->dim, hidden = depformer ? c->dep_ffn_hidden : c->ffn_hidden;
    int64_t steps = depformer ? c->dep_q : 1; /* the depformer's attention holds every step's */
    t->ndim = 2;
    t->cfg_keys = depformer ? KEYS_DEPFORMER : KEYS_TEMPORAL;
    switch (part) {
    case PP_LM_EMB: t->rows = c->card + 1, t->cols = c->dim, t->cfg_keys = "card, dim"; break;
    case PP_LM_TEXT_EMB: t->rows = c->text_card + 1, t->cols = c->dim, t->cfg_keys = "text_card, dim"; break;
    case PP_LM_TEXT_LINEAR:
        t->rows = c->text_card, t->cols = c->dim, t->cfg_keys = "text_card, existing_text_padding_id, dim";
        break;
    case PP_LM_OUT_NORM: t->ndim = 3, t->rows = 1, t->cols = c->dim, t->cfg_keys = "dim"; break;
    case PP_LM_NORM1:
    case PP_LM_NORM2: t->ndim = 3, t->rows = 1, t->cols = d; break;
    case PP_LM_ATTN_IN: t->rows = steps * 3 * d, t->cols = d; break;
    case PP_LM_ATTN_OUT: t->rows = steps * d, t->cols = d; break;
    case PP_LM_FFN_IN: t->rows = 2 * hidden, t->cols = d; break;
    case PP_LM_FFN_OUT: t->rows = d, t->cols = hidden; break;
    case PP_LM_DEP_IN: t->rows = c->dep_dim, t->cols = c->dim, t->cfg_keys = "depformer_dim, dim"; break;
    case PP_LM_LINEAR: t->rows = c->card, t->cols = c->dep_dim, t->cfg_keys = "card, depformer_dim"; break;
    case PP_LM_DEP_EMB: t->rows = c->card + 1, t->cols = c->dep_dim, t->cfg_keys = "card, depformer_dim"; break;
    case PP_LM_DEP_TEXT_EMB:
        t->rows = c->text_card + 1, t->cols = c->dep_dim, t->cfg_keys = "text_card, depformer_dim";
        break;
    case PP_LM_PART_COUNT: break;
    }
}

int pp_lm_tensor_shape(const pp_lm_tensor *t, int64_t shape[3]) {
    if (t->ndim == 3)
        shape[0] = 1, shape[1] = 1, shape[2] = t->cols;
    else
        shape[0] = t->rows, shape[1] = t->cols;
    return t->ndim;
}

typedef struct walk {
    const pp_lm_config *c;
    int (*fn)(void *ctx, const pp_lm_tensor *t);
    void *ctx;
} walk;

static int emit(const walk *w, pp_lm_part part, int depformer, int layer, int index) {
    pp_lm_tensor t;
    describe(w->c, part, depformer, layer, index, &t);
    return w->fn(w->ctx, &t);
}

static int emit_layers(const walk *w, int depformer) {
    int layers = depformer ? w->c->dep_num_layers : w->c->num_layers, steps = depformer ? w->c->dep_q : 1;
    static const pp_lm_part head[] = {PP_LM_ATTN_IN, PP_LM_ATTN_OUT, PP_LM_NORM1, PP_LM_NORM2};
    int rc = 0;
    for (int l = 0; l < layers && !rc; l++) {
        for (size_t i = 0; i < sizeof head / sizeof head[0] && !rc; i++) rc = emit(w, head[i], depformer, l, -1);
        for (int s = 0; s < steps && !rc; s++) {
            rc = emit(w, PP_LM_FFN_IN, depformer, l, s);
            if (!rc) rc = emit(w, PP_LM_FFN_OUT, depformer, l, s);
        }
    }
    return rc;
}

int pp_lm_catalog(const pp_lm_config *c, int (*fn)(void *ctx, const pp_lm_tensor *t), void *ctx) {
    walk w = {.c = c, .fn = fn, .ctx = ctx};
    int rc = 0;
    for (int i = 0; i < c->n_q && !rc; i++) rc = emit(&w, PP_LM_EMB, 0, -1, i);
    static const pp_lm_part top[] = {PP_LM_TEXT_EMB, PP_LM_TEXT_LINEAR, PP_LM_OUT_NORM};
    for (size_t i = 0; i < sizeof top / sizeof top[0] && !rc; i++) rc = emit(&w, top[i], 0, -1, -1);
    if (!rc) rc = emit_layers(&w, 0);
    if (!rc) rc = emit_layers(&w, 1);
    for (int k = 0; k < c->dep_q && !rc; k++) {
        rc = emit(&w, PP_LM_DEP_IN, 0, -1, k);
        if (!rc) rc = emit(&w, PP_LM_LINEAR, 0, -1, k);
        if (!rc && k) rc = emit(&w, PP_LM_DEP_EMB, 0, -1, k - 1);
    }
    if (!rc) rc = emit(&w, PP_LM_DEP_TEXT_EMB, 0, -1, -1);
    return rc;
}

/* Matches name against fmt, whose only conversions are %d (a decimal number without sign or
 * leading zeros); fills up to two numbers. */
static int match(const char *fmt, const char *name, int num[2]) {
    int n = 0;
    num[0] = num[1] = -1;
    while (*fmt) {
        if (fmt[0] == '%' && fmt[1] == 'd') {
            if (*name < '0' || *name > '9' || (name[0] == '0' && name[1] >= '0' && name[1] <= '9') || n == 2) return 0;
            long v = 0;
            for (; *name >= '0' && *name <= '9'; name++)
                if ((v = v * 10 + (*name - '0')) > 1000000) return 0;
            num[n++] = (int)v;
            fmt += 2;
        } else if (*fmt++ != *name++) {
            return 0;
        }
    }
    return *name == '\0';
}

/* The parsed numbers of a match as the part's layer and index. */
static void place(pp_lm_tensor *t, pp_lm_part part, int depformer, const int num[2]) {
    memset(t, 0, sizeof *t);
    t->part = part;
    t->depformer = depformer;
    int k = 0;
    t->layer = pp_lm_part_in_layer(part) ? num[k++] : -1;
    t->index = part_has_index(part, depformer) || (depformer && pp_lm_part_is_linear(part)) ? num[k] : -1;
}

int pp_lm_catalog_find(const char *name, pp_lm_tensor *out) {
    int num[2];
    for (int p = 0; p < PP_LM_PART_COUNT; p++)
        for (int dep = 0; dep < 2; dep++)
            if (NAMES[p][dep] && match(NAMES[p][dep], name, num)) {
                place(out, (pp_lm_part)p, dep, num);
                snprintf(out->name, sizeof out->name, "%s", name);
                return 0;
            }
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (match(ALIASES[i].fmt, name, num)) {
            place(out, ALIASES[i].part, ALIASES[i].depformer, num);
            snprintf(out->name, sizeof out->name, "%s", name);
            return 0;
        }
    return -1;
}

int pp_lm_quantizes(const pp_lm_quantize *q, const char *name, int ndim) {
    pp_lm_tensor t;
    if (!q || !pp_quantize_selects(q->fmt, name, ndim)) return 0;
    return !q->temporal_only || (!pp_lm_catalog_find(name, &t) && pp_lm_part_is_linear(t.part) && !t.depformer);
}
