/* onnx_bundle: speech-core's ONNX bundles of PersonaPlex (a folder holding temporal_step.onnx and
 * depformer_step.onnx, their .onnx.data files, voices/<name>.bin and system_prompts.bin) read as
 * an LM checkpoint with the released key names.
 *
 * Weights are found by the graph's structure, not by their (exporter-chosen) names: the order
 * in which nodes consume constants follows the model's layer order. In temporal_step: the
 * embedding Gathers (the text one is indexed from the graph's first input, each audio one names
 * its codebook by the constant Slice or Gather of the tokens input), then per layer the
 * RMS-norm scales (a Mul beside a ReduceMean chain, or a fused SimplifiedLayerNormalization) and
 * four projections (MatMul, Gemm, com.microsoft MatMulNBits or MatMulInteger), then the output
 * norm and the text projection (here, or in depformer_step). In
 * depformer_step every per-step tensor is a [steps, K, N] stack selected by a Gather of the
 * step (read directly, or through DequantizeLinear for the `dep_gint8` INT8 stacks).
 *
 * Each weight keeps its stored precision: f32/f16/bf16 stay dense (transposed from ONNX's
 * [K, N] into the checkpoint's [out, in]); 8-bit and 4-bit MatMulNBits blocks, INT8 stacks and
 * MatMulInteger's per-channel INT8 become the INT8 format (docs/formats.md §8) with per-group
 * zero points where the file has them. The converted tensors live in one buffer built while the
 * graphs are read (the same bytes as stored, 4-bit codes as one byte each); nothing is turned
 * into floats. A graph that does not have the expected structure is refused with the node at
 * fault named. */
#ifndef PP_IO_ONNX_BUNDLE_H
#define PP_IO_ONNX_BUNDLE_H

#include <stddef.h>

#include "io/safetensors.h"

#define PP_ONNX_TEMPORAL "temporal_step.onnx"
#define PP_ONNX_DEPFORMER "depformer_step.onnx"
#define PP_ONNX_PROMPTS "system_prompts.bin"

typedef struct onnx_bundle onnx_bundle;

/* True when PATH is a folder holding temporal_step.onnx. */
int pp_onnx_bundle_is(const char *path);
/* Reads the bundle folder DIR: *tensors (count entries, the caller's to free) point into the
 * bundle's buffer (*base, *size bytes), owned by *out until pp_onnx_bundle_free. */
int pp_onnx_bundle_load(const char *dir, st_tensor **tensors, size_t *count, const void **base, size_t *size,
                        onnx_bundle **out, char *err);
void pp_onnx_bundle_free(onnx_bundle *b);
/* Frees the converted weights' buffer only; the tensors' names stay valid until pp_onnx_bundle_free. */
void pp_onnx_bundle_free_data(onnx_bundle *b);
/* The same from the two graphs in memory (no external data may be named): the fuzzer's and the
 * tests' entry point. */
int pp_onnx_bundle_open_memory(const void *temporal_buf, size_t temporal_len, const void *depformer_buf,
                               size_t depformer_len, st_tensor **tensors, size_t *count, const void **base,
                               size_t *size, onnx_bundle **out, char *err);
/* Bytes the converted weights will take, from the graphs alone (nothing is converted). */
int pp_onnx_bundle_size(const char *dir, size_t *bytes, char *err);

#endif
