/* st_writer: the streaming safetensors writer declared in safetensors.h. Tensors are laid
 * out in declared order; the header is space-padded so the data starts 8-byte aligned, as
 * the reference writer does. Bytes are streamed, so a converter never holds a whole model.
 * They go to "<path>.tmp", renamed over path once complete (io/file.h): a failed or killed
 * run leaves any earlier file in place, and a converter may write over the file it reads
 * (its mapping keeps the old one alive). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"
#include "io/safetensors.h"

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
} st_decl;

struct st_writer {
    FILE *fp;
    char *path;
    st_decl *decls;
    size_t count, cap;
    char **meta; /* key, value, key, value, ... */
    size_t meta_count, meta_cap;
    int begun;
    uint64_t total, written;
};

/* A growable text buffer for the header. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt_u64(strbuf *b, uint64_t v) {
    char tmp[24];
    sb_put(b, tmp, (size_t)snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v));
}

/* Appends s as a JSON string literal. */
static void sb_json_str(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            sb_put(b, esc, (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c));
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

int pp_st_writer_create(const char *path, st_writer **out, char *err) {
    *out = NULL;
    st_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    int rc = pp_file_create(path, &w->fp, err);
    if (rc) {
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static int name_taken(const st_writer *w, const char *name) {
    for (size_t i = 0; i < w->count; i++)
        if (!strcmp(w->decls[i].name, name)) return 1;
    return !strcmp(name, "__metadata__");
}

int pp_st_writer_declare(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape, char *err) {
    if (w->begun) return pp_fail(err, PP_EINVAL, "%s: tensor '%s' declared after pp_st_writer_begin", w->path, name);
    if ((unsigned)dt >= ST_DTYPE_COUNT || !pp_st_dtype_bits(dt) || ndim < 0 || ndim > ST_MAX_DIMS)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s': bad dtype or rank %d", w->path, name, ndim);
    if (name_taken(w, name)) return pp_fail(err, PP_EINVAL, "%s: tensor '%s' declared twice", w->path, name);
    st_decl d = {.dtype = dt, .ndim = ndim};
    uint64_t numel = 1, bits = (uint64_t)pp_st_dtype_bits(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && numel > (uint64_t)INT64_MAX / (uint64_t)shape[i]))
            return pp_fail(err, PP_EINVAL, "%s: tensor '%s': bad shape", w->path, name);
        numel *= (uint64_t)shape[i];
        d.shape[i] = shape[i];
    }
    if ((numel && numel > UINT64_MAX / bits) || numel * bits % 8)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s': size is not a whole number of bytes", w->path, name);
    d.nbytes = numel * bits / 8;
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        st_decl *p = realloc(w->decls, cap * sizeof(*p));
        if (!p) return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
        w->decls = p;
        w->cap = cap;
    }
    if (!(d.name = strdup(name))) return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
    w->decls[w->count++] = d;
    w->total += d.nbytes;
    return 0;
}

int pp_st_writer_metadata(st_writer *w, const char *key, const char *value, char *err) {
    if (w->begun) return pp_fail(err, PP_EINVAL, "%s: metadata '%s' set after pp_st_writer_begin", w->path, key);
    for (size_t i = 0; i < w->meta_count; i += 2)
        if (!strcmp(w->meta[i], key)) return pp_fail(err, PP_EINVAL, "%s: metadata '%s' set twice", w->path, key);
    if (w->meta_count + 2 > w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap * 2 : 8;
        char **p = realloc(w->meta, cap * sizeof(*p));
        if (!p) return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
        w->meta = p;
        w->meta_cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
    }
    w->meta[w->meta_count++] = k;
    w->meta[w->meta_count++] = v;
    return 0;
}

static void header_json(const st_writer *w, strbuf *b) {
    const char *sep = "{";
    if (w->meta_count) {
        sb_str(b, "{\"__metadata__\":{");
        for (size_t i = 0; i < w->meta_count; i += 2) {
            if (i) sb_str(b, ",");
            sb_json_str(b, w->meta[i]);
            sb_str(b, ":");
            sb_json_str(b, w->meta[i + 1]);
        }
        sb_str(b, "}");
        sep = ",";
    }
    uint64_t at = 0;
    for (size_t i = 0; i < w->count; i++) {
        const st_decl *d = &w->decls[i];
        sb_str(b, sep);
        sep = ",";
        sb_json_str(b, d->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, pp_st_dtype_name(d->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int k = 0; k < d->ndim; k++) {
            if (k) sb_str(b, ",");
            sb_fmt_u64(b, (uint64_t)d->shape[k]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_fmt_u64(b, at);
        sb_str(b, ",");
        sb_fmt_u64(b, at + d->nbytes);
        sb_str(b, "]}");
        at += d->nbytes;
    }
    sb_str(b, w->count || w->meta_count ? "}" : "{}");
    while (b->len % 8) sb_str(b, " ");
}

int pp_st_writer_begin(st_writer *w, char *err) {
    if (w->begun) return pp_fail(err, PP_EINVAL, "%s: pp_st_writer_begin called twice", w->path);
    strbuf b = {0};
    header_json(w, &b);
    if (b.oom) {
        free(b.s);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory for the header", w->path);
    }
    uint64_t n = b.len;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    int ok = fwrite(len8, 1, 8, w->fp) == 8 && fwrite(b.s, 1, b.len, w->fp) == b.len;
    free(b.s);
    if (!ok) return pp_fail(err, PP_EIO, "%s: write failed: %s", w->path, strerror(errno));
    w->begun = 1;
    return 0;
}

int pp_st_writer_write(st_writer *w, const void *data, size_t nbytes, char *err) {
    if (!w->begun) return pp_fail(err, PP_EINVAL, "%s: data written before pp_st_writer_begin", w->path);
    if (nbytes > w->total - w->written)
        return pp_fail(err, PP_EINVAL, "%s: %zu bytes written past the %llu declared", w->path, nbytes,
                       (unsigned long long)w->total);
    if (nbytes && fwrite(data, 1, nbytes, w->fp) != nbytes)
        return pp_fail(err, PP_EIO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += nbytes;
    return 0;
}

static void writer_free(st_writer *w) {
    for (size_t i = 0; i < w->count; i++) free(w->decls[i].name);
    for (size_t i = 0; i < w->meta_count; i++) free(w->meta[i]);
    free(w->decls);
    free(w->meta);
    free(w->path);
    free(w);
}

int pp_st_writer_finish(st_writer *w, char *err) {
    int rc = 0;
    if (!w->begun)
        rc = pp_fail(err, PP_EINVAL, "%s: finished before pp_st_writer_begin", w->path);
    else if (w->written != w->total)
        rc = pp_fail(err, PP_EINVAL, "%s: %llu of %llu declared bytes written", w->path,
                     (unsigned long long)w->written, (unsigned long long)w->total);
    if (rc) pp_file_discard(w->path, w->fp); /* never leave a file that a reader would reject */
    else rc = pp_file_commit(w->path, w->fp, err);
    writer_free(w);
    return rc;
}

void pp_st_writer_abort(st_writer *w) {
    if (!w) return;
    pp_file_discard(w->path, w->fp);
    writer_free(w);
}
