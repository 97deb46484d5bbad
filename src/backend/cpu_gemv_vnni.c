/* cpu_gemv_vnni: integer dot products for the low-bit formats (NF2, INT4, NF4) on x86-64 CPUs
 * with AVX-512 BW and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later; see cpu_simd.h).
 *
 * The float loops of cpu_gemv_avx2.c spend one permute per 8 weights; here one 16-bit permute
 * (vpermw) decodes 32 weights and one vpdpwssd multiplies them into 16 int32 sums, so the
 * packed bytes rather than the instructions set the pace.
 *
 * Activations are prepared once per product (vnni_prepare): each run of 2W consecutive
 * inputs (W = weights per 16-bit word of codes: 8 for NF2, 4 for the 4-bit formats) gets its
 * own scale and is rounded to int16, and the values are stored in the order the decoded
 * weights come out of a 64-byte block of codes: shifting the block's 32 words right by the
 * bits of code k puts weight W·m + k in word m. So a block covers B = 32·W weights and each
 * int32 lane of vpdpwssd sums exactly one 2W-run, which therefore has one activation scale and
 * one weight group scale (groups are multiples of 2W). After each block the 16 lane sums are
 * converted and scaled in float. With several inputs (three, NF2 six) a wide pass decodes each
 * block of four rows once for all of them (run_pass_wide_codes; INT8: run_pass_wide_int8).
 *
 * Weight values as int16 (pp_cpu_int16_codes, which cpu_gemv_i16.c's AVX2 loops share), exact or nearly:
 *   NF2:  the centroids ±0.4528, ±1.5104 are exactly ±283 and ±944 times 0.0016.
 *   INT4: q − 8 for nibble q.
 *   NF4:  the file's 16-entry map rounded to int16 with its largest |value| at 16383 (an
 *         error of at most 3.1e-5 of a block's absmax per weight).
 * Activations are rounded to 1/32767 of their run's largest |x| (NF4: 1/16383), an error of at
 * most 1.5e-5 (3.1e-5) of it per input. The relative error of a product is of order 1e-5
 * (test_cpu_simd checks it); golden cases keep exact tokens.
 *
 * Overflow cannot happen: a lane adds 2·K products per block (K codes per word): NF2 16 of at
 * most 944·32767, INT4 8 of 8·32767, NF4 8 of 16383·16383 = 2,147,221,512 in all, which still
 * fits an int32.
 *
 * Q4_K (ggml's 4-bit k-quant, from GGUF files) has its own pass (run_pass_q4k):
 * a Q4_K weight is d·sc_j·q − dmin·m_j in sub-block j (32 weights) of a 256-weight block, so
 *   w·x = d·Σ_j sc_j·Σ(q·x) − dmin·Σ_j m_j·Σx.
 * The activations of each 256-block are rounded to int16 with one scale (1/32767 of its largest
 * |x|: an error of at most 1.5e-5 of it per input) and each sub-block's Σx is kept in float. A
 * row's 32 code bytes of a sub-block pair widen to 16-bit lanes (low nibbles: sub-block 2p, high
 * nibbles: 2p + 1), are multiplied by their 6-bit scale (q·sc <= 945) and meet the activations
 * in vpdpwssd, so a whole block accumulates in int32 before one conversion to float. Overflow
 * cannot happen: a lane adds 16 products of at most 945·32767 per block, 4.95e8 < 2^31.
 *
 * Q4_0 and Q8_0 (ggml's 32-weight blocks, one f16 scale d each) go two blocks A, B at a time
 * (run_pass_b32): their codes widen to two vectors of 16-bit lanes, [A 0-15 | B 0-15] and
 * [A 16-31 | B 16-31] (Q4_0: the low and the high nibbles of both blocks' 16 bytes; Q8_0: both
 * halves of each block's 32 bytes), the order pairs_prepare stores the activations in, one
 * scale per pair. So int32 lanes 0-7 of vpdpwssd sum block A and lanes 8-15 block B, and one
 * conversion per pair takes [dA ×8 | dB ×8] times the pair's activation scale. Q4_0's offset
 * (w = d·(q − 8)) costs nothing in the loop: each pair's lane sums start at −8·Σx of the lane's
 * activations, prepared with them. A lane adds 4 products of at most 128·32767. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define VNNI_FN CPU_VNNI static inline __attribute__((always_inline))
#define ROWS 4
#define INPUTS 4
#define LANES 16        /* int32 sums per block */
#define WORDS 32        /* 16-bit words of codes per block */
#define SCALE_SPAN 2048 /* columns whose group scales are fetched at once (before rounding up) */
#define Q4K_BLOCK QUANT_Q4_K_BLOCK
#define Q4K_SUBS 8           /* sub-blocks per block */
#define Q4K_ACT_MAX 32767.0f /* and INT8's, Q4_0's and Q8_0's */
#define INT8_BLOCK 128       /* INT8's activation block: groups are whole blocks (a row, or 128n) */
#define B32 32               /* Q4_0 and Q8_0 weights per block */
#define PAIR (2 * B32)       /* their activation block: a pair of blocks */
/* Q4_0 and Q8_0 rows are long (8 KB and 15 KB at 14336 columns): CPU_FETCH_AHEAD lands in the
 * next rows, which the pass is reading already; 2 KB ahead in the row measured best (Q8_0 at 2
 * threads 2.69 -> 2.14 ms at 4096 x 14336; 1, 3, 4 and 8 KB between the two) */
#define B32_FETCH_AHEAD 2048

/* Layout facts of a format: W weights per word, K = W codes decoded per word. */
static int weights_per_word(pp_wformat fmt) { return fmt == PP_WF_NF2 ? 8 : 4; }

static int64_t block_weights(pp_wformat fmt) { return (int64_t)WORDS * weights_per_word(fmt); }

/* ---- every format: an activation run rounded to int16 against its largest |x| ----
 * In vector registers, 16 inputs at a time: a product's preparation runs on one thread before
 * its rows are shared out, and as calls of fmaxf, fminf and lrintf it took about a sixth of a
 * 2-thread NF2 product of 4096 x 14336. The same operations on each value, so the same results. */

/* Lanes [0, n) of 16, n > 0. */
static __mmask16 first_lanes(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* The largest |x| of v[0..n); a NaN is passed over, as fmaxf passes it over. */
VNNI_FN float absmax(const float *v, int n) {
    __m512 m = _mm512_setzero_ps();
    for (int t = 0; t < n; t += 16) /* max_ps returns its second operand when the first is NaN */
        m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(n - t), v + t)), m);
    return _mm512_reduce_max_ps(m);
}

/* src[0..n)·inv, within ±top, rounded to the nearest integer (ties to even, as lrintf in the
 * default mode) into dst[0..n); returns their sum. inv = top / the run's largest |x|, or 0 for a
 * run of zeros. */
VNNI_FN int32_t round_run(const float *src, int n, float inv, float top, int16_t *dst) {
    const __m512 scale = _mm512_set1_ps(inv), hi = _mm512_set1_ps(top), lo = _mm512_set1_ps(-top);
    __m512i sum = _mm512_setzero_si512();
    for (int t = 0; t < n; t += 16) {
        const __mmask16 k = first_lanes(n - t);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + t), scale); /* absent lanes: 0 */
        const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
        sum = _mm512_add_epi32(sum, q);
        _mm256_mask_storeu_epi16(dst + t, k, _mm512_cvtepi32_epi16(q));
    }
    return _mm512_reduce_add_epi32(sum);
}

/* ---- Q4_K and INT8: activations in natural order, one scale per block of inputs ---- */

/* Inputs per activation block: Q4_K's block, or for INT8 a block within every weight group. */
static int64_t act_block(const pp_weight *w) { return w->fmt == PP_WF_Q4K ? Q4K_BLOCK : INT8_BLOCK; }

static void blocks_sizes(const pp_weight *w, int n, size_t *q, size_t *scales) {
    int64_t B = act_block(w);
    size_t blocks = (size_t)n * (size_t)(w->cols / B);
    *q = blocks * (size_t)B;
    /* Q4_K: then its sub-blocks' Σx; INT8 with zero points: then each block's Σ of its rounded inputs */
    *scales = blocks * (w->fmt == PP_WF_Q4K ? 1 + Q4K_SUBS : w->zeros ? 2 : 1);
}

CPU_VNNI static void blocks_prepare(const pp_weight *w, const float *x, int n, cpu_int_x *out) {
    int64_t B = act_block(w), blocks = (int64_t)n * (w->cols / B);
    float *sums = out->sums = w->fmt == PP_WF_Q4K || w->zeros ? out->scale + blocks : NULL;
    for (int64_t b = 0; b < blocks; b++) {
        const float *src = x + b * B;
        float m = absmax(src, (int)B), inv = m > 0 ? Q4K_ACT_MAX / m : 0;
        /* |Σ| <= 128·32767: exact as a float */
        int32_t rounded = round_run(src, (int)B, inv, Q4K_ACT_MAX, out->q + b * B);
        out->scale[b] = m / Q4K_ACT_MAX;
        if (w->fmt == PP_WF_INT8 && sums) sums[b] = (float)rounded;
        for (int j = 0; w->fmt == PP_WF_Q4K && j < Q4K_SUBS; j++) {
            float s = 0;
            for (int t = 0; t < B / Q4K_SUBS; t++) s += src[j * (B / Q4K_SUBS) + t];
            sums[b * Q4K_SUBS + j] = s;
        }
    }
}

/* ---- Q4_0 and Q8_0: activations per pair of blocks, halves interleaved ---- */

static int is_b32(pp_wformat fmt) { return fmt == PP_WF_Q4_0 || fmt == PP_WF_Q8_0; }

/* Floats of the scale buffer per pair: its scale, and for Q4_0 the 16 int32 lane offsets. */
static size_t pair_floats(pp_wformat fmt) { return fmt == PP_WF_Q4_0 ? 1 + LANES : 1; }

static void pairs_sizes(const pp_weight *w, int n, size_t *q, size_t *scales) {
    size_t pairs = (size_t)n * (size_t)(w->cols / PAIR);
    *q = pairs * PAIR;
    *scales = pairs * pair_floats(w->fmt);
}

/* Input c of a pair (block c / 32, weight c % 32) goes where run_pass_b32's code vectors put its
 * weight: vector (c % 32) / 16, lane half c / 32, word c % 16. */
static int pair_slot(int c) { return (c % B32) / 16 * B32 + c / B32 * 16 + c % 16; }

CPU_VNNI static void pairs_prepare(const pp_weight *w, const float *x, int n, cpu_int_x *out) {
    int64_t pairs = (int64_t)n * (w->cols / PAIR);
    out->bias = w->fmt == PP_WF_Q4_0 ? (int32_t *)(void *)(out->scale + pairs) : NULL;
    for (int64_t b = 0; b < pairs; b++) {
        const float *src = x + b * PAIR;
        int16_t *dst = out->q + b * PAIR;
        float m = absmax(src, PAIR), inv = m > 0 ? Q4K_ACT_MAX / m : 0;
        int16_t q[PAIR];
        round_run(src, PAIR, inv, Q4K_ACT_MAX, q);
        for (int t = 0; t < PAIR; t++) dst[pair_slot(t)] = q[t];
        out->scale[b] = m / Q4K_ACT_MAX;
        for (int l = 0; out->bias && l < LANES; l++) /* lane l multiplies words 2l, 2l+1 of both vectors */
            out->bias[b * LANES + l] = -8 * (dst[2 * l] + dst[2 * l + 1] + dst[B32 + 2 * l] + dst[B32 + 2 * l + 1]);
    }
}

/* ---- NF2, INT4, NF4 ---- */

/* A row may end in a half block (16 words): its codes are loaded masked and its activations
 * are zeros, so the absent half adds nothing. Rows and groups start on run boundaries, and a
 * block lies within one group or holds whole groups. */

static int vnni_handles(const pp_weight *w) {
    if (w->fmt == PP_WF_Q4K) return w->cols % Q4K_BLOCK == 0 && w->elem0 % Q4K_BLOCK == 0;
    if (w->fmt == PP_WF_INT8) return w->group % INT8_BLOCK == 0 && w->elem0 % INT8_BLOCK == 0;
    if (is_b32(w->fmt)) return w->cols % PAIR == 0 && w->elem0 % PAIR == 0;
    if (w->fmt != PP_WF_NF2 && w->fmt != PP_WF_INT4 && w->fmt != PP_WF_NF4) return 0;
    int64_t b = block_weights(w->fmt), run = 2 * weights_per_word(w->fmt), g = w->group;
    if (g <= 0 || g % run || (b % g && g % b)) return 0;
    return w->cols % g == 0 && w->cols % (b / 2) == 0 && w->elem0 % g == 0;
}

/* Columns rounded up to whole blocks: the stride of the prepared activations. */
static int64_t padded_cols(const pp_weight *w) {
    int64_t b = block_weights(w->fmt);
    return (w->cols + b - 1) / b * b;
}

static void vnni_sizes(const pp_weight *w, int n, size_t *q, size_t *runs) {
    if (w->fmt == PP_WF_Q4K || w->fmt == PP_WF_INT8) {
        blocks_sizes(w, n, q, runs);
        return;
    }
    if (is_b32(w->fmt)) {
        pairs_sizes(w, n, q, runs);
        return;
    }
    *q = (size_t)n * (size_t)padded_cols(w);
    *runs = *q / (size_t)(2 * weights_per_word(w->fmt));
}

CPU_VNNI static void vnni_prepare(const pp_weight *w, const float *x, int n, cpu_int_x *out) {
    if (w->fmt == PP_WF_Q4K || w->fmt == PP_WF_INT8) {
        blocks_prepare(w, x, n, out);
        return;
    }
    if (is_b32(w->fmt)) {
        pairs_prepare(w, x, n, out);
        return;
    }
    int W = weights_per_word(w->fmt), run = 2 * W;
    int64_t B = block_weights(w->fmt), cols = padded_cols(w), runs = cols / run;
    int16_t values[16];
    float top, unit;
    pp_cpu_int16_codes(w, values, &unit, &top);
    size_t q_elems, n_runs;
    vnni_sizes(w, n, &q_elems, &n_runs);
    memset(out->q, 0, q_elems * sizeof *out->q); /* a half block's absent half */
    memset(out->scale, 0, n_runs * sizeof *out->scale);
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < w->cols / run; r++) {
            const float *src = x + (int64_t)i * w->cols + r * run;
            float m = absmax(src, run), inv = m > 0 ? top / m : 0;
            int16_t q[16]; /* a run: 2W <= 16 */
            round_run(src, run, inv, top, q);
            int64_t block = r * run / B * B, lane = r % LANES;
            int16_t *dst = out->q + (int64_t)i * cols + block;
            /* weight W·word + k of the block, word = 2·lane + t / W, k = t % W */
            for (int t = 0; t < run; t++) dst[(t % W) * WORDS + 2 * lane + t / W] = q[t];
            out->scale[(size_t)i * (size_t)runs + (size_t)r] = m > 0 ? m / top * unit : 0;
        }
}

typedef struct pass {
    const pp_weight *w;
    const cpu_int_x *x;
    int64_t r; /* first row */
    int i;     /* first input */
    __m512i table;
    __m512i lane_group;   /* block-relative group of each lane's run */
    __m512i shift_ctl[8]; /* shift_control of each code */
} pass;

/* The 32-entry vpermw table: the format's int16 values, repeated so that index bits above the
 * code (the next codes, left there by the shift) do not matter. */
CPU_VNNI static __m512i value_table(const pp_weight *w) {
    int16_t values[16], t[WORDS];
    float unit, top;
    pp_cpu_int16_codes(w, values, &unit, &top);
    for (int i = 0; i < WORDS; i++) t[i] = values[i & 15];
    return _mm512_loadu_si512(t);
}

/* Bits to shift a word right so that its code k is the low bits. bitsandbytes NF4 puts the
 * high nibble of each byte first. */
static int code_shift(pp_wformat fmt, int k) {
    static const int nf4_shift[4] = {4, 0, 12, 8};
    return fmt == PP_WF_NF2 ? 2 * k : fmt == PP_WF_INT4 ? 4 * k : nf4_shift[k];
}

/* vpmultishiftqb controls that move code k of every word into the word's low bits (each byte
 * takes the 8 bits of its quadword that start at the word's offset plus the shift). */
CPU_VNNI static __m512i shift_control(pp_wformat fmt, int k) {
    uint8_t c[64];
    for (int b = 0; b < 64; b++) c[b] = (uint8_t)(16 * (b % 8 / 2) + code_shift(fmt, k));
    return _mm512_loadu_si512(c);
}

/* Code k of every word of a block as int16 values: the word shifted so that the code is its
 * low bits, looked up. The shifts alternate between the two vector ports: vpsrlw shares port 0
 * with vpdpwssd, vpmultishiftqb runs beside vpermw on port 5. */
VNNI_FN __m512i decode(pp_wformat fmt, __m512i codes, int k, const pass *p) {
    int shift = code_shift(fmt, k);
    __m512i idx = !shift  ? codes
                  : k % 2 ? _mm512_multishift_epi64_epi8(p->shift_ctl[k], codes)
                          : _mm512_srli_epi16(codes, (unsigned)shift);
    return _mm512_permutexvar_epi16(idx, p->table);
}

/* Group scales of [c, c + len) columns of rb rows, as f32, then LANES zeros (read by a last half
 * block, whose products are zeros: the scales must be finite). */
VNNI_FN void row_scales(const pass *p, int rb, int64_t c, int64_t len, float (*sc)[SCALE_SPAN / 8 + LANES]) {
    const pp_weight *w = p->w;
    for (int k = 0; k < rb; k++) {
        int64_t g = (w->elem0 + (p->r + k) * w->cols + c) / w->group;
        if (w->fmt == PP_WF_NF4) {
            pp_weight_group_scales(w, g, len / w->group, sc[k]);
            continue;
        }
        const uint16_t *h = (const uint16_t *)w->scales + g;
        int64_t j = 0, count = len / w->group;
        for (; j + 16 <= count; j += 16)
            _mm512_storeu_ps(sc[k] + j, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + j))));
        for (; j < count; j++) sc[k][j] = _cvtsh_ss(h[j]);
    }
    for (int k = 0; k < rb; k++) _mm512_storeu_ps(sc[k] + len / w->group, _mm512_setzero_ps());
}

/* The codes of the pass's rows p->r .. p->r + rb - 1; returns the columns whose group scales a
 * pass stages at once: whole blocks and whole groups, SCALE_SPAN or a little more. */
VNNI_FN int64_t start_rows(const pass *p, pp_wformat fmt, int rb, const uint8_t **row) {
    const pp_weight *w = p->w;
    const int64_t B = block_weights(fmt), span = w->group > B ? w->group : B;
    for (int k = 0; k < rb; k++)
        row[k] = (const uint8_t *)w->data + (w->elem0 + (p->r + k) * w->cols) / (fmt == PP_WF_NF2 ? 4 : 2);
    return (SCALE_SPAN + span - 1) / span * span;
}

/* The block of codes at column b of a row: a plain load, and a masked one only for a row's last
 * half block (masked loads throughout measured 5 % slower for one and two inputs on Zen 5). */
VNNI_FN __m512i block_codes(const pp_weight *w, pp_wformat fmt, const uint8_t *row, int64_t b) {
    const uint8_t *at = row + b / (fmt == PP_WF_NF2 ? 4 : 2);
    cpu_fetch_ahead(at);
    return b + block_weights(fmt) <= w->cols ? _mm512_loadu_si512(at) : _mm512_maskz_loadu_epi16(0xffffu, at);
}

/* rb rows × nb inputs over whole rows. */
VNNI_FN void run_pass(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    const pp_weight *w = p->w;
    int W = weights_per_word(fmt);
    int64_t B = (int64_t)WORDS * W, cols = padded_cols(w), runs = cols / (2 * W);
    const uint8_t *row[ROWS];
    const int64_t chunk = start_rows(p, fmt, rb, row);
    __m512 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm512_setzero_ps();
    float sc[ROWS][SCALE_SPAN / 8 + LANES];
    for (int64_t c = 0; c < w->cols; c += chunk) {
        int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
        row_scales(p, rb, c, len, sc);
        for (int64_t b = c; b < c + len; b += B) {
            __m512i sum[ROWS][INPUTS], codes[ROWS];
            int64_t run0 = b / (2 * W);
            for (int k = 0; k < rb; k++)
                for (int q = 0; q < nb; q++) sum[k][q] = _mm512_setzero_si512();
            for (int k = 0; k < rb; k++) codes[k] = block_codes(w, fmt, row[k], b);
            for (int t = 0; t < W; t++)
                for (int k = 0; k < rb; k++) {
                    __m512i v = decode(fmt, codes[k], t, p);
                    for (int q = 0; q < nb; q++) {
                        const int16_t *xq = p->x->q + (int64_t)(p->i + q) * cols + b + t * WORDS;
                        sum[k][q] = _mm512_dpwssd_epi32(sum[k][q], v, _mm512_loadu_si512(xq));
                    }
                }
            int64_t g0 = (b - c) / w->group;
            for (int k = 0; k < rb; k++) {
                __m512 ws = _mm512_permutexvar_ps(p->lane_group, _mm512_loadu_ps(sc[k] + g0));
                for (int q = 0; q < nb; q++) {
                    __m512 xs = _mm512_loadu_ps(p->x->scale + (size_t)(p->i + q) * runs + run0);
                    acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k][q]), _mm512_mul_ps(ws, xs), acc[k][q]);
                }
            }
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]);
}

/* ---- several inputs: the wide passes (run_pass_wide_codes, run_pass_wide_int8) ---- */

#define WIDE_MIN(fmt) ((fmt) == PP_WF_NF2 ? 6 : 3) /* measured: see run_pass_wide_codes */
#define WIDE_INPUTS 16
/* The 4 rows' integer sums of a decoded block dec (W vectors a row) with one input's W activation
 * vectors xv. Each row sums its even and its odd steps in two chains: a vpdpwssd waits on the one
 * before it in its chain, and one chain per row left the wide pass slower than run_pass at 4 and
 * 8 NF2 inputs. Integer sums, so the same as in one chain. */
VNNI_FN void wide_sums(int W, __m512i (*dec)[8], const __m512i *xv, __m512i *sum) {
    __m512i part[2][ROWS];
    for (int k = 0; k < ROWS; k++) part[0][k] = part[1][k] = _mm512_setzero_si512();
    for (int t = 0; t < W; t++)
        for (int k = 0; k < ROWS; k++) part[t % 2][k] = _mm512_dpwssd_epi32(part[t % 2][k], dec[k][t], xv[t]);
    for (int k = 0; k < ROWS; k++) sum[k] = _mm512_add_epi32(part[0][k], part[1][k]);
}

/* A wide pass's nb inputs against its 4 rows' decoded block dec, whose group scales are ws: one
 * input at a time holds its W activation vectors (xq, then stride on) in registers while the
 * rows' decoded vectors come from memory. */
VNNI_FN void wide_inputs(int W, int nb, __m512i (*dec)[8], const __m512 *ws, const int16_t *xq, int64_t stride,
                         const float *xs, int64_t scale_stride, __m512 (*acc)[WIDE_INPUTS]) {
    for (int q = 0; q < nb; q++, xq += stride, xs += scale_stride) {
        __m512i xv[8], sum[ROWS];
        for (int t = 0; t < W; t++) xv[t] = _mm512_loadu_si512(xq + t * WORDS);
        wide_sums(W, dec, xv, sum);
        const __m512 scale = _mm512_loadu_ps(xs);
        for (int k = 0; k < ROWS; k++)
            acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k]), _mm512_mul_ps(ws[k], scale), acc[k][q]);
    }
}

/* WIDE_MIN or more inputs of NF2, INT4 or NF4: 4 rows × nb (<= WIDE_INPUTS) inputs over whole
 * rows, as cpu_gemv_i16.c's run_pass_wide: each block of the 4 rows is decoded once into dec,
 * and every input meets it (wide_inputs). run_pass decodes a block again for each pass of at
 * most 4 (row, input) pairs: at 8 inputs NF2 ran at 1.3 times its one-input rate. Every (row,
 * input) gets the same integer block sums and the same float steps in the same order as in
 * run_pass, so the result is the same bit for bit. 2-core Zen 5, 4096 x 14336 from memory,
 * old time over new: NF2 0.95, 0.98, 1.02, 1.09 and 1.19 at 3, 4, 5, 6 and 8 inputs, INT4 1.07
 * at 3 to 1.32 at 8, NF4 1.10 to 1.45; in cache at 32 inputs 1.33, 1.22 and 1.46. So NF2, whose
 * pass stores 8 decoded vectors a row per block (a shift and a vpermw each to make), takes it from
 * 6 inputs. */
VNNI_FN void run_pass_wide_codes(const pass *p, pp_wformat fmt, int nb, float *y) {
    const pp_weight *w = p->w;
    const int W = weights_per_word(fmt);
    const int64_t B = (int64_t)WORDS * W, cols = padded_cols(w), runs = cols / (2 * W);
    const uint8_t *row[ROWS];
    const int64_t chunk = start_rows(p, fmt, ROWS, row);
    __m512 acc[ROWS][WIDE_INPUTS];
    memset(acc, 0, sizeof acc);
    __m512i dec[ROWS][8]; /* a block's codes 0..W-1 of each row */
    float sc[ROWS][SCALE_SPAN / 8 + LANES];
    for (int64_t c = 0; c < w->cols; c += chunk) {
        int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
        row_scales(p, ROWS, c, len, sc);
        for (int64_t b = c; b < c + len; b += B) {
            const int64_t g0 = (b - c) / w->group;
            __m512 ws[ROWS];
            for (int k = 0; k < ROWS; k++) {
                const __m512i codes = block_codes(w, fmt, row[k], b);
                for (int t = 0; t < W; t++) dec[k][t] = decode(fmt, codes, t, p);
                ws[k] = _mm512_permutexvar_ps(p->lane_group, _mm512_loadu_ps(sc[k] + g0));
            }
            wide_inputs(W, nb, dec, ws, p->x->q + (int64_t)p->i * cols + b, cols,
                        p->x->scale + (int64_t)p->i * runs + b / (2 * W), runs, acc);
        }
    }
    for (int k = 0; k < ROWS; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]);
}

/* A Q4_K block's header for the four row slots of a pass at once (a pass of fewer rows repeats
 * its last row), unpacked a vector op per step for all four: one row at a time in scalar code it
 * took a quarter of a product. Per row the header is the f16 d and dmin, then 12 bytes packing
 * eight 6-bit scales and mins: scales and mins 0..3 are the low 6 bits of bytes 0..3 and 4..7;
 * 4..7 take their low 4 bits from the nibbles of bytes 8..11 and their top 2 bits from the tops
 * of bytes 0..3 (scales) and 4..7 (mins), the layout quant_q4_k_scale_min reads one at a time. */
typedef struct q4k_header {
    int32_t sc2[ROWS][Q4K_SUBS]; /* each scale in both 16-bit halves: the products' broadcast operand */
    float d[2 * ROWS];           /* d, dmin of each row */
    __m512 min_dmin[ROWS / 2];   /* m_j·dmin of rows 2t (lanes 0-7) and 2t + 1 (lanes 8-15) */
} q4k_header;

/* Header byte positions (d and dmin are bytes 0..3) in each 16-byte lane, -1 for a zero: the
 * low bits of [sc0..sc7, m0..m7] (the high mins' bits are the high nibble: shifted by 4), and
 * where the top 2 bits of sc4..sc7 and m4..m7 are. */
static const int8_t q4k_low_at[16] = {4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15};
static const int8_t q4k_top_at[16] = {-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11};
static const int8_t q4k_low_bits[16] = {63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15};

VNNI_FN __m512i each_lane(const int8_t bytes[16]) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)bytes));
}

/* vpermb indices taking row pair t's (rows 2t, 2t + 1) unpacked byte j (of [sc0..7, m0..7]) into
 * the low byte of dword i = 8·row + j, offset by `at` (0: scales, 8: mins). */
VNNI_FN __m512i pair_dwords(int t, int at) {
    uint8_t idx[64];
    for (int b = 0; b < 64; b++) idx[b] = (uint8_t)(32 * t + 16 * (b / 32) + at + b / 4 % 8);
    return _mm512_loadu_si512(idx);
}

VNNI_FN void q4k_unpack(const uint8_t *const blk[ROWS], q4k_header *h) {
    __m128i header[ROWS];
    for (int k = 0; k < ROWS; k++) header[k] = _mm_loadu_si128((const __m128i *)(const void *)blk[k]);
    __m512i z = _mm512_inserti32x4(_mm512_castsi128_si512(header[0]), header[1], 1);
    z = _mm512_inserti32x4(_mm512_inserti32x4(z, header[2], 2), header[3], 3);
    /* multishift controls: each byte its own 8 bits, the high mins' 4 bits up (low), and bits 6-7
     * moved to 4-5 (top) */
    const __m512i low_shift = _mm512_set4_epi64(0x3c342c2418100800ll, 0x3830282018100800ll, 0x3c342c2418100800ll,
                                                0x3830282018100800ll),
                  top_shift = _mm512_set1_epi64(0x3a322a221a120a02ll);
    __m512i low = _mm512_multishift_epi64_epi8(low_shift, _mm512_shuffle_epi8(z, each_lane(q4k_low_at)));
    __m512i top = _mm512_multishift_epi64_epi8(top_shift, _mm512_shuffle_epi8(z, each_lane(q4k_top_at)));
    /* (low & low_bits) | (top & 0x30) */
    __m512i unpacked =
        _mm512_ternarylogic_epi32(low, each_lane(q4k_low_bits), _mm512_and_si512(top, _mm512_set1_epi8(0x30)), 0xEA);
    const __mmask64 low_bytes = 0x1111111111111111ull, both_halves = 0x5555555555555555ull;
    for (int t = 0; t < ROWS / 2; t++)
        _mm512_storeu_si512(h->sc2[2 * t], _mm512_maskz_permutexvar_epi8(both_halves, pair_dwords(t, 0), unpacked));
    const __m512i d_words = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25 << 16 | 24, 17 << 16 | 16,
                                             9 << 16 | 8, 1 << 16 | 0); /* words 0, 1 of each lane */
    __m256 d = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(d_words, z)));
    _mm256_storeu_ps(h->d, d);
    for (int t = 0; t < ROWS / 2; t++) {
        __m512 mins = _mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(low_bytes, pair_dwords(t, 8), unpacked));
        __m512i dmin_at =
            _mm512_set_epi32(4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3,
                             4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1);
        h->min_dmin[t] = _mm512_mul_ps(mins, _mm512_permutexvar_ps(dmin_at, _mm512_castps256_ps512(d)));
    }
}

/* rb rows × nb inputs over whole rows. */
VNNI_FN void run_pass_q4k(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    (void)fmt;
    const pp_weight *w = p->w;
    const int64_t nblk = w->cols / Q4K_BLOCK;
    const uint8_t *row[ROWS];
    for (int k = 0; k < ROWS; k++) /* the absent rows repeat the last one */
        row[k] = (const uint8_t *)w->data +
                 (w->elem0 + (p->r + (k < rb ? k : rb - 1)) * w->cols) / Q4K_BLOCK * QUANT_Q4_K_BYTES;
    const float *sums = p->x->sums;
    __m512 acc[ROWS][INPUTS], macc[ROWS / 2][INPUTS]; /* macc: the mins' part, rows 2t and 2t + 1 */
    for (int q = 0; q < nb; q++) {
        for (int k = 0; k < rb; k++) acc[k][q] = _mm512_setzero_ps();
        for (int t = 0; t < (rb + 1) / 2; t++) macc[t][q] = _mm512_setzero_ps();
    }
    const __m512i low = _mm512_set1_epi16(15);
    /* vpmultishiftqb controls giving each 16-bit lane (a code byte b) b >> 4: its low byte takes
     * the lane's bits 4..11, its high byte the lane's zero high byte; port 5 rather than the
     * shift's port 0, which the products keep busy */
    const __m512i high_nibble = _mm512_set1_epi64(0x3834282418140804ll);
    for (int64_t b = 0; b < nblk; b++) {
        __m512i sum[ROWS][INPUTS];
        q4k_header h;
        const uint8_t *blk[ROWS];
        for (int k = 0; k < ROWS; k++) blk[k] = row[k] + b * QUANT_Q4_K_BYTES;
        q4k_unpack(blk, &h);
        /* the scales are read back as 32-bit broadcasts from memory, loads only (from registers
         * each took two shuffles) */
        __asm__("" : "+m"(h.sc2));
        for (int k = 0; k < rb; k++)
            for (int q = 0; q < nb; q++) sum[k][q] = _mm512_setzero_si512();
        for (int pair = 0; pair < Q4K_SUBS / 2; pair++)
            for (int k = 0; k < rb; k++) {
                const uint8_t *qs = blk[k] + 16 + 32 * pair;
                cpu_fetch_ahead(qs);
                /* the codes times their sub-block's scale (q·sc <= 945: u8 × s8 in vpmaddubsw, its
                 * other byte pair 0 × 0) */
                __m512i codes = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)qs));
                __m512i lo = _mm512_maddubs_epi16(_mm512_and_si512(codes, low), _mm512_set1_epi32(h.sc2[k][2 * pair]));
                __m512i hi = _mm512_maddubs_epi16(_mm512_multishift_epi64_epi8(high_nibble, codes),
                                                  _mm512_set1_epi32(h.sc2[k][2 * pair + 1]));
                for (int q = 0; q < nb; q++) {
                    const int16_t *xq = p->x->q + ((int64_t)(p->i + q) * nblk + b) * Q4K_BLOCK + 64 * pair;
                    sum[k][q] = _mm512_dpwssd_epi32(sum[k][q], lo, _mm512_loadu_si512(xq));
                    sum[k][q] = _mm512_dpwssd_epi32(sum[k][q], hi, _mm512_loadu_si512(xq + 32));
                }
            }
        for (int q = 0; q < nb; q++) {
            int64_t xb = (int64_t)(p->i + q) * nblk + b;
            for (int k = 0; k < rb; k++)
                acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k][q]), _mm512_set1_ps(h.d[2 * k] * p->x->scale[xb]),
                                            acc[k][q]);
            __m512 sub_sums = _mm512_castpd_ps(
                _mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(const void *)(sums + xb * Q4K_SUBS))));
            for (int t = 0; t < (rb + 1) / 2; t++) macc[t][q] = _mm512_fmadd_ps(h.min_dmin[t], sub_sums, macc[t][q]);
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) {
            __m512 m = macc[k / 2][q];
            __m256 half =
                k % 2 ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)) : _mm512_castps512_ps256(m);
            y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]) - cpu_hsum8(half);
        }
}

/* Row k of an INT8 pass. */
VNNI_FN const int8_t *int8_row(const pass *p, int k) {
    return (const int8_t *)p->w->data + p->w->elem0 + (p->r + k) * p->w->cols;
}

/* Row k's group scale and zero point at INT8 block b, read where the block starts a group. */
VNNI_FN void int8_group(const pass *p, int k, int64_t b, float *ws, float *wz) {
    const pp_weight *w = p->w;
    const int64_t e = w->elem0 + (p->r + k) * w->cols + b * INT8_BLOCK;
    if (b == 0 || e % w->group == 0) {
        pp_weight_group_scales(w, e / w->group, 1, ws);
        if (w->zeros) *wz = w->zeros[e / w->group];
    }
}

/* Codes [32·part, 32·part + 32) of INT8 block b of a row, widened to 16 bits. */
VNNI_FN __m512i int8_codes(const int8_t *row, int64_t b, int part) {
    const int8_t *at = row + b * INT8_BLOCK + 32 * part;
    cpu_fetch_ahead(at);
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)at));
}

/* INT8: rb rows × nb inputs. Per activation block each row's 128 codes widen to 16 bits in four
 * steps and meet the int16 activations in vpdpwssd (|q·x| <= 127·32767: 4 steps of pairs stay
 * far inside int32); the block's sum then takes the weight group's and the block's scales. With
 * zero points (w = (q − z)·s) each block also owes z·Σx, the sum of its rounded inputs (prepared
 * with them), times the same scales: a scalar per row and input, taken off at the end. */
VNNI_FN void run_pass_int8(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    (void)fmt;
    const pp_weight *w = p->w;
    const int64_t nblk = w->cols / INT8_BLOCK;
    const int8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = int8_row(p, k);
    __m512 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm512_setzero_ps();
    float ws[ROWS] = {0}, wz[ROWS] = {0}, zacc[ROWS][INPUTS] = {{0}};
    for (int64_t b = 0; b < nblk; b++) {
        __m512i sum[ROWS][INPUTS];
        for (int k = 0; k < rb; k++) {
            int8_group(p, k, b, &ws[k], &wz[k]);
            for (int q = 0; q < nb; q++) sum[k][q] = _mm512_setzero_si512();
        }
        for (int part = 0; part < INT8_BLOCK / 32; part++)
            for (int k = 0; k < rb; k++) {
                __m512i v = int8_codes(row[k], b, part);
                for (int q = 0; q < nb; q++) {
                    const int16_t *xq = p->x->q + ((int64_t)(p->i + q) * nblk + b) * INT8_BLOCK + 32 * part;
                    sum[k][q] = _mm512_dpwssd_epi32(sum[k][q], v, _mm512_loadu_si512(xq));
                }
            }
        for (int k = 0; k < rb; k++)
            for (int q = 0; q < nb; q++) {
                int64_t xb = (int64_t)(p->i + q) * nblk + b;
                float s = ws[k] * p->x->scale[xb];
                acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k][q]), _mm512_set1_ps(s), acc[k][q]);
                if (w->zeros) zacc[k][q] += wz[k] * p->x->sums[xb] * s;
            }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++)
            y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]) - zacc[k][q];
}

/* INT8 with several inputs (WIDE_MIN): 4 rows × nb (<= WIDE_INPUTS) inputs, each block's codes of
 * the 4 rows widened once and met by every input, as run_pass_wide_codes does for the code
 * formats; the same sums and float steps as run_pass_int8, so the same result bit for bit. 2-core
 * Zen 5, 4096 x 14336 from memory, old time over new: 1.04-1.25 at 3 inputs, 1.0 at 4, 1.34-1.39
 * at 8 and 1.63-1.82 at 32 (with and without zero points). */
VNNI_FN void run_pass_wide_int8(const pass *p, int nb, float *y) {
    const pp_weight *w = p->w;
    const int64_t nblk = w->cols / INT8_BLOCK;
    const int8_t *row[ROWS];
    for (int k = 0; k < ROWS; k++) row[k] = int8_row(p, k);
    __m512 acc[ROWS][WIDE_INPUTS];
    memset(acc, 0, sizeof acc);
    float ws[ROWS] = {0}, wz[ROWS] = {0}, zacc[ROWS][WIDE_INPUTS] = {{0}};
    __m512i dec[ROWS][8]; /* a block's 4 widened parts of each row */
    for (int64_t b = 0; b < nblk; b++) {
        for (int k = 0; k < ROWS; k++) {
            int8_group(p, k, b, &ws[k], &wz[k]);
            for (int part = 0; part < INT8_BLOCK / 32; part++) dec[k][part] = int8_codes(row[k], b, part);
        }
        for (int q = 0; q < nb; q++) {
            const int64_t xb = (int64_t)(p->i + q) * nblk + b;
            __m512i xv[INT8_BLOCK / 32], sum[ROWS];
            for (int part = 0; part < INT8_BLOCK / 32; part++)
                xv[part] = _mm512_loadu_si512(p->x->q + xb * INT8_BLOCK + 32 * part);
            wide_sums(INT8_BLOCK / 32, dec, xv, sum);
            /* run_pass_int8's steps, written out as there: a helper shared by both cost its one-input loop a few % */
            for (int k = 0; k < ROWS; k++) {
                float s = ws[k] * p->x->scale[xb];
                acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k]), _mm512_set1_ps(s), acc[k][q]);
                if (w->zeros) zacc[k][q] += wz[k] * p->x->sums[xb] * s;
            }
        }
    }
    for (int k = 0; k < ROWS; k++)
        for (int q = 0; q < nb; q++)
            y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]) - zacc[k][q];
}

VNNI_FN void run_pass_wide(const pass *p, pp_wformat fmt, int nb, float *y) {
    if (fmt == PP_WF_INT8)
        run_pass_wide_int8(p, nb, y);
    else
        run_pass_wide_codes(p, fmt, nb, y);
}

/* The f32 scales d of `count` consecutive Q4_0/Q8_0 blocks from `first` (`bytes` apart), times
 * the pair's activation scale xs[b / 2] when xs is given, then LANES zeros (read by the last
 * pair's permute). The halves are read one by one: a vpgatherdd of them on Zen 4 held the loop
 * up for as long as its lines took to come from DRAM (half of a 2-thread Q4_0 product). */
VNNI_FN void stage_b32_scales(const uint8_t *first, int bytes, int64_t count, const float *xs, float *sc) {
    const __m512i pair_of = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    int64_t j = 0;
    for (; j + LANES <= count; j += LANES) {
        uint16_t d[LANES];
        for (int t = 0; t < LANES; t++) d[t] = quant_ld16(first + (j + t) * bytes, 0);
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)d));
        if (xs)
            v = _mm512_mul_ps(v, _mm512_permutexvar_ps(pair_of, _mm512_castps256_ps512(_mm256_loadu_ps(xs + j / 2))));
        _mm512_storeu_ps(sc + j, v);
    }
    for (; j < count; j++) sc[j] = _cvtsh_ss(quant_ld16(first + j * bytes, 0)) * (xs ? xs[j / 2] : 1.0f);
    _mm512_storeu_ps(sc + count, _mm512_setzero_ps());
}

/* 16 bytes at a, then 16 at b. */
VNNI_FN __m256i two_halves(const uint8_t *a, const uint8_t *b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

/* Q4_0 and Q8_0: rb rows × nb inputs, a pair of blocks at a time (see the top of the file). The
 * rows' scales are staged as f32 a span of blocks at a time, so the pair's lane vector of scales
 * is one permute. */
VNNI_FN void run_pass_b32(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    const pp_weight *w = p->w;
    const int bytes = fmt == PP_WF_Q4_0 ? QUANT_Q4_0_BYTES : QUANT_Q8_0_BYTES;
    const int64_t npairs = w->cols / PAIR, span = SCALE_SPAN / PAIR;
    const uint8_t *row[ROWS];
    for (int k = 0; k < rb; k++) row[k] = (const uint8_t *)w->data + (w->elem0 + (p->r + k) * w->cols) / B32 * bytes;
    __m512 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi16(15),
                  halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    float sc[ROWS][2 * SCALE_SPAN / PAIR + LANES];
    for (int64_t c = 0; c < npairs; c += span) {
        int64_t len = npairs - c < span ? npairs - c : span;
        /* one input: its pair scales are folded into the staged ones */
        const float *xs1 = nb == 1 ? p->x->scale + (int64_t)p->i * npairs + c : NULL;
        for (int k = 0; k < rb; k++) stage_b32_scales(row[k] + 2 * c * bytes, bytes, 2 * len, xs1, sc[k]);
        for (int64_t j = c; j < c + len; j++) {
            __m512i lo[ROWS], hi[ROWS];
            for (int k = 0; k < rb; k++) {
                const uint8_t *a = row[k] + 2 * j * bytes + 2, *b = a + bytes;
                /* within the row (its lines, not the next rows', which the pass reads already):
                 * every line of a pair, so both of Q8_0's 68 bytes */
                _mm_prefetch((const char *)a + B32_FETCH_AHEAD, _MM_HINT_T0);
                if (fmt == PP_WF_Q8_0) _mm_prefetch((const char *)a + B32_FETCH_AHEAD + 64, _MM_HINT_T0);
                if (fmt == PP_WF_Q4_0) {
                    __m512i v = _mm512_cvtepu8_epi16(two_halves(a, b));
                    lo[k] = _mm512_and_si512(v, low), hi[k] = _mm512_srli_epi16(v, 4);
                } else {
                    lo[k] = _mm512_cvtepi8_epi16(two_halves(a, b));
                    hi[k] = _mm512_cvtepi8_epi16(two_halves(a + 16, b + 16));
                }
            }
            for (int q = 0; q < nb; q++) {
                int64_t xb = (int64_t)(p->i + q) * npairs + j;
                const int16_t *xq = p->x->q + xb * PAIR;
                __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + B32);
                __m512 xs = _mm512_set1_ps(p->x->scale[xb]);
                __m512i start =
                    fmt == PP_WF_Q4_0 ? _mm512_loadu_si512(p->x->bias + xb * LANES) : _mm512_setzero_si512();
                for (int k = 0; k < rb; k++) {
                    __m512i s = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(start, lo[k], x0), hi[k], x1);
                    __m512 d = _mm512_permutexvar_ps(halves, _mm512_loadu_ps(sc[k] + 2 * (j - c)));
                    acc[k][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), nb == 1 ? d : _mm512_mul_ps(d, xs), acc[k][q]);
                }
            }
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = _mm512_reduce_add_ps(acc[k][q]);
}

#define INT_FN CPU_VNNI
#define INT_PASS_INT8
#include "backend/cpu_gemv_int_rows.h"

CPU_VNNI static void vnni_rows(const pp_weight *w, const cpu_int_x *x, int n, float *y, int64_t r0, int64_t r1) {
    pass p = {.w = w, .x = x};
    if (w->fmt != PP_WF_Q4K && w->fmt != PP_WF_INT8 && !is_b32(w->fmt)) { /* the decode tables of the code formats */
        int run = 2 * weights_per_word(w->fmt);
        int32_t lane_group[LANES];
        for (int l = 0; l < LANES; l++)
            lane_group[l] = w->group >= block_weights(w->fmt) ? 0 : (int32_t)(l * run / w->group);
        p.table = value_table(w);
        p.lane_group = _mm512_loadu_si512(lane_group);
        for (int k = 0; k < weights_per_word(w->fmt); k++) p.shift_ctl[k] = shift_control(w->fmt, k);
    }
    run_rows(&p, n, y, r0, r1);
}

const cpu_int_gemv pp_cpu_int_gemv_vnni = {vnni_handles, vnni_sizes, vnni_prepare, vnni_rows};

#endif
