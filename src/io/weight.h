/* weight: a 2-D weight matrix in whichever stored format the checkpoint uses, kept packed.
 *
 * pp_weight_load finds NAME in a safetensors file in any supported layout (docs/formats.md:
 * dense F32/F16/BF16, NF2+WHT `.packed/.scales/...`, INT4 `.__scales__/...`, bitsandbytes NF4
 * `.weight.absmax/...`), checks it against the expected [rows, cols] and fills a descriptor
 * whose pointers address the mapping: nothing is dequantized. Backends copy the bytes to
 * their own memory (pp_backend_ops.weight_upload) and compute from the packed form.
 *
 * Row views (pp_weight_rows) address a row range of a stored tensor: the depformer's per-step
 * slices and the Q/K/V or gate/value halves. A view keeps the tensor's base pointers and moves
 * elem0, so group and block indices stay those of the stored tensor. */
#ifndef PP_IO_WEIGHT_H
#define PP_IO_WEIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

typedef enum {
    PP_WF_F32,
    PP_WF_F16,
    PP_WF_BF16,
    PP_WF_NF2,  /* NF2 + Walsh-Hadamard, 4 codes per byte, f16 RMS scale per group (§3) */
    PP_WF_INT4, /* symmetric INT4, low nibble first, f16 max/7 scale per group (§4) */
    PP_WF_NF4,  /* bitsandbytes NF4, high nibble first, absmax per block, maybe nested (§5) */
    /* ggml block formats from GGUF files: scales inside each block (io/quant.h), group = block */
    PP_WF_Q4_0,
    PP_WF_Q8_0,
    PP_WF_Q4K,
    PP_WF_INT8, /* int8 codes, f32 absmax per group (a row, or a block along it): w = q·absmax/127 (docs/formats.md §8)
                 */
    PP_WF_COUNT
} pp_wformat;

typedef struct pp_weight {
    pp_wformat fmt;
    int64_t rows, cols;
    int64_t elem0;       /* flat index of element [0][0] within the stored tensor */
    const void *data;    /* dense values, or packed codes, of the whole stored tensor */
    const void *scales;  /* NF2/INT4: f16[n_groups]; NF4: u8[n_blocks] (nested) or f32[n_blocks]; INT8: f32
                          * absmax[n_groups]; ggml: NULL */
    const int8_t *zeros; /* INT8 only: a zero point per group, w = (q − zero)·absmax/127 (ONNX Runtime's
                          * asymmetric blocks); NULL when symmetric */
    int group;           /* NF2/INT4 group size, NF4 or ggml block size (from the file, never assumed) */
    int np2;             /* NF2: Walsh-Hadamard length (power of two >= group) */
    /* NF4 only */
    const float *quant_map;     /* [16] */
    const float *nested_absmax; /* [ceil(n_blocks / nested_block)], NULL when absmax is f32 */
    const float *nested_map;    /* [256] */
    int nested_block;
    float nested_offset;
    const char *name;    /* the stored base key, for messages; owned by the file or backend */
    /* Set by the model for weights of small products run one after another (the depformer's):
     * their time is latency, so a backend may spend redundant work to save a launch. */
    int latency_bound;
} pp_weight;

/* Loads the weight NAME (its base key; `.weight` or `in_proj_weight` as stored). Accepts
 * `X.in_proj_weight` stored as `X.in_proj.weight` and the reverse. err names file, key and
 * both shapes on mismatch. */
int pp_weight_load(const st_file *f, const char *name, int64_t rows, int64_t cols, pp_weight *out, char *err);
/* True when any layout of NAME exists in the file (used to tell optional tensors). */
int pp_weight_exists(const st_file *f, const char *name);
/* View of rows [r0, r0+n) of w. */
pp_weight pp_weight_rows(const pp_weight *w, int64_t r0, int64_t n);
/* Bytes the packed weight occupies (data + scales + tables), for logs and benchmarks. */
size_t pp_weight_bytes(const pp_weight *w);
const char *pp_wformat_name(pp_wformat fmt);
/* The format named name (as pp_wformat_name spells it); PP_ENOTFOUND when none is. */
int pp_wformat_parse(const char *name, pp_wformat *out);

/* Reference decode of rows [r0, r0+n) into dst[n][cols] (f32), host memory only. Used by
 * the CPU backend's embedding lookup (one row), by tests and by the quantizer's report. */
int pp_weight_decode_rows(const pp_weight *w, int64_t r0, int64_t n, float *dst, char *err);
/* Decodes columns [c0, c0+len) of row r of w into dst[len], without checks: for a quantized
 * weight c0 and len must be multiples of w->group. The fast path of embedding lookups. */
void pp_weight_decode_span(const pp_weight *w, int64_t r, int64_t c0, int64_t len, float *dst);
/* f32 scales of groups (NF2/INT4) or blocks (NF4) [g0, g0+n) of the stored tensor. */
void pp_weight_group_scales(const pp_weight *w, int64_t g0, int64_t n, float *out);
/* Bytes per block of a ggml block format (0 for the others). */
int pp_wformat_block_bytes(pp_wformat fmt);

/* Per-format totals of loaded weights, for the startup log. */
typedef struct pp_weight_stats {
    int64_t tensors[PP_WF_COUNT];
    uint64_t bytes[PP_WF_COUNT];
} pp_weight_stats;
void pp_weight_stats_add(pp_weight_stats *s, const pp_weight *w);
/* One INFO line per format present: "<what>: nf2 398 tensors 2.07 GiB". */
void pp_weight_stats_log(const pp_weight_stats *s, const char *module, const char *what);

#endif
