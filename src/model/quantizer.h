/* quantizer: Mimi's split residual vector quantizer (moshi quantization/vq.py
 * SplitResidualVectorQuantizer; keys quantizer.rvq_first.*, quantizer.rvq_rest.*).
 *
 * Both RVQs see the same latent z, each through its own k=1 input projection: rvq_first
 * (semantic) gives code 0 from one codebook; rvq_rest (acoustic) gives codes 1.. from its
 * first levels, each level quantizing what the previous ones left. Decoding sums each RVQ's
 * codebook rows in order, applies that RVQ's output projection, and adds the two. Codebook
 * rows are embedding_sum / max(cluster_usage, 1e-5), computed once at load. */
#ifndef PP_MODEL_QUANTIZER_H
#define PP_MODEL_QUANTIZER_H

#include <stdint.h>

#include "model/conv.h"

#define QUANTIZER_MAX_CODES 64

typedef struct quantizer_config {
    int dimension;        /* codebook dimension */
    int n_q;              /* codebooks stored: 1 semantic + n_q − 1 acoustic */
    int bins;             /* rows per codebook */
    int input_dimension;  /* latent width in */
    int output_dimension; /* latent width out */
    int num_codebooks;    /* codebooks used (codes per frame) */
} quantizer_config;

/* ResidualVectorQuantizer, `quantizer.rvq_{first,rest}.` */
typedef struct quantizer_rvq {
    mimi_conv input_proj;  /* input_proj.weight [dimension][input_dimension][1] */
    mimi_conv output_proj; /* output_proj.weight [output_dimension][dimension][1] */
    int n_levels;          /* levels used */
    const float *codebook[QUANTIZER_MAX_CODES]; /* per level [bins][dimension] */
    const float *sq_norm[QUANTIZER_MAX_CODES];  /* per level [bins]: |row|² */
} quantizer_rvq;

typedef struct quantizer {
    quantizer_config cfg;
    quantizer_rvq first, rest;
} quantizer;

/* Loads both RVQs with only the levels num_codebooks uses (the caller has checked
 * 1 <= num_codebooks <= min(n_q, QUANTIZER_MAX_CODES)). */
int pp_quantizer_load(codec_arena *a, const st_file *f, const quantizer_config *cfg, quantizer *q, char *err);
/* Scratch floats per conversation of an encode or decode call. */
size_t pp_quantizer_scratch_floats(const quantizer *q);
/* n conversations: z [n][input_dimension] -> codes [n][num_codebooks] (backend memory, like
 * z); scratch n times pp_quantizer_scratch_floats. */
void pp_quantizer_encode(pp_backend *be, const quantizer *q, const float *z, int n, int32_t *codes, float *scratch);
/* codes [n][num_codebooks] (backend memory; the caller checks each is in [0, bins)) -> z
 * [n][output_dimension]. */
void pp_quantizer_decode(pp_backend *be, const quantizer *q, const int32_t *codes, int n, float *z, float *scratch);
/* Golden-check diagnostic, not for the frame loop (it allocates and downloads codebooks):
 * follows the given codes (host, in range) through both RVQs on latent z (host), in double,
 * and writes per code how much farther its row is than the nearest one,
 * gaps[i] = (d_code − d_nearest) / d_nearest (0 when the code is the nearest). */
int pp_quantizer_code_gaps(pp_backend *be, const quantizer *q, const float *z, const int32_t *codes, double *gaps,
                           char *err);

#endif
