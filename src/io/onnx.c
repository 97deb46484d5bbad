#include "io/onnx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"
#include "io/protobuf.h"

/* Field numbers of onnx.proto. */
enum { MODEL_GRAPH = 7 };
enum { GRAPH_NODE = 1, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5, NODE_DOMAIN = 7 };
enum { ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_S = 4, ATTR_T = 5, ATTR_INTS = 8 };
enum {
    TENSOR_DIMS = 1,
    TENSOR_DATA_TYPE = 2,
    TENSOR_FLOAT_DATA = 4,
    TENSOR_NAME = 8,
    TENSOR_RAW_DATA = 9,
    TENSOR_EXTERNAL_DATA = 13,
    TENSOR_DATA_LOCATION = 14
};
enum { ENTRY_KEY = 1, ENTRY_VALUE = 2 };
enum { VALUE_NAME = 1, VALUE_TYPE = 2, TYPE_TENSOR = 1, TENSOR_TYPE_SHAPE = 2, SHAPE_DIM = 1, DIM_VALUE = 1 };

/* Every string and array of a model lives in one chain of blocks, freed together. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} block;

typedef struct external {
    char *location;
    void *map;
    size_t size;
} external;

/* A tensor whose bytes are in an external file, resolved once the graph is read. */
typedef struct pending {
    size_t tensor; /* index into consts */
    char *location;
    uint64_t offset, length;
    int has_length;
} pending;

struct pp_onnx_model {
    char *label;
    char *dir; /* the model's folder, for external data */
    void *map;
    size_t map_size;
    block *blocks;
    pp_onnx_node *nodes;
    size_t n_nodes, cap_nodes;
    pp_onnx_tensor *consts;
    size_t n_consts, cap_consts;
    pp_onnx_value *inputs;
    size_t n_inputs, cap_inputs;
    pending *pend;
    size_t n_pend, cap_pend;
    external *ext;
    size_t n_ext;
};

static void *arena(pp_onnx_model *m, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!m->blocks || m->blocks->cap - m->blocks->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        block *b = malloc(sizeof(*b) + cap);
        if (!b) return NULL;
        b->next = m->blocks, b->used = 0, b->cap = cap;
        m->blocks = b;
    }
    void *p = m->blocks->data + m->blocks->used;
    m->blocks->used += n;
    memset(p, 0, n);
    return p;
}

static const char *str(pp_onnx_model *m, const pp_pb_field *f) {
    char *s = arena(m, f->len + 1);
    if (s) memcpy(s, f->bytes, f->len);
    return s;
}

/* Grows a malloc'd array to hold one more element. */
static int grow(void **a, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*a, nc * elem);
    if (!p) return -1;
    memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
    *a = p, *cap = nc;
    return 0;
}

static int oom(const pp_onnx_model *m, char *err) { return pp_fail(err, PP_ENOMEM, "%s: out of memory", m->label); }

int pp_onnx_dtype_size(int dtype) {
    switch (dtype) {
    case PP_ONNX_FLOAT:
    case PP_ONNX_INT32: return 4;
    case PP_ONNX_UINT8:
    case PP_ONNX_INT8: return 1;
    case PP_ONNX_INT64: return 8;
    case PP_ONNX_FLOAT16:
    case PP_ONNX_BFLOAT16: return 2;
    default: return 0;
    }
}

static int packed_or_single(pp_pb_field *f, uint64_t *vals, int *n, int max) {
    if (f->wire == PP_PB_VARINT) {
        if (*n >= max) return -1;
        vals[(*n)++] = f->u;
        return 0;
    }
    if (f->wire != PP_PB_BYTES) return -1;
    pp_pb c = pp_pb_open(f->bytes, f->len);
    uint64_t v;
    int rc;
    while ((rc = pp_pb_varint(&c, &v)) == 1) {
        if (*n >= max) return -1;
        vals[(*n)++] = v;
    }
    return rc;
}

static int parse_tensor(pp_onnx_model *m, const uint8_t *buf, size_t len, const char *owner, char *err) {
    if (grow((void **)&m->consts, &m->cap_consts, m->n_consts, sizeof(*m->consts))) return oom(m, err);
    pp_onnx_tensor *t = &m->consts[m->n_consts];
    memset(t, 0, sizeof(*t));
    t->name = owner ? owner : "";
    pending ext = {.tensor = m->n_consts};
    int external = 0, have_data = 0;
    uint64_t dims[PP_ONNX_MAX_DIMS];
    int nd = 0;
    pp_pb c = pp_pb_open(buf, len);
    pp_pb_field f;
    int rc;
    while ((rc = pp_pb_next(&c, &f, m->label, err)) == 1) {
        switch (f.number) {
        case TENSOR_DIMS:
            if (packed_or_single(&f, dims, &nd, PP_ONNX_MAX_DIMS))
                return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': bad dims or more than %d", m->label, t->name,
                               PP_ONNX_MAX_DIMS);
            break;
        case TENSOR_DATA_TYPE: t->dtype = (int)f.u; break;
        case TENSOR_NAME:
            if (f.wire == PP_PB_BYTES && !owner && !(t->name = str(m, &f))) return oom(m, err);
            break;
        case TENSOR_RAW_DATA:
        case TENSOR_FLOAT_DATA:
            if (f.wire != PP_PB_BYTES) break; /* a single unpacked float: too small to matter */
            t->data = f.bytes, t->nbytes = f.len, have_data = 1;
            if (f.number == TENSOR_FLOAT_DATA && t->dtype && t->dtype != PP_ONNX_FLOAT) t->data = NULL;
            break;
        case TENSOR_DATA_LOCATION: external = f.u == 1; break;
        case TENSOR_EXTERNAL_DATA: {
            if (f.wire != PP_PB_BYTES) break;
            pp_pb e = pp_pb_open(f.bytes, f.len);
            pp_pb_field kv;
            const char *key = NULL, *value = NULL;
            while ((rc = pp_pb_next(&e, &kv, m->label, err)) == 1) {
                if (kv.wire != PP_PB_BYTES) continue;
                if (kv.number == ENTRY_KEY && !(key = str(m, &kv))) return oom(m, err);
                if (kv.number == ENTRY_VALUE && !(value = str(m, &kv))) return oom(m, err);
            }
            if (rc < 0) return rc;
            if (!key || !value) break;
            char *end = NULL;
            if (!strcmp(key, "location")) {
                ext.location = (char *)value;
            } else if (!strcmp(key, "offset") || !strcmp(key, "length")) {
                errno = 0;
                uint64_t v = strtoull(value, &end, 10);
                if (errno || !*value || *end || value[0] == '-')
                    return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': external-data %s '%s' is not a number", m->label,
                                   t->name, key, value);
                if (key[0] == 'o')
                    ext.offset = v;
                else
                    ext.length = v, ext.has_length = 1;
            }
            break;
        }
        default: break;
        }
    }
    if (rc < 0) return rc;
    t->ndim = nd;
    t->numel = 1;
    for (int i = 0; i < nd; i++) {
        if (dims[i] > ((uint64_t)1 << 40))
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': dimension %d is %llu", m->label, t->name, i,
                           (unsigned long long)dims[i]);
        t->dims[i] = (int64_t)dims[i];
        if (t->dims[i] && t->numel > ((int64_t)1 << 42) / t->dims[i])
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': too many elements", m->label, t->name);
        t->numel *= t->dims[i];
    }
    if (external) {
        if (!ext.location)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': external data without a location", m->label, t->name);
        t->data = NULL, t->nbytes = 0;
        if (grow((void **)&m->pend, &m->cap_pend, m->n_pend, sizeof(*m->pend))) return oom(m, err);
        m->pend[m->n_pend++] = ext;
    } else if (have_data && t->data) {
        int es = pp_onnx_dtype_size(t->dtype);
        if (es && t->nbytes != (size_t)t->numel * (size_t)es)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': %zu bytes of data for %lld elements of type %d", m->label,
                           t->name, t->nbytes, (long long)t->numel, t->dtype);
    }
    m->n_consts++;
    return 0;
}

static int parse_node(pp_onnx_model *m, const uint8_t *buf, size_t len, char *err) {
    const char **in = NULL, **out = NULL;
    size_t n_in = 0, cap_in = 0, n_out = 0, cap_out = 0;
    pp_onnx_attr attrs[32];
    int n_attr = 0;
    pp_onnx_node node = {.name = "", .op_type = "", .domain = ""};
    const uint8_t *value_tensor = NULL;
    size_t value_len = 0;
    pp_pb c = pp_pb_open(buf, len);
    pp_pb_field f;
    int rc;
    while ((rc = pp_pb_next(&c, &f, m->label, err)) == 1) {
        if (f.wire != PP_PB_BYTES) continue;
        const char *s = NULL;
        if (f.number != NODE_ATTRIBUTE && !(s = str(m, &f))) goto nomem;
        switch (f.number) {
        case NODE_INPUT:
            if (grow((void **)&in, &cap_in, n_in, sizeof(*in))) goto nomem;
            in[n_in++] = s;
            break;
        case NODE_OUTPUT:
            if (grow((void **)&out, &cap_out, n_out, sizeof(*out))) goto nomem;
            out[n_out++] = s;
            break;
        case NODE_NAME: node.name = s; break;
        case NODE_OP_TYPE: node.op_type = s; break;
        case NODE_DOMAIN: node.domain = s; break;
        case NODE_ATTRIBUTE: {
            pp_onnx_attr a = {.name = ""};
            pp_pb ac = pp_pb_open(f.bytes, f.len);
            pp_pb_field af;
            while ((rc = pp_pb_next(&ac, &af, m->label, err)) == 1) {
                if (af.number == ATTR_NAME && af.wire == PP_PB_BYTES && !(a.name = str(m, &af))) goto nomem;
                if (af.number == ATTR_I && af.wire == PP_PB_VARINT) a.i = (int64_t)af.u, a.has_i = 1;
                if (af.number == ATTR_F && af.wire == PP_PB_FIXED32) {
                    uint32_t u = (uint32_t)af.u;
                    memcpy(&a.f, &u, 4);
                    a.has_f = 1;
                }
                if (af.number == ATTR_T && af.wire == PP_PB_BYTES) value_tensor = af.bytes, value_len = af.len;
                if (af.number == ATTR_S && af.wire == PP_PB_BYTES && !(a.s = str(m, &af))) goto nomem;
                /* (int64_t and uint64_t may alias) an unreadable list is kept as such: a reader
                 * that needs it refuses the node */
                if (af.number == ATTR_INTS && a.n_ints >= 0 &&
                    packed_or_single(&af, (uint64_t *)a.ints, &a.n_ints, PP_ONNX_MAX_DIMS))
                    a.n_ints = -1;
            }
            if (rc < 0) goto fail;
            if (n_attr < (int)(sizeof attrs / sizeof *attrs)) attrs[n_attr++] = a;
            break;
        }
        default: break;
        }
    }
    if (rc < 0) goto fail;
    if (grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes, sizeof(*m->nodes))) goto nomem;
    node.n_in = (int)n_in, node.n_out = (int)n_out, node.n_attr = n_attr;
    node.in = arena(m, (n_in + 1) * sizeof(*in));
    node.out = arena(m, (n_out + 1) * sizeof(*out));
    node.attr = arena(m, (size_t)(n_attr + 1) * sizeof(*attrs));
    if (!node.in || !node.out || !node.attr) goto nomem;
    if (n_in) memcpy(node.in, in, n_in * sizeof(*in));
    if (n_out) memcpy(node.out, out, n_out * sizeof(*out));
    if (n_attr) memcpy(node.attr, attrs, (size_t)n_attr * sizeof(*attrs));
    m->nodes[m->n_nodes++] = node;
    free(in);
    free(out);
    /* A Constant's value is a constant tensor named by the node's output. */
    if (!strcmp(node.op_type, "Constant") && value_tensor && n_out == 1)
        return parse_tensor(m, value_tensor, value_len, node.out[0], err);
    return 0;
nomem:
    rc = oom(m, err);
fail:
    free(in);
    free(out);
    return rc;
}

static int parse_value(pp_onnx_model *m, const uint8_t *buf, size_t len, char *err) {
    if (grow((void **)&m->inputs, &m->cap_inputs, m->n_inputs, sizeof(*m->inputs))) return oom(m, err);
    pp_onnx_value *v = &m->inputs[m->n_inputs];
    memset(v, 0, sizeof(*v));
    v->name = "";
    pp_pb c = pp_pb_open(buf, len);
    pp_pb_field f;
    int rc;
    while ((rc = pp_pb_next(&c, &f, m->label, err)) == 1) {
        if (f.wire != PP_PB_BYTES) continue;
        if (f.number == VALUE_NAME && !(v->name = str(m, &f))) return oom(m, err);
        if (f.number != VALUE_TYPE) continue;
        /* TypeProto.tensor_type.shape.dim[].dim_value: descend one level at a time */
        const uint32_t path[] = {TYPE_TENSOR, TENSOR_TYPE_SHAPE};
        pp_pb_field g = f;
        int found = 1;
        for (int level = 0; level < 2 && found; level++) {
            pp_pb d = pp_pb_open(g.bytes, g.len);
            found = 0;
            pp_pb_field h;
            while ((rc = pp_pb_next(&d, &h, m->label, err)) == 1)
                if (h.number == path[level] && h.wire == PP_PB_BYTES) g = h, found = 1;
            if (rc < 0) return rc;
        }
        if (!found) continue;
        pp_pb s = pp_pb_open(g.bytes, g.len);
        pp_pb_field dim;
        while ((rc = pp_pb_next(&s, &dim, m->label, err)) == 1) {
            if (dim.number != SHAPE_DIM || dim.wire != PP_PB_BYTES) continue;
            if (v->ndim >= PP_ONNX_MAX_DIMS)
                return pp_fail(err, PP_EFORMAT, "%s: input '%s' has more than %d dimensions", m->label, v->name,
                               PP_ONNX_MAX_DIMS);
            int64_t value = -1;
            pp_pb dc = pp_pb_open(dim.bytes, dim.len);
            pp_pb_field df;
            while ((rc = pp_pb_next(&dc, &df, m->label, err)) == 1)
                if (df.number == DIM_VALUE && df.wire == PP_PB_VARINT && df.u < ((uint64_t)1 << 40))
                    value = (int64_t)df.u;
            if (rc < 0) return rc;
            v->dims[v->ndim++] = value;
        }
        if (rc < 0) return rc;
    }
    if (rc < 0) return rc;
    m->n_inputs++;
    return 0;
}

static int parse_model(pp_onnx_model *m, const uint8_t *buf, size_t len, char *err) {
    pp_pb c = pp_pb_open(buf, len);
    pp_pb_field f;
    int rc, graphs = 0;
    while ((rc = pp_pb_next(&c, &f, m->label, err)) == 1) {
        if (f.number != MODEL_GRAPH || f.wire != PP_PB_BYTES) continue;
        if (graphs++) return pp_fail(err, PP_EFORMAT, "%s: more than one graph", m->label);
        pp_pb g = pp_pb_open(f.bytes, f.len);
        pp_pb_field gf;
        while ((rc = pp_pb_next(&g, &gf, m->label, err)) == 1) {
            if (gf.wire != PP_PB_BYTES) continue;
            if (gf.number == GRAPH_NODE) rc = parse_node(m, gf.bytes, gf.len, err);
            if (gf.number == GRAPH_INITIALIZER) rc = parse_tensor(m, gf.bytes, gf.len, NULL, err);
            if (gf.number == GRAPH_INPUT) rc = parse_value(m, gf.bytes, gf.len, err);
            if (rc < 0) return rc;
        }
        if (rc < 0) return rc;
    }
    if (rc < 0) return rc;
    if (!graphs) return pp_fail(err, PP_EFORMAT, "%s: no graph (not an ONNX model?)", m->label);
    return 0;
}

static int resolve_external(pp_onnx_model *m, char *err) {
    for (size_t i = 0; i < m->n_pend; i++) {
        pending *p = &m->pend[i];
        pp_onnx_tensor *t = &m->consts[p->tensor];
        const char *loc = p->location;
        if (!m->dir)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' names external data '%s' (no folder to read it from)",
                           m->label, t->name, loc);
        if (!*loc || loc[0] == '/' || strstr(loc, "..") || strchr(loc, '\\'))
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': external location '%s' leaves the model's folder",
                           m->label, t->name, loc);
        external *e = NULL;
        for (size_t k = 0; k < m->n_ext && !e; k++)
            if (!strcmp(m->ext[k].location, loc)) e = &m->ext[k];
        if (!e) {
            external *grown = realloc(m->ext, (m->n_ext + 1) * sizeof(*m->ext));
            if (!grown) return oom(m, err);
            m->ext = grown;
            e = &m->ext[m->n_ext];
            memset(e, 0, sizeof(*e));
            size_t n = strlen(m->dir) + strlen(loc) + 2;
            char *path = malloc(n);
            if (!path) return oom(m, err);
            snprintf(path, n, "%s/%s", m->dir, loc);
            int rc = pp_file_map(path, &e->map, &e->size, err);
            free(path);
            if (rc) { /* which tensor of which graph named the file */
                char inner[PP_ERR_LEN];
                snprintf(inner, sizeof inner, "%s", err ? err : "");
                return pp_fail(err, rc, "%s: tensor '%s': external data: %s", m->label, t->name, inner);
            }
            e->location = strdup(loc);
            m->n_ext++;
            if (!e->location) return oom(m, err);
        }
        int es = pp_onnx_dtype_size(t->dtype);
        uint64_t want = es ? (uint64_t)t->numel * (uint64_t)es : p->length;
        if (p->has_length && p->length != want)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': external length %llu, its type and shape need %llu",
                           m->label, t->name, (unsigned long long)p->length, (unsigned long long)want);
        if (p->offset > e->size || want > e->size - p->offset)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': bytes %llu..%llu are past the end of %s (%zu bytes)",
                           m->label, t->name, (unsigned long long)p->offset, (unsigned long long)(p->offset + want),
                           loc, e->size);
        t->data = (const uint8_t *)e->map + p->offset;
        t->nbytes = (size_t)want;
    }
    return 0;
}

static int new_model(const char *label, pp_onnx_model **out, char *err) {
    pp_onnx_model *m = calloc(1, sizeof(*m));
    if (!m || !(m->label = strdup(label))) {
        free(m);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    *out = m;
    return 0;
}

static int cmp_const_name(const void *a, const void *b) {
    return strcmp((*(const pp_onnx_tensor *const *)a)->name, (*(const pp_onnx_tensor *const *)b)->name);
}

/* A name given to two constants (initializers, Constant node outputs) is an invalid graph that
 * ONNX Runtime refuses; a reader taking the first would read whichever the exporter wrote first. */
static int check_unique_constants(pp_onnx_model *m, char *err) {
    const pp_onnx_tensor **sorted = malloc((m->n_consts ? m->n_consts : 1) * sizeof *sorted);
    if (!sorted) return oom(m, err);
    for (size_t i = 0; i < m->n_consts; i++) sorted[i] = &m->consts[i];
    qsort(sorted, m->n_consts, sizeof *sorted, cmp_const_name);
    int rc = 0;
    for (size_t i = 1; i < m->n_consts && !rc; i++)
        if (*sorted[i]->name && !strcmp(sorted[i - 1]->name, sorted[i]->name))
            rc = pp_fail(err, PP_EFORMAT, "%s: two constants are named '%s' (initializers and Constant outputs must "
                         "be named once)", m->label, sorted[i]->name);
    free(sorted);
    return rc;
}

static int finish(pp_onnx_model *m, const void *buf, size_t len, pp_onnx_model **out, char *err) {
    int rc = parse_model(m, buf, len, err);
    if (!rc) rc = check_unique_constants(m, err);
    if (!rc) rc = resolve_external(m, err);
    if (rc) {
        pp_onnx_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int pp_onnx_parse(const void *buf, size_t len, const char *label, pp_onnx_model **out, char *err) {
    *out = NULL;
    pp_onnx_model *m = NULL;
    int rc = new_model(label ? label : "<memory>", &m, err);
    return rc ? rc : finish(m, buf, len, out, err);
}

int pp_onnx_open(const char *path, pp_onnx_model **out, char *err) {
    *out = NULL;
    pp_onnx_model *m = NULL;
    int rc = new_model(path, &m, err);
    if (rc) return rc;
    const char *slash = strrchr(path, '/');
    m->dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    if (!m->dir) {
        pp_onnx_close(m);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    if ((rc = pp_file_map(path, &m->map, &m->map_size, err))) {
        pp_onnx_close(m);
        return rc;
    }
    return finish(m, m->map, m->map_size, out, err);
}

void pp_onnx_close(pp_onnx_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_ext; i++) {
        pp_file_unmap(m->ext[i].map, m->ext[i].size);
        free(m->ext[i].location);
    }
    pp_file_unmap(m->map, m->map_size);
    while (m->blocks) {
        block *next = m->blocks->next;
        free(m->blocks);
        m->blocks = next;
    }
    free(m->ext);
    free(m->nodes);
    free(m->consts);
    free(m->inputs);
    free(m->pend);
    free(m->dir);
    free(m->label);
    free(m);
}

const char *pp_onnx_label(const pp_onnx_model *m) { return m->label; }
size_t pp_onnx_node_count(const pp_onnx_model *m) { return m->n_nodes; }
const pp_onnx_node *pp_onnx_node_at(const pp_onnx_model *m, size_t i) { return i < m->n_nodes ? &m->nodes[i] : NULL; }
size_t pp_onnx_input_count(const pp_onnx_model *m) { return m->n_inputs; }
const pp_onnx_value *pp_onnx_input_at(const pp_onnx_model *m, size_t i) {
    return i < m->n_inputs ? &m->inputs[i] : NULL;
}

const pp_onnx_tensor *pp_onnx_constant(const pp_onnx_model *m, const char *name) {
    if (!name || !*name) return NULL;
    for (size_t i = 0; i < m->n_consts; i++)
        if (!strcmp(m->consts[i].name, name)) return &m->consts[i];
    return NULL;
}

const pp_onnx_attr *pp_onnx_attr_find(const pp_onnx_node *n, const char *name) {
    for (int i = 0; i < n->n_attr; i++)
        if (!strcmp(n->attr[i].name, name)) return &n->attr[i];
    return NULL;
}
