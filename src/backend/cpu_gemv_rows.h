/* cpu_gemv_rows: the register-blocked float row loops of cpu_gemv.c's formats (dense F32, F16,
 * BF16; quantized NF2, INT4, NF4) and NF2's activation transform, written once for every SIMD
 * variant.
 *
 * Not a normal header: a SIMD file (cpu_gemv_avx2.c, cpu_gemv_neon.c) includes it once, after
 * cpu_vf8.h (eight floats in registers) and after defining the decoding, which differs between
 * instruction sets; the loops below are then compiled for that set. What the includer defines:
 *   fwht8(v)                 the transform's stages of distance 1, 2 and 4 within v, as pp_quant_fwht
 *                            computes them (a + b below, a − b above)
 *   group_tab                one row's decode state within one group (a scaled table, or INT4's
 *                            scale and offset)
 *   base_tab(table16)        the format's unscaled table as a group_tab (NF2: its 4 centroids
 *                            repeated to 16; NF4: the 16 map entries)
 *   make_tab(fmt, s, base)   the state of a group with scale s
 *   group_scales(w, fmt, g, count, out)  the scales of groups [g, g + count)
 *   dense8(fmt, p)           eight dense weights from element pointer p
 *   nibbles8(fmt, p, tab)    eight INT4 / NF4 weights from the 32-bit word at p
 *   nf2_16(tab, u, out)      sixteen NF2 weights from the 32-bit word u (code e at bits 2e)
 *
 * Every pass decodes a weight vector once for up to four inputs and loads an input vector once
 * for up to four rows: 4 rows × 1 or 2 inputs, or 2 rows × 4 inputs, at most 8 accumulators.
 * The decoded weights are the portable loops' value·scale products bit for bit (the tables hold
 * scaled values; INT4 is fma(q, s, −8s), exact before its one rounding); only the order of the
 * dot products' additions differs, and FMA's single rounding. */

#define ROWS 4     /* rows per pass */
#define INPUTS 4   /* inputs per pass */
#define CHUNK 1024 /* columns whose group scales are fetched at once */

/* pp_quant_fwht's normalised transform of v[0..n), n a power of two >= 8: the same additions in
 * the same stages, so the same values bit for bit. */
SIMD_FN static void simd_fwht(float *v, int n) {
    for (int i = 0; i < n; i += 8) vf8_store(v + i, fwht8(vf8_load(v + i)));
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                vf8 a = vf8_load(v + j), b = vf8_load(v + j + h);
                vf8_store(v + j, vf8_add(a, b));
                vf8_store(v + j + h, vf8_sub(a, b));
            }
    const vf8 norm = vf8_set1(1.0f / sqrtf((float)n));
    for (int i = 0; i < n; i += 8) vf8_store(v + i, vf8_mul(vf8_load(v + i), norm));
}

/* acc[q] += w · x[q][col] for the pass's nb inputs. */
INLINE void fma_inputs(vf8 *acc, vf8 w, const float *const *x, int nb, int64_t col) {
    for (int q = 0; q < nb; q++) acc[q] = vf8_fma(acc[q], w, vf8_load(x[q] + col));
}

typedef struct pass {
    const pp_weight *w;
    const float *x[INPUTS]; /* the pass's inputs, each [cols] */
    float *y[INPUTS];       /* their outputs, each [rows] */
    int64_t r;              /* first row */
} pass;

/* y = the accumulators' sums, plus the scalar tail's when there is one. */
INLINE void store_sums(const pass *p, vf8 acc[ROWS][INPUTS], float (*tail)[INPUTS], int rb, int nb) {
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) p->y[q][p->r + k] = vf8_hsum(acc[k][q]) + (tail ? tail[k][q] : 0.0f);
}

/* Dense formats: rb rows × nb inputs over the whole row; a scalar loop takes cols % 8. */
INLINE void dense_pass(const pass *p, pp_wformat fmt, int rb, int nb) {
    const pp_weight *w = p->w;
    int size = fmt == PP_WF_F32 ? 4 : 2;
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = (const uint8_t *)w->data + (size_t)(w->elem0 + (p->r + k) * w->cols) * size;
    vf8 acc[ROWS][INPUTS];
    float tail[ROWS][INPUTS] = {{0}};
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = vf8_zero();
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
            /* fmaf, not a*b + c: the files that include this contract a*b + c, and whether they do
             * differs between pass shapes, which would make a batched product differ from a lone one */
            for (int q = 0; q < nb; q++) tail[k][q] = fmaf(v, p->x[q][c], tail[k][q]);
        }
    store_sums(p, acc, tail, rb, nb);
}

/* Columns [c, c + gs) of one group for rb rows: NF2 16 weights per step, the others 8. */
INLINE void group_span(const pass *p, pp_wformat fmt, int rb, int nb, const uint8_t *const *row, const group_tab *tab,
                       int64_t c, int gs, vf8 acc[ROWS][INPUTS]) {
    if (fmt == PP_WF_NF2) {
        for (int64_t k = c; k < c + gs; k += 16)
            for (int j = 0; j < rb; j++) {
                uint32_t u;
                memcpy(&u, row[j] + k / 4, 4);
                vf8 wv[2];
                nf2_16(&tab[j], u, wv);
                fma_inputs(acc[j], wv[0], p->x, nb, k);
                fma_inputs(acc[j], wv[1], p->x, nb, k + 8);
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
    vf8 acc[ROWS][INPUTS];
    float scales[ROWS][CHUNK / 8];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = vf8_zero();
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

/* The pass shapes: 4 rows × 1 or 2 inputs, 2 rows × 4 inputs (a decoded vector then feeds four
 * products), and single rows for a task's last rows. */
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

SIMD_FN static void run_pass(const pass *p, int rb, int nb, const group_tab *base) {
    switch (p->w->fmt) {
    case PP_WF_F32: pass_shape(p, PP_WF_F32, rb, nb, base); break;
    case PP_WF_F16: pass_shape(p, PP_WF_F16, rb, nb, base); break;
    case PP_WF_BF16: pass_shape(p, PP_WF_BF16, rb, nb, base); break;
    case PP_WF_NF2: pass_shape(p, PP_WF_NF2, rb, nb, base); break;
    case PP_WF_INT4: pass_shape(p, PP_WF_INT4, rb, nb, base); break;
    case PP_WF_NF4: pass_shape(p, PP_WF_NF4, rb, nb, base); break;
    default: break; /* not taken: float_rows_handle refuses the rest */
    }
}

/* Whether these loops take the weight: its format, and a group size the vector steps divide. */
static int float_rows_handle(const pp_weight *w) {
    switch (w->fmt) {
    case PP_WF_F32:
    case PP_WF_F16:
    case PP_WF_BF16: return 1;
    case PP_WF_NF2: return w->group % 16 == 0;
    case PP_WF_INT4:
    case PP_WF_NF4: return w->group % 8 == 0;
    default: break;
    }
    return 0;
}

/* Rows [r0, r1) of y[n][rows] = x[n][cols]·wᵀ, x prepared as for cpu_gemv.c (NF2: rotated). */
SIMD_FN static void float_rows(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    /* the unscaled tables: NF2's 4 centroids repeated; NF4's 16 entries */
    float table[16] = {0};
    for (int i = 0; i < 16 && w->fmt == PP_WF_NF2; i++) table[i] = pp_quant_nf2_codebook[i % 4];
    for (int i = 0; i < 16 && w->fmt == PP_WF_NF4; i++) table[i] = quant_ldf32(w->quant_map, (size_t)i);
    const group_tab base = base_tab(table);
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
