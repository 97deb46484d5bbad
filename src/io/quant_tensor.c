/* quant_tensor: see quant_tensor.h. */
#include "io/quant_tensor.h"

#include "base/err.h"
#include "base/rng.h"
#include "io/half.h"
#include "io/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_ELEMS (1 << 22) /* 16 MiB of f32 source per chunk */
#define NF4_NESTED_BLOCK 256  /* bitsandbytes' double-quantization block */

int pp_quantize_default_group(pp_wformat fmt) { return fmt == PP_WF_NF2 || fmt == PP_WF_INT8 ? 128 : 64; }

int pp_quantize_check(pp_wformat fmt, int gs, char *err) {
    if (fmt != PP_WF_NF2 && fmt != PP_WF_INT4 && fmt != PP_WF_NF4 && fmt != PP_WF_INT8)
        return pp_fail(err, PP_EINVAL, "quantize: format %s is not a quantized layout", pp_wformat_name(fmt));
    if (gs == PP_QUANTIZE_ROW)
        return fmt == PP_WF_INT8 ? PP_OK
                                 : pp_fail(err, PP_EINVAL, "quantize: one scale per row is an INT8 layout only");
    if (gs < 2 || gs > QUANT_MAX_NP2 || gs % (fmt == PP_WF_NF2 ? 4 : 2))
        return pp_fail(err, PP_EINVAL, "quantize: group size %d must be a multiple of %d in [%d, %d]", gs,
                       fmt == PP_WF_NF2 ? 4 : 2, fmt == PP_WF_NF2 ? 4 : 2, QUANT_MAX_NP2);
    return PP_OK;
}

uint64_t pp_quantized_bytes(pp_wformat fmt, int group, int64_t rows, int64_t cols) {
    pp_weight w = {.fmt = fmt,
                   .rows = rows,
                   .cols = cols,
                   .group = group == PP_QUANTIZE_ROW ? (int)cols : group,
                   .nested_absmax = fmt == PP_WF_NF4 ? pp_quant_nf4_table : NULL,
                   .nested_block = NF4_NESTED_BLOCK};
    return pp_weight_bytes(&w);
}

/* NF2's Walsh-Hadamard length for a group: the power of two at least its size. */
static int nf2_transform_length(int group) {
    int np2 = 1;
    while (np2 < group) np2 *= 2;
    return np2;
}

static int64_t chunk_rows(int64_t cols) { return cols >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / cols; }

/* Codes and per-group scales of source rows [r0, r0 + nr) (x holds them), at their offsets. */
static void quantize_rows(pp_qtensor *q, const float *x, int64_t r0, int64_t nr, float *absmax) {
    const pp_weight *w = &q->w;
    int64_t n = nr * w->cols, e0 = r0 * w->cols, gs = w->group, g0 = e0 / gs;
    uint8_t *codes = q->codes;
    switch (w->fmt) {
    case PP_WF_NF2:
        pp_quant_nf2_quantize(x, n / gs, (int)gs, w->np2, codes + e0 / 4, (uint16_t *)q->scales + g0);
        break;
    case PP_WF_INT4: pp_quant_int4_quantize(x, n / gs, (int)gs, codes + e0 / 2, (uint16_t *)q->scales + g0); break;
    case PP_WF_NF4: pp_quant_nf4_quantize(x, n / gs, (int)gs, codes + e0 / 2, absmax + g0); break;
    default: pp_quant_int8_quantize(x, nr, w->cols, gs, (int8_t *)codes + e0, (float *)q->scales + g0); break;
    }
}

static int alloc_buffers(pp_qtensor *q, float **absmax) {
    const pp_weight *w = &q->w;
    size_t numel = (size_t)(w->rows * w->cols), groups = numel / (size_t)w->group;
    q->codes_bytes = w->fmt == PP_WF_NF2 ? numel / 4 : w->fmt == PP_WF_INT8 ? numel : numel / 2;
    q->scales_bytes = groups * (w->fmt == PP_WF_INT8 ? 4 : w->fmt == PP_WF_NF4 ? 1 : 2);
    q->codes = malloc(q->codes_bytes);
    q->scales = malloc(q->scales_bytes);
    if (!q->codes || !q->scales) return 0;
    if (w->fmt != PP_WF_NF4) return 1;
    size_t nested = (groups + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
    q->nested_bytes = nested * sizeof(float);
    q->nested = malloc(q->nested_bytes);
    q->nested_map = malloc(256 * sizeof(float));
    *absmax = malloc(groups * sizeof(float)); /* before double quantization */
    return q->nested && q->nested_map && *absmax;
}

/* NF4's double quantization, once every block's absmax is known. */
static void nest(pp_qtensor *q, const float *absmax) {
    pp_weight *w = &q->w;
    int64_t blocks = w->rows * w->cols / w->group;
    pp_quant_nf4_dynamic_map(q->nested_map);
    w->nested_offset = pp_quant_nf4_nest(absmax, blocks, NF4_NESTED_BLOCK, q->nested_map, q->scales, q->nested);
    w->quant_map = pp_quant_nf4_table;
    w->nested_absmax = q->nested;
    w->nested_map = q->nested_map;
    w->nested_block = NF4_NESTED_BLOCK;
}

/* The decode against the source, chunk by chunk (a second read of the source). */
static int cosine(const st_file *f, const st_tensor *t, pp_qtensor *q, float *x, float *dec, char *err) {
    int64_t rows = q->w.rows, cols = q->w.cols;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows(cols)) {
        int64_t nr = rows - r0 < chunk_rows(cols) ? rows - r0 : chunk_rows(cols), n = nr * cols;
        int rc = pp_st_load_f32(f, t, r0 * cols, n, x, err);
        if (!rc) rc = pp_weight_decode_rows(&q->w, r0, nr, dec, err);
        if (rc) return rc;
        for (int64_t i = 0; i < n; i++) {
            sxy += (double)x[i] * dec[i];
            sxx += (double)x[i] * x[i];
            syy += (double)dec[i] * dec[i];
        }
    }
    /* An all-zero tensor decodes to zeros, exactly: cosine 1, not the 0 of 0/0 guarded, which
     * would report it as the worst-quantized tensor of the model. */
    q->cosine = sxx == 0 && syy == 0 ? 1.0 : sxy / sqrt(sxx * syy + 1e-300);
    return PP_OK;
}

/* A NaN or infinity would quantize to a scale the loader refuses (infinite) or, lost by the max
 * over its group, to a silently wrong code; copied, it would be written as it is. One pass over
 * the mapping, on the stored bits (a 16-bit float's exponent all ones). */
int pp_quantize_check_finite(const st_file *f, const st_tensor *t, char *err) {
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) return PP_OK;
    const uint8_t *p = t->data;
    uint16_t exponent = t->dtype == ST_F16 ? 0x7C00u : 0x7F80u; /* of a 16-bit float */
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == ST_F32 ? isfinite(quant_ldf32(p, (size_t)i)) : (quant_ld16(p, (size_t)i) & exponent) != exponent)
            continue;
        float v;
        char row[40] = "";
        pp_st_load_f32(f, t, i, 1, &v, err);
        if (t->ndim == 2) snprintf(row, sizeof row, " (row %lld)", (long long)(i / t->shape[1]));
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s': element %lld%s is %g; only finite weights can be quantized "
                       "or written", pp_st_path(f), t->name, (long long)i, row, (double)v);
    }
    return PP_OK;
}

/* NF2 and INT4 store their group scales as F16: a group whose RMS (NF2) or max|w|/7 (INT4) passes
 * 65504 would be written as an infinite scale, which the loader refuses. Refuse it here instead,
 * naming the group and its largest weight; INT8 and NF4 keep F32 scales and take it. x holds the
 * chunk's groups g0.. (n of them). */
static int check_scales_fit(const st_file *f, const st_tensor *t, const pp_qtensor *q, const float *x, int64_t g0,
                            int64_t n, char *err) {
    if (q->w.fmt != PP_WF_NF2 && q->w.fmt != PP_WF_INT4) return PP_OK;
    const uint16_t *scales = q->scales;
    int64_t gs = q->w.group;
    for (int64_t g = g0; g < g0 + n; g++) {
        if (isfinite(pp_f16_to_f32(scales[g]))) continue;
        float most = 0;
        for (int64_t j = 0; j < gs; j++) most = fmaxf(most, fabsf(x[(g - g0) * gs + j]));
        return pp_fail(err, PP_EFORMAT,
                       "%s: tensor '%s': group %lld (row %lld) holds a weight of %g, whose %s scale exceeds F16's "
                       "65504; quantize it to int8 or nf4 (F32 scales)",
                       pp_st_path(f), t->name, (long long)g, (long long)(g * gs / t->shape[1]), (double)most,
                       pp_wformat_name(q->w.fmt));
    }
    return PP_OK;
}

int pp_quantize_tensor(const st_file *f, const st_tensor *t, pp_wformat fmt, int group, pp_qtensor *q, char *err) {
    memset(q, 0, sizeof *q);
    int rc = pp_quantize_check(fmt, group, err);
    if (rc) return rc;
    if (t->ndim != 2 || (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16))
        return pp_fail(err, PP_EUNSUPPORTED,
                       "%s: tensor '%s' is %s with %d dims; only 2-D F32, F16 and BF16 tensors "
                       "can be quantized",
                       pp_st_path(f), t->name, pp_st_dtype_name(t->dtype), t->ndim);
    int64_t rows = t->shape[0], cols = t->shape[1], gs = group == PP_QUANTIZE_ROW ? cols : group;
    if (rows < 1 || cols < 1) /* rows of no weights would also divide the chunk by zero */
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s' [%lld, %lld] holds no weights to quantize", pp_st_path(f),
                       t->name, (long long)rows, (long long)cols);
    if (cols > CHUNK_ELEMS)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s': rows of %lld exceed %d elements", pp_st_path(f), t->name,
                       (long long)cols, CHUNK_ELEMS);
    if (cols % gs)
        return pp_fail(err, PP_EINVAL,
                       "%s: tensor '%s': row length %lld is not a multiple of the group size %lld "
                       "(pick another group)",
                       pp_st_path(f), t->name, (long long)cols, (long long)gs);
    q->w = (pp_weight){.fmt = fmt,
                       .rows = rows,
                       .cols = cols,
                       .group = (int)gs,
                       .np2 = fmt == PP_WF_NF2 ? nf2_transform_length((int)gs) : 0,
                       .name = t->name};
    if ((rc = pp_quantize_check_finite(f, t, err))) return rc;
    float *absmax = NULL, *x = malloc(sizeof(float) * CHUNK_ELEMS), *dec = malloc(sizeof(float) * CHUNK_ELEMS);
    if (!x || !dec || !alloc_buffers(q, &absmax))
        rc = pp_fail(err, PP_ENOMEM, "%s: tensor '%s': out of memory to quantize it", pp_st_path(f), t->name);
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += chunk_rows(cols)) {
        int64_t nr = rows - r0 < chunk_rows(cols) ? rows - r0 : chunk_rows(cols);
        if (!(rc = pp_st_load_f32(f, t, r0 * cols, nr * cols, x, err))) {
            quantize_rows(q, x, r0, nr, absmax);
            rc = check_scales_fit(f, t, q, x, r0 * cols / gs, nr * cols / gs, err);
        }
    }
    q->w.data = q->codes;
    q->w.scales = q->scales;
    if (!rc && fmt == PP_WF_NF4) nest(q, absmax);
    if (!rc) rc = cosine(f, t, q, x, dec, err);
    free(absmax);
    free(x);
    free(dec);
    if (rc) pp_qtensor_free(q);
    return rc;
}

int pp_qtensor_random_nf2(int64_t rows, int64_t cols, int group, float rms, uint64_t seed, pp_qtensor *q, char *err) {
    memset(q, 0, sizeof *q);
    int rc = pp_quantize_check(PP_WF_NF2, group, err);
    if (rc) return rc;
    if (rows < 1 || cols < 1 || cols % group)
        return pp_fail(err, PP_EINVAL, "random NF2 tensor [%lld, %lld]: rows of %d-weight groups only", (long long)rows,
                       (long long)cols, group);
    q->w =
        (pp_weight){.fmt = PP_WF_NF2, .rows = rows, .cols = cols, .group = group, .np2 = nf2_transform_length(group)};
    if (!alloc_buffers(q, NULL)) {
        pp_qtensor_free(q);
        return pp_fail(err, PP_ENOMEM, "random NF2 tensor [%lld, %lld]: out of memory", (long long)rows,
                       (long long)cols);
    }
    /* A transformed Gaussian group is Gaussian: a code is an outer one when |z| passes the
     * midpoint of the two positive centroids. */
    const float *c = pp_quant_nf2_codebook;
    double outer = 0.5 * erfc(0.5 * (c[2] + c[3]) / sqrt(2.0)),
           mean_square = 2 * outer * c[3] * c[3] + (1 - 2 * outer) * c[2] * c[2];
    uint32_t below_inner = (uint32_t)(outer * 65536.0 + 0.5), below_upper = 65536 - below_inner;
    uint8_t *codes = q->codes;
    for (size_t i = 0; i < q->codes_bytes; i++) {
        uint64_t r = pp_splitmix64(&seed);
        uint8_t byte = 0;
        for (int k = 0; k < 4; k++, r >>= 16) {
            uint32_t u = (uint32_t)(r & 0xffff);
            byte |= (uint8_t)((u < below_inner ? 0 : u < 32768 ? 1 : u < below_upper ? 2 : 3) << (2 * k));
        }
        codes[i] = byte;
    }
    uint16_t scale = pp_f32_to_f16((float)(rms / sqrt(mean_square)));
    uint16_t *scales = q->scales;
    for (size_t g = 0; g < q->scales_bytes / 2; g++) scales[g] = scale;
    q->w.data = q->codes;
    q->w.scales = q->scales;
    return PP_OK;
}

void pp_qtensor_free(pp_qtensor *q) {
    free(q->codes);
    free(q->scales);
    free(q->nested);
    free(q->nested_map);
    memset(q, 0, sizeof *q);
}
