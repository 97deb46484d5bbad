/* cpu_gemv_avx2: the AVX2+FMA+F16C twin of cpu_gemv.c's row loops (x86-64 only; see cpu_simd.h).
 *
 * The loops are cpu_gemv_rows.h's, on __m256; this file supplies their decoding. Quantized
 * formats look their codes up in a per-group table already multiplied by the group's scale
 * (vpermps: 8 floats by 3-bit index).
 *   NF2:  16 codes from one 32-bit word; code e sits at bits 2e; 4 centroids, repeated twice
 *         so vpermps may ignore the index's third bit, which belongs to the next code.
 *   INT4: 8 nibbles from one 32-bit word, low nibble first; (q − 8)·s as fma(q, s, −8s),
 *         which is exact before its one rounding, like the portable product.
 *   NF4:  8 nibbles, high nibble first; 16 entries as two vpermps tables and a blend on bit 3.
 * The ggml block formats and INT8 have loops of their own (cpu_gemv_blocks.c, cpu_gemv_int8.c). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "backend/cpu_vf8.h"
#include "io/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* One in-register stage of the transform (distance h = 1, 2 or 4 lanes): a lane without bit h
 * becomes a + b with its partner h lanes up, a lane with it the partner's a − b. */
INLINE __m256 fwht_stage(__m256 v, __m256 partner, int lanes_with_bit) {
    const __m256i lane_bit = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    __m256i take_sub = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(lanes_with_bit), lane_bit), lane_bit);
    return _mm256_blendv_ps(_mm256_add_ps(v, partner), _mm256_sub_ps(partner, v), _mm256_castsi256_ps(take_sub));
}

INLINE vf8 fwht8(vf8 a) {
    a = fwht_stage(a, _mm256_permute_ps(a, 0xB1), 0xAA);         /* lanes 1 0 3 2 ... */
    a = fwht_stage(a, _mm256_permute_ps(a, 0x4E), 0xCC);         /* lanes 2 3 0 1 ... */
    return fwht_stage(a, _mm256_permute2f128_ps(a, a, 0x01), 0xF0); /* the other half */
}

/* Eight dense weights starting at element pointer p. */
INLINE vf8 dense8(pp_wformat fmt, const uint8_t *p) {
    if (fmt == PP_WF_F32) return vf8_load((const float *)p);
    if (fmt == PP_WF_BF16) return vf8_from_bf16((const uint16_t *)p);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* NF2: t0 its scaled centroids (twice); NF4: t0, t1 the two halves of its scaled table; INT4:
 * t0 = s, t1 = −8s. */
typedef struct group_tab {
    __m256 t0, t1;
} group_tab;

INLINE group_tab base_tab(const float *table16) {
    return (group_tab){_mm256_loadu_ps(table16), _mm256_loadu_ps(table16 + 8)};
}

INLINE group_tab make_tab(pp_wformat fmt, float s, const group_tab *base) {
    __m256 sv = _mm256_set1_ps(s);
    if (fmt == PP_WF_INT4) return (group_tab){sv, _mm256_set1_ps(-8.0f * s)};
    return (group_tab){_mm256_mul_ps(base->t0, sv), _mm256_mul_ps(base->t1, sv)};
}

CPU_AVX2 void pp_cpu_group_scales_avx2(const pp_weight *w, int64_t g, int64_t count, float *out) {
    if (w->fmt == PP_WF_NF4) {
        pp_weight_group_scales(w, g, count, out);
        return;
    }
    const uint16_t *h = (const uint16_t *)w->scales + g;
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
    for (; i < count; i++) out[i] = _cvtsh_ss(h[i]);
}

INLINE void group_scales(const pp_weight *w, pp_wformat fmt, int64_t g, int64_t count, float *out) {
    (void)fmt;
    pp_cpu_group_scales_avx2(w, g, count, out);
}

INLINE vf8 nibbles8(pp_wformat fmt, const uint8_t *p, const group_tab *t) {
    uint32_t u;
    memcpy(&u, p, 4);
    __m256i v = _mm256_set1_epi32((int)u);
    if (fmt == PP_WF_INT4) {
        __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                     _mm256_set1_epi32(15));
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), t->t0, t->t1);
    }
    __m256i idx = _mm256_srlv_epi32(v, _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24));
    __m256 lo = _mm256_permutevar8x32_ps(t->t0, idx), hi = _mm256_permutevar8x32_ps(t->t1, idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

INLINE void nf2_16(const group_tab *t, uint32_t u, vf8 out[2]) {
    __m256i v = _mm256_set1_epi32((int)u);
    out[0] = _mm256_permutevar8x32_ps(t->t0, _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)));
    out[1] = _mm256_permutevar8x32_ps(t->t0, _mm256_srlv_epi32(v, _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)));
}

#include "backend/cpu_gemv_rows.h"

int pp_cpu_gemv_avx2_handles(const pp_weight *w) {
    switch (w->fmt) {
    case PP_WF_Q4K:
    case PP_WF_Q4_0:
    case PP_WF_Q8_0: return 1;                           /* cpu_gemv_blocks.c */
    case PP_WF_INT8: return pp_cpu_gemv_int8_handles(w); /* cpu_gemv_int8.c */
    default: return float_rows_handle(w);
    }
}

CPU_AVX2 void pp_cpu_fwht_avx2(float *v, int n) { simd_fwht(v, n); }

CPU_AVX2 void pp_cpu_gemv_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    if (pp_wformat_block_bytes(w->fmt))
        pp_cpu_gemv_block_rows_avx2(w, x, n, y, r0, r1);
    else if (w->fmt == PP_WF_INT8)
        pp_cpu_gemv_int8_rows_simd(w, x, n, y, r0, r1);
    else
        float_rows(w, x, n, y, r0, r1);
}

#endif
