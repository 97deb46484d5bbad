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

void pp_mtr_layout(codec_arena *state, const mtr_weights *w, int t, mtr_layout *out) {
    const mtr_config *c = &w->cfg;
    size_t ring = (size_t)c->context * c->d_model;
    for (int l = 0; l < c->num_layers; l++) {
        out->k[l] = pp_codec_arena_reserve(state, ring);
        out->v[l] = pp_codec_arena_reserve(state, ring);
    }
    /* Descriptors hold pointers: whole floats' worth, and the arena aligns every take. */
    size_t desc = (size_t)c->num_layers * t * sizeof(pp_kv_ring);
    out->rings = pp_codec_arena_reserve(state, (desc + sizeof(float) - 1) / sizeof(float));
    out->t = t;
}

void pp_mtr_state_init(pp_backend *be, const mtr_weights *w, const mtr_layout *lay, float *state) {
    const mtr_config *c = &w->cfg;
    pp_kv_ring desc[MTR_MAX_STEPS];
    /* Query i of a call sees keys from E − context + 1 (E the call's last step): a window of
     * context − t + i keys. */
    for (int l = 0; l < c->num_layers; l++) {
        for (int i = 0; i < lay->t; i++)
            desc[i] = (pp_kv_ring){.fmt = PP_KV_F32,
                                   .capacity = c->context,
                                   .window = c->context - lay->t + i,
                                   .k = state + lay->k[l],
                                   .v = state + lay->v[l]};
        be->ops->upload(be, (char *)(state + lay->rings) + (size_t)l * lay->t * sizeof desc[0], desc,
                        (size_t)lay->t * sizeof desc[0]);
    }
}

void pp_mtr_work_bind(codec_arena *a, const mtr_weights *w, int t, int rows, mtr_work *out) {
    const mtr_config *c = &w->cfg;
    size_t row = (size_t)t * rows * c->d_model;
    /* int64 positions and pointers share the float arena (its takes are aligned): only ever
     * accessed as their type. */
    out->pos = (int64_t *)pp_codec_arena_take(a, (size_t)t * rows * sizeof(int64_t) / sizeof(float));
    out->tables = (const pp_kv_ring **)pp_codec_arena_take(a, (size_t)rows * sizeof(void *) / sizeof(float));
    out->x = pp_codec_arena_take(a, row);
    out->h = pp_codec_arena_take(a, row);
    out->qkv = pp_codec_arena_take(a, 3 * row);
    out->att = pp_codec_arena_take(a, row);
    out->ff = pp_codec_arena_take(a, (size_t)t * rows * c->dim_feedforward);
    out->t = t;
}

void pp_mtr_prepare(pp_backend *be, const mtr_layout *lay, const mtr_work *w, const uint64_t *state,
                    const int64_t *offset, int n, int64_t *pos_host, uint64_t *tables_host) {
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < lay->t; i++) pos_host[i * n + r] = offset[r] + i;
        tables_host[r] = state[r] + lay->rings * sizeof(float);
    }
    be->ops->upload(be, w->pos, pos_host, (size_t)lay->t * n * sizeof *pos_host);
    be->ops->upload(be, (void *)w->tables, tables_host, (size_t)n * sizeof *tables_host);
}

/* x += scale ⊙ y, or x += y without LayerScale. */
static void residual(pp_backend *be, float *x, const float *y, const float *scale, int rows, int d) {
    if (scale)
        be->ops->scale_add(be, x, y, scale, rows, d);
    else
        be->ops->add(be, x, y, (size_t)rows * d);
}

static void layer_step(pp_backend *be, const mtr_config *c, const mtr_layer *l, const mtr_work *w, int n, int li) {
    const int t = w->t, rows = t * n, d = c->d_model, hd = d / c->num_heads;
    be->ops->layer_norm(be, w->x, l->norm1_w, l->norm1_b, rows, d, LN_EPS, w->h);
    be->ops->matmul(be, &l->in_proj, w->h, rows, w->qkv);
    /* Every key of the call is in the ring before any query attends (the reference appends
     * the whole call first), and the ring's oldest slot is never visible: query i's window
     * (its descriptor) ends at it. attn_rows stores query i's own key and value before
     * attending, and later keys are masked anyway. One call per step of the call: its n rows
     * are contiguous in the time-major batch. */
    for (int i = 0; i < t; i++) {
        pp_kv_ring ring = {.fmt = PP_KV_F32, .capacity = c->context, .window = c->context - t + i};
        be->ops->attn_rows(be, w->qkv + (size_t)i * n * 3 * d, n, c->num_heads, hd, c->max_period, &ring, w->tables,
                           li * t + i, w->pos + i * n, w->att + (size_t)i * n * d);
    }
    be->ops->matmul(be, &l->out_proj, w->att, rows, w->h);
    residual(be, w->x, w->h, l->scale1, rows, d);
    be->ops->layer_norm(be, w->x, l->norm2_w, l->norm2_b, rows, d, LN_EPS, w->h);
    be->ops->matmul(be, &l->linear1, w->h, rows, w->ff);
    be->ops->gelu(be, w->ff, (size_t)rows * c->dim_feedforward);
    be->ops->matmul(be, &l->linear2, w->ff, rows, w->h);
    residual(be, w->x, w->h, l->scale2, rows, d);
}

void pp_mtr_step(pp_backend *be, const mtr_weights *w, const mtr_work *work, int n, float *x) {
    const mtr_config *c = &w->cfg;
    /* [n][d][t] -> [t][n][d] and back ([t][n·d] -> [n·d][t]). */
    be->ops->transpose(be, x, n, c->d_model, work->t, work->x);
    for (int l = 0; l < c->num_layers; l++) layer_step(be, c, &w->layers[l], work, n, l);
    be->ops->transpose(be, work->x, 1, work->t, n * c->d_model, x);
}
