/* transformer: see transformer.h. */
#include "model/transformer.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pp_tf_quant_free(pp_tf_quant *q) {
    for (size_t i = 0; i < q->n_held; i++) pp_qtensor_free(&q->held[i]);
    free(q->held);
    q->held = NULL;
    q->n_held = q->cap_held = 0;
}

/* The dense host weight quantized, uploaded, and its source pages let go. */
static int upload_quantized(pp_backend *be, const st_file *f, pp_tf_quant *q, const pp_weight *host, pp_weight *out,
                            char *err) {
    if (host->fmt > PP_WF_BF16)
        return pp_fail(err, PP_EINVAL,
                       "%s: --quantize %s needs a BF16, F16 or F32 checkpoint, but tensor '%s' is "
                       "stored as %s (run the file as it is, without --quantize)",
                       pp_st_path(f), pp_wformat_name(q->opts.fmt), host->name, pp_wformat_name(host->fmt));
    const st_tensor *src = pp_st_find(f, host->name);
    if (q->n_held == q->cap_held) {
        size_t cap = q->cap_held ? 2 * q->cap_held : 64;
        pp_qtensor *h = realloc(q->held, cap * sizeof *h);
        if (!h) return pp_fail(err, PP_ENOMEM, "%s: out of memory quantizing '%s'", pp_st_path(f), host->name);
        q->held = h;
        q->cap_held = cap;
    }
    pp_qtensor *qt = &q->held[q->n_held];
    int rc = pp_quantize_tensor(f, src, q->opts.fmt, q->opts.group, qt, err);
    if (rc) return rc;
    pp_st_release(f, src);
    rc = be->ops->weight_upload(be, &qt->w, out, err);
    q->tensors++;
    q->source_bytes += src->nbytes;
    q->quantized_bytes += pp_weight_bytes(&qt->w);
    if (!rc && out->data == qt->w.data)
        q->n_held++; /* the backend reads the buffers as they are */
    else
        pp_qtensor_free(qt);
    return rc;
}

int pp_tf_load_weight(pp_backend *be, const st_file *f, pp_tf_quant *q, const pp_lm_tensor *t, const char *name,
                      int64_t rows, int64_t cols, pp_weight *out, char *err) {
    pp_weight host;
    memset(out, 0, sizeof *out);
    int rc = pp_weight_load(f, name, rows, cols, &host, err);
    if (rc == PP_EINVAL || rc == PP_EFORMAT || rc == PP_ENOTFOUND) {
        /* The expected shape comes from config.json: say which keys set it. */
        char inner[PP_ERR_LEN];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return pp_fail(err, rc, "%s (the shape follows config keys: %s)", inner, t->cfg_keys);
    }
    if (rc) return rc;
    if (q && pp_lm_quantizes(&q->opts, name, 2)) return upload_quantized(be, f, q, &host, out, err);
    return be->ops->weight_upload(be, &host, out, err);
}

int pp_tf_load_alpha(pp_backend *be, const st_file *f, const char *name, int d, const char *cfg_keys, float **out,
                     char *err) {
    *out = NULL;
    const st_tensor *t = pp_st_find(f, name);
    if (!t)
        return pp_fail(err, PP_ENOTFOUND, "%s: tensor '%s' is missing (expected from config keys: %s)", pp_st_path(f),
                       name, cfg_keys);
    if (t->numel != d)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s' has %lld values but config keys %s give %d", pp_st_path(f),
                       name, (long long)t->numel, cfg_keys, d);
    float *host = malloc((size_t)d * sizeof *host);
    float *dev = be->ops->alloc(be, (size_t)d * sizeof *dev);
    int rc = host && dev ? pp_st_load_f32(f, t, 0, d, host, err) : pp_fail(err, PP_ENOMEM, "%s: out of memory", name);
    if (!rc) {
        be->ops->upload(be, dev, host, (size_t)d * sizeof *host);
        *out = dev;
    } else if (dev) {
        be->ops->release(be, dev);
    }
    free(host);
    return rc;
}

static void release_weight(pp_backend *be, pp_weight *w) {
    if (w->data) be->ops->weight_release(be, w);
}

int pp_tf_init(const pp_tf_shape *shape, pp_tf *tf, char *err) {
    memset(tf, 0, sizeof *tf);
    tf->shape = *shape;
    size_t n = (size_t)shape->n_steps;
    tf->layers = calloc((size_t)shape->num_layers, sizeof *tf->layers);
    int ok = tf->layers != NULL;
    for (int l = 0; ok && l < shape->num_layers; l++) {
        pp_tf_layer *L = &tf->layers[l];
        L->ffn_in = calloc(n, sizeof *L->ffn_in);
        L->ffn_out = calloc(n, sizeof *L->ffn_out);
        L->steps = calloc(n, sizeof *L->steps);
        ok = L->ffn_in && L->ffn_out && L->steps;
    }
    return ok ? PP_OK : pp_fail(err, PP_ENOMEM, "%s: out of memory", shape->prefix);
}

/* moshi.cpp's per-step projections (lm_catalog.h; the temporal transformer's is step 0) all load
 * at the catalogue's in_proj entry t: in_projs.{s} [3 d, d] and out_projs.{s} [d, d] for every step s. */
static int load_step_projections(pp_backend *be, const st_file *f, pp_tf_quant *q, const pp_tf_shape *s,
                                 const pp_lm_tensor *t, pp_tf_layer *L, char *err) {
    char name[256];
    int64_t d = s->dim;
    pp_lm_tensor out = *t;
    out.part = PP_LM_ATTN_OUT;
    if (!(L->step_proj = calloc(2 * (size_t)s->n_steps, sizeof *L->step_proj)))
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", s->prefix);
    for (int st = 0; st < s->n_steps; st++) {
        pp_lm_step_projection_name(t, st, name, sizeof name);
        int rc = pp_tf_load_weight(be, f, q, t, name, 3 * d, d, &L->step_proj[2 * st], err);
        if (rc) return rc;
        pp_lm_step_projection_name(&out, st, name, sizeof name);
        if ((rc = pp_tf_load_weight(be, f, q, &out, name, d, d, &L->step_proj[2 * st + 1], err))) return rc;
    }
    return PP_OK;
}

static int has_step_projections(const st_file *f, const pp_lm_tensor *t) {
    char name[256];
    pp_lm_step_projection_name(t, 0, name, sizeof name);
    return pp_weight_exists(f, name);
}

int pp_tf_load_tensor(pp_backend *be, const st_file *f, pp_tf_quant *q, pp_tf *tf, const pp_lm_tensor *t, char *err) {
    const pp_tf_shape *s = &tf->shape;
    if (t->layer < 0 || t->layer >= s->num_layers || (t->index >= s->n_steps))
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s' is outside the %d layers", s->prefix, t->name, s->num_layers);
    pp_tf_layer *L = &tf->layers[t->layer];
    int step = t->index < 0 ? 0 : t->index;
    switch (t->part) {
    case PP_LM_NORM1: return pp_tf_load_alpha(be, f, t->name, (int)t->cols, t->cfg_keys, &L->norm1, err);
    case PP_LM_NORM2: return pp_tf_load_alpha(be, f, t->name, (int)t->cols, t->cfg_keys, &L->norm2, err);
    case PP_LM_ATTN_IN:
        if (has_step_projections(f, t)) return load_step_projections(be, f, q, s, t, L, err);
        return pp_tf_load_weight(be, f, q, t, t->name, t->rows, t->cols, &L->in_proj, err);
    case PP_LM_ATTN_OUT:
        if (L->step_proj) return PP_OK; /* loaded with the step's in_proj */
        return pp_tf_load_weight(be, f, q, t, t->name, t->rows, t->cols, &L->out_proj, err);
    case PP_LM_FFN_IN: return pp_tf_load_weight(be, f, q, t, t->name, t->rows, t->cols, &L->ffn_in[step], err);
    case PP_LM_FFN_OUT: return pp_tf_load_weight(be, f, q, t, t->name, t->rows, t->cols, &L->ffn_out[step], err);
    default: return pp_fail(err, PP_EINVAL, "%s: tensor '%s' is not a layer's", s->prefix, t->name);
    }
}

void pp_tf_link(pp_tf *tf, int latency_bound) {
    int64_t d = tf->shape.dim;
    for (int l = 0; l < tf->shape.num_layers; l++) {
        pp_tf_layer *L = &tf->layers[l];
        for (int st = 0; st < tf->shape.n_steps; st++) {
            L->steps[st].qkv = L->step_proj ? L->step_proj[2 * st] : pp_weight_rows(&L->in_proj, st * 3 * d, 3 * d);
            L->steps[st].out = L->step_proj ? L->step_proj[2 * st + 1] : pp_weight_rows(&L->out_proj, st * d, d);
            L->steps[st].ffn_in = L->ffn_in[st];
            L->steps[st].ffn_out = L->ffn_out[st];
            pp_weight *w[] = {&L->steps[st].qkv, &L->steps[st].out, &L->steps[st].ffn_in, &L->steps[st].ffn_out};
            for (int i = 0; i < 4; i++) w[i]->latency_bound = latency_bound;
        }
    }
}

void pp_tf_free(pp_backend *be, pp_tf *tf) {
    if (!tf->layers) return;
    for (int l = 0; l < tf->shape.num_layers; l++) {
        pp_tf_layer *L = &tf->layers[l];
        if (L->norm1) be->ops->release(be, L->norm1);
        if (L->norm2) be->ops->release(be, L->norm2);
        release_weight(be, &L->in_proj);
        release_weight(be, &L->out_proj);
        for (int s = 0; L->step_proj && s < 2 * tf->shape.n_steps; s++) release_weight(be, &L->step_proj[s]);
        free(L->step_proj);
        for (int s = 0; L->ffn_in && L->ffn_out && s < tf->shape.n_steps; s++) {
            release_weight(be, &L->ffn_in[s]);
            release_weight(be, &L->ffn_out[s]);
        }
        free(L->ffn_in);
        free(L->ffn_out);
        free(L->steps);
    }
    free(tf->layers);
    memset(tf, 0, sizeof *tf);
}

size_t pp_tf_cache_bytes(const pp_tf_shape *s, int capacity, pp_kv_format fmt) {
    size_t per_layer = 2 * (size_t)capacity * s->dim * pp_kv_elem_bytes(fmt);
    if (fmt == PP_KV_INT8) per_layer += 2 * (size_t)capacity * s->num_heads * sizeof(float);
    return per_layer * (size_t)s->num_layers;
}

int pp_tf_cache_init(pp_backend *be, const pp_tf *tf, int capacity, int window, pp_kv_format fmt, pp_tf_cache *c,
                     char *err) {
    const pp_tf_shape *s = &tf->shape;
    memset(c, 0, sizeof *c);
    if (fmt != PP_KV_F32 && fmt != PP_KV_BF16 && fmt != PP_KV_INT8)
        return pp_fail(err, PP_EINVAL, "%s: unknown KV cache format %d", s->prefix, (int)fmt);
    c->rings = calloc((size_t)s->num_layers, sizeof *c->rings);
    if (!c->rings) return pp_fail(err, PP_ENOMEM, "%s: out of memory", s->prefix);
    c->num_layers = s->num_layers;
    size_t bytes = (size_t)capacity * s->dim * pp_kv_elem_bytes(fmt);
    size_t sbytes = (size_t)capacity * s->num_heads * sizeof(float);
    int ok = 1;
    for (int l = 0; ok && l < s->num_layers; l++) {
        pp_kv_ring *r = &c->rings[l];
        *r = (pp_kv_ring){.fmt = fmt, .capacity = capacity, .window = window};
        r->k = be->ops->alloc(be, bytes);
        r->v = be->ops->alloc(be, bytes);
        ok = r->k && r->v;
        if (ok && fmt == PP_KV_INT8) {
            r->kscale = be->ops->alloc(be, sbytes);
            r->vscale = be->ops->alloc(be, sbytes);
            ok = r->kscale && r->vscale;
        }
    }
    if (ok && (c->table = be->ops->alloc(be, (size_t)s->num_layers * sizeof *c->table)))
        be->ops->upload(be, c->table, c->rings, (size_t)s->num_layers * sizeof *c->table);
    if (!ok || !c->table) {
        pp_tf_cache_free(be, c);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory for the KV cache (%d slots)", s->prefix, capacity);
    }
    return PP_OK;
}

void pp_tf_cache_free(pp_backend *be, pp_tf_cache *c) {
    for (int l = 0; c->rings && l < c->num_layers; l++) {
        void *bufs[] = {c->rings[l].k, c->rings[l].v, c->rings[l].kscale, c->rings[l].vscale};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) be->ops->release(be, bufs[i]);
    }
    if (c->table) be->ops->release(be, c->table);
    free(c->rings);
    memset(c, 0, sizeof *c);
}

/* Walks the first `slots` slots of each ring's buffers against consecutive host bytes. */
static void cache_transfer(pp_backend *be, const pp_tf *tf, const pp_tf_cache *c, int slots, uint8_t *host,
                           int to_host) {
    const pp_tf_shape *s = &tf->shape;
    for (int l = 0; l < c->num_layers; l++) {
        const pp_kv_ring *r = &c->rings[l];
        size_t kv = (size_t)slots * s->dim * pp_kv_elem_bytes(r->fmt),
               sc = (size_t)slots * s->num_heads * sizeof(float);
        void *bufs[] = {r->k, r->v, r->kscale, r->vscale};
        size_t sizes[] = {kv, kv, sc, sc};
        for (int i = 0; i < (r->fmt == PP_KV_INT8 ? 4 : 2); i++) {
            if (to_host) be->ops->download(be, host, bufs[i], sizes[i]);
            else be->ops->upload(be, bufs[i], host, sizes[i]);
            host += sizes[i];
        }
    }
}

void pp_tf_cache_export(pp_backend *be, const pp_tf *tf, const pp_tf_cache *c, int slots, void *host) {
    cache_transfer(be, tf, c, slots, host, 1);
}

void pp_tf_cache_import(pp_backend *be, const pp_tf *tf, pp_tf_cache *c, int slots, const void *host) {
    cache_transfer(be, tf, c, slots, (uint8_t *)host, 0);
}

size_t pp_tf_scratch_bytes(const pp_tf_shape *s, int rows) {
    /* a row's h and att [dim], qkv [3 dim] and u [2 hidden], as allocated below */
    return (size_t)rows * (5 * (size_t)s->dim + 2 * (size_t)s->hidden) * sizeof(float);
}

int pp_tf_scratch_init(pp_backend *be, const pp_tf *tf, int rows, pp_tf_scratch *sc, char *err) {
    const pp_tf_shape *s = &tf->shape;
    size_t d = (size_t)s->dim, hid = (size_t)s->hidden, n = (size_t)rows;
    memset(sc, 0, sizeof *sc);
    sc->rows = rows;
    sc->h = be->ops->alloc(be, n * d * sizeof(float));
    sc->qkv = be->ops->alloc(be, n * 3 * d * sizeof(float));
    sc->att = be->ops->alloc(be, n * d * sizeof(float));
    sc->u = be->ops->alloc(be, n * 2 * hid * sizeof(float));
    if (!sc->h || !sc->qkv || !sc->att || !sc->u) {
        pp_tf_scratch_free(be, sc);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory for the activations of %d rows", s->prefix, rows);
    }
    return PP_OK;
}

void pp_tf_scratch_free(pp_backend *be, pp_tf_scratch *sc) {
    float *bufs[] = {sc->h, sc->qkv, sc->att, sc->u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->release(be, bufs[i]);
    memset(sc, 0, sizeof *sc);
}

/* The layers over n rows of x. Rows attend as separate conversations (caches, tables: one call a
 * layer) or, with `prefill`, as the consecutive positions from `first` of one conversation
 * (caches[0]): one call a layer when their stores fit its rings beside every row's window, else a
 * call a row in order. */
static void layers(pp_backend *be, const pp_tf *tf, pp_tf_scratch *sc, pp_tf_cache *const *caches,
                   const pp_kv_ring *const *tables, int prefill, int64_t first, int n, float *x, const int64_t *pos,
                   int step, float *layer_out) {
    const pp_backend_ops *op = be->ops;
    const pp_tf_shape *s = &tf->shape;
    int d = s->dim, hd = s->dim / s->num_heads;
    const int row_by_row = prefill && !pp_kv_ring_takes_rows(&caches[0]->rings[0], first, n);
    const float rope = s->rope ? s->max_period : 0.0f;
    /* Each normalization runs with the product after it (norm_matmul), each residual add with
     * the product before it (matmul_add, matmul_silu_add). */
    for (int l = 0; l < s->num_layers; l++) {
        const pp_tf_layer *L = &tf->layers[l];
        const pp_tf_step *w = &L->steps[step];
        const pp_kv_ring *ring = &caches[0]->rings[l];
        op->norm_matmul(be, x, L->norm1, n, d, s->eps, sc->h, &w->qkv, sc->qkv);
        if (row_by_row)
            for (int r = 0; r < n; r++)
                op->attn_rows(be, sc->qkv + (size_t)r * 3 * d, 1, s->num_heads, hd, rope, ring, NULL, l, pos + r,
                              sc->att + (size_t)r * d);
        else
            op->attn_rows(be, sc->qkv, n, s->num_heads, hd, rope, ring, prefill ? NULL : tables, l, pos, sc->att);
        op->matmul_add(be, &w->out, sc->att, n, x);
        op->norm_matmul(be, x, L->norm2, n, d, s->eps, sc->h, &w->ffn_in, sc->u);
        op->matmul_silu_add(be, &w->ffn_out, sc->u, n, x);
        for (int i = 0; layer_out && i < n; i++)
            op->copy(be, layer_out + ((size_t)i * s->num_layers + l) * d, x + (size_t)i * d, (size_t)d * sizeof(float));
    }
}

void pp_tf_forward(pp_backend *be, const pp_tf *tf, pp_tf_scratch *sc, pp_tf_cache *const *caches,
                   const pp_kv_ring *const *tables, int n, float *x, const int64_t *pos, int step, float *layer_out) {
    layers(be, tf, sc, caches, tables, 0, 0, n, x, pos, step, layer_out);
}

void pp_tf_prefill(pp_backend *be, const pp_tf *tf, pp_tf_scratch *sc, pp_tf_cache *cache, int64_t first, int n,
                   float *x, const int64_t *pos) {
    pp_tf_cache *const caches[1] = {cache};
    layers(be, tf, sc, caches, NULL, 1, first, n, x, pos, 0, NULL);
}

void pp_tf_weight_stats(const pp_tf *tf, pp_weight_stats *stats) {
    for (int l = 0; l < tf->shape.num_layers; l++) {
        const pp_tf_layer *L = &tf->layers[l];
        if (!L->step_proj) {
            pp_weight_stats_add(stats, &L->in_proj);
            pp_weight_stats_add(stats, &L->out_proj);
        }
        for (int s = 0; L->step_proj && s < 2 * tf->shape.n_steps; s++) pp_weight_stats_add(stats, &L->step_proj[s]);
        for (int st = 0; st < tf->shape.n_steps; st++) {
            pp_weight_stats_add(stats, &L->ffn_in[st]);
            pp_weight_stats_add(stats, &L->ffn_out[st]);
        }
    }
}
