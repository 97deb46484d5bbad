/* zip: see zip.h. Offsets are checked in 64 bits before any pointer is formed. */
#include "io/zip.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "io/file.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define LOCAL_LEN 30
#define CENTRAL_LEN 46
#define EOCD_LEN 22
#define EOCD64_LEN 56
#define LOCATOR64_LEN 20
#define MAX_ENTRIES 4096
#define MAX_NAME 1024
#define MAX_INFLATED (1u << 30) /* voices and configs are far smaller; bounds a zip bomb */
#define DEFLATE_MAX_RATIO 1032  /* the best ratio deflate can reach */
#define ALIGN 64                /* torch aligns entry data so archives can be mapped */

struct zip_archive {
    zip_entry *entries;
    zip_entry **sorted; /* by name, for pp_zip_find and the duplicate check */
    size_t count;
    char *names;        /* all names, NUL-separated */
    uint8_t **inflated; /* DEFLATE entries' buffers (NULL for STORED) */
};

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static uint32_t crc_of(const uint8_t *p, size_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* One central directory entry, as parsed. */
typedef struct cd_rec {
    uint32_t flags, method, crc;
    uint64_t csize, usize, offset;
    const uint8_t *name;
    uint32_t name_len;
} cd_rec;

/* Replaces 0xFFFFFFFF fields with their values from the zip64 extra field (id 1). */
static int read_zip64_extra(const uint8_t *x, uint32_t n, cd_rec *r, uint32_t disk, const char *label, char *err) {
    while (n >= 4) {
        uint32_t id = rd16(x), sz = rd16(x + 2);
        if (sz > n - 4) return pp_fail(err, PP_EFORMAT, "%s: zip extra field overruns its entry", label);
        if (id == 1) {
            const uint8_t *q = x + 4, *end = q + sz;
            uint64_t *fields[3] = {&r->usize, &r->csize, &r->offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xFFFFFFFFu) continue;
                if (end - q < 8) return pp_fail(err, PP_EFORMAT, "%s: zip64 extra field too short", label);
                *fields[i] = rd64(q);
                q += 8;
            }
            if (disk == 0xFFFFu && end - q >= 4) disk = rd32(q);
        }
        x += 4 + sz;
        n -= 4 + sz;
    }
    if (disk != 0) return pp_fail(err, PP_EUNSUPPORTED, "%s: multi-disk zip archives are not supported", label);
    return 0;
}

/* Locates the central directory: *cd_off, *cd_size, *count, and *cd_limit (where the end
 * records begin; the directory must end there). */
static int find_directory(const uint8_t *b, uint64_t len, const char *label, uint64_t *cd_off, uint64_t *cd_size,
                          uint64_t *count, uint64_t *cd_limit, char *err) {
    if (len < EOCD_LEN) return pp_fail(err, PP_EFORMAT, "%s: %llu bytes is too short for a zip archive", label, (unsigned long long)len);
    uint64_t pos = len - EOCD_LEN, stop = len - EOCD_LEN > 0xFFFF ? len - EOCD_LEN - 0xFFFF : 0;
    for (;; pos--) {
        if (rd32(b + pos) == SIG_EOCD && pos + EOCD_LEN + rd16(b + pos + 20) == len) break;
        if (pos == stop) return pp_fail(err, PP_EFORMAT, "%s: no zip end-of-central-directory record (truncated or not a zip)", label);
    }
    const uint8_t *e = b + pos;
    if (rd16(e + 4) != 0 || rd16(e + 6) != 0 || rd16(e + 8) != rd16(e + 10))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: multi-disk zip archives are not supported", label);
    *count = rd16(e + 10);
    *cd_size = rd32(e + 12);
    *cd_off = rd32(e + 16);
    *cd_limit = pos;
    if (pos >= LOCATOR64_LEN && rd32(b + pos - LOCATOR64_LEN) == SIG_LOCATOR64) {
        const uint8_t *l = b + pos - LOCATOR64_LEN;
        uint64_t off = rd64(l + 8);
        if (rd32(l + 4) != 0 || rd32(l + 16) > 1)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: multi-disk zip64 archives are not supported", label);
        if (off > pos - LOCATOR64_LEN || pos - LOCATOR64_LEN - off < EOCD64_LEN || rd32(b + off) != SIG_EOCD64)
            return pp_fail(err, PP_EFORMAT, "%s: zip64 locator points to no zip64 end record", label);
        const uint8_t *z = b + off;
        if (rd32(z + 16) != 0 || rd32(z + 20) != 0 || rd64(z + 24) != rd64(z + 32))
            return pp_fail(err, PP_EUNSUPPORTED, "%s: multi-disk zip64 archives are not supported", label);
        *count = rd64(z + 32);
        *cd_size = rd64(z + 40);
        *cd_off = rd64(z + 48);
        *cd_limit = off;
    } else if (*count == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd_off == 0xFFFFFFFFu) {
        return pp_fail(err, PP_EFORMAT, "%s: zip end record needs zip64 values but has no zip64 locator", label);
    }
    if (*count > MAX_ENTRIES)
        return pp_fail(err, PP_EFULL, "%s: %llu zip entries, more than %d", label, (unsigned long long)*count, MAX_ENTRIES);
    if (*cd_off > *cd_limit || *cd_size != *cd_limit - *cd_off)
        return pp_fail(err, PP_EFORMAT, "%s: zip central directory (offset %llu, %llu bytes) does not end at the end record",
                       label, (unsigned long long)*cd_off, (unsigned long long)*cd_size);
    return 0;
}

/* Parses the central directory entry at *p (advanced past it; end bounds it). */
static int read_central(const uint8_t *b, uint64_t *p, uint64_t end, cd_rec *r, const char *label, char *err) {
    if (end - *p < CENTRAL_LEN || rd32(b + *p) != SIG_CENTRAL)
        return pp_fail(err, PP_EFORMAT, "%s: bad zip central directory entry at offset %llu", label, (unsigned long long)*p);
    const uint8_t *c = b + *p;
    uint32_t n = rd16(c + 28), x = rd16(c + 30), k = rd16(c + 32);
    if (end - *p - CENTRAL_LEN < (uint64_t)n + x + k)
        return pp_fail(err, PP_EFORMAT, "%s: zip central directory entry at offset %llu overruns the directory", label,
                       (unsigned long long)*p);
    r->flags = rd16(c + 8);
    r->method = rd16(c + 10);
    r->crc = rd32(c + 16);
    r->csize = rd32(c + 20);
    r->usize = rd32(c + 24);
    r->offset = rd32(c + 42);
    r->name = c + CENTRAL_LEN;
    r->name_len = n;
    if (n == 0 || n > MAX_NAME || memchr(r->name, 0, n))
        return pp_fail(err, PP_EFORMAT, "%s: zip entry at offset %llu has an empty, overlong or NUL-holding name", label,
                       (unsigned long long)*p);
    int rc = read_zip64_extra(c + CENTRAL_LEN + n, x, r, rd16(c + 34), label, err);
    if (rc) return rc;
    if (r->flags & 0x41)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: zip entry '%.*s' is encrypted", label, (int)n, (const char *)r->name);
    if (r->method != 0 && r->method != 8)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: zip entry '%.*s' uses compression method %u (only stored and deflate are supported)",
                       label, (int)n, (const char *)r->name, r->method);
    *p += CENTRAL_LEN + (uint64_t)n + x + k;
    return 0;
}

/* Checks the local header of r and returns the offset of its (compressed) data. */
static int locate_data(const uint8_t *b, uint64_t cd_off, const cd_rec *r, uint64_t *data_off, const char *label, char *err) {
    const char *nm = (const char *)r->name;
    int nl = (int)r->name_len;
    if (r->offset > cd_off || cd_off - r->offset < LOCAL_LEN || rd32(b + r->offset) != SIG_LOCAL)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': no local header at offset %llu", label, nl, nm,
                       (unsigned long long)r->offset);
    const uint8_t *l = b + r->offset;
    uint64_t hdr = LOCAL_LEN + (uint64_t)rd16(l + 26) + rd16(l + 28);
    if (rd16(l + 26) != r->name_len || cd_off - r->offset < hdr || memcmp(l + LOCAL_LEN, r->name, r->name_len) != 0)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': local header does not match the central directory", label, nl, nm);
    if (rd16(l + 8) != r->method)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': local and central compression methods differ", label, nl, nm);
    /* Without a data descriptor (flag bit 3) the local header carries the real CRC and sizes. */
    if (!(rd16(l + 6) & 8) && rd32(l + 18) != 0xFFFFFFFFu &&
        (rd32(l + 14) != r->crc || rd32(l + 18) != r->csize || rd32(l + 22) != r->usize))
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': local CRC/sizes differ from the central directory", label, nl, nm);
    *data_off = r->offset + hdr;
    if (cd_off - *data_off < r->csize)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': %llu data bytes run past the central directory (truncated?)",
                       label, nl, nm, (unsigned long long)r->csize);
    return 0;
}

/* Inflates a raw DEFLATE stream of exactly r->usize bytes into *out. */
static int inflate_entry(const uint8_t *src, const cd_rec *r, uint8_t **out, const char *label, char *err) {
    const char *nm = (const char *)r->name;
    int nl = (int)r->name_len;
    if (r->usize > MAX_INFLATED || r->csize > UINT_MAX || r->usize > (r->csize + 1) * DEFLATE_MAX_RATIO)
        return pp_fail(err, PP_EFULL, "%s: zip entry '%.*s': implausible inflated size %llu", label, nl, nm,
                       (unsigned long long)r->usize);
    *out = malloc(r->usize ? r->usize : 1);
    if (!*out) return pp_fail(err, PP_ENOMEM, "%s: zip entry '%.*s': out of memory", label, nl, nm);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return pp_fail(err, PP_ENOMEM, "%s: zlib init failed", label);
    zs.next_in = (Bytef *)(uintptr_t)src;
    zs.avail_in = (uInt)r->csize;
    zs.next_out = *out;
    zs.avail_out = (uInt)r->usize;
    int zr = inflate(&zs, Z_FINISH);
    int ok = zr == Z_STREAM_END && zs.total_out == r->usize && zs.avail_in == 0;
    inflateEnd(&zs);
    if (!ok)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%.*s': corrupt deflate data (zlib %d)", label, nl, nm, zr);
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(zip_entry *const *)a)->name, (*(zip_entry *const *)b)->name);
}

/* A central directory entry with the offset of its data (locate_data), before it is loaded. */
typedef struct located {
    cd_rec r;
    uint64_t data_off;
} located;

static int cmp_offset(const void *a, const void *b) {
    const uint64_t x = (*(const located *const *)a)->r.offset, y = (*(const located *const *)b)->r.offset;
    return x < y ? -1 : x > y;
}

/* Before anything is inflated: the entries' headers and data lie apart (a crafted archive can
 * point many entries at one stream, each local header hidden in another's extra field), and
 * their DEFLATE data inflates to at most MAX_INFLATED in all (a small file of many large
 * entries would otherwise take gigabytes and seconds of its reader). by_offset: scratch for count. */
static int check_layout(const located *loc, size_t count, const located **by_offset, const char *label, char *err) {
    uint64_t inflated = 0;
    for (size_t i = 0; i < count; i++) {
        const uint64_t usize = loc[i].r.method != 0 ? loc[i].r.usize : 0;
        if (usize > MAX_INFLATED - inflated) /* not a sum: a zip64 size may be near 2^64 */
            return pp_fail(err, PP_EFULL, "%s: zip entries inflate to more than %u bytes in all", label, MAX_INFLATED);
        inflated += usize;
        by_offset[i] = &loc[i];
    }
    qsort(by_offset, count, sizeof *by_offset, cmp_offset);
    for (size_t i = 1; i < count; i++) {
        const located *a = by_offset[i - 1], *b = by_offset[i];
        if (b->r.offset < a->data_off + a->r.csize)
            return pp_fail(err, PP_EFORMAT, "%s: zip entries '%.*s' and '%.*s' overlap", label, (int)a->r.name_len,
                           (const char *)a->r.name, (int)b->r.name_len, (const char *)b->r.name);
    }
    return 0;
}

/* Fills entry i from its located record: name, data (inflated if needed), CRC check. */
static int load_entry(zip_archive *z, size_t i, const uint8_t *b, const located *at, char **name_cursor,
                      const char *label, char *err) {
    const cd_rec *r = &at->r;
    const uint64_t data_off = at->data_off;
    int rc;
    zip_entry *e = &z->entries[i];
    memcpy(*name_cursor, r->name, r->name_len);
    (*name_cursor)[r->name_len] = 0;
    e->name = *name_cursor;
    *name_cursor += r->name_len + 1;
    if (r->method == 0) {
        if (r->csize != r->usize)
            return pp_fail(err, PP_EFORMAT, "%s: stored zip entry '%s' has different compressed and plain sizes", label, e->name);
        e->data = b + data_off;
    } else {
        rc = inflate_entry(b + data_off, r, &z->inflated[i], label, err);
        if (rc) return rc;
        e->data = z->inflated[i];
    }
    e->size = (size_t)r->usize;
    if (crc_of(e->data, e->size) != r->crc)
        return pp_fail(err, PP_EFORMAT, "%s: zip entry '%s' fails its CRC-32 check (corrupt)", label, e->name);
    return 0;
}

int pp_zip_open_memory(const void *buf, size_t len, const char *label, zip_archive **out, char *err) {
    const uint8_t *b = buf;
    uint64_t cd_off = 0, cd_size = 0, count = 0, cd_limit = 0;
    *out = NULL;
    int rc = find_directory(b, len, label, &cd_off, &cd_size, &count, &cd_limit, err);
    if (rc) return rc;
    zip_archive *z = calloc(1, sizeof *z);
    if (!z) return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    z->count = (size_t)count;
    z->entries = calloc(count + 1, sizeof *z->entries);
    z->sorted = calloc(count + 1, sizeof *z->sorted);
    z->inflated = calloc(count + 1, sizeof *z->inflated);
    z->names = malloc(cd_size + 1); /* names are a subset of the directory bytes */
    if (!z->entries || !z->sorted || !z->inflated || !z->names) {
        pp_zip_close(z);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    located *loc = calloc(count + 1, sizeof *loc);
    const located **by_offset = calloc(count + 1, sizeof *by_offset);
    if (!loc || !by_offset) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    uint64_t p = cd_off;
    for (size_t i = 0; i < z->count && rc == 0; i++) {
        rc = read_central(b, &p, cd_limit, &loc[i].r, label, err);
        if (rc == 0) rc = locate_data(b, cd_off, &loc[i].r, &loc[i].data_off, label, err);
    }
    if (rc == 0 && p != cd_limit)
        rc = pp_fail(err, PP_EFORMAT, "%s: zip central directory holds more than its %llu declared entries", label,
                     (unsigned long long)count);
    if (rc == 0) rc = check_layout(loc, z->count, by_offset, label, err);
    char *cursor = z->names;
    for (size_t i = 0; i < z->count && rc == 0; i++) {
        rc = load_entry(z, i, b, &loc[i], &cursor, label, err);
        z->sorted[i] = &z->entries[i];
    }
    free(loc);
    free(by_offset);
    if (rc == 0) {
        qsort(z->sorted, z->count, sizeof *z->sorted, cmp_name);
        for (size_t i = 1; i < z->count && rc == 0; i++)
            if (strcmp(z->sorted[i - 1]->name, z->sorted[i]->name) == 0)
                rc = pp_fail(err, PP_EFORMAT, "%s: zip entry '%s' appears twice", label, z->sorted[i]->name);
    }
    if (rc) {
        pp_zip_close(z);
        return rc;
    }
    *out = z;
    return 0;
}

void pp_zip_close(zip_archive *z) {
    if (!z) return;
    if (z->inflated)
        for (size_t i = 0; i < z->count; i++) free(z->inflated[i]);
    free(z->inflated);
    free(z->entries);
    free(z->sorted);
    free(z->names);
    free(z);
}

size_t pp_zip_count(const zip_archive *z) { return z->count; }
const zip_entry *pp_zip_at(const zip_archive *z, size_t i) { return i < z->count ? &z->entries[i] : NULL; }

const zip_entry *pp_zip_find(const zip_archive *z, const char *name) {
    zip_entry key = {.name = name}, *kp = &key;
    zip_entry **hit = bsearch(&kp, z->sorted, z->count, sizeof *z->sorted, cmp_name);
    return hit ? *hit : NULL;
}

/* ---- writer ---- */

typedef struct wr_rec {
    char *name;
    uint32_t crc, size, offset;
} wr_rec;

struct zip_writer {
    char *path;
    FILE *f;
    uint64_t pos;
    wr_rec *recs;
    size_t count, cap;
    int failed;
    int failed_errno; /* of the first write that failed: the reason the user is told */
};

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v & 0xFFFF), put16(p + 2, v >> 16); }

static int emit(zip_writer *w, const void *p, size_t n) {
    if (n && !w->failed && fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        w->failed_errno = errno ? errno : EIO;
    }
    w->pos += n;
    return w->failed;
}

static int write_failed(const zip_writer *w, char *err) {
    return pp_fail(err, PP_EIO, "%s: write failed: %s", w->path, strerror(w->failed_errno));
}

int pp_zip_writer_create(const char *path, zip_writer **out, char *err) {
    *out = NULL;
    zip_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    int rc = pp_file_create(path, &w->f, err);
    if (rc) {
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int pp_zip_writer_add(zip_writer *w, const char *name, const void *data, size_t size, char *err) {
    size_t nl = strlen(name);
    if (nl == 0 || nl > MAX_NAME) return pp_fail(err, PP_EINVAL, "%s: bad zip entry name '%s'", w->path, name);
    if (w->count >= MAX_ENTRIES) return pp_fail(err, PP_EFULL, "%s: too many zip entries", w->path);
    /* This writer does not emit zip64 records: voice files stay far below 4 GiB. */
    if (size >= 0xFFFFFFFFu || w->pos + LOCAL_LEN + nl + 4 + ALIGN + size >= 0xFFFFFFFFu)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: archive would exceed 4 GiB", w->path);
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 8;
        wr_rec *r = realloc(w->recs, cap * sizeof *r);
        if (!r) return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
        w->recs = r;
        w->cap = cap;
    }
    wr_rec *r = &w->recs[w->count];
    if (!(r->name = strdup(name))) return pp_fail(err, PP_ENOMEM, "%s: out of memory", w->path);
    w->count++;
    r->crc = crc_of(data, size);
    r->size = (uint32_t)size;
    r->offset = (uint32_t)w->pos;
    /* Pad with an extra field (id "FB", as torch does) so the data starts 64-byte aligned. */
    uint32_t pad = (uint32_t)((ALIGN - (w->pos + LOCAL_LEN + nl + 4) % ALIGN) % ALIGN);
    uint8_t h[LOCAL_LEN + 4], zeros[ALIGN] = {0};
    memset(h, 0, sizeof h);
    put32(h, SIG_LOCAL);
    put16(h + 4, 20);
    put16(h + 12, 0x21); /* DOS date 1980-01-01: deterministic output */
    put32(h + 14, r->crc);
    put32(h + 18, r->size);
    put32(h + 22, r->size);
    put16(h + 26, (uint32_t)nl);
    put16(h + 28, 4 + pad);
    put16(h + LOCAL_LEN, 0x4246);
    put16(h + LOCAL_LEN + 2, pad);
    emit(w, h, LOCAL_LEN);
    emit(w, name, nl);
    emit(w, h + LOCAL_LEN, 4);
    emit(w, zeros, pad);
    if (emit(w, data, size)) return write_failed(w, err);
    return 0;
}

static void free_writer(zip_writer *w) {
    for (size_t i = 0; i < w->count; i++) free(w->recs[i].name);
    free(w->recs);
    free(w->path);
    free(w);
}

int pp_zip_writer_finish(zip_writer *w, char *err) {
    uint64_t cd_off = w->pos;
    for (size_t i = 0; i < w->count; i++) {
        const wr_rec *r = &w->recs[i];
        size_t nl = strlen(r->name);
        uint8_t c[CENTRAL_LEN];
        memset(c, 0, sizeof c);
        put32(c, SIG_CENTRAL);
        put16(c + 4, 20);
        put16(c + 6, 20);
        put16(c + 14, 0x21);
        put32(c + 16, r->crc);
        put32(c + 20, r->size);
        put32(c + 24, r->size);
        put16(c + 28, (uint32_t)nl);
        put32(c + 42, r->offset);
        emit(w, c, CENTRAL_LEN);
        emit(w, r->name, nl);
    }
    uint8_t e[EOCD_LEN];
    memset(e, 0, sizeof e);
    put32(e, SIG_EOCD);
    put16(e + 8, (uint32_t)w->count);
    put16(e + 10, (uint32_t)w->count);
    put32(e + 12, (uint32_t)(w->pos - cd_off));
    put32(e + 16, (uint32_t)cd_off);
    int rc;
    if (emit(w, e, EOCD_LEN)) {
        pp_file_discard(w->path, w->f);
        rc = write_failed(w, err);
    } else if (w->pos >= 0xFFFFFFFFu) { /* the central directory took it over: no zip64 here */
        pp_file_discard(w->path, w->f);
        rc = pp_fail(err, PP_EUNSUPPORTED, "%s: archive would exceed 4 GiB", w->path);
    } else {
        rc = pp_file_commit(w->path, w->f, err);
    }
    free_writer(w);
    return rc;
}

void pp_zip_writer_abort(zip_writer *w) {
    if (!w) return;
    pp_file_discard(w->path, w->f);
    free_writer(w);
}
