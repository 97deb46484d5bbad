/* onnx_mimi: the Mimi codec of a speech-core ONNX bundle (mimi_encoder.onnx: pcm -> codes,
 * mimi_decoder.onnx: codes -> pcm, each exported whole from the reference MimiModel, with its
 * .onnx.data file) read as a codec checkpoint with the released key names.
 *
 * As for the LM's graphs (io/onnx_bundle.h), weights are found by the graph's structure, never by
 * their names: the nodes that consume constants come in the model's order. The encoder: the
 * SEANet encoder's convolutions, the encoder transformer (per layer: norm1 scale and bias, as a
 * LayerNormalization or a decomposed Mul and Add; the attention's input and output MatMuls; the
 * first layer scale; norm2; linear1, linear2; the second layer scale), the learnt downsampling
 * convolution and the two quantizer input projections (anything after them, the codebook
 * search, is not read). The decoder: the codebooks (Gathers of a [bins, dim] table, folded or
 * as embedding_sum / cluster_usage), the two quantizer output projections, the depthwise
 * upsampling ConvTranspose, the decoder transformer and the SEANet decoder's convolutions. The
 * codec's own list of tensors (the caller's, from its configuration) says how many of each to
 * expect and their shapes; a graph that differs is refused with the node at fault named.
 *
 * Float weights keep their stored type (f32, f16, bf16); MatMul weights are transposed from
 * ONNX's [in, out] into the checkpoint's [out, in]. A folded codebook gets a cluster_usage of
 * ones, so embedding_sum / usage is the table itself. The decoder may hold more codebook levels
 * than the codec uses; the first ones are read. */
#ifndef PP_IO_ONNX_MIMI_H
#define PP_IO_ONNX_MIMI_H

#include <stddef.h>
#include <stdint.h>

#include "io/onnx_bundle.h"
#include "io/safetensors.h"
#include "io/tensor_list.h"

#define PP_ONNX_MIMI_ENCODER "mimi_encoder.onnx"
#define PP_ONNX_MIMI_DECODER "mimi_decoder.onnx"

/* True when PATH names mimi_encoder.onnx or mimi_decoder.onnx; dir receives its folder. */
int pp_onnx_mimi_is(const char *path, char *dir, size_t dir_size);
/* Reads the two codec graphs of folder DIR into the tensors `want` lists (the codec's released
 * names and shapes, in its loading order); *tensors etc. as pp_onnx_bundle_load. */
int pp_onnx_mimi_load(const char *dir, const pp_tensor_list *want, st_tensor **tensors, size_t *count,
                      const void **base, size_t *size, onnx_bundle **out, char *err);
/* The same from the two graphs in memory (no external data may be named): the fuzzer's entry. */
int pp_onnx_mimi_open_memory(const void *encoder_buf, size_t encoder_len, const void *decoder_buf, size_t decoder_len,
                             const pp_tensor_list *want, st_tensor **tensors, size_t *count, const void **base,
                             size_t *size, onnx_bundle **out, char *err);

#endif
