/* cpu_gemv_avx512: the dense products (F32, F16, BF16) on 512-bit vectors, for the CPUs of the
 * VNNI variant (AVX-512 F/BW/VL; see cpu_simd.h). cpu_gemv_avx2.c's loops run them on 256-bit
 * vectors otherwise.
 *
 * A step takes 32 columns as two vectors of 16, each with a sum of its own per (row, input), so
 * two multiply-adds of a (row, input) never wait on each other. Weights convert exactly to float
 * (BF16: shifted into a float's high half; F16: vcvtph2ps), so the products are the portable
 * loops' but for the order of the additions and FMA's single rounding.
 *
 * Files place tensors on 8-byte boundaries at best, and a 512-bit load that spans two cache lines
 * costs two: with the inputs on lines but the weights 16 bytes off, F32 at 2 inputs ran at
 * 0.84-0.90 of the AVX2 loops' speed. So a row starts with a masked step up to its first 64-byte
 * boundary (`head` columns, the same for every row when a row is a whole number of lines), and
 * the inputs are first copied to scratch where column `head` falls on a boundary too
 * (pp_cpu_dense512_prepare); the last columns take a masked step as well (zeros in, zero
 * products). Every (row, input) sums in the same order whatever the pass shape or the batch, so a
 * batched product is bit for bit the lone one (test_cpu_simd). */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define FN CPU_VNNI static inline __attribute__((always_inline))
#define ROWS 4   /* rows per pass */
#define INPUTS 2 /* inputs per pass */
#define HALF 16  /* columns per vector */
#define LINE 64  /* bytes per cache line */

typedef struct pass {
    const pp_weight *w;
    const float *x; /* the pass's first input; the next one `stride` floats on */
    float *y;       /* its outputs [rows]; the next input's follow */
    int64_t stride;
    int64_t r; /* first row */
} pass;

static int elem_size(pp_wformat fmt) { return fmt == PP_WF_F32 ? 4 : 2; }

static const uint8_t *row_start(const pp_weight *w, int64_t r) {
    return (const uint8_t *)w->data + (size_t)(w->elem0 + r * w->cols) * elem_size(w->fmt);
}

/* Columns before a row's first 64-byte boundary: its masked first step (0 when rows are not whole
 * lines, so that their boundaries differ). */
static int64_t head_cols(const pp_weight *w) {
    int size = elem_size(w->fmt);
    if (w->cols * size % LINE) return 0;
    int64_t head = (int64_t)((LINE - (uintptr_t)row_start(w, 0) % LINE) % LINE) / size;
    return head < w->cols ? head : w->cols;
}

/* The copied inputs: input i at xs + i·stride + lead, where column `head` is on a boundary. */
static int64_t input_stride(const pp_weight *w) { return (w->cols + HALF - 1) / HALF * HALF + HALF; }
static int64_t input_lead(const pp_weight *w) { return (HALF - head_cols(w) % HALF) % HALF; }

size_t pp_cpu_dense512_floats(const pp_weight *w, int n) { return (size_t)n * (size_t)input_stride(w); }

void pp_cpu_dense512_prepare(const pp_weight *w, const float *x, int n, float *xs) {
    int64_t stride = input_stride(w), lead = input_lead(w);
    for (int i = 0; i < n; i++)
        memcpy(xs + i * stride + lead, x + (int64_t)i * w->cols, sizeof(float) * (size_t)w->cols);
}

/* 16 weights from element pointer p as floats; lanes outside `live` are 0 and not read. */
FN __m512 dense16(pp_wformat fmt, const uint8_t *p, __mmask16 live, int whole) {
    if (fmt == PP_WF_F32) return whole ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(live, p);
    __m256i h = whole ? _mm256_loadu_si256((const __m256i *)(const void *)p) : _mm256_maskz_loadu_epi16(live, p);
    if (fmt == PP_WF_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

FN __m512 input16(const float *x, __mmask16 live, int whole) {
    return whole ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(live, x);
}

/* acc[k][q][h] += the two vectors of columns [c, c + 32) of rows k and inputs q (live: the lanes
 * of each half that are in the row). */
FN void step(const pass *p, pp_wformat fmt, int rb, int nb, const uint8_t *const *row, int64_t c, __mmask16 live0,
             __mmask16 live1, int whole, __m512 acc[ROWS][INPUTS][2]) {
    int size = elem_size(fmt);
#pragma GCC unroll 4
    for (int k = 0; k < rb; k++) {
        const uint8_t *at = row[k] + c * size;
        cpu_fetch_ahead(at);
        if (size == 4) cpu_fetch_ahead(at + LINE); /* F32: a step spans two lines */
        __m512 w0 = dense16(fmt, at, live0, whole), w1 = dense16(fmt, at + HALF * size, live1, whole);
#pragma GCC unroll 4
        for (int q = 0; q < nb; q++) {
            const float *x = p->x + q * p->stride + c;
            acc[k][q][0] = _mm512_fmadd_ps(w0, input16(x, live0, whole), acc[k][q][0]);
            acc[k][q][1] = _mm512_fmadd_ps(w1, input16(x + HALF, live1, whole), acc[k][q][1]);
        }
    }
}

/* The lanes of a vector's 16 that lie among the first `count` columns. */
static __mmask16 first_lanes(int64_t count) {
    return (__mmask16)(count >= HALF ? 0xFFFF : count > 0 ? (1u << count) - 1 : 0);
}

/* A masked step over columns [c, c + count), count < 32. */
FN void part_step(const pass *p, pp_wformat fmt, int rb, int nb, const uint8_t *const *row, int64_t c, int64_t count,
                  __m512 acc[ROWS][INPUTS][2]) {
    if (count > 0) step(p, fmt, rb, nb, row, c, first_lanes(count), first_lanes(count - HALF), 0, acc);
}

FN void dense_pass(const pass *p, pp_wformat fmt, int rb, int nb, int64_t head) {
    const pp_weight *w = p->w;
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = row_start(w, p->r + k);
    __m512 acc[ROWS][INPUTS][2];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q][0] = acc[k][q][1] = _mm512_setzero_ps();
    part_step(p, fmt, rb, nb, row, 0, head, acc);
    int64_t c = head;
    for (; c + 2 * HALF <= w->cols; c += 2 * HALF) step(p, fmt, rb, nb, row, c, 0xFFFF, 0xFFFF, 1, acc);
    part_step(p, fmt, rb, nb, row, c, w->cols - c, acc);
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++)
            p->y[q * w->rows + p->r + k] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][q][0], acc[k][q][1]));
}

/* The pass shapes: 4 rows (1 for a task's last rows) × 2 inputs (1 for the batch's last), with their
 * counts constants. */
FN void pass_shape(const pass *p, pp_wformat fmt, int rb, int nb, int64_t head) {
    if (rb == ROWS && nb == INPUTS)
        dense_pass(p, fmt, ROWS, INPUTS, head);
    else if (rb == ROWS)
        dense_pass(p, fmt, ROWS, 1, head);
    else if (nb == INPUTS)
        dense_pass(p, fmt, 1, INPUTS, head);
    else
        dense_pass(p, fmt, 1, 1, head);
}

CPU_VNNI static void run_pass(const pass *p, int rb, int nb, int64_t head) {
    if (p->w->fmt == PP_WF_F32)
        pass_shape(p, PP_WF_F32, rb, nb, head);
    else if (p->w->fmt == PP_WF_F16)
        pass_shape(p, PP_WF_F16, rb, nb, head);
    else
        pass_shape(p, PP_WF_BF16, rb, nb, head);
}

CPU_VNNI void pp_cpu_dense512_rows(const pp_weight *w, const float *xs, int n, float *y, int64_t r0, int64_t r1) {
    int64_t head = head_cols(w), stride = input_stride(w), lead = input_lead(w);
    for (int64_t r = r0; r < r1;) {
        int rb = r1 - r >= ROWS ? ROWS : 1;
        for (int i = 0; i < n; i += INPUTS) {
            int nb = n - i >= INPUTS ? INPUTS : 1;
            pass p = {.w = w, .x = xs + i * stride + lead, .y = y + (int64_t)i * w->rows, .stride = stride, .r = r};
            run_pass(&p, rb, nb, head);
        }
        r += rb;
    }
}

#endif
