/* mimi: see mimi.h. Configuration, loading, per-session state and the two frame calls. */
#include "model/mimi.h"

#include "base/err.h"
#include "base/frame.h"
#include "base/json.h"
#include "base/log.h"
#include "io/file.h"
#include "io/onnx_mimi.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

struct mimi_state {
    const mimi_model *m;
    codec_arena arena; /* everything below points into it */
    /* encoder side */
    seanet_state enc;
    mtr_state enc_tr;
    float *down_carry, *down_scratch;
    float *pcm_in;    /* [frame_size] */
    float *emb_in;    /* [dimension][steps] */
    float *latent_in; /* [dimension] */
    float *q_in;      /* quantizer scratch */
    int32_t *codes_in; /* [num_codebooks], in the arena: an int32 per float slot */
    int started;      /* the downsample has seen its first frame since reset */
    /* decoder side */
    seanet_state dec;
    mtr_state dec_tr;
    float *up_carry, *up_scratch;
    float *latent_out, *emb_out, *pcm_out, *q_out;
    int32_t *codes_out; /* [num_codebooks] */
};

_Static_assert(sizeof(int32_t) == sizeof(float), "codes take float slots of the codec arena");

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
};

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
    const pp_json *v = lookup(root, "seanet", "n_residual_layers");
    int n_res = 1;
    if (v && (!int_value(v, &n_res) || n_res != 1))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: key 'seanet.n_residual_layers' must be 1 (Mimi's value)", path);
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
        if (v->type != PP_JSON_NUMBER || !(v->number > 1))
            return pp_fail(err, PP_EINVAL, "%s: key 'transformer.max_period' must be a number > 1", path);
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
    if (!lookup(root, NULL, "frame_size") && (v = lookup(root, NULL, "frame_rate"))) {
        if (v->type != PP_JSON_NUMBER || !(v->number > 0))
            return pp_fail(err, PP_EINVAL, "%s: key 'frame_rate' must be a positive number", path);
        c->frame_size = (int)(c->sample_rate / v->number);
    }
    return PP_OK;
}

/* Shape rules every configuration must meet, whatever its source. */
static int check_config(const mimi_config *c, const char *label, char *err) {
    const seanet_config *s = &c->seanet;
    const mtr_config *t = &c->transformer;
    const quantizer_config *q = &c->quantizer;
    /* Bounds far above any real codec that keep every size product inside an int. */
    int big = s->n_filters > (1 << 16) || s->n_ratios > SEANET_MAX_RATIOS || s->dimension > (1 << 16) ||
              s->kernel_size > 1024 || s->residual_kernel_size > 1024 || s->last_kernel_size > 1024 ||
              t->num_heads > (1 << 12) || t->dim_feedforward > (1 << 18) || t->context > (1 << 20) ||
              q->dimension > (1 << 16) || q->bins > (1 << 20) || q->n_q > (1 << 12) || c->frame_size > (1 << 22);
    for (int i = 0; i < s->n_ratios && !big; i++) big = s->ratios[i] > 64;
    if (!big && (int64_t)s->n_filters << s->n_ratios > (1 << 16)) big = 1;
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

/* config.json beside the weights when it describes a codec (has `seanet`), else defaults;
 * checked either way. */
static int config_beside(const char *weights_path, mimi_config *cfg, char *err) {
    pp_mimi_config_default(cfg);
    char path[4096];
    const char *slash = strrchr(weights_path, '/');
    int dir_len = slash ? (int)(slash - weights_path) + 1 : 0, rc = PP_OK;
    unsigned char *text = NULL;
    size_t len = 0;
    pp_json_doc *doc = NULL;
    if (snprintf(path, sizeof path, "%.*sconfig.json", dir_len, weights_path) < (int)sizeof path &&
        pp_file_read_all(path, 1 << 20, &text, &len, NULL) == PP_OK &&
        pp_json_parse((const char *)text, len, &doc, NULL) == PP_OK && pp_json_get(pp_json_root(doc), "seanet")) {
        PP_INFO("mimi", "configuration from %s", path);
        rc = parse_config(pp_json_root(doc), path, cfg, err);
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

int pp_mimi_catalog(const mimi_config *cfg, codec_catalog_fn fn, void *ctx, char *err) {
    int rc = check_config(cfg, "mimi config", err);
    if (rc) return rc;
    mimi_model m;
    memset(&m, 0, sizeof m);
    init_model(&m, NULL, cfg);
    m.weights.catalog = fn;
    m.weights.catalog_ctx = ctx;
    return load_all(&m.weights, NULL, &m, err);
}

int pp_mimi_catalog_list(const mimi_config *cfg, pp_tensor_list *out, char *err) {
    *out = (pp_tensor_list){0};
    int rc = pp_mimi_catalog(cfg, pp_tensor_list_add, out, err);
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

static int open_config(const char *weights_path, const char *config_path, mimi_config *cfg, char *err) {
    pp_mimi_config_default(cfg);
    return config_path ? pp_mimi_config_load(config_path, cfg, err) : config_beside(weights_path, cfg, err);
}

int pp_mimi_weights_open(const char *weights_path, const char *config_path, st_file **out, char *err) {
    mimi_config cfg;
    int rc = open_config(weights_path, config_path, &cfg, err);
    return rc ? rc : open_weights(weights_path, &cfg, out, err);
}

int pp_mimi_open(pp_backend *be, const char *weights_path, const char *config_path, mimi_model **out, char *err) {
    *out = NULL;
    mimi_config cfg;
    int rc = open_config(weights_path, config_path, &cfg, err);
    if (rc) return rc;
    mimi_model *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "mimi: out of memory");
    init_model(m, be, &cfg);
    rc = open_weights(weights_path, &cfg, &m->file, err);
    if (!rc) rc = load_all(&m->weights, m->file, m, err);
    if (!rc) rc = pp_codec_arena_alloc(&m->weights, weights_path, err);
    if (!rc) rc = load_all(&m->weights, m->file, m, err);
    if (rc) {
        pp_mimi_close(m);
        return rc;
    }
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

/* Hands out the state's buffers from a (sizing or filling pass). */
static void bind_state(codec_arena *a, const mimi_model *m, mimi_state *s) {
    const int dim = m->cfg.seanet.dimension, steps = m->steps;
    pp_seanet_state_bind(a, &m->encoder, m->cfg.frame_size, &s->enc);
    pp_mtr_state_bind(a, &m->enc_tr, steps, &s->enc_tr);
    s->pcm_in = pp_codec_arena_take(a, (size_t)m->cfg.frame_size);
    s->emb_in = pp_codec_arena_take(a, (size_t)dim * steps);
    s->latent_in = pp_codec_arena_take(a, (size_t)dim);
    s->q_in = pp_codec_arena_take(a, pp_quantizer_scratch_floats(&m->quant));
    /* a frame's codes, kept in backend memory between the quantizer and one transfer */
    s->codes_in = (int32_t *)pp_codec_arena_take(a, (size_t)m->cfg.quantizer.num_codebooks);
    pp_seanet_state_bind(a, &m->decoder, steps, &s->dec);
    pp_mtr_state_bind(a, &m->dec_tr, steps, &s->dec_tr);
    s->latent_out = pp_codec_arena_take(a, (size_t)dim);
    s->emb_out = pp_codec_arena_take(a, (size_t)dim * steps);
    s->pcm_out = pp_codec_arena_take(a, (size_t)m->cfg.frame_size);
    s->q_out = pp_codec_arena_take(a, pp_quantizer_scratch_floats(&m->quant));
    s->codes_out = (int32_t *)pp_codec_arena_take(a, (size_t)m->cfg.quantizer.num_codebooks);
    if (m->resample) {
        s->down_carry = pp_codec_arena_take(a, pp_conv_state_floats(&m->downsample));
        s->down_scratch = pp_codec_arena_take(a, pp_conv_scratch_floats(&m->downsample, steps));
        s->up_carry = pp_codec_arena_take(a, pp_conv_state_floats(&m->upsample));
        s->up_scratch = pp_codec_arena_take(a, pp_conv_scratch_floats(&m->upsample, 1));
    }
}

int pp_mimi_state_create(const mimi_model *m, mimi_state **out, char *err) {
    mimi_state *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "mimi state: out of memory");
    s->m = m;
    pp_codec_arena_init(&s->arena, m->be);
    bind_state(&s->arena, m, s);
    int rc = pp_codec_arena_alloc(&s->arena, "mimi state", err);
    if (rc) {
        free(s);
        return rc;
    }
    bind_state(&s->arena, m, s);
    *out = s;
    return PP_OK;
}

void pp_mimi_state_reset(mimi_state *s) {
    /* One zeroing of the whole arena: every carry, ring and scratch buffer at once. */
    s->arena.be->ops->zero(s->arena.be, s->arena.base, s->arena.cap * sizeof(float));
    s->enc_tr.offset = s->dec_tr.offset = 0;
    s->started = 0;
}

void pp_mimi_state_destroy(mimi_state *s) {
    if (!s) return;
    pp_codec_arena_free(&s->arena);
    free(s);
}

size_t pp_mimi_state_bytes(const mimi_state *s) { return s->arena.cap * sizeof(float); }

/* ==== frames ======================================================================= */

int pp_mimi_encode_frame(mimi_state *s, const float *pcm, int32_t *codes, float *latent, char *err) {
    (void)err;
    const mimi_model *m = s->m;
    pp_backend *be = m->be;
    const int dim = m->cfg.seanet.dimension;
    be->ops->upload(be, s->pcm_in, pcm, (size_t)m->cfg.frame_size * sizeof(float));
    pp_seanet_step(be, &m->encoder, &s->enc, s->pcm_in, s->emb_in);
    pp_mtr_step(be, &m->enc_tr, &s->enc_tr, s->emb_in);
    const float *z = s->emb_in;
    if (m->resample) {
        /* Replicate padding: the first frame's history is copies of its first column. */
        pp_conv_step(be, &m->downsample, s->down_carry, s->emb_in, m->steps, s->latent_in, s->down_scratch,
                     s->started ? 0 : PP_CONV_REPLICATE);
        s->started = 1;
        z = s->latent_in;
    }
    if (latent) be->ops->download(be, latent, z, (size_t)dim * sizeof(float));
    pp_quantizer_encode(be, &m->quant, z, s->codes_in, s->q_in);
    be->ops->download(be, codes, s->codes_in, (size_t)m->cfg.quantizer.num_codebooks * sizeof *codes);
    return PP_OK;
}

int pp_mimi_decode_frame(mimi_state *s, const int32_t *codes, float *pcm, char *err) {
    const mimi_model *m = s->m;
    pp_backend *be = m->be;
    const quantizer_config *q = &m->cfg.quantizer;
    for (int i = 0; i < q->num_codebooks; i++)
        if (codes[i] < 0 || codes[i] >= q->bins)
            return pp_fail(err, PP_EINVAL, "mimi decode: code %d of the frame is %d, expected 0..%d", i,
                           (int)codes[i], q->bins - 1);
    be->ops->upload(be, s->codes_out, codes, (size_t)q->num_codebooks * sizeof *codes);
    pp_quantizer_decode(be, &m->quant, s->codes_out, s->latent_out, s->q_out);
    float *x = s->latent_out;
    if (m->resample) {
        pp_conv_step(be, &m->upsample, s->up_carry, s->latent_out, 1, s->emb_out, s->up_scratch, 0);
        x = s->emb_out;
    }
    pp_mtr_step(be, &m->dec_tr, &s->dec_tr, x);
    pp_seanet_step(be, &m->decoder, &s->dec, x, s->pcm_out);
    be->ops->download(be, pcm, s->pcm_out, (size_t)m->cfg.frame_size * sizeof(float));
    return PP_OK;
}

int pp_mimi_code_gaps(const mimi_model *m, const float *latent, const int32_t *codes, double *gaps, char *err) {
    const quantizer_config *q = &m->cfg.quantizer;
    for (int i = 0; i < q->num_codebooks; i++)
        if (codes[i] < 0 || codes[i] >= q->bins)
            return pp_fail(err, PP_EINVAL, "mimi code gaps: code %d is %d, expected 0..%d", i, (int)codes[i],
                           q->bins - 1);
    return pp_quantizer_code_gaps(m->be, &m->quant, latent, codes, gaps, err);
}
