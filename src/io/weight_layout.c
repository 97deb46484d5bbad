/* weight_layout: see weight_layout.h. Every check names the key at fault; the sanity checks of
 * docs/formats.md §7 refuse what cannot be decoded (bad scales) and warn about what decodes
 * but looks like a different layout (code histograms). */
#include "io/weight_layout.h"

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "io/quant.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define KEY_LEN 512

int pp_wl_check_dims(const st_file *f, const char *key, const int64_t *dims, int ndim, int64_t rows, int64_t cols,
                     char *err) {
    int64_t d[ST_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < ndim && nd < ST_MAX_DIMS; i++)
        if (dims[i] > 0) d[nd++] = dims[i];
    if (nd == 2 && d[0] == rows && d[1] == cols) return PP_OK;
    char got[128] = "[";
    for (int i = 0; i < nd; i++) {
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "%s%lld", i ? ", " : "", (long long)d[i]);
    }
    size_t l = strlen(got);
    snprintf(got + l, sizeof got - l, "]");
    return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld]", pp_st_path(f), key, got,
                   (long long)rows, (long long)cols);
}

int pp_wl_check_shape(const st_file *f, const st_tensor *t, int64_t rows, int64_t cols, char *err) {
    int rc = pp_wl_check_dims(f, t->name, t->shape, t->ndim, rows, cols, err);
    if (!rc && t->numel != rows * cols)
        rc = pp_fail(err, PP_EFORMAT, "%s: tensor '%s' holds %lld values, [%lld, %lld] needs %lld", pp_st_path(f),
                     t->name, (long long)t->numel, (long long)rows, (long long)cols, (long long)(rows * cols));
    return rc;
}

/* Fetches BASE+SUFFIX, which must exist with dtype want (ST_COUNT: any integer dtype). */
static int need(const st_file *f, const char *base, const char *suffix, st_dtype want, const st_tensor **out,
                char *err) {
    char key[KEY_LEN];
    int k = snprintf(key, sizeof key, "%s%s", base, suffix);
    if (k < 0 || (size_t)k >= sizeof key)
        return pp_fail(err, PP_EINVAL, "%s: key '%s%s' too long", pp_st_path(f), base, suffix);
    const st_tensor *t = pp_st_find(f, key);
    if (!t) return pp_fail(err, PP_EFORMAT, "%s: quantized tensor '%s' lacks its '%s' key", pp_st_path(f), base, key);
    int ok = want == ST_DTYPE_COUNT ? (t->dtype == ST_I64 || t->dtype == ST_I32 || t->dtype == ST_U8 ||
                                       t->dtype == ST_U32 || t->dtype == ST_U64 || t->dtype == ST_I16)
                                    : t->dtype == want;
    if (!ok)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' is %s, expected %s", pp_st_path(f), key,
                       pp_st_dtype_name(t->dtype),
                       want == ST_DTYPE_COUNT ? "an integer dtype" : pp_st_dtype_name(want));
    *out = t;
    return PP_OK;
}

/* A one-element integer key (.gs, .np2, .numel, .__numel__). */
static int need_scalar(const st_file *f, const char *base, const char *suffix, int64_t *v, char *err) {
    const st_tensor *t;
    int rc = need(f, base, suffix, ST_DTYPE_COUNT, &t, err);
    if (rc) return rc;
    if (t->numel != 1)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, expected 1", pp_st_path(f), t->name,
                       (long long)t->numel);
    return pp_st_load_i64(f, t, 0, 1, v, err);
}

/* A shape key (.shape, .__shape__): up to ST_MAX_DIMS entries. */
static int need_shape(const st_file *f, const char *base, const char *suffix, int64_t *dims, int *ndim, char *err) {
    const st_tensor *t;
    int rc = need(f, base, suffix, ST_DTYPE_COUNT, &t, err);
    if (rc) return rc;
    if (t->numel < 1 || t->numel > ST_MAX_DIMS)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, expected 1 to %d dims", pp_st_path(f), t->name,
                       (long long)t->numel, ST_MAX_DIMS);
    *ndim = (int)t->numel;
    return pp_st_load_i64(f, t, 0, t->numel, dims, err);
}

/* Product of the positive dims, the loaders' convention for zero-padded shape keys. */
static int64_t dims_numel(const int64_t *dims, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (dims[i] > 0) {
            if (n > INT64_MAX / dims[i]) return -1;
            n *= dims[i];
        }
    return n;
}

/* Group scales must be finite and non-negative, or decoding is meaningless. */
static int check_scales_f16(const st_file *f, const st_tensor *t, char *err) {
    for (int64_t g = 0; g < t->numel; g++) {
        float s = pp_f16_to_f32(quant_ld16(t->data, (size_t)g));
        if (!isfinite(s) || s < 0)
            return pp_fail(err, PP_EFORMAT, "%s: '%s'[%lld] = %g: scales must be finite and >= 0", pp_st_path(f),
                           t->name, (long long)g, s);
    }
    return PP_OK;
}

static int check_f32(const st_file *f, const st_tensor *t, int nonneg, char *err) {
    for (int64_t i = 0; i < t->numel; i++) {
        float v = quant_ldf32(t->data, (size_t)i);
        if (!isfinite(v) || (nonneg && v < 0))
            return pp_fail(err, PP_EFORMAT, "%s: '%s'[%lld] = %g: values must be finite%s", pp_st_path(f), t->name,
                           (long long)i, v, nonneg ? " and >= 0" : "");
    }
    return PP_OK;
}

/* most: the largest group the format's decoders take (INT8 rows of any length; the other formats
 * expand a whole group into a scratch of QUANT_MAX_NP2 values). */
static int check_group(const st_file *f, const char *key, int64_t gs, int64_t most, int64_t cols, char *err) {
    if (gs <= 0 || gs > (1 << 20))
        return pp_fail(err, PP_EFORMAT, "%s: '%s': group size %lld is out of range", pp_st_path(f), key, (long long)gs);
    if (gs > most)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: '%s': group size %lld exceeds the supported %lld", pp_st_path(f), key,
                       (long long)gs, (long long)most);
    if (cols % gs)
        return pp_fail(err, PP_EFORMAT, "%s: '%s': group size %lld does not divide the row length %lld", pp_st_path(f),
                       key, (long long)gs, (long long)cols);
    return PP_OK;
}

/* The writer's codes fall 16.4 / 33.6 / 33.6 / 16.4 % on Gaussian-like weights (§3.4); a far
 * different spread means the bytes are not NF2+WHT codes (or the wrong bit order). */
static void nf2_histogram(const st_tensor *packed) {
    int64_t count[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < packed->numel; i++) {
        uint8_t b = packed->data[i];
        count[b & 3]++;
        count[(b >> 2) & 3]++;
        count[(b >> 4) & 3]++;
        count[b >> 6]++;
    }
    double total = 4.0 * (double)packed->numel;
    if (total < 4096) return; /* too few codes for the fractions to mean anything */
    static const double expect[4] = {0.164, 0.336, 0.336, 0.164};
    for (int c = 0; c < 4; c++) {
        if (fabs(count[c] / total - expect[c]) > 0.06) {
            PP_WARN("weight", "'%s': NF2 code histogram %.1f/%.1f/%.1f/%.1f %%, expected about 16/34/34/16 %%",
                    packed->name, 100 * count[0] / total, 100 * count[1] / total, 100 * count[2] / total,
                    100 * count[3] / total);
            return;
        }
    }
}

int pp_wl_load_nf2(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err) {
    const st_tensor *packed = NULL, *scales = NULL;
    int64_t dims[ST_MAX_DIMS], gs = 0, np2 = 0, numel = 0;
    int ndim = 0, rc;
    if ((rc = need(f, base, ".packed", ST_U8, &packed, err)) || (rc = need(f, base, ".scales", ST_F16, &scales, err)) ||
        (rc = need_shape(f, base, ".shape", dims, &ndim, err)) || (rc = need_scalar(f, base, ".gs", &gs, err)) ||
        (rc = need_scalar(f, base, ".np2", &np2, err)) || (rc = need_scalar(f, base, ".numel", &numel, err)))
        return rc;
    int64_t want = dims_numel(dims, ndim);
    if (numel != want)
        return pp_fail(err, PP_EFORMAT, "%s: '%s.numel' is %lld but '%s.shape' holds %lld elements", pp_st_path(f),
                       base, (long long)numel, base, (long long)want);
    if ((rc = pp_wl_check_dims(f, packed->name, dims, ndim, rows, cols, err))) return rc;
    if ((rc = check_group(f, packed->name, gs, QUANT_MAX_NP2, cols, err))) return rc;
    if (gs % 4)
        return pp_fail(err, PP_EFORMAT, "%s: '%s.gs' = %lld is not a multiple of 4 codes per byte", pp_st_path(f), base,
                       (long long)gs);
    if (np2 < gs || (np2 & (np2 - 1)))
        return pp_fail(err, PP_EFORMAT, "%s: '%s.np2' = %lld is not a power of two >= the group size %lld",
                       pp_st_path(f), base, (long long)np2, (long long)gs);
    if (np2 > QUANT_MAX_NP2)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: '%s.np2' = %lld exceeds the supported %d", pp_st_path(f), base,
                       (long long)np2, QUANT_MAX_NP2);
    int64_t groups = numel / gs;
    if (scales->numel != groups)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld scales, %lld elements in groups of %lld need %lld",
                       pp_st_path(f), scales->name, (long long)scales->numel, (long long)numel, (long long)gs,
                       (long long)groups);
    if (packed->numel != groups * (gs / 4))
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld bytes, expected %lld (truncated or wrong group size)",
                       pp_st_path(f), packed->name, (long long)packed->numel, (long long)(groups * (gs / 4)));
    if ((rc = check_scales_f16(f, scales, err))) return rc;
    nf2_histogram(packed);
    w->fmt = PP_WF_NF2;
    w->data = packed->data;
    w->scales = scales->data;
    w->group = (int)gs;
    w->np2 = (int)np2;
    w->name = packed->name;
    return PP_OK;
}

int pp_wl_load_int4(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err) {
    const st_tensor *packed = NULL, *scales = NULL;
    int64_t dims[ST_MAX_DIMS], numel = 0;
    int ndim = 0, rc;
    if ((rc = need(f, base, "", ST_U8, &packed, err)) || (rc = need(f, base, ".__scales__", ST_F16, &scales, err)) ||
        (rc = need_shape(f, base, ".__shape__", dims, &ndim, err)) ||
        (rc = need_scalar(f, base, ".__numel__", &numel, err)))
        return rc;
    int64_t want = dims_numel(dims, ndim);
    if (numel != want)
        return pp_fail(err, PP_EFORMAT, "%s: '%s.__numel__' is %lld but '%s.__shape__' holds %lld elements",
                       pp_st_path(f), base, (long long)numel, base, (long long)want);
    if ((rc = pp_wl_check_dims(f, base, dims, ndim, rows, cols, err))) return rc;
    if (packed->numel * 2 != numel)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld bytes, %lld elements need %lld (truncated?)",
                       pp_st_path(f), base, (long long)packed->numel, (long long)numel, (long long)((numel + 1) / 2));
    /* The group size is not stored (§4.2): it follows from the byte and scale counts. */
    if (scales->numel <= 0 || numel % scales->numel)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld scales, which do not divide %lld elements into groups",
                       pp_st_path(f), scales->name, (long long)scales->numel, (long long)numel);
    int64_t gs = numel / scales->numel;
    if ((rc = check_group(f, base, gs, QUANT_MAX_NP2, cols, err))) return rc;
    if (gs % 2)
        return pp_fail(err, PP_EFORMAT, "%s: '%s': group size %lld is odd, groups would split a byte", pp_st_path(f),
                       base, (long long)gs);
    if ((rc = check_scales_f16(f, scales, err))) return rc;
    /* The INT4 writer never emits nibble 0 (|x/s| <= 7); bitsandbytes NF4 codes do, often. */
    int64_t zeros = 0;
    for (int64_t i = 0; i < packed->numel; i++) zeros += (packed->data[i] & 15) == 0 || (packed->data[i] >> 4) == 0;
    if (zeros)
        PP_WARN("weight", "'%s': %lld bytes hold nibble 0, which the INT4 writer never emits; is this NF4 data?", base,
                (long long)zeros);
    w->fmt = PP_WF_INT4;
    w->data = packed->data;
    w->scales = scales->data;
    w->group = (int)gs;
    w->name = packed->name;
    return PP_OK;
}

/* The bitsandbytes quant_state JSON blob: quant_type, blocksize, shape and the nested fields. */
typedef struct {
    int64_t block, nested_block;
    int64_t dims[ST_MAX_DIMS];
    int ndim;
    double offset;
    int has_nested;
} nf4_state;

static int json_int(const pp_json *v, int64_t *out) {
    if (!v || v->type != PP_JSON_NUMBER || !v->is_integer) return 0;
    *out = v->integer;
    return 1;
}

static int parse_state(const st_file *f, const st_tensor *blob, nf4_state *s, char *err) {
    pp_json_doc *doc;
    char jerr[PP_ERR_LEN];
    if (pp_json_parse((const char *)blob->data, blob->nbytes, &doc, jerr))
        return pp_fail(err, PP_EFORMAT, "%s: '%s': %s", pp_st_path(f), blob->name, jerr);
    const pp_json *root = pp_json_root(doc);
    const pp_json *qt = pp_json_get(root, "quant_type"), *shape = pp_json_get(root, "shape");
    const pp_json *off = pp_json_get(root, "nested_offset");
    int rc = PP_OK;
    memset(s, 0, sizeof *s);
    if (!qt || qt->type != PP_JSON_STRING || strcmp(qt->string, "nf4") != 0) {
        rc = pp_fail(err, PP_EUNSUPPORTED, "%s: '%s': quant_type %s%s%s, only \"nf4\" is supported", pp_st_path(f),
                     blob->name, qt && qt->type == PP_JSON_STRING ? "\"" : "",
                     qt && qt->type == PP_JSON_STRING ? qt->string : "missing",
                     qt && qt->type == PP_JSON_STRING ? "\"" : "");
    } else if (!json_int(pp_json_get(root, "blocksize"), &s->block) || s->block <= 0 || s->block % 2) {
        rc = pp_fail(err, PP_EFORMAT, "%s: '%s': blocksize missing, odd or not a positive integer", pp_st_path(f),
                     blob->name);
    } else if (!shape || shape->type != PP_JSON_ARRAY || shape->count < 1 || shape->count > ST_MAX_DIMS) {
        rc = pp_fail(err, PP_EFORMAT, "%s: '%s': shape missing or not an array of 1 to %d dims", pp_st_path(f),
                     blob->name, ST_MAX_DIMS);
    } else {
        s->ndim = (int)shape->count;
        for (int i = 0; i < s->ndim && !rc; i++)
            if (!json_int(shape->items[i], &s->dims[i]) || s->dims[i] <= 0)
                rc = pp_fail(err, PP_EFORMAT, "%s: '%s': shape[%d] is not a positive integer", pp_st_path(f),
                             blob->name, i);
        s->has_nested = json_int(pp_json_get(root, "nested_blocksize"), &s->nested_block);
        if (!rc && s->has_nested) {
            /* the offset is added to every scale as a float: one beyond float's range makes them infinite */
            if (s->nested_block <= 0 || s->nested_block > (1 << 20) || !off || off->type != PP_JSON_NUMBER ||
                !isfinite(off->number) || fabs(off->number) > FLT_MAX)
                rc = pp_fail(err, PP_EFORMAT, "%s: '%s': nested_blocksize or nested_offset invalid", pp_st_path(f),
                             blob->name);
            else
                s->offset = off->number;
        }
    }
    pp_json_free(doc);
    return rc;
}

int pp_wl_load_nf4(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err) {
    const st_tensor *packed = NULL, *absmax = NULL, *qmap = NULL, *blob = NULL, *nested = NULL, *nmap = NULL;
    nf4_state s;
    int rc;
    if ((rc = need(f, base, "", ST_U8, &packed, err)) ||
        (rc = need(f, base, ".quant_state.bitsandbytes__nf4", ST_U8, &blob, err)) ||
        (rc = need(f, base, ".quant_map", ST_F32, &qmap, err)) || (rc = parse_state(f, blob, &s, err)))
        return rc;
    if ((rc = need(f, base, ".absmax", s.has_nested ? ST_U8 : ST_F32, &absmax, err))) return rc;
    if (s.has_nested && ((rc = need(f, base, ".nested_absmax", ST_F32, &nested, err)) ||
                         (rc = need(f, base, ".nested_quant_map", ST_F32, &nmap, err))))
        return rc;
    if ((rc = pp_wl_check_dims(f, blob->name, s.dims, s.ndim, rows, cols, err))) return rc;
    if ((rc = check_group(f, blob->name, s.block, QUANT_MAX_NP2, cols, err))) return rc;
    int64_t numel = rows * cols, blocks = numel / s.block;
    if (packed->numel != numel / 2)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld bytes, %lld elements need %lld (truncated?)",
                       pp_st_path(f), base, (long long)packed->numel, (long long)numel, (long long)(numel / 2));
    if (absmax->numel != blocks)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, %lld blocks of %lld need %lld", pp_st_path(f),
                       absmax->name, (long long)absmax->numel, (long long)numel, (long long)s.block, (long long)blocks);
    if (qmap->numel != 16)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, expected 16", pp_st_path(f), qmap->name,
                       (long long)qmap->numel);
    if ((rc = check_f32(f, qmap, 0, err))) return rc;
    if (s.has_nested) {
        int64_t nb = (blocks + s.nested_block - 1) / s.nested_block;
        if (nested->numel != nb)
            return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, expected %lld", pp_st_path(f), nested->name,
                           (long long)nested->numel, (long long)nb);
        if (nmap->numel != 256)
            return pp_fail(err, PP_EFORMAT, "%s: '%s' holds %lld values, expected 256", pp_st_path(f), nmap->name,
                           (long long)nmap->numel);
        if ((rc = check_f32(f, nested, 1, err)) || (rc = check_f32(f, nmap, 0, err))) return rc;
    } else if ((rc = check_f32(f, absmax, 1, err))) {
        return rc;
    }
    w->fmt = PP_WF_NF4;
    w->data = packed->data;
    w->scales = absmax->data;
    w->group = (int)s.block;
    w->quant_map = (const float *)(const void *)qmap->data;
    if (s.has_nested) {
        w->nested_absmax = (const float *)(const void *)nested->data;
        w->nested_map = (const float *)(const void *)nmap->data;
        w->nested_block = (int)s.nested_block;
        w->nested_offset = (float)s.offset;
    }
    w->name = packed->name;
    return PP_OK;
}

/* ---- INT8: bitsandbytes' Linear8bitLt state dict (P.weight I8 [out, in], P.SCB F32 [out], one absmax per
 * row) and its block form (P.SCB [out, in/B], one absmax per B inputs); w = q·absmax/127 (docs/formats.md §8).
 * An optional P.zero_point I8 shaped as P.SCB makes it asymmetric: w = (q − zero)·absmax/127. ---- */

static int int8_key(const char *base, const char *suffix, char *key, size_t cap) {
    size_t n = strlen(base), stem = n > 7 && !strcmp(base + n - 7, ".weight") ? n - 7 : n;
    int k = snprintf(key, cap, "%.*s.%s", (int)stem, base, suffix);
    return k < 0 || (size_t)k >= cap ? PP_EINVAL : PP_OK;
}

int pp_wl_int8_scales_key(const char *base, char *key, size_t cap) { return int8_key(base, "SCB", key, cap); }
int pp_wl_int8_zeros_key(const char *base, char *key, size_t cap) { return int8_key(base, "zero_point", key, cap); }

const st_tensor *pp_wl_int8_scales(const st_file *f, const char *base) {
    char key[KEY_LEN];
    return pp_wl_int8_scales_key(base, key, sizeof key) ? NULL : pp_st_find(f, key);
}

int pp_wl_load_int8(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err) {
    const st_tensor *codes = pp_st_find(f, base), *scb = pp_wl_int8_scales(f, base);
    if (!codes) return pp_fail(err, PP_EFORMAT, "%s: '%s' has INT8 scales but no codes tensor", pp_st_path(f), base);
    if (codes->dtype != ST_I8)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' is %s; INT8 codes (beside '%s') must be I8", pp_st_path(f), base,
                       pp_st_dtype_name(codes->dtype), scb->name);
    int rc = pp_wl_check_shape(f, codes, rows, cols, err);
    if (rc) return rc;
    if (scb->dtype != ST_F32)
        return pp_fail(err, PP_EFORMAT, "%s: '%s' is %s; INT8 absmax scales must be F32", pp_st_path(f), scb->name,
                       pp_st_dtype_name(scb->dtype));
    int64_t per_row = scb->ndim == 2 ? scb->shape[1] : 1;
    if (scb->ndim < 1 || scb->ndim > 2 || scb->shape[0] != rows || per_row < 1 || cols % per_row)
        return pp_fail(err, PP_EFORMAT,
                       "%s: '%s' holds %lld scales as [%lld%s]; expected [%lld] (one per row) or "
                       "[%lld, blocks] with blocks dividing %lld",
                       pp_st_path(f), scb->name, (long long)scb->numel, (long long)(scb->ndim ? scb->shape[0] : 0),
                       scb->ndim == 2 ? ", ..." : "", (long long)rows, (long long)rows, (long long)cols);
    if ((rc = check_group(f, base, cols / per_row, cols, cols, err)) || (rc = check_f32(f, scb, 1, err))) return rc;
    char zkey[KEY_LEN];
    const st_tensor *zeros = pp_wl_int8_zeros_key(base, zkey, sizeof zkey) ? NULL : pp_st_find(f, zkey);
    if (zeros && (zeros->dtype != ST_I8 || zeros->numel != scb->numel))
        return pp_fail(err, PP_EFORMAT, "%s: '%s' is %s with %lld values; zero points must be I8, one per scale (%lld)",
                       pp_st_path(f), zeros->name, pp_st_dtype_name(zeros->dtype), (long long)zeros->numel,
                       (long long)scb->numel);
    w->zeros = zeros ? (const int8_t *)(const void *)zeros->data : NULL;
    w->fmt = PP_WF_INT8;
    w->data = codes->data;
    w->scales = scb->data;
    w->group = (int)(cols / per_row);
    w->name = codes->name;
    return PP_OK;
}
