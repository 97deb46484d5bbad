/* lm_export: an LM checkpoint in any layout the loader reads (NF2, INT4, NF4, INT8, GGUF's
 * blocks, dense) decoded into a plain BF16 safetensors file with the release's tensor names, tensor by
 * tensor along the catalogue (personaplex-quantize --format bf16; what the 2-bit release's
 * dequantize.py does for its own format). A config.json beside the input sets the shapes. */
#ifndef PP_MODEL_LM_EXPORT_H
#define PP_MODEL_LM_EXPORT_H

/* *layers receives the temporal layer count written. */
int pp_lm_export_bf16(const char *in_path, const char *out_path, int *layers, char *err);

#endif
