/* quant: see quant.h. Decoders favour loops the compiler can vectorise; quantizers follow the
 * published writers step by step (nearest centroid, ties to the lower code). */
#include "io/quant.h"

#include "io/safetensors.h"

#include <math.h>
#include <stdlib.h>

const float pp_quant_nf2_codebook[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};

const float pp_quant_nf4_table[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

void pp_quant_fwht(float *v, int n) {
    for (int h = 1; h < n; h *= 2) {
        for (int i = 0; i < n; i += 2 * h) {
            for (int j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
    }
    float norm = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) v[i] *= norm;
}

/* Index of the nearest table entry; the first one wins a tie, as torch.argmin does. */
static int nearest(const float *table, int n, float v) {
    int best = 0;
    float bd = fabsf(v - table[0]);
    for (int c = 1; c < n; c++) {
        float d = fabsf(v - table[c]);
        if (d < bd) {
            bd = d;
            best = c;
        }
    }
    return best;
}

/* ---- NF2 ---- */

void pp_quant_nf2_decode_group(const uint8_t *packed, float scale, int gs, int np2, float *tmp, float *dst) {
    for (int j = 0; j < gs; j++) tmp[j] = pp_quant_nf2_codebook[(packed[j >> 2] >> (2 * (j & 3))) & 3];
    for (int j = gs; j < np2; j++) tmp[j] = 0.0f;
    pp_quant_fwht(tmp, np2);
    for (int j = 0; j < gs; j++) dst[j] = tmp[j] * scale;
}

void pp_quant_nf2_quantize(const float *x, int64_t n_groups, int gs, int np2, uint8_t *packed, uint16_t *scales) {
    float tmp[QUANT_MAX_NP2];
    for (int64_t g = 0; g < n_groups; g++) {
        const float *v = x + g * gs;
        double ss = 0;
        for (int j = 0; j < gs; j++) ss += (double)v[j] * v[j];
        float s = (float)sqrt(ss / gs);
        if (!(s >= 1e-8f)) s = 1e-8f;
        scales[g] = pp_f32_to_f16(s);
        for (int j = 0; j < gs; j++) tmp[j] = v[j] / s;
        for (int j = gs; j < np2; j++) tmp[j] = 0.0f;
        pp_quant_fwht(tmp, np2);
        uint8_t *p = packed + g * (gs / 4);
        for (int j = 0; j < gs / 4; j++) p[j] = 0;
        for (int j = 0; j < gs; j++) p[j >> 2] |= (uint8_t)(nearest(pp_quant_nf2_codebook, 4, tmp[j]) << (2 * (j & 3)));
    }
}

/* ---- INT4 ---- */

void pp_quant_int4_decode_group(const uint8_t *packed, float scale, int gs, float *dst) {
    for (int j = 0; j < gs / 2; j++) {
        dst[2 * j] = (float)((packed[j] & 15) - 8) * scale;
        dst[2 * j + 1] = (float)((packed[j] >> 4) - 8) * scale;
    }
}

/* The nibble of v against the stored scale s. A scale that underflowed F16 (a group of zeros or
 * of values under ~4e-7) codes zero, nibble 8, as the writer's round(0 / scale) does: 0 / 0 would
 * clamp to nibble 0, which decodes the same but is what the loader takes for NF4 data. */
static int int4_code(float v, float s) {
    if (!(s > 0)) return 8;
    return (int)fminf(fmaxf(nearbyintf(v / s), -8.0f), 7.0f) + 8;
}

void pp_quant_int4_quantize(const float *x, int64_t n_groups, int gs, uint8_t *packed, uint16_t *scales) {
    for (int64_t g = 0; g < n_groups; g++) {
        const float *v = x + g * gs;
        float m = 0;
        for (int j = 0; j < gs; j++) m = fmaxf(m, fabsf(v[j]));
        if (!(m >= 1e-8f)) m = 1e-8f;
        uint16_t h = pp_f32_to_f16(m / 7.0f);
        /* A subnormal F16 (a scale under 6.1e-5) can round down by up to a third, so that the
         * group's max rounds to 8 steps: clamped to +7 and, negative, coded as nibble 0, which
         * the loader takes for NF4 data. The next F16 up keeps every |code| <= 7. A normal F16
         * rounds by 2^-11 at most (7.003 steps still round to 7): those bytes stay the writer's. */
        if (h > 0 && h < 0x7C00 && nearbyintf(m / pp_f16_to_f32(h)) > 7.0f) h++;
        /* Codes are taken against the stored (f16) scale so decode reproduces them best. */
        float s = pp_f16_to_f32(h);
        scales[g] = h;
        uint8_t *p = packed + g * (gs / 2);
        for (int j = 0; j < gs; j += 2) p[j / 2] = (uint8_t)(int4_code(v[j], s) | int4_code(v[j + 1], s) << 4);
    }
}

/* ---- INT8 ---- */

void pp_quant_int8_quantize(const float *x, int64_t rows, int64_t cols, int64_t group, int8_t *codes, float *absmax) {
    for (int64_t g = 0; g < rows * (cols / group); g++) {
        const float *v = x + g * group;
        float m = 0;
        for (int64_t j = 0; j < group; j++) m = fmaxf(m, fabsf(v[j]));
        absmax[g] = m;
        float k = m > 0 ? 127.0f / m : 0;
        /* Under an absmax of 127/FLT_MAX (a group of subnormals) 127/m is infinite, and v·k would
         * code a zero as NaN, clamped to -127: there v/m (within ±1) is taken first. */
        int tiny = isinf(k);
        for (int64_t j = 0; j < group; j++) {
            float q = tiny ? v[j] / m * 127.0f : v[j] * k;
            codes[g * group + j] = (int8_t)fminf(fmaxf(nearbyintf(q), -127), 127);
        }
    }
}

/* ---- bitsandbytes NF4 ---- */

void pp_quant_nf4_decode_block(const uint8_t *packed, const float *table, float absmax, int bs, float *dst) {
    for (int j = 0; j < bs / 2; j++) {
        dst[2 * j] = table[packed[j] >> 4] * absmax;
        dst[2 * j + 1] = table[packed[j] & 15] * absmax;
    }
}

void pp_quant_nf4_quantize(const float *x, int64_t n_blocks, int bs, uint8_t *packed, float *absmax) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * bs;
        float m = 0;
        for (int j = 0; j < bs; j++) m = fmaxf(m, fabsf(v[j]));
        if (!(m >= 1e-12f)) m = 1e-12f;
        absmax[b] = m;
        uint8_t *p = packed + b * (bs / 2);
        for (int j = 0; j < bs; j += 2) {
            int hi = nearest(pp_quant_nf4_table, 16, v[j] / m);
            int lo = nearest(pp_quant_nf4_table, 16, v[j + 1] / m);
            p[j / 2] = (uint8_t)(hi << 4 | lo);
        }
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Seven decades of linearly spaced magnitudes (2^i values in decade i), both signs, plus 0
 * and 1: 254 + 2 = 256 entries, sorted. */
void pp_quant_nf4_dynamic_map(float map[256]) {
    int k = 0;
    for (int i = 0; i < 7; i++) {
        int steps = 1 << i;
        double decade = pow(10.0, -6 + i);
        for (int s = 0; s < steps; s++) {
            double lo = 0.1 + 0.9 * s / steps, hi = 0.1 + 0.9 * (s + 1) / steps;
            double m = decade * (lo + hi) / 2.0;
            map[k++] = (float)m;
            map[k++] = (float)-m;
        }
    }
    map[k++] = 0.0f;
    map[k++] = 1.0f;
    qsort(map, 256, sizeof map[0], cmp_float);
}

float pp_quant_nf4_nest(const float *absmax, int64_t n_blocks, int nbs, const float map[256], uint8_t *codes,
                        float *nested) {
    double sum = 0;
    for (int64_t b = 0; b < n_blocks; b++) sum += absmax[b];
    float offset = n_blocks ? (float)(sum / n_blocks) : 0.0f;
    for (int64_t b0 = 0; b0 < n_blocks; b0 += nbs) {
        int64_t b1 = b0 + nbs < n_blocks ? b0 + nbs : n_blocks;
        float m = 0;
        for (int64_t b = b0; b < b1; b++) m = fmaxf(m, fabsf(absmax[b] - offset));
        if (!(m >= 1e-12f)) m = 1e-12f;
        nested[b0 / nbs] = m;
        for (int64_t b = b0; b < b1; b++) codes[b] = (uint8_t)nearest(map, 256, (absmax[b] - offset) / m);
    }
    return offset;
}
