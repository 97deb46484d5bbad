/* voice: see voice.h. */
#include "io/voice.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/json.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/torchpt.h"

#define MAX_DIM 65536
#define MAX_VOICE_FILE ((size_t)1 << 30)
#define MAX_JSON_FILE ((size_t)1 << 16)

static const char SUFFIX_PT[] = ".pt";
static const char SUFFIX_BIN[] = ".embeddings.bin";
static const char SUFFIX_JSON[] = ".cache.json";
static const char SUFFIX_SC[] = ".bin"; /* speech-core's bundles (not the pair's .embeddings.bin) */
#define SC_MAGIC 0x50506558u
#define SC_HEADER (16 + 8 * PP_VOICE_STREAMS * PP_VOICE_RING + 8)

/* ---- shared checks ---- */

static int check_dims(const char *label, int64_t frames, int64_t dim, int64_t want_dim, char *err) {
    if (frames < 1 || frames > PP_VOICE_MAX_FRAMES)
        return pp_fail(err, PP_EFORMAT, "%s: %lld voice frames (need 1..%d)", label, (long long)frames, PP_VOICE_MAX_FRAMES);
    if (dim < 1 || dim > MAX_DIM) return pp_fail(err, PP_EFORMAT, "%s: embedding width %lld out of range", label, (long long)dim);
    if (want_dim > 0 && dim != want_dim)
        return pp_fail(err, PP_EFORMAT, "%s: embeddings are %lld wide, the model's dim is %lld", label, (long long)dim,
                       (long long)want_dim);
    return 0;
}

static int alloc_embeddings(pp_voice *out, int64_t frames, int64_t dim, const char *label, char *err) {
    out->frames = frames;
    out->dim = dim;
    out->embeddings = malloc((size_t)(frames * dim) * sizeof(float));
    if (!out->embeddings) return pp_fail(err, PP_ENOMEM, "%s: out of memory for %lld x %lld embeddings", label, (long long)frames, (long long)dim);
    return 0;
}

/* NaN or Inf would poison every later step of the model. */
static int check_finite(const pp_voice *v, const char *label, char *err) {
    for (int64_t i = 0; i < v->frames * v->dim; i++)
        if (!isfinite(v->embeddings[i]))
            return pp_fail(err, PP_EFORMAT, "%s: embedding value %lld (frame %lld) is not finite", label, (long long)i,
                           (long long)(i / v->dim));
    return 0;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- .pt ---- */

static int pt_embeddings(const pt_tensor *t, int64_t dim, pp_voice *out, const char *label, char *err) {
    if (t->dtype != ST_BF16 && t->dtype != ST_F16 && t->dtype != ST_F32)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: 'embeddings' is %s (need BF16, F16 or F32)", label,
                       pp_st_dtype_name(t->dtype));
    if (t->ndim != 4 || t->shape[1] != 1 || t->shape[2] != 1)
        return pp_fail(err, PP_EFORMAT, "%s: 'embeddings' must be [N,1,1,dim] (rank %d given)", label, t->ndim);
    int rc = check_dims(label, t->shape[0], t->shape[3], dim, err);
    if (rc == 0) rc = alloc_embeddings(out, t->shape[0], t->shape[3], label, err);
    if (rc) return rc;
    int es = t->dtype == ST_F32 ? 4 : 2;
    for (int64_t i = 0; i < t->numel; i++) {
        uint32_t bits = (uint32_t)rd_le(t->data + i * es, es);
        out->embeddings[i] = t->dtype == ST_F32 ? f32_of(bits) : t->dtype == ST_BF16 ? pp_bf16_to_f32((uint16_t)bits)
                                                                                     : pp_f16_to_f32((uint16_t)bits);
    }
    return check_finite(out, label, err);
}

static int pt_cache(const pt_tensor *t, pp_voice *out, const char *label, char *err) {
    if (t->dtype != ST_I64)
        return pp_fail(err, PP_EFORMAT, "%s: 'cache' is %s (need I64)", label, pp_st_dtype_name(t->dtype));
    if (t->ndim != 3 || t->shape[0] != 1 || t->shape[1] != PP_VOICE_STREAMS || t->shape[2] != PP_VOICE_RING)
        return pp_fail(err, PP_EFORMAT, "%s: 'cache' must be [1,%d,%d]", label, PP_VOICE_STREAMS, PP_VOICE_RING);
    for (int k = 0; k < PP_VOICE_STREAMS; k++)
        for (int c = 0; c < PP_VOICE_RING; c++)
            out->cache[k][c] = (int64_t)rd_le(t->data + 8 * (k * PP_VOICE_RING + c), 8);
    return 0;
}

int pp_voice_load_pt_memory(const void *buf, size_t len, const char *label, int64_t dim, pp_voice *out, char *err) {
    memset(out, 0, sizeof *out);
    pt_file *f;
    int rc = pp_pt_open_memory(buf, len, label, &f, err);
    if (rc) return rc;
    const pt_tensor *emb = pp_pt_find(f, "embeddings"), *cache = pp_pt_find(f, "cache");
    for (size_t i = 0; i < pp_pt_count(f) && rc == 0; i++) {
        const char *name = pp_pt_at(f, i)->name;
        if (strcmp(name, "embeddings") != 0 && strcmp(name, "cache") != 0)
            rc = pp_fail(err, PP_EFORMAT, "%s: unexpected key '%s' (a voice holds only 'embeddings' and 'cache')", label, name);
    }
    if (rc == 0 && (!emb || !cache))
        rc = pp_fail(err, PP_EFORMAT, "%s: missing '%s'", label, emb ? "cache" : "embeddings");
    if (rc == 0) rc = pt_embeddings(emb, dim, out, label, err);
    if (rc == 0) rc = pt_cache(cache, out, label, err);
    pp_pt_close(f);
    if (rc) pp_voice_free(out);
    return rc;
}

/* ---- .embeddings.bin + .cache.json ---- */

/* sts-web's object form {"num_frames": N, "dim": D, "cache": [...]}: N and D must describe the
 * .bin beside it (bin_len bytes of f32 rows of dim values). Returns its "cache" member. */
static int json_cache_object(const pp_json *root, size_t bin_len, int64_t dim, const pp_json **cache,
                             const char *label, char *err) {
    const pp_json *n = pp_json_get(root, "num_frames"), *d = pp_json_get(root, "dim");
    *cache = pp_json_get(root, "cache");
    if (!n || n->type != PP_JSON_NUMBER || !n->is_integer || n->integer <= 0 || !d || d->type != PP_JSON_NUMBER ||
        !d->is_integer || d->integer <= 0 || !*cache)
        return pp_fail(err, PP_EFORMAT, "%s: cache JSON object needs positive integers num_frames and dim and a cache",
                       label);
    if (d->integer != dim)
        return pp_fail(err, PP_EFORMAT, "%s: cache JSON dim %lld, the model's is %lld", label, (long long)d->integer,
                       (long long)dim);
    if (n->integer > (int64_t)(bin_len / 4 / (size_t)dim) || (uint64_t)n->integer * (uint64_t)dim * 4 != bin_len)
        return pp_fail(err, PP_EFORMAT, "%s: cache JSON says %lld frames x %lld x 4 bytes, the .bin holds %zu bytes",
                       label, (long long)n->integer, (long long)d->integer, bin_len);
    return 0;
}

static int json_cache(const char *json, size_t len, size_t bin_len, int64_t dim, pp_voice *out, const char *label,
                      char *err) {
    pp_json_doc *doc;
    char jerr[PP_ERR_LEN];
    if (pp_json_parse(json, len, &doc, jerr) != 0) return pp_fail(err, PP_EFORMAT, "%s: cache JSON: %s", label, jerr);
    const pp_json *root = pp_json_root(doc);
    int rc = 0;
    if (root->type == PP_JSON_OBJECT) rc = json_cache_object(root, bin_len, dim, &root, label, err);
    if (rc) {
        pp_json_free(doc);
        return rc;
    }
    if (root->type == PP_JSON_ARRAY && root->count == 1 && root->items[0]->type == PP_JSON_ARRAY) root = root->items[0];
    if (root->type != PP_JSON_ARRAY || root->count != PP_VOICE_STREAMS)
        rc = pp_fail(err, PP_EFORMAT, "%s: cache JSON must be a %dx%d nested list", label, PP_VOICE_STREAMS, PP_VOICE_RING);
    for (size_t k = 0; rc == 0 && k < PP_VOICE_STREAMS; k++) {
        const pp_json *row = root->items[k];
        if (row->type != PP_JSON_ARRAY || row->count != PP_VOICE_RING) {
            rc = pp_fail(err, PP_EFORMAT, "%s: cache JSON row %zu is not a list of %d ints", label, k, PP_VOICE_RING);
            break;
        }
        for (size_t c = 0; c < PP_VOICE_RING; c++) {
            if (row->items[c]->type != PP_JSON_NUMBER || !row->items[c]->is_integer) {
                rc = pp_fail(err, PP_EFORMAT, "%s: cache JSON [%zu][%zu] is not an integer", label, k, c);
                break;
            }
            out->cache[k][c] = row->items[c]->integer;
        }
    }
    pp_json_free(doc);
    return rc;
}

int pp_voice_load_pair_memory(const void *bin, size_t bin_len, const char *json, size_t json_len, const char *label,
                              int64_t dim, pp_voice *out, char *err) {
    memset(out, 0, sizeof *out);
    if (dim <= 0 || dim > MAX_DIM)
        return pp_fail(err, PP_EINVAL, "%s: a raw .embeddings.bin needs the model's dim to be known", label);
    size_t row = (size_t)dim * 4;
    if (bin_len % row != 0)
        return pp_fail(err, PP_EFORMAT, "%s: %zu bytes is not a whole number of %lld-wide f32 rows", label, bin_len, (long long)dim);
    int rc = check_dims(label, (int64_t)(bin_len / row), dim, dim, err);
    if (rc == 0) rc = json_cache(json, json_len, bin_len, dim, out, label, err);
    if (rc == 0) rc = alloc_embeddings(out, (int64_t)(bin_len / row), dim, label, err);
    for (size_t i = 0; rc == 0 && i < bin_len / 4; i++) out->embeddings[i] = f32_of((uint32_t)rd_le((const uint8_t *)bin + 4 * i, 4));
    if (rc == 0) rc = check_finite(out, label, err);
    if (rc) pp_voice_free(out);
    return rc;
}

/* ---- speech-core's voices/<name>.bin: u32 magic, version 1, streams 17, history 4, i64 cache[17·4],
 * u32 frames, u32 dim, f32 embeddings[frames·dim], all little endian ---- */

static int is_sc(const char *path) { return has_suffix(path, SUFFIX_SC) && !has_suffix(path, SUFFIX_BIN); }

int pp_voice_load_sc_memory(const void *buf, size_t len, const char *label, int64_t dim, pp_voice *out, char *err) {
    memset(out, 0, sizeof *out);
    const uint8_t *p = buf;
    if (len < SC_HEADER) return pp_fail(err, PP_EFORMAT, "%s: %zu bytes, shorter than a voice header", label, len);
    uint32_t magic = (uint32_t)rd_le(p, 4), version = (uint32_t)rd_le(p + 4, 4);
    uint32_t streams = (uint32_t)rd_le(p + 8, 4), history = (uint32_t)rd_le(p + 12, 4);
    if (magic != SC_MAGIC) return pp_fail(err, PP_EFORMAT, "%s: magic 0x%08x is not a voice file's", label, magic);
    if (version != 1 || streams != PP_VOICE_STREAMS || history != PP_VOICE_RING)
        return pp_fail(err, PP_EFORMAT, "%s: version %u with %u x %u cache; expected version 1 with %d x %d", label,
                       version, streams, history, PP_VOICE_STREAMS, PP_VOICE_RING);
    const uint8_t *frames_at = p + SC_HEADER - 8;
    int64_t frames = (int64_t)rd_le(frames_at, 4), width = (int64_t)rd_le(frames_at + 4, 4);
    int rc = check_dims(label, frames, width, dim, err);
    if (rc) return rc;
    if ((uint64_t)(len - SC_HEADER) != (uint64_t)frames * (uint64_t)width * 4)
        return pp_fail(err, PP_EFORMAT, "%s: %zu bytes of embeddings for %lld x %lld floats", label, len - SC_HEADER,
                       (long long)frames, (long long)width);
    if ((rc = alloc_embeddings(out, frames, width, label, err))) return rc;
    for (int i = 0; i < PP_VOICE_STREAMS * PP_VOICE_RING; i++)
        out->cache[i / PP_VOICE_RING][i % PP_VOICE_RING] = (int64_t)rd_le(p + 16 + 8 * i, 8);
    for (int64_t i = 0; i < frames * width; i++) out->embeddings[i] = f32_of((uint32_t)rd_le(p + SC_HEADER + 4 * i, 4));
    if ((rc = check_finite(out, label, err))) pp_voice_free(out);
    return rc;
}

int pp_voice_pair_json(const char *path, char *out, size_t cap) {
    if (!has_suffix(path, SUFFIX_BIN)) return 0;
    size_t stem = strlen(path) - strlen(SUFFIX_BIN);
    if (stem + sizeof SUFFIX_JSON > cap) return 0;
    memcpy(out, path, stem);
    memcpy(out + stem, SUFFIX_JSON, sizeof SUFFIX_JSON);
    return 1;
}

static int load_pair(const char *bin_path, int64_t dim, pp_voice *out, char *err) {
    char json_path[4096];
    if (!pp_voice_pair_json(bin_path, json_path, sizeof json_path))
        return pp_fail(err, PP_EINVAL, "%s: path too long", bin_path);
    unsigned char *bin = NULL, *json = NULL;
    size_t bin_len = 0, json_len = 0;
    int rc = pp_file_read_all(bin_path, MAX_VOICE_FILE, &bin, &bin_len, err);
    if (rc == 0) rc = pp_file_read_all(json_path, MAX_JSON_FILE, &json, &json_len, err);
    if (rc == 0) rc = pp_voice_load_pair_memory(bin, bin_len, (const char *)json, json_len, bin_path, dim, out, err);
    free(bin);
    free(json);
    return rc;
}

int pp_voice_load(const char *path, int64_t dim, pp_voice *out, char *err) {
    memset(out, 0, sizeof *out);
    if (has_suffix(path, SUFFIX_BIN)) return load_pair(path, dim, out, err);
    if (!has_suffix(path, SUFFIX_PT) && !is_sc(path))
        return pp_fail(err, PP_EINVAL, "%s: a voice file ends in .pt, .embeddings.bin or .bin", path);
    unsigned char *buf;
    size_t len;
    int rc = pp_file_read_all(path, MAX_VOICE_FILE, &buf, &len, err);
    if (rc) return rc;
    rc = is_sc(path) ? pp_voice_load_sc_memory(buf, len, path, dim, out, err)
                     : pp_voice_load_pt_memory(buf, len, path, dim, out, err);
    free(buf);
    return rc;
}

void pp_voice_free(pp_voice *v) {
    if (!v) return;
    free(v->embeddings);
    memset(v, 0, sizeof *v);
}

int pp_voice_save_pt(const char *path, const pp_voice *v, char *err) {
    int rc = check_dims(path, v->frames, v->dim, 0, err);
    if (rc) return rc;
    size_t n = (size_t)(v->frames * v->dim);
    uint8_t *bf = malloc(2 * n), cache[8 * PP_VOICE_STREAMS * PP_VOICE_RING];
    if (!bf) return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        uint16_t h = pp_f32_to_bf16(v->embeddings[i]);
        bf[2 * i] = (uint8_t)h, bf[2 * i + 1] = (uint8_t)(h >> 8);
    }
    for (int i = 0; i < PP_VOICE_STREAMS * PP_VOICE_RING; i++)
        for (int b = 0; b < 8; b++) cache[8 * i + b] = (uint8_t)((uint64_t)v->cache[i / PP_VOICE_RING][i % PP_VOICE_RING] >> (8 * b));
    pt_tensor t[2] = {
        {.name = "embeddings", .dtype = ST_BF16, .ndim = 4, .shape = {v->frames, 1, 1, v->dim}, .data = bf},
        {.name = "cache", .dtype = ST_I64, .ndim = 3, .shape = {1, PP_VOICE_STREAMS, PP_VOICE_RING}, .data = cache},
    };
    rc = pp_pt_save(path, t, 2, err);
    free(bf);
    return rc;
}

/* ---- names ---- */

/* Whether the n bytes at s end in suffix. */
static int stem_ends_in(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* A stem that ends in a voice suffix ("x.bin" of x.bin.pt) is refused: its name would be read as
 * that suffix and resolve to another file (x.bin, x.pt), so a listed voice could not be selected. */
int pp_voice_stem_valid(const char *s, size_t n) {
    if (n == 0 || n > PP_VOICE_NAME_MAX || s[0] == '.') return 0;
    if (stem_ends_in(s, n, SUFFIX_PT) || stem_ends_in(s, n, SUFFIX_SC)) return 0; /* .bin covers .embeddings.bin */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' || c == '.'))
            return 0;
        if (c == '.' && i + 1 < n && s[i + 1] == '.') return 0;
    }
    return 1;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/stem+suffix into buf; 0 when it does not fit. */
static int join(char *buf, size_t cap, const char *dir, const char *stem, size_t n, const char *suffix) {
    int k = snprintf(buf, cap, "%s/%.*s%s", dir, (int)n, stem, suffix);
    return k >= 0 && (size_t)k < cap;
}

/* A pair is listed only when both halves exist. */
static int pair_exists(const char *dir, const char *stem, size_t n) {
    char a[4096], b[4096];
    return join(a, sizeof a, dir, stem, n, SUFFIX_BIN) && join(b, sizeof b, dir, stem, n, SUFFIX_JSON) && is_file(a) &&
           is_file(b);
}

int pp_voice_resolve(const char *dir, const char *name, char *path_out, size_t path_cap, char *err) {
    if (!name) name = "";
    size_t n = strlen(name);
    if (has_suffix(name, SUFFIX_PT)) n -= strlen(SUFFIX_PT);
    else if (has_suffix(name, SUFFIX_BIN)) n -= strlen(SUFFIX_BIN);
    else if (is_sc(name))
        n -= strlen(SUFFIX_SC);
    if (!pp_voice_stem_valid(name, n))
        return pp_fail(err, PP_EINVAL, "bad voice name '%.80s' (letters, digits, '_', '-', '.'; at most %d; no paths)",
                       name, PP_VOICE_NAME_MAX);
    if (!join(path_out, path_cap, dir, name, n, SUFFIX_PT)) return pp_fail(err, PP_EINVAL, "%s: voice path too long", dir);
    if (is_file(path_out)) return 0;
    if (pair_exists(dir, name, n)) {
        join(path_out, path_cap, dir, name, n, SUFFIX_BIN);
        return 0;
    }
    if (join(path_out, path_cap, dir, name, n, SUFFIX_SC) && is_file(path_out)) return 0;
    return pp_fail(err, PP_ENOTFOUND, "voice '%.*s' not found in %s", (int)n, name, dir);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The stem of a one-file voice entry (NAME + suffix, a regular file), or 0. */
static size_t file_stem(const char *dir, const char *name, size_t len, const char *suffix) {
    char p[4096];
    size_t stem = len - strlen(suffix);
    return pp_voice_stem_valid(name, stem) && join(p, sizeof p, dir, name, len, "") && is_file(p) ? stem : 0;
}

/* The voice stem of a directory entry, or 0. */
static size_t entry_stem(const char *dir, const char *name) {
    size_t len = strlen(name);
    if (has_suffix(name, SUFFIX_PT)) return file_stem(dir, name, len, SUFFIX_PT);
    if (has_suffix(name, SUFFIX_BIN)) {
        size_t stem = len - strlen(SUFFIX_BIN);
        return pp_voice_stem_valid(name, stem) && pair_exists(dir, name, stem) ? stem : 0;
    }
    return is_sc(name) ? file_stem(dir, name, len, SUFFIX_SC) : 0;
}

int pp_voice_list(const char *dir, char ***names, size_t *count, char *err) {
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return pp_fail(err, PP_ENOTFOUND, "%s: cannot open the voices directory", dir);
    char **tmp = NULL;
    size_t n = 0, cap = 0, bytes = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        size_t k = entry_stem(dir, e->d_name);
        if (!k) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **t = realloc(tmp, cap * sizeof *t);
            if (!t) {
                rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", dir);
                break;
            }
            tmp = t;
        }
        if (!(tmp[n] = strndup(e->d_name, k))) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", dir);
        else bytes += k + 1, n++;
    }
    closedir(d);
    char **out = NULL;
    if (rc == 0 && !(out = malloc(n * sizeof *out + bytes + 1))) rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", dir);
    if (rc == 0) {
        if (n) qsort(tmp, n, sizeof *tmp, cmp_str); /* tmp is NULL when the folder holds no voice */
        char *cursor = (char *)(out + n);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (m > 0 && strcmp(out[m - 1], tmp[i]) == 0) continue;
            out[m++] = strcpy(cursor, tmp[i]);
            cursor += strlen(tmp[i]) + 1;
        }
        *names = out;
        *count = m;
    }
    for (size_t i = 0; i < n; i++) free(tmp[i]);
    free(tmp);
    return rc;
}
