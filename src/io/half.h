/* half: fp16 and bf16 conversions, with IEEE round to nearest even, NaN kept NaN (quieted),
 * infinities and subnormals exact. bf16 is inline: the CPU backend's bf16 KV cache converts in
 * its inner loops. fp16 is in half.c. */
#ifndef PP_IO_HALF_H
#define PP_IO_HALF_H

#include <stdint.h>
#include <string.h>

float pp_f16_to_f32(uint16_t h);
uint16_t pp_f32_to_f16(float f); /* round to nearest even */

static inline float pp_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; overflow lands on infinity. */
static inline uint16_t pp_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)(x >> 16 | 0x0040); /* NaN, quiet */
    x += 0x7FFF + (x >> 16 & 1);
    return (uint16_t)(x >> 16);
}

#endif
