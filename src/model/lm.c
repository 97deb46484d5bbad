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
    pp_tf_state temporal, depformer;
    float *x, *h, *dx, *logits, *layer_out; /* backend */
    int32_t *pos;                           /* backend [1]: the temporal position */
    int32_t *dep_pos;                       /* backend [dep_q]: 0, 1, ... (the depformer step) */
};

const pp_lm_config *pp_lm_get_config(const pp_lm *lm) { return &lm->cfg; }
pp_backend *pp_lm_backend(const pp_lm *lm) { return lm->be; }

/* A file with more layers or steps than the config would otherwise load silently truncated. */
static int refuse_extra(const pp_lm *lm, const char *name, const char *key, int value, char *err) {
    if (!pp_weight_exists(lm->file, name)) return PP_OK;
    return pp_fail(err, PP_EINVAL, "%s: config key '%s' = %d but the file holds tensor '%s'", st_path(lm->file), key,
                   value, name);
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
    pp_tf_shape ts = {
        .prefix = "transformer", .dim = c->dim, .num_heads = c->num_heads, .hidden = c->ffn_hidden,
        .num_layers = c->num_layers, .n_steps = 1, .rope = 1, .max_period = (float)c->max_period,
        .eps = c->norm_eps, .cfg_keys = KEYS_TEMPORAL,
    };
    if ((rc = pp_tf_load(be, f, &ts, &lm->temporal, err))) return rc;
    pp_tf_shape ds = {
        .prefix = "depformer", .dim = c->dep_dim, .num_heads = c->dep_num_heads, .hidden = c->dep_ffn_hidden,
        .num_layers = c->dep_num_layers, .n_steps = c->dep_q, .rope = 0, .max_period = 0, .eps = c->norm_eps,
        .cfg_keys = KEYS_DEPFORMER,
    };
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
    pp_backend *be = c->lm->be;
    pp_tf_state_free(be, &c->lm->temporal, &c->temporal);
    pp_tf_state_free(be, &c->lm->depformer, &c->depformer);
    void *bufs[] = {c->x, c->h, c->dx, c->logits, c->layer_out, c->pos, c->dep_pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->release(be, bufs[i]);
    free(c);
}

int pp_lm_ctx_create(const pp_lm *lm, pp_lm_ctx **out, char *err) {
    *out = NULL;
    const pp_lm_config *cfg = &lm->cfg;
    pp_backend *be = lm->be;
    pp_lm_ctx *c = calloc(1, sizeof *c);
    if (!c) return pp_fail(err, PP_ENOMEM, "lm: out of memory");
    c->lm = lm;
    /* The reference's ring quirk: a query sees capacity − 1 keys (spec §3.4, §4.3). */
    int rc = pp_tf_state_init(be, &lm->temporal, cfg->context, cfg->context - 1, &c->temporal, err);
    if (!rc) rc = pp_tf_state_init(be, &lm->depformer, cfg->dep_q, cfg->dep_q - 1, &c->depformer, err);
    if (!rc) {
        size_t nlog = (size_t)(cfg->text_card > cfg->card ? cfg->text_card : cfg->card);
        c->x = be->ops->alloc(be, (size_t)cfg->dim * sizeof(float));
        c->h = be->ops->alloc(be, (size_t)cfg->dim * sizeof(float));
        c->dx = be->ops->alloc(be, (size_t)cfg->dep_dim * sizeof(float));
        c->logits = be->ops->alloc(be, nlog * sizeof(float));
        c->layer_out = be->ops->alloc(be, (size_t)cfg->num_layers * cfg->dim * sizeof(float));
        c->pos = be->ops->alloc(be, sizeof(int32_t));
        c->dep_pos = be->ops->alloc(be, (size_t)cfg->dep_q * sizeof(int32_t));
        if (!c->x || !c->h || !c->dx || !c->logits || !c->layer_out || !c->pos || !c->dep_pos)
            rc = pp_fail(err, PP_ENOMEM, "lm: out of memory for the conversation state");
    }
    if (rc) {
        pp_lm_ctx_destroy(c);
        return rc;
    }
    int32_t steps[PP_LM_MAX_DEP_Q];
    for (int k = 0; k < cfg->dep_q; k++) steps[k] = k;
    be->ops->upload(be, c->dep_pos, steps, (size_t)cfg->dep_q * sizeof(int32_t));
    *out = c;
    return PP_OK;
}

void pp_lm_embed_tokens(const pp_lm *lm, pp_lm_ctx *c, const int32_t col[17]) {
    pp_backend *be = lm->be;
    for (int k = 1; k <= lm->cfg.n_q; k++) be->ops->embed(be, &lm->emb[k - 1], &col[k], 1, c->x, k > 1);
    be->ops->embed(be, &lm->text_emb, &col[0], 1, c->x, 1);
}

void pp_lm_set_embedding(const pp_lm *lm, pp_lm_ctx *c, const float *emb) {
    lm->be->ops->upload(lm->be, c->x, emb, (size_t)lm->cfg.dim * sizeof(float));
}

void pp_lm_get_embedding(const pp_lm *lm, pp_lm_ctx *c, float *emb) {
    lm->be->ops->download(lm->be, emb, c->x, (size_t)lm->cfg.dim * sizeof(float));
}

void pp_lm_temporal(const pp_lm *lm, pp_lm_ctx *c, int64_t pos, float *layer_out) {
    pp_backend *be = lm->be;
    int32_t p = (int32_t)pos;
    be->ops->upload(be, c->pos, &p, sizeof p);
    pp_tf_forward(be, &lm->temporal, &c->temporal, c->x, c->pos, 0, layer_out ? c->layer_out : NULL);
    be->ops->rmsnorm(be, c->x, lm->out_norm, 1, lm->cfg.dim, lm->cfg.norm_eps, c->h);
    if (layer_out)
        be->ops->download(be, layer_out, c->layer_out, (size_t)lm->cfg.num_layers * lm->cfg.dim * sizeof(float));
}

void pp_lm_text_logits(const pp_lm *lm, pp_lm_ctx *c, float *logits) {
    pp_backend *be = lm->be;
    be->ops->matmul(be, &lm->text_linear, c->h, 1, c->logits);
    be->ops->download(be, logits, c->logits, (size_t)lm->cfg.text_card * sizeof(float));
}

void pp_lm_depformer(const pp_lm *lm, pp_lm_ctx *c, int k, int32_t prev, float *logits) {
    pp_backend *be = lm->be;
    be->ops->matmul(be, &lm->dep_in[k], c->h, 1, c->dx);
    be->ops->embed(be, k == 0 ? &lm->dep_text_emb : &lm->dep_emb[k - 1], &prev, 1, c->dx, 1);
    pp_tf_forward(be, &lm->depformer, &c->depformer, c->dx, c->dep_pos + k, k, NULL);
    be->ops->matmul(be, &lm->linears[k], c->dx, 1, c->logits);
    be->ops->download(be, logits, c->logits, (size_t)lm->cfg.card * sizeof(float));
}
