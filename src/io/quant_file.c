/* quant_file: see quant_file.h. Every output key is declared from the input header alone, then
 * each tensor is streamed in row chunks: quantize, write the codes, decode the chunk back for
 * the cosine report. Only per-group scales (and for NF4 per-block statistics) of the current
 * tensor are held whole. Within a tensor the codes come first, then scales, then metadata. */
#include "io/quant_file.h"

#include "base/err.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/quant_tensor.h"
#include "io/weight_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NF4_NESTED_BLOCK 256 /* bitsandbytes' double-quantization block (quant_tensor.c's) */
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
} job;

static int declare(st_writer *w, const char *base, const char *suffix, st_dtype dt, int ndim, const int64_t *shape,
                   char *err) {
    char key[KEY_LEN];
    int k = snprintf(key, sizeof key, "%s%s", base, suffix);
    if (k < 0 || (size_t)k >= sizeof key) return pp_fail(err, PP_EINVAL, "tensor name '%s' too long", base);
    return pp_st_writer_declare(w, key, dt, ndim, shape, err);
}

static const char *torch_dtype(st_dtype dt) {
    return dt == ST_BF16 ? "bfloat16" : dt == ST_F16 ? "float16" : "float32";
}

/* The quant_state JSON. The offset is printed at a fixed width so the blob's length is known
 * when it is declared, before the data is seen. */
static int nf4_state(char *buf, size_t cap, st_dtype source, int64_t rows, int64_t cols, int bs, float offset) {
    return snprintf(buf, cap,
                    "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": [%lld, %lld], "
                    "\"nested_blocksize\": %d, \"nested_dtype\": \"float32\", \"nested_offset\": % .8e}",
                    bs, torch_dtype(source), (long long)rows, (long long)cols, NF4_NESTED_BLOCK, (double)offset);
}

int pp_quantize_declare(st_writer *w, const char *name, st_dtype source, int64_t rows, int64_t cols, pp_wformat fmt,
                        int group, char *err) {
    int64_t gs = group == PP_QUANTIZE_ROW ? cols : group, groups = rows * cols / gs, one = 1, four = 4, two = 2;
    if (cols % gs)
        return pp_fail(err, PP_EINVAL,
                       "tensor '%s': row length %lld is not a multiple of the group size %d (pick another group)", name,
                       (long long)cols, group);
    int64_t shape[2] = {rows, cols};
    int rc;
    if (fmt == PP_WF_INT8) {
        char key[KEY_LEN];
        int64_t scb[2] = {rows, cols / gs};
        if ((rc = pp_wl_int8_scales_key(name, key, sizeof key)))
            return pp_fail(err, rc, "tensor name '%s' too long", name);
        if ((rc = pp_st_writer_declare(w, name, ST_I8, 2, shape, err))) return rc;
        return pp_st_writer_declare(w, key, ST_F32, group == PP_QUANTIZE_ROW ? 1 : 2, scb, err);
    }
    if (fmt == PP_WF_NF2) {
        int64_t np = groups * gs / 4;
        if ((rc = declare(w, name, ".packed", ST_U8, 1, &np, err)) ||
            (rc = declare(w, name, ".scales", ST_F16, 1, &groups, err)) ||
            (rc = declare(w, name, ".shape", ST_I64, 1, &four, err)) ||
            (rc = declare(w, name, ".gs", ST_I64, 1, &one, err)) ||
            (rc = declare(w, name, ".np2", ST_I64, 1, &one, err)))
            return rc;
        return declare(w, name, ".numel", ST_I64, 1, &one, err);
    }
    int64_t half = rows * cols / 2;
    if (fmt == PP_WF_INT4) {
        if ((rc = declare(w, name, "", ST_U8, 1, &half, err)) ||
            (rc = declare(w, name, ".__scales__", ST_F16, 1, &groups, err)) ||
            (rc = declare(w, name, ".__shape__", ST_I64, 1, &two, err)))
            return rc;
        return declare(w, name, ".__numel__", ST_I64, 1, &one, err);
    }
    char blob[512];
    int64_t packed_shape[2] = {half, 1}, nested = (groups + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK, n256 = 256,
            n16 = 16, blen = nf4_state(blob, sizeof blob, source, rows, cols, group, 0.0f);
    if ((rc = declare(w, name, "", ST_U8, 2, packed_shape, err)) ||
        (rc = declare(w, name, ".absmax", ST_U8, 1, &groups, err)) ||
        (rc = declare(w, name, ".nested_absmax", ST_F32, 1, &nested, err)) ||
        (rc = declare(w, name, ".nested_quant_map", ST_F32, 1, &n256, err)) ||
        (rc = declare(w, name, ".quant_map", ST_F32, 1, &n16, err)))
        return rc;
    return declare(w, name, ".quant_state.bitsandbytes__nf4", ST_U8, 1, &blen, err);
}

int pp_quantize_write(st_writer *w, const char *name, st_dtype source, const pp_qtensor *q, char *err) {
    const pp_weight *qw = &q->w;
    int64_t shape4[4] = {qw->rows, qw->cols, 0, 0}, numel = qw->rows * qw->cols, g = qw->group, np2 = qw->np2;
    int rc = pp_st_writer_write(w, q->codes, q->codes_bytes, err);
    if (!rc) rc = pp_st_writer_write(w, q->scales, q->scales_bytes, err);
    if (rc) return rc;
    if (qw->fmt == PP_WF_NF2) {
        if (!(rc = pp_st_writer_write(w, shape4, sizeof shape4, err)) && !(rc = pp_st_writer_write(w, &g, 8, err)) &&
            !(rc = pp_st_writer_write(w, &np2, 8, err)))
            rc = pp_st_writer_write(w, &numel, 8, err);
    } else if (qw->fmt == PP_WF_INT4) {
        if (!(rc = pp_st_writer_write(w, shape4, 16, err))) rc = pp_st_writer_write(w, &numel, 8, err);
    } else if (qw->fmt == PP_WF_NF4) {
        char blob[512];
        int blen = nf4_state(blob, sizeof blob, source, qw->rows, qw->cols, (int)g, qw->nested_offset),
            want = nf4_state(NULL, 0, source, qw->rows, qw->cols, (int)g, 0.0f);
        if (blen != want)
            return pp_fail(err, PP_EINVAL, "tensor '%s': nested offset %g is not finite", name,
                           (double)qw->nested_offset);
        if (!(rc = pp_st_writer_write(w, q->nested, q->nested_bytes, err)) &&
            !(rc = pp_st_writer_write(w, q->nested_map, 256 * sizeof(float), err)) &&
            !(rc = pp_st_writer_write(w, pp_quant_nf4_table, 16 * sizeof(float), err)))
            rc = pp_st_writer_write(w, blob, (size_t)blen, err);
    }
    return rc;
}

/* A tensor without weights ([n, 0], [0, n]) has nothing to quantize: it is copied as stored. */
static int quantizes(pp_wformat fmt, const st_tensor *t) {
    return t->numel > 0 && pp_quantize_selects(fmt, t->name, t->ndim);
}

static int declare_tensor(job *j, const st_tensor *t, char *err) {
    if (!quantizes(j->o->fmt, t))
        return pp_st_writer_declare(j->w, t->name, t->dtype, t->ndim, t->shape, err);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: tensor '%s' is %s; only F32, F16 and BF16 can be quantized",
                       pp_st_path(j->in), t->name, pp_st_dtype_name(t->dtype));
    return pp_quantize_declare(j->w, t->name, t->dtype, t->shape[0], t->shape[1], j->o->fmt, j->gs, err);
}

static void progress(job *j, uint64_t bytes) {
    j->done += bytes;
    if (j->o->progress) j->o->progress(j->o->user, j->done, j->total);
}

static int write_quantized(job *j, const st_tensor *t, char *err) {
    pp_qtensor q;
    int rc = pp_quantize_tensor(j->in, t, j->o->fmt, j->gs, &q, err);
    if (rc) return rc;
    rc = pp_quantize_write(j->w, t->name, t->dtype, &q, err);
    if (!rc && j->o->report) j->o->report(j->o->user, t->name, q.w.rows, q.w.cols, q.cosine);
    pp_qtensor_free(&q);
    progress(j, t->nbytes);
    return rc;
}

static int write_tensor(job *j, const st_tensor *t, char *err) {
    if (!quantizes(j->o->fmt, t)) {
        /* copied as stored, but a NaN norm would make every output NaN: refused as in a quantized one */
        int rc = pp_quantize_check_finite(j->in, t, err);
        if (!rc) rc = pp_st_writer_write(j->w, t->data, t->nbytes, err);
        progress(j, t->nbytes);
        return rc;
    }
    return write_quantized(j, t, err);
}

int pp_quantize_file(const char *in_path, const char *out_path, const pp_quantize_opts *o, char *err) {
    int gs = o->group ? o->group : pp_quantize_default_group(o->fmt);
    if (pp_quantize_check(o->fmt, gs, err)) return PP_EINVAL;
    st_file *in;
    int rc = pp_st_open(in_path, &in, err);
    if (rc) return rc;
    job j = {.in = in, .o = o, .gs = gs};
    for (size_t i = 0; i < pp_st_count(in); i++) j.total += pp_st_at(in, i)->nbytes;
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
    pp_st_close(in);
    return rc;
}

int pp_quantize_report(const char *in_path, const pp_quantize_opts *o, char *err) {
    int gs = o->group ? o->group : pp_quantize_default_group(o->fmt);
    if (pp_quantize_check(o->fmt, gs, err)) return PP_EINVAL;
    st_file *in = NULL;
    int rc = pp_st_open(in_path, &in, err);
    uint64_t done = 0, total = 0;
    for (size_t i = 0; !rc && i < pp_st_count(in); i++) total += pp_st_at(in, i)->nbytes;
    for (size_t i = 0; !rc && i < pp_st_count(in); i++) {
        const st_tensor *t = pp_st_at(in, i);
        if (quantizes(o->fmt, t)) {
            pp_qtensor q;
            if (!(rc = pp_quantize_tensor(in, t, o->fmt, gs, &q, err))) {
                if (o->report) o->report(o->user, t->name, q.w.rows, q.w.cols, q.cosine);
                pp_qtensor_free(&q);
            }
        }
        done += t->nbytes;
        if (o->progress) o->progress(o->user, done, total);
    }
    if (in) pp_st_close(in);
    return rc;
}
