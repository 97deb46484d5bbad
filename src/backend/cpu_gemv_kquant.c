/* cpu_gemv_kquant: the AVX2+FMA twin of the Q4_K rows (ggml's 4-bit k-quant; io/quant.h).
 *
 * A Q4_K weight is d·sc_j·q − dmin·m_j in sub-block j (32 weights), so its dot product with x is
 *   Σ_j d·sc_j·Σ(q·x) − dmin·m_j·Σx,
 * and the nibbles never need their scale: each 32-byte run of codes (two sub-blocks, low nibbles
 * then high) is widened to floats eight at a time and fused into Σ(q·x) while Σx accumulates
 * beside it, shared by the two rows of a pass. One decoded block feeds up to four inputs. Only the order of additions differs from
 * the portable loop's decoded products (float rounding). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>

#define INLINE CPU_AVX2 static inline __attribute__((always_inline))
#define INPUTS 4
#define ROWS 2 /* rows per pass: each x vector loaded feeds both */

/* Eight codes (bytes 0..15) as floats. */
INLINE __m256 codes8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

/* The 32 codes of one sub-block as four vectors; q0, q1 hold them in their 16 bytes each. */
INLINE void widen(__m128i q0, __m128i q1, __m256 w[4]) {
    w[0] = codes8(q0), w[1] = codes8(_mm_srli_si128(q0, 8));
    w[2] = codes8(q1), w[3] = codes8(_mm_srli_si128(q1, 8));
}

typedef struct {
    const uint8_t *blk;     /* the row's current block */
    float d, dmin;
} row_at;

/* One sub-block (j, of the pair p) of rb rows for nb inputs: Σx is shared by the rows, each
 * input's x is loaded once for all of them. */
INLINE void sub_block(row_at *rw, int rb, int p, int high, const float *const *x, int nb, int64_t col,
                      __m256 acc[][INPUTS]) {
    const __m128i low = _mm_set1_epi8(15);
    __m256 w[ROWS][4];
    float dsc[ROWS], dm[ROWS];
    for (int k = 0; k < rb; k++) {
        const uint8_t *qs = rw[k].blk + 16 + 32 * p;
        __m128i a = _mm_loadu_si128((const __m128i *)qs), b = _mm_loadu_si128((const __m128i *)(qs + 16));
        if (high) a = _mm_srli_epi16(a, 4), b = _mm_srli_epi16(b, 4);
        widen(_mm_and_si128(a, low), _mm_and_si128(b, low), w[k]);
        int sc, m;
        quant_q4_k_scale_min(rw[k].blk + 4, 2 * p + high, &sc, &m);
        dsc[k] = rw[k].d * (float)sc, dm[k] = rw[k].dmin * (float)m;
    }
    for (int i = 0; i < nb; i++) {
        __m256 xv[4], sx;
        for (int v = 0; v < 4; v++) xv[v] = _mm256_loadu_ps(x[i] + col + 8 * v);
        sx = _mm256_add_ps(_mm256_add_ps(xv[0], xv[1]), _mm256_add_ps(xv[2], xv[3]));
        for (int k = 0; k < rb; k++) {
            __m256 sq = _mm256_mul_ps(w[k][0], xv[0]);
            for (int v = 1; v < 4; v++) sq = _mm256_fmadd_ps(w[k][v], xv[v], sq);
            acc[k][i] = _mm256_fmadd_ps(_mm256_set1_ps(dsc[k]), sq, acc[k][i]);
            acc[k][i] = _mm256_fnmadd_ps(_mm256_set1_ps(dm[k]), sx, acc[k][i]);
        }
    }
}

/* Rows [r, r+rb) against nb inputs. */
INLINE void rows_pass(const pp_weight *w, int64_t r, int rb, const float *const *x, float *const *y, int nb) {
    row_at rw[ROWS];
    __m256 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++) {
        rw[k].blk = (const uint8_t *)w->data + (w->elem0 + (r + k) * w->cols) / QUANT_Q4_K_BLOCK * QUANT_Q4_K_BYTES;
        for (int i = 0; i < nb; i++) acc[k][i] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < w->cols; c += QUANT_Q4_K_BLOCK) {
        for (int k = 0; k < rb; k++)
            rw[k].d = _cvtsh_ss(quant_ld16(rw[k].blk, 0)), rw[k].dmin = _cvtsh_ss(quant_ld16(rw[k].blk, 1));
        for (int p = 0; p < 4; p++) {
            sub_block(rw, rb, p, 0, x, nb, c + 64 * p, acc);
            sub_block(rw, rb, p, 1, x, nb, c + 64 * p + 32, acc);
        }
        for (int k = 0; k < rb; k++) rw[k].blk += QUANT_Q4_K_BYTES;
    }
    for (int k = 0; k < rb; k++)
        for (int i = 0; i < nb; i++) y[i][r + k] = cpu_hsum8(acc[k][i]);
}

CPU_AVX2 void pp_cpu_gemv_q4k_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    for (int i0 = 0; i0 < n; i0 += INPUTS) {
        int nb = n - i0 < INPUTS ? n - i0 : INPUTS;
        const float *xs[INPUTS];
        float *ys[INPUTS];
        for (int i = 0; i < nb; i++) xs[i] = x + (int64_t)(i0 + i) * w->cols, ys[i] = y + (int64_t)(i0 + i) * w->rows;
        int64_t r = r0;
        for (; r + ROWS <= r1; r += ROWS) {
            if (nb == 1) rows_pass(w, r, ROWS, xs, ys, 1); /* the common case, unrolled on its own */
            else rows_pass(w, r, ROWS, xs, ys, nb);
        }
        for (; r < r1; r++) rows_pass(w, r, 1, xs, ys, nb);
    }
}

#endif
