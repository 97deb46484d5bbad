/* lm_export: see lm_export.h. */
#include "model/lm_export.h"

#include "base/err.h"
#include "io/safetensors.h"
#include "model/lm.h"
#include "model/lm_catalog.h"

#include <math.h>
#include <stdlib.h>

typedef struct dequant {
    const st_file *in;
    st_writer *w;
    int writing; /* 0: declaring */
    uint16_t *row;
    float *dec;
    size_t cap;
    char *err;
} dequant;

/* Declares, or writes, catalogue entry t in BF16: a norm's values, or a matrix decoded row by row. */
static int dequant_tensor(void *ctx, const pp_lm_tensor *t) {
    dequant *d = ctx;
    int64_t shape[3];
    int ndim = pp_lm_tensor_shape(t, shape);
    if (!d->writing) return pp_st_writer_declare(d->w, t->name, ST_BF16, ndim, shape, d->err);
    if ((size_t)t->cols > d->cap) {
        free(d->row), free(d->dec);
        d->cap = (size_t)t->cols;
        d->row = malloc(d->cap * sizeof *d->row), d->dec = malloc(d->cap * sizeof *d->dec);
        if (!d->row || !d->dec) return pp_fail(d->err, PP_ENOMEM, "out of memory for a row of '%s'", t->name);
    }
    pp_weight w;
    int rc = PP_OK;
    if (ndim == 3) {
        /* a norm of another length is refused, as loading refuses it, not cut to the configured one */
        const st_tensor *a = pp_st_find(d->in, t->name);
        rc = !a ? pp_fail(d->err, PP_ENOTFOUND, "%s: tensor '%s' is missing", pp_st_path(d->in), t->name)
             : a->numel != t->cols
                 ? pp_fail(d->err, PP_EFORMAT, "%s: tensor '%s' has %lld values but config keys %s give %lld",
                           pp_st_path(d->in), t->name, (long long)a->numel, t->cfg_keys, (long long)t->cols)
                 : pp_st_load_f32(d->in, a, 0, t->cols, d->dec, d->err);
    } else {
        rc = pp_weight_load(d->in, t->name, t->rows, t->cols, &w, d->err);
    }
    for (int64_t r = 0; r < t->rows && !rc; r++) {
        if (ndim != 3) pp_weight_decode_span(&w, r, 0, t->cols, d->dec);
        for (int64_t k = 0; k < t->cols; k++) {
            /* a dense source's NaN or infinity would be written as it is (a quantized one's scales are checked) */
            if (!isfinite(d->dec[k]))
                return pp_fail(d->err, PP_EFORMAT, "%s: tensor '%s': row %lld, column %lld is %g; only finite "
                               "weights are written", pp_st_path(d->in), t->name, (long long)r, (long long)k,
                               (double)d->dec[k]);
            d->row[k] = pp_f32_to_bf16(d->dec[k]);
        }
        rc = pp_st_writer_write(d->w, d->row, (size_t)t->cols * sizeof *d->row, d->err);
    }
    return rc;
}

int pp_lm_export_bf16(const char *in_path, const char *out_path, int *layers, char *err) {
    char beside[4200];
    st_file *in = NULL;
    pp_lm_config c;
    dequant d = {.err = err};
    int rc = pp_st_open(in_path, &in, err);
    if (!rc) rc = pp_lm_config_for(pp_lm_config_beside(in_path, beside, sizeof beside), in, &c, err);
    d.in = in;
    if (!rc) rc = pp_st_writer_create(out_path, &d.w, err);
    if (!rc) rc = pp_lm_catalog(&c, dequant_tensor, &d);
    if (!rc) rc = pp_st_writer_begin(d.w, err);
    d.writing = 1;
    if (!rc) rc = pp_lm_catalog(&c, dequant_tensor, &d);
    if (d.w) {
        if (rc)
            pp_st_writer_abort(d.w);
        else
            rc = pp_st_writer_finish(d.w, err);
    }
    if (!rc) *layers = c.num_layers;
    free(d.row);
    free(d.dec);
    pp_st_close(in);
    return rc;
}
