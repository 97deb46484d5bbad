#include "io/onnx_mimi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "io/onnx_graph.h"

#define KEY_LEN 192

/* A node that consumes a weight, in graph order. */
typedef enum { EV_CONV, EV_MATMUL, EV_MUL, EV_ADD, EV_NORM, EV_TABLE } ev_kind;

static const char *const ev_what[] = {
    "a convolution",        "a MatMul by a float weight", "a Mul by a weight vector", "an Add of a weight vector",
    "a LayerNormalization", "a codebook Gather"};

typedef struct event {
    ev_kind kind;
    const pp_onnx_node *node;
    const pp_onnx_tensor *w; /* conv or MatMul weight, vector, norm scale, codebook table */
    const pp_onnx_tensor *b; /* conv or norm bias, codebook cluster usage (NULL: a folded table) */
    int trans_b;             /* Gemm(transB=1): the weight is [out, in] already */
    int64_t book[2];         /* EV_TABLE: the codes' Slice start and Split output it reads; -1 unknown */
} event;

typedef struct walk {
    const og_graph *g;
    event *ev;
    size_t n, at;
    onnx_bundle *b;
    const pp_tensor_list *want;
} walk;

static const pp_tensor_spec *want_find(const walk *w, const char *name) {
    for (size_t i = 0; i < w->want->n; i++)
        if (!strcmp(w->want->v[i].name, name)) return &w->want->v[i];
    return NULL;
}

/* A codebook's cluster usage: the constant under the clamp and reshape of embedding_sum's divisor. */
static const pp_onnx_tensor *usage_of(const og_graph *g, const char *name) {
    for (int hops = 0; hops < 6; hops++) {
        const pp_onnx_tensor *c = og_float_const(g, name);
        if (c) return c;
        const pp_onnx_node *p = og_producer(g, name);
        if (!p || p->n_in < 1 ||
            !(og_is_op(p, "Unsqueeze") || og_is_op(p, "Clip") || og_is_op(p, "Max") || og_is_op(p, "Reshape")))
            return NULL;
        name = p->in[0];
    }
    return NULL;
}

/* Which codebook a codebook Gather's index selects: the start of the Slice (or the index of the
 * Gather) that takes it from the codes input, and the Split output it then comes through, on the
 * way back along first inputs; book[0] is -1 when the index is not found that way. */
static void codebook_of(const og_graph *g, const char *name, int64_t book[2]) {
    book[0] = -1, book[1] = 0;
    for (int hops = 0; hops < 8; hops++) {
        const pp_onnx_node *p = og_producer(g, name);
        if (!p || p->n_in < 1) return;
        if (og_is_input(g, p->in[0])) {
            if ((og_is_op(p, "Slice") || og_is_op(p, "Gather")) && p->n_in >= 2) og_const_int(g, p->in[1], &book[0]);
            return;
        }
        if (og_is_op(p, "Split"))
            for (int k = 0; k < p->n_out; k++)
                if (!strcmp(p->out[k], name)) book[1] = k;
        static const char *const passes[] = {"Split",   "Squeeze", "Unsqueeze", "Transpose",
                                             "Reshape", "Cast",    "Identity"};
        size_t k = 0;
        while (k < sizeof passes / sizeof *passes && !og_is_op(p, passes[k])) k++;
        if (k == sizeof passes / sizeof *passes) return;
        name = p->in[0];
    }
}

static int book_before(const event *a, const event *b) {
    return a->book[0] < b->book[0] || (a->book[0] == b->book[0] && a->book[1] < b->book[1]);
}

/* The codebook Gathers of one quantizer depend on nothing of one another, so any order of them is
 * a valid graph: each run of them is put in codebook order when every one of it says its codebook. */
static void order_codebooks(walk *w) {
    for (size_t i = 0; i < w->n;) {
        size_t end = i, known = 0;
        while (end < w->n && w->ev[end].kind == EV_TABLE) known += w->ev[end++].book[0] >= 0;
        for (size_t k = i + 1; known == end - i && k < end; k++)
            for (size_t j = k; j > i && book_before(&w->ev[j], &w->ev[j - 1]); j--) {
                event t = w->ev[j];
                w->ev[j] = w->ev[j - 1], w->ev[j - 1] = t;
            }
        i = end > i ? end : i + 1;
    }
}

/* Node n as a weight-consuming event: 1 when it is one, 0 when not, < 0 when malformed. dim: the transformers' width (a
 * Mul or Add by a constant of that size is a norm or a layer scale). */
static int as_event(const og_graph *g, const pp_onnx_node *n, int64_t dim, event *e, char *err) {
    memset(e, 0, sizeof *e);
    e->node = n;
    if ((og_is_op(n, "Conv") || og_is_op(n, "ConvTranspose")) && n->n_in >= 2) {
        if (!(e->w = og_float_const(g, n->in[1])) || e->w->ndim != 3) return 0;
        if (n->n_in >= 3 && *n->in[2] && !(e->b = og_float_const(g, n->in[2])))
            return og_bad_node(g, n, err, "the bias is not a float constant");
        e->kind = EV_CONV;
    } else if ((og_is_op(n, "MatMul") || og_is_op(n, "Gemm")) && n->n_in >= 2) {
        /* the weight as stored, or through a Transpose an export without constant folding keeps:
         * one that swaps the two axes (no perm, or [1, 0]) or keeps them ([0, 1]) */
        const pp_onnx_node *tr = og_producer(g, n->in[1]);
        int flipped = 0;
        if (og_is_op(tr, "Transpose") && tr->n_in == 1 && (e->w = og_float_const(g, tr->in[0]))) {
            const pp_onnx_attr *perm = pp_onnx_attr_find(tr, "perm");
            int keeps = perm && perm->n_ints == 2 && perm->ints[0] == 0 && perm->ints[1] == 1;
            int swaps = !perm || (perm->n_ints == 2 && perm->ints[0] == 1 && perm->ints[1] == 0);
            if (!keeps && !swaps) /* a 2-D weight moved otherwise; of another rank, not a projection's */
                return e->w->ndim == 2 ? og_bad_node(g, tr, err, "perm is neither [1, 0] nor [0, 1]") : 0;
            flipped = !keeps;
        }
        if (!flipped && !e->w) e->w = og_float_const(g, n->in[1]);
        if (!e->w || e->w->ndim != 2) return 0;
        if (n->n_in >= 3 && *n->in[2]) return og_bad_node(g, n, err, "a projection with a bias (Mimi's have none)");
        e->kind = EV_MATMUL;
        e->trans_b = flipped != (og_is_op(n, "Gemm") && og_attr_i(n, "transB", 0));
    } else if (og_is_op(n, "LayerNormalization") && n->n_in >= 2) {
        e->w = og_float_const(g, n->in[1]);
        e->b = n->n_in >= 3 && *n->in[2] ? og_float_const(g, n->in[2]) : NULL;
        if (!e->w || !e->b) return og_bad_node(g, n, err, "scale and bias must be float constants");
        e->kind = EV_NORM;
    } else if ((og_is_op(n, "Mul") || og_is_op(n, "Add")) && n->n_in == 2 && dim > 0) {
        for (int k = 0; k < 2 && !e->w; k++) {
            const pp_onnx_tensor *c = og_float_const(g, n->in[k]);
            if (c && og_is_width_vector(c, dim) && !og_float_const(g, n->in[1 - k])) e->w = c;
        }
        if (!e->w) return 0;
        e->kind = og_is_op(n, "Mul") ? EV_MUL : EV_ADD;
    } else if (og_is_op(n, "Gather") && n->n_in >= 2 && og_attr_i(n, "axis", 0) == 0 &&
               !pp_onnx_constant(g->m, n->in[1])) {
        /* a table folded at export (embedding_sum / usage), or that division in the graph */
        const pp_onnx_node *div = og_producer(g, n->in[0]);
        if (!(e->w = og_float_const(g, n->in[0]))) {
            if (!og_is_op(div, "Div") || div->n_in != 2 || !(e->w = og_float_const(g, div->in[0])) || e->w->ndim != 2)
                return 0;
            if (!(e->b = usage_of(g, div->in[1])) || e->b->numel != e->w->dims[0])
                return og_bad_node(g, div, err, "a codebook's divisor is not its cluster usage, one per row");
        }
        if (e->w->ndim != 2) return 0;
        e->kind = EV_TABLE;
        codebook_of(g, n->in[1], e->book);
    } else {
        return 0;
    }
    int rc = og_readable(g, n, e->w, err);
    if (!rc && e->b) rc = og_readable(g, n, e->b, err);
    return rc ? rc : 1;
}

static int scan(walk *w, const og_graph *g, int64_t dim, char *err) {
    size_t nodes = pp_onnx_node_count(g->m);
    w->g = g;
    if (!(w->ev = calloc(nodes + 1, sizeof *w->ev))) return pp_fail(err, PP_ENOMEM, "%s: out of memory", g->file);
    for (size_t i = 0; i < nodes; i++) {
        event e;
        int rc = as_event(g, pp_onnx_node_at(g->m, i), dim, &e, err);
        if (rc < 0) return rc;
        if (rc) w->ev[w->n++] = e;
    }
    order_codebooks(w);
    return 0;
}

/* The next event, which must be of kind; `key` names the tensor it should hold. */
static int take(walk *w, ev_kind kind, const char *key, const event **out, char *err) {
    if (w->at >= w->n)
        return pp_fail(err, PP_EFORMAT, "%s: the graph has no further weights where '%s' (%s) was expected", w->g->file,
                       key, ev_what[kind]);
    const event *e = &w->ev[w->at];
    if (e->kind != kind)
        return pp_fail(err, PP_EFORMAT, "%s: node '%s' (%s) is %s where '%s' (%s) was expected", w->g->file,
                       e->node->name, e->node->op_type, ev_what[e->kind], key, ev_what[kind]);
    w->at++;
    *out = e;
    return 0;
}

static const pp_tensor_spec *expect(const walk *w, const char *key, char *err) {
    const pp_tensor_spec *x = want_find(w, key);
    if (!x) pp_fail(err, PP_EINVAL, "%s: the codec reads no tensor '%s'", w->g->file, key);
    return x;
}

static int shape_error(const walk *w, const event *e, const pp_onnx_tensor *t, const pp_tensor_spec *x, char *err) {
    char got[96] = "", want[96] = "";
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    for (int i = 0; i < x->ndim; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)x->shape[i]);
    return pp_fail(err, PP_EFORMAT, "%s: node '%s' (%s): tensor '%s' is [%s]; '%s' is [%s]", w->g->file, e->node->name,
                   e->node->op_type, t->name, got, x->name, want);
}

static int same_dims(const pp_onnx_tensor *t, const pp_tensor_spec *x) {
    if (t->ndim != x->ndim) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] != x->shape[i]) return 0;
    return 1;
}

/* Plans x from t's bytes (same element count, any float type). */
static int plan_as(walk *w, const event *e, const pp_onnx_tensor *t, const pp_tensor_spec *x, char *err) {
    int64_t numel = 1;
    for (int i = 0; i < x->ndim; i++) numel *= x->shape[i];
    if (t->numel != numel || x->ndim > 3) return shape_error(w, e, t, x, err);
    return og_plan_view(w->b, x->name, t, 0, x->ndim, x->shape[0], x->shape[1], x->shape[2], err);
}

/* Whether INTS attribute NAME of n holds `count` copies of value (absent: ONNX's default, every
 * value `absent`). */
static int ints_all(const pp_onnx_node *n, const char *name, int count, int64_t value, int64_t absent) {
    const pp_onnx_attr *a = pp_onnx_attr_find(n, name);
    if (!a) return value == absent;
    if (a->n_ints != count) return 0;
    for (int i = 0; i < count; i++)
        if (a->ints[i] != value) return 0;
    return 1;
}

/* The codec runs a convolution with its own stride and groups, no dilation and its own causal
 * padding (model/conv.h): a node that computes anything else holds weights of another model. */
static int check_conv_attrs(const walk *w, const event *e, const pp_tensor_spec *x, char *err) {
    const pp_onnx_node *n = e->node;
    const pp_onnx_attr *pad = pp_onnx_attr_find(n, "auto_pad"), *out_shape = pp_onnx_attr_find(n, "output_shape");
    int64_t group = og_attr_i(n, "group", 1);
    char what[200];
    if (x->conv_stride && (!ints_all(n, "strides", 1, x->conv_stride, 1) || group != x->conv_groups))
        snprintf(what, sizeof what, "strides or group other than the codec's (stride %d, group %d) for '%s'",
                 x->conv_stride, x->conv_groups, x->name);
    else if (!ints_all(n, "dilations", 1, 1, 1))
        snprintf(what, sizeof what, "dilations other than [1] (the codec's convolutions are not dilated)");
    else if (!ints_all(n, "pads", 2, 0, 0) || (pad && pad->s && strcmp(pad->s, "NOTSET")))
        snprintf(what, sizeof what, "pads or auto_pad (the codec pads causally itself; the graph's pads are explicit "
                 "Pad nodes)");
    else if (!ints_all(n, "output_padding", 1, 0, 0) || out_shape)
        snprintf(what, sizeof what, "output_padding or output_shape (the codec trims a transposed convolution itself)");
    else
        return 0;
    return og_bad_node(w->g, n, err, what);
}

/* A convolution: PREFIX.weight and, when the codec has one, PREFIX.bias. */
static int conv(walk *w, const char *prefix, char *err) {
    char key[KEY_LEN];
    snprintf(key, sizeof key, "%.176s.weight", prefix);
    const pp_tensor_spec *x = expect(w, key, err), *xb;
    const event *e;
    int rc = x ? take(w, EV_CONV, key, &e, err) : PP_EINVAL;
    if (rc) return rc;
    int transposed = strstr(prefix, "convtr") != NULL;
    if (transposed != og_is_op(e->node, "ConvTranspose"))
        return og_bad_node(w->g, e->node, err, transposed ? "a ConvTranspose was expected" : "a Conv was expected");
    if (!same_dims(e->w, x)) return shape_error(w, e, e->w, x, err);
    if ((rc = check_conv_attrs(w, e, x, err))) return rc;
    if ((rc = plan_as(w, e, e->w, x, err))) return rc;
    snprintf(key, sizeof key, "%.176s.bias", prefix);
    xb = want_find(w, key);
    if (!xb != !e->b)
        return og_bad_node(w->g, e->node, err,
                           xb ? "the convolution has no bias; the codec's has one"
                              : "the convolution has a bias; the codec's has none");
    return xb ? plan_as(w, e, e->b, xb, err) : 0;
}

/* Every convolution of the codec whose key starts with prefix, in the codec's order. */
static int convs(walk *w, const char *prefix, char *err) {
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < w->want->n; i++) {
        const char *name = w->want->v[i].name;
        size_t len = strlen(name);
        if (strncmp(name, prefix, plen) || len < 7 || strcmp(name + len - 7, ".weight")) continue;
        char p[KEY_LEN];
        snprintf(p, sizeof p, "%.*s", (int)(len - 7), name);
        int rc = conv(w, p, err);
        if (rc) return rc;
    }
    return 0;
}

/* A projection [out, in] from a MatMul's [in, out] weight (or Gemm's [out, in] with transB). */
static int matmul(walk *w, const char *key, char *err) {
    const pp_tensor_spec *x = expect(w, key, err);
    const event *e;
    int rc = x ? take(w, EV_MATMUL, key, &e, err) : PP_EINVAL;
    if (rc) return rc;
    const pp_onnx_tensor *t = e->w;
    if (x->ndim != 2) return shape_error(w, e, t, x, err);
    int64_t N = x->shape[0], K = x->shape[1];
    if (t->dims[0] != (e->trans_b ? N : K) || t->dims[1] != (e->trans_b ? K : N)) return shape_error(w, e, t, x, err);
    if (e->trans_b) return plan_as(w, e, t, x, err);
    og_tensor *o = og_plan(w->b, key, og_st_dtype(t->dtype), 2, N, K, 0, F_TRANSPOSE, err);
    if (!o) return PP_ENOMEM;
    o->src = t->data, o->src_dtype = t->dtype, o->steps = 1, o->K = K, o->N = N;
    return 0;
}

static int vec(walk *w, const char *key, ev_kind kind, char *err) {
    const pp_tensor_spec *x = expect(w, key, err);
    const event *e;
    int rc = x ? take(w, kind, key, &e, err) : PP_EINVAL;
    return rc ? rc : plan_as(w, e, e->w, x, err);
}

/* A layer norm's PREFIX.weight and PREFIX.bias: one LayerNormalization, or a Mul and an Add. */
static int norm(walk *w, const char *prefix, char *err) {
    char kw[KEY_LEN], kb[KEY_LEN];
    snprintf(kw, sizeof kw, "%.176s.weight", prefix);
    snprintf(kb, sizeof kb, "%.176s.bias", prefix);
    if (w->at >= w->n || w->ev[w->at].kind != EV_NORM) {
        int rc = vec(w, kw, EV_MUL, err);
        return rc ? rc : vec(w, kb, EV_ADD, err);
    }
    const pp_tensor_spec *xw = expect(w, kw, err), *xb = xw ? expect(w, kb, err) : NULL;
    const event *e;
    int rc = xb ? take(w, EV_NORM, kw, &e, err) : PP_EINVAL;
    if (!rc) rc = plan_as(w, e, e->w, xw, err);
    return rc ? rc : plan_as(w, e, e->b, xb, err);
}

static int transformer(walk *w, const char *prefix, char *err) {
    for (int l = 0;; l++) {
        char lp[KEY_LEN], key[KEY_LEN];
        snprintf(lp, sizeof lp, "%.100s.transformer.layers.%d.", prefix, l);
        snprintf(key, sizeof key, "%.150snorm1.weight", lp);
        if (!want_find(w, key)) return 0;
        static const char *const steps[] = {
            "norm1",          "self_attn.in_proj_weight", "self_attn.out_proj.weight", "layer_scale_1.scale", "norm2",
            "linear1.weight", "linear2.weight",           "layer_scale_2.scale"};
        int rc = 0;
        for (size_t s = 0; s < sizeof steps / sizeof *steps && !rc; s++) {
            snprintf(key, sizeof key, "%.150s%s", lp, steps[s]);
            if (!strncmp(steps[s], "norm", 4))
                rc = norm(w, key, err);
            else if (strstr(steps[s], "layer_scale"))
                rc = want_find(w, key) ? vec(w, key, EV_MUL, err) : 0; /* a codec without layer scales */
            else
                rc = matmul(w, key, err);
        }
        if (rc) return rc;
    }
}

/* The codebooks of quantizer.RVQ the codec uses, then past any further levels the graph holds. */
static int codebooks(walk *w, const char *rvq, char *err) {
    for (int l = 0;; l++) {
        char key[KEY_LEN], ukey[KEY_LEN];
        snprintf(key, sizeof key, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", rvq, l);
        snprintf(ukey, sizeof ukey, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", rvq, l);
        const pp_tensor_spec *x = want_find(w, key), *xu = x ? expect(w, ukey, err) : NULL;
        if (!x) break;
        const event *e;
        int rc = xu ? take(w, EV_TABLE, key, &e, err) : PP_EINVAL;
        if (rc) return rc;
        if (!same_dims(e->w, x)) return shape_error(w, e, e->w, x, err);
        if ((rc = plan_as(w, e, e->w, x, err))) return rc;
        if (e->b) {
            if ((rc = plan_as(w, e, e->b, xu, err))) return rc;
            continue;
        }
        og_tensor *o = og_plan(w->b, ukey, ST_F32, 1, x->shape[0], 0, 0, F_ONES, err);
        if (!o) return PP_ENOMEM;
        o->count = x->shape[0];
    }
    while (w->at < w->n && w->ev[w->at].kind == EV_TABLE) w->at++;
    return 0;
}

/* Past the codebook search between the quantizer's input projections. */
static void skip_to_conv(walk *w) {
    while (w->at < w->n && w->ev[w->at].kind != EV_CONV) w->at++;
}

static int encoder(walk *w, char *err) {
    int rc = convs(w, "encoder.model.", err);
    if (!rc) rc = transformer(w, "encoder_transformer", err);
    if (!rc && want_find(w, "downsample.conv.conv.conv.weight")) rc = conv(w, "downsample.conv.conv.conv", err);
    if (!rc) skip_to_conv(w), rc = conv(w, "quantizer.rvq_first.input_proj", err);
    if (!rc) skip_to_conv(w), rc = conv(w, "quantizer.rvq_rest.input_proj", err);
    return rc;
}

static int decoder(walk *w, char *err) {
    int rc = codebooks(w, "rvq_first", err);
    if (!rc) rc = conv(w, "quantizer.rvq_first.output_proj", err);
    if (!rc) rc = codebooks(w, "rvq_rest", err);
    if (!rc) rc = conv(w, "quantizer.rvq_rest.output_proj", err);
    if (!rc && want_find(w, "upsample.convtr.convtr.convtr.weight")) rc = conv(w, "upsample.convtr.convtr.convtr", err);
    if (!rc) rc = transformer(w, "decoder_transformer", err);
    if (!rc) rc = convs(w, "decoder.model.", err);
    if (!rc && w->at < w->n)
        rc = og_bad_node(w->g, w->ev[w->at].node, err, "a weight after the SEANet decoder's last convolution");
    return rc;
}

/* Plans both graphs (an og_plan_fn; ctx: the codec's tensor list), then checks that every tensor
 * the codec reads was found. */
static int plan_codec(onnx_bundle *b, const og_graph *enc, const og_graph *dec, const void *ctx, char *err) {
    const pp_tensor_list *want = ctx;
    const pp_tensor_spec *width = NULL;
    for (size_t i = 0; i < want->n && !width; i++)
        if (strstr(want->v[i].name, "transformer.layers.0.norm1.weight")) width = &want->v[i];
    int64_t dim = width ? width->shape[0] : 0;
    walk we = {.b = b, .want = want}, wd = we;
    int rc = scan(&we, enc, dim, err);
    if (!rc) rc = encoder(&we, err);
    if (!rc) rc = scan(&wd, dec, dim, err);
    if (!rc) rc = decoder(&wd, err);
    free(we.ev);
    free(wd.ev);
    for (size_t i = 0; !rc && i < want->n; i++) {
        size_t k = 0;
        while (k < b->n_outs && strcmp(b->outs[k].name, want->v[i].name)) k++;
        if (k == b->n_outs)
            rc = pp_fail(err, PP_EFORMAT, "%s, %s: no node holds the codec's tensor '%s'", enc->file, dec->file,
                         want->v[i].name);
    }
    if (!rc) PP_INFO("onnx", "%s, %s: %zu codec tensors", enc->file, dec->file, b->n_outs);
    return rc;
}

int pp_onnx_mimi_is(const char *path, char *dir, size_t dir_size) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    struct stat sb;
    if ((strcmp(base, PP_ONNX_MIMI_ENCODER) && strcmp(base, PP_ONNX_MIMI_DECODER)) || stat(path, &sb) ||
        !S_ISREG(sb.st_mode))
        return 0;
    snprintf(dir, dir_size, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    return 1;
}

int pp_onnx_mimi_load(const char *dir, const pp_tensor_list *want, st_tensor **tensors, size_t *count,
                      const void **base, size_t *size, onnx_bundle **out, char *err) {
    og_graph e = {0}, d = {0};
    int rc = og_open(&e, dir, PP_ONNX_MIMI_ENCODER, err);
    if (!rc) rc = og_open(&d, dir, PP_ONNX_MIMI_DECODER, err);
    return og_convert(rc, &e, &d, plan_codec, want, 1, dir, tensors, count, base, size, out, err);
}

int pp_onnx_mimi_open_memory(const void *encoder_buf, size_t encoder_len, const void *decoder_buf, size_t decoder_len,
                             const pp_tensor_list *want, st_tensor **tensors, size_t *count, const void **base,
                             size_t *size, onnx_bundle **out, char *err) {
    og_graph e = {0}, d = {0};
    int rc = og_parse(&e, encoder_buf, encoder_len, PP_ONNX_MIMI_ENCODER, err);
    if (!rc) rc = og_parse(&d, decoder_buf, decoder_len, PP_ONNX_MIMI_DECODER, err);
    return og_convert(rc, &e, &d, plan_codec, want, 0, "codec graphs", tensors, count, base, size, out, err);
}
