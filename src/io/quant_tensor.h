/* quant_tensor: one dense tensor of a checkpoint (F32/F16/BF16, [rows, cols]) quantized in memory
 * into NF2+WHT, INT4, bitsandbytes NF4 or INT8 (docs/formats.md), reading the source in bounded
 * chunks. personaplex-quantize writes these buffers to a file and the model loader uploads them
 * when the server quantizes at start-up (`--quantize`), so both give the same bytes. */
#ifndef PP_IO_QUANT_TENSOR_H
#define PP_IO_QUANT_TENSOR_H

#include "io/safetensors.h"
#include "io/weight.h"

#define PP_QUANTIZE_ROW (-1) /* INT8: one scale per row */

typedef struct pp_qtensor {
    pp_weight w;       /* the quantized weight; its pointers address the buffers below */
    void *codes;       /* packed codes (NF2, INT4, NF4) or int8 codes */
    void *scales;      /* NF2/INT4: f16 per group; NF4: u8 nested codes per block; INT8: f32 absmax */
    float *nested;     /* NF4: f32 absmax per nested block */
    float *nested_map; /* NF4: the 256-entry dynamic map */
    size_t codes_bytes, scales_bytes, nested_bytes;
    double cosine; /* of the decode against the source */
} pp_qtensor;

/* The group (block) size a format uses when none is asked for: 128 (NF2, INT8), 64 (INT4, NF4). */
int pp_quantize_default_group(pp_wformat fmt);
/* Bytes a [rows, cols] tensor takes quantized to fmt with group (codes, scales and tables). */
uint64_t pp_quantized_bytes(pp_wformat fmt, int group, int64_t rows, int64_t cols);
/* Checks a format and group size: PP_EINVAL with the reason when they cannot be used. */
int pp_quantize_check(pp_wformat fmt, int group, char *err);
/* PP_EFORMAT, naming the file, tensor and element, when a F32, F16 or BF16 tensor holds a NaN or
 * an infinity; PP_OK for those of other dtypes. pp_quantize_tensor checks its source with it. */
int pp_quantize_check_finite(const st_file *f, const st_tensor *t, char *err);
/* Quantizes tensor t of f into q (group as pp_quantize_check accepts; the row length must be a
 * multiple). On failure q holds nothing. */
int pp_quantize_tensor(const st_file *f, const st_tensor *t, pp_wformat fmt, int group, pp_qtensor *q, char *err);
/* An NF2 tensor [rows, cols] that quantizes nothing, for models of the released shapes written in
 * seconds (the demo's released size; quantizing random dense weights would take minutes). Codes
 * are drawn independently at the frequencies quantizing Gaussian weights gives (about
 * 16/34/34/16 %, what the loader's histogram check expects); every scale is set so the decoded
 * weights have RMS `rms`. The same seed gives the same bytes. */
int pp_qtensor_random_nf2(int64_t rows, int64_t cols, int group, float rms, uint64_t seed, pp_qtensor *q, char *err);
void pp_qtensor_free(pp_qtensor *q);

#endif
