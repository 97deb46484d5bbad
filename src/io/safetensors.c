/* safetensors: see safetensors.h. The reader validates the header against docs/formats.md §1
 * once, then hands out tensors whose data pointers are known to lie inside the buffer. */
#include "io/safetensors.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/json.h"
#include "io/file.h"
#include "io/gguf.h"
#include "io/onnx_bundle.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data with memcpy: big-endian hosts are not supported"
#endif

#define ST_MAX_HEADER 100000000u /* the reference reader's MAX_HEADER_SIZE */

struct st_file {
    char *path;              /* path or label, for messages */
    const uint8_t *base;     /* whole file (or caller's buffer) */
    size_t size;
    void *map;               /* mmap address, NULL for pp_st_open_memory */
    pp_json_doc *doc;        /* owns tensor names and metadata strings */
    const pp_json *metadata; /* __metadata__ object or NULL */
    size_t count;
    st_tensor *tensors;      /* header order */
    st_tensor **by_name;     /* sorted by name, for pp_st_find */
    gguf_meta *gguf;         /* a GGUF file's names and metadata, NULL for safetensors */
    onnx_bundle *bundle;     /* an ONNX bundle's converted tensors (io/onnx_bundle.h), else NULL */
};

static const struct {
    const char *name;
    int bits;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 8},         [ST_U8] = {"U8", 8},
    [ST_I8] = {"I8", 8},             [ST_I16] = {"I16", 16},
    [ST_U16] = {"U16", 16},          [ST_F16] = {"F16", 16},
    [ST_BF16] = {"BF16", 16},        [ST_I32] = {"I32", 32},
    [ST_U32] = {"U32", 32},          [ST_F32] = {"F32", 32},
    [ST_I64] = {"I64", 64},          [ST_U64] = {"U64", 64},
    [ST_F64] = {"F64", 64},          [ST_C64] = {"C64", 64},
    [ST_F8_E4M3] = {"F8_E4M3", 8},   [ST_F8_E5M2] = {"F8_E5M2", 8},
    [ST_F8_E8M0] = {"F8_E8M0", 8},   [ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8}, [ST_F6_E2M3] = {"F6_E2M3", 6},
    [ST_F6_E3M2] = {"F6_E3M2", 6},   [ST_F4] = {"F4", 4},
    [ST_Q4_0] = {"Q4_0", 0},         [ST_Q8_0] = {"Q8_0", 0},
    [ST_Q4_K] = {"Q4_K", 0},
};

const char *pp_st_dtype_name(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : "?"; }
int pp_st_dtype_bits(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].bits : 0; }

static int dtype_parse(const char *name, st_dtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (dtypes[i].bits && !strcmp(dtypes[i].name, name)) { /* block formats are GGUF's only */
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* numel and byte size of a shape; -1 on overflow or when the bits do not fill whole bytes. */
static int shape_bytes(st_dtype dt, int ndim, const int64_t *shape, int64_t *numel, uint64_t *nbytes) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] && n > (uint64_t)INT64_MAX / (uint64_t)shape[i]) return -1;
        n *= (uint64_t)shape[i];
    }
    uint64_t bits = (uint64_t)pp_st_dtype_bits(dt);
    if (n && n > UINT64_MAX / bits) return -1;
    if (n * bits % 8) return -1;
    *numel = (int64_t)n;
    *nbytes = n * bits / 8;
    return 0;
}

/* Writes "[a, b, c]" into buf. */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* ---- reader ------------------------------------------------------------------------------- */

/* Fills t from one header entry; begin/end are returned for the layout check. */
static int parse_entry(st_file *f, const char *name, const pp_json *e, st_tensor *t, uint64_t *begin,
                       uint64_t *end, char *err) {
    const pp_json *dt = pp_json_get(e, "dtype"), *sh = pp_json_get(e, "shape");
    const pp_json *off = pp_json_get(e, "data_offsets");
    if (e->type != PP_JSON_OBJECT || e->count != 3 || !dt || !sh || !off || pp_json_dup_key(e))
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': entry must hold exactly dtype, shape and data_offsets",
                       f->path, name);
    if (dt->type != PP_JSON_STRING || dtype_parse(dt->string, &t->dtype))
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': unknown dtype", f->path, name);
    if (sh->type != PP_JSON_ARRAY)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': shape is not an array", f->path, name);
    if (sh->count > ST_MAX_DIMS)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d supported)", f->path,
                       name, sh->count, ST_MAX_DIMS);
    t->ndim = (int)sh->count;
    for (size_t i = 0; i < sh->count; i++) {
        const pp_json *d = sh->items[i];
        if (d->type != PP_JSON_NUMBER || !d->is_integer || d->integer < 0)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", f->path,
                           name, i);
        t->shape[i] = d->integer;
    }
    uint64_t nbytes;
    if (shape_bytes(t->dtype, t->ndim, t->shape, &t->numel, &nbytes))
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': element count overflows or is not a whole number of bytes",
                       f->path, name);
    if (off->type != PP_JSON_ARRAY || off->count != 2)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': data_offsets is not a [begin, end] array", f->path, name);
    for (int i = 0; i < 2; i++) {
        const pp_json *o = off->items[i];
        if (o->type != PP_JSON_NUMBER || !o->is_integer || o->integer < 0)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': data_offsets[%d] is not a non-negative integer",
                           f->path, name, i);
    }
    *begin = (uint64_t)off->items[0]->integer;
    *end = (uint64_t)off->items[1]->integer;
    if (*end < *begin || *end - *begin != nbytes) {
        char shape[96];
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, %s%s needs %llu",
                       f->path, name, (unsigned long long)*begin, (unsigned long long)*end,
                       (unsigned long long)(*end - *begin), dtypes[t->dtype].name,
                       shape_str(shape, sizeof(shape), t->ndim, t->shape), (unsigned long long)nbytes);
    }
    t->name = name;
    t->nbytes = (size_t)nbytes;
    return 0;
}

static int check_metadata(st_file *f, const pp_json *m, char *err) {
    if (m->type != PP_JSON_OBJECT)
        return pp_fail(err, PP_EFORMAT, "%s: __metadata__ is not an object", f->path);
    for (size_t i = 0; i < m->count; i++)
        if (m->items[i]->type != PP_JSON_STRING)
            return pp_fail(err, PP_EFORMAT, "%s: __metadata__ value of '%s' is not a string", f->path, m->keys[i]);
    const char *dup = pp_json_dup_key(m);
    if (dup) return pp_fail(err, PP_EFORMAT, "%s: duplicate __metadata__ key '%s'", f->path, dup);
    f->metadata = m;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    size_t index;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(st_tensor *const *)a)->name, (*(st_tensor *const *)b)->name);
}

/* Checks the tensors tile [0, buf_len) exactly and points their data into the buffer. */
static int check_layout(st_file *f, span *spans, const uint8_t *buf, uint64_t buf_len, char *err) {
    qsort(spans, f->count, sizeof(*spans), cmp_span);
    uint64_t at = 0;
    for (size_t i = 0; i < f->count; i++) {
        st_tensor *t = &f->tensors[spans[i].index];
        if (spans[i].begin != at)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' starts at %llu, expected %llu (%s)", f->path, t->name,
                           (unsigned long long)spans[i].begin, (unsigned long long)at,
                           spans[i].begin > at ? "hole before it" : "overlaps the previous tensor");
        at = spans[i].end;
        if (at > buf_len)
            return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' ends at %llu, past the %llu-byte data buffer", f->path,
                           t->name, (unsigned long long)at, (unsigned long long)buf_len);
        t->data = buf + spans[i].begin;
    }
    if (at != buf_len)
        return pp_fail(err, PP_EFORMAT, "%s: tensors cover %llu of the %llu data bytes", f->path,
                       (unsigned long long)at, (unsigned long long)buf_len);
    return 0;
}

static int parse_header(st_file *f, char *err) {
    if (f->size < 8) return pp_fail(err, PP_EFORMAT, "%s: %zu bytes, too short for the header length", f->path, f->size);
    uint64_t n;
    memcpy(&n, f->base, 8);
    if (n > ST_MAX_HEADER)
        return pp_fail(err, PP_EFORMAT, "%s: header length %llu exceeds %u", f->path, (unsigned long long)n,
                       ST_MAX_HEADER);
    if (n > f->size - 8)
        return pp_fail(err, PP_EFORMAT, "%s: header length %llu runs past the end of the %zu-byte file", f->path,
                       (unsigned long long)n, f->size);
    if (n == 0 || f->base[8] != '{')
        return pp_fail(err, PP_EFORMAT, "%s: header does not start with '{'", f->path);
    char jerr[PP_ERR_LEN];
    int rc = pp_json_parse((const char *)f->base + 8, (size_t)n, &f->doc, jerr);
    if (rc) return pp_fail(err, rc, "%s: header: %s", f->path, jerr);
    const pp_json *root = pp_json_root(f->doc);
    if (root->type != PP_JSON_OBJECT) return pp_fail(err, PP_EFORMAT, "%s: header is not a JSON object", f->path);
    const char *dup = pp_json_dup_key(root);
    if (dup) return pp_fail(err, PP_EFORMAT, "%s: duplicate tensor '%s'", f->path, dup);

    f->tensors = calloc(root->count ? root->count : 1, sizeof(*f->tensors));
    f->by_name = calloc(root->count ? root->count : 1, sizeof(*f->by_name));
    span *spans = calloc(root->count ? root->count : 1, sizeof(*spans));
    if (!f->tensors || !f->by_name || !spans) {
        free(spans);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory for %zu tensors", f->path, root->count);
    }
    for (size_t i = 0; i < root->count && !rc; i++) {
        if (!strcmp(root->keys[i], "__metadata__")) {
            rc = check_metadata(f, root->items[i], err);
            continue;
        }
        st_tensor *t = &f->tensors[f->count];
        spans[f->count].index = f->count;
        rc = parse_entry(f, root->keys[i], root->items[i], t, &spans[f->count].begin, &spans[f->count].end, err);
        f->by_name[f->count] = t;
        f->count++;
    }
    if (!rc) rc = check_layout(f, spans, f->base + 8 + n, f->size - 8 - n, err);
    free(spans);
    if (!rc) qsort(f->by_name, f->count, sizeof(*f->by_name), cmp_name);
    return rc;
}

/* GGUF and ONNX bundles fill the tensor table themselves: sort it for pp_st_find, refuse duplicates. */
static int index_names(st_file *f, char *err) {
    f->by_name = calloc(f->count ? f->count : 1, sizeof(*f->by_name));
    if (!f->by_name) return pp_fail(err, PP_ENOMEM, "%s: out of memory for %zu tensors", f->path, f->count);
    for (size_t i = 0; i < f->count; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->count, sizeof(*f->by_name), cmp_name);
    for (size_t i = 1; i < f->count; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
            return pp_fail(err, PP_EFORMAT, "%s: duplicate tensor '%s'", f->path, f->by_name[i]->name);
    return 0;
}

static int parse_gguf(st_file *f, char *err) {
    int rc = pp_gguf_parse(f->base, f->size, f->path, &f->tensors, &f->count, &f->gguf, err);
    return rc ? rc : index_names(f, err);
}

int pp_st_from_bundle(const char *label, st_tensor *tensors, size_t count, const void *base, size_t size,
                      onnx_bundle *bundle, st_file **out, char *err) {
    *out = NULL;
    st_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(label))) {
        free(f);
        free(tensors);
        pp_onnx_bundle_free(bundle);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    f->tensors = tensors, f->count = count, f->base = base, f->size = size, f->bundle = bundle;
    int rc = index_names(f, err);
    if (rc) {
        pp_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

static int open_bundle(const char *path, st_file **out, char *err) {
    st_tensor *tensors;
    size_t count, size;
    const void *base;
    onnx_bundle *bundle;
    int rc = pp_onnx_bundle_load(path, &tensors, &count, &base, &size, &bundle, err);
    return rc ? rc : pp_st_from_bundle(path, tensors, count, base, size, bundle, out, err);
}

static int open_common(st_file *f, st_file **out, char *err) {
    int gguf = f->size >= 4 && !memcmp(f->base, "GGUF", 4);
    int rc = gguf ? parse_gguf(f, err) : parse_header(f, err);
    if (rc) {
        pp_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int pp_st_open_memory(const void *buf, size_t len, const char *label, st_file **out, char *err) {
    *out = NULL;
    if (!label) label = "<memory>";
    if (!buf && len) return pp_fail(err, PP_EINVAL, "%s: NULL buffer", label);
    st_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(label))) {
        free(f);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    f->base = buf;
    f->size = len;
    return open_common(f, out, err);
}

int pp_st_open(const char *path, st_file **out, char *err) {
    *out = NULL;
    if (pp_onnx_bundle_is(path)) return open_bundle(path, out, err);
    struct stat sb; /* a download folder given for its checkpoint: not "no such file" */
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode))
        return pp_fail(err, PP_EINVAL, "%s: a folder, not a checkpoint file or an ONNX bundle (no %s in it): name the "
                       "checkpoint file in it", path, PP_ONNX_TEMPORAL);
    void *shards;
    size_t shards_size;
    char *label;
    int rc = pp_gguf_map(path, &shards, &shards_size, &label, err);
    if (rc < 0) return rc;
    if (rc == 0) {
        st_file *f = calloc(1, sizeof(*f));
        if (!f) {
            pp_file_unmap(shards, shards_size);
            free(label);
            return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
        }
        f->path = label;
        f->map = shards;
        f->base = shards;
        f->size = shards_size;
        return open_common(f, out, err);
    }
    void *map;
    size_t size;
    rc = pp_file_map(path, &map, &size, err);
    if (rc) return rc;
    st_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(path))) {
        free(f);
        pp_file_unmap(map, size);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    f->map = map, f->base = map, f->size = size;
    return open_common(f, out, err);
}

void pp_st_close(st_file *f) {
    if (!f) return;
    pp_file_unmap(f->map, f->size);
    pp_json_free(f->doc);
    pp_gguf_meta_free(f->gguf);
    pp_onnx_bundle_free(f->bundle);
    free(f->tensors);
    free(f->by_name);
    free(f->path);
    free(f);
}

const char *pp_st_path(const st_file *f) { return f->path; }
size_t pp_st_size(const st_file *f) { return f->size; }
const void *pp_st_base(const st_file *f) { return f->base; }

void pp_st_release(const st_file *f, const st_tensor *t) {
    if (f->bundle) return; /* the bundle's converted tensors are memory of its own, not the file's pages */
    pp_file_release_pages(t->data, t->nbytes);
}
void pp_st_drop_data(st_file *f) {
    if (!f->bundle) return;
    pp_onnx_bundle_free_data(f->bundle); /* the names stay: weights and messages refer to them */
    for (size_t i = 0; i < f->count; i++) f->tensors[i].data = NULL;
    f->base = NULL;
}
size_t pp_st_count(const st_file *f) { return f->count; }
const st_tensor *pp_st_at(const st_file *f, size_t i) { return i < f->count ? &f->tensors[i] : NULL; }

const st_tensor *pp_st_find(const st_file *f, const char *name) {
    size_t lo = 0, hi = f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (!c) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *pp_st_metadata(const st_file *f, const char *key) {
    if (f->gguf) return pp_gguf_meta_get(f->gguf, key);
    const pp_json *v = pp_json_get(f->metadata, key);
    return v ? v->string : NULL;
}

/* ---- typed loads -------------------------------------------------------------------------- */

static int check_range(const st_file *f, const st_tensor *t, int64_t first, int64_t n, char *err) {
    if (first < 0 || n < 0 || first > t->numel || n > t->numel - first)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s': elements [%lld, +%lld) outside its %lld", f->path, t->name,
                       (long long)first, (long long)n, (long long)t->numel);
    return 0;
}

int pp_st_load_f32(const st_file *f, const st_tensor *t, int64_t first, int64_t n, float *dst, char *err) {
    int rc = check_range(f, t, first, n, err);
    if (rc) return rc;
    const uint8_t *src = t->data;
    switch (t->dtype) {
    case ST_F32:
        if (n) memcpy(dst, src + first * 4, (size_t)n * 4);
        return 0;
    case ST_F16:
    case ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + (first + i) * 2, 2);
            dst[i] = t->dtype == ST_F16 ? pp_f16_to_f32(h) : pp_bf16_to_f32(h);
        }
        return 0;
    default:
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' is %s, expected F32, F16 or BF16", f->path, t->name,
                       pp_st_dtype_name(t->dtype));
    }
}

static int is_int_dtype(st_dtype dt) {
    switch (dt) {
    case ST_I64: case ST_I32: case ST_U32: case ST_I16: case ST_U16: case ST_I8: case ST_U8: case ST_BOOL: return 1;
    default: return 0;
    }
}

/* Element k of an integer tensor, read with memcpy because the data may be unaligned. */
static int64_t int_at(const uint8_t *src, st_dtype dt, int64_t k) {
    int64_t i64;
    int32_t i32;
    uint32_t u32;
    int16_t i16;
    uint16_t u16;
    switch (dt) {
    case ST_I64: memcpy(&i64, src + k * 8, 8); return i64;
    case ST_I32: memcpy(&i32, src + k * 4, 4); return i32;
    case ST_U32: memcpy(&u32, src + k * 4, 4); return u32;
    case ST_I16: memcpy(&i16, src + k * 2, 2); return i16;
    case ST_U16: memcpy(&u16, src + k * 2, 2); return u16;
    case ST_I8: return (int8_t)src[k];
    default: return src[k]; /* U8, BOOL */
    }
}

int pp_st_load_i64(const st_file *f, const st_tensor *t, int64_t first, int64_t n, int64_t *dst, char *err) {
    int rc = check_range(f, t, first, n, err);
    if (rc) return rc;
    if (!is_int_dtype(t->dtype))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' is %s, expected an integer dtype", f->path, t->name,
                       pp_st_dtype_name(t->dtype));
    for (int64_t i = 0; i < n; i++) dst[i] = int_at(t->data, t->dtype, first + i);
    return 0;
}

int pp_st_expect(const st_file *f, const char *name, int ndim, const int64_t *shape, const st_tensor **out, char *err) {
    const st_tensor *t = pp_st_find(f, name);
    *out = NULL;
    if (!t) return pp_fail(err, PP_ENOTFOUND, "%s: tensor '%s' not found", f->path, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[160], got[160];
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' has shape %s, expected %s", f->path, name,
                       shape_str(got, sizeof(got), t->ndim, t->shape), shape_str(want, sizeof(want), ndim, shape));
    }
    *out = t;
    return 0;
}
