/* quant_ggml: the decoders of ggml's block formats (see quant.h), in the order of ggml's own
 * dequantize_row_q4_0 / q8_0 / q4_K so the float results agree bit for bit. */
#include "io/quant.h"
#include "io/safetensors.h"

void quant_q4_0_decode_block(const uint8_t *blk, float *dst) {
    float d = pp_f16_to_f32(quant_ld16(blk, 0));
    const uint8_t *q = blk + 2;
    for (int j = 0; j < 16; j++) {
        dst[j] = (float)((q[j] & 15) - 8) * d;
        dst[j + 16] = (float)((q[j] >> 4) - 8) * d;
    }
}

void quant_q8_0_decode_block(const uint8_t *blk, float *dst) {
    float d = pp_f16_to_f32(quant_ld16(blk, 0));
    for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)blk[2 + j] * d;
}

void quant_q4_k_decode_block(const uint8_t *blk, float *dst) {
    float d = pp_f16_to_f32(quant_ld16(blk, 0)), dmin = pp_f16_to_f32(quant_ld16(blk, 1));
    const uint8_t *scales = blk + 4, *q = blk + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
        int sc, m;
        quant_q4_k_scale_min(scales, j, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        quant_q4_k_scale_min(scales, j + 1, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 15) - m1;
        for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
    }
}
