/* cuda_emu: the half-precision type and the two conversions the kernels use. */
#ifndef PK_EMU_CUDA_FP16_H
#define PK_EMU_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t bits;
};

static inline __half __ushort_as_half(unsigned short h) { return __half{h}; }

/* IEEE binary16 to binary32, subnormals and NaN payloads included. */
static inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 31u, man = h.bits & 0x3ffu, u;
    if (exp == 31)
        u = sign | 0x7f800000u | (man << 13);
    else if (exp)
        u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man)
        u = sign;
    else {
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
