/* quantizer: see quantizer.h. */
#include "model/quantizer.h"

#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define KEY_LEN 256
#define CODEBOOK_EPS 1e-5f /* EuclideanCodebook's epsilon, a clamp on the usage, not an addend */

/* Level l's codebook rows and squared norms, from embedding_sum and cluster_usage. */
static int load_codebook(codec_arena *a, const st_file *f, const char *rvq, int l, const quantizer_config *c,
                         quantizer_rvq *out, char *err) {
    char sum_key[KEY_LEN], usage_key[KEY_LEN];
    snprintf(sum_key, sizeof sum_key, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", rvq, l);
    snprintf(usage_key, sizeof usage_key, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", rvq, l);
    const int64_t sum_shape[2] = {c->bins, c->dimension}, usage_shape[1] = {c->bins};
    size_t n = (size_t)c->bins * c->dimension;
    if (pp_codec_arena_sizing(a)) {
        int rc = pp_codec_arena_check(a, f, sum_key, 2, sum_shape, err);
        if (!rc) rc = pp_codec_arena_check(a, f, usage_key, 1, usage_shape, err);
        pp_codec_arena_take(a, n);
        pp_codec_arena_take(a, (size_t)c->bins);
        return rc;
    }
    float *emb = malloc(n * sizeof(float)), *usage = malloc((size_t)c->bins * sizeof(float));
    int rc = emb && usage ? PP_OK : pp_fail(err, PP_ENOMEM, "%s: out of memory", sum_key);
    if (!rc) rc = pp_codec_arena_read_host(f, sum_key, 2, sum_shape, emb, err);
    if (!rc) rc = pp_codec_arena_read_host(f, usage_key, 1, usage_shape, usage, err);
    if (!rc) {
        for (int b = 0; b < c->bins; b++) {
            float u = usage[b] > CODEBOOK_EPS ? usage[b] : CODEBOOK_EPS;
            double sq = 0;
            for (int i = 0; i < c->dimension; i++) {
                float *e = &emb[(size_t)b * c->dimension + i];
                *e /= u;
                sq += (double)*e * *e;
            }
            usage[b] = (float)sq; /* reuse the buffer for the norms */
        }
        out->codebook[l] = pp_codec_arena_put(a, emb, n);
        out->sq_norm[l] = pp_codec_arena_put(a, usage, (size_t)c->bins);
    }
    free(emb);
    free(usage);
    return rc;
}

static int load_rvq(codec_arena *a, const st_file *f, const char *rvq, int n_levels, const quantizer_config *c,
                    quantizer_rvq *out, char *err) {
    char prefix[KEY_LEN];
    snprintf(prefix, sizeof prefix, "quantizer.%s.input_proj", rvq);
    int rc = pp_conv_load(a, f, prefix, c->input_dimension, c->dimension, 1, 1, 1, 0, 0, &out->input_proj, err);
    if (rc) return rc;
    snprintf(prefix, sizeof prefix, "quantizer.%s.output_proj", rvq);
    rc = pp_conv_load(a, f, prefix, c->dimension, c->output_dimension, 1, 1, 1, 0, 0, &out->output_proj, err);
    out->n_levels = n_levels;
    for (int l = 0; l < n_levels && !rc; l++) rc = load_codebook(a, f, rvq, l, c, out, err);
    return rc;
}

int pp_quantizer_load(codec_arena *a, const st_file *f, const quantizer_config *cfg, quantizer *q, char *err) {
    q->cfg = *cfg;
    int rc = load_rvq(a, f, "rvq_first", 1, cfg, &q->first, err);
    return rc ? rc : load_rvq(a, f, "rvq_rest", cfg->num_codebooks - 1, cfg, &q->rest, err);
}

size_t pp_quantizer_scratch_floats(const quantizer *q) {
    const quantizer_config *c = &q->cfg;
    size_t conv = c->input_dimension > c->dimension ? c->input_dimension : c->dimension;
    return 2 * (size_t)c->dimension + conv;
}

void pp_quantizer_encode(pp_backend *be, const quantizer *q, const float *z, int n, int32_t *codes, float *scratch) {
    const quantizer_config *c = &q->cfg;
    const int ncb = c->num_codebooks;
    float *u = scratch, *r = scratch + (size_t)n * c->dimension, *conv = scratch + 2 * (size_t)n * c->dimension;
    pp_state_rows rows = {n, NULL, 0}; /* the projections carry no state */
    pp_conv_step(be, &q->first.input_proj, &rows, z, 1, u, conv, 0);
    be->ops->vq_nearest(be, q->first.codebook[0], q->first.sq_norm[0], c->bins, c->dimension, u, n, 0, &codes[0], ncb);
    /* The acoustic RVQ quantizes the same latent, not the semantic residual. */
    pp_conv_step(be, &q->rest.input_proj, &rows, z, 1, r, conv, 0);
    for (int l = 0; l < q->rest.n_levels; l++)
        be->ops->vq_nearest(be, q->rest.codebook[l], q->rest.sq_norm[l], c->bins, c->dimension, r, n, 1, &codes[1 + l],
                            ncb);
}

void pp_quantizer_decode(pp_backend *be, const quantizer *q, const int32_t *codes, int n, float *z, float *scratch) {
    const quantizer_config *c = &q->cfg;
    const int ncb = c->num_codebooks;
    float *sf = scratch, *sr = scratch + (size_t)n * c->dimension, *conv = scratch + 2 * (size_t)n * c->dimension;
    pp_state_rows rows = {n, NULL, 0};
    be->ops->zero(be, scratch, 2 * (size_t)n * c->dimension * sizeof(float));
    be->ops->vq_add_row(be, q->first.codebook[0], c->bins, c->dimension, &codes[0], ncb, n, sf);
    for (int l = 0; l < q->rest.n_levels; l++)
        be->ops->vq_add_row(be, q->rest.codebook[l], c->bins, c->dimension, &codes[1 + l], ncb, n, sr);
    pp_conv_step(be, &q->first.output_proj, &rows, sf, 1, z, conv, 0);
    pp_conv_step(be, &q->rest.output_proj, &rows, sr, 1, z, conv, PP_CONV_ACCUMULATE);
}

/* One RVQ's part of pp_quantizer_code_gaps: w is [dimension][input_dimension], cb [bins][dimension]. */
static void rvq_gaps(pp_backend *be, const quantizer_rvq *rvq, const quantizer_config *c, const float *z,
                     const int32_t *codes, double *gaps, float *w, float *cb, double *r) {
    be->ops->download(be, w, rvq->input_proj.c.w, (size_t)c->dimension * c->input_dimension * sizeof(float));
    for (int o = 0; o < c->dimension; o++) {
        r[o] = 0;
        for (int i = 0; i < c->input_dimension; i++) r[o] += (double)w[(size_t)o * c->input_dimension + i] * z[i];
    }
    for (int l = 0; l < rvq->n_levels; l++) {
        be->ops->download(be, cb, rvq->codebook[l], (size_t)c->bins * c->dimension * sizeof(float));
        double nearest = INFINITY, chosen = 0;
        for (int b = 0; b < c->bins; b++) {
            double d = 0;
            for (int i = 0; i < c->dimension; i++) {
                double e = r[i] - cb[(size_t)b * c->dimension + i];
                d += e * e;
            }
            d = sqrt(d);
            if (d < nearest) nearest = d;
            if (b == codes[l]) chosen = d;
        }
        gaps[l] = nearest > 0 ? (chosen - nearest) / nearest : chosen > 0 ? INFINITY : 0;
        for (int i = 0; i < c->dimension; i++) r[i] -= cb[(size_t)codes[l] * c->dimension + i];
    }
}

int pp_quantizer_code_gaps(pp_backend *be, const quantizer *q, const float *z, const int32_t *codes, double *gaps,
                           char *err) {
    const quantizer_config *c = &q->cfg;
    float *w = malloc((size_t)c->dimension * c->input_dimension * sizeof(float));
    float *cb = malloc((size_t)c->bins * c->dimension * sizeof(float));
    double *r = malloc((size_t)c->dimension * sizeof(double));
    int rc = w && cb && r ? PP_OK : pp_fail(err, PP_ENOMEM, "quantizer code gaps: out of memory");
    if (!rc) {
        rvq_gaps(be, &q->first, c, z, codes, gaps, w, cb, r);
        rvq_gaps(be, &q->rest, c, z, codes + 1, gaps + 1, w, cb, r);
    }
    free(w);
    free(cb);
    free(r);
    return rc;
}
