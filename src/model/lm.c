/* lm: see lm.h. Key names and shapes follow spec/lm.md §2. */
#include "model/lm.h"

#include "base/err.h"
#include "base/log.h"
#include "model/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Config keys that set each tensor's shape, quoted in shape-mismatch messages. */
#define KEYS_TEMPORAL "dim, num_heads, num_layers, hidden_scale"
#define KEYS_DEPFORMER "depformer_dim, depformer_num_heads, depformer_num_layers, depformer_dim_feedforward, dep_q"

struct pp_lm {
    pp_backend *be;
    st_file *file;
    pp_lm_config cfg;
    pp_weight emb[16];          /* audio streams 1..16: [card+1, dim] */
    pp_weight text_emb;         /* [text_card+1, dim] */
    pp_weight text_linear;      /* [text_card, dim] */
    float *out_norm;            /* backend [dim] */
    pp_tf temporal, depformer;
    pp_weight dep_in[PP_LM_MAX_DEP_Q];      /* [dep_dim, dim] */
    pp_weight dep_text_emb;                 /* [text_card+1, dep_dim] */
    pp_weight dep_emb[PP_LM_MAX_DEP_Q - 1]; /* [card+1, dep_dim] */
    pp_weight linears[PP_LM_MAX_DEP_Q];     /* [card, dep_dim] */
};

struct pp_lm_ctx {
    const pp_lm *lm;
    pp_tf_cache temporal;
};

struct pp_lm_work {
    const pp_lm *lm;
    int rows;
    pp_tf_scratch temporal, depformer;
    pp_tf_cache *dep;                    /* [rows]: each row's depformer rings (restart every frame) */
    pp_tf_cache **dep_rows, **tmp_rows;  /* host [rows]: ring pointers handed to pp_tf_forward */
    float *x, *h, *dx, *logits, *layer_out; /* backend [rows][...] */
    int32_t *pos;                        /* backend [rows]: the temporal positions */
    int32_t *dep_pos;                    /* backend [dep_q][rows]: step k in every row of block k */
    int32_t *ids;                        /* host [rows] */
    int32_t *host_pos;                   /* host [rows] */
};

const pp_lm_config *pp_lm_get_config(const pp_lm *lm) { return &lm->cfg; }
pp_backend *pp_lm_backend(const pp_lm *lm) { return lm->be; }

/* A file with more layers or steps than the config would otherwise load silently truncated. */
static int refuse_extra(const pp_lm *lm, const char *name, const char *key, int value, char *err) {
    if (!pp_weight_exists(lm->file, name)) return PP_OK;
    return pp_fail(err, PP_EINVAL, "%s: config key '%s' = %d but the file holds tensor '%s'", st_path(lm->file), key,
                   value, name);
}

static pp_tf_shape temporal_shape(const pp_lm_config *c) {
    return (pp_tf_shape){
        .prefix = "transformer", .dim = c->dim, .num_heads = c->num_heads, .hidden = c->ffn_hidden,
        .num_layers = c->num_layers, .n_steps = 1, .rope = 1, .max_period = (float)c->max_period,
        .eps = c->norm_eps, .cfg_keys = KEYS_TEMPORAL,
    };
}

static pp_tf_shape depformer_shape(const pp_lm_config *c) {
    return (pp_tf_shape){
        .prefix = "depformer", .dim = c->dep_dim, .num_heads = c->dep_num_heads, .hidden = c->dep_ffn_hidden,
        .num_layers = c->dep_num_layers, .n_steps = c->dep_q, .rope = 0, .max_period = 0, .eps = c->norm_eps,
        .cfg_keys = KEYS_DEPFORMER,
    };
}

static int load_weights(pp_lm *lm, char *err) {
    const pp_lm_config *c = &lm->cfg;
    pp_backend *be = lm->be;
    const st_file *f = lm->file;
    char name[128];
    int rc;
    for (int i = 0; i < c->n_q; i++) {
        snprintf(name, sizeof name, "emb.%d.weight", i);
        if ((rc = pp_tf_load_weight(be, f, name, c->card + 1, c->dim, "card, dim", &lm->emb[i], err))) return rc;
    }
    if ((rc = pp_tf_load_weight(be, f, "text_emb.weight", c->text_card + 1, c->dim, "text_card, dim", &lm->text_emb,
                                err)))
        return rc;
    if ((rc = pp_tf_load_weight(be, f, "text_linear.weight", c->text_card, c->dim,
                                "text_card, existing_text_padding_id, dim", &lm->text_linear, err)))
        return rc;
    if ((rc = pp_tf_load_alpha(be, f, "out_norm.alpha", c->dim, "dim", &lm->out_norm, err))) return rc;
    pp_tf_shape ts = temporal_shape(c), ds = depformer_shape(c);
    if ((rc = pp_tf_load(be, f, &ts, &lm->temporal, err))) return rc;
    if ((rc = pp_tf_load(be, f, &ds, &lm->depformer, err))) return rc;
    for (int k = 0; k < c->dep_q; k++) {
        snprintf(name, sizeof name, "depformer_in.%d.weight", k);
        if ((rc = pp_tf_load_weight(be, f, name, c->dep_dim, c->dim, "depformer_dim, dim", &lm->dep_in[k], err)))
            return rc;
        snprintf(name, sizeof name, "linears.%d.weight", k);
        if ((rc = pp_tf_load_weight(be, f, name, c->card, c->dep_dim, "card, depformer_dim", &lm->linears[k], err)))
            return rc;
        if (k == 0) continue;
        snprintf(name, sizeof name, "depformer_emb.%d.weight", k - 1);
        if ((rc = pp_tf_load_weight(be, f, name, c->card + 1, c->dep_dim, "card, depformer_dim", &lm->dep_emb[k - 1],
                                    err)))
            return rc;
    }
    if ((rc = pp_tf_load_weight(be, f, "depformer_text_emb.weight", c->text_card + 1, c->dep_dim,
                                "text_card, depformer_dim", &lm->dep_text_emb, err)))
        return rc;
    snprintf(name, sizeof name, "transformer.layers.%d.norm1.alpha", c->num_layers);
    if ((rc = refuse_extra(lm, name, "num_layers", c->num_layers, err))) return rc;
    snprintf(name, sizeof name, "depformer.layers.%d.norm1.alpha", c->dep_num_layers);
    if ((rc = refuse_extra(lm, name, "depformer_num_layers", c->dep_num_layers, err))) return rc;
    snprintf(name, sizeof name, "linears.%d.weight", c->dep_q);
    return refuse_extra(lm, name, "dep_q", c->dep_q, err);
}

static void tensor2(void (*fn)(void *, const char *, int, const int64_t *), void *ctx, const char *name,
                    int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    fn(ctx, name, 2, shape);
}

static void alpha(void (*fn)(void *, const char *, int, const int64_t *), void *ctx, const char *prefix, int l,
                  int which, int64_t d) {
    char name[128];
    int64_t shape[3] = {1, 1, d};
    snprintf(name, sizeof name, "%s.layers.%d.norm%d.alpha", prefix, l, which);
    fn(ctx, name, 3, shape);
}

void pp_lm_tensors(const pp_lm_config *c, void (*fn)(void *ctx, const char *name, int ndim, const int64_t *shape),
                   void *ctx) {
    char n[128];
    int64_t d = c->dim, dd = c->dep_dim, q = c->dep_q;
    for (int i = 0; i < c->n_q; i++) snprintf(n, sizeof n, "emb.%d.weight", i), tensor2(fn, ctx, n, c->card + 1, d);
    tensor2(fn, ctx, "text_emb.weight", c->text_card + 1, d);
    tensor2(fn, ctx, "text_linear.weight", c->text_card, d);
    int64_t od[3] = {1, 1, d};
    fn(ctx, "out_norm.alpha", 3, od);
    for (int l = 0; l < c->num_layers; l++) {
        snprintf(n, sizeof n, "transformer.layers.%d.self_attn.in_proj_weight", l), tensor2(fn, ctx, n, 3 * d, d);
        snprintf(n, sizeof n, "transformer.layers.%d.self_attn.out_proj.weight", l), tensor2(fn, ctx, n, d, d);
        alpha(fn, ctx, "transformer", l, 1, d);
        alpha(fn, ctx, "transformer", l, 2, d);
        snprintf(n, sizeof n, "transformer.layers.%d.gating.linear_in.weight", l);
        tensor2(fn, ctx, n, 2 * (int64_t)c->ffn_hidden, d);
        snprintf(n, sizeof n, "transformer.layers.%d.gating.linear_out.weight", l);
        tensor2(fn, ctx, n, d, c->ffn_hidden);
    }
    for (int l = 0; l < c->dep_num_layers; l++) {
        snprintf(n, sizeof n, "depformer.layers.%d.self_attn.in_proj_weight", l), tensor2(fn, ctx, n, q * 3 * dd, dd);
        snprintf(n, sizeof n, "depformer.layers.%d.self_attn.out_proj.weight", l), tensor2(fn, ctx, n, q * dd, dd);
        alpha(fn, ctx, "depformer", l, 1, dd);
        alpha(fn, ctx, "depformer", l, 2, dd);
        for (int s = 0; s < q; s++) {
            snprintf(n, sizeof n, "depformer.layers.%d.gating.%d.linear_in.weight", l, s);
            tensor2(fn, ctx, n, 2 * (int64_t)c->dep_ffn_hidden, dd);
            snprintf(n, sizeof n, "depformer.layers.%d.gating.%d.linear_out.weight", l, s);
            tensor2(fn, ctx, n, dd, c->dep_ffn_hidden);
        }
    }
    for (int k = 0; k < q; k++) {
        snprintf(n, sizeof n, "depformer_in.%d.weight", k), tensor2(fn, ctx, n, dd, d);
        snprintf(n, sizeof n, "linears.%d.weight", k), tensor2(fn, ctx, n, c->card, dd);
        if (k) snprintf(n, sizeof n, "depformer_emb.%d.weight", k - 1), tensor2(fn, ctx, n, c->card + 1, dd);
    }
    tensor2(fn, ctx, "depformer_text_emb.weight", c->text_card + 1, dd);
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
    pp_weight_stats_log(&stats, "lm", st_path(lm->file));
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
    st_close(lm->file);
    free(lm);
}

int pp_lm_open(pp_backend *be, const char *weights_path, const char *config_path, pp_lm **out, char *err) {
    *out = NULL;
    pp_lm *lm = calloc(1, sizeof *lm);
    if (!lm) return pp_fail(err, PP_ENOMEM, "lm: out of memory");
    lm->be = be;
    int rc;
    if (config_path) {
        rc = pp_lm_config_load(config_path, &lm->cfg, err);
    } else {
        pp_lm_config_default(&lm->cfg);
        rc = pp_lm_config_validate(&lm->cfg, "default config", err);
    }
    if (!rc) rc = st_open(weights_path, &lm->file, err);
    if (!rc) rc = load_weights(lm, err);
    if (rc) {
        pp_lm_close(lm);
        return rc;
    }
    const pp_lm_config *c = &lm->cfg;
    log_weight_stats(lm);
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
    pp_tf_scratch_free(be, &w->temporal);
    pp_tf_scratch_free(be, &w->depformer);
    for (int i = 0; w->dep && i < w->rows; i++) pp_tf_cache_free(be, &w->dep[i]);
    void *bufs[] = {w->x, w->h, w->dx, w->logits, w->layer_out, w->pos, w->dep_pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->release(be, bufs[i]);
    free(w->dep);
    free(w->dep_rows);
    free(w->tmp_rows);
    free(w->ids);
    free(w->host_pos);
    free(w);
}

static int work_buffers(const pp_lm *lm, pp_lm_work *w, char *err) {
    const pp_lm_config *cfg = &lm->cfg;
    pp_backend *be = lm->be;
    size_t n = (size_t)w->rows;
    size_t nlog = (size_t)(cfg->text_card > cfg->card ? cfg->text_card : cfg->card);
    w->dep = calloc(n, sizeof *w->dep);
    w->dep_rows = calloc(n, sizeof *w->dep_rows);
    w->tmp_rows = calloc(n, sizeof *w->tmp_rows);
    w->ids = calloc(n, sizeof *w->ids);
    w->host_pos = calloc(n, sizeof *w->host_pos);
    w->x = be->ops->alloc(be, n * cfg->dim * sizeof(float));
    w->h = be->ops->alloc(be, n * cfg->dim * sizeof(float));
    w->dx = be->ops->alloc(be, n * cfg->dep_dim * sizeof(float));
    w->logits = be->ops->alloc(be, n * nlog * sizeof(float));
    w->layer_out = be->ops->alloc(be, n * cfg->num_layers * cfg->dim * sizeof(float));
    w->pos = be->ops->alloc(be, n * sizeof(int32_t));
    w->dep_pos = be->ops->alloc(be, (size_t)cfg->dep_q * n * sizeof(int32_t));
    if (!w->dep || !w->dep_rows || !w->tmp_rows || !w->ids || !w->host_pos || !w->x || !w->h || !w->dx ||
        !w->logits || !w->layer_out || !w->pos || !w->dep_pos)
        return pp_fail(err, PP_ENOMEM, "lm: out of memory for the scratch of %d conversations", w->rows);
    int rc = pp_tf_scratch_init(be, &lm->temporal, w->rows, &w->temporal, err);
    if (!rc) rc = pp_tf_scratch_init(be, &lm->depformer, w->rows, &w->depformer, err);
    for (int i = 0; !rc && i < w->rows; i++) {
        /* The same off-by-one as the temporal ring: step 15 does not see step 0 (spec §4.3). */
        rc = pp_tf_cache_init(be, &lm->depformer, cfg->dep_q, cfg->dep_q - 1, PP_KV_F32, &w->dep[i], err);
        w->dep_rows[i] = &w->dep[i];
    }
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
        for (int i = 0; i < rows; i++) w->ids[i] = k;
        lm->be->ops->upload(lm->be, w->dep_pos + (size_t)k * rows, w->ids, (size_t)rows * sizeof(int32_t));
    }
    *out = w;
    return PP_OK;
}

int pp_lm_work_rows(const pp_lm_work *w) { return w->rows; }

void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_work *w, int n, const int32_t (*cols)[PP_LM_STREAMS]) {
    pp_backend *be = lm->be;
    for (int k = 1; k <= lm->cfg.n_q + 1; k++) {
        int s = k <= lm->cfg.n_q ? k : 0; /* text last */
        for (int i = 0; i < n; i++) w->ids[i] = cols[i][s];
        be->ops->embed(be, s ? &lm->emb[s - 1] : &lm->text_emb, w->ids, n, w->x, k > 1);
    }
}

void pp_lm_set_embedding(const pp_lm *lm, pp_lm_work *w, int row, const float *emb) {
    size_t d = (size_t)lm->cfg.dim;
    lm->be->ops->upload(lm->be, w->x + (size_t)row * d, emb, d * sizeof(float));
}

void pp_lm_get_embedding(const pp_lm *lm, pp_lm_work *w, int row, float *emb) {
    size_t d = (size_t)lm->cfg.dim;
    lm->be->ops->download(lm->be, emb, w->x + (size_t)row * d, d * sizeof(float));
}

void pp_lm_temporal(const pp_lm *lm, pp_lm_work *w, pp_lm_ctx *const *ctxs, int n, const int64_t *pos,
                    float *const *layer_out) {
    pp_backend *be = lm->be;
    const pp_lm_config *c = &lm->cfg;
    for (int i = 0; i < n; i++) {
        w->host_pos[i] = (int32_t)pos[i];
        w->tmp_rows[i] = &ctxs[i]->temporal;
    }
    be->ops->upload(be, w->pos, w->host_pos, (size_t)n * sizeof(int32_t));
    pp_tf_forward(be, &lm->temporal, &w->temporal, w->tmp_rows, n, w->x, w->pos, 0, layer_out ? w->layer_out : NULL);
    be->ops->rmsnorm(be, w->x, lm->out_norm, n, c->dim, c->norm_eps, w->h);
    size_t per = (size_t)c->num_layers * c->dim;
    for (int i = 0; layer_out && i < n; i++)
        if (layer_out[i]) be->ops->download(be, layer_out[i], w->layer_out + i * per, per * sizeof(float));
}

void pp_lm_text_logits(const pp_lm *lm, pp_lm_work *w, int n, float *logits) {
    pp_backend *be = lm->be;
    be->ops->matmul(be, &lm->text_linear, w->h, n, w->logits);
    be->ops->download(be, logits, w->logits, (size_t)n * lm->cfg.text_card * sizeof(float));
}

void pp_lm_depformer(const pp_lm *lm, pp_lm_work *w, int n, int k, const int32_t *prev, float *logits) {
    pp_backend *be = lm->be;
    be->ops->matmul(be, &lm->dep_in[k], w->h, n, w->dx);
    be->ops->embed(be, k == 0 ? &lm->dep_text_emb : &lm->dep_emb[k - 1], prev, n, w->dx, 1);
    pp_tf_forward(be, &lm->depformer, &w->depformer, w->dep_rows, n, w->dx, w->dep_pos + (size_t)k * w->rows, k,
                  NULL);
    be->ops->matmul(be, &lm->linears[k], w->dx, n, w->logits);
    be->ops->download(be, logits, w->logits, (size_t)n * lm->cfg.card * sizeof(float));
}
