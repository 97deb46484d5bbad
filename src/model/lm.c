/* lm: see lm.h. Key names and shapes follow docs/model.md §2. */
#include "model/lm.h"

#include "base/err.h"
#include "base/log.h"
#include "model/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pp_lm {
    pp_backend *be;
    st_file *file;
    int in_place; /* the backend reads the weights from the file's pages (host_map) */
    pp_lm_config cfg;
    pp_weight emb[16];          /* audio streams 1..16: [card+1, dim] */
    pp_weight text_emb;         /* [text_card+1, dim] */
    pp_weight text_linear;      /* [text_card, dim] */
    /* The input's tables in the reference's order of the sum (audio streams 1.., text last) and
     * each one's row of the frame's ids ([17][n], stream 0 text): embed_sum's arguments. */
    const pp_weight *inputs[PP_LM_STREAMS];
    int input_rows[PP_LM_STREAMS];
    float *out_norm;            /* backend [dim] */
    pp_tf temporal, depformer;
    pp_weight dep_in[PP_LM_MAX_DEP_Q];      /* [dep_dim, dim] */
    pp_weight dep_text_emb;                 /* [text_card+1, dep_dim] */
    pp_weight dep_emb[PP_LM_MAX_DEP_Q - 1]; /* [card+1, dep_dim] */
    pp_weight linears[PP_LM_MAX_DEP_Q];     /* [card, dep_dim] */
    pp_tf_quant *quant;                     /* quantizing at load; holds what the backend reads in place */
};

struct pp_lm_ctx {
    const pp_lm *lm;
    pp_tf_cache temporal;
};

/* Frame shapes recorded per work: a batch whose conversation count alternates from tick to
 * tick (out-of-phase frame clocks, a conversation joining, leaving or skipping a tick) replays
 * both sizes. Two keep the LM batch's recordings and the codec's six (mimi.c) within the
 * device's eight graph slots (cuda.c's GRAPH_SLOTS). */
#define LM_RECORDED_SHAPES 2

struct pp_lm_work {
    const pp_lm *lm;
    int rows;
    pp_tf_scratch temporal, depformer;
    pp_tf_cache *dep;                    /* [rows]: each row's depformer rings (restart every frame) */
    pp_tf_cache **dep_rows, **tmp_rows;  /* host [rows]: ring pointers handed to pp_tf_forward */
    const pp_kv_ring **dep_tables;       /* backend [rows]: each row's depformer ring table */
    float *x, *h, *dx, *logits, *layer_out; /* backend [rows][...] */
    int64_t *dep_pos;                    /* backend [dep_q][rows]: step k in every row of block k */
    /* A frame's inputs: one backend block `in`, staged whole in host_in and sent in one upload
     * before the frame: tables [rows] (each row's temporal ring table), params [2][rows] (text,
     * audio), pos [rows] (the temporal positions), ids [17][rows] (the input columns), forced
     * [1+dep_q][rows]; a frame of n rows uses the first k·n entries of a [k][rows] part as [k][n]. */
    void *in, *host_in;
    size_t in_bytes;
    const pp_kv_ring **tables, **host_tables;
    pp_sample_param *params, *host_params;
    int64_t *pos, *host_pos;
    int32_t *ids, *host_ids, *forced, *host_forced;
    int32_t *tokens; /* backend [1+dep_q][rows]: a frame's tokens, [1+steps][n] */
    /* The frames the backend may record (run_recorded), one key per recent shape (frame_shape). */
    pp_recorded_shape recorded[LM_RECORDED_SHAPES];
    uint64_t frames; /* recorded frames run so far: the clock of `used` */
    size_t bytes;         /* host and backend memory all of the above take (pp_lm_work_bytes) */
};

const pp_lm_config *pp_lm_get_config(const pp_lm *lm) { return &lm->cfg; }
pp_backend *pp_lm_backend(const pp_lm *lm) { return lm->be; }

static int refuse_extra(const st_file *f, const char *name, const char *key, int value, char *err) {
    if (!pp_weight_exists(f, name)) return PP_OK;
    return pp_fail(err, PP_EINVAL, "%s: config key '%s' = %d but the file holds tensor '%s'", pp_st_path(f), key, value,
                   name);
}

int pp_lm_check_extra(const pp_lm_config *c, const st_file *f, char *err) {
    /* every layer's norm1 scale (never quantized), not only the next one: a file whose layers
     * skip a number holds more past it */
    pp_lm_tensor t;
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const char *name = pp_st_at(f, i)->name;
        if (pp_lm_catalog_find(name, &t) || t.part != PP_LM_NORM1) continue;
        int layers = t.depformer ? c->dep_num_layers : c->num_layers;
        if (t.layer >= layers)
            return refuse_extra(f, name, t.depformer ? "depformer_num_layers" : "num_layers", layers, err);
    }
    char name[128];
    snprintf(name, sizeof name, "linears.%d.weight", c->dep_q);
    return refuse_extra(f, name, "dep_q", c->dep_q, err);
}

void pp_lm_config_fit_file(pp_lm_config *c, const st_file *f, int have_config) {
    const char *kv = pp_st_metadata(f, "personaplex.block_count");
    int gguf = pp_st_metadata(f, "general.architecture") != NULL;
    if (have_config && !gguf) return;
    /* up to the highest layer: a layer missing below it is then reported missing, not the
     * layers above it dropped */
    int n = 0;
    pp_lm_tensor t;
    for (size_t i = 0; i < pp_st_count(f); i++)
        if (!pp_lm_catalog_find(pp_st_at(f, i)->name, &t) && t.part == PP_LM_NORM1 && !t.depformer && t.layer >= n)
            n = t.layer + 1;
    if (!n) return; /* nothing to count: loading reports the missing tensors */
    if (kv && strtol(kv, NULL, 10) != n) /* strtol: a count past int's range is defined (and differs) */
        PP_INFO("lm", "%s: KV personaplex.block_count says %s, the file holds %d temporal layers: using %d",
                pp_st_path(f), kv, n, n);
    if (n != c->num_layers)
        PP_INFO("lm", "%s: %d temporal layers from the tensors (the %s said %d)", pp_st_path(f), n,
                have_config ? "config" : "default config", c->num_layers);
    c->num_layers = n;
}

int pp_lm_config_for(const char *config_path, const st_file *f, pp_lm_config *c, char *err) {
    int rc;
    if (config_path) {
        rc = pp_lm_config_load(config_path, c, err);
    } else {
        pp_lm_config_default(c);
        rc = pp_lm_config_validate(c, "default config", err);
    }
    if (rc) return rc;
    pp_lm_config_fit_file(c, f, config_path != NULL);
    return pp_lm_config_validate(c, pp_st_path(f), err); /* the layers the tensors gave, against the bounds */
}

static pp_tf_shape temporal_shape(const pp_lm_config *c) {
    return (pp_tf_shape){
        .prefix = "transformer",
        .dim = c->dim,
        .num_heads = c->num_heads,
        .hidden = c->ffn_hidden,
        .num_layers = c->num_layers,
        .n_steps = 1,
        .rope = 1,
        .max_period = (float)c->max_period,
        .eps = c->norm_eps,
    };
}

static pp_tf_shape depformer_shape(const pp_lm_config *c) {
    return (pp_tf_shape){
        .prefix = "depformer",
        .dim = c->dep_dim,
        .num_heads = c->dep_num_heads,
        .hidden = c->dep_ffn_hidden,
        .num_layers = c->dep_num_layers,
        .n_steps = c->dep_q,
        .rope = 0,
        .max_period = 0,
        .eps = c->norm_eps,
    };
}

typedef struct loader {
    pp_lm *lm;
    char *err;
} loader;

/* Where a catalogued matrix outside the transformer layers goes. */
static pp_weight *weight_slot(pp_lm *lm, const pp_lm_tensor *t) {
    switch (t->part) {
    case PP_LM_EMB: return &lm->emb[t->index];
    case PP_LM_TEXT_EMB: return &lm->text_emb;
    case PP_LM_TEXT_LINEAR: return &lm->text_linear;
    case PP_LM_DEP_IN: return &lm->dep_in[t->index];
    case PP_LM_LINEAR: return &lm->linears[t->index];
    case PP_LM_DEP_EMB: return &lm->dep_emb[t->index];
    case PP_LM_DEP_TEXT_EMB: return &lm->dep_text_emb;
    default: return NULL;
    }
}

const pp_weight *pp_lm_weight(const pp_lm *lm, const pp_lm_tensor *t) {
    if (!pp_lm_part_in_layer(t->part)) return t->part == PP_LM_OUT_NORM ? NULL : weight_slot((pp_lm *)lm, t);
    const pp_tf *tf = t->depformer ? &lm->depformer : &lm->temporal;
    if (t->layer < 0 || t->layer >= tf->shape.num_layers) return NULL;
    const pp_tf_layer *L = &tf->layers[t->layer];
    int step = t->index < 0 ? 0 : t->index;
    switch (t->part) {
    case PP_LM_ATTN_IN: return L->step_proj ? NULL : &L->in_proj;
    case PP_LM_ATTN_OUT: return L->step_proj ? NULL : &L->out_proj;
    case PP_LM_FFN_IN: return &L->ffn_in[step];
    case PP_LM_FFN_OUT: return &L->ffn_out[step];
    default: return NULL;
    }
}

static int load_tensor(void *ctx, const pp_lm_tensor *t) {
    loader *L = ctx;
    pp_lm *lm = L->lm;
    if (pp_lm_part_in_layer(t->part))
        return pp_tf_load_tensor(lm->be, lm->file, lm->quant, t->depformer ? &lm->depformer : &lm->temporal, t, L->err);
    if (t->part == PP_LM_OUT_NORM)
        return pp_tf_load_alpha(lm->be, lm->file, t->name, (int)t->cols, t->cfg_keys, &lm->out_norm, L->err);
    return pp_tf_load_weight(lm->be, lm->file, lm->quant, t, t->name, t->rows, t->cols, weight_slot(lm, t), L->err);
}

static int load_weights(pp_lm *lm, char *err) {
    const pp_lm_config *c = &lm->cfg;
    pp_tf_shape ts = temporal_shape(c), ds = depformer_shape(c);
    loader L = {.lm = lm, .err = err};
    int rc;
    if ((rc = pp_tf_init(&ts, &lm->temporal, err)) || (rc = pp_tf_init(&ds, &lm->depformer, err)) ||
        (rc = pp_lm_catalog(c, load_tensor, &L)))
        return rc;
    /* The depformer's products are small and run one after another, 8 or 16 steps a frame. */
    pp_tf_link(&lm->temporal, 0);
    pp_tf_link(&lm->depformer, 1);
    for (int k = 0; k < c->dep_q; k++) lm->dep_in[k].latency_bound = lm->linears[k].latency_bound = 1;
    for (int k = 0; k <= c->n_q; k++) {
        lm->inputs[k] = k < c->n_q ? &lm->emb[k] : &lm->text_emb;
        lm->input_rows[k] = k < c->n_q ? k + 1 : 0;
    }
    return pp_lm_check_extra(c, lm->file, err);
}

/* The start-up log says per format how many tensors and bytes the model holds. */
static void log_weight_stats(const pp_lm *lm) {
    const pp_lm_config *c = &lm->cfg;
    pp_weight_stats stats = {{0}, {0}};
    for (int i = 0; i < c->n_q; i++) pp_weight_stats_add(&stats, &lm->emb[i]);
    pp_weight_stats_add(&stats, &lm->text_emb);
    pp_weight_stats_add(&stats, &lm->text_linear);
    pp_weight_stats_add(&stats, &lm->dep_text_emb);
    for (int k = 0; k < c->dep_q; k++) {
        pp_weight_stats_add(&stats, &lm->dep_in[k]);
        pp_weight_stats_add(&stats, &lm->linears[k]);
        if (k > 0) pp_weight_stats_add(&stats, &lm->dep_emb[k - 1]);
    }
    pp_tf_weight_stats(&lm->temporal, &stats);
    pp_tf_weight_stats(&lm->depformer, &stats);
    pp_weight_stats_log(&stats, "lm", pp_st_path(lm->file));
}

static void release_weight(pp_backend *be, pp_weight *w) {
    if (w->data) be->ops->weight_release(be, w);
}

void pp_lm_close(pp_lm *lm) {
    if (!lm) return;
    pp_backend *be = lm->be;
    for (int i = 0; i < 16; i++) release_weight(be, &lm->emb[i]);
    release_weight(be, &lm->text_emb);
    release_weight(be, &lm->text_linear);
    if (lm->out_norm) be->ops->release(be, lm->out_norm);
    pp_tf_free(be, &lm->temporal);
    pp_tf_free(be, &lm->depformer);
    for (int k = 0; k < PP_LM_MAX_DEP_Q; k++) {
        release_weight(be, &lm->dep_in[k]);
        release_weight(be, &lm->linears[k]);
        if (k < PP_LM_MAX_DEP_Q - 1) release_weight(be, &lm->dep_emb[k]);
    }
    release_weight(be, &lm->dep_text_emb);
    if (lm->in_place) be->ops->host_unmap(be, pp_st_base(lm->file));
    pp_st_close(lm->file);
    if (lm->quant) pp_tf_quant_free(lm->quant);
    free(lm->quant);
    free(lm);
}

static int check_head_dims(pp_backend *be, const pp_lm_config *c, const char *path, char *err) {
    char what[PP_ERR_LEN];
    snprintf(what, sizeof what, "%s: the temporal transformer", path);
    int rc = pp_backend_check_head_dim(be, c->dim / c->num_heads, what, err);
    snprintf(what, sizeof what, "%s: the depformer", path);
    return rc ? rc : pp_backend_check_head_dim(be, c->dep_dim / c->dep_num_heads, what, err);
}

int pp_lm_open(pp_backend *be, const char *weights_path, const char *config_path, pp_lm **out, char *err) {
    return pp_lm_open_quantized(be, weights_path, config_path, NULL, out, err);
}

int pp_lm_open_quantized(pp_backend *be, const char *weights_path, const char *config_path,
                         const pp_lm_quantize *quantize, pp_lm **out, char *err) {
    *out = NULL;
    pp_lm *lm = calloc(1, sizeof *lm);
    if (!lm) return pp_fail(err, PP_ENOMEM, "lm: out of memory");
    lm->be = be;
    int rc = PP_OK;
    if (quantize) {
        int group = quantize->group ? quantize->group : pp_quantize_default_group(quantize->fmt);
        lm->quant = calloc(1, sizeof *lm->quant);
        if (!lm->quant)
            rc = pp_fail(err, PP_ENOMEM, "lm: out of memory");
        else
            rc = pp_quantize_check(quantize->fmt, group, err);
        if (lm->quant)
            lm->quant->opts =
                (pp_lm_quantize){.fmt = quantize->fmt, .group = group, .temporal_only = quantize->temporal_only};
    }
    if (!rc) rc = pp_st_open(weights_path, &lm->file, err);
    if (!rc) rc = pp_lm_config_for(config_path, lm->file, &lm->cfg, err);
    if (!rc) rc = check_head_dims(be, &lm->cfg, weights_path, err);
    if (!rc && be->ops->host_map) lm->in_place = be->ops->host_map(be, pp_st_base(lm->file), pp_st_size(lm->file));
    if (!rc) rc = load_weights(lm, err);
    if (!rc) rc = pp_backend_device_error(be, err); /* the uploads report nothing themselves */
    /* a device copied every weight: an ONNX bundle's converted host copy is not needed any more */
    if (!rc && be->ops->mem_info && !lm->in_place) pp_st_drop_data(lm->file);
    if (rc) {
        pp_lm_close(lm);
        return rc;
    }
    const pp_lm_config *c = &lm->cfg;
    log_weight_stats(lm);
    if (lm->quant)
        PP_INFO("lm", "%s: quantized %d tensors to %s while loading (%s): %.2f GiB -> %.2f GiB", weights_path,
                lm->quant->tensors, pp_wformat_name(lm->quant->opts.fmt),
                lm->quant->opts.temporal_only ? "the temporal transformer's projections"
                                              : "as personaplex-quantize would",
                (double)lm->quant->source_bytes / (1 << 30), (double)lm->quant->quantized_bytes / (1 << 30));
    if (lm->in_place && be->ops->mem_info) {
        size_t copied, buffers, workspace, dev_free, dev_total, in_place;
        be->ops->mem_info(be, &copied, &buffers, &workspace, &dev_free, &dev_total, &in_place);
        PP_INFO("lm", "%s: %.3f GiB of weights read in place from the file's pages (held once), %.3f GiB copied to "
                      "device memory (tensors not 16-byte aligned in the file)",
                weights_path, (double)in_place / (1 << 30), (double)copied / (1 << 30));
    }
    PP_INFO("lm", "%s: %d layers dim %d, depformer %d layers dim %d x %d steps, context %d, on %s", weights_path,
            c->num_layers, c->dim, c->dep_num_layers, c->dep_dim, c->dep_q, c->context, be->ops->name);
    *out = lm;
    return PP_OK;
}

void pp_lm_ctx_destroy(pp_lm_ctx *c) {
    if (!c) return;
    pp_tf_cache_free(c->lm->be, &c->temporal);
    free(c);
}

size_t pp_lm_ctx_bytes(const pp_lm_config *c, pp_kv_format kv) {
    pp_tf_shape ts = temporal_shape(c);
    return pp_tf_cache_bytes(&ts, c->context, kv);
}

pp_kv_format pp_lm_ctx_format(const pp_lm_ctx *c) { return c->temporal.rings[0].fmt; }
int pp_lm_ctx_capacity(const pp_lm_ctx *c) { return c->temporal.rings[0].capacity; }

size_t pp_lm_ctx_slots_bytes(const pp_lm_ctx *c, int slots) {
    pp_tf_shape ts = temporal_shape(&c->lm->cfg);
    return pp_tf_cache_bytes(&ts, slots, pp_lm_ctx_format(c));
}

void pp_lm_ctx_export(const pp_lm_ctx *c, int slots, void *host) {
    pp_tf_cache_export(c->lm->be, &c->lm->temporal, &c->temporal, slots, host);
}

void pp_lm_ctx_import(pp_lm_ctx *c, int slots, const void *host) {
    pp_tf_cache_import(c->lm->be, &c->lm->temporal, &c->temporal, slots, host);
}

int pp_lm_ctx_create(const pp_lm *lm, pp_kv_format kv, pp_lm_ctx **out, char *err) {
    *out = NULL;
    pp_lm_ctx *c = calloc(1, sizeof *c);
    if (!c) return pp_fail(err, PP_ENOMEM, "lm: out of memory");
    c->lm = lm;
    /* The reference's ring quirk: a query sees capacity − 1 keys (spec §3.4). */
    int rc = pp_tf_cache_init(lm->be, &lm->temporal, lm->cfg.context, lm->cfg.context - 1, kv, &c->temporal, err);
    if (rc) {
        pp_lm_ctx_destroy(c);
        return rc;
    }
    *out = c;
    return PP_OK;
}

void pp_lm_work_destroy(pp_lm_work *w) {
    if (!w) return;
    pp_backend *be = w->lm->be;
    pp_backend_forget_shapes(be, w->recorded, LM_RECORDED_SHAPES);
    pp_tf_scratch_free(be, &w->temporal);
    pp_tf_scratch_free(be, &w->depformer);
    for (int i = 0; w->dep && i < w->rows; i++) pp_tf_cache_free(be, &w->dep[i]);
    void *bufs[] = {w->x, w->h, w->dx, w->logits, w->layer_out, w->dep_pos, w->in, w->tokens, w->dep_tables};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->release(be, bufs[i]);
    void *host[] = {w->dep, w->dep_rows, w->tmp_rows, w->host_in};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    free(w);
}

/* calloc and the backend's alloc, counted in w->bytes. */
static void *work_calloc(pp_lm_work *w, size_t n, size_t size) {
    w->bytes += n * size;
    return calloc(n, size);
}
static void *work_alloc(pp_backend *be, pp_lm_work *w, size_t bytes) {
    w->bytes += bytes;
    return be->ops->alloc(be, bytes);
}

static int work_buffers(const pp_lm *lm, pp_lm_work *w, char *err) {
    const pp_lm_config *cfg = &lm->cfg;
    pp_backend *be = lm->be;
    size_t n = (size_t)w->rows, nt = (size_t)cfg->dep_q + 1;
    size_t nlog = (size_t)(cfg->text_card > cfg->card ? cfg->text_card : cfg->card);
    w->dep = work_calloc(w, n, sizeof *w->dep);
    w->dep_rows = work_calloc(w, n, sizeof *w->dep_rows);
    w->tmp_rows = work_calloc(w, n, sizeof *w->tmp_rows);
    w->in_bytes =
        n * sizeof(pp_kv_ring *) + 2 * n * sizeof(pp_sample_param) + n * sizeof(int64_t) +
        n * (PP_LM_STREAMS + nt) * sizeof(int32_t);
    w->host_in = work_calloc(w, 1, w->in_bytes);
    w->x = work_alloc(be, w, n * cfg->dim * sizeof(float));
    w->h = work_alloc(be, w, n * cfg->dim * sizeof(float));
    w->dx = work_alloc(be, w, n * cfg->dep_dim * sizeof(float));
    w->logits = work_alloc(be, w, n * nlog * sizeof(float));
    w->layer_out = work_alloc(be, w, n * cfg->num_layers * cfg->dim * sizeof(float));
    w->dep_pos = work_alloc(be, w, (size_t)cfg->dep_q * n * sizeof(int64_t));
    w->in = work_alloc(be, w, w->in_bytes);
    w->tokens = work_alloc(be, w, n * nt * sizeof(int32_t));
    w->dep_tables = work_alloc(be, w, n * sizeof *w->dep_tables);
    if (!w->dep || !w->dep_rows || !w->tmp_rows || !w->host_in || !w->x || !w->h || !w->dx ||
        !w->logits || !w->layer_out || !w->dep_pos || !w->in || !w->tokens || !w->dep_tables)
        return pp_fail(err, PP_ENOMEM, "lm: out of memory for the scratch of %d conversations", w->rows);
    /* The parts of the input block, at the same offsets on the host and the backend. */
    w->tables = w->in;
    w->host_tables = w->host_in;
    w->params = (pp_sample_param *)(w->tables + n);
    w->host_params = (pp_sample_param *)(w->host_tables + n);
    w->pos = (int64_t *)(w->params + 2 * n);
    w->host_pos = (int64_t *)(w->host_params + 2 * n);
    w->ids = (int32_t *)(w->pos + n);
    w->host_ids = (int32_t *)(w->host_pos + n);
    w->forced = w->ids + n * PP_LM_STREAMS;
    w->host_forced = w->host_ids + n * PP_LM_STREAMS;
    int rc = pp_tf_scratch_init(be, &lm->temporal, w->rows, &w->temporal, err);
    if (!rc) rc = pp_tf_scratch_init(be, &lm->depformer, w->rows, &w->depformer, err);
    w->bytes += pp_tf_scratch_bytes(&lm->temporal.shape, w->rows) + pp_tf_scratch_bytes(&lm->depformer.shape, w->rows) +
                n * pp_tf_cache_bytes(&lm->depformer.shape, cfg->dep_q, PP_KV_F32);
    const pp_kv_ring **host_dep_tables = rc ? NULL : calloc(n, sizeof *host_dep_tables);
    if (!rc && !host_dep_tables) rc = pp_fail(err, PP_ENOMEM, "lm: out of memory");
    for (int i = 0; !rc && i < w->rows; i++) {
        /* The same off-by-one as the temporal ring: step 15 does not see step 0 (spec §4.3). */
        rc = pp_tf_cache_init(be, &lm->depformer, cfg->dep_q, cfg->dep_q - 1, PP_KV_F32, &w->dep[i], err);
        w->dep_rows[i] = &w->dep[i];
        host_dep_tables[i] = w->dep[i].table;
    }
    if (!rc) {
        be->ops->upload(be, w->dep_tables, host_dep_tables, n * sizeof *host_dep_tables);
        be->ops->sync(be); /* the staging array goes now */
    }
    free(host_dep_tables);
    return rc;
}

int pp_lm_work_create(const pp_lm *lm, int rows, pp_lm_work **out, char *err) {
    *out = NULL;
    if (rows < 1) return pp_fail(err, PP_EINVAL, "lm: scratch for %d conversations", rows);
    pp_lm_work *w = calloc(1, sizeof *w);
    if (!w) return pp_fail(err, PP_ENOMEM, "lm: out of memory");
    w->lm = lm;
    w->rows = rows;
    int rc = work_buffers(lm, w, err);
    if (rc) {
        pp_lm_work_destroy(w);
        return rc;
    }
    int dep_q = lm->cfg.dep_q;
    for (int k = 0; k < dep_q; k++) {
        for (int i = 0; i < rows; i++) w->host_pos[i] = k;
        lm->be->ops->upload(lm->be, w->dep_pos + (size_t)k * rows, w->host_pos, (size_t)rows * sizeof(int64_t));
    }
    *out = w;
    return PP_OK;
}

int pp_lm_work_rows(const pp_lm_work *w) { return w->rows; }

size_t pp_lm_work_bytes(const pp_lm_work *w) { return w->bytes; }

/* The input rows from the ids in backend memory. */
static void embed_inputs(const pp_lm *lm, pp_lm_work *w, int n) {
    lm->be->ops->embed_sum(lm->be, lm->inputs, lm->input_rows, lm->cfg.n_q + 1, w->ids, n, w->x);
}

void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_work *w, int n, const int32_t (*cols)[PP_LM_STREAMS]) {
    for (int s = 0; s < PP_LM_STREAMS; s++)
        for (int i = 0; i < n; i++) w->host_ids[(size_t)s * n + i] = cols[i][s];
    lm->be->ops->upload(lm->be, w->ids, w->host_ids, (size_t)n * PP_LM_STREAMS * sizeof(int32_t));
    embed_inputs(lm, w, n);
}

void pp_lm_set_embedding(const pp_lm *lm, pp_lm_work *w, int row, const float *emb) {
    size_t d = (size_t)lm->cfg.dim;
    lm->be->ops->upload(lm->be, w->x + (size_t)row * d, emb, d * sizeof(float));
}

void pp_lm_get_embedding(const pp_lm *lm, pp_lm_work *w, int row, float *emb) {
    size_t d = (size_t)lm->cfg.dim;
    lm->be->ops->download(lm->be, emb, w->x + (size_t)row * d, d * sizeof(float));
}

/* Row i's conversation rings and (staged) position. */
static void put_row(pp_lm_work *w, int i, pp_lm_ctx *ctx, int64_t pos) {
    w->host_pos[i] = pos;
    w->tmp_rows[i] = &ctx->temporal;
    w->host_tables[i] = ctx->temporal.table;
}

/* The temporal transformer over x on the uploaded positions and rings, then h = out_norm(x);
 * with head, also logits = h · text_linearᵀ, the norm and the product as one operation (a device
 * prepares the product's input in the last layer's product). */
static void temporal(const pp_lm *lm, pp_lm_work *w, int n, int layers, int head) {
    pp_backend *be = lm->be;
    const pp_lm_config *c = &lm->cfg;
    pp_tf_forward(be, &lm->temporal, &w->temporal, w->tmp_rows, w->tables, n, w->x, w->pos, 0,
                  layers ? w->layer_out : NULL);
    if (head)
        be->ops->norm_matmul(be, w->x, lm->out_norm, n, c->dim, c->norm_eps, w->h, &lm->text_linear, w->logits);
    else
        be->ops->rmsnorm(be, w->x, lm->out_norm, n, c->dim, c->norm_eps, w->h);
}

void pp_lm_prefill(const pp_lm *lm, pp_lm_work *w, pp_lm_ctx *ctx, int64_t first, int n) {
    for (int i = 0; i < n; i++) w->host_pos[i] = first + i;
    lm->be->ops->upload(lm->be, w->pos, w->host_pos, (size_t)n * sizeof(int64_t));
    pp_tf_prefill(lm->be, &lm->temporal, &w->temporal, &ctx->temporal, first, n, w->x, w->pos);
    lm->be->ops->rmsnorm(lm->be, w->x, lm->out_norm, n, lm->cfg.dim, lm->cfg.norm_eps, w->h);
}

/* Everything a frame reads, into its fixed backend block in one upload (before a graph
 * replays). With inputs_ready the staged ids are those pp_lm_embed_tokens sent, or unused. */
static void frame_upload(const pp_lm *lm, pp_lm_work *w, int n, const pp_lm_row *rows, int inputs_ready) {
    int nt = lm->cfg.dep_q + 1;
    for (int s = 0; !inputs_ready && s < PP_LM_STREAMS; s++)
        for (int i = 0; i < n; i++) w->host_ids[(size_t)s * n + i] = rows[i].cols[s];
    for (int i = 0; i < n; i++) {
        put_row(w, i, rows[i].ctx, rows[i].pos);
        w->host_params[i] = rows[i].text;
        w->host_params[n + i] = rows[i].audio;
    }
    for (int k = 0; k < nt; k++)
        for (int i = 0; i < n; i++) w->host_forced[(size_t)k * n + i] = rows[i].forced[k];
    lm->be->ops->upload(lm->be, w->in, w->host_in, w->in_bytes);
}

static void trace_download(pp_backend *be, float *dst, const float *src, size_t floats) {
    if (dst) be->ops->download(be, dst, src, floats * sizeof(float));
}

/* The frame's operations: nothing here reads a host value that changes between frames of one
 * shape (a recorded frame replays them); only a traced frame downloads. */
static void frame_ops(const pp_lm *lm, pp_lm_work *w, int n, int steps, int inputs_ready, const pp_lm_trace *tr) {
    pp_backend *be = lm->be;
    const pp_lm_config *c = &lm->cfg;
    if (!inputs_ready) embed_inputs(lm, w, n);
    temporal(lm, w, n, tr && tr->layer_out, steps >= 0);
    size_t per = (size_t)c->num_layers * c->dim;
    for (int i = 0; tr && tr->layer_out && i < n; i++)
        trace_download(be, tr->layer_out[i], w->layer_out + i * per, per);
    if (steps < 0) return;
    if (tr) trace_download(be, tr->text_logits, w->logits, (size_t)n * c->text_card);
    be->ops->sample(be, w->logits, n, c->text_card, w->params, 0, w->forced, w->tokens);
    for (int k = 0; k < steps; k++) {
        be->ops->matmul(be, &lm->dep_in[k], w->h, n, w->dx);
        /* Step k is fed the frame's token of stream k (the text token at k = 0). */
        be->ops->embed(be, k == 0 ? &lm->dep_text_emb : &lm->dep_emb[k - 1], w->tokens + (size_t)k * n, n, w->dx, 1);
        pp_tf_forward(be, &lm->depformer, &w->depformer, w->dep_rows, w->dep_tables, n, w->dx,
                      w->dep_pos + (size_t)k * w->rows, k, NULL);
        be->ops->matmul(be, &lm->linears[k], w->dx, n, w->logits);
        if (tr && k < tr->dep_steps)
            trace_download(be, tr->dep_logits ? tr->dep_logits + (size_t)k * n * c->card : NULL, w->logits,
                           (size_t)n * c->card);
        be->ops->sample(be, w->logits, n, c->card, w->params + n, k + 1, w->forced + (size_t)(k + 1) * n,
                        w->tokens + (size_t)(k + 1) * n);
    }
}

/* What a recorded frame holds besides the work's buffers: n, the step count and the format of
 * the rows' temporal rings (attn_rows takes row 0's ring for the format, capacity and window all
 * rows share; capacity and window are the model's context for every conversation). Which
 * conversations the rows hold is not part of it: their ring tables, positions, ids and sampling
 * settings are uploaded in the input block before the frame, so a frame of one shape replays
 * for any set of conversations. */
static uint64_t frame_shape(int n, int steps, const pp_lm_row *rows) {
    return (uint64_t)n << 32 | (uint64_t)(steps + 1) << 8 | (uint64_t)rows[0].ctx->temporal.rings[0].fmt;
}

/* The rows' rings must share row 0's format, capacity and window (attn_rows reads them once). */
static int check_rings(int n, const pp_lm_row *rows, char *err) {
    const pp_kv_ring *r0 = &rows[0].ctx->temporal.rings[0];
    for (int i = 1; i < n; i++) {
        const pp_kv_ring *r = &rows[i].ctx->temporal.rings[0];
        if (r->fmt != r0->fmt || r->capacity != r0->capacity || r->window != r0->window)
            return pp_fail(err, PP_EINVAL,
                           "lm: frame row %d's KV cache (format %d, %d slots) differs from row 0's (format %d, %d "
                           "slots): the rows of a frame share one",
                           i, (int)r->fmt, r->capacity, (int)r0->fmt, r0->capacity);
    }
    return PP_OK;
}

typedef struct frame_args {
    const pp_lm *lm;
    pp_lm_work *w;
    int n, steps;
} frame_args;

static void issue_frame(void *arg) {
    const frame_args *a = arg;
    frame_ops(a->lm, a->w, a->n, a->steps, 0, NULL);
}

/* A frame the backend may record, under the key of its shape among the work's recent shapes. */
static int frame_recorded(const pp_lm *lm, pp_lm_work *w, int n, const pp_lm_row *rows, int steps, char *err) {
    uint64_t key =
        pp_backend_shape_key(lm->be, w->recorded, LM_RECORDED_SHAPES, frame_shape(n, steps, rows), &w->frames);
    frame_args a = {.lm = lm, .w = w, .n = n, .steps = steps};
    return pp_backend_run_recorded(lm->be, key, issue_frame, &a, err);
}

int pp_lm_frame(const pp_lm *lm, pp_lm_work *w, int n, const pp_lm_row *rows, int steps, int inputs_ready,
                const pp_lm_trace *trace, int32_t *tokens, char *err) {
    pp_backend *be = lm->be;
    if (n < 1 || n > w->rows || steps > lm->cfg.dep_q)
        return pp_fail(err, PP_EINVAL, "lm: frame of %d rows (scratch for %d), %d depformer steps (dep_q %d)", n,
                       w->rows, steps, lm->cfg.dep_q);
    int rc = check_rings(n, rows, err);
    if (rc) return rc;
    frame_upload(lm, w, n, rows, inputs_ready);
    if (!trace && !inputs_ready)
        rc = frame_recorded(lm, w, n, rows, steps, err);
    else
        frame_ops(lm, w, n, steps, inputs_ready, trace);
    if (!rc && steps >= 0) be->ops->download(be, tokens, w->tokens, (size_t)(steps + 1) * n * sizeof(int32_t));
    return rc ? rc : pp_backend_device_error(be, err);
}
