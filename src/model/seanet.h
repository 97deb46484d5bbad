/* seanet: Mimi's SEANet encoder and decoder (moshi modules/seanet.py, causal, no LSTM,
 * one residual block per stage, identity skip): weights, per-session state, one step.
 *
 * Encoder (keys encoder.model.{i}): conv(channels -> n_filters, kernel_size), then per ratio
 * (reversed): residual block, ELU, conv (×2 channels, k = 2·ratio, stride = ratio); then ELU,
 * conv(-> dimension, last_kernel_size). Decoder (decoder.model.{i}): conv(dimension -> ...,
 * kernel_size), then per ratio: ELU, ConvTranspose (÷2 channels, k = 2·ratio, stride = ratio),
 * residual block; then ELU, conv(-> channels, last_kernel_size). A residual block
 * (block.1, block.3) is x + conv_k1(ELU(conv_res(ELU(x)))), hidden width dim / compress. */
#ifndef PP_MODEL_SEANET_H
#define PP_MODEL_SEANET_H

#include "model/conv.h"

#define SEANET_MAX_RATIOS 8
#define SEANET_MAX_CONVS (3 * SEANET_MAX_RATIOS + 2)

typedef struct seanet_config {
    int channels, dimension, n_filters;
    int n_ratios, ratios[SEANET_MAX_RATIOS]; /* decoder order; the encoder runs them reversed */
    int kernel_size, residual_kernel_size, last_kernel_size, compress;
} seanet_config;

/* SEANetEncoder / SEANetDecoder: every conv in execution order. Encoder: model_0, then per
 * stage block_1, block_3, downsampling conv; then the last conv. Decoder: model_0, then per
 * stage ConvTranspose, block_1, block_3; then the last conv. */
typedef struct seanet {
    seanet_config cfg;
    int decoder;
    int n_conv;
    mimi_conv conv[SEANET_MAX_CONVS];
} seanet;

/* Where each conv's carry sits in a codec state (floats from the state's base): the same in
 * every state of a model. */
typedef struct seanet_layout {
    size_t carry[SEANET_MAX_CONVS];
} seanet_layout;

/* Activations and conv scratch for calls of t_in input columns on up to a batch's rows. */
typedef struct seanet_work {
    float *a, *b, *e, *h; /* activations, each rows times the largest layer's size */
    float *scratch;       /* conv scratch, rows times the largest call's */
    int t_in;
} seanet_work;

/* Product of the ratios: samples per latent step. */
int pp_seanet_hop(const seanet_config *cfg);
int pp_seanet_load(codec_arena *a, const st_file *f, const seanet_config *cfg, int decoder, seanet *out, char *err);
/* Takes each conv's carry from a state arena (sizing or filling pass). */
void pp_seanet_layout(codec_arena *state, const seanet *net, seanet_layout *out);
/* Takes the activations and scratch for batches of up to `rows` conversations. */
void pp_seanet_work_bind(codec_arena *a, const seanet *net, int t_in, int rows, seanet_work *w);
/* n conversations at once (base: backend memory, each row's state arena). Encoder: x
 * [n][channels][t_in] -> y [n][dimension][t_in / hop]. Decoder: x [n][dimension][t_in] ->
 * y [n][channels][t_in · hop]. */
void pp_seanet_step(pp_backend *be, const seanet *net, const seanet_layout *lay, const seanet_work *w,
                    const uint64_t *base, int n, const float *x, float *y);

#endif
