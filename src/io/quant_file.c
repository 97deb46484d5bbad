/* quant_file: see quant_file.h. Every output key is declared from the input header alone, then
 * each tensor is streamed in row chunks: quantize, write the codes, decode the chunk back for
 * the cosine report. Only per-group scales (and for NF4 per-block statistics) of the current
 * tensor are held whole. Within a tensor the codes come first, then scales, then metadata. */
#include "io/quant_file.h"

#include "base/err.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_ELEMS (1 << 22) /* 16 MiB of f32 source per chunk */
#define NF4_NESTED_BLOCK 256  /* bitsandbytes' double-quantization block */
#define KEY_LEN 512

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int pp_quantize_selects(pp_wformat fmt, const char *name, int ndim) {
    if (ndim != 2) return 0;
    if (fmt != PP_WF_NF4) return 1;
    static const char *const linears[] = {".self_attn.in_proj_weight", ".self_attn.in_proj.weight",
                                          ".self_attn.out_proj.weight", ".gating.linear_in.weight",
                                          ".gating.linear_out.weight"};
    if (strncmp(name, "transformer.layers.", 19) != 0) return 0;
    for (size_t i = 0; i < sizeof linears / sizeof linears[0]; i++)
        if (ends_with(name, linears[i])) return 1;
    return 0;
}

typedef struct {
    const st_file *in;
    st_writer *w;
    const pp_quantize_opts *o;
    int gs;
    uint64_t done, total;
    float *x, *dec; /* CHUNK-sized source and decode buffers */
    uint8_t *packed;
} job;

static int declare(job *j, const char *base, const char *suffix, st_dtype dt, int ndim, const int64_t *shape,
                   char *err) {
    char key[KEY_LEN];
    int k = snprintf(key, sizeof key, "%s%s", base, suffix);
    if (k < 0 || (size_t)k >= sizeof key) return pp_fail(err, PP_EINVAL, "tensor name '%s' too long", base);
    return pp_st_writer_declare(j->w, key, dt, ndim, shape, err);
}

static const char *torch_dtype(st_dtype dt) {
    return dt == ST_BF16 ? "bfloat16" : dt == ST_F16 ? "float16" : "float32";
}

/* The quant_state JSON. The offset is printed at a fixed width so the blob's length is known
 * when it is declared, before the data is seen. */
static int nf4_state(char *buf, size_t cap, const st_tensor *t, int bs, float offset) {
    return snprintf(buf, cap,
                    "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%lld, %lld], "
                    "\"nested_blocksize\": %d, \"nested_dtype\": \"float32\", \"nested_offset\": % .8e}",
                    bs, torch_dtype(t->dtype), (long long)t->shape[0], (long long)t->shape[1], NF4_NESTED_BLOCK,
                    (double)offset);
}

static int declare_tensor(job *j, const st_tensor *t, char *err) {
    pp_wformat fmt = j->o->fmt;
    if (!pp_quantize_selects(fmt, t->name, t->ndim)) return pp_st_writer_declare(j->w, t->name, t->dtype, t->ndim, t->shape, err);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' is %s; only F32, F16 and BF16 can be quantized",
                       pp_st_path(j->in), t->name, pp_st_dtype_name(t->dtype));
    int64_t cols = t->shape[1], numel = t->numel, gs = j->gs == PP_QUANTIZE_ROW ? cols : j->gs, groups = numel / gs;
    if (cols % gs)
        return pp_fail(err, PP_EINVAL, "%s: tensor '%s': row length %lld is not a multiple of the group size %d "
                       "(pick another --group)", pp_st_path(j->in), t->name, (long long)cols, j->gs);
    int64_t one = 1, four = 4, two = 2;
    int rc;
    if (fmt == PP_WF_INT8) {
        char key[KEY_LEN];
        int64_t scb[2] = {t->shape[0], cols / gs};
        if ((rc = pp_wl_int8_scales_key(t->name, key, sizeof key)))
            return pp_fail(err, rc, "tensor name '%s' too long", t->name);
        if ((rc = pp_st_writer_declare(j->w, t->name, ST_I8, 2, t->shape, err))) return rc;
        return pp_st_writer_declare(j->w, key, ST_F32, j->gs == PP_QUANTIZE_ROW ? 1 : 2, scb, err);
    }
    if (fmt == PP_WF_NF2) {
        int64_t np = groups * j->gs / 4;
        if ((rc = declare(j, t->name, ".packed", ST_U8, 1, &np, err)) ||
            (rc = declare(j, t->name, ".scales", ST_F16, 1, &groups, err)) ||
            (rc = declare(j, t->name, ".shape", ST_I64, 1, &four, err)) ||
            (rc = declare(j, t->name, ".gs", ST_I64, 1, &one, err)) ||
            (rc = declare(j, t->name, ".np2", ST_I64, 1, &one, err)))
            return rc;
        return declare(j, t->name, ".numel", ST_I64, 1, &one, err);
    }
    int64_t half = numel / 2;
    if (fmt == PP_WF_INT4) {
        if ((rc = declare(j, t->name, "", ST_U8, 1, &half, err)) ||
            (rc = declare(j, t->name, ".__scales__", ST_F16, 1, &groups, err)) ||
            (rc = declare(j, t->name, ".__shape__", ST_I64, 1, &two, err)))
            return rc;
        return declare(j, t->name, ".__numel__", ST_I64, 1, &one, err);
    }
    char blob[512];
    int64_t packed_shape[2] = {half, 1}, nested = (groups + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK, n256 = 256,
            n16 = 16, blen = nf4_state(blob, sizeof blob, t, j->gs, 0.0f);
    if ((rc = declare(j, t->name, "", ST_U8, 2, packed_shape, err)) ||
        (rc = declare(j, t->name, ".absmax", ST_U8, 1, &groups, err)) ||
        (rc = declare(j, t->name, ".nested_absmax", ST_F32, 1, &nested, err)) ||
        (rc = declare(j, t->name, ".nested_quant_map", ST_F32, 1, &n256, err)) ||
        (rc = declare(j, t->name, ".quant_map", ST_F32, 1, &n16, err)))
        return rc;
    return declare(j, t->name, ".quant_state.bitsandbytes__nf4", ST_U8, 1, &blen, err);
}

static void progress(job *j, uint64_t bytes) {
    j->done += bytes;
    if (j->o->progress) j->o->progress(j->o->user, j->done, j->total);
}

static int64_t chunk_rows(int64_t cols) { return cols >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / cols; }

/* The sums a tensor's cosine (source x against its decode y) is made of. */
static void accumulate_cosine(const float *x, const float *y, int64_t n, double *sxy, double *sxx, double *syy) {
    for (int64_t i = 0; i < n; i++) {
        *sxy += (double)x[i] * y[i];
        *sxx += (double)x[i] * x[i];
        *syy += (double)y[i] * y[i];
    }
}

/* NF2 and INT4: groups are local to a chunk, so a chunk decodes on its own. */
static int write_grouped(job *j, const st_tensor *t, char *err) {
    int64_t rows = t->shape[0], cols = t->shape[1], gs = j->gs;
    int nf2 = j->o->fmt == PP_WF_NF2;
    int np2 = 1;
    while (np2 < gs) np2 *= 2;
    uint16_t *scales = malloc(sizeof *scales * (size_t)(t->numel / gs));
    if (!scales) return pp_fail(err, PP_ENOMEM, "tensor '%s': out of memory for scales", t->name);
    double sxy = 0, sxx = 0, syy = 0;
    int rc = PP_OK;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += chunk_rows(cols)) {
        int64_t nr = rows - r0 < chunk_rows(cols) ? rows - r0 : chunk_rows(cols), n = nr * cols, g0 = r0 * cols / gs;
        if ((rc = pp_st_load_f32(j->in, t, r0 * cols, n, j->x, err))) break;
        if (nf2)
            pp_quant_nf2_quantize(j->x, n / gs, (int)gs, np2, j->packed, scales + g0);
        else
            pp_quant_int4_quantize(j->x, n / gs, (int)gs, j->packed, scales + g0);
        if ((rc = pp_st_writer_write(j->w, j->packed, (size_t)(nf2 ? n / 4 : n / 2), err))) break;
        pp_weight d = {.fmt = nf2 ? PP_WF_NF2 : PP_WF_INT4, .rows = nr, .cols = cols, .data = j->packed,
                       .scales = scales + g0, .group = (int)gs, .np2 = np2, .name = t->name};
        if ((rc = pp_weight_decode_rows(&d, 0, nr, j->dec, err))) break;
        accumulate_cosine(j->x, j->dec, n, &sxy, &sxx, &syy);
        progress(j, (uint64_t)n * t->nbytes / (uint64_t)t->numel);
    }
    if (!rc) rc = pp_st_writer_write(j->w, scales, sizeof *scales * (size_t)(t->numel / gs), err);
    free(scales);
    if (rc) return rc;
    int64_t shape4[4] = {rows, cols, 0, 0}, numel = t->numel, g = gs, p = np2;
    if (nf2) {
        if ((rc = pp_st_writer_write(j->w, shape4, sizeof shape4, err)) || (rc = pp_st_writer_write(j->w, &g, 8, err)) ||
            (rc = pp_st_writer_write(j->w, &p, 8, err)))
            return rc;
    } else if ((rc = pp_st_writer_write(j->w, shape4, 16, err))) {
        return rc;
    }
    if ((rc = pp_st_writer_write(j->w, &numel, 8, err))) return rc;
    if (j->o->report) j->o->report(j->o->user, t->name, rows, cols, sxy / sqrt(sxx * syy + 1e-300));
    return PP_OK;
}

/* bitsandbytes NF4: the nested absmax needs every block's absmax first, so the cosine is
 * assembled from per-block sums (x·v and v·v of the unscaled table values) once the final,
 * double-quantized absmax is known. */
static int write_nf4(job *j, const st_tensor *t, char *err) {
    int64_t rows = t->shape[0], cols = t->shape[1], bs = j->gs, blocks = t->numel / bs;
    int64_t nested_n = (blocks + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
    float *absmax = malloc(sizeof(float) * (size_t)blocks), *sxv = malloc(sizeof(float) * (size_t)blocks);
    float *svv = malloc(sizeof(float) * (size_t)blocks), *nested = malloc(sizeof(float) * (size_t)nested_n);
    uint8_t *codes = malloc((size_t)blocks);
    float map[256];
    double sxx = 0;
    int rc = PP_OK;
    if (!absmax || !sxv || !svv || !nested || !codes) rc = pp_fail(err, PP_ENOMEM, "tensor '%s': out of memory", t->name);
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += chunk_rows(cols)) {
        int64_t nr = rows - r0 < chunk_rows(cols) ? rows - r0 : chunk_rows(cols), n = nr * cols, b0 = r0 * cols / bs;
        if ((rc = pp_st_load_f32(j->in, t, r0 * cols, n, j->x, err))) break;
        pp_quant_nf4_quantize(j->x, n / bs, (int)bs, j->packed, absmax + b0);
        if ((rc = pp_st_writer_write(j->w, j->packed, (size_t)(n / 2), err))) break;
        for (int64_t b = 0; b < n / bs; b++) {
            pp_quant_nf4_decode_block(j->packed + b * bs / 2, pp_quant_nf4_table, 1.0f, (int)bs, j->dec);
            double xv = 0, vv = 0;
            for (int64_t k = 0; k < bs; k++) {
                float x = j->x[b * bs + k];
                xv += (double)x * j->dec[k];
                vv += (double)j->dec[k] * j->dec[k];
                sxx += (double)x * x;
            }
            sxv[b0 + b] = (float)xv;
            svv[b0 + b] = (float)vv;
        }
        progress(j, (uint64_t)n * t->nbytes / (uint64_t)t->numel);
    }
    if (!rc) {
        pp_quant_nf4_dynamic_map(map);
        float offset = pp_quant_nf4_nest(absmax, blocks, NF4_NESTED_BLOCK, map, codes, nested);
        double sxy = 0, syy = 0;
        for (int64_t b = 0; b < blocks; b++) {
            double a = (double)map[codes[b]] * nested[b / NF4_NESTED_BLOCK] + offset;
            sxy += a * sxv[b];
            syy += a * a * svv[b];
        }
        char blob[512];
        int blen = nf4_state(blob, sizeof blob, t, (int)bs, offset), want = nf4_state(NULL, 0, t, (int)bs, 0.0f);
        if (blen != want)
            rc = pp_fail(err, PP_EINVAL, "tensor '%s': nested offset %g is not finite", t->name, (double)offset);
        if (!rc && !(rc = pp_st_writer_write(j->w, codes, (size_t)blocks, err)) &&
            !(rc = pp_st_writer_write(j->w, nested, sizeof(float) * (size_t)nested_n, err)) &&
            !(rc = pp_st_writer_write(j->w, map, sizeof map, err)) &&
            !(rc = pp_st_writer_write(j->w, pp_quant_nf4_table, sizeof(float) * 16, err)))
            rc = pp_st_writer_write(j->w, blob, (size_t)blen, err);
        if (!rc && j->o->report) j->o->report(j->o->user, t->name, rows, cols, sxy / sqrt(sxx * syy + 1e-300));
    }
    free(absmax);
    free(sxv);
    free(svv);
    free(nested);
    free(codes);
    return rc;
}

/* INT8: codes chunk by chunk, every group's absmax once all are known. */
static int write_int8(job *j, const st_tensor *t, char *err) {
    int64_t rows = t->shape[0], cols = t->shape[1], gs = j->gs == PP_QUANTIZE_ROW ? cols : j->gs;
    float *absmax = malloc(sizeof(float) * (size_t)(t->numel / gs));
    if (!absmax) return pp_fail(err, PP_ENOMEM, "tensor '%s': out of memory for scales", t->name);
    double sxy = 0, sxx = 0, syy = 0;
    int rc = PP_OK;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += chunk_rows(cols)) {
        int64_t nr = rows - r0 < chunk_rows(cols) ? rows - r0 : chunk_rows(cols), n = nr * cols, g0 = r0 * cols / gs;
        if ((rc = pp_st_load_f32(j->in, t, r0 * cols, n, j->x, err))) break;
        pp_quant_int8_quantize(j->x, nr, cols, gs, (int8_t *)j->packed, absmax + g0);
        if ((rc = pp_st_writer_write(j->w, j->packed, (size_t)n, err))) break;
        pp_weight d = {.fmt = PP_WF_INT8, .rows = nr, .cols = cols, .data = j->packed, .scales = absmax + g0,
                       .group = (int)gs, .name = t->name};
        if ((rc = pp_weight_decode_rows(&d, 0, nr, j->dec, err))) break;
        accumulate_cosine(j->x, j->dec, n, &sxy, &sxx, &syy);
        progress(j, (uint64_t)n * t->nbytes / (uint64_t)t->numel);
    }
    if (!rc) rc = pp_st_writer_write(j->w, absmax, sizeof(float) * (size_t)(t->numel / gs), err);
    free(absmax);
    if (!rc && j->o->report) j->o->report(j->o->user, t->name, rows, cols, sxy / sqrt(sxx * syy + 1e-300));
    return rc;
}

static int write_tensor(job *j, const st_tensor *t, char *err) {
    if (!pp_quantize_selects(j->o->fmt, t->name, t->ndim)) {
        int rc = pp_st_writer_write(j->w, t->data, t->nbytes, err);
        progress(j, t->nbytes);
        return rc;
    }
    if (j->o->fmt == PP_WF_INT8) return write_int8(j, t, err);
    return j->o->fmt == PP_WF_NF4 ? write_nf4(j, t, err) : write_grouped(j, t, err);
}

int pp_quantize_file(const char *in_path, const char *out_path, const pp_quantize_opts *o, char *err) {
    if (o->fmt != PP_WF_NF2 && o->fmt != PP_WF_INT4 && o->fmt != PP_WF_NF4 && o->fmt != PP_WF_INT8)
        return pp_fail(err, PP_EINVAL, "quantize: format %s is not a quantized layout", pp_wformat_name(o->fmt));
    int gs = o->group ? o->group : o->fmt == PP_WF_NF2 || o->fmt == PP_WF_INT8 ? 128 : 64;
    if (gs == PP_QUANTIZE_ROW && o->fmt != PP_WF_INT8)
        return pp_fail(err, PP_EINVAL, "quantize: one scale per row is an INT8 layout only");
    if (gs != PP_QUANTIZE_ROW && (gs < 2 || gs > QUANT_MAX_NP2 || gs % (o->fmt == PP_WF_NF2 ? 4 : 2)))
        return pp_fail(err, PP_EINVAL, "quantize: group size %d must be a multiple of %d in [4, %d]", gs,
                       o->fmt == PP_WF_NF2 ? 4 : 2, QUANT_MAX_NP2);
    st_file *in;
    int rc = pp_st_open(in_path, &in, err);
    if (rc) return rc;
    job j = {.in = in, .o = o, .gs = gs};
    for (size_t i = 0; i < pp_st_count(in); i++) j.total += pp_st_at(in, i)->nbytes;
    j.x = malloc(sizeof(float) * CHUNK_ELEMS);
    j.dec = malloc(sizeof(float) * CHUNK_ELEMS);
    j.packed = malloc(CHUNK_ELEMS); /* INT8 codes take a byte each */
    if (!j.x || !j.dec || !j.packed) rc = pp_fail(err, PP_ENOMEM, "quantize: out of memory for chunk buffers");
    /* A row longer than a chunk is handled as one chunk of that row; make room for it. */
    for (size_t i = 0; i < pp_st_count(in) && !rc; i++) {
        const st_tensor *t = pp_st_at(in, i);
        if (t->ndim == 2 && t->shape[1] > CHUNK_ELEMS)
            rc = pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s': rows of %lld exceed %d elements", in_path, t->name,
                         (long long)t->shape[1], CHUNK_ELEMS);
    }
    if (!rc) rc = pp_st_writer_create(out_path, &j.w, err);
    for (size_t i = 0; i < pp_st_count(in) && !rc; i++) rc = declare_tensor(&j, pp_st_at(in, i), err);
    if (!rc) rc = pp_st_writer_begin(j.w, err);
    for (size_t i = 0; i < pp_st_count(in) && !rc; i++) rc = write_tensor(&j, pp_st_at(in, i), err);
    if (j.w) {
        if (rc)
            pp_st_writer_abort(j.w);
        else
            rc = pp_st_writer_finish(j.w, err);
    }
    free(j.x);
    free(j.dec);
    free(j.packed);
    pp_st_close(in);
    return rc;
}
