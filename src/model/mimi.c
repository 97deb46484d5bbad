/* mimi: see mimi.h. Configuration, loading, per-session state and the two frame calls. */
#include "model/mimi.h"

#include "base/err.h"
#include "base/frame.h"
#include "base/json.h"
#include "base/log.h"
#include "io/file.h"
#include "io/onnx_mimi.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a state's buffers sit in its arena (floats from its base): one layout for every state
 * of the model, so a batch names a buffer once for all its rows. */
typedef struct mimi_layout {
    seanet_layout enc, dec;
    mtr_layout enc_tr, dec_tr;
    size_t down_carry, up_carry;
    size_t floats; /* the arena's size */
} mimi_layout;

struct mimi_model {
    pp_backend *be;
    st_file *file;
    mimi_config cfg;
    int steps;    /* latent steps per frame (frame_size / hop) */
    int resample; /* steps > 1: a learnt downsample / upsample joins steps and frames */
    codec_arena weights;
    seanet encoder, decoder;
    mtr_weights enc_tr, dec_tr;
    mimi_conv downsample; /* downsample.conv.conv.conv: Conv1d k = 2·steps, replicate padding */
    mimi_conv upsample;   /* upsample.convtr.convtr.convtr: ConvTranspose1d, depthwise */
    quantizer quant;
    mimi_layout layout;
};

/* One conversation's streaming state: its arena (mimi_layout) and the host's counters. */
struct mimi_state {
    const mimi_model *m;
    codec_arena arena;
    mimi_batch *lone; /* a batch of one for the lone calls, made by the first (a server's batches never need it) */
    int64_t enc_steps, dec_steps; /* transformer steps since reset */
    int started;                  /* the downsample has seen its first frame since reset */
};

/* Row counts recorded per direction: conversations whose frame clocks are out of phase make
 * the calls' sizes alternate (2, 1, 2, 1, ...), and one key per direction would change with
 * every call and never replay. Three sizes a direction keep the codec's recordings to six of
 * the device's graph slots (cuda.c's GRAPH_SLOTS, 8), leaving the LM's frame its own. */
#define MIMI_RECORDED_SIZES 3

/* Buffers for frames of up to cap conversations at once, and the host's staging. The two
 * directions share everything but the SEANet activations; a batch runs one call at a time. */
struct mimi_batch {
    const mimi_model *m;
    int cap;
    codec_arena arena;
    seanet_work enc, dec;
    mtr_work tr;
    uint64_t *rows;  /* [cap]: each row's state arena (pp_state_rows base) */
    float *pcm;      /* [cap][frame_size]: the encoder's input, the decoder's output */
    float *emb;      /* [cap][dimension][steps] */
    float *latent;   /* [cap][dimension] */
    float *q;        /* quantizer scratch, cap times */
    float *resample; /* downsample / upsample scratch, cap times */
    int32_t *codes;  /* [cap][num_codebooks] */
    pp_recorded_shape recorded[2][MIMI_RECORDED_SIZES]; /* the encode (0) and decode (1) calls' row counts */
    uint64_t calls;                                      /* recorded calls so far: the clock of `used` */
    /* host staging */
    uint64_t *rows_host, *tables_host;
    int64_t *steps_host;
    int64_t *pos_host;
    int32_t *codes_host;
    float *pcm_host;
    int *order; /* row r runs state order[r] of the call */
};

_Static_assert(sizeof(int32_t) == sizeof(float) && sizeof(uint64_t) % sizeof(float) == 0,
               "codes and addresses take float slots of the codec arena");

/* ==== configuration ================================================================ */

void pp_mimi_config_default(mimi_config *c) {
    memset(c, 0, sizeof *c);
    c->seanet = (seanet_config){.channels = 1, .dimension = 512, .n_filters = 64, .n_ratios = 4,
                                .ratios = {8, 6, 5, 4}, .kernel_size = 7, .residual_kernel_size = 3,
                                .last_kernel_size = 3, .compress = 2};
    c->transformer = (mtr_config){.d_model = 512, .num_heads = 8, .num_layers = 8, .dim_feedforward = 2048,
                                  .context = 250, .max_period = 10000.0f, .layer_scale = 1};
    c->quantizer = (quantizer_config){.dimension = 256, .n_q = 32, .bins = 2048, .input_dimension = 512,
                                      .output_dimension = 512, .num_codebooks = 8};
    c->sample_rate = PP_SAMPLE_RATE;
    c->frame_size = PP_FRAME_SAMPLES;
}

typedef struct int_key {
    const char *section, *key; /* section NULL: top level */
    size_t off;                /* int field in mimi_config */
} int_key;

#define CFG(field) offsetof(mimi_config, field)
#define MAX_FRAME_SIZE (1 << 22) /* samples: far above any codec's, and a SEANet hop is no longer */
static const int_key INT_KEYS[] = {
    {"seanet", "channels", CFG(seanet.channels)},
    {"seanet", "dimension", CFG(seanet.dimension)},
    {"seanet", "n_filters", CFG(seanet.n_filters)},
    {"seanet", "kernel_size", CFG(seanet.kernel_size)},
    {"seanet", "residual_kernel_size", CFG(seanet.residual_kernel_size)},
    {"seanet", "last_kernel_size", CFG(seanet.last_kernel_size)},
    {"seanet", "compress", CFG(seanet.compress)},
    {"transformer", "d_model", CFG(transformer.d_model)},
    {"transformer", "num_heads", CFG(transformer.num_heads)},
    {"transformer", "num_layers", CFG(transformer.num_layers)},
    {"transformer", "dim_feedforward", CFG(transformer.dim_feedforward)},
    {"transformer", "context", CFG(transformer.context)},
    {"quantizer", "dimension", CFG(quantizer.dimension)},
    {"quantizer", "n_q", CFG(quantizer.n_q)},
    {"quantizer", "bins", CFG(quantizer.bins)},
    {"quantizer", "input_dimension", CFG(quantizer.input_dimension)},
    {"quantizer", "output_dimension", CFG(quantizer.output_dimension)},
    {NULL, "num_codebooks", CFG(quantizer.num_codebooks)},
    {NULL, "sample_rate", CFG(sample_rate)},
    {NULL, "frame_size", CFG(frame_size)},
};

/* Options the reference offers that this implementation does not: each must hold `want`
 * (a string, or "true"/"false" for booleans) when present. */
static const struct {
    const char *section, *key, *want;
} FIXED_KEYS[] = {
    {"seanet", "causal", "true"},        {"seanet", "true_skip", "true"},
    {"seanet", "norm", "none"},          {"seanet", "pad_mode", "constant"},
    {"seanet", "activation", "ELU"},     {"transformer", "causal", "true"},
    {"transformer", "gating", "none"},   {"transformer", "norm", "layer_norm"},
    {"transformer", "conv_layout", "true"}, {"transformer", "positional_embedding", "rope"},
    {"transformer", "bias_ff", "false"}, {"transformer", "bias_attn", "false"},
};

/* The same for integer options. */
static const struct {
    const char *section, *key;
    int want;
} FIXED_INTS[] = {
    {"seanet", "n_residual_layers", 1}, {"seanet", "lstm", 0}, {"quantizer", "n_q_semantic", 1}};

/* The other keys a section may hold: read below, or options of the reference that change nothing
 * under the values above (one residual layer is never dilated, no norm has outer blocks to
 * spare, the trim is the non-streaming decoder's). Any other key is an option this code would
 * silently not apply (an LSTM, an activation's parameter), so it is refused. */
static const struct {
    const char *section, *key;
} OTHER_KEYS[] = {
    {"seanet", "ratios"},
    {"seanet", "dilation_base"},
    {"seanet", "disable_norm_outer_blocks"},
    {"seanet", "trim_right_ratio"},
    {"transformer", "max_period"},
    {"transformer", "layer_scale"},
    {"transformer", "input_dimension"},
    {"transformer", "output_dimensions"},
};

/* Whether section.key is in one of the tables above. */
static int known_key(const char *section, const char *key) {
#define FIND(table)                                                                                    \
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)                                        \
        if (table[i].section && strcmp(table[i].section, section) == 0 && strcmp(table[i].key, key) == 0) \
            return 1;
    FIND(INT_KEYS)
    FIND(FIXED_KEYS)
    FIND(FIXED_INTS)
    FIND(OTHER_KEYS)
#undef FIND
    return 0;
}

/* Each section an object of known keys, and no key twice (the reference's parser keeps the
 * last, pp_json_get the first). */
static int check_sections(const pp_json *root, const char *path, char *err) {
    static const char *const sections[] = {"seanet", "transformer", "quantizer"};
    const char *dup = pp_json_dup_key(root);
    if (dup) return pp_fail(err, PP_EINVAL, "%s: key '%s' appears twice", path, dup);
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const char *sec = sections[i];
        const pp_json *obj = pp_json_get(root, sec);
        if (!obj) continue;
        if (obj->type != PP_JSON_OBJECT) return pp_fail(err, PP_EINVAL, "%s: key '%s' must be an object", path, sec);
        if ((dup = pp_json_dup_key(obj)))
            return pp_fail(err, PP_EINVAL, "%s: key '%s.%s' appears twice", path, sec, dup);
        for (size_t k = 0; k < obj->count; k++) {
            const char *key = obj->keys[k];
            if (!known_key(sec, key))
                return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s.%s' is not an option this codec supports", path,
                               sec, key);
        }
    }
    return PP_OK;
}

static const pp_json *lookup(const pp_json *root, const char *section, const char *key) {
    const pp_json *obj = section ? pp_json_get(root, section) : root;
    return obj ? pp_json_get(obj, key) : NULL;
}

static int matches(const pp_json *v, const char *want) {
    if (v->type == PP_JSON_BOOL) return strcmp(want, v->boolean ? "true" : "false") == 0;
    return v->type == PP_JSON_STRING && strcmp(v->string, want) == 0;
}

static int int_value(const pp_json *v, int *out) {
    if (!v || v->type != PP_JSON_NUMBER || !v->is_integer || v->integer < 0 || v->integer > (1 << 30)) return 0;
    *out = (int)v->integer;
    return 1;
}

static int parse_config(const pp_json *root, const char *path, mimi_config *c, char *err) {
    int rc = check_sections(root, path, err);
    if (rc) return rc;
    for (size_t i = 0; i < sizeof INT_KEYS / sizeof INT_KEYS[0]; i++) {
        const pp_json *v = lookup(root, INT_KEYS[i].section, INT_KEYS[i].key);
        if (v && !int_value(v, (int *)((char *)c + INT_KEYS[i].off)))
            return pp_fail(err, PP_EINVAL, "%s: key '%s%s%s' must be a non-negative integer", path,
                           INT_KEYS[i].section ? INT_KEYS[i].section : "", INT_KEYS[i].section ? "." : "",
                           INT_KEYS[i].key);
    }
    for (size_t i = 0; i < sizeof FIXED_KEYS / sizeof FIXED_KEYS[0]; i++) {
        const pp_json *v = lookup(root, FIXED_KEYS[i].section, FIXED_KEYS[i].key);
        if (v && !matches(v, FIXED_KEYS[i].want))
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s.%s' must be %s (the only value supported)", path,
                           FIXED_KEYS[i].section, FIXED_KEYS[i].key, FIXED_KEYS[i].want);
    }
    for (size_t i = 0; i < sizeof FIXED_INTS / sizeof FIXED_INTS[0]; i++) {
        const pp_json *v = lookup(root, FIXED_INTS[i].section, FIXED_INTS[i].key);
        int value;
        if (v && (!int_value(v, &value) || value != FIXED_INTS[i].want))
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s.%s' must be %d (the only value supported)", path,
                           FIXED_INTS[i].section, FIXED_INTS[i].key, FIXED_INTS[i].want);
    }
    const pp_json *v;
    if ((v = lookup(root, "seanet", "ratios"))) {
        if (v->type != PP_JSON_ARRAY || v->count < 1 || v->count > SEANET_MAX_RATIOS)
            return pp_fail(err, PP_EINVAL, "%s: key 'seanet.ratios' must be a list of 1..%d integers", path,
                           SEANET_MAX_RATIOS);
        c->seanet.n_ratios = (int)v->count;
        for (size_t i = 0; i < v->count; i++)
            if (!int_value(v->items[i], &c->seanet.ratios[i]) || c->seanet.ratios[i] < 1)
                return pp_fail(err, PP_EINVAL, "%s: key 'seanet.ratios' must hold positive integers", path);
    }
    if ((v = lookup(root, "transformer", "max_period"))) {
        if (v->type != PP_JSON_NUMBER || !(v->number > 1) || v->number > FLT_MAX)
            return pp_fail(err, PP_EINVAL, "%s: key 'transformer.max_period' must be a number > 1 that a float holds",
                           path);
        c->transformer.max_period = (float)v->number;
    }
    if ((v = lookup(root, "transformer", "layer_scale"))) c->transformer.layer_scale = v->type != PP_JSON_NULL;
    /* The transformers run on the SEANet latent directly: no input or output projections. */
    int d = c->transformer.d_model, in = d;
    if ((v = lookup(root, "transformer", "input_dimension")) && (!int_value(v, &in) || in != d))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: 'transformer.input_dimension' must equal d_model (%d)", path, d);
    if ((v = lookup(root, "transformer", "output_dimensions")) &&
        (v->type != PP_JSON_ARRAY || v->count != 1 || !int_value(v->items[0], &in) || in != d))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: 'transformer.output_dimensions' must be [d_model] ([%d])", path, d);
    if ((v = lookup(root, NULL, "frame_rate"))) {
        /* The reference derives its frame from the rate; a whole number of samples (to rounding). */
        double samples = v->type == PP_JSON_NUMBER && v->number > 0 ? c->sample_rate / v->number : 0;
        if (!(samples >= 1 && samples <= MAX_FRAME_SIZE) || fabs(samples - round(samples)) > 1e-6 * samples)
            return pp_fail(err, PP_EINVAL, "%s: key 'frame_rate' must give a whole number of samples (1 to %d)",
                           path, MAX_FRAME_SIZE);
        int from_rate = (int)lround(samples);
        if (lookup(root, NULL, "frame_size") && c->frame_size != from_rate)
            return pp_fail(err, PP_EINVAL,
                           "%s: key 'frame_size' (%d) contradicts 'frame_rate' (%g Hz, %d samples at %d Hz)", path,
                           c->frame_size, v->number, from_rate, c->sample_rate);
        c->frame_size = from_rate;
    }
    return PP_OK;
}

/* Shape rules every configuration must meet, whatever its source. */
static int check_config(const mimi_config *c, const char *label, char *err) {
    const seanet_config *s = &c->seanet;
    const mtr_config *t = &c->transformer;
    const quantizer_config *q = &c->quantizer;
    /* Bounds far above any real codec that keep every size product inside an int, and a channel
     * count inside a CUDA grid's y (65535). */
    int big = s->n_filters >= (1 << 16) || s->n_ratios > SEANET_MAX_RATIOS || s->dimension >= (1 << 16) ||
              s->kernel_size > 1024 || s->residual_kernel_size > 1024 || s->last_kernel_size > 1024 ||
              t->num_heads > (1 << 12) || t->dim_feedforward > (1 << 18) || t->context > (1 << 20) ||
              q->dimension > (1 << 16) || q->bins > (1 << 20) || q->n_q > (1 << 12) || c->frame_size > MAX_FRAME_SIZE;
    int64_t hop64 = 1; /* the hop, a frame's divisor, can be no longer than a frame */
    for (int i = 0; i < s->n_ratios && !big; i++) big = s->ratios[i] > 64 || (hop64 *= s->ratios[i]) > MAX_FRAME_SIZE;
    if (!big && (int64_t)s->n_filters << s->n_ratios >= (1 << 16)) big = 1;
    if (big) return pp_fail(err, PP_EINVAL, "%s: a size in the codec configuration is out of range", label);
    int hop = pp_seanet_hop(s);
    if (s->channels != 1)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: seanet.channels %d: only mono is supported", label, s->channels);
    if (s->n_filters < 1 || s->compress < 1 || s->dimension < 1 || s->kernel_size < 1 ||
        s->residual_kernel_size < 1 || s->last_kernel_size < 1 || s->n_ratios < 1)
        return pp_fail(err, PP_EINVAL, "%s: seanet sizes must be positive", label);
    if (c->sample_rate < 1000 || c->sample_rate > 384000)
        return pp_fail(err, PP_EINVAL, "%s: sample_rate %d is not an audio rate", label, c->sample_rate);
    /* The residual blocks are dim / compress wide, dim = n_filters at the narrowest level. */
    if (s->n_filters < s->compress)
        return pp_fail(err, PP_EINVAL, "%s: seanet.n_filters %d must be at least seanet.compress %d", label,
                       s->n_filters, s->compress);
    if (t->d_model != s->dimension || q->input_dimension != s->dimension || q->output_dimension != s->dimension)
        return pp_fail(err, PP_EINVAL,
                       "%s: transformer.d_model (%d), quantizer.input_dimension (%d) and output_dimension (%d) "
                       "must equal seanet.dimension (%d)",
                       label, t->d_model, q->input_dimension, q->output_dimension, s->dimension);
    if (t->num_heads < 1 || t->d_model % t->num_heads || (t->d_model / t->num_heads) % 2 || t->dim_feedforward < 1)
        return pp_fail(err, PP_EINVAL, "%s: transformer: d_model %d, num_heads %d: heads must be of even width",
                       label, t->d_model, t->num_heads);
    if (c->frame_size < hop || c->frame_size % hop || c->frame_size / hop > MTR_MAX_STEPS)
        return pp_fail(err, PP_EINVAL, "%s: frame_size %d must be a multiple (at most %d) of the SEANet hop %d",
                       label, c->frame_size, MTR_MAX_STEPS, hop);
    /* Query 0 of a call sees keys from E − context + 1: with context <= steps it would see
     * none, a row the reference fills with NaN. */
    if (t->context <= c->frame_size / hop)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: transformer.context %d must exceed the %d steps per frame", label,
                       t->context, c->frame_size / hop);
    if (q->dimension < 1 || q->bins < 1 || q->n_q < 1)
        return pp_fail(err, PP_EINVAL, "%s: quantizer sizes must be positive", label);
    if (q->num_codebooks < 1 || q->num_codebooks > q->n_q || q->num_codebooks > QUANTIZER_MAX_CODES)
        return pp_fail(err, PP_EINVAL, "%s: num_codebooks %d: expected 1..n_q (%d), at most %d", label,
                       q->num_codebooks, q->n_q, QUANTIZER_MAX_CODES);
    return PP_OK;
}

int pp_mimi_config_parse(const char *text, size_t len, const char *label, mimi_config *cfg, char *err) {
    pp_json_doc *doc = NULL;
    int rc = pp_json_parse(text, len, &doc, err);
    if (!rc && pp_json_root(doc)->type != PP_JSON_OBJECT) rc = pp_fail(err, PP_EFORMAT, "%s: not a JSON object", label);
    if (!rc) rc = parse_config(pp_json_root(doc), label, cfg, err);
    if (!rc) rc = check_config(cfg, label, err);
    pp_json_free(doc);
    return rc;
}

int pp_mimi_config_load(const char *path, mimi_config *cfg, char *err) {
    unsigned char *text = NULL;
    size_t len = 0;
    int rc = pp_file_read_all(path, 1 << 20, &text, &len, err);
    if (!rc) rc = pp_mimi_config_parse((const char *)text, len, path, cfg, err);
    free(text);
    return rc;
}

/* Whether a config.json beside the weights is the codec's: an LM's has none of its sections, and
 * the codec's may name only what differs from the defaults (a longer transformer context). */
static int describes_codec(const pp_json *root) {
    return pp_json_get(root, "seanet") || pp_json_get(root, "transformer") || pp_json_get(root, "quantizer");
}

/* config.json beside the weights when it describes a codec, else defaults; checked either way.
 * One that is not JSON is refused. */
static int config_beside(const char *weights_path, mimi_config *cfg, char *err) {
    pp_mimi_config_default(cfg);
    char path[4096];
    const char *slash = strrchr(weights_path, '/');
    int dir_len = slash ? (int)(slash - weights_path) + 1 : 0, rc = PP_OK;
    unsigned char *text = NULL;
    size_t len = 0;
    pp_json_doc *doc = NULL;
    if (snprintf(path, sizeof path, "%.*sconfig.json", dir_len, weights_path) < (int)sizeof path &&
        pp_file_read_all(path, 1 << 20, &text, &len, NULL) == PP_OK) {
        /* A config.json that is no JSON may be this codec's with a typo: the released shapes would
         * then fail against its weights, a message that hides the cause. */
        char why[PP_ERR_LEN];
        if (pp_json_parse((const char *)text, len, &doc, why) != PP_OK) {
            rc = pp_fail(err, PP_EFORMAT, "%s: %s", path, why);
        } else if (describes_codec(pp_json_root(doc))) {
            PP_INFO("mimi", "configuration from %s", path);
            rc = parse_config(pp_json_root(doc), path, cfg, err);
        }
    }
    pp_json_free(doc);
    free(text);
    return rc ? rc : check_config(cfg, weights_path, err);
}

/* ==== weights ====================================================================== */

/* One pass of the loaders over arena a (sizing, filling or catalog). */
static int load_all(codec_arena *a, const st_file *f, mimi_model *m, char *err) {
    const mimi_config *c = &m->cfg;
    const int dim = c->seanet.dimension, s = m->steps;
    int rc = pp_seanet_load(a, f, &c->seanet, 0, &m->encoder, err);
    if (!rc) rc = pp_seanet_load(a, f, &c->seanet, 1, &m->decoder, err);
    if (!rc) rc = pp_mtr_load(a, f, "encoder_transformer", &c->transformer, &m->enc_tr, err);
    if (!rc) rc = pp_mtr_load(a, f, "decoder_transformer", &c->transformer, &m->dec_tr, err);
    if (!rc && m->resample) {
        rc = pp_conv_load(a, f, "downsample.conv.conv.conv", dim, dim, 2 * s, s, 1, 0, 0, &m->downsample, err);
        /* upsample_channel_wise_bug: the released model's upsample is depthwise ([dim][1][k]);
         * a file holding the full [dim][dim][k] matrix gets the grouped-1 form. */
        const char *up = "upsample.convtr.convtr.convtr";
        const st_tensor *t = f ? pp_st_find(f, "upsample.convtr.convtr.convtr.weight") : NULL;
        int groups = t && t->ndim == 3 && t->shape[1] == dim && dim > 1 ? 1 : dim;
        if (!rc) rc = pp_conv_load(a, f, up, dim, dim, 2 * s, s, groups, 0, 1, &m->upsample, err);
    }
    if (!rc) rc = pp_quantizer_load(a, f, &c->quantizer, &m->quant, err);
    return rc;
}

static void init_model(mimi_model *m, pp_backend *be, const mimi_config *cfg) {
    m->be = be;
    m->cfg = *cfg;
    m->steps = cfg->frame_size / pp_seanet_hop(&cfg->seanet);
    m->resample = m->steps > 1;
    pp_codec_arena_init(&m->weights, be);
}

static int catalog(const mimi_config *cfg, codec_catalog_fn fn, codec_catalog_conv_fn conv_fn, void *ctx,
                   char *err) {
    int rc = check_config(cfg, "mimi config", err);
    if (rc) return rc;
    mimi_model m;
    memset(&m, 0, sizeof m);
    init_model(&m, NULL, cfg);
    m.weights.catalog = fn;
    m.weights.catalog_conv = conv_fn;
    m.weights.catalog_ctx = ctx;
    return load_all(&m.weights, NULL, &m, err);
}

int pp_mimi_catalog(const mimi_config *cfg, codec_catalog_fn fn, void *ctx, char *err) {
    return catalog(cfg, fn, NULL, ctx, err);
}

int pp_mimi_catalog_list(const mimi_config *cfg, pp_tensor_list *out, char *err) {
    *out = (pp_tensor_list){0};
    int rc = catalog(cfg, pp_tensor_list_add, pp_tensor_list_conv, out, err);
    if (!rc && out->failed) rc = pp_fail(err, PP_ENOMEM, "mimi: out of memory for the tensor list");
    if (rc) pp_tensor_list_free(out);
    return rc;
}

/* The weights file, or a speech-core bundle's two codec graphs (io/onnx_mimi.h) converted into
 * the tensors the catalog lists for cfg. */
static int open_weights(const char *path, const mimi_config *cfg, st_file **out, char *err) {
    char dir[4096];
    if (!pp_onnx_mimi_is(path, dir, sizeof dir)) return pp_st_open(path, out, err);
    pp_tensor_list want;
    int rc = pp_mimi_catalog_list(cfg, &want, err);
    if (rc) return rc;
    st_tensor *tensors;
    size_t count, size;
    const void *base;
    onnx_bundle *bundle;
    rc = pp_onnx_mimi_load(dir, &want, &tensors, &count, &base, &size, &bundle, err);
    pp_tensor_list_free(&want);
    return rc ? rc : pp_st_from_bundle(dir, tensors, count, base, size, bundle, out, err);
}

/* Every tensor of f is one the codec reads under cfg, or a codebook (the released file stores 32
 * levels and their usage flags, the codec uses 8). A configuration that contradicts its weights
 * without changing a shape (fewer transformer layers than they hold) would otherwise run
 * another codec than the file's, with no word. */
static int check_all_read(const st_file *f, const mimi_config *cfg, const char *path, char *err) {
    pp_tensor_list want;
    int rc = pp_mimi_catalog_list(cfg, &want, err);
    for (size_t i = 0; !rc && i < pp_st_count(f); i++) {
        const char *name = pp_st_at(f, i)->name;
        int read = strncmp(name, "quantizer.", 10) == 0 && strstr(name, "._codebook.");
        for (size_t j = 0; !read && j < want.n; j++) read = strcmp(want.v[j].name, name) == 0;
        if (!read)
            rc = pp_fail(err, PP_EFORMAT,
                         "%s: tensor '%s' is not read by the codec its configuration describes (a config.json "
                         "that contradicts the weights?)",
                         path, name);
    }
    pp_tensor_list_free(&want);
    return rc;
}

static int open_config(const char *weights_path, const char *config_path, mimi_config *cfg, char *err) {
    pp_mimi_config_default(cfg);
    return config_path ? pp_mimi_config_load(config_path, cfg, err) : config_beside(weights_path, cfg, err);
}

int pp_mimi_weights_open(const char *weights_path, const char *config_path, st_file **out, char *err) {
    mimi_config cfg;
    int rc = open_config(weights_path, config_path, &cfg, err);
    return rc ? rc : open_weights(weights_path, &cfg, out, err);
}

/* The state layout: the sizing pass of a state arena, once per model. */
static void compute_layout(mimi_model *m) {
    codec_arena a;
    pp_codec_arena_init(&a, m->be);
    mimi_layout *l = &m->layout;
    pp_seanet_layout(&a, &m->encoder, &l->enc);
    pp_mtr_layout(&a, &m->enc_tr, m->steps, &l->enc_tr);
    pp_seanet_layout(&a, &m->decoder, &l->dec);
    pp_mtr_layout(&a, &m->dec_tr, m->steps, &l->dec_tr);
    if (m->resample) {
        l->down_carry = pp_codec_arena_reserve(&a, pp_conv_state_floats(&m->downsample));
        l->up_carry = pp_codec_arena_reserve(&a, pp_conv_state_floats(&m->upsample));
    }
    l->floats = a.used;
}

int pp_mimi_open(pp_backend *be, const char *weights_path, const char *config_path, mimi_model **out, char *err) {
    *out = NULL;
    mimi_config cfg;
    char what[PP_ERR_LEN];
    snprintf(what, sizeof what, "%s: the codec's transformers", weights_path);
    int rc = open_config(weights_path, config_path, &cfg, err);
    if (!rc) rc = pp_backend_check_head_dim(be, cfg.transformer.d_model / cfg.transformer.num_heads, what, err);
    if (rc) return rc;
    mimi_model *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "mimi: out of memory");
    init_model(m, be, &cfg);
    rc = open_weights(weights_path, &cfg, &m->file, err);
    if (!rc) rc = check_all_read(m->file, &cfg, weights_path, err);
    if (!rc) rc = load_all(&m->weights, m->file, m, err);
    if (!rc) rc = pp_codec_arena_alloc(&m->weights, weights_path, err);
    if (!rc) rc = load_all(&m->weights, m->file, m, err);
    if (!rc) rc = pp_backend_device_error(be, err); /* the uploads report nothing themselves */
    if (rc) {
        pp_mimi_close(m);
        return rc;
    }
    compute_layout(m);
    PP_INFO("mimi", "%s: %d codebooks, %d-sample frames, %zu MB of weights", weights_path, cfg.quantizer.num_codebooks,
            cfg.frame_size, pp_mimi_weight_bytes(m) >> 20);
    *out = m;
    return PP_OK;
}

void pp_mimi_close(mimi_model *m) {
    if (!m) return;
    pp_mtr_free(m->be, &m->enc_tr);
    pp_mtr_free(m->be, &m->dec_tr);
    pp_codec_arena_free(&m->weights);
    pp_st_close(m->file);
    free(m);
}

const mimi_config *pp_mimi_get_config(const mimi_model *m) { return &m->cfg; }
pp_backend *pp_mimi_backend(const mimi_model *m) { return m->be; }

size_t pp_mimi_weight_bytes(const mimi_model *m) {
    size_t bytes = m->weights.cap * sizeof(float);
    const mtr_weights *trs[2] = {&m->enc_tr, &m->dec_tr};
    for (int i = 0; i < 2; i++)
        for (int l = 0; l < trs[i]->n_uploaded; l++) {
            const mtr_layer *ly = &trs[i]->layers[l];
            bytes += pp_weight_bytes(&ly->in_proj) + pp_weight_bytes(&ly->out_proj) + pp_weight_bytes(&ly->linear1) +
                     pp_weight_bytes(&ly->linear2);
        }
    return bytes;
}

/* ==== state ======================================================================== */

int pp_mimi_state_create(const mimi_model *m, mimi_state **out, char *err) {
    mimi_state *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "mimi state: out of memory");
    s->m = m;
    pp_codec_arena_init(&s->arena, m->be);
    pp_codec_arena_take(&s->arena, m->layout.floats);
    int rc = pp_codec_arena_alloc(&s->arena, "mimi state", err);
    if (rc) {
        pp_mimi_state_destroy(s);
        return rc;
    }
    pp_mimi_state_reset(s);
    *out = s;
    return PP_OK;
}

void pp_mimi_state_reset(mimi_state *s) {
    const mimi_model *m = s->m;
    pp_backend *be = m->be;
    /* One zeroing of the whole arena: every carry and ring at once; then the descriptors. */
    be->ops->zero(be, s->arena.base, s->arena.cap * sizeof(float));
    pp_mtr_state_init(be, &m->enc_tr, &m->layout.enc_tr, s->arena.base);
    pp_mtr_state_init(be, &m->dec_tr, &m->layout.dec_tr, s->arena.base);
    s->enc_steps = s->dec_steps = 0;
    s->started = 0;
}

void pp_mimi_state_destroy(mimi_state *s) {
    if (!s) return;
    pp_mimi_batch_destroy(s->lone);
    pp_codec_arena_free(&s->arena);
    free(s);
}

size_t pp_mimi_state_bytes(const mimi_state *s) {
    return s->arena.cap * sizeof(float) + (s->lone ? pp_mimi_batch_bytes(s->lone) : 0);
}

/* ==== batches ====================================================================== */

/* Hands out the batch's buffers from a (sizing or filling pass). */
static void bind_batch(codec_arena *a, const mimi_model *m, mimi_batch *b) {
    const int dim = m->cfg.seanet.dimension, steps = m->steps, cap = b->cap;
    pp_seanet_work_bind(a, &m->encoder, m->cfg.frame_size, cap, &b->enc);
    pp_seanet_work_bind(a, &m->decoder, steps, cap, &b->dec);
    pp_mtr_work_bind(a, &m->enc_tr, steps, cap, &b->tr);
    /* addresses and codes share the float arena: only ever accessed as their type */
    b->rows = (uint64_t *)pp_codec_arena_take(a, (size_t)cap * sizeof(uint64_t) / sizeof(float));
    b->pcm = pp_codec_arena_take(a, (size_t)cap * m->cfg.frame_size);
    b->emb = pp_codec_arena_take(a, (size_t)cap * dim * steps);
    b->latent = pp_codec_arena_take(a, (size_t)cap * dim);
    b->q = pp_codec_arena_take(a, (size_t)cap * pp_quantizer_scratch_floats(&m->quant));
    b->codes = (int32_t *)pp_codec_arena_take(a, (size_t)cap * m->cfg.quantizer.num_codebooks);
    if (m->resample) {
        size_t down = pp_conv_scratch_floats(&m->downsample, steps), up = pp_conv_scratch_floats(&m->upsample, 1);
        b->resample = pp_codec_arena_take(a, (size_t)cap * (down > up ? down : up));
    }
}

int pp_mimi_batch_create(const mimi_model *m, int capacity, mimi_batch **out, char *err) {
    *out = NULL;
    if (capacity < 1 || capacity > (1 << 16))
        return pp_fail(err, PP_EINVAL, "mimi batch: capacity %d (expected 1..65536)", capacity);
    mimi_batch *b = calloc(1, sizeof *b);
    if (!b) return pp_fail(err, PP_ENOMEM, "mimi batch: out of memory");
    b->m = m;
    b->cap = capacity;
    const size_t cap = (size_t)capacity, ncb = (size_t)m->cfg.quantizer.num_codebooks;
    b->rows_host = malloc(cap * sizeof *b->rows_host);
    b->tables_host = malloc(cap * sizeof *b->tables_host);
    b->steps_host = malloc(cap * sizeof *b->steps_host);
    b->pos_host = malloc(cap * (size_t)m->steps * sizeof *b->pos_host);
    b->codes_host = malloc(cap * ncb * sizeof *b->codes_host);
    b->pcm_host = malloc(cap * (size_t)m->cfg.frame_size * sizeof *b->pcm_host);
    b->order = malloc(cap * sizeof *b->order);
    int rc = b->rows_host && b->tables_host && b->steps_host && b->pos_host && b->codes_host && b->pcm_host && b->order
                 ? PP_OK
                 : pp_fail(err, PP_ENOMEM, "mimi batch: out of memory for %d conversations", capacity);
    pp_codec_arena_init(&b->arena, m->be);
    if (!rc) {
        bind_batch(&b->arena, m, b);
        rc = pp_codec_arena_alloc(&b->arena, "mimi batch", err);
    }
    if (rc) {
        pp_mimi_batch_destroy(b);
        return rc;
    }
    bind_batch(&b->arena, m, b);
    *out = b;
    return PP_OK;
}

void pp_mimi_batch_destroy(mimi_batch *b) {
    if (!b) return;
    for (int d = 0; d < 2; d++)
        pp_backend_forget_shapes(b->m->be, b->recorded[d], MIMI_RECORDED_SIZES);
    pp_codec_arena_free(&b->arena);
    free(b->rows_host);
    free(b->tables_host);
    free(b->steps_host);
    free(b->pos_host);
    free(b->codes_host);
    free(b->pcm_host);
    free(b->order);
    free(b);
}

size_t pp_mimi_batch_bytes(const mimi_batch *b) { return b->arena.cap * sizeof(float); }

static int check_batch(const mimi_batch *b, mimi_state *const *ss, int n, const char *what, char *err) {
    if (n < 1 || n > b->cap)
        return pp_fail(err, PP_EINVAL, "mimi %s: %d conversations in a batch of %d", what, n, b->cap);
    for (int i = 0; i < n; i++) {
        if (ss[i]->m != b->m) return pp_fail(err, PP_EINVAL, "mimi %s: conversation %d is of another codec", what, i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return pp_fail(err, PP_EINVAL, "mimi %s: conversation %d is listed twice", what, i);
    }
    return PP_OK;
}

/* Uploads the rows of a call in b->order and each row's transformer positions. */
static void prepare_rows(mimi_batch *b, mimi_state *const *ss, int n, int decode) {
    pp_backend *be = b->m->be;
    for (int r = 0; r < n; r++) {
        const mimi_state *s = ss[b->order[r]];
        b->rows_host[r] = (uint64_t)(uintptr_t)s->arena.base;
        b->steps_host[r] = decode ? s->dec_steps : s->enc_steps;
    }
    be->ops->upload(be, b->rows, b->rows_host, (size_t)n * sizeof *b->rows_host);
    pp_mtr_prepare(be, decode ? &b->m->layout.dec_tr : &b->m->layout.enc_tr, &b->tr, b->rows_host, b->steps_host, n,
                   b->pos_host, b->tables_host);
}

typedef struct codec_call {
    mimi_batch *b;
    int n;
    int fresh; /* encode: rows 0..fresh-1 start their downsample (replicate padding) */
} codec_call;

static void issue_encode(void *arg) {
    const codec_call *c = arg;
    mimi_batch *b = c->b;
    const mimi_model *m = b->m;
    pp_backend *be = m->be;
    const int n = c->n, dim = m->cfg.seanet.dimension;
    pp_seanet_step(be, &m->encoder, &m->layout.enc, &b->enc, b->rows, n, b->pcm, b->emb);
    pp_mtr_step(be, &m->enc_tr, &b->tr, n, b->emb);
    const float *z = b->emb;
    if (m->resample) {
        /* Replicate padding: a first frame's history is copies of its first column. Fresh rows
         * come first, so each kind is one contiguous call. */
        size_t off = m->layout.down_carry * sizeof(float), in = (size_t)dim * m->steps;
        pp_state_rows fresh = {c->fresh, b->rows, off}, going = {n - c->fresh, b->rows + c->fresh, off};
        if (fresh.n)
            pp_conv_step(be, &m->downsample, &fresh, b->emb, m->steps, b->latent, b->resample, PP_CONV_REPLICATE);
        if (going.n)
            pp_conv_step(be, &m->downsample, &going, b->emb + c->fresh * in, m->steps, b->latent + c->fresh * dim,
                         b->resample, 0);
        z = b->latent;
    }
    pp_quantizer_encode(be, &m->quant, z, n, b->codes, b->q);
}

static void issue_decode(void *arg) {
    const codec_call *c = arg;
    mimi_batch *b = c->b;
    const mimi_model *m = b->m;
    pp_backend *be = m->be;
    pp_quantizer_decode(be, &m->quant, b->codes, c->n, b->latent, b->q);
    float *x = b->latent;
    if (m->resample) {
        pp_state_rows rows = {c->n, b->rows, m->layout.up_carry * sizeof(float)};
        pp_conv_step(be, &m->upsample, &rows, b->latent, 1, b->emb, b->resample, 0);
        x = b->emb;
    }
    pp_mtr_step(be, &m->dec_tr, &b->tr, c->n, x);
    pp_seanet_step(be, &m->decoder, &m->layout.dec, &b->dec, b->rows, c->n, x, b->pcm);
}

/* Runs a call the backend may record: one key per direction and row count (the rows, positions
 * and inputs are uploaded before it). A call that starts a downsample runs plainly: it is once
 * per conversation. */
static int run_call(mimi_batch *b, int decode, codec_call *c, char *err) {
    void (*issue)(void *) = decode ? issue_decode : issue_encode;
    if (c->fresh) {
        issue(c);
        return PP_OK;
    }
    uint64_t key = pp_backend_shape_key(b->m->be, b->recorded[decode], MIMI_RECORDED_SIZES, (uint64_t)c->n, &b->calls);
    return pp_backend_run_recorded(b->m->be, key, issue, c, err);
}

/* One NaN or infinite sample would reach the convolutions' carries and the transformer's key
 * ring, and turn the codes of the next context steps (10 s of the released codec) into garbage:
 * it goes in as silence, as it goes to the echo canceller and the Opus encoder. */
static void copy_finite(float *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = isfinite(src[i]) ? src[i] : 0.0f;
}

/* The state's first frame since reset meets the downsample's replicate padding. */
static int starts_downsample(const mimi_model *m, const mimi_state *s) { return m->resample && !s->started; }

static int encode(mimi_batch *b, mimi_state *const *ss, int n, const float *const *pcm, int32_t *const *codes,
                  float *latent, char *err) {
    int rc = check_batch(b, ss, n, "encode", err);
    if (rc) return rc;
    const mimi_model *m = b->m;
    pp_backend *be = m->be;
    const int frame = m->cfg.frame_size, ncb = m->cfg.quantizer.num_codebooks;
    codec_call c = {b, n, 0};
    for (int i = 0; i < n; i++) c.fresh += starts_downsample(m, ss[i]);
    for (int i = 0, f = 0, r = c.fresh; i < n; i++) b->order[starts_downsample(m, ss[i]) ? f++ : r++] = i;
    for (int r = 0; r < n; r++) copy_finite(b->pcm_host + (size_t)r * frame, pcm[b->order[r]], frame);
    be->ops->upload(be, b->pcm, b->pcm_host, (size_t)n * frame * sizeof(float));
    prepare_rows(b, ss, n, 0);
    if ((rc = run_call(b, 0, &c, err))) return rc;
    if (latent)
        be->ops->download(be, latent, m->resample ? b->latent : b->emb, m->cfg.seanet.dimension * sizeof(float));
    be->ops->download(be, b->codes_host, b->codes, (size_t)n * ncb * sizeof *b->codes_host);
    if ((rc = pp_backend_device_error(be, err))) return rc;
    for (int r = 0; r < n; r++) {
        mimi_state *s = ss[b->order[r]];
        memcpy(codes[b->order[r]], b->codes_host + (size_t)r * ncb, ncb * sizeof **codes);
        s->enc_steps += m->steps;
        s->started = 1;
    }
    return PP_OK;
}

int pp_mimi_encode_batch(mimi_batch *b, mimi_state *const *ss, int n, const float *const *pcm, int32_t *const *codes,
                         char *err) {
    return encode(b, ss, n, pcm, codes, NULL, err);
}

int pp_mimi_decode_batch(mimi_batch *b, mimi_state *const *ss, int n, const int32_t *const *codes, float *const *pcm,
                         char *err) {
    int rc = check_batch(b, ss, n, "decode", err);
    if (rc) return rc;
    const mimi_model *m = b->m;
    pp_backend *be = m->be;
    const quantizer_config *q = &m->cfg.quantizer;
    const int frame = m->cfg.frame_size, ncb = q->num_codebooks;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < ncb; k++)
            if (codes[i][k] < 0 || codes[i][k] >= q->bins)
                return pp_fail(err, PP_EINVAL, "mimi decode: code %d of conversation %d's frame is %d, expected 0..%d",
                               k, i, (int)codes[i][k], q->bins - 1);
        b->order[i] = i;
        memcpy(b->codes_host + (size_t)i * ncb, codes[i], ncb * sizeof **codes);
    }
    be->ops->upload(be, b->codes, b->codes_host, (size_t)n * ncb * sizeof *b->codes_host);
    prepare_rows(b, ss, n, 1);
    codec_call c = {b, n, 0};
    if ((rc = run_call(b, 1, &c, err))) return rc;
    be->ops->download(be, b->pcm_host, b->pcm, (size_t)n * frame * sizeof(float));
    if ((rc = pp_backend_device_error(be, err))) return rc;
    for (int i = 0; i < n; i++) {
        memcpy(pcm[i], b->pcm_host + (size_t)i * frame, frame * sizeof(float));
        ss[i]->dec_steps += m->steps;
    }
    return PP_OK;
}

/* ==== frames ======================================================================= */

static int lone_batch(mimi_state *s, char *err) {
    return s->lone ? PP_OK : pp_mimi_batch_create(s->m, 1, &s->lone, err);
}

int pp_mimi_encode_frame(mimi_state *s, const float *pcm, int32_t *codes, float *latent, char *err) {
    int rc = lone_batch(s, err);
    return rc ? rc : encode(s->lone, &s, 1, &pcm, &codes, latent, err);
}

int pp_mimi_decode_frame(mimi_state *s, const int32_t *codes, float *pcm, char *err) {
    int rc = lone_batch(s, err);
    return rc ? rc : pp_mimi_decode_batch(s->lone, &s, 1, &codes, &pcm, err);
}

int pp_mimi_code_gaps(const mimi_model *m, const float *latent, const int32_t *codes, double *gaps, char *err) {
    const quantizer_config *q = &m->cfg.quantizer;
    for (int i = 0; i < q->num_codebooks; i++)
        if (codes[i] < 0 || codes[i] >= q->bins)
            return pp_fail(err, PP_EINVAL, "mimi code gaps: code %d is %d, expected 0..%d", i, (int)codes[i],
                           q->bins - 1);
    return pp_quantizer_code_gaps(m->be, &m->quant, latent, codes, gaps, err);
}
