/* cpu_gemv_avx2: the AVX2+FMA+F16C twin of cpu_gemv.c's row loops (x86-64 only; see cpu_simd.h).
 *
 * Weights are decoded straight into registers, eight at a time, and multiplied into
 * accumulators: 4 rows × 1 or 2 inputs, or 2 rows × 4 inputs, per pass, so every input vector
 * loaded feeds several rows and every decoded weight vector several inputs. Quantized formats
 * look their codes up in a per-group table already multiplied by the group's scale (vpermps:
 * 8 floats by 3-bit index), so the decoded weights equal the portable code's value·scale
 * products bit for bit; only the order of the dot products' additions (and FMA's single
 * rounding) differs.
 *   NF2:  16 codes from one 32-bit word; code e sits at bits 2e; 4 centroids, repeated twice
 *         so vpermps may ignore the index's third bit, which belongs to the next code.
 *   INT4: 8 nibbles from one 32-bit word, low nibble first; (q − 8)·s as fma(q, s, −8s),
 *         which is exact before its one rounding, like the portable product.
 *   NF4:  8 nibbles, high nibble first; 16 entries as two vpermps tables and a blend on bit 3. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE CPU_AVX2 static inline __attribute__((always_inline))
#define ROWS 4     /* rows per pass */
#define INPUTS 4   /* inputs per pass */
#define CHUNK 1024 /* columns whose group scales are fetched at once */

/* One in-register stage of the transform (distance h = 1, 2 or 4 lanes): a lane without bit h
 * becomes a + b with its partner h lanes up, a lane with it the partner's a − b. */
INLINE __m256 fwht_stage(__m256 v, __m256 partner, int lanes_with_bit) {
    const __m256i lane_bit = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    __m256i take_sub = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(lanes_with_bit), lane_bit), lane_bit);
    return _mm256_blendv_ps(_mm256_add_ps(v, partner), _mm256_sub_ps(partner, v), _mm256_castsi256_ps(take_sub));
}

CPU_AVX2 void pp_cpu_fwht_avx2(float *v, int n) {
    for (int i = 0; i < n; i += 8) {
        __m256 a = _mm256_loadu_ps(v + i);
        a = fwht_stage(a, _mm256_permute_ps(a, 0xB1), 0xAA);         /* lanes 1 0 3 2 ... */
        a = fwht_stage(a, _mm256_permute_ps(a, 0x4E), 0xCC);         /* lanes 2 3 0 1 ... */
        a = fwht_stage(a, _mm256_permute2f128_ps(a, a, 0x01), 0xF0); /* the other half */
        _mm256_storeu_ps(v + i, a);
    }
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
                _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
            }
    const __m256 norm = _mm256_set1_ps(1.0f / sqrtf((float)n));
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), norm));
}

/* acc[q] += w · x[q][col] for the pass's nb inputs. */
INLINE void fma_inputs(__m256 *acc, __m256 w, const float *const *x, int nb, int64_t col) {
    for (int q = 0; q < nb; q++) acc[q] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[q] + col), acc[q]);
}

/* Eight dense weights starting at element pointer p. */
INLINE __m256 dense8(pp_wformat fmt, const uint8_t *p) {
    if (fmt == PP_WF_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (fmt == PP_WF_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

typedef struct pass {
    const pp_weight *w;
    const float *x[INPUTS]; /* the pass's inputs, each [cols] */
    float *y[INPUTS];       /* their outputs, each [rows] */
    int64_t r;              /* first row */
} pass;

/* y = the accumulators' sums, plus the scalar tail's when there is one. */
INLINE void store_sums(const pass *p, __m256 acc[ROWS][INPUTS], float (*tail)[INPUTS], int rb, int nb) {
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) p->y[q][p->r + k] = cpu_hsum8(acc[k][q]) + (tail ? tail[k][q] : 0.0f);
}

/* Dense formats: rb rows × nb inputs over the whole row; a scalar loop takes cols % 8. */
INLINE void dense_pass(const pass *p, pp_wformat fmt, int rb, int nb) {
    const pp_weight *w = p->w;
    int size = fmt == PP_WF_F32 ? 4 : 2;
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = (const uint8_t *)w->data + (size_t)(w->elem0 + (p->r + k) * w->cols) * size;
    __m256 acc[ROWS][INPUTS];
    float tail[ROWS][INPUTS] = {{0}};
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= w->cols; c += 8)
        for (int k = 0; k < rb; k++) {
            cpu_fetch_ahead(row[k] + c * size);
            fma_inputs(acc[k], dense8(fmt, row[k] + c * size), p->x, nb, c);
        }
    for (; c < w->cols; c++)
        for (int k = 0; k < rb; k++) {
            float v;
            pp_weight_decode_span(w, p->r + k, c, 1, &v);
            for (int q = 0; q < nb; q++) tail[k][q] += v * p->x[q][c];
        }
    store_sums(p, acc, tail, rb, nb);
}

/* The decode state of one row within one group: the scaled table (NF2: t0; NF4: t0, t1) or
 * INT4's scale and offset (t0 = s, t1 = −8s). */
typedef struct group_tab {
    __m256 t0, t1;
} group_tab;

/* The group's state from its scale and the format's unscaled tables. */
INLINE group_tab make_tab(pp_wformat fmt, float s, const group_tab *base) {
    __m256 sv = _mm256_set1_ps(s);
    if (fmt == PP_WF_INT4) return (group_tab){sv, _mm256_set1_ps(-8.0f * s)};
    return (group_tab){_mm256_mul_ps(base->t0, sv), _mm256_mul_ps(base->t1, sv)};
}

/* Scales of groups [g, g + count): NF2 and INT4 store f16, converted here eight at a time;
 * NF4's nested absmax goes through the reference. */
INLINE void group_scales(const pp_weight *w, pp_wformat fmt, int64_t g, int64_t count, float *out) {
    if (fmt == PP_WF_NF4) {
        pp_weight_group_scales(w, g, count, out);
        return;
    }
    const uint16_t *h = (const uint16_t *)w->scales + g;
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < count; i++) out[i] = _cvtsh_ss(h[i]);
}

/* Eight weights of a 4-bit format from the 32-bit word at p. */
INLINE __m256 nibbles8(pp_wformat fmt, const uint8_t *p, const group_tab *t) {
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

/* Columns [c, c + gs) of one group for rb rows: NF2 16 weights per step, the others 8. */
INLINE void group_span(const pass *p, pp_wformat fmt, int rb, int nb, const uint8_t *const *row,
                       const group_tab *tab, int64_t c, int gs, __m256 acc[ROWS][INPUTS]) {
    if (fmt == PP_WF_NF2) {
        const __m256i lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        const __m256i hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
        for (int64_t k = c; k < c + gs; k += 16)
            for (int j = 0; j < rb; j++) {
                uint32_t u;
                memcpy(&u, row[j] + k / 4, 4);
                __m256i v = _mm256_set1_epi32((int)u);
                fma_inputs(acc[j], _mm256_permutevar8x32_ps(tab[j].t0, _mm256_srlv_epi32(v, lo)), p->x, nb, k);
                fma_inputs(acc[j], _mm256_permutevar8x32_ps(tab[j].t0, _mm256_srlv_epi32(v, hi)), p->x, nb, k + 8);
            }
        return;
    }
    for (int64_t k = c; k < c + gs; k += 8)
        for (int j = 0; j < rb; j++) fma_inputs(acc[j], nibbles8(fmt, row[j] + k / 2, &tab[j]), p->x, nb, k);
}

/* Quantized formats: the whole row, CHUNK columns' group scales at a time. */
INLINE void quant_pass(const pass *p, pp_wformat fmt, int rb, int nb, const group_tab *base) {
    const pp_weight *w = p->w;
    const int gs = w->group, per_byte = fmt == PP_WF_NF2 ? 4 : 2;
    int64_t chunk = gs >= CHUNK ? gs : CHUNK / gs * gs;
    const uint8_t *row[ROWS];
    int64_t g0[ROWS];
    for (int k = 0; k < rb; k++) {
        int64_t e = w->elem0 + (p->r + k) * w->cols;
        row[k] = (const uint8_t *)w->data + e / per_byte;
        g0[k] = e / gs;
    }
    __m256 acc[ROWS][INPUTS];
    float scales[ROWS][CHUNK / 8];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm256_setzero_ps();
    for (int64_t c = 0; c < w->cols; c += chunk) {
        int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
        for (int k = 0; k < rb; k++) group_scales(w, fmt, g0[k] + c / gs, len / gs, scales[k]);
        for (int64_t g = 0; g < len; g += gs) {
            group_tab tab[ROWS];
            for (int k = 0; k < rb; k++) {
                tab[k] = make_tab(fmt, scales[k][g / gs], base);
                for (int64_t b = 0; b < gs / per_byte; b += 64) cpu_fetch_ahead(row[k] + (c + g) / per_byte + b);
            }
            group_span(p, fmt, rb, nb, row, tab, c + g, gs, acc);
        }
    }
    store_sums(p, acc, NULL, rb, nb);
}

/* One pass, with the format, the row count and the input count made constants. */
INLINE void pass_fmt(const pass *p, pp_wformat fmt, int rb, int nb, const group_tab *base) {
    if (fmt <= PP_WF_BF16)
        dense_pass(p, fmt, rb, nb);
    else
        quant_pass(p, fmt, rb, nb, base);
}

/* The pass shapes, at most 8 accumulators: 4 rows × 1 or 2 inputs, 2 rows × 4 inputs (a
 * decoded vector then feeds four products), and single rows for a task's last rows. */
INLINE void pass_shape(const pass *p, pp_wformat fmt, int rb, int nb, const group_tab *base) {
    if (rb == 4 && nb == 1)
        pass_fmt(p, fmt, 4, 1, base);
    else if (rb == 4)
        pass_fmt(p, fmt, 4, 2, base);
    else if (rb == 2)
        pass_fmt(p, fmt, 2, 4, base);
    else if (nb == 4)
        pass_fmt(p, fmt, 1, 4, base);
    else if (nb == 2)
        pass_fmt(p, fmt, 1, 2, base);
    else
        pass_fmt(p, fmt, 1, 1, base);
}

CPU_AVX2 static void run_pass(const pass *p, int rb, int nb, const group_tab *base) {
    switch (p->w->fmt) {
    case PP_WF_F32: pass_shape(p, PP_WF_F32, rb, nb, base); break;
    case PP_WF_F16: pass_shape(p, PP_WF_F16, rb, nb, base); break;
    case PP_WF_BF16: pass_shape(p, PP_WF_BF16, rb, nb, base); break;
    case PP_WF_NF2: pass_shape(p, PP_WF_NF2, rb, nb, base); break;
    case PP_WF_INT4: pass_shape(p, PP_WF_INT4, rb, nb, base); break;
    case PP_WF_NF4: pass_shape(p, PP_WF_NF4, rb, nb, base); break;
    default: break; /* not taken: pp_cpu_gemv_avx2_handles refuses the rest */
    }
}

int pp_cpu_gemv_avx2_handles(const pp_weight *w) {
    switch (w->fmt) {
    case PP_WF_F32:
    case PP_WF_F16:
    case PP_WF_BF16: return 1;
    case PP_WF_NF2: return w->group % 16 == 0;
    case PP_WF_INT4:
    case PP_WF_NF4: return w->group % 8 == 0;
    case PP_WF_Q4K:
    case PP_WF_Q4_0:
    case PP_WF_Q8_0: return 1;                                      /* cpu_gemv_blocks.c */
    case PP_WF_INT8: return w->group % 8 == 0 && w->elem0 % 8 == 0; /* cpu_gemv_int8.c */
    default: break;
    }
    return 0;
}

CPU_AVX2 void pp_cpu_gemv_rows_avx2(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    if (pp_wformat_block_bytes(w->fmt)) {
        pp_cpu_gemv_block_rows_avx2(w, x, n, y, r0, r1);
        return;
    }
    if (w->fmt == PP_WF_INT8) {
        pp_cpu_gemv_int8_rows_avx2(w, x, n, y, r0, r1);
        return;
    }
    /* the unscaled tables: NF2's 4 centroids twice; NF4's 16 entries in two halves */
    float table[16] = {0};
    for (int i = 0; i < 16 && w->fmt == PP_WF_NF2; i++) table[i] = pp_quant_nf2_codebook[i % 4];
    for (int i = 0; i < 16 && w->fmt == PP_WF_NF4; i++) table[i] = quant_ldf32(w->quant_map, (size_t)i);
    const group_tab base = {_mm256_loadu_ps(table), _mm256_loadu_ps(table + 8)};
    for (int64_t r = r0; r < r1;) {
        int rb = r1 - r >= ROWS ? ROWS : 1;
        for (int i = 0; i < n;) {
            int nb = n - i >= INPUTS ? INPUTS : n - i >= 2 ? 2 : 1;
            pass p = {.w = w, .r = r};
            for (int q = 0; q < nb; q++) {
                p.x[q] = x + (int64_t)(i + q) * w->cols;
                p.y[q] = y + (int64_t)(i + q) * w->rows;
            }
            if (rb == ROWS && nb == INPUTS) { /* as two 2-row passes */
                run_pass(&p, 2, nb, &base);
                p.r += 2;
                run_pass(&p, 2, nb, &base);
            } else {
                run_pass(&p, rb, nb, &base);
            }
            i += nb;
        }
        r += rb;
    }
}

#endif
