/* weight: see weight.h. This file finds the layout of a name, loads dense tensors, and holds
 * the format-independent operations (views, sizes, reference decode, load statistics); the
 * quantized layouts' loaders are in weight_layout.c. */
#include "io/weight.h"

#include "base/err.h"
#include "base/log.h"
#include "io/quant.h"
#include "io/weight_layout.h"

#include <stdio.h>
#include <string.h>

#define KEY_LEN 512

const char *pp_wformat_name(pp_wformat fmt) {
    static const char *names[PP_WF_COUNT] = {"f32", "f16",  "bf16", "nf2",  "int4",
                                             "nf4", "q4_0", "q8_0", "q4_k", "int8"};
    return (unsigned)fmt < PP_WF_COUNT ? names[fmt] : "?";
}

/* `X.in_proj_weight` <-> `X.in_proj.weight`: the raw parameter and the module key of the
 * same matrix (forks that wrap attention in nn.Linear save the latter). */
static int alt_name(const char *name, char *alt, size_t cap) {
    static const char *const pairs[2][2] = {{"in_proj_weight", "in_proj.weight"}, {"in_proj.weight", "in_proj_weight"}};
    size_t n = strlen(name);
    for (int i = 0; i < 2; i++) {
        size_t m = strlen(pairs[i][0]);
        if (n >= m && strcmp(name + n - m, pairs[i][0]) == 0) {
            int k = snprintf(alt, cap, "%.*s%s", (int)(n - m), name, pairs[i][1]);
            return k > 0 && (size_t)k < cap;
        }
    }
    return 0;
}

static const st_tensor *find_suffix(const st_file *f, const char *base, const char *suffix) {
    char key[KEY_LEN];
    int k = snprintf(key, sizeof key, "%s%s", base, suffix);
    return k > 0 && (size_t)k < sizeof key ? pp_st_find(f, key) : NULL;
}

int pp_wformat_parse(const char *name, pp_wformat *out) {
    for (int f = 0; f < PP_WF_COUNT; f++)
        if (!strcmp(name, pp_wformat_name((pp_wformat)f))) {
            *out = (pp_wformat)f;
            return PP_OK;
        }
    return PP_ENOTFOUND;
}

typedef enum { LAYOUT_NONE, LAYOUT_DENSE, LAYOUT_NF2, LAYOUT_INT4, LAYOUT_NF4, LAYOUT_INT8 } layout;

/* The metadata keys decide: a quantized layout's bare key (INT4, NF4) is itself a U8 tensor. */
static layout detect(const st_file *f, const char *base) {
    if (find_suffix(f, base, ".packed")) return LAYOUT_NF2;
    if (find_suffix(f, base, ".__scales__")) return LAYOUT_INT4;
    if (find_suffix(f, base, ".quant_state.bitsandbytes__nf4") || find_suffix(f, base, ".absmax")) return LAYOUT_NF4;
    if (pp_wl_int8_scales(f, base)) return LAYOUT_INT8;
    if (pp_st_find(f, base)) return LAYOUT_DENSE;
    return LAYOUT_NONE;
}

int pp_wformat_block_bytes(pp_wformat fmt) {
    switch (fmt) {
    case PP_WF_Q4_0: return QUANT_Q4_0_BYTES;
    case PP_WF_Q8_0: return QUANT_Q8_0_BYTES;
    case PP_WF_Q4K: return QUANT_Q4_K_BYTES;
    default: return 0;
    }
}

/* A ggml block's f16 scale that is NaN or infinite turns its 32 or 256 weights, and every
 * output they feed, into NaN: refuse it here, once, naming the block, as the other layouts'
 * scales are checked (weight_layout.c). */
static int check_block_scales(const st_file *f, const st_tensor *t, pp_wformat fmt, int64_t blocks_per_row,
                              char *err) {
    int bytes = pp_wformat_block_bytes(fmt), which;
    int64_t bad = pp_quant_ggml_bad_scale(t->data, (int64_t)t->nbytes / bytes, bytes, &which);
    if (bad < 0) return PP_OK;
    float v = pp_f16_to_f32(quant_ld16(t->data + bad * bytes, (size_t)which));
    return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' (%s): block %lld (row %lld) has %s = %g; block scales must be "
                   "finite", pp_st_path(f), t->name, pp_wformat_name(fmt), (long long)bad,
                   (long long)(bad / blocks_per_row), which ? "dmin" : "d", (double)v);
}

static int load_dense(const st_file *f, const st_tensor *t, int64_t rows, int64_t cols, pp_weight *w, char *err) {
    switch (t->dtype) {
    case ST_F32: w->fmt = PP_WF_F32; break;
    case ST_F16: w->fmt = PP_WF_F16; break;
    case ST_BF16: w->fmt = PP_WF_BF16; break;
    case ST_Q4_0: w->fmt = PP_WF_Q4_0, w->group = QUANT_Q4_0_BLOCK; break;
    case ST_Q8_0: w->fmt = PP_WF_Q8_0, w->group = QUANT_Q8_0_BLOCK; break;
    case ST_Q4_K: w->fmt = PP_WF_Q4K, w->group = QUANT_Q4_K_BLOCK; break;
    default:
        return pp_fail(err, PP_EUNSUPPORTED,
                       "%s: tensor '%s' is %s with no quantization keys beside it; expected F32, F16, BF16 or "
                       "(GGUF) Q4_0, Q8_0, Q4_K",
                       pp_st_path(f), t->name, pp_st_dtype_name(t->dtype));
    }
    int rc = pp_wl_check_shape(f, t, rows, cols, err);
    if (!rc && w->group) rc = check_block_scales(f, t, w->fmt, cols / w->group, err);
    if (rc) return rc;
    w->data = t->data;
    w->name = t->name;
    return PP_OK;
}

static int load_as(const st_file *f, const char *base, layout l, int64_t rows, int64_t cols, pp_weight *w,
                   char *err) {
    switch (l) {
    case LAYOUT_DENSE: return load_dense(f, pp_st_find(f, base), rows, cols, w, err);
    case LAYOUT_NF2: return pp_wl_load_nf2(f, base, rows, cols, w, err);
    case LAYOUT_INT4: return pp_wl_load_int4(f, base, rows, cols, w, err);
    case LAYOUT_NF4: return pp_wl_load_nf4(f, base, rows, cols, w, err);
    case LAYOUT_INT8: return pp_wl_load_int8(f, base, rows, cols, w, err);
    case LAYOUT_NONE: break;
    }
    return pp_fail(err, PP_ENOTFOUND, "%s: tensor '%s' not found", pp_st_path(f), base);
}

int pp_weight_load(const st_file *f, const char *name, int64_t rows, int64_t cols, pp_weight *out, char *err) {
    if (rows <= 0 || cols <= 0)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s': bad expected shape [%lld, %lld]", pp_st_path(f), name,
                       (long long)rows, (long long)cols);
    char alt[KEY_LEN];
    const char *base = name;
    layout l = detect(f, name);
    if (l == LAYOUT_NONE && alt_name(name, alt, sizeof alt)) {
        l = detect(f, alt);
        if (l != LAYOUT_NONE) base = alt;
    }
    if (l == LAYOUT_NONE)
        return pp_fail(err, PP_ENOTFOUND,
                       "%s: tensor '%s' not found (no dense key, no .packed, .__scales__, bitsandbytes or .SCB keys)",
                       pp_st_path(f), name);
    pp_weight w;
    memset(&w, 0, sizeof w);
    w.rows = rows;
    w.cols = cols;
    int rc = load_as(f, base, l, rows, cols, &w, err);
    if (rc) return rc;
    *out = w;
    return PP_OK;
}

int pp_weight_exists(const st_file *f, const char *name) {
    char alt[KEY_LEN];
    if (detect(f, name) != LAYOUT_NONE) return 1;
    return alt_name(name, alt, sizeof alt) && detect(f, alt) != LAYOUT_NONE;
}

pp_weight pp_weight_rows(const pp_weight *w, int64_t r0, int64_t n) {
    pp_weight v = *w;
    v.elem0 = w->elem0 + r0 * w->cols;
    v.rows = n;
    return v;
}

size_t pp_weight_bytes(const pp_weight *w) {
    size_t numel = (size_t)(w->rows * w->cols);
    switch (w->fmt) {
    case PP_WF_F32: return numel * 4;
    case PP_WF_F16:
    case PP_WF_BF16: return numel * 2;
    case PP_WF_NF2: return numel / 4 + numel / (size_t)w->group * 2;
    case PP_WF_INT4: return numel / 2 + numel / (size_t)w->group * 2;
    case PP_WF_NF4: {
        size_t blocks = numel / (size_t)w->group;
        size_t b = numel / 2 + 16 * 4;
        if (!w->nested_absmax) return b + blocks * 4;
        return b + blocks + (blocks + (size_t)w->nested_block - 1) / (size_t)w->nested_block * 4 + 256 * 4;
    }
    case PP_WF_Q4_0:
    case PP_WF_Q8_0:
    case PP_WF_Q4K: return numel / (size_t)w->group * (size_t)pp_wformat_block_bytes(w->fmt);
    case PP_WF_INT8: return numel + numel / (size_t)w->group * (w->zeros ? 5 : 4);
    case PP_WF_COUNT: break;
    }
    return 0;
}

void pp_weight_group_scales(const pp_weight *w, int64_t g0, int64_t n, float *out) {
    if (w->fmt == PP_WF_INT8) {
        for (int64_t i = 0; i < n; i++) out[i] = quant_int8_scale(w->scales, (size_t)(g0 + i));
    } else if (w->fmt != PP_WF_NF4) {
        for (int64_t i = 0; i < n; i++) out[i] = pp_f16_to_f32(quant_ld16(w->scales, (size_t)(g0 + i)));
    } else if (!w->nested_absmax) {
        for (int64_t i = 0; i < n; i++) out[i] = quant_ldf32(w->scales, (size_t)(g0 + i));
    } else {
        /* the nested block advances by counting: no division per group in this hot loop */
        if (n <= 0) return;
        const uint8_t *codes = w->scales;
        int64_t blk = g0 / w->nested_block, left = w->nested_block - g0 % w->nested_block;
        float absmax = quant_ldf32(w->nested_absmax, (size_t)blk);
        for (int64_t i = 0, g = g0; i < n; i++, g++) {
            if (left-- == 0) {
                absmax = quant_ldf32(w->nested_absmax, (size_t)++blk);
                left = w->nested_block - 1;
            }
            out[i] = quant_ldf32(w->nested_map, codes[g]) * absmax + w->nested_offset;
        }
    }
}

void pp_weight_decode_span(const pp_weight *w, int64_t r, int64_t c0, int64_t len, float *dst) {
    int64_t e = w->elem0 + r * w->cols + c0;
    const uint8_t *d = w->data;
    float tmp[QUANT_MAX_NP2];
    switch (w->fmt) {
    case PP_WF_F32:
        for (int64_t i = 0; i < len; i++) dst[i] = quant_ldf32(d, (size_t)(e + i));
        return;
    case PP_WF_F16:
        for (int64_t i = 0; i < len; i++) dst[i] = pp_f16_to_f32(quant_ld16(d, (size_t)(e + i)));
        return;
    case PP_WF_BF16:
        for (int64_t i = 0; i < len; i++) dst[i] = pp_bf16_to_f32(quant_ld16(d, (size_t)(e + i)));
        return;
    case PP_WF_Q4_0:
    case PP_WF_Q8_0:
    case PP_WF_Q4K:
        for (int64_t k = 0; k < len; k += w->group) {
            const uint8_t *blk = d + (e + k) / w->group * pp_wformat_block_bytes(w->fmt);
            if (w->fmt == PP_WF_Q4_0)
                pp_quant_q4_0_decode_block(blk, dst + k);
            else if (w->fmt == PP_WF_Q8_0)
                pp_quant_q8_0_decode_block(blk, dst + k);
            else
                pp_quant_q4_k_decode_block(blk, dst + k);
        }
        return;
    case PP_WF_INT8: /* any span: a row's group may be the whole row */
        for (int64_t i = 0; i < len; i++) {
            float s;
            int64_t g = (e + i) / w->group;
            pp_weight_group_scales(w, g, 1, &s);
            dst[i] = (float)((int8_t)d[e + i] - (w->zeros ? w->zeros[g] : 0)) * s;
        }
        return;
    case PP_WF_NF2:
    case PP_WF_INT4:
    case PP_WF_NF4:
        break;
    case PP_WF_COUNT: return;
    }
    int gs = w->group;
    for (int64_t k = 0; k < len; k += gs) {
        int64_t g = (e + k) / gs;
        float s;
        pp_weight_group_scales(w, g, 1, &s);
        if (w->fmt == PP_WF_NF2) {
            pp_quant_nf2_decode_group(d + g * (gs / 4), s, gs, w->np2, tmp, dst + k);
        } else if (w->fmt == PP_WF_INT4) {
            pp_quant_int4_decode_group(d + g * (gs / 2), s, gs, dst + k);
        } else {
            float table[16];
            for (int i = 0; i < 16; i++) table[i] = quant_ldf32(w->quant_map, (size_t)i);
            pp_quant_nf4_decode_block(d + g * (gs / 2), table, s, gs, dst + k);
        }
    }
}

int pp_weight_decode_rows(const pp_weight *w, int64_t r0, int64_t n, float *dst, char *err) {
    if (r0 < 0 || n < 0 || r0 + n > w->rows)
        return pp_fail(err, PP_EINVAL, "weight '%s': rows [%lld, %lld) outside its %lld rows",
                       w->name ? w->name : "?", (long long)r0, (long long)(r0 + n), (long long)w->rows);
    for (int64_t r = 0; r < n; r++) pp_weight_decode_span(w, r0 + r, 0, w->cols, dst + r * w->cols);
    return PP_OK;
}

void pp_weight_stats_add(pp_weight_stats *s, const pp_weight *w) {
    if ((unsigned)w->fmt >= PP_WF_COUNT) return;
    s->tensors[w->fmt]++;
    s->bytes[w->fmt] += pp_weight_bytes(w);
}

void pp_weight_stats_log(const pp_weight_stats *s, const char *module, const char *what) {
    for (int f = 0; f < PP_WF_COUNT; f++) {
        if (!s->tensors[f]) continue;
        PP_INFO(module, "%s: %s %lld tensors, %.3f GiB (%llu bytes)", what, pp_wformat_name((pp_wformat)f),
                (long long)s->tensors[f], (double)s->bytes[f] / (1024.0 * 1024.0 * 1024.0),
                (unsigned long long)s->bytes[f]);
    }
}
