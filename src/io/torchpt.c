/* torchpt: see torchpt.h. The pickle machine keeps every value in fixed-size pools indexed
 * by uint32, so hostile input can exhaust a pool (refused) but never the heap. */
#include "io/torchpt.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"
#include "io/zip.h"

#define MAX_FILE ((size_t)2 << 30)
#define MAX_PICKLE (1u << 20)
#define MAX_VALS 4096
#define MAX_STACK 256
#define MAX_MEMO 1024
#define MAX_ITEMS 8192
#define MAX_TENSORS 64
#define MAX_STR 256
#define MAX_DIM_SIZE ((int64_t)1 << 40)
#define MAX_SAVE_NUMEL ((int64_t)1 << 32) /* the writer emits no zip64 records */

/* ---- storage classes ---- */

static const struct {
    const char *name;
    st_dtype dtype;
    int size;
} storage_types[] = {
    {"BFloat16Storage", ST_BF16, 2}, {"HalfStorage", ST_F16, 2},  {"FloatStorage", ST_F32, 4},
    {"DoubleStorage", ST_F64, 8},    {"LongStorage", ST_I64, 8},  {"IntStorage", ST_I32, 4},
    {"ShortStorage", ST_I16, 2},     {"CharStorage", ST_I8, 1},   {"ByteStorage", ST_U8, 1},
    {"BoolStorage", ST_BOOL, 1},
};
#define N_STORAGE_TYPES (sizeof storage_types / sizeof storage_types[0])

static int storage_index(st_dtype dt) {
    for (size_t i = 0; i < N_STORAGE_TYPES; i++)
        if (storage_types[i].dtype == dt) return (int)i;
    return -1;
}

/* ---- pickle machine ---- */

typedef enum { V_MARK, V_BOOL, V_INT, V_STR, V_TUPLE, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR, V_ODICT } vkind;
enum { G_REBUILD, G_ODICT, G_STORAGE };

typedef struct pk_val {
    vkind kind;
    int64_t i;     /* V_INT, V_BOOL */
    uint32_t a, b; /* STR: offset, length; TUPLE: first item, count; GLOBAL: G_*, storage type;
                      STORAGE / TENSOR: record index */
} pk_val;

typedef struct pk_storage {
    int type; /* index into storage_types */
    uint32_t key_off, key_len;
    int64_t numel;
} pk_storage;

typedef struct pk_tensor {
    uint32_t storage;
    int64_t offset;
    int ndim;
    int64_t shape[ST_MAX_DIMS], stride[ST_MAX_DIMS];
} pk_tensor;

typedef struct pk {
    const uint8_t *p;
    size_t len, pos, op_pos;
    const char *label;
    char *err;
    pk_val vals[MAX_VALS];
    uint32_t nvals;
    uint32_t stack[MAX_STACK], sp;
    uint32_t memo[MAX_MEMO];
    uint32_t items[MAX_ITEMS], nitems;
    pk_storage storages[MAX_TENSORS];
    uint32_t nstorages;
    pk_tensor tensors[MAX_TENSORS];
    uint32_t ntensors;
    uint32_t dict_keys[MAX_TENSORS], dict_tensors[MAX_TENSORS], ndict;
    int have_dict;
} pk;

static int bad(pk *m, const char *what) {
    return pp_fail(m->err, PP_EFORMAT, "%s: data.pkl byte %zu: %s", m->label, m->op_pos, what);
}

static int new_val(pk *m, vkind kind, uint32_t *out) {
    if (m->nvals >= MAX_VALS) return bad(m, "too many pickle values");
    memset(&m->vals[m->nvals], 0, sizeof m->vals[0]);
    m->vals[m->nvals].kind = kind;
    *out = m->nvals++;
    return 0;
}

static int push(pk *m, uint32_t v) {
    if (m->sp >= MAX_STACK) return bad(m, "pickle stack too deep");
    m->stack[m->sp++] = v;
    return 0;
}

static int push_new(pk *m, vkind kind, int64_t i, uint32_t a, uint32_t b) {
    uint32_t v = 0;
    int rc = new_val(m, kind, &v);
    if (rc) return rc;
    m->vals[v].i = i;
    m->vals[v].a = a;
    m->vals[v].b = b;
    return push(m, v);
}

/* Pops one value that must not be a MARK. */
static int pop(pk *m, const pk_val **out) {
    if (m->sp == 0 || m->vals[m->stack[m->sp - 1]].kind == V_MARK) return bad(m, "pickle stack underflow");
    *out = &m->vals[m->stack[--m->sp]];
    return 0;
}

/* Pops everything above the topmost MARK and the MARK: *first is the stack index of the
 * first popped value, *n their count (still readable at m->stack[*first..]). */
static int pop_mark(pk *m, uint32_t *first, uint32_t *n) {
    uint32_t i = m->sp;
    while (i > 0 && m->vals[m->stack[i - 1]].kind != V_MARK) i--;
    if (i == 0) return bad(m, "no MARK on the pickle stack");
    *first = i;
    *n = m->sp - i;
    m->sp = i - 1;
    return 0;
}

static int need(pk *m, size_t n) {
    if (m->len - m->pos < n) return bad(m, "pickle truncated inside an opcode");
    return 0;
}

static uint32_t rd_le(const uint8_t *p, int n) {
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int make_tuple(pk *m, uint32_t first, uint32_t n) {
    if (MAX_ITEMS - m->nitems < n) return bad(m, "too many tuple items");
    uint32_t start = m->nitems;
    memcpy(&m->items[start], &m->stack[first], n * sizeof m->items[0]);
    m->nitems += n;
    return push_new(m, V_TUPLE, 0, start, n);
}

static const pk_val *item(const pk *m, const pk_val *tuple, uint32_t k) { return &m->vals[m->items[tuple->a + k]]; }

static int str_is(const pk *m, const pk_val *v, const char *s) {
    return v->kind == V_STR && v->b == strlen(s) && memcmp(m->p + v->a, s, v->b) == 0;
}

/* GLOBAL "module\nname\n": only the three kinds torch uses for tensors are known. */
static int op_global(pk *m) {
    const uint8_t *s = m->p + m->pos, *nl1 = memchr(s, '\n', m->len - m->pos);
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(m->p + m->len - nl1 - 1)) : NULL;
    if (!nl2 || nl2 - s > 128) return bad(m, "GLOBAL without two short newline-terminated names");
    int ml = (int)(nl1 - s), nl = (int)(nl2 - nl1 - 1);
    const char *mod = (const char *)s, *name = (const char *)nl1 + 1;
    m->pos += (size_t)(nl2 - s) + 1;
#define IS(str, len, lit) ((len) == (int)sizeof(lit) - 1 && memcmp(str, lit, sizeof(lit) - 1) == 0)
    if (IS(mod, ml, "torch._utils") && IS(name, nl, "_rebuild_tensor_v2")) return push_new(m, V_GLOBAL, 0, G_REBUILD, 0);
    if (IS(mod, ml, "collections") && IS(name, nl, "OrderedDict")) return push_new(m, V_GLOBAL, 0, G_ODICT, 0);
    if (IS(mod, ml, "torch"))
        for (uint32_t i = 0; i < N_STORAGE_TYPES; i++)
            if (nl == (int)strlen(storage_types[i].name) && memcmp(name, storage_types[i].name, (size_t)nl) == 0)
                return push_new(m, V_GLOBAL, 0, G_STORAGE, i);
#undef IS
    return pp_fail(m->err, PP_EUNSUPPORTED, "%s: data.pkl byte %zu: global '%.*s.%.*s' is not allowed in a tensor file",
                   m->label, m->op_pos, ml, mod, nl, name);
}

/* BINPERSID on ('storage', <StorageClass>, key, location, numel). */
static int op_persid(pk *m) {
    const pk_val *t = NULL;
    int rc = pop(m, &t);
    if (rc) return rc;
    if (t->kind != V_TUPLE || t->b != 5) return bad(m, "BINPERSID needs a 5-tuple ('storage', class, key, location, numel)");
    const pk_val *cls = item(m, t, 1), *key = item(m, t, 2), *loc = item(m, t, 3), *numel = item(m, t, 4);
    if (!str_is(m, item(m, t, 0), "storage") || cls->kind != V_GLOBAL || cls->a != G_STORAGE || key->kind != V_STR ||
        loc->kind != V_STR || numel->kind != V_INT || numel->i < 0)
        return bad(m, "BINPERSID tuple is not ('storage', <torch storage class>, key, location, numel)");
    if (key->b == 0 || key->b > 32) return bad(m, "storage key is empty or too long");
    for (uint32_t i = 0; i < key->b; i++) {
        char c = (char)m->p[key->a + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
            return bad(m, "storage key holds characters other than letters, digits and '_'");
    }
    if (m->nstorages >= MAX_TENSORS) return bad(m, "too many storages");
    pk_storage *s = &m->storages[m->nstorages];
    s->type = (int)cls->b;
    s->key_off = key->a;
    s->key_len = key->b;
    s->numel = numel->i;
    return push_new(m, V_STORAGE, 0, m->nstorages++, 0);
}

/* The int tuple of a shape or stride into dst; n must match *ndim when *ndim >= 0. */
static int int_tuple(pk *m, const pk_val *t, int64_t *dst, int *ndim, const char *what) {
    char msg[96];
    if (t->kind != V_TUPLE || t->b > ST_MAX_DIMS || (*ndim >= 0 && (int)t->b != *ndim)) {
        snprintf(msg, sizeof msg, "tensor %s is not a tuple of at most %d ints matching the shape", what, ST_MAX_DIMS);
        return bad(m, msg);
    }
    for (uint32_t k = 0; k < t->b; k++) {
        const pk_val *v = item(m, t, k);
        if (v->kind != V_INT || v->i < 0 || v->i > MAX_DIM_SIZE) {
            snprintf(msg, sizeof msg, "tensor %s entry %u is not an int in [0, 2^40]", what, k);
            return bad(m, msg);
        }
        dst[k] = v->i;
    }
    *ndim = (int)t->b;
    return 0;
}

/* REDUCE: OrderedDict() or _rebuild_tensor_v2(storage, offset, shape, stride, requires_grad, hooks). */
static int op_reduce(pk *m) {
    const pk_val *args = NULL, *fn = NULL;
    int rc = pop(m, &args);
    if (rc == 0) rc = pop(m, &fn);
    if (rc) return rc;
    if (fn->kind != V_GLOBAL || args->kind != V_TUPLE) return bad(m, "REDUCE needs an allowed global and an argument tuple");
    if (fn->a == G_ODICT) {
        if (args->b != 0) return bad(m, "OrderedDict() with arguments (non-empty backward hooks) is not supported");
        return push_new(m, V_ODICT, 0, 0, 0);
    }
    if (fn->a != G_REBUILD) return bad(m, "REDUCE calls a storage class (only tensors and OrderedDict are rebuilt)");
    if (args->b != 6) return bad(m, "_rebuild_tensor_v2 needs 6 arguments (tensor metadata is not supported)");
    const pk_val *st = item(m, args, 0), *off = item(m, args, 1), *grad = item(m, args, 4), *hooks = item(m, args, 5);
    if (st->kind != V_STORAGE || off->kind != V_INT || off->i < 0 || grad->kind != V_BOOL || hooks->kind != V_ODICT)
        return bad(m, "_rebuild_tensor_v2 arguments are not (storage, offset, shape, stride, bool, OrderedDict())");
    if (m->ntensors >= MAX_TENSORS) return bad(m, "too many tensors");
    pk_tensor *t = &m->tensors[m->ntensors];
    t->storage = st->a;
    t->offset = off->i;
    t->ndim = -1;
    rc = int_tuple(m, item(m, args, 2), t->shape, &t->ndim, "shape");
    if (rc == 0) rc = int_tuple(m, item(m, args, 3), t->stride, &t->ndim, "stride");
    if (rc) return rc;
    return push_new(m, V_TENSOR, 0, m->ntensors++, 0);
}

/* SETITEM / SETITEMS: key/value pairs at stack[first..first+n) into the dict below them. */
static int set_items(pk *m, uint32_t first, uint32_t n) {
    if (n % 2 != 0) return bad(m, "SETITEMS with an odd number of values");
    if (m->sp == 0 || m->vals[m->stack[m->sp - 1]].kind != V_DICT) return bad(m, "SETITEMS without a dict below");
    for (uint32_t k = 0; k < n; k += 2) {
        const pk_val *key = &m->vals[m->stack[first + k]], *val = &m->vals[m->stack[first + k + 1]];
        if (key->kind != V_STR || key->b > MAX_STR || memchr(m->p + key->a, 0, key->b))
            return bad(m, "dict key is not a short string");
        if (val->kind != V_TENSOR) return bad(m, "dict value is not a tensor");
        for (uint32_t j = 0; j < m->ndict; j++) {
            const pk_val *old = &m->vals[m->dict_keys[j]];
            if (old->b == key->b && memcmp(m->p + old->a, m->p + key->a, key->b) == 0) return bad(m, "duplicate dict key");
        }
        if (m->ndict >= MAX_TENSORS) return bad(m, "too many dict entries");
        m->dict_keys[m->ndict] = m->stack[first + k];
        m->dict_tensors[m->ndict++] = val->a;
    }
    return 0;
}

static int memo_index(pk *m, int width, uint32_t *idx) {
    int rc = need(m, (size_t)width);
    if (rc) return rc;
    *idx = rd_le(m->p + m->pos, width);
    m->pos += (size_t)width;
    if (*idx >= MAX_MEMO) return bad(m, "memo index too large");
    return 0;
}

/* Runs one opcode; *done is set by STOP. */
static int step(pk *m, int *done) {
    uint32_t v = 0, first = 0, n = 0;
    const pk_val *x = NULL;
    int rc;
    m->op_pos = m->pos;
    uint8_t op = m->p[m->pos++];
    switch (op) {
    case 0x80: /* PROTO */
        if ((rc = need(m, 1))) return rc;
        if (m->op_pos != 0 || m->p[m->pos] != 2) return bad(m, "PROTO is not the first opcode or not protocol 2");
        m->pos++;
        return 0;
    case '}': /* EMPTY_DICT */
        if (m->have_dict) return bad(m, "more than one dict (nested containers are not supported)");
        m->have_dict = 1;
        return push_new(m, V_DICT, 0, 0, 0);
    case '(': return push_new(m, V_MARK, 0, 0, 0);
    case ')': return make_tuple(m, 0, 0);
    case 0x85: case 0x86: case 0x87: /* TUPLE1..3 */
        n = (uint32_t)(op - 0x84);
        if (m->sp < n) return bad(m, "pickle stack underflow");
        for (uint32_t k = m->sp - n; k < m->sp; k++)
            if (m->vals[m->stack[k]].kind == V_MARK) return bad(m, "MARK inside a TUPLEn");
        m->sp -= n;
        return make_tuple(m, m->sp, n);
    case 't': /* TUPLE */
        if ((rc = pop_mark(m, &first, &n))) return rc;
        return make_tuple(m, first, n);
    case 'X': /* BINUNICODE */
        if ((rc = need(m, 4))) return rc;
        n = rd_le(m->p + m->pos, 4);
        m->pos += 4;
        if (n > MAX_STR || (rc = need(m, n))) return rc ? rc : bad(m, "string too long");
        rc = push_new(m, V_STR, 0, (uint32_t)m->pos, n);
        m->pos += n;
        return rc;
    case 'K': case 'M': case 'J': /* BININT1, BININT2, BININT */
        n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        if ((rc = need(m, n))) return rc;
        v = rd_le(m->p + m->pos, (int)n);
        m->pos += n;
        return push_new(m, V_INT, op == 'J' ? (int64_t)(int32_t)v : (int64_t)v, 0, 0);
    case 0x8a: { /* LONG1: n-byte two's complement */
        if ((rc = need(m, 1))) return rc;
        n = m->p[m->pos++];
        if (n > 8) return bad(m, "LONG1 integer wider than 64 bits");
        if ((rc = need(m, n))) return rc;
        uint64_t u = 0;
        for (uint32_t k = n; k > 0; k--) u = u << 8 | m->p[m->pos + k - 1];
        if (n > 0 && n < 8 && (m->p[m->pos + n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n);
        m->pos += n;
        return push_new(m, V_INT, (int64_t)u, 0, 0);
    }
    case 0x88: case 0x89: return push_new(m, V_BOOL, op == 0x88, 0, 0); /* NEWTRUE, NEWFALSE */
    case 'c': return op_global(m);
    case 'Q': return op_persid(m);
    case 'R': return op_reduce(m);
    case 'q': case 'r': /* BINPUT, LONG_BINPUT */
        if ((rc = memo_index(m, op == 'q' ? 1 : 4, &v))) return rc;
        if (m->sp == 0 || m->vals[m->stack[m->sp - 1]].kind == V_MARK) return bad(m, "BINPUT without a value on the stack");
        m->memo[v] = m->stack[m->sp - 1];
        return 0;
    case 'h': case 'j': /* BINGET, LONG_BINGET */
        if ((rc = memo_index(m, op == 'h' ? 1 : 4, &v))) return rc;
        if (m->memo[v] == UINT32_MAX) return bad(m, "BINGET of an unset memo slot");
        return push(m, m->memo[v]);
    case 'u': /* SETITEMS */
        if ((rc = pop_mark(m, &first, &n))) return rc;
        return set_items(m, first, n);
    case 's': /* SETITEM */
        if (m->sp < 3) return bad(m, "pickle stack underflow");
        m->sp -= 2;
        for (uint32_t k = m->sp; k < m->sp + 2; k++)
            if (m->vals[m->stack[k]].kind == V_MARK) return bad(m, "MARK as a dict key or value");
        return set_items(m, m->sp, 2);
    case '.': /* STOP */
        if ((rc = pop(m, &x))) return rc;
        if (x->kind != V_DICT || m->sp != 0) return bad(m, "the pickle's result is not a single dict");
        if (m->pos != m->len) return bad(m, "bytes after STOP");
        *done = 1;
        return 0;
    default:
        return pp_fail(m->err, PP_EUNSUPPORTED, "%s: data.pkl byte %zu: pickle opcode 0x%02x ('%c') is not allowed in a tensor file",
                       m->label, m->op_pos, op, op >= 0x20 && op < 0x7f ? op : '?');
    }
}

static int run_pickle(pk *m) {
    int done = 0;
    memset(m->memo, 0xFF, sizeof m->memo);
    while (!done) {
        if (m->pos >= m->len) return bad(m, "pickle ends without STOP");
        int rc = step(m, &done);
        if (rc) return rc;
    }
    return 0;
}

/* ---- archive ---- */

struct pt_file {
    unsigned char *owned; /* pp_pt_open's file buffer */
    zip_archive *zip;
    pt_tensor *tensors;
    size_t count;
    char *names;
};

/* The archive's single "<prefix>/data.pkl" entry; *prefix_len includes the '/'. */
static int find_pickle(const zip_archive *z, const char *label, const zip_entry **out, size_t *prefix_len, char *err) {
    *out = NULL;
    for (size_t i = 0; i < pp_zip_count(z); i++) {
        const zip_entry *e = pp_zip_at(z, i);
        const char *slash = strchr(e->name, '/');
        if (!slash || strcmp(slash, "/data.pkl") != 0) continue;
        if (*out) return pp_fail(err, PP_EFORMAT, "%s: more than one data.pkl in the archive", label);
        *out = e;
        *prefix_len = (size_t)(slash - e->name) + 1;
    }
    if (!*out) return pp_fail(err, PP_EFORMAT, "%s: not a torch.save archive (no <archive>/data.pkl)", label);
    if ((*out)->size > MAX_PICKLE) return pp_fail(err, PP_EFULL, "%s: data.pkl is %zu bytes, too large", label, (*out)->size);
    return 0;
}

/* Resolves pickled tensor k (dict entry k) against the archive into f->tensors[k]. */
static int bind_tensor(pt_file *f, const pk *m, uint32_t k, const zip_entry *pkl, size_t prefix_len, char **names,
                       const char *label, char *err) {
    const pk_val *key = &m->vals[m->dict_keys[k]];
    const pk_tensor *t = &m->tensors[m->dict_tensors[k]];
    const pk_storage *s = &m->storages[t->storage];
    pt_tensor *o = &f->tensors[k];
    memcpy(*names, m->p + key->a, key->b);
    (*names)[key->b] = 0;
    o->name = *names;
    *names += key->b + 1;
    char path[1200];
    snprintf(path, sizeof path, "%.*sdata/%.*s", (int)prefix_len, pkl->name, (int)s->key_len, (const char *)m->p + s->key_off);
    const zip_entry *e = pp_zip_find(f->zip, path);
    if (!e) return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': storage entry %s is missing", label, o->name, path);
    int64_t es = storage_types[s->type].size;
    if ((uint64_t)s->numel != e->size / es || e->size % es != 0)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': storage %s holds %zu bytes, the pickle declares %lld %s elements",
                       label, o->name, path, e->size, (long long)s->numel, storage_types[s->type].name);
    o->dtype = storage_types[s->type].dtype;
    o->ndim = t->ndim;
    o->numel = 1;
    int64_t expect = 1; /* contiguous stride of dimension d */
    for (int d = t->ndim - 1; d >= 0; d--) {
        o->shape[d] = t->shape[d];
        if (t->shape[d] != 1 && t->stride[d] != expect && o->numel != 0)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' is not contiguous (dimension %d: stride %lld, expected %lld)",
                           label, o->name, d, (long long)t->stride[d], (long long)expect);
        if (t->shape[d] != 0 && o->numel > INT64_MAX / t->shape[d])
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': element count overflows", label, o->name);
        o->numel *= t->shape[d];
        expect = o->numel;
    }
    if (t->offset > s->numel || o->numel > s->numel - t->offset)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': offset %lld + %lld elements exceed its storage of %lld",
                       label, o->name, (long long)t->offset, (long long)o->numel, (long long)s->numel);
    o->data = e->data + t->offset * es;
    o->nbytes = (size_t)(o->numel * es);
    return 0;
}

static int check_byteorder(const zip_archive *z, const zip_entry *pkl, size_t prefix_len, const char *label, char *err) {
    char path[1200];
    snprintf(path, sizeof path, "%.*sbyteorder", (int)prefix_len, pkl->name);
    const zip_entry *e = pp_zip_find(z, path);
    if (e && !(e->size == 6 && memcmp(e->data, "little", 6) == 0))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: %s is not 'little' (big-endian archives are not supported)", label, path);
    return 0;
}

static int load_archive(pt_file *f, const char *label, char *err) {
    const zip_entry *pkl = NULL;
    size_t prefix_len = 0;
    int rc = find_pickle(f->zip, label, &pkl, &prefix_len, err);
    if (rc == 0) rc = check_byteorder(f->zip, pkl, prefix_len, label, err);
    if (rc) return rc;
    pk *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    m->p = pkl->data;
    m->len = pkl->size;
    m->label = label;
    m->err = err;
    rc = run_pickle(m);
    if (rc == 0) {
        f->count = m->ndict;
        f->tensors = calloc(m->ndict + 1, sizeof *f->tensors);
        f->names = malloc(m->ndict * (MAX_STR + 1) + 1);
        if (!f->tensors || !f->names) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    char *cursor = f->names;
    for (uint32_t k = 0; rc == 0 && k < m->ndict; k++) rc = bind_tensor(f, m, k, pkl, prefix_len, &cursor, label, err);
    free(m);
    return rc;
}

int pp_pt_open_memory(const void *buf, size_t len, const char *label, pt_file **out, char *err) {
    *out = NULL;
    /* Before torch 1.6, torch.save wrote bare pickles (magic number first), not zips. */
    if (len >= 2 && ((const uint8_t *)buf)[0] == 0x80 && ((const uint8_t *)buf)[1] == 0x02)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: legacy (pre-1.6) torch.save format; re-save it with a current torch", label);
    pt_file *f = calloc(1, sizeof *f);
    if (!f) return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    int rc = pp_zip_open_memory(buf, len, label, &f->zip, err);
    if (rc == 0) rc = load_archive(f, label, err);
    if (rc) {
        pp_pt_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int pp_pt_open(const char *path, pt_file **out, char *err) {
    unsigned char *buf;
    size_t len;
    *out = NULL;
    int rc = pp_file_read_all(path, MAX_FILE, &buf, &len, err);
    if (rc) return rc;
    rc = pp_pt_open_memory(buf, len, path, out, err);
    if (rc) {
        free(buf);
        return rc;
    }
    (*out)->owned = buf;
    return 0;
}

void pp_pt_close(pt_file *f) {
    if (!f) return;
    pp_zip_close(f->zip);
    free(f->tensors);
    free(f->names);
    free(f->owned);
    free(f);
}

size_t pp_pt_count(const pt_file *f) { return f->count; }
const pt_tensor *pp_pt_at(const pt_file *f, size_t i) { return i < f->count ? &f->tensors[i] : NULL; }

const pt_tensor *pp_pt_find(const pt_file *f, const char *name) {
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ---- writer: the same opcode stream torch's pickler produces, without memo entries ---- */

typedef struct pbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} pbuf;

static void put(pbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_op(pbuf *b, uint8_t op) { put(b, &op, 1); }

static void put_le(pbuf *b, uint64_t v, int n) {
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)n);
}

static void put_str(pbuf *b, const char *s) {
    put_op(b, 'X');
    put_le(b, strlen(s), 4);
    put(b, s, strlen(s));
}

/* Non-negative ints in the shortest form Python's pickler picks. */
static void put_int(pbuf *b, int64_t v) {
    if (v < 256) {
        put_op(b, 'K'), put_le(b, (uint64_t)v, 1);
    } else if (v < 65536) {
        put_op(b, 'M'), put_le(b, (uint64_t)v, 2);
    } else if (v <= INT32_MAX) {
        put_op(b, 'J'), put_le(b, (uint64_t)v, 4);
    } else {
        put_op(b, 0x8a), put_le(b, 8, 1), put_le(b, (uint64_t)v, 8);
    }
}

static void put_global(pbuf *b, const char *mod, const char *name) {
    put_op(b, 'c');
    put(b, mod, strlen(mod));
    put_op(b, '\n');
    put(b, name, strlen(name));
    put_op(b, '\n');
}

static void put_tensor(pbuf *b, const pt_tensor *t, int storage, size_t key, int64_t numel) {
    char keystr[24];
    snprintf(keystr, sizeof keystr, "%zu", key);
    put_str(b, t->name);
    put_global(b, "torch._utils", "_rebuild_tensor_v2");
    put_op(b, '(');
    put_op(b, '(');
    put_str(b, "storage");
    put_global(b, "torch", storage_types[storage].name);
    put_str(b, keystr);
    put_str(b, "cpu");
    put_int(b, numel);
    put_op(b, 't');
    put_op(b, 'Q');
    put_int(b, 0);
    put_op(b, '(');
    for (int d = 0; d < t->ndim; d++) put_int(b, t->shape[d]);
    put_op(b, 't');
    put_op(b, '(');
    int64_t stride[ST_MAX_DIMS], s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) stride[d] = s, s *= t->shape[d] ? t->shape[d] : 1;
    for (int d = 0; d < t->ndim; d++) put_int(b, stride[d]);
    put_op(b, 't');
    put_op(b, 0x89);
    put_global(b, "collections", "OrderedDict");
    put_op(b, ')');
    put_op(b, 'R');
    put_op(b, 't');
    put_op(b, 'R');
}

/* Checks t and returns its element count in *numel and storage type in *storage. */
static int check_desc(const char *path, const pt_tensor *t, int64_t *numel, int *storage, char *err) {
    if (!t->name || strlen(t->name) > MAX_STR || t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return pp_fail(err, PP_EINVAL, "%s: bad tensor name or rank", path);
    *storage = storage_index(t->dtype);
    if (*storage < 0)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s': dtype %s has no torch storage class", path, t->name,
                       pp_st_dtype_name(t->dtype));
    *numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || t->shape[d] > MAX_DIM_SIZE || (t->shape[d] && *numel > MAX_SAVE_NUMEL / t->shape[d]))
            return pp_fail(err, PP_EINVAL, "%s: tensor '%s': bad shape", path, t->name);
        *numel *= t->shape[d];
    }
    return 0;
}

int pp_pt_save(const char *path, const pt_tensor *tensors, size_t n, char *err) {
    if (n > MAX_TENSORS) return pp_fail(err, PP_EINVAL, "%s: too many tensors (%zu)", path, n);
    int64_t numel[MAX_TENSORS];
    int storage[MAX_TENSORS];
    pbuf b = {0};
    put_op(&b, 0x80), put_op(&b, 2), put_op(&b, '}'), put_op(&b, '(');
    for (size_t i = 0; i < n; i++) {
        int rc = check_desc(path, &tensors[i], &numel[i], &storage[i], err);
        if (rc) {
            free(b.p);
            return rc;
        }
        put_tensor(&b, &tensors[i], storage[i], i, numel[i]);
    }
    put_op(&b, 'u'), put_op(&b, '.');
    if (b.oom) {
        free(b.p);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    zip_writer *w;
    int rc = pp_zip_writer_create(path, &w, err);
    if (rc == 0) rc = pp_zip_writer_add(w, "archive/data.pkl", b.p, b.n, err);
    if (rc == 0) rc = pp_zip_writer_add(w, "archive/byteorder", "little", 6, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "archive/data/%zu", i);
        rc =
            pp_zip_writer_add(w, name, tensors[i].data, (size_t)numel[i] * (size_t)storage_types[storage[i]].size, err);
    }
    if (rc == 0) rc = pp_zip_writer_add(w, "archive/version", "3\n", 2, err);
    free(b.p);
    if (rc) {
        pp_zip_writer_abort(w);
        return rc;
    }
    return pp_zip_writer_finish(w, err);
}
