/* quant_ggml: the decoders of ggml's block formats (see quant.h), in the order of ggml's own
 * dequantize_row_q4_0 / q8_0 / q4_K so the float results agree bit for bit. */
#include "io/quant.h"
#include "io/safetensors.h"

#include <math.h>
#include <string.h>

void pp_quant_q4_0_decode_block(const uint8_t *blk, float *dst) {
    float d = pp_f16_to_f32(quant_ld16(blk, 0));
    const uint8_t *q = blk + 2;
    for (int j = 0; j < 16; j++) {
        dst[j] = (float)((q[j] & 15) - 8) * d;
        dst[j + 16] = (float)((q[j] >> 4) - 8) * d;
    }
}

void pp_quant_q8_0_decode_block(const uint8_t *blk, float *dst) {
    float d = pp_f16_to_f32(quant_ld16(blk, 0));
    for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)blk[2 + j] * d;
}

void pp_quant_q4_k_decode_block(const uint8_t *blk, float *dst) {
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

/* An f16 is NaN or infinite when its five exponent bits are all set. */
#define F16_EXP_MASK 0x7C00u

int64_t pp_quant_ggml_bad_scale(const uint8_t *blocks, int64_t n_blocks, int fmt_bytes, int *which) {
    int n_scales = fmt_bytes == QUANT_Q4_K_BYTES ? 2 : 1; /* d, dmin: the block's first halves */
    const int64_t chunk = 4096;                          /* blocks tested together before a branch */
    *which = 0;
    for (int64_t c0 = 0; c0 < n_blocks; c0 += chunk) {
        int64_t c1 = n_blocks - c0 < chunk ? n_blocks : c0 + chunk;
        unsigned any = 0;
        for (int64_t b = c0; b < c1; b++) {
            const uint8_t *blk = blocks + b * fmt_bytes;
            for (int s = 0; s < n_scales; s++) any |= (quant_ld16(blk, (size_t)s) & F16_EXP_MASK) == F16_EXP_MASK;
        }
        if (!any) continue;
        for (int64_t b = c0; b < c1; b++) /* the chunk holds one: find it */
            for (int s = 0; s < n_scales; s++)
                if ((quant_ld16(blocks + b * fmt_bytes, (size_t)s) & F16_EXP_MASK) == F16_EXP_MASK) {
                    *which = s;
                    return b;
                }
    }
    return -1;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = pp_f32_to_f16(v);
    memcpy(p, &h, 2);
}

void pp_quant_q4_0_quantize(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += 32, out += QUANT_Q4_0_BYTES) {
        float amax = 0, max = 0; /* the value of largest magnitude, with its sign */
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float d = max / -8, id = d ? 1.0f / d : 0.0f;
        put_f16(out, d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
            out[2 + j] = (uint8_t)((q0 > 15 ? 15 : q0) | (q1 > 15 ? 15 : q1) << 4);
        }
    }
}

void pp_quant_q8_0_quantize(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += 32, out += QUANT_Q8_0_BYTES) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        put_f16(out, d);
        for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

static int clamp_round(float v, int hi) {
    int q = (int)lrintf(v);
    return q < 0 ? 0 : q > hi ? hi : q;
}

void pp_quant_q4_k_quantize(const float *x, int64_t n_blocks, uint8_t *out) {
    for (int64_t b = 0; b < n_blocks; b++, x += 256, out += QUANT_Q4_K_BYTES) {
        float scale[8], min[8], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = x[32 * j];
            for (int l = 0; l < 32; l++) lo = fminf(lo, x[32 * j + l]), hi = fmaxf(hi, x[32 * j + l]);
            scale[j] = (hi - lo) / 15, min[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]), max_min = fmaxf(max_min, min[j]);
        }
        put_f16(out, max_scale / 63);
        put_f16(out + 2, max_min / 63);
        float d = pp_f16_to_f32(quant_ld16(out, 0)), dmin = pp_f16_to_f32(quant_ld16(out, 1));
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = d > 0 ? clamp_round(scale[j] / d, 63) : 0;
            m[j] = dmin > 0 ? clamp_round(min[j] / dmin, 63) : 0;
        }
        uint8_t *s = out + 4, *q = out + 16;
        for (int j = 0; j < 4; j++) {
            s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
            s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
        }
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int j0 = 2 * p, j1 = 2 * p + 1;
                float d0 = d * (float)sc[j0], d1 = d * (float)sc[j1];
                int q0 = d0 > 0 ? clamp_round((x[32 * j0 + l] + dmin * (float)m[j0]) / d0, 15) : 0;
                int q1 = d1 > 0 ? clamp_round((x[32 * j1 + l] + dmin * (float)m[j1]) / d1, 15) : 0;
                q[32 * p + l] = (uint8_t)(q0 | q1 << 4);
            }
    }
}
