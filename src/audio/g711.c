/* g711: segment (exponent) + 4-bit mantissa companding, on the 16-bit scale. */
#include "audio/g711.h"

#define ULAW_BIAS 0x84  /* shifts every magnitude so that the segments start at powers of two */
#define ULAW_CLIP 32635 /* the largest magnitude that still fits after the bias */

uint8_t pp_ulaw_encode(int16_t s) {
    int v = s, sign = 0;
    if (v < 0) { /* one's complement, as in ITU-T G.191: -1 is the mirror of 0, not of 1 */
        v = -v - 1;
        sign = 0x80;
    }
    if (v > ULAW_CLIP) v = ULAW_CLIP;
    v += ULAW_BIAS;
    int exp = 7;
    for (int mask = 0x4000; !(v & mask) && exp > 0; mask >>= 1) exp--;
    int mant = (v >> (exp + 3)) & 0x0F;
    return (uint8_t) ~(sign | exp << 4 | mant);
}

int16_t pp_ulaw_decode(uint8_t u) {
    u = (uint8_t)~u;
    int exp = (u >> 4) & 7, mant = u & 0x0F;
    int v = (((mant << 3) + ULAW_BIAS) << exp) - ULAW_BIAS;
    return (int16_t)(u & 0x80 ? -v : v);
}

uint8_t pp_alaw_encode(int16_t s) {
    int v = s, mask = 0xD5; /* even bits inverted, sign bit set for positive samples */
    if (v < 0) {
        v = -v - 1;
        mask = 0x55;
    }
    int code;
    if (v < 256) {
        code = v >> 4;
    } else {
        int seg = 1;
        while (v >> (seg + 8)) seg++;
        code = seg << 4 | ((v >> (seg + 3)) & 0x0F);
    }
    return (uint8_t)(code ^ mask);
}

int16_t pp_alaw_decode(uint8_t a) {
    a ^= 0x55;
    int seg = (a >> 4) & 7, v = (a & 0x0F) << 4;
    v += seg ? 0x108 : 8; /* the middle of the step; segment 1 up carries the implied leading bit */
    if (seg > 1) v <<= seg - 1;
    return (int16_t)(a & 0x80 ? v : -v);
}
