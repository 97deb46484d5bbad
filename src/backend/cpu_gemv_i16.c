/* cpu_gemv_i16: integer dot products for ggml's block formats (Q4_K, Q4_0, Q8_0; io/quant.h) on
 * x86-64 CPUs with AVX2 (CPU_SIMD_AVX2_INT16; see cpu_simd.h).
 *
 * The float loops of cpu_gemv_blocks.c widen every code to a float (two conversions per 8
 * weights) and spend an FMA per 8 weights and input. Here the codes stay integers: Q4_K's are
 * multiplied by their sub-block's 6-bit scale in one vpmaddubsw per 16 of them, Q4_0's and
 * Q8_0's widened to 16-bit lanes, and vpmaddwd multiplies 16 of them by int16 activations into 8
 * int32 sums, as AVX-512's vpdpwssd does on twice the width (cpu_gemv_vnni.c). Activations are
 * rounded to 1/32767 of their block's largest |x| (at most 1.5e-5 of it per input), once per
 * product; the relative error of a product is of order 1e-5 (test_cpu_simd checks it).
 *
 * Against the float loops on a 2-core AVX2 Zen at 4096 x 14336 (tools/bench-vs-ggml.sh, per
 * product, batches 1/2/4/8): Q4_K 6.54/8.79/13.7/24.7 ms -> 2.86/4.35/5.70/13.1, Q4_0
 * 4.25/6.06/9.45/19.3 -> 2.41/3.17/6.58/12.7, Q8_0 4.34/6.11/8.26/17.2 -> 3.33/4.67/7.16/12.9. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>
#include <string.h>

#define I16_FN CPU_AVX2 static inline __attribute__((always_inline))
#define ROWS 4
#define INPUTS 4
#define Q4K_BLOCK QUANT_Q4_K_BLOCK
#define Q4K_SUBS 8 /* sub-blocks of 32 weights per block */
#define Q4K_SUB 32
#define Q4K_ACT_MAX 32767.0f /* and Q4_0's, Q8_0's */
#define B32 32               /* Q4_0 and Q8_0 weights per block */

static int is_b32(pp_wformat fmt) { return fmt == PP_WF_Q4_0 || fmt == PP_WF_Q8_0; }

static int i16_handles(const pp_weight *w) {
    if (w->fmt == PP_WF_Q4K) return w->cols % Q4K_BLOCK == 0 && w->elem0 % Q4K_BLOCK == 0;
    return is_b32(w->fmt) && w->cols % B32 == 0 && w->elem0 % B32 == 0;
}

/* A scale per block of inputs, and for Q4_K its sub-blocks' Σx after them. */
static void i16_sizes(const pp_weight *w, int n, size_t *q, size_t *scales) {
    *q = (size_t)n * (size_t)w->cols;
    *scales = w->fmt == PP_WF_Q4K ? *q / Q4K_BLOCK * (1 + Q4K_SUBS) : *q / B32;
}

/* The largest of m's lanes. */
I16_FN float hmax8(__m256 m) {
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4E));
    return _mm256_cvtss_f32(_mm256_max_ps(m, _mm256_permute_ps(m, 0xB1)));
}

/* The largest |x| of src[0..n), n a multiple of 8; a NaN is passed over, as fmaxf passes it over
 * (max_ps returns its second operand when the first is NaN). */
I16_FN float absmax(const float *src, int n) {
    __m256 m = _mm256_setzero_ps();
    for (int t = 0; t < n; t += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(src + t)), m);
    return hmax8(m);
}

/* v·inv within ±top, rounded to the nearest integer (ties to even, as lrintf in the default
 * mode). */
I16_FN __m256i round_lanes(__m256 v, __m256 inv, float top) {
    return _mm256_cvtps_epi32(
        _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, inv), _mm256_set1_ps(-top)), _mm256_set1_ps(top)));
}

/* Q4_K: each 256-input block rounded against its largest |x|, each 32-input sub-block split into
 * its even and its odd inputs (the order run_pass_q4k's products meet them: per 16-input half h,
 * input 16h + 2i + o goes to 16·o + 8h + i), and each sub-block's Σx in float. */
I16_FN void q4k_prepare(const float *x, int64_t blocks, cpu_int_x *out) {
    const __m256i evens_first = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    out->sums = out->scale + blocks;
    for (int64_t b = 0; b < blocks; b++) {
        const float *src = x + b * Q4K_BLOCK;
        int16_t *dst = out->q + b * Q4K_BLOCK;
        float top = absmax(src, Q4K_BLOCK);
        const __m256 inv = _mm256_set1_ps(top > 0 ? Q4K_ACT_MAX / top : 0);
        out->scale[b] = top / Q4K_ACT_MAX;
        for (int j = 0; j < Q4K_SUBS; j++) {
            __m256 sum = _mm256_setzero_ps();
            for (int h = 0; h < 2; h++) {
                const float *at = src + Q4K_SUB * j + 16 * h;
                __m256 v0 = _mm256_loadu_ps(at), v1 = _mm256_loadu_ps(at + 8);
                sum = _mm256_add_ps(sum, _mm256_add_ps(v0, v1));
                __m256i q0 = round_lanes(v0, inv, Q4K_ACT_MAX), q1 = round_lanes(v1, inv, Q4K_ACT_MAX);
                /* [evens of v0, evens of v1 | odds of v0, odds of v1] */
                __m256i eo = _mm256_packs_epi32(_mm256_permutevar8x32_epi32(q0, evens_first),
                                                _mm256_permutevar8x32_epi32(q1, evens_first));
                int16_t *d = dst + Q4K_SUB * j + 8 * h;
                _mm_storeu_si128((__m128i *)(void *)d, _mm256_castsi256_si128(eo));
                _mm_storeu_si128((__m128i *)(void *)(d + 16), _mm256_extracti128_si256(eo, 1));
            }
            out->sums[b * Q4K_SUBS + j] = cpu_hsum8(sum);
        }
    }
}

/* Q4_0, Q8_0: each 32-input block rounded against its largest |x|, in order. */
I16_FN void b32_prepare(const float *x, int64_t blocks, cpu_int_x *out) {
    for (int64_t b = 0; b < blocks; b++) {
        const float *src = x + b * B32;
        float top = absmax(src, B32);
        const __m256 inv = _mm256_set1_ps(top > 0 ? Q4K_ACT_MAX / top : 0);
        __m256i q[4];
        for (int t = 0; t < 4; t++) q[t] = round_lanes(_mm256_loadu_ps(src + 8 * t), inv, Q4K_ACT_MAX);
        /* packs works within 128-bit halves: 0-3 8-11 4-7 12-15, put back in order */
        for (int t = 0; t < 2; t++)
            _mm256_storeu_si256((__m256i *)(void *)(out->q + b * B32 + 16 * t),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2 * t], q[2 * t + 1]), 0xD8));
        out->scale[b] = top / Q4K_ACT_MAX;
    }
}

CPU_AVX2 static void i16_prepare(const pp_weight *w, const float *x, int n, cpu_int_x *out) {
    if (w->fmt == PP_WF_Q4K)
        q4k_prepare(x, (int64_t)n * (w->cols / Q4K_BLOCK), out);
    else
        b32_prepare(x, (int64_t)n * (w->cols / B32), out);
}

typedef struct pass {
    const pp_weight *w;
    const cpu_int_x *x;
    int64_t r; /* first row */
    int i;     /* first input */
} pass;

/* A Q4_K block's eight 6-bit scales (bytes 0-7 of the result) and mins (bytes 8-15) from its 12
 * header bytes: scales and mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; 4-7 take their low
 * 4 bits from the nibbles of bytes 8-11 (scales the low one) and their top 2 bits from the tops of
 * bytes 0-3 (scales) and 4-7 (mins), as quant_q4_k_scale_min reads them one at a time. */
static inline void q4k_scales_mins(const uint8_t *h, uint32_t out[4]) {
    uint32_t u[3];
    memcpy(u, h, sizeof u);
    out[0] = u[0] & 0x3f3f3f3fu;
    out[1] = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    out[2] = u[1] & 0x3f3f3f3fu;
    out[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
}

/* vpshufb controls that spread scale byte j over every 16-bit lane's low byte (the even codes'
 * products) or high byte (the odd codes'). */
static const struct {
    uint8_t even[Q4K_SUBS][32], odd[Q4K_SUBS][32];
} q4k_spread = {
#define SPREAD(e, o)                                                                                                   \
    { e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o, e, o }
    {SPREAD(0, 0x80), SPREAD(1, 0x80), SPREAD(2, 0x80), SPREAD(3, 0x80), SPREAD(4, 0x80), SPREAD(5, 0x80),
     SPREAD(6, 0x80), SPREAD(7, 0x80)},
    {SPREAD(0x80, 0), SPREAD(0x80, 1), SPREAD(0x80, 2), SPREAD(0x80, 3), SPREAD(0x80, 4), SPREAD(0x80, 5),
     SPREAD(0x80, 6), SPREAD(0x80, 7)},
#undef SPREAD
};

/* Q4_K: rb rows × nb inputs over whole rows. A weight is d·sc_j·q − dmin·m_j in sub-block j, so
 *   w·x = d·xs·Σ_j sc_j·Σ(q·x') − dmin·Σ_j m_j·Σx_j   (x' the int16 inputs, xs their scale).
 * A sub-block pair's 32 code bytes give its two sub-blocks' codes (low and high nibbles); vpmaddubsw
 * multiplies each by its scale, the even codes' and the odd codes' apart (one scale byte in each
 * lane's low or high byte), into 16-bit lanes (q·sc <= 945), which vpmaddwd meets with the inputs
 * in q4k_prepare's order. A lane adds 32 products of at most 945·32767 per block (1.0e9 < 2^31);
 * the mins' part joins the same float accumulator lane by lane. */
I16_FN void run_pass_q4k(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    (void)fmt;
    const pp_weight *w = p->w;
    const int64_t blocks = w->cols / Q4K_BLOCK;
    const __m256i low = _mm256_set1_epi8(15);
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++)
        row[k] = (const uint8_t *)w->data + (w->elem0 + (p->r + k) * w->cols) / Q4K_BLOCK * QUANT_Q4_K_BYTES;
    __m256 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        __m256i sum[ROWS][INPUTS], scales[ROWS];
        __m256 mins[ROWS];
        float d[ROWS];
        for (int k = 0; k < rb; k++) {
            const uint8_t *blk = row[k] + b * QUANT_Q4_K_BYTES;
            uint32_t sm[4];
            q4k_scales_mins(blk + 4, sm);
            uint64_t sc64, m64;
            memcpy(&sc64, sm, 8);
            memcpy(&m64, sm + 2, 8);
            scales[k] = _mm256_set1_epi64x((long long)sc64);
            d[k] = _cvtsh_ss(quant_ld16(blk, 0));
            mins[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64))),
                                    _mm256_set1_ps(_cvtsh_ss(quant_ld16(blk, 1))));
            for (int q = 0; q < nb; q++) sum[k][q] = _mm256_setzero_si256();
        }
        for (int pair = 0; pair < Q4K_SUBS / 2; pair++)
            for (int k = 0; k < rb; k++) {
                const uint8_t *qs = row[k] + b * QUANT_Q4_K_BYTES + 16 + 32 * pair;
                cpu_fetch_ahead(qs);
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)qs), codes[2];
                codes[0] = _mm256_and_si256(v, low), codes[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                __m256i prod[4]; /* sub-block 2·pair + s, even codes then odd */
                for (int s = 0; s < 2; s++) {
                    int j = 2 * pair + s;
                    prod[2 * s] = _mm256_maddubs_epi16(
                        codes[s], _mm256_shuffle_epi8(scales[k], _mm256_loadu_si256((const void *)q4k_spread.even[j])));
                    prod[2 * s + 1] = _mm256_maddubs_epi16(
                        codes[s], _mm256_shuffle_epi8(scales[k], _mm256_loadu_si256((const void *)q4k_spread.odd[j])));
                }
                for (int q = 0; q < nb; q++) {
                    const int16_t *xq = p->x->q + ((int64_t)(p->i + q) * blocks + b) * Q4K_BLOCK + 2 * Q4K_SUB * pair;
                    __m256i s = sum[k][q];
                    for (int t = 0; t < 4; t++)
                        s = _mm256_add_epi32(
                            s, _mm256_madd_epi16(prod[t], _mm256_loadu_si256((const void *)(xq + 16 * t))));
                    sum[k][q] = s;
                }
            }
        for (int q = 0; q < nb; q++) {
            int64_t xb = (int64_t)(p->i + q) * blocks + b;
            __m256 sx = _mm256_loadu_ps(p->x->sums + xb * Q4K_SUBS);
            for (int k = 0; k < rb; k++) {
                acc[k][q] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[k][q]), _mm256_set1_ps(d[k] * p->x->scale[xb]), acc[k][q]);
                acc[k][q] = _mm256_fnmadd_ps(mins[k], sx, acc[k][q]);
            }
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = cpu_hsum8(acc[k][q]);
}

/* Q4_0 (w = d·(q − 8), weights 0-15 in the low nibbles of the block's 16 bytes, 16-31 in the high
 * ones) and Q8_0 (w = d·q, 32 signed bytes): rb rows × nb inputs over whole rows. Each block's
 * codes widen to two vectors of 16-bit lanes in order, meet the inputs in vpmaddwd (a lane adds 4
 * products of at most 128·32767), and the block's sum is converted and scaled by d times the
 * inputs' block scale. */
I16_FN void run_pass_b32(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    const pp_weight *w = p->w;
    const int bytes = pp_wformat_block_bytes(fmt);
    const int64_t blocks = w->cols / B32;
    const __m256i low = _mm256_set1_epi16(15), eight = _mm256_set1_epi16(8);
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = (const uint8_t *)w->data + (w->elem0 + (p->r + k) * w->cols) / B32 * bytes;
    __m256 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        __m256i lo[ROWS], hi[ROWS];
        float d[ROWS];
        for (int k = 0; k < rb; k++) {
            const uint8_t *blk = row[k] + b * bytes;
            cpu_fetch_ahead(blk);
            d[k] = _cvtsh_ss(quant_ld16(blk, 0));
            if (fmt == PP_WF_Q4_0) {
                __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
                lo[k] = _mm256_sub_epi16(_mm256_and_si256(v, low), eight);
                hi[k] = _mm256_sub_epi16(_mm256_srli_epi16(v, 4), eight);
            } else {
                lo[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
                hi[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 18)));
            }
        }
        for (int q = 0; q < nb; q++) {
            int64_t xb = (int64_t)(p->i + q) * blocks + b;
            const int16_t *xq = p->x->q + xb * B32;
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)xq),
                    x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 16));
            for (int k = 0; k < rb; k++) {
                __m256i s = _mm256_add_epi32(_mm256_madd_epi16(lo[k], x0), _mm256_madd_epi16(hi[k], x1));
                acc[k][q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d[k] * p->x->scale[xb]), acc[k][q]);
            }
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = cpu_hsum8(acc[k][q]);
}

#define INT_FN CPU_AVX2
#include "backend/cpu_gemv_int_rows.h"

CPU_AVX2 static void i16_rows(const pp_weight *w, const cpu_int_x *x, int n, float *y, int64_t r0, int64_t r1) {
    pass p = {.w = w, .x = x};
    run_rows(&p, n, y, r0, r1);
}

const cpu_int_gemv pp_cpu_int_gemv_avx2 = {i16_handles, i16_sizes, i16_prepare, i16_rows};

#endif
