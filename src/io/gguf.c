#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, strndup */
/* gguf: see gguf.h. A bounds-checked cursor reads the header; every failure names the file and
 * the key or tensor being read. */
#include "io/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "io/file.h"

#define GGUF_MAX_SHARDS 100
#define GGUF_MAX_NEST 8 /* arrays of arrays: deeper nesting is refused */

enum { GV_U8, GV_I8, GV_U16, GV_I16, GV_U32, GV_I32, GV_F32, GV_BOOL, GV_STRING, GV_ARRAY, GV_U64, GV_I64, GV_F64 };

typedef struct {
    char *key, *value;
} gguf_kv;

struct gguf_meta {
    gguf_kv *kv; /* sorted by key */
    size_t n_kv;
    char **names; /* tensor names, one allocation each (the table's size, not the file's) */
    size_t n_names;
};

typedef struct {
    const uint8_t *p;
    size_t size, at;
    const char *label;
    char *err;
} cursor;

static int need(cursor *c, size_t n, const char *what) {
    if (n > c->size - c->at)
        return pp_fail(c->err, PP_EFORMAT, "%s: truncated at byte %zu reading %s (%zu bytes needed, %zu left)",
                       c->label, c->at, what, n, c->size - c->at);
    return PP_OK;
}

static int rd(cursor *c, void *dst, size_t n, const char *what) {
    int rc = need(c, n, what);
    if (rc) return rc;
    memcpy(dst, c->p + c->at, n);
    c->at += n;
    return PP_OK;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* A string: u64 length then bytes; *s points into the buffer (not NUL-terminated). */
static int rd_str(cursor *c, const char **s, size_t *len, const char *what) {
    uint64_t n;
    int rc = rd_u64(c, &n, what);
    if (!rc && n > c->size - c->at) rc = need(c, n > SIZE_MAX ? SIZE_MAX : (size_t)n, what);
    if (rc) return rc;
    *s = (const char *)c->p + c->at;
    *len = (size_t)n;
    c->at += (size_t)n;
    return PP_OK;
}

static size_t scalar_size(uint32_t type) {
    static const size_t sz[] = {[GV_U8] = 1, [GV_I8] = 1, [GV_U16] = 2, [GV_I16] = 2, [GV_U32] = 4, [GV_I32] = 4,
                                [GV_F32] = 4, [GV_BOOL] = 1, [GV_U64] = 8, [GV_I64] = 8, [GV_F64] = 8};
    return type < sizeof sz / sizeof *sz ? sz[type] : 0;
}

/* Reads a value of TYPE; scalars and strings are formatted into text (when text is not NULL). */
static int rd_value(cursor *c, uint32_t type, const char *key, int depth, char *text, size_t cap) {
    if (type == GV_STRING) {
        const char *s;
        size_t n;
        int rc = rd_str(c, &s, &n, key);
        if (!rc && text) snprintf(text, cap, "%.*s", n > cap - 1 ? (int)(cap - 1) : (int)n, s);
        return rc;
    }
    if (type == GV_ARRAY) {
        uint32_t et;
        uint64_t n;
        int rc;
        if ((rc = rd_u32(c, &et, key)) || (rc = rd_u64(c, &n, key))) return rc;
        if (depth >= GGUF_MAX_NEST)
            return pp_fail(c->err, PP_EFORMAT, "%s: key '%s': arrays nested deeper than %d", c->label, key,
                           GGUF_MAX_NEST);
        size_t es = scalar_size(et);
        if (es) { /* a scalar array is skipped in one step */
            if (n > (c->size - c->at) / es) return need(c, SIZE_MAX, key);
            c->at += (size_t)n * es;
            return PP_OK;
        }
        if (et != GV_STRING && et != GV_ARRAY)
            return pp_fail(c->err, PP_EFORMAT, "%s: key '%s': unknown array element type %u", c->label, key, et);
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rd_value(c, et, key, depth + 1, NULL, 0))) return rc;
        if (text) snprintf(text, cap, "[array]");
        return PP_OK;
    }
    size_t es = scalar_size(type);
    if (!es) return pp_fail(c->err, PP_EFORMAT, "%s: key '%s': unknown value type %u", c->label, key, type);
    uint8_t b[8];
    int rc = rd(c, b, es, key);
    if (rc || !text) return rc;
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    float f32;
    uint64_t u64;
    int64_t i64;
    double f64;
    switch (type) {
    case GV_U8: memcpy(&u8, b, 1), snprintf(text, cap, "%u", u8); break;
    case GV_BOOL: snprintf(text, cap, "%s", b[0] ? "true" : "false"); break;
    case GV_I8: memcpy(&i8, b, 1), snprintf(text, cap, "%d", i8); break;
    case GV_U16: memcpy(&u16, b, 2), snprintf(text, cap, "%u", u16); break;
    case GV_I16: memcpy(&i16, b, 2), snprintf(text, cap, "%d", i16); break;
    case GV_U32: memcpy(&u32, b, 4), snprintf(text, cap, "%u", u32); break;
    case GV_I32: memcpy(&i32, b, 4), snprintf(text, cap, "%d", i32); break;
    case GV_F32: memcpy(&f32, b, 4), snprintf(text, cap, "%.9g", f32); break;
    case GV_U64: memcpy(&u64, b, 8), snprintf(text, cap, "%llu", (unsigned long long)u64); break;
    case GV_I64: memcpy(&i64, b, 8), snprintf(text, cap, "%lld", (long long)i64); break;
    default: memcpy(&f64, b, 8), snprintf(text, cap, "%.17g", f64); break;
    }
    return PP_OK;
}

/* ggml type numbers and the block geometry of the ones we read (elements per block, bytes). */
static int ggml_type(uint32_t t, st_dtype *dt, int *blk, int *bytes) {
    *blk = 1;
    switch (t) {
    case 0: *dt = ST_F32, *bytes = 4; return 0;
    case 1: *dt = ST_F16, *bytes = 2; return 0;
    case 2: *dt = ST_Q4_0, *blk = 32, *bytes = 18; return 0;
    case 8: *dt = ST_Q8_0, *blk = 32, *bytes = 34; return 0;
    case 12: *dt = ST_Q4_K, *blk = 256, *bytes = 144; return 0;
    case 24: *dt = ST_I8, *bytes = 1; return 0;
    case 25: *dt = ST_I16, *bytes = 2; return 0;
    case 26: *dt = ST_I32, *bytes = 4; return 0;
    case 27: *dt = ST_I64, *bytes = 8; return 0;
    case 28: *dt = ST_F64, *bytes = 8; return 0;
    case 30: *dt = ST_BF16, *bytes = 2; return 0;
    default: return -1;
    }
}

static int cmp_kv(const void *a, const void *b) { return strcmp(((const gguf_kv *)a)->key, ((const gguf_kv *)b)->key); }

void pp_gguf_meta_free(gguf_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_kv; i++) {
        free(m->kv[i].key);
        free(m->kv[i].value);
    }
    free(m->kv);
    for (size_t i = 0; i < m->n_names; i++) free(m->names[i]);
    free(m->names);
    free(m);
}

const char *pp_gguf_meta_get(const gguf_meta *m, const char *key) {
    if (!m) return NULL;
    gguf_kv probe = {.key = (char *)key};
    const gguf_kv *kv = bsearch(&probe, m->kv, m->n_kv, sizeof *m->kv, cmp_kv);
    return kv ? kv->value : NULL;
}

static int read_kvs(cursor *c, gguf_meta *m, uint64_t n, uint32_t *alignment) {
    /* every pair takes at least 12 bytes: a bound on n before allocating for it */
    if (n > (c->size - c->at) / 12)
        return pp_fail(c->err, PP_EFORMAT, "%s: %llu KV pairs cannot fit in the %zu-byte file (truncated?)", c->label,
                       (unsigned long long)n, c->size);
    m->kv = calloc(n ? (size_t)n : 1, sizeof *m->kv);
    if (!m->kv) return pp_fail(c->err, PP_ENOMEM, "%s: out of memory for %llu KV pairs", c->label, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        const char *k;
        size_t klen;
        uint32_t type;
        char what[48], text[256];
        snprintf(what, sizeof what, "the key of KV pair %llu", (unsigned long long)i);
        int rc = rd_str(c, &k, &klen, what);
        if (rc) return rc;
        gguf_kv *kv = &m->kv[m->n_kv++];
        if (!(kv->key = strndup(k, klen))) return pp_fail(c->err, PP_ENOMEM, "%s: out of memory", c->label);
        if ((rc = rd_u32(c, &type, kv->key)) || (rc = rd_value(c, type, kv->key, 0, text, sizeof text))) return rc;
        if (!(kv->value = strdup(text))) return pp_fail(c->err, PP_ENOMEM, "%s: out of memory", c->label);
        if (!strcmp(kv->key, "general.alignment")) {
            char *end;
            unsigned long a = strtoul(text, &end, 10);
            if (type != GV_U32 || !a || (a & (a - 1)) || a > 65536)
                return pp_fail(c->err, PP_EFORMAT, "%s: general.alignment must be a u32 power of two up to 65536",
                               c->label);
            *alignment = (uint32_t)a;
        }
    }
    qsort(m->kv, m->n_kv, sizeof *m->kv, cmp_kv);
    for (size_t i = 1; i < m->n_kv; i++)
        if (!strcmp(m->kv[i - 1].key, m->kv[i].key))
            return pp_fail(c->err, PP_EFORMAT, "%s: duplicate key '%s'", c->label, m->kv[i].key);
    return PP_OK;
}

/* One tensor info, its name kept in m; its data pointer is set once the data section's start is known. */
static int read_info(cursor *c, gguf_meta *m, st_tensor *t, uint64_t *offset) {
    const char *s;
    size_t len;
    uint32_t nd, type;
    int rc = rd_str(c, &s, &len, "a tensor name");
    if (rc) return rc;
    if (len >= 7 && !memcmp(s, "lm.", 3)) s += 3, len -= 3; /* moshi.cpp's prefix */
    if (!(t->name = m->names[m->n_names] = strndup(s, len)))
        return pp_fail(c->err, PP_ENOMEM, "%s: out of memory for a tensor name", c->label);
    m->n_names++;
    if ((rc = rd_u32(c, &nd, t->name))) return rc;
    if (nd < 1 || nd > ST_MAX_DIMS)
        return pp_fail(c->err, PP_EFORMAT, "%s: tensor '%s': %u dimensions (1 to %d supported)", c->label, t->name, nd,
                       ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t ne[ST_MAX_DIMS], numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        if ((rc = rd_u64(c, &ne[i], t->name))) return rc;
        if (ne[i] > (uint64_t)INT64_MAX || (ne[i] && numel > (uint64_t)INT64_MAX / ne[i]))
            return pp_fail(c->err, PP_EFORMAT, "%s: tensor '%s': element count overflows", c->label, t->name);
        numel *= ne[i];
        t->shape[nd - 1 - i] = (int64_t)ne[i]; /* ne[0] is the innermost (torch's last) dimension */
    }
    if ((rc = rd_u32(c, &type, t->name)) || (rc = rd_u64(c, offset, t->name))) return rc;
    int blk, bytes;
    if (ggml_type(type, &t->dtype, &blk, &bytes))
        return pp_fail(c->err, PP_EUNSUPPORTED,
                       "%s: tensor '%s': unknown or unsupported ggml type %u (read: F32, F16, BF16, Q4_0, Q8_0, Q4_K, "
                       "integers)",
                       c->label, t->name, type);
    if (ne[0] % (uint64_t)blk)
        return pp_fail(c->err, PP_EFORMAT, "%s: tensor '%s': row length %llu is not a multiple of the %s block (%d)",
                       c->label, t->name, (unsigned long long)ne[0], pp_st_dtype_name(t->dtype), blk);
    t->numel = (int64_t)numel;
    uint64_t nbytes = numel / (uint64_t)blk;
    if (nbytes > UINT64_MAX / (uint64_t)bytes)
        return pp_fail(c->err, PP_EFORMAT, "%s: tensor '%s': byte size overflows", c->label, t->name);
    nbytes *= (uint64_t)bytes;
    if (nbytes > SIZE_MAX) return pp_fail(c->err, PP_EFORMAT, "%s: tensor '%s': too large", c->label, t->name);
    t->nbytes = (size_t)nbytes;
    return PP_OK;
}

int pp_gguf_parse(const uint8_t *base, size_t size, const char *label, st_tensor **tensors, size_t *count,
                  gguf_meta **meta, char *err) {
    *tensors = NULL;
    *count = 0;
    *meta = NULL;
    cursor c = {.p = base, .size = size, .label = label, .err = err};
    uint8_t magic[4];
    uint32_t version, alignment = 32;
    uint64_t n_tensors, n_kv;
    int rc;
    if ((rc = rd(&c, magic, 4, "the magic")) || (rc = rd_u32(&c, &version, "the version"))) return rc;
    if (memcmp(magic, "GGUF", 4)) return pp_fail(err, PP_EFORMAT, "%s: not a GGUF file (bad magic)", label);
    if (version != 2 && version != 3)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: GGUF version %u (2 and 3 are supported)", label, version);
    if ((rc = rd_u64(&c, &n_tensors, "the tensor count")) || (rc = rd_u64(&c, &n_kv, "the KV count"))) return rc;
    gguf_meta *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    rc = read_kvs(&c, m, n_kv, &alignment);
    /* every tensor info takes at least 28 bytes, its name at most what is left */
    if (!rc && n_tensors > (c.size - c.at) / 28)
        rc = pp_fail(err, PP_EFORMAT, "%s: %llu tensor infos cannot fit in the %zu-byte file (truncated?)", label,
                     (unsigned long long)n_tensors, size);
    st_tensor *t = NULL;
    uint64_t *offs = NULL;
    if (!rc) {
        t = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *t);
        offs = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *offs);
        m->names = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *m->names);
        if (!t || !offs || !m->names) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory for the tensor table", label);
    }
    for (uint64_t i = 0; !rc && i < n_tensors; i++) rc = read_info(&c, m, &t[i], &offs[i]);
    if (!rc) {
        size_t data = (c.at + alignment - 1) / alignment * alignment;
        if (data > size) data = size;
        /* ggml writes each tensor's bytes right after the previous one's, padded to the alignment,
         * in table order, and its reader refuses anything else. A gap, an overlap or two offsets
         * swapped is a damaged or spliced table that would read the wrong bytes as weights. */
        uint64_t expect = 0;
        for (uint64_t i = 0; !rc && i < n_tensors; i++) {
            if (offs[i] % alignment)
                rc = pp_fail(err, PP_EFORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u",
                             label, t[i].name, (unsigned long long)offs[i], alignment);
            else if (offs[i] != expect)
                rc = pp_fail(err, PP_EFORMAT,
                             "%s: tensor '%s' at data offset %llu, expected %llu (right after the previous tensor, "
                             "padded to %u): a gap, overlap or reordering in the offset table",
                             label, t[i].name, (unsigned long long)offs[i], (unsigned long long)expect, alignment);
            else if (offs[i] > size - data || t[i].nbytes > size - data - offs[i])
                rc = pp_fail(err, PP_EFORMAT,
                             "%s: tensor '%s' (%zu bytes at data offset %llu) runs past the end of the %zu-byte file "
                             "(truncated, or a shard missing?)",
                             label, t[i].name, t[i].nbytes, (unsigned long long)offs[i], size);
            else {
                t[i].data = base + data + offs[i];
                expect = offs[i] + (t[i].nbytes + alignment - 1) / alignment * alignment; /* within the file: no overflow */
            }
        }
    }
    free(offs);
    if (rc) {
        free(t);
        pp_gguf_meta_free(m);
        return rc;
    }
    *tensors = t;
    *count = (size_t)n_tensors;
    *meta = m;
    return PP_OK;
}

/* ---- mapping one file or its shards ------------------------------------------------------- */

static int file_size(const char *path, size_t *size) {
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) return -1;
    *size = (size_t)sb.st_size;
    return 0;
}

/* Maps fd's size bytes at addr (MAP_FIXED inside our own reservation). */
static int map_at(const char *path, void *addr, size_t size, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pp_fail(err, PP_EIO, "%s: cannot open: %s", path, strerror(errno));
    void *m = size ? mmap(addr, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) : addr;
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return pp_fail(err, PP_EIO, "%s: mmap failed: %s", path, strerror(e));
    return PP_OK;
}

/* Reads len bytes at offset off of path into dst. */
static int read_at(const char *path, size_t off, uint8_t *dst, size_t len, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pp_fail(err, PP_EIO, "%s: cannot open: %s", path, strerror(errno));
    while (len) {
        ssize_t got = pread(fd, dst, len, (off_t)off);
        if (got <= 0) {
            int e = errno;
            close(fd);
            return pp_fail(err, PP_EIO, "%s: read failed: %s", path, got ? strerror(e) : "file shrank");
        }
        dst += got, off += (size_t)got, len -= (size_t)got;
    }
    close(fd);
    return PP_OK;
}

int pp_gguf_map(const char *path, void **map, size_t *size, char **label, char *err) {
    *map = NULL;
    *size = 0;
    *label = NULL;
    char prefix[4096];
    size_t plen = strlen(path), one;
    const char *tail = ".shard-00";
    if (plen >= strlen(tail) && !strcmp(path + plen - strlen(tail), tail)) {
        snprintf(prefix, sizeof prefix, "%.*s", (int)(plen - strlen(tail)), path);
    } else {
        if (!file_size(path, &one)) return 1; /* a plain file: the caller maps it */
        char first[4200];
        snprintf(first, sizeof first, "%s%s", path, tail);
        if (file_size(first, &one)) return pp_fail(err, PP_EIO, "%s: cannot open: no such file, and no %s", path, first);
        snprintf(prefix, sizeof prefix, "%s", path);
    }
    size_t sizes[GGUF_MAX_SHARDS], total = 0;
    char name[4200];
    int n = 0;
    long page = sysconf(_SC_PAGESIZE);
    for (; n < GGUF_MAX_SHARDS; n++) {
        snprintf(name, sizeof name, "%s.shard-%02d", prefix, n);
        if (file_size(name, &sizes[n])) break;
        total += sizes[n];
    }
    if (!total) return pp_fail(err, PP_EFORMAT, "%s.shard-00: empty", prefix);
    void *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return pp_fail(err, PP_EIO, "%s: cannot reserve %zu bytes: %s", prefix, total, strerror(errno));
    /* A shard that starts on a page boundary is mapped in place; from the first one that does
     * not, the rest are read into memory (mmap places file pages only on page boundaries). */
    size_t at = 0, copy_from = total;
    int rc = PP_OK;
    for (int i = 0; i < n && !rc; at += sizes[i], i++) {
        snprintf(name, sizeof name, "%s.shard-%02d", prefix, i);
        if (copy_from == total && at % (size_t)page == 0) {
            rc = map_at(name, (uint8_t *)base + at, sizes[i], err);
            continue;
        }
        if (copy_from == total) { /* the page holding this start also holds the previous shard's tail */
            copy_from = at / (size_t)page * (size_t)page;
            if (mmap((uint8_t *)base + copy_from, total - copy_from, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
                rc = pp_fail(err, PP_ENOMEM, "%s: no memory for %zu bytes of shards", prefix, total - copy_from);
                break;
            }
            char prev[4200];
            snprintf(prev, sizeof prev, "%s.shard-%02d", prefix, i - 1);
            rc = read_at(prev, sizes[i - 1] - (at - copy_from), (uint8_t *)base + copy_from, at - copy_from, err);
        }
        if (!rc) rc = read_at(name, 0, (uint8_t *)base + at, sizes[i], err);
    }
    if (!rc && copy_from < total) {
        mprotect((uint8_t *)base + copy_from, total - copy_from, PROT_READ);
        PP_WARN("gguf", "%s: shards are not whole %ld-byte pages: %.1f MiB read into memory instead of mapped "
                "(join them, cat %s.shard-* > %s, to map the file)", prefix, page,
                (double)(total - copy_from) / 1048576.0, prefix, prefix);
    }
    if (rc) {
        munmap(base, total);
        return rc;
    }
    char lab[4300];
    snprintf(lab, sizeof lab, "%s.shard-00..%02d", prefix, n - 1);
    if (!(*label = strdup(lab))) {
        munmap(base, total);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", prefix);
    }
    pp_file_note_mapping(base, copy_from, lab); /* the mapped shards; the read ones cannot fault */
    *map = base;
    *size = total;
    return PP_OK;
}
