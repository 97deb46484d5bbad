/* mimi: the Mimi neural audio codec (moshi models/compression.py MimiModel) as PersonaPlex
 * runs it: streaming, one frame per call. docs/codec.md is the reference.
 *
 *   encode: pcm [frame_size] -> SEANet encoder -> encoder transformer -> learnt downsample
 *           (replicate start-up) -> latent [dimension] -> split RVQ -> codes [num_codebooks]
 *   decode: codes -> RVQ sum + output projections -> depthwise upsample -> decoder
 *           transformer -> SEANet decoder -> pcm [frame_size]
 *
 * A mimi_model holds the weights (immutable, shared by every session); a mimi_state holds
 * one session's streaming state (one allocation, made at creation; the lone frame calls add a
 * batch of one at their first call, and nothing after). The encoder and decoder halves of a
 * state are independent. A mimi_batch runs the
 * frames of many states at once: every weight is read once per call whatever the number of
 * conversations, and a device backend may record the call and replay it. */
#ifndef PP_MODEL_MIMI_H
#define PP_MODEL_MIMI_H

#include <stdint.h>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "io/tensor_list.h"
#include "model/mimi_transformer.h"
#include "model/quantizer.h"
#include "model/seanet.h"

typedef struct mimi_config {
    seanet_config seanet;
    mtr_config transformer;
    quantizer_config quantizer;
    int sample_rate; /* Hz */
    int frame_size;  /* samples per code frame */
} mimi_config;

/* The released codec's file name (in the model's repository, beside the LM). */
#define PP_MIMI_FILE "tokenizer-e351c8d8-checkpoint125.safetensors"

typedef struct mimi_model mimi_model;
typedef struct mimi_state mimi_state;
typedef struct mimi_batch mimi_batch;

/* The released Mimi's configuration (docs/codec.md §1). */
void pp_mimi_config_default(mimi_config *cfg);
/* Reads a config.json with the reference's keys (`seanet`, `transformer`, `quantizer`,
 * `num_codebooks`, `frame_size` / `frame_rate`, `sample_rate`); keys it lacks keep the
 * default. Refuses options this implementation does not cover, naming the key. */
int pp_mimi_config_load(const char *path, mimi_config *cfg, char *err);
/* The same from config.json text in memory (label names it in messages). */
int pp_mimi_config_parse(const char *text, size_t len, const char *label, mimi_config *cfg, char *err);

/* Opens the codec. config_path NULL: `config.json` beside the weights when it has a `seanet`,
 * `transformer` or `quantizer` section, else the released Mimi's values. The weights file stays mapped until pp_mimi_close. */
int pp_mimi_open(pp_backend *be, const char *weights_path, const char *config_path, mimi_model **out, char *err);
void pp_mimi_close(mimi_model *m);
/* The weights as pp_mimi_open reads them, without loading them: a safetensors file, or a
 * speech-core bundle's codec graphs (DIR/mimi_encoder.onnx, io/onnx_mimi.h) converted into the
 * released tensors (what personaplex-convert writes out). */
int pp_mimi_weights_open(const char *weights_path, const char *config_path, st_file **out, char *err);
const mimi_config *pp_mimi_get_config(const mimi_model *m);
pp_backend *pp_mimi_backend(const mimi_model *m);
/* Bytes of backend memory the weights use, and one state uses (with the batch of one its lone
 * frame calls make at their first call). */
size_t pp_mimi_weight_bytes(const mimi_model *m);
size_t pp_mimi_state_bytes(const mimi_state *s);

/* Calls fn for every tensor (name, shape) the codec reads under cfg, without a file: enough
 * to write a stand-in checkpoint of the real shapes. */
int pp_mimi_catalog(const mimi_config *cfg, codec_catalog_fn fn, void *ctx, char *err);
/* The same as a list (pp_tensor_list_free), each convolution weight with its stride and groups:
 * what io/onnx_mimi.h maps the codec graphs onto. */
int pp_mimi_catalog_list(const mimi_config *cfg, pp_tensor_list *out, char *err);

/* A session's state, fresh (as after reset). The model must outlive it. */
int pp_mimi_state_create(const mimi_model *m, mimi_state **out, char *err);
/* Back to the just-created state; later outputs are bit-identical to a fresh state's. */
void pp_mimi_state_reset(mimi_state *s);
void pp_mimi_state_destroy(mimi_state *s);

/* One frame: pcm (host) [frame_size] -> codes (host) [num_codebooks]. When latent (host,
 * [dimension]) is not NULL it receives the unquantised latent the codes come from. A NaN or
 * infinite sample is taken as 0 (here and in pp_mimi_encode_batch). */
int pp_mimi_encode_frame(mimi_state *s, const float *pcm, int32_t *codes, float *latent, char *err);
/* One frame: codes (host) [num_codebooks], each in [0, bins) -> pcm (host) [frame_size].
 * Out-of-range codes fail with PP_EINVAL and leave the state untouched. */
int pp_mimi_decode_frame(mimi_state *s, const int32_t *codes, float *pcm, char *err);

/* Buffers for frames of up to `capacity` states at once. The model must outlive it; one call
 * at a time. */
int pp_mimi_batch_create(const mimi_model *m, int capacity, mimi_batch **out, char *err);
void pp_mimi_batch_destroy(mimi_batch *b);
size_t pp_mimi_batch_bytes(const mimi_batch *b);
/* One frame of each of n distinct states of b's model (1 <= n <= capacity): pcm[i] (host)
 * [frame_size] -> codes[i] (host) [num_codebooks]. Each state's codes are exactly what
 * pp_mimi_encode_frame gives it alone. */
int pp_mimi_encode_batch(mimi_batch *b, mimi_state *const *ss, int n, const float *const *pcm, int32_t *const *codes,
                         char *err);
/* One frame of each of n distinct states: codes[i] (host) [num_codebooks], each in [0, bins) ->
 * pcm[i] (host) [frame_size]. An out-of-range code fails the call before any state changes. */
int pp_mimi_decode_batch(mimi_batch *b, mimi_state *const *ss, int n, const int32_t *const *codes, float *const *pcm,
                         char *err);

/* Golden-check diagnostic (allocates; not for the frame loop): for a latent from
 * pp_mimi_encode_frame and another implementation's codes for it, how much farther each code's
 * row is than the nearest one, following those codes through the RVQ levels (see
 * pp_quantizer_code_gaps). Codes must be in [0, bins). */
int pp_mimi_code_gaps(const mimi_model *m, const float *latent, const int32_t *codes, double *gaps, char *err);

#endif
