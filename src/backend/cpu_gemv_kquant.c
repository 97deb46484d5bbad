/* cpu_gemv_kquant: the AVX2+FMA twin of the Q4_K rows (ggml's 4-bit k-quant; io/quant.h).
 *
 * A Q4_K weight is d·sc_j·q − dmin·m_j in sub-block j (32 weights), so its dot product with x is
 *   Σ_j d·sc_j·Σ(q·x) − dmin·m_j·Σx,
 * and the nibbles never need their scale: each 32-byte run of codes (two sub-blocks, low nibbles
 * then high) is widened to floats eight at a time and fused into Σ(q·x) while Σx accumulates
 * beside it. One decoded block feeds up to four inputs. Only the order of additions differs from
 * the portable loop's decoded products (float rounding). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>

#define INLINE CPU_AVX2 static inline __attribute__((always_inline))
#define INPUTS 4

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Eight codes (bytes 0..15) as floats. */
INLINE __m256 codes8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

/* One sub-block: acc += d·sc·Σ(q·x) − dmin·m·Σx over 32 codes held in the bytes of lo|hi. */
INLINE void sub_block(__m128i q0, __m128i q1, const float *const *x, int nb, int64_t col, float dsc, float dm,
                      __m256 *acc) {
    __m256 w[4] = {codes8(q0), codes8(_mm_srli_si128(q0, 8)), codes8(q1), codes8(_mm_srli_si128(q1, 8))};
    for (int i = 0; i < nb; i++) {
        __m256 sq = _mm256_setzero_ps(), sx = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            __m256 xv = _mm256_loadu_ps(x[i] + col + 8 * k);
            sq = _mm256_fmadd_ps(w[k], xv, sq);
            sx = _mm256_add_ps(sx, xv);
        }
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(dsc), sq, acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_set1_ps(dm), sx, acc[i]);
    }
}

INLINE void row_pass(const pp_weight *w, int64_t r, const float *const *x, float *const *y, int nb) {
    const uint8_t *blk = (const uint8_t *)w->data + (w->elem0 + r * w->cols) / QUANT_Q4_K_BLOCK * QUANT_Q4_K_BYTES;
    const __m128i low = _mm_set1_epi8(15);
    __m256 acc[INPUTS];
    for (int i = 0; i < nb; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < w->cols; c += QUANT_Q4_K_BLOCK, blk += QUANT_Q4_K_BYTES) {
        float d = _cvtsh_ss(quant_ld16(blk, 0)), dmin = _cvtsh_ss(quant_ld16(blk, 1));
        for (int p = 0; p < 4; p++) {
            int sc0, m0, sc1, m1;
            quant_q4_k_scale_min(blk + 4, 2 * p, &sc0, &m0);
            quant_q4_k_scale_min(blk + 4, 2 * p + 1, &sc1, &m1);
            const uint8_t *qs = blk + 16 + 32 * p;
            __m128i a = _mm_loadu_si128((const __m128i *)qs), b = _mm_loadu_si128((const __m128i *)(qs + 16));
            sub_block(_mm_and_si128(a, low), _mm_and_si128(b, low), x, nb, c + 64 * p, d * (float)sc0,
                      dmin * (float)m0, acc);
            sub_block(_mm_and_si128(_mm_srli_epi16(a, 4), low), _mm_and_si128(_mm_srli_epi16(b, 4), low), x, nb,
                      c + 64 * p + 32, d * (float)sc1, dmin * (float)m1, acc);
        }
    }
    for (int i = 0; i < nb; i++) y[i][r] = hsum(acc[i]);
}

CPU_AVX2 void cpu_gemv_q4k_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    for (int i0 = 0; i0 < n; i0 += INPUTS) {
        int nb = n - i0 < INPUTS ? n - i0 : INPUTS;
        const float *xs[INPUTS];
        float *ys[INPUTS];
        for (int i = 0; i < nb; i++) xs[i] = x + (int64_t)(i0 + i) * w->cols, ys[i] = y + (int64_t)(i0 + i) * w->rows;
        for (int64_t r = r0; r < r1; r++) {
            if (nb == 1) row_pass(w, r, xs, ys, 1); /* the common case, unrolled on its own */
            else row_pass(w, r, xs, ys, nb);
        }
    }
}

#endif
