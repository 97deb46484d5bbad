/* cuda_emu: the half-precision type and the two conversions the kernels use. */
#ifndef PK_EMU_CUDA_FP16_H
#define PK_EMU_CUDA_FP16_H

#include <stdint.h>

struct __half {
    uint16_t bits;
};

static inline __half __ushort_as_half(unsigned short h) { return __half{h}; }

/* The project's own conversion (src/io/half.c, in the pp library every emulation target links). */
extern "C" float pp_f16_to_f32(uint16_t h);

static inline float __half2float(__half h) { return pp_f16_to_f32(h.bits); }

#endif
