/* cpu_gemv_i16: integer dot products on x86-64 CPUs with AVX2 (CPU_SIMD_AVX2_INT16; see
 * cpu_simd.h) for the low-bit formats (NF2, INT4, NF4) and ggml's block formats (Q4_K, Q4_0,
 * Q8_0), and the int16 code values that cpu_gemv_vnni.c's AVX-512 loops share with them.
 *
 * The float loops of cpu_gemv_avx2.c spend a variable shift and a permute to decode 8 weights,
 * then an FMA per 8 weights and input. Here one shift, one mask and two byte shuffles (vpshufb:
 * the low and the high bytes of the code values) decode 32 weights, two unpacks make them
 * 16-bit lanes, and a vpmaddwd per 16 weights and input multiplies them by int16 activations
 * into 8 int32 sums, as AVX-512's vpdpwssd does on twice the width. The block formats have
 * passes of their own (run_pass_q4k, run_pass_b32).
 *
 * Against the float loops on a 2-core AVX2 Zen 3 at 4096 x 14336 (personaplex-bench gemv --compare
 * avx2): NF2, INT4 and NF4 1.6x, 1.7x and 2.4x as fast for one input, 1.1x, 1.4x and 1.7x for
 * four, 1.3x, 1.4x and 1.8x for eight and 1.3x, 1.3x and 1.8x for 32 (from three inputs on they
 * take run_pass_wide); Q4_K, Q4_0 and Q8_0 faster for every batch. The choice never depends on
 * the batch: batched and lone products must stay identical (test_cpu_simd checks it).
 *
 * A block is 32 bytes of one row's codes: 128 NF2 weights, 64 of the 4-bit formats. Code k of
 * byte b is weight cpb·b + k of the block (cpb codes per byte: 4 or 2). Decoding code k: the
 * bytes are shifted so the code sits in each byte's low bits and masked to 4 bits (NF2's four
 * values repeat through the 16-entry table, so the next code's bits left above it do not
 * matter), looked up, and unpacked: A (unpacklo) holds bytes 0-7 and 16-23 of the block as
 * 16-bit lanes, B (unpackhi) bytes 8-15 and 24-31. vpmaddwd adds lanes 2j and 2j + 1 of each
 * 128-bit half h, so int32 lane 4h + j of a block's sum collects bytes 16h + 2j, 16h + 2j + 1
 * (from A) and 16h + 8 + 2j, 16h + 9 + 2j (from B) over every code: 16 NF2 weights or 8 4-bit
 * ones, all in half h of the block. That set is the lane's run: its activations are rounded to
 * int16 against their largest |x| with one scale, and it lies in one weight group because
 * groups are whole half blocks (i16_handles). After each block the 8 lane sums are
 * converted and scaled in float.
 *
 * INT4 skips the table: its values are q - 8, so the block's 16-bit words are shifted and masked
 * in place and 8 subtracted (decode), two shifts, masks and subtractions in place of a shift,
 * a mask, two shuffles and two unpacks; lane i then collects weights 8i to 8i + 7, as in
 * cpu_gemv_vnni.c (prepare_block_int4). On 2 cores (runs of both alternated in one process,
 * 4096 x 14336, 22528 x 4096 and 1024 x 1024): 0.99-1.02x as fast for one and two inputs,
 * 1.03-1.08x for four and eight; the loop is held up by more than its shuffles.
 *
 * Activations are prepared once per product in the order the decoded lanes meet them: per
 * input and block, for each code k, A's 16 then B's 16 (NF2 and NF4: weight cpb·b + k sits at
 * 32k + slot(b)), then 8 lane scales. The values and bounds are cpu_gemv_vnni.c's, so the
 * errors (docs/numerics.md) and the overflow argument are too: a lane adds 16 NF2 products of
 * at most 944·32767, or 8 4-bit ones of at most 16383·16383, per block. */
#include "backend/cpu.h"

#if CPU_HAVE_AVX2

#include "io/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define I16_FN CPU_AVX2 static inline __attribute__((always_inline))
#define BLOCK_BYTES 32
#define LANES 8       /* int32 sums per block */
#define CODE_LANES 16 /* int16 lanes of a decoded vector */
#define ROWS 4
#define INPUTS 4
#define SCALE_SPAN 2048  /* columns whose group scales are fetched at once */
#define NF2_UNIT 0.0016f /* the NF2 centroids are ±283 and ±944 of these */
#define NF4_TABLE_MAX 16383
#define Q4K_BLOCK QUANT_Q4_K_BLOCK
#define Q4K_SUBS 8 /* sub-blocks of 32 weights per block */
#define Q4K_SUB 32
#define Q4K_ACT_MAX 32767.0f /* and Q4_0's, Q8_0's */
#define B32 32               /* Q4_0 and Q8_0 weights per block */

void pp_cpu_int16_codes(const pp_weight *w, int16_t values[16], float *unit, float *act_max) {
    static const int16_t nf2[4] = {-944, -283, 283, 944};
    float top = 0;
    for (int i = 0; i < 16 && w->fmt == PP_WF_NF4; i++) top = fmaxf(top, fabsf(quant_ldf32(w->quant_map, (size_t)i)));
    *unit = w->fmt == PP_WF_NF2 ? NF2_UNIT : w->fmt == PP_WF_NF4 && top > 0 ? top / NF4_TABLE_MAX : 1.0f;
    /* NF4's table already takes 14 bits: its activations get one bit less so a lane's sum fits */
    *act_max = w->fmt == PP_WF_NF4 ? 16383.0f : 32767.0f;
    for (int i = 0; i < 16; i++)
        values[i] = w->fmt == PP_WF_NF2    ? nf2[i & 3]
                    : w->fmt == PP_WF_INT4 ? (int16_t)(i - 8)
                                           : (int16_t)lrintf(quant_ldf32(w->quant_map, (size_t)i) / *unit);
}

static int codes_per_byte(pp_wformat fmt) { return fmt == PP_WF_NF2 ? 4 : 2; }

static int64_t block_weights(pp_wformat fmt) { return (int64_t)BLOCK_BYTES * codes_per_byte(fmt); }

/* Bits to shift a byte right so that its code k is the low bits (NF2 and NF4: INT4 is decoded
 * in 16-bit words); bitsandbytes NF4 puts the high nibble first. */
static int code_shift(pp_wformat fmt, int k) { return fmt == PP_WF_NF2 ? 2 * k : 4 - 4 * k; }

/* Where byte b's codes go among a code's 32 activations: A's lanes are bytes 0-7 and 16-23, B's
 * (16 on) bytes 8-15 and 24-31. */
static int slot(int b) { return (b & 8 ? CODE_LANES : 0) + (b >> 4) * 8 + (b & 7); }

static int is_b32(pp_wformat fmt) { return fmt == PP_WF_Q4_0 || fmt == PP_WF_Q8_0; }

static int i16_handles(const pp_weight *w) {
    if (w->fmt == PP_WF_Q4K) return w->cols % Q4K_BLOCK == 0 && w->elem0 % Q4K_BLOCK == 0;
    if (is_b32(w->fmt)) return w->cols % B32 == 0 && w->elem0 % B32 == 0;
    if (w->fmt != PP_WF_NF2 && w->fmt != PP_WF_INT4 && w->fmt != PP_WF_NF4) return 0;
    int64_t b = block_weights(w->fmt), g = w->group;
    return g > 0 && g % (b / 2) == 0 && w->cols % b == 0 && w->cols % g == 0 && w->elem0 % g == 0;
}

static void i16_sizes(const pp_weight *w, int n, size_t *q, size_t *scales) {
    *q = (size_t)n * (size_t)w->cols;
    /* Q4_K: a scale per block, then its sub-blocks' Σx; Q4_0, Q8_0: a scale per block */
    if (w->fmt == PP_WF_Q4K)
        *scales = *q / Q4K_BLOCK * (1 + Q4K_SUBS);
    else
        *scales = is_b32(w->fmt) ? *q / B32 : *q / (size_t)block_weights(w->fmt) * LANES;
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

/* [max(a0, a1), max(a2, a3), max(b0, b1), max(b2, b3)] in each 128-bit half. */
I16_FN __m256 max_pairs(__m256 a, __m256 b) {
    return _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
}

/* Lane r: the largest lane of m[r]. */
I16_FN __m256 largest_of_each(const __m256 m[8]) {
    __m256 q0 = max_pairs(max_pairs(m[0], m[1]), max_pairs(m[2], m[3])); /* m[0-3], each half's part */
    __m256 q1 = max_pairs(max_pairs(m[4], m[5]), max_pairs(m[6], m[7]));
    return _mm256_max_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

/* Runs whose largest |x| are lanes get scales lanes / top · unit (to scale); returns what rounds
 * them to ±top: top / lanes, 0 for a run of zeros. */
I16_FN __m256 run_inverses(__m256 lanes, float top, float unit, float *scale) {
    const __m256 hi = _mm256_set1_ps(top);
    _mm256_storeu_ps(scale, _mm256_mul_ps(_mm256_div_ps(lanes, hi), _mm256_set1_ps(unit)));
    return _mm256_and_ps(_mm256_cmp_ps(lanes, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_div_ps(hi, lanes));
}

/* One block's activations (B floats at src, in vector registers: scalar fmaxf and lrintf calls
 * took a sixth of a product in cpu_gemv_vnni.c), rounded per lane run as cpu_gemv_vnni.c rounds
 * its runs: the int16 values to dst, the 8 lane scales to scale. Float vector r holds bytes
 * 8r/cpb on; NF2: bytes 2r, 2r + 1, one part of lane 4(r/8) + r%4, whose other part is vector
 * r + 4; 4-bit: bytes 4r..4r+3, parts of lanes l and l + 1 (l = 4(r/4) + 2(r%2)), whose other
 * parts are vector r + 2. */
I16_FN void prepare_block(pp_wformat fmt, const float *src, float top, float unit, int16_t *dst, float *scale) {
    const int nf2 = fmt == PP_WF_NF2, vectors = nf2 ? 16 : 8;
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    __m256 v[16], m[8];
    for (int r = 0; r < vectors; r++) v[r] = _mm256_loadu_ps(src + 8 * r);
    /* lanes' maxima (max_ps returns its second operand when the first is NaN: a NaN is passed
     * over, as fmaxf passes it over) */
    for (int t = 0; t < (nf2 ? 8 : 4); t++) {
        int r = nf2 ? 8 * (t / 4) + t % 4 : 4 * (t / 2) + t % 2, other = r + (nf2 ? 4 : 2);
        m[t] = _mm256_max_ps(_mm256_andnot_ps(sign, v[other]), _mm256_max_ps(_mm256_andnot_ps(sign, v[r]), zero));
    }
    __m256 lanes;
    if (nf2) {
        lanes = largest_of_each(m);
    } else { /* lanes 0, 2, 4, 6 then 1, 3, 5, 7 */
        __m256 q = max_pairs(max_pairs(m[0], m[1]), max_pairs(m[2], m[3]));
        lanes = _mm256_permutevar8x32_ps(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    const __m256 inv = run_inverses(lanes, top, unit, scale);
    for (int r = 0; r < vectors; r++) {
        int l = nf2 ? 4 * (r / 8) + r % 4 : 4 * (r / 4) + 2 * (r % 2);
        __m256i which = nf2 ? _mm256_set1_epi32(l) : _mm256_setr_epi32(l, l, l, l, l + 1, l + 1, l + 1, l + 1);
        __m256i q = round_lanes(v[r], _mm256_permutevar8x32_ps(inv, which), top);
        int at = slot(8 * r / (nf2 ? 4 : 2));
        if (nf2) { /* [b k0..k3, b+1 k0..k3] -> per code k the pair (b, b + 1) */
            q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            int16_t pairs[8];
            _mm_storeu_si128((__m128i *)(void *)pairs,
                             _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
            for (int k = 0; k < 4; k++) memcpy(dst + 2 * CODE_LANES * k + at, pairs + 2 * k, 2 * sizeof *pairs);
        } else { /* [b k0, b k1, ..., b+3 k1] -> per code k the four bytes' values */
            q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            _mm_storel_epi64((__m128i *)(void *)(dst + at), w);
            _mm_storel_epi64((__m128i *)(void *)(dst + 2 * CODE_LANES + at), _mm_unpackhi_epi64(w, w));
        }
    }
}

/* INT4: one block's 64 activations (src) in the order decode meets them. Word code c (0-3; A and
 * B of decode's step k are codes 2k and 2k + 1) holds weight 4j + c in 16-bit lane j, so int32
 * lane i of a block's sum collects weights 8i to 8i + 7: each run of 8 inputs gets one scale (to
 * scale[i]; INT4's values are whole numbers, unit 1) and dst[16c + j] = x[4j + c]. */
I16_FN void prepare_block_int4(const float *src, float top, int16_t *dst, float *scale) {
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    __m256 v[8], m[8];
    for (int r = 0; r < 8; r++) {
        v[r] = _mm256_loadu_ps(src + 8 * r);
        m[r] = _mm256_max_ps(_mm256_andnot_ps(sign, v[r]), zero); /* a NaN is passed over, as above */
    }
    const __m256 inv = run_inverses(largest_of_each(m), top, 1.0f, scale);
    /* Run r as int16 pairs (x[8r + c], x[8r + 4 + c]) for c = 0-3: the pair lanes 2r, 2r + 1 of
     * code c take. Two runs per vector, then a 4 x 4 transpose of 64-bit units. */
    const __m256i pairs_by_code = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i split_codes = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i two[4]; /* runs 2u, 2u + 1: 64-bit units of codes 0, 2, 1, 3 */
    for (int u = 0; u < 4; u++) {
        __m256i a = _mm256_permutevar8x32_epi32(
            round_lanes(v[2 * u], _mm256_permutevar8x32_ps(inv, _mm256_set1_epi32(2 * u)), top), pairs_by_code);
        __m256i b = _mm256_permutevar8x32_epi32(
            round_lanes(v[2 * u + 1], _mm256_permutevar8x32_ps(inv, _mm256_set1_epi32(2 * u + 1)), top), pairs_by_code);
        two[u] = _mm256_permutevar8x32_epi32(_mm256_packs_epi32(a, b), split_codes);
    }
    __m256i lo01 = _mm256_unpacklo_epi64(two[0], two[1]), lo23 = _mm256_unpacklo_epi64(two[2], two[3]);
    __m256i hi01 = _mm256_unpackhi_epi64(two[0], two[1]), hi23 = _mm256_unpackhi_epi64(two[2], two[3]);
    _mm256_storeu_si256((__m256i *)(void *)dst, _mm256_permute2x128_si256(lo01, lo23, 0x20));
    _mm256_storeu_si256((__m256i *)(void *)(dst + 16), _mm256_permute2x128_si256(lo01, lo23, 0x31));
    _mm256_storeu_si256((__m256i *)(void *)(dst + 32), _mm256_permute2x128_si256(hi01, hi23, 0x20));
    _mm256_storeu_si256((__m256i *)(void *)(dst + 48), _mm256_permute2x128_si256(hi01, hi23, 0x31));
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
    if (w->fmt == PP_WF_Q4K) {
        q4k_prepare(x, (int64_t)n * (w->cols / Q4K_BLOCK), out);
        return;
    }
    if (is_b32(w->fmt)) {
        b32_prepare(x, (int64_t)n * (w->cols / B32), out);
        return;
    }
    const int64_t B = block_weights(w->fmt), blocks = (int64_t)n * (w->cols / B);
    int16_t values[16];
    float unit, top;
    pp_cpu_int16_codes(w, values, &unit, &top);
    for (int64_t b = 0; b < blocks; b++) { /* the format as a constant */
        if (w->fmt == PP_WF_NF2)
            prepare_block(PP_WF_NF2, x + b * B, top, unit, out->q + b * B, out->scale + b * LANES);
        else if (w->fmt == PP_WF_INT4)
            prepare_block_int4(x + b * B, top, out->q + b * B, out->scale + b * LANES);
        else
            prepare_block(PP_WF_NF4, x + b * B, top, unit, out->q + b * B, out->scale + b * LANES);
    }
}

typedef struct pass {
    const pp_weight *w;
    const cpu_int_x *x;
    int64_t r;                     /* first row */
    int i;                         /* first input */
    __m256i low_bytes, high_bytes; /* the code values' bytes, a 16-entry vpshufb table per half */
} pass;

/* Code k of a block's 32 bytes as int16 values: A and B as at the top of the file; INT4, whose
 * values are q - 8, needs no table: A and B are codes 2k and 2k + 1 of the block's 16-bit words,
 * masked in place (prepare_block_int4). */
I16_FN void decode(pp_wformat fmt, __m256i codes, int k, const pass *p, __m256i *a, __m256i *b) {
    if (fmt == PP_WF_INT4) {
        const __m256i nibble = _mm256_set1_epi16(15), eight = _mm256_set1_epi16(8);
        __m256i words = k ? _mm256_srli_epi16(codes, 8) : codes;
        *a = _mm256_sub_epi16(_mm256_and_si256(words, nibble), eight);
        *b = _mm256_sub_epi16(_mm256_and_si256(_mm256_srli_epi16(words, 4), nibble), eight);
        return;
    }
    int shift = code_shift(fmt, k);
    __m256i idx = _mm256_and_si256(shift ? _mm256_srli_epi16(codes, shift) : codes, _mm256_set1_epi8(15));
    __m256i lo = _mm256_shuffle_epi8(p->low_bytes, idx), hi = _mm256_shuffle_epi8(p->high_bytes, idx);
    *a = _mm256_unpacklo_epi8(lo, hi);
    *b = _mm256_unpackhi_epi8(lo, hi);
}

/* The group scale of each half block of columns [c, c + len) of row r. The groups' scales are
 * converted eight at a time (a scalar conversion per half block took a fifth of the product), then
 * spread over their half blocks: a group holds whole half blocks, two in the released files (group
 * = block), which get a shuffle of their own. */
I16_FN void half_scales(const pp_weight *w, int64_t r, int64_t c, int64_t len, int64_t half, float *hs) {
    const int64_t e = w->elem0 + r * w->cols + c, g0 = e / w->group, count = (e + len - 1) / w->group - g0 + 1;
    const int64_t per_group = w->group / half, first = e % w->group / half, halves = len / half;
    float gs[SCALE_SPAN / 32 + 1];
    pp_cpu_group_scales_avx2(w, g0, count, gs);
    int64_t t = 0;
    if (per_group == 2 && first == 0)
        for (; t + 8 <= halves; t += 8)
            _mm256_storeu_ps(hs + t, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(gs + t / 2)),
                                                              _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
    for (int64_t g = (first + t) / per_group, within = (first + t) % per_group; t < halves; t++) {
        hs[t] = gs[g];
        if (++within == per_group) within = 0, g++;
    }
}

/* Prefetches the group scales of rows [r, r + rb) (clipped to the weight): a pass fetches its next
 * rows' before it starts on its own. The codes' prefetch runs ahead in each row, but the scales are
 * another array, whose lines (INT4: one per row every 2048 columns) each waited on DRAM. */
I16_FN void fetch_scales(const pp_weight *w, int64_t r, int rb) {
    const int size = w->fmt != PP_WF_NF4 ? 2 : w->nested_block ? 1 : 4;
    if (r + rb > w->rows) rb = (int)(w->rows > r ? w->rows - r : 0);
    for (int k = 0; k < rb; k++) {
        const char *first = (const char *)w->scales + (w->elem0 + (r + k) * w->cols) / w->group * size;
        for (int64_t at = 0; at < w->cols / w->group * size; at += 64) __builtin_prefetch(first + at, 0, 3);
    }
}

/* The codes of the pass's rows p->r .. p->r + rb - 1, and the next rb rows' scales prefetched. */
I16_FN void start_rows(const pass *p, pp_wformat fmt, int rb, const uint8_t **row) {
    const pp_weight *w = p->w;
    for (int k = 0; k < rb; k++)
        row[k] = (const uint8_t *)w->data + (w->elem0 + (p->r + k) * w->cols) / codes_per_byte(fmt);
    fetch_scales(w, p->r + rb, rb);
}

/* rb rows × nb inputs over whole rows. */
I16_FN void run_pass(const pass *p, pp_wformat fmt, int rb, int nb, float *y) {
    const pp_weight *w = p->w;
    const int cpb = codes_per_byte(fmt);
    const int64_t B = block_weights(fmt), blocks = w->cols / B, half = B / 2, chunk = SCALE_SPAN / B * B;
    const uint8_t *row[ROWS];
    start_rows(p, fmt, rb, row);
    __m256 acc[ROWS][INPUTS];
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) acc[k][q] = _mm256_setzero_ps();
    float hs[ROWS][SCALE_SPAN / 32];
    for (int64_t c = 0; c < w->cols; c += chunk) {
        int64_t len = w->cols - c < chunk ? w->cols - c : chunk;
        for (int k = 0; k < rb; k++) half_scales(w, p->r + k, c, len, half, hs[k]);
        /* row by row within a block: one row's codes and sums live at a time beside the accumulators */
        for (int64_t b = c / B; b < (c + len) / B; b++) {
            int64_t h = (b * B - c) / half;
            for (int k = 0; k < rb; k++) {
                const uint8_t *at = row[k] + b * BLOCK_BYTES;
                const __m256i codes = _mm256_loadu_si256((const __m256i *)(const void *)at);
                cpu_fetch_ahead(at);
                __m256i sum[INPUTS];
                for (int q = 0; q < nb; q++) sum[q] = _mm256_setzero_si256();
                for (int t = 0; t < cpb; t++) {
                    __m256i va, vb;
                    decode(fmt, codes, t, p, &va, &vb);
                    for (int q = 0; q < nb; q++) {
                        const int16_t *xq = p->x->q + ((int64_t)(p->i + q) * blocks + b) * B + 2 * CODE_LANES * t;
                        __m256i xa = _mm256_loadu_si256((const __m256i *)(const void *)xq),
                                xb = _mm256_loadu_si256((const __m256i *)(const void *)(xq + CODE_LANES));
                        sum[q] = _mm256_add_epi32(
                            sum[q], _mm256_add_epi32(_mm256_madd_epi16(va, xa), _mm256_madd_epi16(vb, xb)));
                    }
                }
                __m256 ws = _mm256_set_m128(_mm_set1_ps(hs[k][h + 1]), _mm_set1_ps(hs[k][h]));
                for (int q = 0; q < nb; q++) {
                    __m256 xs = _mm256_loadu_ps(p->x->scale + ((int64_t)(p->i + q) * blocks + b) * LANES);
                    acc[k][q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[q]), _mm256_mul_ps(ws, xs), acc[k][q]);
                }
            }
        }
    }
    for (int k = 0; k < rb; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = cpu_hsum8(acc[k][q]);
}

/* Three or more inputs (WIDE_MIN) of NF2, INT4 or NF4: 4 rows × nb (<= WIDE_INPUTS) inputs over
 * whole rows. Each block of the 4 rows is decoded once into dec (in the stack, so the products
 * take it as a memory operand); then one input at a time holds its activation vectors in
 * registers and meets the 4 rows' decoded vectors. run_pass decodes a block once per pass of at
 * most 4 (row, input) pairs, and its sums and pointers for 4 inputs spill; here the decoding is
 * shared by every input and the inner loop keeps one input's vectors and one row's sums. Every
 * (row, input) gets the same integer block sums and the same float steps in the same order as in
 * run_pass, so the result is the same bit for bit. 2-core Zen 3, 4096 x 14336, against run_pass:
 * 0.63-0.87 of its time for NF2, INT4 and NF4 at 4 to 32 inputs, 0.74-0.93 at 3, but 1.0-1.2 at 2. */
#define WIDE_MIN(fmt) 3
#define WIDE_INPUTS 16
I16_FN void run_pass_wide(const pass *p, pp_wformat fmt, int nb, float *y) {
    const pp_weight *w = p->w;
    const int cpb = codes_per_byte(fmt);
    const int64_t B = block_weights(fmt), blocks = w->cols / B, span = SCALE_SPAN / B; /* blocks per scale fetch */
    const uint8_t *row[ROWS];
    start_rows(p, fmt, ROWS, row);
    __m256 acc[ROWS][WIDE_INPUTS];
    memset(acc, 0, sizeof acc);
    __m256i dec[ROWS][8]; /* a block's codes 0-3 of each row as (A, B) pairs */
    float hs[ROWS][SCALE_SPAN / 32];
    for (int64_t b = 0; b < blocks; b++) {
        if (b % span == 0) {
            int64_t c = b * B, len = w->cols - c < span * B ? w->cols - c : span * B;
            for (int k = 0; k < ROWS; k++) half_scales(w, p->r + k, c, len, B / 2, hs[k]);
        }
        __m256 ws[ROWS];
        for (int k = 0; k < ROWS; k++) {
            const uint8_t *at = row[k] + b * BLOCK_BYTES;
            const __m256i codes = _mm256_loadu_si256((const __m256i *)(const void *)at);
            cpu_fetch_ahead(at);
            for (int t = 0; t < cpb; t++) decode(fmt, codes, t, p, &dec[k][2 * t], &dec[k][2 * t + 1]);
            ws[k] = _mm256_set_m128(_mm_set1_ps(hs[k][2 * (b % span) + 1]), _mm_set1_ps(hs[k][2 * (b % span)]));
        }
        const int16_t *xq = p->x->q + ((int64_t)p->i * blocks + b) * B;
        const float *xs = p->x->scale + ((int64_t)p->i * blocks + b) * LANES;
        for (int q = 0; q < nb; q++, xq += blocks * B, xs += blocks * LANES) {
            __m256i xv[8];
            for (int v = 0; v < 2 * cpb; v++)
                xv[v] = _mm256_loadu_si256((const __m256i *)(const void *)(xq + CODE_LANES * v));
            const __m256 scale = _mm256_loadu_ps(xs);
            for (int k = 0; k < ROWS; k++) {
                __m256i sum = _mm256_setzero_si256();
                for (int t = 0; t < cpb; t++)
                    sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(dec[k][2 * t], xv[2 * t]),
                                                                 _mm256_madd_epi16(dec[k][2 * t + 1], xv[2 * t + 1])));
                acc[k][q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws[k], scale), acc[k][q]);
            }
        }
    }
    for (int k = 0; k < ROWS; k++)
        for (int q = 0; q < nb; q++) y[(int64_t)(p->i + q) * w->rows + p->r + k] = cpu_hsum8(acc[k][q]);
}

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
    /* row by row within a block: one row's sums live at a time, in registers beside the accumulators */
    for (int64_t b = 0; b < blocks; b++)
        for (int k = 0; k < rb; k++) {
            const uint8_t *blk = row[k] + b * QUANT_Q4_K_BYTES;
            uint32_t sm[4];
            q4k_scales_mins(blk + 4, sm);
            uint64_t sc64, m64;
            memcpy(&sc64, sm, 8);
            memcpy(&m64, sm + 2, 8);
            const __m256i scales = _mm256_set1_epi64x((long long)sc64);
            const float d = _cvtsh_ss(quant_ld16(blk, 0));
            const __m256 mins =
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64))),
                              _mm256_set1_ps(_cvtsh_ss(quant_ld16(blk, 1))));
            __m256i sum[INPUTS];
            for (int q = 0; q < nb; q++) sum[q] = _mm256_setzero_si256();
            for (int pair = 0; pair < Q4K_SUBS / 2; pair++) {
                const uint8_t *qs = blk + 16 + 32 * pair;
                cpu_fetch_ahead(qs);
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)qs), codes[2];
                codes[0] = _mm256_and_si256(v, low), codes[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                __m256i prod[4]; /* sub-block 2·pair + s, even codes then odd */
                for (int s = 0; s < 2; s++) {
                    int j = 2 * pair + s;
                    prod[2 * s] = _mm256_maddubs_epi16(
                        codes[s], _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const void *)q4k_spread.even[j])));
                    prod[2 * s + 1] = _mm256_maddubs_epi16(
                        codes[s], _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const void *)q4k_spread.odd[j])));
                }
                for (int q = 0; q < nb; q++) {
                    const int16_t *xq = p->x->q + ((int64_t)(p->i + q) * blocks + b) * Q4K_BLOCK + 2 * Q4K_SUB * pair;
                    for (int t = 0; t < 4; t++)
                        sum[q] = _mm256_add_epi32(
                            sum[q], _mm256_madd_epi16(prod[t], _mm256_loadu_si256((const void *)(xq + 16 * t))));
                }
            }
            for (int q = 0; q < nb; q++) {
                int64_t xb = (int64_t)(p->i + q) * blocks + b;
                acc[k][q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[q]), _mm256_set1_ps(d * p->x->scale[xb]), acc[k][q]);
                acc[k][q] = _mm256_fnmadd_ps(mins, _mm256_loadu_ps(p->x->sums + xb * Q4K_SUBS), acc[k][q]);
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
    if (w->fmt == PP_WF_NF2 || w->fmt == PP_WF_NF4) { /* the code values' bytes */
        int16_t values[16];
        uint8_t low[16], high[16];
        float unit, top;
        pp_cpu_int16_codes(w, values, &unit, &top);
        for (int i = 0; i < 16; i++) {
            low[i] = (uint8_t)((uint16_t)values[i] & 0xff);
            high[i] = (uint8_t)((uint16_t)values[i] >> 8);
        }
        p.low_bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)low));
        p.high_bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)high));
    }
    run_rows(&p, n, y, r0, r1);
}

const cpu_int_gemv pp_cpu_int_gemv_avx2 = {i16_handles, i16_sizes, i16_prepare, i16_rows};

#endif
