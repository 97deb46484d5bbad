/* cpu_gemv_blocks: the AVX2+FMA twin of the ggml block formats' rows (Q4_K, Q4_0, Q8_0; io/quant.h).
 *
 * Every format is read in units of 32 weights that share one scale and one offset: a Q4_K
 * sub-block j (d·sc_j·q − dmin·m_j), a Q4_0 block (d·q − 8d), a Q8_0 block (d·q). So a unit's
 * dot product with x is
 *   scale·Σ(q·x) − offset·Σx,
 * and the codes never need their scale: each unit's 32 codes are widened to floats eight at a
 * time and fused into Σ(q·x) while Σx accumulates beside it (not for Q8_0, which has no offset),
 * shared by the two rows of a pass. One decoded unit feeds up to four inputs. Only the order of
 * additions differs from the portable loop's decoded products (float rounding). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>

#define INLINE CPU_AVX2 static inline __attribute__((always_inline))
#define INPUTS 4
#define ROWS 2 /* rows per pass: each x vector loaded feeds both */
#define UNIT 32

/* Eight codes (bytes 0..7) as floats, unsigned or signed. */
INLINE __m256 codes8(__m128i bytes, int is_signed) {
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
}

/* The 32 codes of one unit as four vectors; q0, q1 hold them in their 16 bytes each. */
INLINE void widen(__m128i q0, __m128i q1, int is_signed, __m256 w[4]) {
    w[0] = codes8(q0, is_signed), w[1] = codes8(_mm_srli_si128(q0, 8), is_signed);
    w[2] = codes8(q1, is_signed), w[3] = codes8(_mm_srli_si128(q1, 8), is_signed);
}

/* A row's place: its current block, and Q4_K's block scales (read once per block). */
typedef struct {
    const uint8_t *blk;
    float d, dmin;
} row_at;

/* Unit j of the row's current block: its codes in w, its scale and offset. */
INLINE void unit_of(pp_wformat fmt, const row_at *rw, int j, __m256 w[4], float *scale, float *offset) {
    const __m128i low = _mm_set1_epi8(15);
    cpu_fetch_ahead(rw->blk + (fmt == PP_WF_Q4K ? 16 + 32 * (j / 2) : 0));
    if (fmt == PP_WF_Q4K) {
        int high = j & 1, sc, m;
        const uint8_t *qs = rw->blk + 16 + 32 * (j / 2);
        __m128i a = _mm_loadu_si128((const __m128i *)qs), b = _mm_loadu_si128((const __m128i *)(qs + 16));
        if (high) a = _mm_srli_epi16(a, 4), b = _mm_srli_epi16(b, 4);
        widen(_mm_and_si128(a, low), _mm_and_si128(b, low), 0, w);
        quant_q4_k_scale_min(rw->blk + 4, j, &sc, &m);
        *scale = rw->d * (float)sc, *offset = rw->dmin * (float)m;
    } else if (fmt == PP_WF_Q4_0) {
        __m128i q = _mm_loadu_si128((const __m128i *)(rw->blk + 2));
        widen(_mm_and_si128(q, low), _mm_and_si128(_mm_srli_epi16(q, 4), low), 0, w);
        *scale = _cvtsh_ss(quant_ld16(rw->blk, 0)), *offset = 8 * *scale;
    } else {
        widen(_mm_loadu_si128((const __m128i *)(rw->blk + 2)), _mm_loadu_si128((const __m128i *)(rw->blk + 18)), 1, w);
        *scale = _cvtsh_ss(quant_ld16(rw->blk, 0)), *offset = 0;
    }
}

/* Rows [r, r+rb) against nb inputs. */
INLINE void rows_pass(const pp_weight *w, pp_wformat fmt, int64_t r, int rb, const float *const *x, float *const *y,
                      int nb) {
    const int64_t block = fmt == PP_WF_Q4K ? QUANT_Q4_K_BLOCK : UNIT;
    const int bytes = pp_wformat_block_bytes(fmt);
    row_at rw[ROWS];
    __m256 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++) {
        rw[k].blk = (const uint8_t *)w->data + (w->elem0 + (r + k) * w->cols) / block * bytes;
        for (int i = 0; i < nb; i++) acc[k][i] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < w->cols; c += block) {
        for (int k = 0; fmt == PP_WF_Q4K && k < rb; k++)
            rw[k].d = _cvtsh_ss(quant_ld16(rw[k].blk, 0)), rw[k].dmin = _cvtsh_ss(quant_ld16(rw[k].blk, 1));
        for (int j = 0; j < block / UNIT; j++) {
            __m256 wv[ROWS][4];
            float scale[ROWS], offset[ROWS];
            for (int k = 0; k < rb; k++) unit_of(fmt, &rw[k], j, wv[k], &scale[k], &offset[k]);
            for (int i = 0; i < nb; i++) {
                __m256 xv[4];
                for (int v = 0; v < 4; v++) xv[v] = _mm256_loadu_ps(x[i] + c + j * UNIT + 8 * v);
                __m256 sx = fmt == PP_WF_Q8_0 ? _mm256_setzero_ps()
                                              : _mm256_add_ps(_mm256_add_ps(xv[0], xv[1]), _mm256_add_ps(xv[2], xv[3]));
                for (int k = 0; k < rb; k++) {
                    __m256 sq = _mm256_mul_ps(wv[k][0], xv[0]);
                    for (int v = 1; v < 4; v++) sq = _mm256_fmadd_ps(wv[k][v], xv[v], sq);
                    acc[k][i] = _mm256_fmadd_ps(_mm256_set1_ps(scale[k]), sq, acc[k][i]);
                    if (fmt != PP_WF_Q8_0) acc[k][i] = _mm256_fnmadd_ps(_mm256_set1_ps(offset[k]), sx, acc[k][i]);
                }
            }
        }
        for (int k = 0; k < rb; k++) rw[k].blk += bytes;
    }
    for (int k = 0; k < rb; k++)
        for (int i = 0; i < nb; i++) y[i][r + k] = cpu_hsum8(acc[k][i]);
}

INLINE void rows_of(const pp_weight *w, pp_wformat fmt, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    for (int i0 = 0; i0 < n; i0 += INPUTS) {
        int nb = n - i0 < INPUTS ? n - i0 : INPUTS;
        const float *xs[INPUTS];
        float *ys[INPUTS];
        for (int i = 0; i < nb; i++) xs[i] = x + (int64_t)(i0 + i) * w->cols, ys[i] = y + (int64_t)(i0 + i) * w->rows;
        int64_t r = r0;
        for (; r + ROWS <= r1; r += ROWS) {
            if (nb == 1)
                rows_pass(w, fmt, r, ROWS, xs, ys, 1); /* the common case, unrolled on its own */
            else
                rows_pass(w, fmt, r, ROWS, xs, ys, nb);
        }
        for (; r < r1; r++) rows_pass(w, fmt, r, 1, xs, ys, nb);
    }
}

CPU_AVX2 void pp_cpu_gemv_block_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    switch (w->fmt) {
    case PP_WF_Q4K: rows_of(w, PP_WF_Q4K, x, n, y, r0, r1); break;
    case PP_WF_Q4_0: rows_of(w, PP_WF_Q4_0, x, n, y, r0, r1); break;
    default: rows_of(w, PP_WF_Q8_0, x, n, y, r0, r1); break;
    }
}

#endif
