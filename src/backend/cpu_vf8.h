/* cpu_vf8: eight floats in registers, for the loops written once for every SIMD variant
 * (cpu_gemv_rows.h's and cpu_gemv_int8.c's products, cpu_attn_simd.c's attention). On x86-64 an AVX2 register, on
 * aarch64 a pair of NEON registers; a file that includes it compiles its loops for that set.
 *   INLINE, SIMD_FN          the attributes of an always-inline / an out-of-line function of the variant
 *   vf8_load(p) vf8_store(p, v)  eight floats from / to memory, any alignment
 *   vf8_zero() vf8_set1(f)   zeros; f in every lane
 *   vf8_add, vf8_sub, vf8_mul, vf8_max; vf8_fma(a, b, c) = a + b·c (one rounding)
 *   vf8_round(v)             to the nearest integer, ties to even
 *   vf8_pow2(k)              2^k for integer-valued k in [-126, 127]
 *   vf8_keep_first(v, n)     lanes n and above set to 0
 *   vf8_from_i8(p), vf8_from_bf16(p)  eight int8 / bf16 values from memory, as floats (exact)
 *   vf8_hsum(v)              the sum of the eight lanes */
#ifndef PP_BACKEND_CPU_VF8_H
#define PP_BACKEND_CPU_VF8_H

#include "backend/cpu_simd.h"

#if CPU_HAVE_AVX2

#define INLINE CPU_AVX2 static inline __attribute__((always_inline))
#define SIMD_FN CPU_AVX2

typedef __m256 vf8;
INLINE vf8 vf8_load(const float *p) { return _mm256_loadu_ps(p); }
INLINE void vf8_store(float *p, vf8 v) { _mm256_storeu_ps(p, v); }
INLINE vf8 vf8_zero(void) { return _mm256_setzero_ps(); }
INLINE vf8 vf8_set1(float f) { return _mm256_set1_ps(f); }
INLINE vf8 vf8_add(vf8 a, vf8 b) { return _mm256_add_ps(a, b); }
INLINE vf8 vf8_sub(vf8 a, vf8 b) { return _mm256_sub_ps(a, b); }
INLINE vf8 vf8_mul(vf8 a, vf8 b) { return _mm256_mul_ps(a, b); }
INLINE vf8 vf8_max(vf8 a, vf8 b) { return _mm256_max_ps(a, b); }
INLINE vf8 vf8_fma(vf8 a, vf8 b, vf8 c) { return _mm256_fmadd_ps(b, c, a); }
INLINE vf8 vf8_round(vf8 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
INLINE vf8 vf8_pow2(vf8 k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}
INLINE vf8 vf8_keep_first(vf8 v, int n) {
    __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_ps(v, _mm256_castsi256_ps(live));
}
INLINE float vf8_hsum(vf8 v) { return cpu_hsum8(v); }
INLINE vf8 vf8_from_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
INLINE vf8 vf8_from_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#elif CPU_HAVE_NEON

#include <arm_neon.h>

#define INLINE static inline __attribute__((always_inline))
#define SIMD_FN

typedef struct {
    float32x4_t lo, hi;
} vf8;
INLINE vf8 vf8_load(const float *p) { return (vf8){vld1q_f32(p), vld1q_f32(p + 4)}; }
INLINE void vf8_store(float *p, vf8 v) { vst1q_f32(p, v.lo), vst1q_f32(p + 4, v.hi); }
INLINE vf8 vf8_set1(float f) { return (vf8){vdupq_n_f32(f), vdupq_n_f32(f)}; }
INLINE vf8 vf8_zero(void) { return vf8_set1(0.0f); }
INLINE vf8 vf8_add(vf8 a, vf8 b) { return (vf8){vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
INLINE vf8 vf8_sub(vf8 a, vf8 b) { return (vf8){vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
INLINE vf8 vf8_mul(vf8 a, vf8 b) { return (vf8){vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
INLINE vf8 vf8_max(vf8 a, vf8 b) { return (vf8){vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)}; }
INLINE vf8 vf8_fma(vf8 a, vf8 b, vf8 c) { return (vf8){vfmaq_f32(a.lo, b.lo, c.lo), vfmaq_f32(a.hi, b.hi, c.hi)}; }
INLINE vf8 vf8_round(vf8 v) { return (vf8){vrndnq_f32(v.lo), vrndnq_f32(v.hi)}; }
INLINE float32x4_t pow2_4(float32x4_t k) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23));
}
INLINE vf8 vf8_pow2(vf8 k) { return (vf8){pow2_4(k.lo), pow2_4(k.hi)}; }
INLINE vf8 vf8_keep_first(vf8 v, int n) {
    const uint32x4_t lane_lo = {0, 1, 2, 3}, lane_hi = {4, 5, 6, 7};
    uint32x4_t count = vdupq_n_u32((uint32_t)(n < 0 ? 0 : n));
    return (vf8){vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v.lo), vcltq_u32(lane_lo, count))),
                 vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v.hi), vcltq_u32(lane_hi, count)))};
}
INLINE float vf8_hsum(vf8 v) { return vaddvq_f32(vaddq_f32(v.lo, v.hi)); }
INLINE vf8 vf8_from_i8(const int8_t *p) {
    int16x8_t v = vmovl_s8(vld1_s8(p));
    return (vf8){vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))), vcvtq_f32_s32(vmovl_high_s16(v))};
}
INLINE vf8 vf8_from_bf16(const uint16_t *p) {
    uint16x8_t h = vld1q_u16(p);
    return (vf8){vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)),
                 vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
}

#endif

#endif
