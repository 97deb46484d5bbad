/* half: the fp16 conversions of half.h. */
#include "io/half.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float pp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1F, m = h & 0x3FF;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24 is exact in f32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7F800000 | m << 13);
    return bits_f32(sign | (e + 112) << 23 | m << 13);
}

uint16_t pp_f32_to_f16(float f) {
    uint32_t x = f32_bits(f), ax = x & 0x7FFFFFFF;
    uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
    if (ax > 0x7F800000) return sign | 0x7E00 | (uint16_t)(ax >> 13 & 0x3FF); /* NaN, quiet */
    /* 65520 is halfway between 65504 (the largest half) and 65536; the tie goes to the even
     * mantissa, which is the overflow to infinity */
    if (ax >= 0x477FF000) return sign | 0x7C00;
    if (ax < 0x38800000) { /* below 2^-14: a half subnormal or zero */
        uint32_t e = ax >> 23;
        if (e < 102) return sign; /* under 2^-25: rounds to zero */
        uint32_t m = (ax & 0x7FFFFF) | 0x800000, shift = 126 - e;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++; /* may carry into the smallest normal */
        return sign | (uint16_t)h;
    }
    uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry moves the exponent up */
    return sign | (uint16_t)h;
}
