/* conv: see conv.h. */
#include "model/conv.h"

#include "base/err.h"

#include <stdio.h>

#define KEY_LEN 256

int pp_conv_load(codec_arena *a, const st_file *f, const char *prefix, int cin, int cout, int k, int stride, int groups,
                 int has_bias, int transposed, mimi_conv *out, char *err) {
    char key[KEY_LEN];
    /* Streaming needs k >= stride (a non-negative carry) and, for depthwise, cin = cout. */
    if (k < stride || stride < 1 || (groups != 1 && (groups != cin || groups != cout)))
        return pp_fail(err, PP_EUNSUPPORTED, "mimi conv %s: kernel %d, stride %d, groups %d not supported", prefix,
                       k, stride, groups);
    int64_t shape[3] = {transposed ? cin : cout, (transposed ? cout : cin) / groups, k};
    snprintf(key, sizeof key, "%s.weight", prefix);
    int rc = pp_codec_arena_tensor(a, f, key, 3, shape, &out->c.w, err);
    if (rc) return rc;
    if (a->catalog && a->catalog_conv) a->catalog_conv(a->catalog_ctx, key, stride, groups);
    out->c.b = NULL;
    if (has_bias) {
        int64_t bshape[1] = {cout};
        snprintf(key, sizeof key, "%s.bias", prefix);
        rc = pp_codec_arena_tensor(a, f, key, 1, bshape, &out->c.b, err);
        if (rc) return rc;
    }
    out->c.cin = cin;
    out->c.cout = cout;
    out->c.k = k;
    out->c.stride = stride;
    out->c.groups = groups;
    out->transposed = transposed;
    return PP_OK;
}

int pp_conv_out_len(const mimi_conv *c, int t) { return c->transposed ? t * c->c.stride : t / c->c.stride; }

size_t pp_conv_state_floats(const mimi_conv *c) {
    return (size_t)(c->transposed ? c->c.cout : c->c.cin) * (size_t)(c->c.k - c->c.stride);
}

size_t pp_conv_scratch_floats(const mimi_conv *c, int t) { return pp_conv_scratch(&c->c, t, c->transposed); }

void pp_conv_step(pp_backend *be, const mimi_conv *c, const pp_state_rows *rows, const float *x, int t, float *y,
                  float *scratch, int flags) {
    if (c->transposed)
        be->ops->conv_tr1d(be, &c->c, x, t, NULL, rows, y, scratch);
    else
        be->ops->conv1d(be, &c->c, x, t, NULL, rows, y, scratch, flags);
}
