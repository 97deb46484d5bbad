/* quant_file: converts a dense (BF16/F16/F32) safetensors checkpoint into one of the quantized
 * layouts, tensor by tensor, with bounded memory (personaplex-quantize's engine).
 *
 * Which tensors are quantized follows the published files (docs/formats.md):
 *   nf2, int4: every 2-D tensor (all linears and embeddings, in_proj_weight included);
 *   nf4 (bitsandbytes, double quantization): only the temporal transformer's linears
 *   (self_attn in_proj/out_proj, gating linear_in/linear_out);
 *   int8 (bitsandbytes Linear8bitLt layout): every 2-D tensor, per block of `group` inputs or
 *   (group PP_QUANTIZE_ROW) per row as bitsandbytes stores it.
 * Everything else (the norms' alpha, ...) is copied through unchanged. */
#ifndef PP_IO_QUANT_FILE_H
#define PP_IO_QUANT_FILE_H

#include "io/quant_tensor.h" /* PP_QUANTIZE_ROW */
#include "io/weight.h"

typedef struct pp_quantize_opts {
    pp_wformat fmt; /* PP_WF_NF2, PP_WF_INT4, PP_WF_NF4 or PP_WF_INT8 */
    int group;      /* group (block) size; 0 = the published file's (128, 64, 64), INT8's 128 */
    /* Called after each chunk with source bytes done and total (may be NULL). */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    /* Called once per quantized tensor with the cosine of its decode against the source. */
    void (*report)(void *user, const char *name, int64_t rows, int64_t cols, double cosine);
    void *user;
} pp_quantize_opts;

/* True when the format quantizes the tensor NAME of the given dims. */
int pp_quantize_selects(pp_wformat fmt, const char *name, int ndim);

/* The two halves of writing one quantized tensor into a safetensors file, for writers of their
 * own (the demo model): pp_quantize_declare declares the keys of tensor NAME ([rows, cols],
 * stored as `source` before quantization) in fmt with group (PP_EINVAL, naming the tensor, when
 * the group does not divide a row); pp_quantize_write writes q's data into them, in that order. */
int pp_quantize_declare(st_writer *w, const char *name, st_dtype source, int64_t rows, int64_t cols, pp_wformat fmt,
                        int group, char *err);
int pp_quantize_write(st_writer *w, const char *name, st_dtype source, const pp_qtensor *q, char *err);

int pp_quantize_file(const char *in_path, const char *out_path, const pp_quantize_opts *opts, char *err);
/* The same quantization without a file: opts->report gets every tensor's cosine. */
int pp_quantize_report(const char *in_path, const pp_quantize_opts *opts, char *err);

#endif
