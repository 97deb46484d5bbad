#include "io/onnx_bundle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "io/onnx_graph.h"
#include "io/weight_layout.h"

typedef enum { LIN_DENSE_KN, LIN_DENSE_NK, LIN_INT8_COLUMNS, LIN_NBITS } lin_kind;

typedef struct linear {
    const pp_onnx_node *node;
    lin_kind kind;
    og_wref w;
    int64_t steps, K, N;
    int bits, block; /* MatMulNBits */
} linear;

/* Whether value NAME is computed from a ReduceMean within a few nodes: the RMS norm's scale. */
static int from_reduce_mean(const og_graph *g, const char *name, int hops) {
    const pp_onnx_node *p = og_producer(g, name);
    if (!p || hops > 4) return 0;
    if (og_is_op(p, "ReduceMean")) return 1;
    for (int k = 0; k < p->n_in; k++)
        if (from_reduce_mean(g, p->in[k], hops + 1)) return 1;
    return 0;
}

/* The graph input an index value comes from (following each node's first input), or NULL. */
static const char *index_source(const og_graph *g, const char *name) {
    for (int hops = 0; hops < 16; hops++) {
        if (og_is_input(g, name)) return name;
        const pp_onnx_node *p = og_producer(g, name);
        if (!p || p->n_in < 1) return NULL;
        name = p->in[0];
    }
    return NULL;
}

/* The codebook an audio embedding's index reads: on the way back to the graph input (each node's
 * first input), the constant start of a Slice along axis 1, or the index of a Gather along axis 1,
 * that takes it from the [batch, codebooks] tokens. -1 when there is none. */
static int64_t codebook_of(const og_graph *g, const char *name) {
    for (int hops = 0; hops < 16; hops++) {
        const pp_onnx_node *p = og_producer(g, name);
        if (!p || p->n_in < 1) return -1;
        if (og_is_input(g, p->in[0])) {
            int64_t k, axis = og_is_op(p, "Gather") ? og_attr_i(p, "axis", 0) : 0;
            if (og_is_op(p, "Slice") && (p->n_in < 4 || !og_const_int(g, p->in[3], &axis))) return -1;
            if (!(og_is_op(p, "Slice") || og_is_op(p, "Gather")) || (axis != 1 && axis != -1) || p->n_in < 2 ||
                !og_const_int(g, p->in[1], &k))
                return -1;
            return k;
        }
        name = p->in[0];
    }
    return -1;
}

/* Refuses a zero point whose type is not its codes': ONNX requires the same one, and the codes
 * are offset by it read as their own type, so an int8/uint8 mix would shift every weight by 128. */
static int zero_point_mismatch(const og_graph *g, const pp_onnx_node *n, const pp_onnx_tensor *zero,
                               const pp_onnx_tensor *codes, char *err) {
    static const char *const names[] = {[PP_ONNX_UINT8] = "uint8", [PP_ONNX_INT8] = "int8"};
    char what[400];
    int zt = zero->dtype, ct = codes->dtype;
    snprintf(what, sizeof what, "zero point '%s' is %s (type %d), weight '%s' %s: they must be the same type",
             zero->name, zt == PP_ONNX_UINT8 || zt == PP_ONNX_INT8 ? names[zt] : "not int8/uint8", zt, codes->name,
             ct == PP_ONNX_UINT8 || ct == PP_ONNX_INT8 ? names[ct] : "?");
    return og_bad_node(g, n, err, what);
}

/* A projection: MatMul / Gemm with a weight operand, MatMulNBits, MatMulInteger. 1: *l filled,
 * 0: not a projection, <0: a projection whose operands are malformed. */
static int as_linear(const og_graph *g, const pp_onnx_node *n, linear *l, char *err) {
    memset(l, 0, sizeof *l);
    l->node = n;
    l->steps = 1;
    int rc;
    if ((og_is_op(n, "MatMul") || og_is_op(n, "Gemm")) && n->n_in >= 2) {
        if (!og_resolve(g, n->in[1], &l->w, 0)) return 0;
        /* what else a Gemm computes would be lost: PersonaPlex's projections have none of it */
        const pp_onnx_attr *alpha = pp_onnx_attr_find(n, "alpha");
        if (og_is_op(n, "Gemm") && ((n->n_in >= 3 && *n->in[2]) || og_attr_i(n, "transA", 0) ||
                                    (alpha && alpha->has_f && alpha->f != 1.0f)))
            return og_bad_node(g, n, err, "a Gemm with a bias C, transA, or alpha other than 1 is not read");
        const pp_onnx_tensor *t = l->w.t;
        if (t->ndim != 2 + l->w.stacked) return og_bad_node(g, n, err, "weight operand of unexpected rank");
        if ((rc = og_readable(g, n, t, err))) return rc;
        l->steps = l->w.stacked ? t->dims[0] : 1;
        int64_t a = t->dims[t->ndim - 2], b = t->dims[t->ndim - 1];
        int trans_b = og_is_op(n, "Gemm") && og_attr_i(n, "transB", 0);
        l->K = trans_b ? b : a, l->N = trans_b ? a : b;
        if (l->w.scale) {
            if (!og_is_byte(t->dtype) || (rc = og_readable(g, n, l->w.scale, err)) ||
                (l->w.zero && (rc = og_readable(g, n, l->w.zero, err))))
                return rc ? rc : og_bad_node(g, n, err, "DequantizeLinear of a weight that is not int8/uint8");
            if (l->w.scale->dtype != PP_ONNX_FLOAT && l->w.scale->dtype != PP_ONNX_FLOAT16)
                return og_bad_node(g, l->w.dq, err, "scale is not float/float16");
            /* the codes are offset by the zero point read as their own type: an int8 zero point of
             * uint8 codes (or the reverse) would shift every weight by 128 */
            if (l->w.zero && l->w.zero->dtype != t->dtype) return zero_point_mismatch(g, l->w.dq, l->w.zero, t, err);
            int64_t per = l->w.scale->numel;
            if (trans_b || (per != 1 && per != l->N * l->steps) || (l->w.zero && l->w.zero->numel != per))
                return og_bad_node(g, n, err,
                                   "dequantised weight's scales are neither per tensor nor per output column");
            /* [K, N] values: per-column scales lie along axis 1; along axis 0 (a square weight's
             * scales have the same count) or in blocks they would be read as other values */
            int64_t axis = og_attr_i(l->w.dq, "axis", 1), block = og_attr_i(l->w.dq, "block_size", 0);
            if ((per != 1 && axis != 1 && axis != -1) || block) {
                char what[160];
                snprintf(what, sizeof what,
                         "scales along axis %lld%s; the weight's output columns are axis 1 (or -1), unblocked",
                         (long long)axis, block ? " in blocks" : "");
                return og_bad_node(g, l->w.dq, err, what);
            }
            l->kind = LIN_INT8_COLUMNS;
        } else {
            if (!og_is_float(t->dtype)) return og_bad_node(g, n, err, "weight is neither float nor dequantised");
            l->kind = trans_b ? LIN_DENSE_NK : LIN_DENSE_KN;
        }
        return 1;
    }
    if (og_is_op(n, "MatMulNBits") && n->n_in >= 3) {
        if ((n->n_in >= 5 && *n->in[4]) || (n->n_in >= 6 && *n->in[5]))
            return og_bad_node(g, n, err, "inputs g_idx (blocks in another order) or bias are not read");
        const pp_onnx_tensor *b = pp_onnx_constant(g->m, n->in[1]), *s = pp_onnx_constant(g->m, n->in[2]);
        const pp_onnx_tensor *z = n->n_in >= 4 && *n->in[3] ? pp_onnx_constant(g->m, n->in[3]) : NULL;
        if (!b || !s || (n->n_in >= 4 && *n->in[3] && !z))
            return og_bad_node(g, n, err, "B, scales and zero_points must be constants");
        if ((rc = og_readable(g, n, b, err)) || (rc = og_readable(g, n, s, err)) ||
            (z && (rc = og_readable(g, n, z, err))))
            return rc;
        l->kind = LIN_NBITS;
        l->K = og_attr_i(n, "K", 0), l->N = og_attr_i(n, "N", 0);
        l->bits = (int)og_attr_i(n, "bits", 4), l->block = (int)og_attr_i(n, "block_size", 0);
        if ((l->bits != 4 && l->bits != 8) || l->block < 16 || (l->block & (l->block - 1)) || l->K <= 0 || l->N <= 0 ||
            l->K > ((int64_t)1 << 30) || l->N > ((int64_t)1 << 30))
            return og_bad_node(g, n, err, "attributes K, N, bits (4 or 8), block_size (a power of two >= 16) expected");
        if (l->K % l->block)
            return og_bad_node(g, n, err, "K is not a multiple of block_size (a padded last block is not supported)");
        int64_t nb = l->K / l->block, blob = (int64_t)l->block * l->bits / 8;
        if (b->dtype != PP_ONNX_UINT8 || b->numel != l->N * nb * blob)
            return og_bad_node(g, n, err, "B is not uint8 [N, K/block_size, block_size·bits/8]");
        if ((s->dtype != PP_ONNX_FLOAT && s->dtype != PP_ONNX_FLOAT16) || s->numel != l->N * nb)
            return og_bad_node(g, n, err, "scales are not float/float16 [N·K/block_size]");
        if (z && (z->dtype != PP_ONNX_UINT8 || z->numel != (l->bits == 8 ? l->N * nb : l->N * ((nb + 1) / 2))))
            return og_bad_node(g, n, err, "zero_points are not uint8 of the packed size");
        l->w.t = b, l->w.scale = s, l->w.zero = z;
        return 1;
    }
    if (og_is_op(n, "MatMulInteger") && n->n_in >= 2) {
        const pp_onnx_tensor *q = pp_onnx_constant(g->m, n->in[1]);
        if (!q) return 0;
        if ((rc = og_readable(g, n, q, err))) return rc;
        if (q->ndim != 2 || !og_is_byte(q->dtype)) return og_bad_node(g, n, err, "B is not a 2-D int8/uint8 constant");
        l->K = q->dims[0], l->N = q->dims[1];
        l->w.t = q;
        if (n->n_in >= 4 && *n->in[3] && !(l->w.zero = pp_onnx_constant(g->m, n->in[3])))
            return og_bad_node(g, n, err, "B's zero point is not a constant");
        /* The weight's scale: MatMulInteger -> Cast -> Mul(·, Mul(A's scale, B's scale)) or Mul(·, B's scale) */
        const pp_onnx_node *cast = og_consumer(g, n->out[0], "Cast");
        const pp_onnx_node *mul = cast ? og_consumer(g, cast->out[0], "Mul") : NULL;
        for (int k = 0; mul && k < 2 && !l->w.scale; k++) {
            const char *v = mul->in[k];
            if (!strcmp(v, cast->out[0])) continue;
            const pp_onnx_tensor *c = pp_onnx_constant(g->m, v);
            const pp_onnx_node *p = og_producer(g, v);
            if (c && (c->numel == l->N || c->numel == 1)) l->w.scale = c;
            for (int j = 0; !c && og_is_op(p, "Mul") && j < 2 && !l->w.scale; j++) {
                const pp_onnx_tensor *d = pp_onnx_constant(g->m, p->in[j]);
                if (d && (d->numel == l->N || d->numel == 1)) l->w.scale = d;
            }
        }
        if (!l->w.scale) return og_bad_node(g, n, err, "no weight scale found after Cast -> Mul");
        if ((rc = og_readable(g, n, l->w.scale, err)) || (l->w.zero && (rc = og_readable(g, n, l->w.zero, err))))
            return rc;
        if (l->w.scale->dtype != PP_ONNX_FLOAT ||
            (l->w.zero && (!og_is_byte(l->w.zero->dtype) || l->w.zero->numel != l->w.scale->numel)))
            return og_bad_node(g, n, err, "weight scale not float, or zero point not one per scale");
        if (l->w.zero && l->w.zero->dtype != q->dtype) return zero_point_mismatch(g, n, l->w.zero, q, err);
        l->kind = LIN_INT8_COLUMNS;
        return 1;
    }
    return 0;
}

/* ---- planning ---- */

static int any_nonzero_zero_point(const pp_onnx_tensor *z, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        if (z->data[z->numel == 1 ? 0 : first + i] != (z->dtype == PP_ONNX_UINT8 ? 128 : 0)) return 1;
    return 0;
}

/* Plans the checkpoint tensor NAME ([rows, K], rows = N, or steps·N when step < 0) from projection l:
 * step s's slice, or every step stacked. */
static int plan_linear(onnx_bundle *b, const char *name, const linear *l, int64_t step, char *err) {
    int64_t first = step < 0 ? 0 : step, steps = step < 0 ? l->steps : 1, rows = steps * l->N;
    const pp_onnx_tensor *t = l->w.t;
    const uint8_t *step_data = t->data + (size_t)(first * l->K * l->N * pp_onnx_dtype_size(t->dtype)); /* dense */
    og_tensor *o;
    char key[NAME_LEN];
    switch (l->kind) {
    case LIN_DENSE_NK:
        if (!(o = og_plan(b, name, og_st_dtype(t->dtype), 2, rows, l->K, 0, F_COPY, err))) return PP_ENOMEM;
        o->src = step_data;
        return 0;
    case LIN_DENSE_KN:
    case LIN_INT8_COLUMNS: {
        st_dtype dt = l->kind == LIN_INT8_COLUMNS ? ST_I8 : og_st_dtype(t->dtype);
        if (!(o = og_plan(b, name, dt, 2, rows, l->K, 0, F_TRANSPOSE, err))) return PP_ENOMEM;
        o->src = step_data;
        o->src_dtype = t->dtype, o->steps = steps, o->K = l->K, o->N = l->N;
        o->flip = t->dtype == PP_ONNX_UINT8;
        if (l->kind == LIN_DENSE_KN) return 0;
        const pp_onnx_tensor *s = l->w.scale, *z = l->w.zero;
        pp_wl_int8_scales_key(name, key, sizeof key);
        if (!(o = og_plan(b, key, ST_F32, 1, rows, 0, 0, F_SCALES127, err))) return PP_ENOMEM;
        o->bcast = s->numel == 1;
        o->src = s->data + (o->bcast ? 0 : (size_t)(first * l->N) * (size_t)pp_onnx_dtype_size(s->dtype));
        o->src_dtype = s->dtype, o->count = rows;
        /* uint8 codes without a zero point are offset by 128 like any other */
        int flip_only = !z && t->dtype == PP_ONNX_UINT8;
        if (!flip_only && (!z || !any_nonzero_zero_point(z, first * l->N, rows))) return 0;
        pp_wl_int8_zeros_key(name, key, sizeof key);
        if (!(o = og_plan(b, key, ST_I8, 1, rows, 0, 0, F_ZEROS, err))) return PP_ENOMEM;
        o->count = rows, o->flip = t->dtype == PP_ONNX_UINT8;
        o->bcast = !z || z->numel == 1;
        o->src = z ? z->data + (o->bcast ? 0 : (size_t)(first * l->N)) : NULL;
        return 0;
    }
    case LIN_NBITS: {
        int64_t nb = l->K / l->block;
        if (!(o = og_plan(b, name, ST_I8, 2, l->N, l->K, 0, F_NBITS_CODES, err))) return PP_ENOMEM;
        o->src = t->data, o->K = l->K, o->N = l->N, o->bits = l->bits, o->block = l->block;
        pp_wl_int8_scales_key(name, key, sizeof key);
        if (!(o = og_plan(b, key, ST_F32, nb > 1 ? 2 : 1, l->N, nb > 1 ? nb : 0, 0, F_SCALES127, err)))
            return PP_ENOMEM;
        o->src = l->w.scale->data, o->src_dtype = l->w.scale->dtype, o->count = l->N * nb;
        if (!l->w.zero) return 0;
        pp_wl_int8_zeros_key(name, key, sizeof key);
        if (!(o = og_plan(b, key, ST_I8, nb > 1 ? 2 : 1, l->N, nb > 1 ? nb : 0, 0, F_NBITS_ZEROS, err)))
            return PP_ENOMEM;
        o->src = l->w.zero->data, o->K = l->K, o->N = l->N, o->bits = l->bits, o->block = l->block;
        return 0;
    }
    }
    return 0;
}

/* ---- the two graphs ---- */

typedef struct found {
    linear *lin;
    size_t n_lin;
    const pp_onnx_tensor **norm;
    const pp_onnx_node **norm_node;
    size_t n_norm;
    const pp_onnx_node **emb;
    og_wref *emb_w;
    size_t n_emb;
} found;

static void found_free(found *f) {
    free(f->lin);
    free(f->norm);
    free(f->norm_node);
    free(f->emb);
    free(f->emb_w);
}

/* Embeddings (Gathers of a float table by a computed index, other than a step's dequantisation
 * scales), norm scales (as wide as the first embedding) and projections, in node order. */
static int scan(const og_graph *g, found *f, char *err) {
    size_t nodes = pp_onnx_node_count(g->m);
    memset(f, 0, sizeof *f);
    f->lin = calloc(nodes + 1, sizeof *f->lin);
    f->norm = calloc(nodes + 1, sizeof *f->norm);
    f->norm_node = calloc(nodes + 1, sizeof *f->norm_node);
    f->emb = calloc(nodes + 1, sizeof *f->emb);
    f->emb_w = calloc(nodes + 1, sizeof *f->emb_w);
    if (!f->lin || !f->norm || !f->norm_node || !f->emb || !f->emb_w)
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", g->file);
    int64_t dim = 0;
    for (size_t i = 0; i < nodes; i++) {
        const pp_onnx_node *n = pp_onnx_node_at(g->m, i);
        og_wref w;
        if (og_is_op(n, "Gather") && n->n_in >= 2 && og_attr_i(n, "axis", 0) == 0 && og_resolve(g, n->in[0], &w, 0) &&
            !w.scale && og_is_float(w.t->dtype) && w.t->ndim == 2 + w.stacked && !pp_onnx_constant(g->m, n->in[1]) &&
            !og_consumer(g, n->out[0], "DequantizeLinear")) {
            int rc = og_readable(g, n, w.t, err);
            if (rc) return rc;
            if (!dim) dim = w.t->dims[w.t->ndim - 1];
            f->emb[f->n_emb] = n, f->emb_w[f->n_emb++] = w;
            continue;
        }
        linear l;
        int rc = as_linear(g, n, &l, err);
        if (rc < 0) return rc;
        if (rc) {
            f->lin[f->n_lin++] = l;
            continue;
        }
        /* a fused norm (ONNX Runtime's optimizer, opset 23): its scale input */
        int fused = og_is_op(n, "SimplifiedLayerNormalization") || og_is_op(n, "RMSNormalization") ? 1
                    : og_is_op(n, "SkipSimplifiedLayerNormalization")                              ? 2
                                                                                                   : 0;
        if (fused && n->n_in > fused && dim) {
            const pp_onnx_tensor *t = og_float_const(g, n->in[fused]);
            if (!t || t->numel != dim)
                return og_bad_node(g, n, err, "norm scale is not a float constant of the model's width");
            if ((rc = og_readable(g, n, t, err))) return rc;
            f->norm_node[f->n_norm] = n, f->norm[f->n_norm++] = t;
            continue;
        }
        if (og_is_op(n, "Mul") && n->n_in == 2 && dim) {
            for (int k = 0; k < 2; k++) {
                const pp_onnx_tensor *t = og_float_const(g, n->in[k]);
                if (!t || !og_is_width_vector(t, dim) || !from_reduce_mean(g, n->in[1 - k], 0)) continue;
                if ((rc = og_readable(g, n, t, err))) return rc;
                f->norm_node[f->n_norm] = n, f->norm[f->n_norm++] = t;
            }
        }
    }
    return 0;
}

static int expect_shape(const og_graph *g, const linear *l, const char *what, int64_t K, int64_t N, char *err) {
    if ((K && l->K != K) || (N && l->N != N))
        return pp_fail(err, PP_EFORMAT, "%s: node '%s' (%s), read as %s: K %lld, N %lld; expected K %lld, N %lld",
                       g->file, l->node->name, l->node->op_type, what, (long long)l->K, (long long)l->N, (long long)K,
                       (long long)N);
    return 0;
}

/* A layer's four projections: Q/K/V in, out, gate and value in, out (the hidden width from the last). */
static int check_layer(const og_graph *g, const linear *p, int64_t dim, char *err) {
    int64_t hidden = p[3].K;
    int rc;
    if ((rc = expect_shape(g, &p[0], "attention input projection", dim, 3 * dim, err)) ||
        (rc = expect_shape(g, &p[1], "attention output projection", dim, dim, err)) ||
        (rc = expect_shape(g, &p[2], "feed-forward input projection", dim, 2 * hidden, err)))
        return rc;
    return expect_shape(g, &p[3], "feed-forward output projection", 0, dim, err);
}

static int plan_norm(onnx_bundle *b, const char *name, const pp_onnx_tensor *t, int64_t dim, char *err) {
    return og_plan_view(b, name, t, 0, 3, 1, 1, dim, err);
}

/* Layer l's norm1 and norm2 scales under prefix ("transformer" or "depformer"). */
static int plan_layer_norms(onnx_bundle *b, const char *prefix, int64_t l, const pp_onnx_tensor *const *norms,
                            int64_t dim, char *err) {
    char name[NAME_LEN];
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(name, sizeof name, "%s.layers.%lld.norm%d.alpha", prefix, (long long)l, k + 1);
        rc = plan_norm(b, name, norms[k], dim, err);
    }
    return rc;
}

/* The temporal step; *dim_out is its width, *text_linear_here whether it ends in the text
 * projection (else the depformer step computes the text logits from the hidden state). */
static int temporal(onnx_bundle *b, const og_graph *g, int64_t *dim_out, int *text_linear_here, char *err) {
    found f;
    int rc = scan(g, &f, err);
    if (rc) goto done;
    if (f.n_emb < 2 || f.n_lin < 4 || f.n_lin % 4 > 1) {
        rc = pp_fail(err, PP_EFORMAT,
                     "%s: found %zu embedding Gathers and %zu projections; a temporal step has the text and audio "
                     "embeddings and 4 projections per layer (plus the text output, here or in the depformer step)",
                     g->file, f.n_emb, f.n_lin);
        goto done;
    }
    int64_t layers = (int64_t)f.n_lin / 4, dim = f.emb_w[0].t->dims[1];
    *dim_out = dim;
    *text_linear_here = f.n_lin % 4 == 1;
    if (f.n_norm != (size_t)(2 * layers + 1)) {
        rc =
            pp_fail(err, PP_EFORMAT, "%s: %lld layers by their projections but %zu RMS-norm scales (expected %lld)%s%s",
                    g->file, (long long)layers, f.n_norm, (long long)(2 * layers + 1),
                    f.n_norm ? "; the last is read by node " : "", f.n_norm ? f.norm_node[f.n_norm - 1]->name : "");
        goto done;
    }
    const char *text_input = pp_onnx_input_count(g->m) ? pp_onnx_input_at(g->m, 0)->name : "";
    char name[NAME_LEN];
    int audio = 0, texts = 0, known = 0;
    /* The audio embeddings' Gathers are independent of one another, so their node order is any
     * the exporter chose: each is emb.K for the codebook K its index selects, when the graph says
     * (in node order when it says for none). */
    uint32_t seen = 0;
    for (size_t i = 0; i < f.n_emb; i++) {
        const char *src = index_source(g, f.emb[i]->in[1]);
        if (src && !strcmp(src, text_input)) continue;
        audio++;
        known += codebook_of(g, f.emb[i]->in[1]) >= 0;
    }
    for (size_t i = 0, next = 0; i < f.n_emb && !rc; i++) {
        const pp_onnx_tensor *t = f.emb_w[i].t;
        const char *src = index_source(g, f.emb[i]->in[1]);
        if (f.emb_w[i].stacked || t->dims[1] != dim) {
            rc = og_bad_node(g, f.emb[i], err, "embedding table of another width than the first");
            break;
        }
        if (src && !strcmp(src, text_input)) {
            snprintf(name, sizeof name, "text_emb.weight"), texts++;
        } else {
            int64_t k = known ? codebook_of(g, f.emb[i]->in[1]) : (int64_t)next++;
            if (k < 0 || k >= audio || k >= 32 || (seen >> k & 1)) {
                rc = og_bad_node(g, f.emb[i], err,
                                 k < 0 ? "audio embedding whose codebook is not a constant Slice or Gather of the "
                                         "tokens (the others' are)"
                                       : "audio embedding of a codebook out of range or taken twice");
                break;
            }
            seen |= 1u << k;
            snprintf(name, sizeof name, "emb.%lld.weight", (long long)k);
        }
        rc = og_plan_view(b, name, t, 0, 2, t->dims[0], t->dims[1], 0, err);
    }
    if (!rc && texts != 1)
        rc = pp_fail(err, PP_EFORMAT, "%s: %d embeddings indexed by the first input '%s' (expected one: the text)",
                     g->file, texts, text_input);
    static const char *const layer_parts[4] = {"self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                               "gating.linear_in.weight", "gating.linear_out.weight"};
    for (int64_t l = 0; l < layers && !rc; l++) {
        const linear *p = &f.lin[4 * l];
        if ((rc = check_layer(g, p, dim, err))) break;
        for (int k = 0; k < 4 && !rc; k++) {
            snprintf(name, sizeof name, "transformer.layers.%lld.%s", (long long)l, layer_parts[k]);
            rc = plan_linear(b, name, &p[k], 0, err);
        }
        if (!rc) rc = plan_layer_norms(b, "transformer", l, &f.norm[2 * l], dim, err);
    }
    if (!rc && *text_linear_here) rc = expect_shape(g, &f.lin[f.n_lin - 1], "text output projection", dim, 0, err);
    if (!rc && *text_linear_here) rc = plan_linear(b, "text_linear.weight", &f.lin[f.n_lin - 1], 0, err);
    if (!rc) rc = plan_norm(b, "out_norm.alpha", f.norm[f.n_norm - 1], dim, err);
    if (!rc)
        PP_INFO("onnx", "%s: %lld layers, dim %lld, %d audio embeddings", g->file, (long long)layers, (long long)dim,
                audio);
done:
    found_free(&f);
    return rc;
}

/* The depformer step; with need_text_linear it also holds the text projection of the temporal
 * step's hidden state (width temporal_dim): the one projection not selected per step. */
static int depformer(onnx_bundle *b, const og_graph *g, int64_t temporal_dim, int need_text_linear, char *err) {
    found f;
    int rc = scan(g, &f, err);
    if (rc) goto done;
    size_t kept = 0, unstacked = 0;
    linear text_linear = {0};
    for (size_t i = 0; i < f.n_lin; i++) { /* the per-step stacks stay in f.lin, in order */
        if (f.lin[i].w.stacked)
            f.lin[kept++] = f.lin[i];
        else if (unstacked++ == 0)
            text_linear = f.lin[i];
    }
    f.n_lin = kept;
    if (unstacked != (size_t)need_text_linear) {
        rc = pp_fail(err, PP_EFORMAT,
                     "%s: %zu projections not selected per step; expected %d (the text output, when the temporal "
                     "step does not end in it)",
                     g->file, unstacked, need_text_linear);
        goto done;
    }
    if (need_text_linear && ((rc = expect_shape(g, &text_linear, "text output projection", temporal_dim, 0, err)) ||
                             (rc = plan_linear(b, "text_linear.weight", &text_linear, 0, err))))
        goto done;
    const og_wref *text = NULL, *audio = NULL;
    for (size_t i = 0; i < f.n_emb; i++) {
        if (f.emb_w[i].stacked && !audio) audio = &f.emb_w[i];
        if (!f.emb_w[i].stacked && !text) text = &f.emb_w[i];
    }
    if (!text || !audio || f.n_emb != 2 || f.n_lin < 6 || (f.n_lin - 2) % 4) {
        rc = pp_fail(err, PP_EFORMAT,
                     "%s: found %zu embedding Gathers and %zu projections; a depformer step has a text embedding, a "
                     "per-step stack of audio embeddings, its input projection, 4 projections per layer and the "
                     "output projection",
                     g->file, f.n_emb, f.n_lin);
        goto done;
    }
    int64_t layers = (int64_t)(f.n_lin - 2) / 4, dim = text->t->dims[1], steps = f.lin[0].steps;
    if (f.n_norm != (size_t)(2 * layers)) {
        rc = pp_fail(err, PP_EFORMAT, "%s: %lld layers by their projections but %zu RMS-norm scales (expected %lld)",
                     g->file, (long long)layers, f.n_norm, (long long)(2 * layers));
        goto done;
    }
    for (size_t i = 0; i < f.n_lin; i++)
        if (f.lin[i].steps != steps) {
            rc = og_bad_node(g, f.lin[i].node, err, "projection stack of another step count than the others");
            goto done;
        }
    char name[NAME_LEN];
    const pp_onnx_tensor *at = audio->t;
    if (at->dims[0] != steps - 1 || at->dims[2] != dim) {
        rc = pp_fail(err, PP_EFORMAT, "%s: audio embedding stack '%s' is not [%lld steps - 1, vocab, %lld]", g->file,
                     at->name, (long long)steps, (long long)dim);
        goto done;
    }
    rc = og_plan_view(b, "depformer_text_emb.weight", text->t, 0, 2, text->t->dims[0], dim, 0, err);
    size_t es = (size_t)pp_onnx_dtype_size(at->dtype), per = (size_t)(at->dims[1] * dim) * es;
    for (int64_t s = 0; s + 1 < steps && !rc; s++) {
        snprintf(name, sizeof name, "depformer_emb.%lld.weight", (long long)s);
        rc = og_plan_view(b, name, at, (size_t)s * per, 2, at->dims[1], dim, 0, err);
    }
    if (!rc) rc = expect_shape(g, &f.lin[0], "the depformer's input projection", 0, dim, err);
    for (int64_t s = 0; s < steps && !rc; s++) {
        snprintf(name, sizeof name, "depformer_in.%lld.weight", (long long)s);
        rc = plan_linear(b, name, &f.lin[0], s, err);
    }
    for (int64_t l = 0; l < layers && !rc; l++) {
        const linear *p = &f.lin[1 + 4 * l];
        if ((rc = check_layer(g, p, dim, err))) break;
        snprintf(name, sizeof name, "depformer.layers.%lld.self_attn.in_proj_weight", (long long)l);
        if ((rc = plan_linear(b, name, &p[0], -1, err))) break;
        snprintf(name, sizeof name, "depformer.layers.%lld.self_attn.out_proj.weight", (long long)l);
        if ((rc = plan_linear(b, name, &p[1], -1, err))) break;
        for (int64_t s = 0; s < steps && !rc; s++) {
            snprintf(name, sizeof name, "depformer.layers.%lld.gating.%lld.linear_in.weight", (long long)l,
                     (long long)s);
            if ((rc = plan_linear(b, name, &p[2], s, err))) break;
            snprintf(name, sizeof name, "depformer.layers.%lld.gating.%lld.linear_out.weight", (long long)l,
                     (long long)s);
            rc = plan_linear(b, name, &p[3], s, err);
        }
        if (!rc) rc = plan_layer_norms(b, "depformer", l, &f.norm[2 * l], dim, err);
    }
    const linear *last = &f.lin[f.n_lin - 1];
    if (!rc) rc = expect_shape(g, last, "the output projection", dim, 0, err);
    for (int64_t s = 0; s < steps && !rc; s++) {
        snprintf(name, sizeof name, "linears.%lld.weight", (long long)s);
        rc = plan_linear(b, name, last, s, err);
    }
    if (!rc)
        PP_INFO("onnx", "%s: %lld layers, dim %lld, %lld steps", g->file, (long long)layers, (long long)dim,
                (long long)steps);
done:
    found_free(&f);
    return rc;
}

/* Plans every tensor of both graphs (an og_plan_fn). */
static int plan_graphs(onnx_bundle *b, const og_graph *t, const og_graph *d, const void *unused, char *err) {
    (void)unused;
    int64_t dim = 0;
    int text_linear_here = 0;
    int rc = temporal(b, t, &dim, &text_linear_here, err);
    return rc ? rc : depformer(b, d, dim, !text_linear_here, err);
}

static int is_dir(const char *path) {
    struct stat sb;
    return !stat(path, &sb) && S_ISDIR(sb.st_mode);
}

int pp_onnx_bundle_is(const char *path) {
    char p[4096];
    struct stat sb;
    if (!is_dir(path)) return 0;
    snprintf(p, sizeof p, "%s/%s", path, PP_ONNX_TEMPORAL);
    return !stat(p, &sb) && S_ISREG(sb.st_mode);
}

/* Opens the bundle's two graphs from their files. */
static int open_graphs(const char *dir, og_graph *t, og_graph *d, char *err) {
    int rc = og_open(t, dir, PP_ONNX_TEMPORAL, err);
    return rc ? rc : og_open(d, dir, PP_ONNX_DEPFORMER, err);
}

int pp_onnx_bundle_size(const char *dir, size_t *bytes, char *err) {
    onnx_bundle b = {0};
    og_graph t = {0}, d = {0};
    int rc = open_graphs(dir, &t, &d, err);
    if (!rc) rc = plan_graphs(&b, &t, &d, NULL, err);
    og_layout(&b);
    *bytes = b.size;
    og_close(&t);
    og_close(&d);
    free(b.outs);
    return rc;
}

int pp_onnx_bundle_load(const char *dir, st_tensor **tensors, size_t *count, const void **base, size_t *size,
                        onnx_bundle **out_bundle, char *err) {
    og_graph t = {0}, d = {0};
    int rc = open_graphs(dir, &t, &d, err);
    return og_convert(rc, &t, &d, plan_graphs, NULL, 1, dir, tensors, count, base, size, out_bundle, err);
}

int pp_onnx_bundle_open_memory(const void *temporal_buf, size_t temporal_len, const void *depformer_buf,
                               size_t depformer_len, st_tensor **tensors, size_t *count, const void **base,
                               size_t *size, onnx_bundle **out_bundle, char *err) {
    og_graph t = {0}, d = {0};
    int rc = og_parse(&t, temporal_buf, temporal_len, PP_ONNX_TEMPORAL, err);
    if (!rc) rc = og_parse(&d, depformer_buf, depformer_len, PP_ONNX_DEPFORMER, err);
    return og_convert(rc, &t, &d, plan_graphs, NULL, 0, "bundle", tensors, count, base, size, out_bundle, err);
}
