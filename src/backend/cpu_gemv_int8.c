/* cpu_gemv_int8: the AVX2+FMA twin of cpu_gemv.c's INT8 rows (docs/formats.md §8). Eight codes at
 * a time widen to floats and fuse into one sum per input, which takes its group's scale once at
 * the end of the group (a whole row for bitsandbytes' per-row scales), so a row costs one
 * widening and one FMA per input for every eight weights. Zero points (asymmetric weights) are
 * subtracted from the widened codes, one integer subtraction more; symmetric weights compile
 * without it. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>

#define ROWS 4
#define INPUTS 2

/* Rows [r, r + rb) for inputs [i, i + nb): each eight inputs' values are loaded once for all rows. */
CPU_AVX2 static inline __attribute__((always_inline)) void pass(const pp_weight *w, const float *x, int64_t r, int rb,
                                                                int i, int nb, float *y, int zeros) {
    const int8_t *q[ROWS];
    int64_t g0[ROWS];
    __m256 total[ROWS][INPUTS];
    for (int k = 0; k < rb; k++) {
        q[k] = (const int8_t *)w->data + w->elem0 + (r + k) * w->cols;
        g0[k] = (w->elem0 + (r + k) * w->cols) / w->group;
        for (int m = 0; m < nb; m++) total[k][m] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < w->cols; c += w->group) {
        __m256 acc[ROWS][INPUTS];
        __m256i zero[ROWS];
        for (int k = 0; k < rb; k++) {
            zero[k] = _mm256_set1_epi32(zeros ? w->zeros[g0[k] + c / w->group] : 0);
            for (int m = 0; m < nb; m++) acc[k][m] = _mm256_setzero_ps();
        }
        for (int64_t j = c; j < c + w->group; j += 8) {
            __m256 xv[INPUTS];
            for (int m = 0; m < nb; m++) xv[m] = _mm256_loadu_ps(x + (int64_t)(i + m) * w->cols + j);
            for (int k = 0; k < rb; k++) {
                cpu_fetch_ahead(q[k] + j);
                __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q[k] + j)));
                __m256 v = _mm256_cvtepi32_ps(zeros ? _mm256_sub_epi32(codes, zero[k]) : codes);
                for (int m = 0; m < nb; m++) acc[k][m] = _mm256_fmadd_ps(v, xv[m], acc[k][m]);
            }
        }
        for (int k = 0; k < rb; k++) {
            float s;
            pp_weight_group_scales(w, g0[k] + c / w->group, 1, &s);
            for (int m = 0; m < nb; m++) total[k][m] = _mm256_fmadd_ps(acc[k][m], _mm256_set1_ps(s), total[k][m]);
        }
    }
    for (int k = 0; k < rb; k++)
        for (int m = 0; m < nb; m++) y[(int64_t)(i + m) * w->rows + r + k] = cpu_hsum8(total[k][m]);
}

CPU_AVX2 static inline __attribute__((always_inline)) void rows(const pp_weight *w, const float *x, int n, float *y,
                                                                int64_t r0, int64_t r1, int zeros) {
    for (int64_t r = r0; r < r1;) {
        int rb = r1 - r >= ROWS ? ROWS : 1;
        for (int i = 0; i < n; i += INPUTS) {
            if (rb == ROWS && n - i >= INPUTS)
                pass(w, x, r, ROWS, i, INPUTS, y, zeros);
            else if (rb == ROWS)
                pass(w, x, r, ROWS, i, 1, y, zeros);
            else
                pass(w, x, r, 1, i, n - i < INPUTS ? n - i : INPUTS, y, zeros);
        }
        r += rb;
    }
}

CPU_AVX2 void pp_cpu_gemv_int8_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    if (w->zeros)
        rows(w, x, n, y, r0, r1, 1);
    else
        rows(w, x, n, y, r0, r1, 0);
}

#endif
