/* test_cpu_simd: the CPU backend's SIMD loop variants (backend/cpu_simd.h) against its portable
 * loops on the same random data: matrix products of every weight format and group layout for
 * n in {1, 2, 3, 5, 8}, odd row counts and lengths and row views, and each input of an 18-input
 * product against its product alone (bit for bit); the codec's convolutions
 * (every path: direct, gathered windows, short and long transposed inputs; the VNNI ones also
 * against AVX2's, bit for bit; several conversations in one call against each alone, bit for
 * bit), ELU (also against
 * libm's expm1f), the RVQ search and NF2's activation rotation (bit for bit). Runs every
 * variant this CPU supports (products: AVX2's float loops, and the integer loops of AVX2 and
 * AVX-512 VNNI with their own stated tolerance; on aarch64 NEON's products and attention, which
 * tools/cross-check.sh runs under qemu); skipped where only the portable loops exist. */
#include "backend/cpu.h"
#include "base/err.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static pp_backend *be;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1), xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void set_simd(cpu_simd s) { ((cpu_ctx *)be->impl)->simd = s; }

/* A weight quantized in memory from random values; `bufs` own its bytes. */
typedef struct {
    pp_weight w;
    void *bufs[6];
} mem_weight;

static void mem_free(mem_weight *m) {
    for (int i = 0; i < 6; i++) free(m->bufs[i]);
}

static void *own(mem_weight *m, int slot, size_t bytes) { return m->bufs[slot] = calloc(1, bytes ? bytes : 1); }

/* fmt at group size gs (np2 for NF2; NF4 nests its absmax when nest > 0, INT8 gets zero points). */
static void make(mem_weight *m, pp_wformat fmt, int64_t rows, int64_t cols, int gs, int np2, int nest) {
    size_t n = (size_t)(rows * cols);
    memset(m, 0, sizeof *m);
    float *src = own(m, 3, n * sizeof(float));
    for (size_t i = 0; i < n; i++) src[i] = frand() * 0.05f;
    m->w = (pp_weight){.fmt = fmt, .rows = rows, .cols = cols, .group = gs, .np2 = np2, .name = "simd"};
    int64_t groups = gs ? (int64_t)n / gs : 0;
    if (fmt == PP_WF_F32) {
        m->w.data = src;
    } else if (fmt == PP_WF_INT8) {
        int8_t *codes = own(m, 0, n);
        float *absmax = own(m, 1, (size_t)groups * sizeof(float));
        pp_quant_int8_quantize(src, rows, cols, gs, codes, absmax);
        m->w.data = codes;
        m->w.scales = absmax;
        if (nest) { /* asymmetric: a zero point per group (ONNX Runtime's blocks) */
            int8_t *zeros = own(m, 2, (size_t)groups);
            for (int64_t g = 0; g < groups; g++) zeros[g] = (int8_t)(frand() * 40);
            m->w.zeros = zeros;
        }
    } else if (fmt == PP_WF_Q4K || fmt == PP_WF_Q4_0 || fmt == PP_WF_Q8_0) {
        uint8_t *blk = own(m, 0, (size_t)groups * pp_wformat_block_bytes(fmt));
        if (fmt == PP_WF_Q4K) pp_quant_q4_k_quantize(src, groups, blk);
        if (fmt == PP_WF_Q4_0) pp_quant_q4_0_quantize(src, groups, blk);
        if (fmt == PP_WF_Q8_0) pp_quant_q8_0_quantize(src, groups, blk);
        m->w.data = blk;
    } else if (fmt == PP_WF_F16 || fmt == PP_WF_BF16) {
        uint16_t *h = own(m, 0, n * 2);
        for (size_t i = 0; i < n; i++) h[i] = fmt == PP_WF_F16 ? pp_f32_to_f16(src[i]) : pp_f32_to_bf16(src[i]);
        m->w.data = h;
    } else if (fmt == PP_WF_NF2 || fmt == PP_WF_INT4) {
        uint8_t *packed = own(m, 0, fmt == PP_WF_NF2 ? n / 4 : n / 2);
        uint16_t *scales = own(m, 1, (size_t)groups * 2);
        if (fmt == PP_WF_NF2)
            pp_quant_nf2_quantize(src, groups, gs, np2, packed, scales);
        else
            pp_quant_int4_quantize(src, groups, gs, packed, scales);
        m->w.data = packed;
        m->w.scales = scales;
    } else {
        uint8_t *packed = own(m, 0, n / 2);
        float *absmax = own(m, 1, (size_t)groups * sizeof(float));
        pp_quant_nf4_quantize(src, groups, gs, packed, absmax);
        m->w.data = packed;
        m->w.scales = absmax;
        m->w.quant_map = pp_quant_nf4_table;
        if (nest) {
            int64_t blocks = (groups + nest - 1) / nest;
            float *map = own(m, 2, 256 * sizeof(float)), *nested = own(m, 4, (size_t)blocks * sizeof(float));
            uint8_t *codes = own(m, 5, (size_t)groups);
            pp_quant_nf4_dynamic_map(map);
            m->w.nested_offset = pp_quant_nf4_nest(absmax, groups, nest, map, codes, nested);
            m->w.scales = codes;
            m->w.nested_absmax = nested;
            m->w.nested_map = map;
            m->w.nested_block = nest;
        }
    }
}

/* Largest |simd − portable| over the row's Σ|w_k·x_k| (the scale of a dot product's rounding
 * error, whatever cancellation leaves of the result). Two summation orders of ≤ 4096 f32
 * products, one with FMA, differ by a few ulp of that scale: ~1e-7; 1e-6 leaves margin, and
 * any decode or indexing mistake gives errors of order 1. */
static double compare(const pp_weight *w, int n, cpu_simd simd) {
    int64_t R = w->rows, C = w->cols;
    float *dec = malloc(sizeof(float) * (size_t)(R * C)), *x = malloc(sizeof(float) * (size_t)(n * C));
    float *ref = malloc(sizeof(float) * (size_t)(n * R)), *y = malloc(sizeof(float) * (size_t)(n * R));
    char err[PP_ERR_LEN];
    double worst = 0;
    if (pp_weight_decode_rows(w, 0, R, dec, err)) worst = INFINITY;
    for (int64_t i = 0; i < n * C; i++) x[i] = frand();
    set_simd(CPU_SIMD_PORTABLE);
    be->ops->matmul(be, w, x, n, ref);
    set_simd(simd);
    be->ops->matmul(be, w, x, n, y);
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < R; r++) {
            double scale = 0;
            for (int64_t k = 0; k < C; k++) scale += fabs((double)dec[r * C + k] * x[i * C + k]);
            double d = fabs((double)y[i * R + r] - ref[i * R + r]) / (scale > 0 ? scale : 1);
            if (d > worst || d != d) worst = d != d ? INFINITY : d;
        }
    free(dec);
    free(x);
    free(ref);
    free(y);
    return worst;
}

/* The integer loops (AVX-512 VNNI's, and AVX2's from avx2-int16 on) round activations to int16
 * (at most 1.5e-5 of their run's largest |x|, NF4 3.1e-5) and NF4's table to 1/16383 of its
 * largest entry: measured errors stay below 1e-5 of the row's Σ|w·x|, 3e-5 leaves margin, and a
 * decode or layout mistake still gives order 1. */
static double tolerance(const pp_weight *w, cpu_simd simd) {
#if CPU_HAVE_AVX2
    if (pp_cpu_int_gemv_for(simd, w)) return 3e-5;
#else
    (void)w, (void)simd;
#endif
    return 1e-6;
}

static void check(const pp_weight *w, cpu_simd simd, const char *what) {
    static const int ns[] = {1, 2, 3, 5, 8};
    double tol = tolerance(w, simd);
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        double e = compare(w, ns[i], simd);
        if (e > tol) fprintf(stderr, "%s %s n=%d: rel err %g\n", pp_cpu_simd_name(simd), what, ns[i], e);
        TEST_COND(what, e <= tol);
    }
}

/* A product of many inputs gives each input, bit for bit, what a product of that input alone gives:
 * a conversation in the server's batched tick samples the tokens it would sample alone. 18 inputs
 * take cpu_gemv_i16.c's batch passes (run_pass_wide from 3 inputs, 16 at a time) twice, the second
 * time with 2. */
static void check_batch(const pp_weight *w, cpu_simd simd, const char *what) {
    enum { N = 18 };
    int64_t R = w->rows, C = w->cols;
    float *x = malloc(sizeof(float) * (size_t)(N * C)), *y = malloc(sizeof(float) * (size_t)(N * R));
    float *alone = malloc(sizeof(float) * (size_t)R);
    for (int64_t i = 0; i < N * C; i++) x[i] = frand();
    set_simd(simd);
    be->ops->matmul(be, w, x, N, y);
    int same = 1;
    for (int i = 0; i < N && same; i++) {
        be->ops->matmul(be, w, x + i * C, 1, alone);
        same = memcmp(alone, y + (int64_t)i * R, sizeof(float) * (size_t)R) == 0;
        if (!same)
            fprintf(stderr, "%s %s: input %d of %d differs from its product alone\n", pp_cpu_simd_name(simd), what, i,
                    N);
    }
    TEST_COND(what, same);
    free(x);
    free(y);
    free(alone);
}

static void test_matmul(cpu_simd simd) {
    static const struct {
        pp_wformat fmt;
        int64_t rows, cols;
        int gs, np2, nest;
        const char *what;
    } cases[] = {
        {PP_WF_F32, 37, 301, 0, 0, 0, "f32 odd"},
        {PP_WF_F32, 64, 1024, 0, 0, 0, "f32"},
        {PP_WF_F16, 37, 301, 0, 0, 0, "f16 odd"},
        {PP_WF_F16, 21, 4096, 0, 0, 0, "f16 long"},
        {PP_WF_BF16, 37, 301, 0, 0, 0, "bf16 odd"},
        {PP_WF_BF16, 40, 520, 0, 0, 0, "bf16"},
        {PP_WF_BF16, 21, 1024, 0, 0, 0, "bf16 whole lines"},
        {PP_WF_NF2, 37, 512, 128, 128, 0, "nf2 g128"},
        {PP_WF_NF2, 13, 480, 48, 64, 0, "nf2 g48 in 64"},
        {PP_WF_NF2, 9, 2048, 2048, 2048, 0, "nf2 g2048"},
        {PP_WF_NF2, 7, 96, 12, 16, 0, "nf2 g12 (portable)"},
        {PP_WF_INT4, 37, 512, 64, 0, 0, "int4 g64"},
        {PP_WF_INT4, 11, 264, 8, 0, 0, "int4 g8"},
        {PP_WF_INT4, 5, 60, 6, 0, 0, "int4 g6 (portable)"},
        {PP_WF_NF4, 37, 512, 64, 0, 16, "nf4 nested"},
        {PP_WF_NF4, 19, 384, 32, 0, 0, "nf4 f32 absmax"},
        /* the integer loops' layouts: groups of one lane run, of a whole block, spanning blocks */
        {PP_WF_NF2, 9, 1024, 16, 16, 0, "nf2 g16"},
        {PP_WF_NF2, 6, 1024, 512, 512, 0, "nf2 g512"},
        {PP_WF_INT4, 10, 1024, 128, 0, 0, "int4 g128"},
        {PP_WF_INT4, 10, 1024, 256, 0, 0, "int4 g256"},
        {PP_WF_NF4, 13, 768, 8, 0, 4, "nf4 g8 nested"},
        {PP_WF_NF2, 9, 384, 128, 128, 0, "nf2 half block"},
        {PP_WF_INT4, 9, 320, 64, 0, 0, "int4 half block"},
        {PP_WF_NF4, 9, 192, 32, 0, 0, "nf4 half block"},
        /* AVX2's integer loops: groups of half a block, and groups that end inside a block */
        {PP_WF_NF2, 11, 768, 64, 64, 0, "nf2 g64"},
        {PP_WF_NF2, 7, 768, 192, 256, 0, "nf2 g192 in 256"},
        {PP_WF_INT4, 9, 576, 96, 0, 0, "int4 g96"},
        {PP_WF_NF4, 9, 576, 96, 0, 3, "nf4 g96 nested"},
        /* rows longer than the AVX2 loops' scale span (2048): a span that ends inside a group, and
         * a last span of fewer than 8 half blocks */
        {PP_WF_NF2, 5, 4608, 192, 256, 0, "nf2 g192, spans from inside a group"},
        {PP_WF_INT4, 5, 4224, 96, 0, 0, "int4 g96, spans from inside a group"},
        {PP_WF_NF2, 5, 2432, 128, 128, 0, "nf2 g128, a short last span"},
        {PP_WF_Q4K, 37, 512, 256, 0, 0, "q4_k"},
        {PP_WF_Q4K, 6, 4096, 256, 0, 0, "q4_k long"},
        {PP_WF_Q4_0, 37, 512, 32, 0, 0, "q4_0"},
        {PP_WF_Q4_0, 6, 4096, 32, 0, 0, "q4_0 long"},
        {PP_WF_Q4_0, 9, 96, 32, 0, 0, "q4_0 odd pair (AVX2 only)"},
        {PP_WF_Q8_0, 37, 512, 32, 0, 0, "q8_0"},
        {PP_WF_Q8_0, 6, 4096, 32, 0, 0, "q8_0 long"},
        {PP_WF_Q8_0, 9, 96, 32, 0, 0, "q8_0 odd pair (AVX2 only)"},
        {PP_WF_INT8, 13, 1024, 1024, 0, 0, "int8 per row"},
        {PP_WF_INT8, 13, 1024, 128, 0, 0, "int8 block 128"},
        {PP_WF_INT8, 7, 60, 12, 0, 0, "int8 g12 (portable)"},
        {PP_WF_INT8, 13, 1024, 128, 0, 1, "int8 block 128, zero points"},
        {PP_WF_INT8, 9, 512, 32, 0, 1, "int8 block 32, zero points"},
        /* fewer rows than the loops' blocks of 4, and rows shorter than one vector */
        {PP_WF_F32, 1, 7, 0, 0, 0, "f32 1 x 7"},
        {PP_WF_F32, 3, 17, 0, 0, 0, "f32 3 x 17"},
        {PP_WF_F16, 2, 9, 0, 0, 0, "f16 2 x 9"},
        {PP_WF_BF16, 1, 33, 0, 0, 0, "bf16 1 x 33"},
        {PP_WF_BF16, 3, 1, 0, 0, 0, "bf16 3 x 1"},
        {PP_WF_NF2, 1, 128, 128, 128, 0, "nf2 1 row"},
        {PP_WF_NF2, 3, 16, 16, 16, 0, "nf2 3 rows g16"},
        {PP_WF_INT4, 1, 64, 64, 0, 0, "int4 1 row"},
        {PP_WF_INT4, 2, 8, 8, 0, 0, "int4 2 x 8"},
        {PP_WF_NF4, 3, 64, 32, 0, 0, "nf4 3 rows"},
        {PP_WF_Q4K, 1, 256, 256, 0, 0, "q4_k 1 row"},
        {PP_WF_Q4_0, 2, 32, 32, 0, 0, "q4_0 2 x 32"},
        {PP_WF_Q8_0, 3, 32, 32, 0, 0, "q8_0 3 x 32"},
        {PP_WF_INT8, 1, 32, 32, 0, 0, "int8 1 row"},
        {PP_WF_INT8, 2, 32, 32, 0, 1, "int8 2 rows, zero points"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mem_weight m;
        make(&m, cases[i].fmt, cases[i].rows, cases[i].cols, cases[i].gs, cases[i].np2, cases[i].nest);
        check(&m.w, simd, cases[i].what);
        check_batch(&m.w, simd, cases[i].what);
        /* a view from an odd row: group and block indices come from elem0 */
        if (m.w.rows > 4) {
            pp_weight v = pp_weight_rows(&m.w, 3, m.w.rows - 4);
            check(&v, simd, cases[i].what);
            check_batch(&v, simd, cases[i].what);
        }
        /* dense rows that start 1 to 29 elements further on: where rows are whole 64-byte lines, the AVX-512
         * loops' masked first step runs up to the boundary for heads of several lengths */
        for (int64_t shift = 1; cases[i].fmt <= PP_WF_BF16 && m.w.rows > 1 && shift < 32 && shift <= m.w.cols;
             shift += 7) {
            pp_weight off = m.w;
            off.elem0 += shift;
            off.rows -= 1;
            check(&off, simd, cases[i].what);
            check_batch(&off, simd, cases[i].what);
        }
        mem_free(&m);
    }
}

static float *randv(size_t n, float scale) {
    float *v = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    return v;
}

/* Every conv path: the direct path's tiles (VNNI: 6, 8 and 12 rows by 4, 3, 2 and 1 vectors of
 * times, the last one masked), gathered windows, and transposed convs over short and long inputs
 * (VNNI: tiles of 12 columns and pairs of panel blocks, and the rest). */
typedef struct conv_shape {
    int cin, cout, k, stride, t, transposed;
} conv_shape;

static const conv_shape CONV_SHAPES[] = {
    {1, 7, 7, 1, 40, 0},   /* a window of fewer than 8 values */
    {5, 13, 3, 1, 37, 0},  /* direct: odd rows and times */
    {16, 10, 1, 1, 20, 0}, /* direct, k 1 */
    {4, 7, 8, 4, 80, 0},   /* direct over phases: stride 4, 16 + 4 times */
    {3, 5, 6, 2, 52, 0},   /* direct over phases: 16 + 8 + 2 times */
    {9, 30, 3, 1, 130, 0}, /* direct: tasks of 64, 64 and 2 times, 24 + 6 rows */
    {6, 9, 4, 2, 24, 0},   /* strided, a few times: gathered windows */
    {8, 11, 3, 1, 6, 0},   /* a few times: gathered windows */
    {8, 6, 4, 2, 3, 1},    /* transposed, short input */
    {8, 5, 6, 3, 13, 1},   /* transposed, long input, partial tiles */
    {150, 9, 4, 2, 9, 1},  /* transposed, long input, several channel panels */
    {150, 9, 4, 2, 3, 1},  /* transposed, short input, channels not a multiple of 4 */
    {16, 8, 16, 8, 16, 1}, /* transposed: 8 whole blocks, 16 columns */
    {20, 10, 8, 4, 30, 1}, /* transposed: 12 + 12 + 6 columns, 5 blocks */
    {40, 70, 4, 2, 2, 1},  /* transposed, short input, output channels over 2 overlap-add tasks */
};
#define N_CONV_SHAPES (int)(sizeof CONV_SHAPES / sizeof CONV_SHAPES[0])

/* A conv of one shape with random weights, and two runs of it to compare (two variants, or lone and
 * batched calls), over `rows` conversations: their inputs and scratch, and each run's states (random,
 * the same in both to begin with) and outputs. Sizes are floats per conversation. */
typedef struct conv_runs {
    const conv_shape *s;
    pp_conv c;
    size_t in, state, out;
    float *x, *scratch, *st[2], *y[2];
} conv_runs;

static conv_runs conv_runs_new(const conv_shape *s, int rows) {
    conv_runs k = {.s = s, .c = {.cin = s->cin, .cout = s->cout, .k = s->k, .stride = s->stride, .groups = 1}};
    k.c.w = randv((size_t)s->cin * s->cout * s->k, 0.3f);
    k.c.b = randv((size_t)s->cout, 0.1f);
    k.in = (size_t)s->cin * s->t;
    k.state = (size_t)(s->transposed ? s->cout : s->cin) * (s->k - s->stride) + 1;
    k.out = (size_t)s->cout * (s->transposed ? s->t * s->stride : s->t / s->stride);
    k.x = randv(k.in * rows, 1.0f);
    k.scratch = malloc(sizeof(float) * pp_conv_scratch(&k.c, s->t, s->transposed) * rows);
    k.st[0] = randv(k.state * rows, 1.0f);
    k.st[1] = malloc(sizeof(float) * k.state * rows);
    memcpy(k.st[1], k.st[0], sizeof(float) * k.state * rows);
    for (int v = 0; v < 2; v++) k.y[v] = calloc(k.out * rows, sizeof(float));
    return k;
}

static void conv_runs_free(conv_runs *k) {
    free((void *)k->c.w);
    free((void *)k->c.b);
    free(k->x);
    free(k->scratch);
    for (int v = 0; v < 2; v++) {
        free(k->st[v]);
        free(k->y[v]);
    }
}

/* Streaming call `call` (0, 1) of run v on conversation r's input (rows NULL) or on all of them. */
static void conv_call(conv_runs *k, int v, int call, int r, const pp_state_rows *rows) {
    const float *x = k->x + r * k->in;
    float *y = k->y[v] + r * k->out, *hist = rows ? NULL : k->st[v] + r * k->state;
    if (k->s->transposed)
        be->ops->conv_tr1d(be, &k->c, x, k->s->t, hist, rows, y, k->scratch);
    else
        be->ops->conv1d(be, &k->c, x, k->s->t, hist, rows, y, k->scratch,
                        call ? PP_CONV_ACCUMULATE : PP_CONV_REPLICATE);
}

static const char *conv_name(const conv_shape *s, char *buf, size_t size) {
    snprintf(buf, size, "%s cin %d cout %d k %d stride %d t %d", s->transposed ? "conv_tr1d" : "conv1d", s->cin,
             s->cout, s->k, s->stride, s->t);
    return buf;
}

/* Two streaming calls (the second reads the history the first left) of a conv in variants simd
 * and ref from the same state, within tol. Against the portable loops FMA and the summation
 * order differ: ~1e-7 of the output's scale over these window lengths, so 1e-6 leaves margin.
 * The VNNI variant's direct and transposed convs form every output's sum as the AVX2 ones do:
 * against them tol is 0, bit for bit. */
static void check_conv(cpu_simd simd, cpu_simd ref, double tol, const conv_shape *s) {
    conv_runs k = conv_runs_new(s, 1);
    for (int v = 0; v < 2; v++) {
        set_simd(v ? simd : ref);
        for (int call = 0; call < 2; call++) conv_call(&k, v, call, 0, NULL);
    }
    char what[160], name[96];
    snprintf(what, sizeof what, "%s against %s: %s", pp_cpu_simd_name(simd), pp_cpu_simd_name(ref),
             conv_name(s, name, sizeof name));
    double e = fmax(test_rel_err(k.y[1], k.y[0], k.out), test_rel_err(k.st[1], k.st[0], k.state));
    if (e > tol) fprintf(stderr, "%s: rel err %g\n", what, e);
    TEST_COND(what, e <= tol);
    conv_runs_free(&k);
}

static void check_convs(cpu_simd simd, cpu_simd ref, double tol) {
    for (int i = 0; i < N_CONV_SHAPES; i++) check_conv(simd, ref, tol, &CONV_SHAPES[i]);
}

#define CONV_ROWS 3

/* One conv call of CONV_ROWS conversations (pp_state_rows, each row's state in a buffer of its own)
 * against each conversation's lone call, in variant simd, two streaming calls: bit for bit, outputs
 * and states, as the batched call forms every output's sum as the lone one does. The batch runs all
 * rows' windows through one product, so a column that lands in the wrong conversation's output or
 * state shows here. */
static void check_conv_rows(cpu_simd simd, const conv_shape *s) {
    conv_runs k = conv_runs_new(s, CONV_ROWS);
    uint64_t base[CONV_ROWS];
    for (int r = 0; r < CONV_ROWS; r++) base[r] = (uint64_t)(uintptr_t)(k.st[1] + r * k.state);
    const pp_state_rows rows = {CONV_ROWS, base, 0};
    set_simd(simd);
    for (int call = 0; call < 2; call++) {
        for (int r = 0; r < CONV_ROWS; r++) conv_call(&k, 0, call, r, NULL); /* run 0: each alone */
        conv_call(&k, 1, call, 0, &rows);                                    /* run 1: one call for all */
    }
    char what[160], name[96];
    snprintf(what, sizeof what, "%s: %s, %d conversations in one call", pp_cpu_simd_name(simd),
             conv_name(s, name, sizeof name), CONV_ROWS);
    TEST_COND(what, memcmp(k.y[0], k.y[1], sizeof(float) * k.out * CONV_ROWS) == 0 &&
                        memcmp(k.st[0], k.st[1], sizeof(float) * k.state * CONV_ROWS) == 0);
    conv_runs_free(&k);
}

static void test_codec(cpu_simd simd) {
    check_convs(simd, CPU_SIMD_PORTABLE, 1e-6);
    if (simd == CPU_SIMD_VNNI) check_convs(simd, CPU_SIMD_AVX2, 0);
    for (int i = 0; i < N_CONV_SHAPES; i++) { /* every codec variant this CPU runs */
        check_conv_rows(CPU_SIMD_PORTABLE, &CONV_SHAPES[i]);
        if (simd == CPU_SIMD_VNNI) check_conv_rows(CPU_SIMD_AVX2, &CONV_SHAPES[i]);
        check_conv_rows(simd, &CONV_SHAPES[i]);
    }

    /* ELU: the variants agree to FMA rounding, and both stay within 2 ulp of expm1f */
    size_t n = 4099;
    float *x = randv(n, 12.0f), *y[2];
    for (size_t i = 0; i < n; i++) x[i] -= 6.0f;
    x[0] = NAN;
    x[1] = -INFINITY;
    x[2] = -1e-30f;
    for (int v = 0; v < 2; v++) {
        y[v] = malloc(sizeof(float) * n);
        set_simd(v ? simd : CPU_SIMD_PORTABLE);
        be->ops->elu(be, x, y[v], n);
    }
    double ulps = isnan(y[0][0]) && isnan(y[1][0]) ? 0 : INFINITY;
    for (size_t i = 1; i < n; i++)
        for (int v = 0; v < 2; v++) {
            float want = x[i] > 0 ? x[i] : expm1f(x[i]), ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
            ulps = fmax(ulps, fabs((double)y[v][i] - want) / ulp);
        }
    if (ulps > 2) fprintf(stderr, "elu: %g ulp from expm1f\n", ulps);
    TEST_COND("elu within 2 ulp of expm1f", ulps <= 2);
    free(y[0]);
    free(y[1]);
    free(x);

    /* RVQ nearest: the same code from both */
    int bins = 300, dim = 24;
    float *cb = randv((size_t)bins * dim, 1.0f), *cb_sq = malloc(sizeof(float) * bins), *q = randv((size_t)dim, 1.0f);
    for (int i = 0; i < bins; i++) {
        cb_sq[i] = 0;
        for (int d = 0; d < dim; d++) cb_sq[i] += cb[i * dim + d] * cb[i * dim + d];
    }
    int32_t code[2];
    for (int v = 0; v < 2; v++) {
        set_simd(v ? simd : CPU_SIMD_PORTABLE);
        be->ops->vq_nearest(be, cb, cb_sq, bins, dim, q, 1, 0, &code[v], 1);
    }
    TEST_COND("vq nearest code", code[0] == code[1]);

    /* 11 rows in one call (a group of 8 and one of 3) against each row alone, subtracting: the same
     * codes and residuals bit for bit */
    enum { VQ_CALL_ROWS = 11 };
    float *rows = randv((size_t)VQ_CALL_ROWS * dim, 1.0f), *alone = malloc(sizeof(float) * VQ_CALL_ROWS * dim);
    memcpy(alone, rows, sizeof(float) * VQ_CALL_ROWS * dim);
    int32_t batched_codes[VQ_CALL_ROWS][2], alone_codes[VQ_CALL_ROWS][2];
    set_simd(simd);
    be->ops->vq_nearest(be, cb, cb_sq, bins, dim, rows, VQ_CALL_ROWS, 1, &batched_codes[0][1], 2);
    for (int r = 0; r < VQ_CALL_ROWS; r++)
        be->ops->vq_nearest(be, cb, cb_sq, bins, dim, alone + r * dim, 1, 1, &alone_codes[r][1], 2);
    int same = memcmp(rows, alone, sizeof(float) * VQ_CALL_ROWS * dim) == 0;
    for (int r = 0; r < VQ_CALL_ROWS; r++) same &= batched_codes[r][1] == alone_codes[r][1];
    TEST_COND("vq nearest: 11 rows in one call as each alone", same);
    free(rows);
    free(alone);
    free(cb);
    free(cb_sq);
    free(q);
}

/* One query against a ring of each format, in both variants, after `fill` keys were stored
 * (the ring wraps once fill exceeds capacity; window < capacity hides the oldest). The float
 * loop and the portable double loop differ by float rounding of the scores and the weighted
 * sums: at most 1e-7 absolute measured, with keys and values below VALUE_MAX; 1e-6·VALUE_MAX
 * leaves margin, and a wrong slot, scale or block boundary gives errors above 1e-3. */
#define VALUE_MAX 2.0f
static void check_attn(cpu_simd simd, pp_kv_format fmt, int heads, int head_dim, int capacity, int window, int fill) {
    size_t dim = (size_t)heads * head_dim, size = pp_kv_elem_bytes(fmt);
    float *qkv = randv(3 * dim, 1.0f), *out[2];
    double err = 0;
    for (int v = 0; v < 2; v++) {
        pp_kv_ring r = {.fmt = fmt, .capacity = capacity, .window = window};
        r.k = calloc((size_t)capacity * dim, size), r.v = calloc((size_t)capacity * dim, size);
        r.kscale = calloc((size_t)capacity * heads, sizeof(float)),
        r.vscale = calloc((size_t)capacity * heads, sizeof(float));
        out[v] = malloc(sizeof(float) * dim);
        uint64_t keep = rng;
        set_simd(v ? simd : CPU_SIMD_PORTABLE);
        for (int64_t p = 0; p < fill; p++) { /* the same keys and values in both runs */
            for (size_t i = dim; i < 3 * dim; i++) qkv[i] = frand() * VALUE_MAX;
            be->ops->attn_rows(be, qkv, 1, heads, head_dim, 0.0f, &r, NULL, 0, &p, out[v]);
        }
        if (v == 0) rng = keep;
        free(r.k), free(r.v), free(r.kscale), free(r.vscale);
    }
    for (size_t i = 0; i < dim; i++) {
        err = fmax(err, fabs((double)out[1][i] - out[0][i]));
    }
    char what[96];
    snprintf(what, sizeof what, "attention %s heads %d x %d, capacity %d window %d, %d keys",
             fmt == PP_KV_INT8   ? "int8"
             : fmt == PP_KV_BF16 ? "bf16"
                                 : "f32",
             heads, head_dim, capacity, window, fill);
    if (!(err <= 1e-6 * VALUE_MAX)) fprintf(stderr, "%s: |diff| %g\n", what, err);
    TEST_COND(what, err <= 1e-6 * VALUE_MAX);
    free(out[0]), free(out[1]), free(qkv);
}

static void test_attention(cpu_simd simd) {
    for (pp_kv_format f = PP_KV_F32; f <= PP_KV_INT8; f++) {
        check_attn(simd, f, 4, 128, 3000, 3000, 1);    /* one key */
        check_attn(simd, f, 4, 128, 3000, 3000, 77);   /* a partial block */
        check_attn(simd, f, 2, 128, 3000, 3000, 3000); /* the full temporal context */
        check_attn(simd, f, 3, 64, 100, 100, 250);     /* the ring wrapped: blocks split at its end */
        check_attn(simd, f, 2, 64, 1000, 1000, 1700);  /* wrapped, and split across the pool's tasks */
        check_attn(simd, f, 2, 24, 50, 40, 123);       /* a window inside the ring, head size 24 */
        check_attn(simd, f, 1, 8, 64, 64, 70);         /* one head of one vector */
        check_attn(simd, f, 3, 20, 64, 64, 33);        /* heads of 20: the portable loop takes them */
    }
}

/* NF2's rotation of the activations: the SIMD transform against pp_quant_fwht, bit for bit
 * (the same additions in the same stages), for every power of two it takes. */
static void test_fwht(void) {
#if CPU_HAVE_AVX2 || CPU_HAVE_NEON
#if CPU_HAVE_AVX2
    void (*fwht)(float *, int) = pp_cpu_fwht_avx2;
#else
    void (*fwht)(float *, int) = pp_cpu_fwht_neon;
#endif
    for (int n = 8; n <= QUANT_MAX_NP2; n *= 2) {
        float a[QUANT_MAX_NP2], b[QUANT_MAX_NP2];
        for (int i = 0; i < n; i++) a[i] = b[i] = frand() * 3.0f;
        pp_quant_fwht(a, n);
        fwht(b, n);
        char what[64];
        snprintf(what, sizeof what, "fwht n %d: SIMD equals portable bit for bit", n);
        TEST_COND(what, memcmp(a, b, sizeof(float) * (size_t)n) == 0);
    }
#endif
}

int main(void) {
    char err[PP_ERR_LEN];
    if (pp_backend_cpu_create(2, &be, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    cpu_simd best = cpu_simd_of(be);
    if (best == CPU_SIMD_PORTABLE) {
        pp_backend_destroy(be);
        TEST_SKIP("this CPU (or PP_CPU_SIMD) runs only the portable loops");
    }
    /* on x86-64 every variant up to the best: the AVX2 float loops still run the formats and
     * layouts the integer loops do not take, and every product when PP_CPU_SIMD=avx2; a VNNI
     * machine also checks AVX2's integer loops */
    for (cpu_simd s = CPU_SIMD_PORTABLE + 1; s <= best; s++) {
        if (!pp_cpu_simd_includes(best, s)) continue;
        printf("comparing %s against portable\n", pp_cpu_simd_name(s));
        test_matmul(s);
    }
    test_fwht();
    if (best != CPU_SIMD_NEON) test_codec(best); /* on aarch64 the codec has only its portable loops */
    test_attention(best);
    pp_backend_destroy(be);
    return test_report();
}
