/* cpu_gemv_int8: the SIMD twin (AVX2+FMA on x86-64, NEON on aarch64; cpu_vf8.h) of cpu_gemv.c's
 * INT8 rows (docs/formats.md §8). Eight codes at a time widen to floats and fuse into one sum per
 * input, which takes its group's scale once at the end of the group (a whole row for
 * bitsandbytes' per-row scales), so a row costs one widening and one FMA per input for every
 * eight weights. Zero points (asymmetric weights) are subtracted from the widened codes (exact in
 * float, as in integers), one subtraction more; symmetric weights compile without it. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2 || CPU_HAVE_NEON

#include "backend/cpu_vf8.h"
#include "io/quant.h"

#define ROWS 4
#define INPUTS 2
#define FETCH_LINE 64 /* bytes of a row per prefetch: a cache line */

/* Rows [r, r + rb) for inputs [i, i + nb): each eight inputs' values are loaded once for all rows.
 * A group's scale is read in place (quant_int8_scale, as pp_weight_group_scales does), without a
 * call per row and group: with one, and a prefetch per 8 bytes, a product on one core ran at
 * half the weights per second of BF16's. */
INLINE void pass(const pp_weight *w, const float *x, int64_t r, int rb, int i, int nb, float *y, int zeros) {
    const int8_t *q[ROWS];
    int64_t g0[ROWS];
    vf8 total[ROWS][INPUTS];
    for (int k = 0; k < rb; k++) {
        q[k] = (const int8_t *)w->data + w->elem0 + (r + k) * w->cols;
        g0[k] = (w->elem0 + (r + k) * w->cols) / w->group;
        for (int m = 0; m < nb; m++) total[k][m] = vf8_zero();
    }
    for (int64_t c = 0, g = 0; c < w->cols; c += w->group, g++) {
        vf8 acc[ROWS][INPUTS], zero[ROWS];
        for (int k = 0; k < rb; k++) {
            zero[k] = vf8_set1(zeros ? (float)w->zeros[g0[k] + g] : 0.0f);
            for (int m = 0; m < nb; m++) acc[k][m] = vf8_zero();
        }
        for (int64_t line = c; line < c + w->group; line += FETCH_LINE) {
            for (int k = 0; k < rb; k++) cpu_fetch_ahead(q[k] + line);
            int64_t end = line + FETCH_LINE < c + w->group ? line + FETCH_LINE : c + w->group;
            for (int64_t j = line; j < end; j += 8) {
                vf8 xv[INPUTS];
                for (int m = 0; m < nb; m++) xv[m] = vf8_load(x + (int64_t)(i + m) * w->cols + j);
                for (int k = 0; k < rb; k++) {
                    vf8 v = vf8_from_i8(q[k] + j);
                    if (zeros) v = vf8_sub(v, zero[k]);
                    for (int m = 0; m < nb; m++) acc[k][m] = vf8_fma(acc[k][m], v, xv[m]);
                }
            }
        }
        for (int k = 0; k < rb; k++) {
            vf8 s = vf8_set1(quant_int8_scale(w->scales, (size_t)(g0[k] + g)));
            for (int m = 0; m < nb; m++) total[k][m] = vf8_fma(total[k][m], acc[k][m], s);
        }
    }
    for (int k = 0; k < rb; k++)
        for (int m = 0; m < nb; m++) y[(int64_t)(i + m) * w->rows + r + k] = vf8_hsum(total[k][m]);
}

INLINE void rows(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1, int zeros) {
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

int pp_cpu_gemv_int8_handles(const pp_weight *w) { return w->group % 8 == 0 && w->elem0 % 8 == 0; }

SIMD_FN void pp_cpu_gemv_int8_rows_simd(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    if (w->zeros)
        rows(w, x, n, y, r0, r1, 1);
    else
        rows(w, x, n, y, r0, r1, 0);
}

#endif
