/* mimi_transformer: see mimi_transformer.h. */
#include "model/mimi_transformer.h"

#include "base/err.h"

#include <stdio.h>
#include <string.h>

#define KEY_LEN 256
#define LN_EPS 1e-5f /* nn.LayerNorm default */

static int load_vec(codec_arena *a, const st_file *f, const char *lp, const char *name, int d, const float **out,
                    char *err) {
    char key[KEY_LEN];
    int64_t shape[1] = {d};
    snprintf(key, sizeof key, "%s%s", lp, name);
    return pp_codec_arena_tensor(a, f, key, 1, shape, out, err);
}

static int load_layer(codec_arena *a, const st_file *f, const char *lp, const mtr_config *c, mtr_layer *l,
                      char *err) {
    const int d = c->d_model;
    static const char *const vec_names[6] = {"norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
                                             "layer_scale_1.scale", "layer_scale_2.scale"};
    const float **vecs[6] = {&l->norm1_w, &l->norm1_b, &l->norm2_w, &l->norm2_b, &l->scale1, &l->scale2};
    int rc = PP_OK;
    for (int i = 0; i < (c->layer_scale ? 6 : 4) && !rc; i++) rc = load_vec(a, f, lp, vec_names[i], d, vecs[i], err);
    if (rc) return rc;
    if (!c->layer_scale) l->scale1 = l->scale2 = NULL;
    static const char *const mat_names[4] = {"self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                             "linear1.weight", "linear2.weight"};
    pp_weight *mats[4] = {&l->in_proj, &l->out_proj, &l->linear1, &l->linear2};
    const int64_t dims[4][2] = {{3 * d, d}, {d, d}, {c->dim_feedforward, d}, {d, c->dim_feedforward}};
    for (int i = 0; i < 4; i++) {
        char key[KEY_LEN];
        snprintf(key, sizeof key, "%s%s", lp, mat_names[i]);
        rc = pp_codec_arena_matrix(a, f, key, dims[i][0], dims[i][1], mats[i], err);
        if (rc) {
            /* Release this layer's matrices uploaded so far; pp_mtr_free handles whole layers. */
            for (int j = 0; j < i && !pp_codec_arena_sizing(a); j++) a->be->ops->weight_release(a->be, mats[j]);
            return rc;
        }
    }
    return PP_OK;
}

int pp_mtr_load(codec_arena *a, const st_file *f, const char *prefix, const mtr_config *cfg, mtr_weights *w,
                char *err) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    if (cfg->num_layers < 0 || cfg->num_layers > MTR_MAX_LAYERS)
        return pp_fail(err, PP_EUNSUPPORTED, "mimi %s: num_layers %d (at most %d)", prefix, cfg->num_layers,
                       MTR_MAX_LAYERS);
    for (int l = 0; l < cfg->num_layers; l++) {
        char lp[KEY_LEN];
        snprintf(lp, sizeof lp, "%s.transformer.layers.%d.", prefix, l);
        int rc = load_layer(a, f, lp, cfg, &w->layers[l], err);
        if (rc) return rc;
        if (!pp_codec_arena_sizing(a)) w->n_uploaded = l + 1;
    }
    return PP_OK;
}

void pp_mtr_free(pp_backend *be, mtr_weights *w) {
    for (int l = 0; l < w->n_uploaded; l++) {
        mtr_layer *ly = &w->layers[l];
        be->ops->weight_release(be, &ly->in_proj);
        be->ops->weight_release(be, &ly->out_proj);
        be->ops->weight_release(be, &ly->linear1);
        be->ops->weight_release(be, &ly->linear2);
    }
    w->n_uploaded = 0;
}

void pp_mtr_state_bind(codec_arena *a, const mtr_weights *w, int t, mtr_state *s) {
    const mtr_config *c = &w->cfg;
    size_t ring = (size_t)c->context * c->d_model, row = (size_t)t * c->d_model;
    for (int l = 0; l < c->num_layers; l++) {
        s->k[l] = pp_codec_arena_take(a, ring);
        s->v[l] = pp_codec_arena_take(a, ring);
    }
    /* int32 positions share the float arena: same size, and only ever accessed as int32. */
    s->pos = (int32_t *)pp_codec_arena_take(a, (size_t)t);
    s->x = pp_codec_arena_take(a, row);
    s->h = pp_codec_arena_take(a, row);
    s->qkv = pp_codec_arena_take(a, 3 * row);
    s->att = pp_codec_arena_take(a, row);
    s->ff = pp_codec_arena_take(a, (size_t)t * c->dim_feedforward);
    s->t = t;
    s->offset = 0;
}

/* x += scale ⊙ y, or x += y without LayerScale. */
static void residual(pp_backend *be, float *x, const float *y, const float *scale, int t, int d) {
    if (scale)
        be->ops->scale_add(be, x, y, scale, t, d);
    else
        be->ops->add(be, x, y, (size_t)t * d);
}

static void layer_step(pp_backend *be, const mtr_config *c, const mtr_layer *l, mtr_state *s, int li) {
    const int t = s->t, d = c->d_model, hd = d / c->num_heads;
    be->ops->layer_norm(be, s->x, l->norm1_w, l->norm1_b, t, d, LN_EPS, s->h);
    be->ops->matmul(be, &l->in_proj, s->h, t, s->qkv);
    /* q and k at once: the k heads follow the q heads in each row */
    be->ops->rope(be, s->qkv, t, 3 * d, 2 * c->num_heads, hd, s->pos, c->max_period);
    /* Every key of the call is in the ring before any query attends (the reference appends
     * the whole call first), and the ring's oldest slot is never visible: query i of the call
     * sees keys from E − context + 1, i.e. a window of context − t + i keys. attn_rows stores
     * query i's own key and value before attending, and later keys are masked anyway. */
    for (int i = 0; i < t; i++) {
        pp_kv_ring ring = {
            .fmt = PP_KV_F32, .capacity = c->context, .window = c->context - t + i, .k = s->k[li], .v = s->v[li]};
        be->ops->attn_rows(be, s->qkv + (size_t)i * 3 * d, 1, c->num_heads, hd, &ring, NULL, 0, s->pos + i,
                           s->att + (size_t)i * d);
    }
    be->ops->matmul(be, &l->out_proj, s->att, t, s->h);
    residual(be, s->x, s->h, l->scale1, t, d);
    be->ops->layer_norm(be, s->x, l->norm2_w, l->norm2_b, t, d, LN_EPS, s->h);
    be->ops->matmul(be, &l->linear1, s->h, t, s->ff);
    be->ops->gelu(be, s->ff, (size_t)t * c->dim_feedforward);
    be->ops->matmul(be, &l->linear2, s->ff, t, s->h);
    residual(be, s->x, s->h, l->scale2, t, d);
}

void pp_mtr_step(pp_backend *be, const mtr_weights *w, mtr_state *s, float *x) {
    const mtr_config *c = &w->cfg;
    int32_t pos[MTR_MAX_STEPS];
    for (int i = 0; i < s->t; i++) pos[i] = (int32_t)(s->offset + i);
    be->ops->upload(be, s->pos, pos, (size_t)s->t * sizeof pos[0]);
    be->ops->transpose(be, x, c->d_model, s->t, s->x);
    for (int l = 0; l < c->num_layers; l++) layer_step(be, c, &w->layers[l], s, l);
    be->ops->transpose(be, s->x, s->t, c->d_model, x);
    s->offset += s->t;
}
