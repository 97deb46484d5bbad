#include "io/onnx_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"
#include "io/half.h"

#define MAX_HOPS 8

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int og_index(og_graph *g, const char *path, char *err) {
    size_t n = 0, nodes = pp_onnx_node_count(g->m);
    for (size_t i = 0; i < nodes; i++) n += (size_t)pp_onnx_node_at(g->m, i)->n_out;
    /* one array of (name, node) pairs sorted by name: names first so bsearch can compare them */
    struct pair {
        const char *name;
        size_t node;
    } *pairs = calloc(n ? n : 1, sizeof *pairs);
    g->prod_names = calloc(n ? n : 1, sizeof *g->prod_names);
    g->prod_nodes = calloc(n ? n : 1, sizeof *g->prod_nodes);
    if (!pairs || !g->prod_names || !g->prod_nodes) {
        free(pairs);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < nodes; i++) {
        const pp_onnx_node *nd = pp_onnx_node_at(g->m, i);
        for (int k = 0; k < nd->n_out; k++)
            if (*nd->out[k]) pairs[g->n_prod++] = (struct pair){nd->out[k], i};
    }
    qsort(pairs, g->n_prod, sizeof *pairs, cmp_str);
    for (size_t i = 0; i < g->n_prod; i++) g->prod_names[i] = pairs[i].name, g->prod_nodes[i] = pairs[i].node;
    free(pairs);
    return 0;
}

int og_open(og_graph *g, const char *dir, const char *file, char *err) {
    memset(g, 0, sizeof *g);
    g->file = file;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int rc = pp_onnx_open(path, &g->m, err);
    return rc ? rc : og_index(g, path, err);
}

int og_parse(og_graph *g, const void *buf, size_t len, const char *file, char *err) {
    memset(g, 0, sizeof *g);
    g->file = file;
    int rc = pp_onnx_parse(buf, len, file, &g->m, err);
    return rc ? rc : og_index(g, file, err);
}

void og_close(og_graph *g) {
    pp_onnx_close(g->m);
    free(g->prod_names);
    free(g->prod_nodes);
}

const pp_onnx_node *og_producer(const og_graph *g, const char *name) {
    if (!name || !*name) return NULL;
    const char **hit = bsearch(&name, g->prod_names, g->n_prod, sizeof *g->prod_names, cmp_str);
    return hit ? pp_onnx_node_at(g->m, g->prod_nodes[hit - g->prod_names]) : NULL;
}

const pp_onnx_node *og_consumer(const og_graph *g, const char *name, const char *op) {
    for (size_t i = 0; i < pp_onnx_node_count(g->m); i++) {
        const pp_onnx_node *n = pp_onnx_node_at(g->m, i);
        if (strcmp(n->op_type, op)) continue;
        for (int k = 0; k < n->n_in; k++)
            if (!strcmp(n->in[k], name)) return n;
    }
    return NULL;
}

int og_is_op(const pp_onnx_node *n, const char *op) { return n && !strcmp(n->op_type, op); }

int64_t og_attr_i(const pp_onnx_node *n, const char *name, int64_t dflt) {
    const pp_onnx_attr *a = pp_onnx_attr_find(n, name);
    return a && a->has_i ? a->i : dflt;
}

/* The weight behind value NAME: a constant, through Casts, a Gather of one step's slice from a
 * stack (axis 0, a computed index) and DequantizeLinear. 0 when NAME is not a weight. */
int og_resolve(const og_graph *g, const char *name, og_wref *w, int hops) {
    memset(w, 0, sizeof *w);
    if (hops > MAX_HOPS) return 0;
    if ((w->t = pp_onnx_constant(g->m, name))) return 1;
    const pp_onnx_node *p = og_producer(g, name);
    if (!p) return 0;
    if ((og_is_op(p, "Cast") || og_is_op(p, "Identity")) && p->n_in >= 1) return og_resolve(g, p->in[0], w, hops + 1);
    if (og_is_op(p, "Gather") && p->n_in >= 2 && og_attr_i(p, "axis", 0) == 0 && !pp_onnx_constant(g->m, p->in[1])) {
        if (!og_resolve(g, p->in[0], w, hops + 1) || w->stacked || w->scale || w->t->ndim < 2) return 0;
        w->stacked = 1;
        return 1;
    }
    if (og_is_op(p, "DequantizeLinear") && p->n_in >= 2) {
        og_wref s, z = {0};
        if (!og_resolve(g, p->in[0], w, hops + 1) || w->scale || !og_resolve(g, p->in[1], &s, hops + 1)) return 0;
        if (p->n_in >= 3 && *p->in[2] && !og_resolve(g, p->in[2], &z, hops + 1)) return 0;
        w->scale = s.t, w->zero = z.t, w->dq = p;
        return 1;
    }
    return 0;
}

int og_is_input(const og_graph *g, const char *name) {
    for (size_t i = 0; i < pp_onnx_input_count(g->m); i++)
        if (!strcmp(pp_onnx_input_at(g->m, i)->name, name)) return 1;
    return 0;
}

int og_const_int(const og_graph *g, const char *name, int64_t *v) {
    const pp_onnx_tensor *t = pp_onnx_constant(g->m, name);
    if (!t || !t->data || t->numel != 1) return 0;
    if (t->dtype == PP_ONNX_INT64) {
        memcpy(v, t->data, 8);
        return 1;
    }
    int32_t x;
    if (t->dtype != PP_ONNX_INT32) return 0;
    memcpy(&x, t->data, 4);
    *v = x;
    return 1;
}

int og_is_float(int dt) { return dt == PP_ONNX_FLOAT || dt == PP_ONNX_FLOAT16 || dt == PP_ONNX_BFLOAT16; }
const pp_onnx_tensor *og_float_const(const og_graph *g, const char *name) {
    og_wref r;
    if (!og_resolve(g, name, &r, 0) || r.stacked || r.scale || !og_is_float(r.t->dtype)) return NULL;
    return r.t;
}

int og_is_width_vector(const pp_onnx_tensor *t, int64_t dim) {
    return t->ndim >= 1 && t->numel == dim && t->dims[t->ndim - 1] == dim;
}

int og_is_byte(int dt) { return dt == PP_ONNX_INT8 || dt == PP_ONNX_UINT8; }

int og_bad_node(const og_graph *g, const pp_onnx_node *n, char *err, const char *what) {
    return pp_fail(err, PP_EFORMAT, "%s: node '%s' (%s): %s", g->file, n->name, n->op_type, what);
}

int og_readable(const og_graph *g, const pp_onnx_node *n, const pp_onnx_tensor *t, char *err) {
    if (!t->data || !pp_onnx_dtype_size(t->dtype))
        return pp_fail(err, PP_EUNSUPPORTED,
                       "%s: node '%s' reads tensor '%s' of type %d stored in a form this reader does not take "
                       "(raw_data or external data of float, float16, bfloat16, int8 or uint8)",
                       g->file, n->name, t->name, t->dtype);
    return 0;
}

/* ---- planning ---- */

og_tensor *og_plan(onnx_bundle *b, const char *name, st_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                   fill_kind kind, char *err) {
    if (b->n_outs == b->cap_outs) {
        size_t cap = b->cap_outs ? b->cap_outs * 2 : 256;
        og_tensor *o = realloc(b->outs, cap * sizeof *o);
        if (!o) return pp_fail(err, PP_ENOMEM, "bundle: out of memory"), NULL;
        b->outs = o, b->cap_outs = cap;
    }
    og_tensor *o = &b->outs[b->n_outs++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dt, o->ndim = ndim, o->kind = kind;
    o->shape[0] = d0, o->shape[1] = d1, o->shape[2] = d2;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= o->shape[i];
    o->nbytes = (size_t)numel * (size_t)(pp_st_dtype_bits(dt) / 8);
    return o;
}

st_dtype og_st_dtype(int onnx_dtype) {
    return onnx_dtype == PP_ONNX_FLOAT16 ? ST_F16 : onnx_dtype == PP_ONNX_BFLOAT16 ? ST_BF16 : ST_F32;
}
int og_plan_view(onnx_bundle *b, const char *name, const pp_onnx_tensor *t, size_t offset, int ndim, int64_t d0,
                 int64_t d1, int64_t d2, char *err) {
    og_tensor *o = og_plan(b, name, og_st_dtype(t->dtype), ndim, d0, d1, d2, F_COPY, err);
    if (!o) return PP_ENOMEM;
    o->src = t->data + offset;
    return 0;
}

/* ---- filling ---- */

static float scale_at(const og_tensor *o, int64_t i) {
    const uint8_t *p = o->src + (o->bcast ? 0 : i * (o->src_dtype == PP_ONNX_FLOAT16 ? 2 : 4));
    if (o->src_dtype == PP_ONNX_FLOAT16) return pp_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* [steps][K][N] elements of es bytes into [steps][N][K], in 32 x 32 tiles that keep both sides in
 * cache; flip: uint8 codes to int8 (minus 128). Inlined per element size, so every copy is a plain
 * load and store. */
static inline __attribute__((always_inline)) void transpose(const og_tensor *o, uint8_t *dst, size_t es, int flip) {
    const int64_t T = 32;
    for (int64_t s = 0; s < o->steps; s++) {
        const uint8_t *src = o->src + (size_t)(s * o->K * o->N) * es;
        uint8_t *d = dst + (size_t)(s * o->N * o->K) * es;
        for (int64_t k0 = 0; k0 < o->K; k0 += T)
            for (int64_t n0 = 0; n0 < o->N; n0 += T)
                for (int64_t n = n0; n < n0 + T && n < o->N; n++)
                    for (int64_t k = k0; k < k0 + T && k < o->K; k++) { /* written in order, read from the tile */
                        uint8_t *to = d + (size_t)(n * o->K + k) * es;
                        memcpy(to, src + (size_t)(k * o->N + n) * es, es);
                        if (flip) *to ^= 0x80;
                    }
    }
}

static void fill(const og_tensor *o, uint8_t *dst) {
    switch (o->kind) {
    case F_COPY: memcpy(dst, o->src, o->nbytes); return;
    case F_TRANSPOSE:
        switch (pp_onnx_dtype_size(o->src_dtype)) {
        case 1: o->flip ? transpose(o, dst, 1, 1) : transpose(o, dst, 1, 0); return;
        case 2: transpose(o, dst, 2, 0); return;
        default: transpose(o, dst, 4, 0); return;
        }
    case F_NBITS_CODES: {
        /* blocks are stored row after row, so the source is read in order */
        const int64_t blocks = o->N * (o->K / o->block), blob = (int64_t)o->block * o->bits / 8;
        const uint8_t *src = o->src;
        for (int64_t b = 0; b < blocks; b++, src += blob, dst += o->block) {
            if (o->bits == 8) {
                for (int j = 0; j < o->block; j++) dst[j] = src[j] ^ 0x80; /* q − 128 as int8 */
            } else {
                for (int j = 0; j < o->block; j += 2) {
                    dst[j] = (uint8_t)(int8_t)((src[j >> 1] & 15) - 8);
                    dst[j + 1] = (uint8_t)(int8_t)((src[j >> 1] >> 4) - 8);
                }
            }
        }
        return;
    }
    case F_SCALES127:
        for (int64_t i = 0; i < o->count; i++) {
            float v = 127.0f * scale_at(o, i);
            memcpy(dst + 4 * i, &v, 4);
        }
        return;
    case F_NBITS_ZEROS: {
        int64_t nb = o->K / o->block, mid = 1 << (o->bits - 1), per_row = o->bits == 8 ? nb : (nb + 1) / 2;
        for (int64_t n = 0; n < o->N; n++)
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *row = o->src + n * per_row;
                int zp = o->bits == 8 ? row[b] : (row[b >> 1] >> (4 * (b & 1))) & 15;
                dst[n * nb + b] = (uint8_t)(int8_t)(zp - mid);
            }
        return;
    }
    case F_ONES:
        for (int64_t i = 0; i < o->count; i++) memcpy(dst + 4 * i, &(float){1.0f}, 4);
        return;
    case F_ZEROS:
        for (int64_t i = 0; i < o->count; i++) {
            int v = o->src ? (o->flip ? o->src[o->bcast ? 0 : i] - 128 : (int8_t)o->src[o->bcast ? 0 : i]) : -128;
            dst[i] = (uint8_t)(int8_t)v;
        }
        return;
    }
}

/* Source bytes of the large conversions (the small ones are not worth a system call). */
static size_t src_bytes(const og_tensor *o) {
    switch (o->kind) {
    case F_COPY: return o->nbytes;
    case F_TRANSPOSE: return (size_t)(o->steps * o->K * o->N) * (size_t)pp_onnx_dtype_size(o->src_dtype);
    case F_NBITS_CODES: return (size_t)(o->N * o->K) * (size_t)o->bits / 8;
    default: return 0;
    }
}

/* The mapped source pages a conversion read go back to the kernel (read again from the file if a
 * later tensor shares them), so loading holds the converted weights and little of the file. */
static void release_source(const og_tensor *o) { pp_file_release_pages(o->src, src_bytes(o)); }

void pp_onnx_bundle_free_data(onnx_bundle *b) {
    free(b->buf);
    b->buf = NULL;
}

void pp_onnx_bundle_free(onnx_bundle *b) {
    if (!b) return;
    free(b->outs);
    free(b->buf);
    free(b->tensors);
    free(b);
}

void og_layout(onnx_bundle *b) {
    b->size = 0;
    for (size_t i = 0; i < b->n_outs; i++) {
        b->outs[i].off = b->size;
        b->size += (b->outs[i].nbytes + 63) & ~(size_t)63;
    }
}

int og_materialize(onnx_bundle *b, int release, const char *label, st_tensor **tensors, size_t *count,
                   const void **base, size_t *size, onnx_bundle **out_bundle, char *err) {
    og_layout(b);
    int rc = 0;
    b->buf = malloc(b->size ? b->size : 1);
    b->tensors = calloc(b->n_outs ? b->n_outs : 1, sizeof *b->tensors);
    if (!b->buf || !b->tensors)
        rc = pp_fail(err, PP_ENOMEM, "%s: out of memory for %zu bytes of converted weights", label, b->size);
    for (size_t i = 0; !rc && i < b->n_outs; i++) {
        const og_tensor *o = &b->outs[i];
        fill(o, b->buf + o->off);
        if (release) release_source(o);
        st_tensor *s = &b->tensors[i];
        s->name = o->name, s->dtype = o->dtype, s->ndim = o->ndim, s->numel = 1;
        for (int k = 0; k < o->ndim; k++) s->shape[k] = o->shape[k], s->numel *= o->shape[k];
        s->data = b->buf + o->off, s->nbytes = o->nbytes;
    }
    if (rc) {
        pp_onnx_bundle_free(b);
        return rc;
    }
    *tensors = b->tensors, *count = b->n_outs, *base = b->buf, *size = b->size;
    b->tensors = NULL;
    *out_bundle = b;
    return 0;
}

int og_convert(int rc, og_graph *first, og_graph *second, og_plan_fn plan, const void *ctx, int release,
               const char *label, st_tensor **tensors, size_t *count, const void **base, size_t *size,
               onnx_bundle **out_bundle, char *err) {
    *out_bundle = NULL;
    onnx_bundle *b = NULL;
    if (!rc && !(b = calloc(1, sizeof *b))) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    if (!rc) rc = plan(b, first, second, ctx, err);
    if (rc)
        pp_onnx_bundle_free(b);
    else
        rc = og_materialize(b, release, label, tensors, count, base, size, out_bundle, err);
    og_close(first);
    og_close(second);
    return rc;
}
