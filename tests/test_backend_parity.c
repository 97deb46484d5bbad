/* test_backend_parity: every operation of the backend table, CPU (the reference) against CUDA,
 * on the same fixed-seed random inputs; quantized weights are made by the project's own
 * quantizers (io/quant.h). Each comparison is a normalised mean squared error,
 * NMSE = Σ(gpu − cpu)² / Σ cpu², under a per-operation limit given with its reason below.
 * Skips (exit 77) when the build has no CUDA backend or the machine has no GPU.
 *
 * Limits (both sides compute in fp32; the kernels sum in other orders than the CPU loops):
 *   EXACT    0      data movement and single roundings (transpose, KV append, embedding rows
 *                   of dense / INT4 / NF4 tables, add, vq_add_row): the same on both sides
 *   ELEM     1e-12  elementwise libm (expf, expm1f, erff, sincosf) and fused multiply-adds
 *                   (nvcc contracts a·b + c, the C build does not): a few ulp apart at most
 *                   (relative 1e-7 => NMSE ~1e-14)
 *   REDUCE   1e-10  reductions over up to a few thousand fp32 terms in another order
 *                   (matmul, norms, attention, convolutions): relative error ~1e-6 per output
 *                   at worst, NMSE ~1e-12 typically; a wrong index or scale gives > 1e-2
 *   TENSOR   1e-9   products of more than 8 inputs on tensor cores (3xTF32, kernels/gemm_tc.cuh):
 *                   the emulation's exact fp32 adds give ~3e-13, but an H200's tensor cores
 *                   add with rounding of their own: up to 1.2e-10 measured (NF2's element path,
 *                   768 columns), more over longer rows
 * Tokens (sample, vq_nearest codes) must be identical. */
#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXACT 0.0
#define ELEM 1e-12
#define REDUCE 1e-10
#define TENSOR 1e-9
/* NF2, INT4 and NF4 products of 1..8 inputs round the activations to int16 per chunk of 64
 * (INT4 32) on the device (kernels/gemv_int.cuh), as the CPU's integer loops do but its float
 * loops do not: an error of ~1.5e-5 of a chunk's largest input per input, nmse ~3e-10 against the
 * float loops; NF4 also its table to 1/32639 of the absmax and leaves out the low bytes' product
 * (nmse 5e-10 to 2e-9). NF2 and INT4 past 8 inputs too: the integer tensor cores take the same
 * rounded activations (kernels/gemm_int.cuh). A misplaced code or activation costs nmse ~1. */
#define ROUNDED 1e-8

/* The temporal transformer's 3000-slot ring on a GPU; the CPU emulation of the CUDA backend
 * (tests/cuda_emu) takes a 300-slot ring, still wrapped and cut into several splits. */
#ifndef PARITY_LONG_CONTEXT
#define PARITY_LONG_CONTEXT 3000
#endif

static pp_backend *cpu, *gpu;

/* ---- random inputs and helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) v[i] = frand() * scale;
    return v;
}

/* Backend copy of host floats. */
static float *put(pp_backend *be, const float *h, size_t n) {
    float *d = be->ops->alloc(be, n * sizeof *d);
    if (d) be->ops->upload(be, d, h, n * sizeof *d);
    return d;
}

static float *get(pp_backend *be, const float *d, size_t n) {
    float *h = malloc(n * sizeof *h);
    if (h) be->ops->download(be, h, d, n * sizeof *h);
    return h;
}

static double nmse(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (num != num) return INFINITY;
    return den > 0 ? num / den : num;
}

/* The NMSE of a result in one backend's memory against a reference in another's (or the same
 * one's), both downloaded; infinite without memory. */
static double nmse_between(pp_backend *be, const float *x, pp_backend *ref_be, const float *ref, size_t n) {
    float *g = get(be, x, n), *c = get(ref_be, ref, n);
    double e = g && c ? nmse(g, c, n) : INFINITY;
    free(g);
    free(c);
    return e;
}

static double result_nmse(const float *on_gpu, const float *on_cpu, size_t n) {
    return nmse_between(gpu, on_gpu, cpu, on_cpu, n);
}

/* One device result against another: a device pointer is no host buffer on a GPU. */
static double device_nmse(const float *a, const float *ref, size_t n) { return nmse_between(gpu, a, gpu, ref, n); }

/* Reports an NMSE and checks it against limit. */
static void check_nmse(const char *what, double e, double limit) {
    printf("  %-44s nmse %.2e (limit %.0e)\n", what, e, limit);
    TEST_COND(what, e <= limit);
}

/* Downloads both results and checks their NMSE against limit. */
static void compare(const char *what, const float *on_gpu, const float *on_cpu, size_t n, double limit) {
    check_nmse(what, result_nmse(on_gpu, on_cpu, n), limit);
}

/* A host buffer on both backends. */
typedef struct {
    float *c, *g;
    size_t n;
} twin;

static twin twin_of(const float *h, size_t n) { return (twin){put(cpu, h, n), put(gpu, h, n), n}; }

static twin twin_rand(size_t n, float scale) {
    float *h = rand_vec(n, scale);
    twin t = twin_of(h, n);
    free(h);
    return t;
}

static void twin_free(twin *t) {
    cpu->ops->release(cpu, t->c);
    gpu->ops->release(gpu, t->g);
}

/* ---- weights ---- */

typedef struct {
    pp_weight host, c, g;
    void *data, *scales, *nested;
    float map[256], table[16];
} held;

/* make_weight's `nested` for NF4: the absmax nested (1), and the value table a file's own, three
 * times bitsandbytes' (2; the codes and absmax as for 1, so the weight is three times larger). */
enum { NF4_NESTED = 1, NF4_NESTED_OWN_TABLE = 2 };

/* A rows × cols weight in format fmt from Gaussian-like values, quantized by io/quant.h. */
static int make_weight(pp_wformat fmt, int64_t rows, int64_t cols, int group, int np2, int nested, held *h) {
    size_t n = (size_t)(rows * cols), groups = group ? n / (size_t)group : 0;
    float *src = rand_vec(n, 0.05f);
    memset(h, 0, sizeof *h);
    h->host = (pp_weight){.fmt = fmt, .rows = rows, .cols = cols, .group = group, .np2 = np2,
                          .name = pp_wformat_name(fmt)};
    if (fmt == PP_WF_F32) {
        h->data = src;
        src = NULL;
    } else if (fmt <= PP_WF_BF16) {
        uint16_t *d = h->data = malloc(n * 2);
        for (size_t i = 0; i < n; i++) d[i] = fmt == PP_WF_F16 ? pp_f32_to_f16(src[i]) : pp_f32_to_bf16(src[i]);
    } else if (fmt == PP_WF_NF2 || fmt == PP_WF_INT4) {
        h->data = malloc(fmt == PP_WF_NF2 ? n / 4 : n / 2);
        h->scales = malloc(groups * 2);
        if (fmt == PP_WF_NF2)
            pp_quant_nf2_quantize(src, (int64_t)groups, group, np2, h->data, h->scales);
        else
            pp_quant_int4_quantize(src, (int64_t)groups, group, h->data, h->scales);
    } else if (fmt == PP_WF_INT8) {
        h->data = malloc(n);
        h->scales = malloc(groups * sizeof(float));
        pp_quant_int8_quantize(src, rows, cols, group, h->data, h->scales);
    } else if (pp_wformat_block_bytes(fmt)) { /* ggml blocks hold their scales */
        h->data = malloc(groups * (size_t)pp_wformat_block_bytes(fmt));
        if (fmt == PP_WF_Q4_0)
            pp_quant_q4_0_quantize(src, (int64_t)groups, h->data);
        else if (fmt == PP_WF_Q8_0)
            pp_quant_q8_0_quantize(src, (int64_t)groups, h->data);
        else
            pp_quant_q4_k_quantize(src, (int64_t)groups, h->data);
    } else {
        float *absmax = malloc(groups * sizeof *absmax);
        h->data = malloc(n / 2);
        pp_quant_nf4_quantize(src, (int64_t)groups, group, h->data, absmax);
        h->host.quant_map = pp_quant_nf4_table;
        if (nested == NF4_NESTED_OWN_TABLE) {
            for (int c = 0; c < 16; c++) h->table[c] = 3.0f * pp_quant_nf4_table[c];
            h->host.quant_map = h->table;
        }
        if (nested) {
            size_t nb = (groups + 255) / 256;
            h->scales = malloc(groups);
            h->nested = malloc(nb * sizeof(float));
            pp_quant_nf4_dynamic_map(h->map);
            h->host.nested_offset = pp_quant_nf4_nest(absmax, (int64_t)groups, 256, h->map, h->scales, h->nested);
            h->host.nested_absmax = h->nested;
            h->host.nested_map = h->map;
            h->host.nested_block = 256;
            free(absmax);
        } else {
            h->scales = absmax;
        }
    }
    free(src);
    h->host.data = h->data;
    h->host.scales = h->scales;
    char err[PP_ERR_LEN];
    int rc = cpu->ops->weight_upload(cpu, &h->host, &h->c, err);
    if (!rc) rc = gpu->ops->weight_upload(gpu, &h->host, &h->g, err);
    if (rc) fprintf(stderr, "weight_upload: %s\n", err);
    return rc;
}

static void held_free(held *h) {
    cpu->ops->weight_release(cpu, &h->c);
    gpu->ops->weight_release(gpu, &h->g);
    free(h->data);
    free(h->scales);
    free(h->nested);
}

typedef struct {
    pp_wformat fmt;
    int group, np2, nested;
    const char *what;
} wcase;

static const wcase wcases[] = {
    {PP_WF_F32, 0, 0, 0, "f32"},
    {PP_WF_F16, 0, 0, 0, "f16"},
    {PP_WF_BF16, 0, 0, 0, "bf16"},
    {PP_WF_NF2, 128, 128, 0, "nf2 g128"},
    {PP_WF_NF2, 96, 128, 0, "nf2 g96/np2 128 (element path)"},
    {PP_WF_INT4, 64, 0, 0, "int4 g64"},
    {PP_WF_NF4, 64, 0, 0, "nf4 f32 absmax"},
    {PP_WF_NF4, 64, 0, NF4_NESTED, "nf4 nested absmax"},
    {PP_WF_NF4, 64, 0, NF4_NESTED_OWN_TABLE, "nf4 nested, a table of largest 3"},
    {PP_WF_Q4_0, 32, 0, 0, "q4_0 (element GEMV)"},
    {PP_WF_Q8_0, 32, 0, 0, "q8_0 (element GEMV)"},
    {PP_WF_Q4K, 256, 0, 0, "q4_k"},
    {PP_WF_INT8, 512, 0, 0, "int8 per row"},
    {PP_WF_INT8, 128, 0, 0, "int8 block 128"},
};

/* norm_matmul on weight h: h = the norm of x, y = h·wᵀ (NF2, INT4 and NF4 in one normalizing and
 * preparing kernel where the integer product takes the weight), x untouched. */
static void test_norm_matmul(const wcase *wc, const held *h, int n, double limit) {
    const int64_t d = h->c.cols, rows = h->c.rows;
    twin x = twin_rand((size_t)n * d, 2.0f), a = twin_rand((size_t)d, 1.0f);
    twin hn = twin_rand((size_t)n * d, 0), y = twin_rand((size_t)n * rows, 0);
    char what[96];
    cpu->ops->norm_matmul(cpu, x.c, a.c, n, (int)d, 1e-8f, hn.c, &h->c, y.c);
    gpu->ops->norm_matmul(gpu, x.g, a.g, n, (int)d, 1e-8f, hn.g, &h->g, y.g);
    snprintf(what, sizeof what, "norm_matmul %s n=%d: x", wc->what, n);
    compare(what, x.g, x.c, (size_t)n * d, EXACT);
    snprintf(what, sizeof what, "norm_matmul %s n=%d: h", wc->what, n);
    compare(what, hn.g, hn.c, (size_t)n * d, REDUCE);
    snprintf(what, sizeof what, "norm_matmul %s n=%d: y", wc->what, n);
    compare(what, y.g, y.c, (size_t)n * rows, limit);
    twin_free(&x);
    twin_free(&a);
    twin_free(&hn);
    twin_free(&y);
}

/* Weights marked latency-bound (the depformer's): NF2, INT4 and NF4 products prepare their inputs in
 * each block of the product, one launch instead of two. Against the CPU at the integer products'
 * tolerance, and against the same weight unmarked on the device: the same prepared values, so
 * the same bits (the normalised product's 1/rms sums in another order: within REDUCE). Rows of
 * two slices, and n = 5 and 8 run the 4-input instance twice. */
static void test_latency_bound(pp_wformat fmt, int group, int np2, int nested, const char *name) {
    const int64_t rows = 200, cols = 1536;
    held h;
    if (make_weight(fmt, rows, cols, group, np2, nested, &h)) {
        TEST_COND("weight upload", 0);
        return;
    }
    pp_weight marked = h.g;
    marked.latency_bound = 1;
    static const int batches[] = {1, 2, 3, 5, 8};
    for (int b = 0; b < (int)(sizeof batches / sizeof batches[0]); b++) {
        const int n = batches[b];
        twin x = twin_rand((size_t)n * cols, 1.0f), u = twin_rand((size_t)n * 2 * cols, 3.0f);
        twin a = twin_rand((size_t)cols, 1.0f), hn = twin_rand((size_t)n * cols, 0);
        twin r = twin_rand((size_t)n * rows, 4.0f);
        float *plain = gpu->ops->alloc(gpu, (size_t)n * rows * sizeof(float));
        char what[112];
        for (int op = 0; op < 3; op++) {
            static const char *const ops[] = {"matmul_add", "matmul_silu_add", "norm_matmul"};
            twin_free(&r);
            r = twin_rand((size_t)n * rows, 4.0f);
            gpu->ops->copy(gpu, plain, r.g, (size_t)n * rows * sizeof(float));
            uint64_t nodes = gpu->ops->nodes_run(gpu);
            if (op == 0) {
                cpu->ops->matmul_add(cpu, &h.c, x.c, n, r.c);
                gpu->ops->matmul_add(gpu, &marked, x.g, n, r.g);
                nodes = gpu->ops->nodes_run(gpu) - nodes;
                gpu->ops->matmul_add(gpu, &h.g, x.g, n, plain);
            } else if (op == 1) {
                cpu->ops->matmul_silu_add(cpu, &h.c, u.c, n, r.c);
                gpu->ops->matmul_silu_add(gpu, &marked, u.g, n, r.g);
                nodes = gpu->ops->nodes_run(gpu) - nodes;
                gpu->ops->matmul_silu_add(gpu, &h.g, u.g, n, plain);
            } else {
                cpu->ops->norm_matmul(cpu, x.c, a.c, n, (int)cols, 1e-8f, hn.c, &h.c, r.c);
                gpu->ops->norm_matmul(gpu, x.g, a.g, n, (int)cols, 1e-8f, hn.g, &marked, r.g);
                nodes = gpu->ops->nodes_run(gpu) - nodes;
                snprintf(what, sizeof what, "latency-bound norm_matmul %s n=%d: h", name, n);
                compare(what, hn.g, hn.c, (size_t)n * cols, REDUCE);
                gpu->ops->norm_matmul(gpu, x.g, a.g, n, (int)cols, 1e-8f, hn.g, &h.g, plain);
            }
            snprintf(what, sizeof what, "latency-bound %s %s n=%d", ops[op], name, n);
            compare(what, r.g, r.c, (size_t)n * rows, ROUNDED);
            /* the same integer sums as the GEMV's, but the unmarked weight takes the tensor cores
             * from a few inputs on (kernels/gemm_int.cuh), which add the chunks in another order */
            snprintf(what, sizeof what, "  against the unmarked weight on the device");
            check_nmse(what, device_nmse(r.g, plain, (size_t)n * rows), op == 2 || n > 3 ? REDUCE : EXACT);
            snprintf(what, sizeof what, "latency-bound %s %s n=%d: one launch", ops[op], name, n);
            TEST_COND(what, nodes == 1);
        }
        gpu->ops->release(gpu, plain);
        twin *t[] = {&x, &u, &a, &hn, &r};
        for (int i = 0; i < 5; i++) twin_free(t[i]);
    }
    held_free(&h);
}

/* embed_sum over 17 tables (the LM's input) for 3 inputs, ids of every kind (-1, past the end,
 * other negatives): all NF2 (one launch), no NF2 (one launch, int4 and nf4 mixed), NF2 among
 * others (one launch per table); against the CPU and, on the device, against embed then embed
 * with accumulate table by table (the same sums in the same order: the same bits, except where
 * the one NF2 launch is a kernel of its own, whose multiply-adds nvcc contracts its own way:
 * 7e-15 on an H200, the same bits in the emulation, which is built without contraction). */
static void test_embed_sum(void) {
    enum { TABLES = 17, N = 3, ROWS = 40, COLS = 256 };
    static const struct {
        const char *what;
        pp_wformat fmt[2]; /* even, odd tables */
        long launches;
    } cases[] = {{"nf2", {PP_WF_NF2, PP_WF_NF2}, 1},
                 {"int4 and nf4", {PP_WF_INT4, PP_WF_NF4}, 1},
                 {"nf2 and bf16", {PP_WF_NF2, PP_WF_BF16}, TABLES}};
    for (int c = 0; c < 3; c++) {
        held h[TABLES];
        const pp_weight *tc[TABLES], *tg[TABLES];
        int rows[TABLES], ok = 1;
        for (int t = 0; t < TABLES; t++) {
            pp_wformat f = cases[c].fmt[t & 1];
            ok &= make_weight(f, ROWS, COLS,
                              f == PP_WF_NF2    ? 128
                              : f == PP_WF_BF16 ? 0
                                                : 64,
                              f == PP_WF_NF2 ? 128 : 0, 0, &h[t]) == 0;
            tc[t] = &h[t].c;
            tg[t] = &h[t].g;
            rows[t] = (t + 1) % TABLES; /* the model's order: row 0 last */
        }
        TEST_COND("embed_sum tables uploaded", ok);
        int32_t ids[TABLES * N];
        for (int i = 0; i < TABLES * N; i++)
            ids[i] = i % 7 == 3 ? -1 : i % 11 == 5 ? ROWS + 2 : i % 13 == 6 ? -5 : (i * 7) % ROWS;
        int32_t *gids = gpu->ops->alloc(gpu, sizeof ids);
        gpu->ops->upload(gpu, gids, ids, sizeof ids);
        twin y = twin_rand((size_t)N * COLS, 1.0f);
        float *one_by_one = gpu->ops->alloc(gpu, (size_t)N * COLS * sizeof(float));
        cpu->ops->embed_sum(cpu, tc, rows, TABLES, ids, N, y.c);
        uint64_t nodes = gpu->ops->nodes_run(gpu);
        gpu->ops->embed_sum(gpu, tg, rows, TABLES, gids, N, y.g);
        nodes = gpu->ops->nodes_run(gpu) - nodes;
        for (int t = 0; t < TABLES; t++) gpu->ops->embed(gpu, tg[t], gids + (size_t)rows[t] * N, N, one_by_one, t > 0);
        char what[96];
        snprintf(what, sizeof what, "embed_sum %s, %d tables", cases[c].what, TABLES);
        compare(what, y.g, y.c, (size_t)N * COLS, ELEM);
        const double same = cases[c].fmt[0] == PP_WF_NF2 && cases[c].launches == 1 ? ELEM : EXACT;
        check_nmse("  against embed table by table on the device", device_nmse(y.g, one_by_one, (size_t)N * COLS),
                   same);
        snprintf(what, sizeof what, "embed_sum %s: %ld launches", cases[c].what, cases[c].launches);
        TEST_COND(what, nodes == (uint64_t)cases[c].launches);
        twin_free(&y);
        gpu->ops->release(gpu, one_by_one);
        gpu->ops->release(gpu, gids);
        for (int t = 0; t < TABLES; t++) held_free(&h[t]);
    }
}

/* matmul at batch 1, 2, 3, 8 (the batched kernels), 12, 20 and 70 (tensor cores: part of one tile
 * of inputs, the integer product's 16- and 32-input tiles, then two blocks of inputs; f32 weights:
 * cuBLAS), on a row view (elem0 > 0) and on a misaligned input (the one-element-at-a-time kernel). */
static void test_matmul(const wcase *wc) {
    const int64_t rows = 200, cols = wc->group == 96 ? 768 : 512;
    held h;
    if (make_weight(wc->fmt, rows, cols, wc->group, wc->np2, wc->nested, &h)) {
        TEST_COND("weight upload", 0);
        return;
    }
    static const int batches[] = {1, 2, 3, 8, 12, 20, 70}; /* each kernel instance of n <= 8, and the GEMMs' */
    for (int b = 0; b < (int)(sizeof batches / sizeof batches[0]); b++) {
        int n = batches[b];
        twin x = twin_rand((size_t)n * cols + 1, 1.0f), y = twin_rand((size_t)n * rows, 0);
        char what[96];
        cpu->ops->matmul(cpu, &h.c, x.c, n, y.c);
        gpu->ops->matmul(gpu, &h.g, x.g, n, y.g);
        snprintf(what, sizeof what, "matmul %s n=%d", wc->what, n);
        const int rounds_inputs = wc->fmt == PP_WF_NF2 || wc->fmt == PP_WF_INT4 || wc->fmt == PP_WF_NF4;
        const int imma = rounds_inputs && wc->fmt != PP_WF_NF4; /* past 8 inputs too (gemm_int.cuh) */
        double limit = n > 8 && !imma ? (wc->fmt == PP_WF_F32 ? REDUCE : TENSOR) : rounds_inputs ? ROUNDED : REDUCE;
        compare(what, y.g, y.c, (size_t)n * rows, limit);
        pp_weight vc = pp_weight_rows(&h.c, 64, 100), vg = pp_weight_rows(&h.g, 64, 100);
        cpu->ops->matmul(cpu, &vc, x.c + 1, n, y.c);
        gpu->ops->matmul(gpu, &vg, x.g + 1, n, y.g);
        snprintf(what, sizeof what, "matmul %s n=%d rows 64.. x+1", wc->what, n);
        compare(what, y.g, y.c, (size_t)n * 100, limit);
        /* the residual adds: r (the same on both sides) += the product; the gated FFN's with
         * silu(g)·v formed on the way in */
        twin r = twin_rand((size_t)n * rows, 4.0f), u = twin_rand((size_t)n * 2 * cols, 3.0f);
        cpu->ops->matmul_add(cpu, &h.c, x.c, n, r.c);
        gpu->ops->matmul_add(gpu, &h.g, x.g, n, r.g);
        snprintf(what, sizeof what, "matmul_add %s n=%d", wc->what, n);
        compare(what, r.g, r.c, (size_t)n * rows, limit);
        twin_free(&r);
        r = twin_rand((size_t)n * rows, 4.0f);
        cpu->ops->matmul_silu_add(cpu, &h.c, u.c, n, r.c);
        gpu->ops->matmul_silu_add(gpu, &h.g, u.g, n, r.g);
        snprintf(what, sizeof what, "matmul_silu_add %s n=%d", wc->what, n);
        compare(what, r.g, r.c, (size_t)n * rows, limit);
        twin_free(&r);
        twin_free(&u);
        test_norm_matmul(wc, &h, n, limit);
        twin_free(&x);
        twin_free(&y);
    }
    /* Embedding rows: −1 and past-the-end ids give zeros, other negatives row 0. */
    int32_t ids[5] = {3, -1, 199, 250, -7}, *gids = gpu->ops->alloc(gpu, sizeof ids);
    gpu->ops->upload(gpu, gids, ids, sizeof ids); /* ids live in backend memory (host memory on the CPU) */
    twin y = twin_rand(5 * (size_t)cols, 1.0f);
    for (int acc = 0; acc < 2; acc++) {
        char what[96];
        cpu->ops->embed(cpu, &h.c, ids, 5, y.c, acc);
        gpu->ops->embed(gpu, &h.g, gids, 5, y.g, acc);
        snprintf(what, sizeof what, "embed %s%s", wc->what, acc ? " accumulate" : "");
        /* NF2 rows go through a 128-point transform on both sides in the same order. */
        compare(what, y.g, y.c, 5 * (size_t)cols, wc->fmt == PP_WF_NF2 ? ELEM : EXACT);
    }
    gpu->ops->release(gpu, gids);
    twin_free(&y);
    held_free(&h);
}

/* ---- LM operations ---- */

static void test_lm_ops(void) {
    const int d = 256;
    twin x = twin_rand(3 * (size_t)d, 2.0f), a = twin_rand((size_t)d, 1.0f), y = twin_rand(3 * (size_t)d, 0);
    cpu->ops->rmsnorm(cpu, x.c, a.c, 3, d, 1e-8f, y.c);
    gpu->ops->rmsnorm(gpu, x.g, a.g, 3, d, 1e-8f, y.g);
    compare("rmsnorm 3x256", y.g, y.c, 3 * (size_t)d, REDUCE);
    /* add from the same addends on both sides (the rmsnorm outputs differ in the last bits). */
    twin s = twin_rand(3 * (size_t)d, 1.0f);
    cpu->ops->add(cpu, s.c, x.c, 3 * (size_t)d);
    gpu->ops->add(gpu, s.g, x.g, 3 * (size_t)d);
    compare("add", s.g, s.c, 3 * (size_t)d, EXACT);

    twin_free(&x);
    twin_free(&a);
    twin_free(&y);
    twin_free(&s);
}

/* Bytes of two backend buffers that differ. */
static size_t bytes_differing(const void *on_gpu, const void *on_cpu, size_t bytes) {
    unsigned char *g = malloc(bytes), *c = malloc(bytes);
    size_t diff = bytes;
    if (g && c) {
        gpu->ops->download(gpu, g, on_gpu, bytes);
        cpu->ops->download(cpu, c, on_cpu, bytes);
        diff = 0;
        for (size_t i = 0; i < bytes; i++) diff += g[i] != c[i];
    }
    free(g);
    free(c);
    return diff;
}

/* A ring of fmt on backend be (window = capacity − 1, the reference's ring quirk). */
static pp_kv_ring ring_make(pp_backend *be, pp_kv_format fmt, int capacity, int dim, int heads) {
    size_t elem = pp_kv_elem_bytes(fmt);
    pp_kv_ring r = {.fmt = fmt, .capacity = capacity, .window = capacity - 1};
    r.k = be->ops->alloc(be, (size_t)capacity * dim * elem);
    r.v = be->ops->alloc(be, (size_t)capacity * dim * elem);
    if (fmt == PP_KV_INT8) {
        r.kscale = be->ops->alloc(be, (size_t)capacity * heads * sizeof(float));
        r.vscale = be->ops->alloc(be, (size_t)capacity * heads * sizeof(float));
    }
    return r;
}

static void ring_free(pp_backend *be, pp_kv_ring *r) {
    void *p[] = {r->k, r->v, r->kscale, r->vscale};
    for (int i = 0; i < 4; i++)
        if (p[i]) be->ops->release(be, p[i]);
}

/* Hand-overs (kernels.h's pk_next): a transformer layer's chain of products on the device, each
 * integer product's input prepared by the blocks of the operation before as they finish. The
 * residual product then the normalized FFN input product, the gated output product, and the next
 * layer's normalized product: against the CPU at the integer products' tolerance, and in
 * launches: the first product's preparation and the four products (not a preparation before
 * each). Rows of n = 1, 3 and 8 inputs (NF2 2: from 4 on its products take the tensor cores,
 * kernels/gemm_int.cuh, which hand nothing over); INT4's hidden width takes slices of 128. Then the
 * attention handing its heads to the output projection: NF2's slices of 128 take two
 * 64-wide heads each (a slice completed by two blocks), INT4's of 256 all four, across a ring
 * cut into several splits (the merging block hands over) and its first steps (one split). */
static void test_hand_over(pp_wformat fmt, int group, int np2, int nested, const char *name) {
    enum { D = 256, HID = 384, HEADS = 4, HD = 64, CAP = 300, STEPS = 140 };
    held wo, wi, wf, wq;
    if (make_weight(fmt, D, D, group, np2, nested, &wo) || make_weight(fmt, 2 * HID, D, group, np2, nested, &wi) ||
        make_weight(fmt, D, HID, group, np2, nested, &wf) || make_weight(fmt, 3 * D, D, group, np2, nested, &wq)) {
        TEST_COND("weight upload", 0);
        return;
    }
    const int batches[] = {1, 3, fmt == PP_WF_NF2 ? 2 : 8};
    char what[112];
    for (int b = 0; b < (int)(sizeof batches / sizeof batches[0]); b++) {
        const int n = batches[b];
        twin a = twin_rand((size_t)n * D, 1.0f), x = twin_rand((size_t)n * D, 2.0f);
        twin al1 = twin_rand(D, 1.0f), al2 = twin_rand(D, 1.0f), h1 = twin_rand((size_t)n * D, 0),
             h2 = twin_rand((size_t)n * D, 0), u = twin_rand((size_t)n * 2 * HID, 0),
             y = twin_rand((size_t)n * 3 * D, 0);
        /* run 0 on the CPU; on the device run 1 warms up (its buffers grow, as in a frame's first
         * plain run) on a copy of x, run 2 counts */
        float *x_warm = gpu->ops->alloc(gpu, (size_t)n * D * sizeof(float));
        gpu->ops->copy(gpu, x_warm, x.g, (size_t)n * D * sizeof(float));
        uint64_t nodes = 0;
        for (int k = 0; k < 3; k++) {
            const int g = k > 0;
            pp_backend *be = g ? gpu : cpu;
            const pp_backend_ops *op = be->ops;
            float *xs = k == 0 ? x.c : k == 1 ? x_warm : x.g;
            if (k == 2) nodes = op->nodes_run(be);
            op->matmul_add(be, g ? &wo.g : &wo.c, g ? a.g : a.c, n, xs);
            op->norm_matmul(be, xs, g ? al1.g : al1.c, n, D, 1e-6f, g ? h1.g : h1.c, g ? &wi.g : &wi.c, g ? u.g : u.c);
            op->matmul_silu_add(be, g ? &wf.g : &wf.c, g ? u.g : u.c, n, xs);
            op->norm_matmul(be, xs, g ? al2.g : al2.c, n, D, 1e-6f, g ? h2.g : h2.c, g ? &wq.g : &wq.c, g ? y.g : y.c);
            if (k == 2) nodes = op->nodes_run(be) - nodes;
        }
        const twin *out[] = {&h1, &u, &x, &h2, &y};
        static const char *const names[] = {"h of the FFN norm", "u", "x", "h of the next norm", "y"};
        for (int i = 0; i < 5; i++) {
            snprintf(what, sizeof what, "hand-over %s n=%d: %s", name, n, names[i]);
            compare(what, out[i]->g, out[i]->c, out[i]->n, ROUNDED); /* each follows a rounded product */
        }
        snprintf(what, sizeof what, "hand-over %s n=%d: 5 launches for 4 products", name, n);
        printf("  %-44s %llu launches\n", what, (unsigned long long)nodes);
        TEST_COND(what, nodes == 5);
        gpu->ops->release(gpu, x_warm);
        twin *t[] = {&a, &x, &al1, &al2, &h1, &h2, &u, &y};
        for (int i = 0; i < 8; i++) twin_free(t[i]);
    }
    pp_kv_ring rc = ring_make(cpu, PP_KV_INT8, CAP, D, HEADS), rg = ring_make(gpu, PP_KV_INT8, CAP, D, HEADS);
    int64_t *posc = cpu->ops->alloc(cpu, sizeof(int64_t)), *posg = gpu->ops->alloc(gpu, sizeof(int64_t));
    twin att = twin_rand(D, 0), x = twin_rand(D, 1.0f);
    double worst = 0;
    int launches_ok = 1;
    for (int s = 0; s < STEPS; s++) {
        twin qkv = twin_rand(3 * D, 1.0f);
        const int64_t pos = s;
        cpu->ops->upload(cpu, posc, &pos, sizeof pos);
        gpu->ops->upload(gpu, posg, &pos, sizeof pos);
        cpu->ops->attn_rows(cpu, qkv.c, 1, HEADS, HD, 10000.0f, &rc, NULL, 0, posc, att.c);
        cpu->ops->matmul_add(cpu, &wo.c, att.c, 1, x.c);
        uint64_t nodes = gpu->ops->nodes_run(gpu);
        gpu->ops->attn_rows(gpu, qkv.g, 1, HEADS, HD, 10000.0f, &rg, NULL, 0, posg, att.g);
        gpu->ops->matmul_add(gpu, &wo.g, att.g, 1, x.g);
        launches_ok &= s == 0 || gpu->ops->nodes_run(gpu) - nodes == 2; /* step 0 warms up */
        double e = result_nmse(x.g, x.c, D);
        if (!(e <= worst)) worst = e;
        twin_free(&qkv);
    }
    snprintf(what, sizeof what, "hand-over %s attention to output, worst", name);
    check_nmse(what, worst, ROUNDED);
    snprintf(what, sizeof what, "hand-over %s attention to output: 2 launches", name);
    TEST_COND(what, launches_ok);
    ring_free(cpu, &rc);
    ring_free(gpu, &rg);
    cpu->ops->release(cpu, posc);
    gpu->ops->release(gpu, posg);
    twin_free(&att);
    twin_free(&x);
    held *w[] = {&wo, &wi, &wf, &wq};
    for (int i = 0; i < 4; i++) held_free(w[i]);
}

/* The rotary embedding inside attn_rows: a window of one key, so out is v and the ring's slot
 * holds the rotated key. Positions up to 2999, where the device's 2-ulp expf put angles 3.6e-4 rad
 * off. */
static void test_attn_rope(void) {
    const int d = 256, heads = 4, hd = 64;
    const int64_t positions[] = {0, 17, 2999};
    for (int i = 0; i < 3; i++) {
        pp_kv_ring rc = ring_make(cpu, PP_KV_F32, 4, d, heads), rg = ring_make(gpu, PP_KV_F32, 4, d, heads);
        rc.window = rg.window = 1;
        int64_t *pc = cpu->ops->alloc(cpu, sizeof(int64_t)), *pg = gpu->ops->alloc(gpu, sizeof(int64_t));
        cpu->ops->upload(cpu, pc, &positions[i], sizeof(int64_t));
        gpu->ops->upload(gpu, pg, &positions[i], sizeof(int64_t));
        twin qkv = twin_rand(3 * (size_t)d, 1.0f), out = twin_rand((size_t)d, 0);
        cpu->ops->attn_rows(cpu, qkv.c, 1, heads, hd, 10000.0f, &rc, NULL, 0, pc, out.c);
        gpu->ops->attn_rows(gpu, qkv.g, 1, heads, hd, 10000.0f, &rg, NULL, 0, pg, out.g);
        char what[80];
        snprintf(what, sizeof what, "attn_rows rope, pos %lld: stored key", (long long)positions[i]);
        size_t slot = (size_t)(positions[i] % 4) * d;
        compare(what, (const float *)rg.k + slot, (const float *)rc.k + slot, (size_t)d, ELEM);
        snprintf(what, sizeof what, "attn_rows rope, pos %lld: output", (long long)positions[i]);
        compare(what, out.g, out.c, (size_t)d, ELEM);
        twin_free(&qkv);
        twin_free(&out);
        ring_free(cpu, &rc);
        ring_free(gpu, &rg);
        cpu->ops->release(cpu, pc);
        gpu->ops->release(gpu, pg);
    }
}

/* Attention over one ring (attn_rows without tables): `steps` queries at positions 0.. so the
 * ring wraps; checks every output, then the stored caches byte for byte (both sides convert
 * each value with the same single rounding). */
static void test_attn(int capacity, int steps, int heads, int hd, pp_kv_format fmt) {
    int dim = heads * hd;
    pp_kv_ring rc = ring_make(cpu, fmt, capacity, dim, heads), rg = ring_make(gpu, fmt, capacity, dim, heads);
    twin out = twin_rand((size_t)dim, 0);
    int64_t *pc = cpu->ops->alloc(cpu, sizeof(int64_t)), *pg = gpu->ops->alloc(gpu, sizeof(int64_t));
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        twin qkv = twin_rand(3 * (size_t)dim, 1.0f);
        const int64_t pos = s;
        cpu->ops->upload(cpu, pc, &pos, sizeof pos);
        gpu->ops->upload(gpu, pg, &pos, sizeof pos);
        cpu->ops->attn_rows(cpu, qkv.c, 1, heads, hd, 0.0f, &rc, NULL, 0, pc, out.c);
        gpu->ops->attn_rows(gpu, qkv.g, 1, heads, hd, 0.0f, &rg, NULL, 0, pg, out.g);
        double e = result_nmse(out.g, out.c, (size_t)dim);
        if (!(e <= worst)) worst = e;
        twin_free(&qkv);
    }
    char what[96];
    snprintf(what, sizeof what, "attn %s cap %d, %d steps, worst", pp_kv_format_name(fmt), capacity, steps);
    printf("  %-44s nmse %.2e (limit %.0e)\n", what, worst, REDUCE);
    TEST_COND(what, worst <= REDUCE);
    size_t bytes = (size_t)capacity * dim * pp_kv_elem_bytes(fmt);
    size_t diff = bytes_differing(rg.k, rc.k, bytes) + bytes_differing(rg.v, rc.v, bytes);
    if (fmt == PP_KV_INT8) {
        diff += bytes_differing(rg.kscale, rc.kscale, (size_t)capacity * heads * 4);
        diff += bytes_differing(rg.vscale, rc.vscale, (size_t)capacity * heads * 4);
    }
    printf("  %-44s %zu bytes differ\n", "  stored caches", diff);
    TEST_COND("attention: stored KV caches identical", diff == 0);
    ring_free(cpu, &rc);
    ring_free(gpu, &rg);
    twin_free(&out);
    cpu->ops->release(cpu, pc);
    gpu->ops->release(gpu, pg);
}

/* attn_rows: ROWS conversations at different positions, each with its own rings for 2 layers,
 * attended in one call per step through their ring tables (layer 1's rings used). Every output
 * and every stored ring byte must match the CPU (with rope, whose angles round differently, every
 * stored value closely). cap <= 64: one split, no merge. The keys a block takes grow with the
 * blocks the launch has per SM (attn.cu's attn_span): 3 rows of 4 heads over 300 keys take splits
 * of 256 with the emulation's 1 SM and 64 with PK_EMU_SMS=16, 3 rows of 8 heads one split of 512. */
#define ROWS_ATTN 3
static void test_attn_rows(pp_kv_format fmt, int cap, float rope, int heads) {
    enum { HD = 64, LAYERS = 2, STEPS = 90 };
    const int CAP = cap, HEADS = heads, DIM = heads * HD;
    pp_kv_ring rc[ROWS_ATTN][LAYERS], rg[ROWS_ATTN][LAYERS];
    pp_kv_ring *tc[ROWS_ATTN], *tg[ROWS_ATTN]; /* each row's table in backend memory */
    for (int i = 0; i < ROWS_ATTN; i++) {
        for (int l = 0; l < LAYERS; l++) {
            rc[i][l] = ring_make(cpu, fmt, CAP, DIM, HEADS);
            rg[i][l] = ring_make(gpu, fmt, CAP, DIM, HEADS);
        }
        tc[i] = cpu->ops->alloc(cpu, sizeof rc[i]);
        tg[i] = gpu->ops->alloc(gpu, sizeof rg[i]);
        cpu->ops->upload(cpu, tc[i], rc[i], sizeof rc[i]);
        gpu->ops->upload(gpu, tg[i], rg[i], sizeof rg[i]);
    }
    const pp_kv_ring **pc = cpu->ops->alloc(cpu, sizeof tc), **pg = gpu->ops->alloc(gpu, sizeof tg);
    cpu->ops->upload(cpu, pc, tc, sizeof tc);
    gpu->ops->upload(gpu, pg, tg, sizeof tg);
    int64_t *posc = cpu->ops->alloc(cpu, sizeof(int64_t) * ROWS_ATTN),
            *posg = gpu->ops->alloc(gpu, sizeof(int64_t) * ROWS_ATTN);
    twin out = twin_rand((size_t)ROWS_ATTN * DIM, 0);
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        int64_t pos[ROWS_ATTN] = {s, s + 13, 3 * s + (cap > 70 ? cap - 70 : 0)}; /* the third wraps its ring */
        cpu->ops->upload(cpu, posc, pos, sizeof pos);
        gpu->ops->upload(gpu, posg, pos, sizeof pos);
        twin qkv = twin_rand((size_t)ROWS_ATTN * 3 * DIM, 1.0f);
        cpu->ops->attn_rows(cpu, qkv.c, ROWS_ATTN, HEADS, HD, rope, &rc[0][1], (const pp_kv_ring *const *)pc, 1, posc,
                            out.c);
        gpu->ops->attn_rows(gpu, qkv.g, ROWS_ATTN, HEADS, HD, rope, &rg[0][1], (const pp_kv_ring *const *)pg, 1, posg,
                            out.g);
        double e = result_nmse(out.g, out.c, (size_t)ROWS_ATTN * DIM);
        if (!(e <= worst)) worst = e;
        twin_free(&qkv);
    }
    char what[96];
    snprintf(what, sizeof what, "attn_rows %s%s, cap %d, %d rows of %d heads, worst", pp_kv_format_name(fmt),
             rope > 0 ? " rope" : "", cap, ROWS_ATTN, heads);
    printf("  %-44s nmse %.2e (limit %.0e)\n", what, worst, REDUCE);
    TEST_COND(what, worst <= REDUCE);
    size_t elem = pp_kv_elem_bytes(fmt), diff = 0;
    for (int i = 0; i < ROWS_ATTN; i++) {
        if (rope > 0)
            compare("  stored (rotated) keys of a row", rg[i][1].k, rc[i][1].k, (size_t)CAP * DIM, ELEM);
        else
            diff += bytes_differing(rg[i][1].k, rc[i][1].k, (size_t)CAP * DIM * elem);
        diff += bytes_differing(rg[i][1].v, rc[i][1].v, (size_t)CAP * DIM * elem);
        for (int l = 0; l < LAYERS; l++) {
            ring_free(cpu, &rc[i][l]);
            ring_free(gpu, &rg[i][l]);
        }
        cpu->ops->release(cpu, tc[i]);
        gpu->ops->release(gpu, tg[i]);
    }
    printf("  %-44s %zu bytes differ\n", "  stored caches of every row", diff);
    TEST_COND("attn_rows: stored KV caches identical", diff == 0);
    cpu->ops->release(cpu, pc);
    gpu->ops->release(gpu, pg);
    cpu->ops->release(cpu, posc);
    gpu->ops->release(gpu, posg);
    twin_free(&out);
}

/* pp_kv_ring_takes_rows at its edges: a prefill's rows share one call while no row's store lands
 * on a key that row 0 attends. */
static void test_ring_takes_rows(void) {
    const struct {
        int cap, window;
        int64_t first;
        int n, takes;
    } cases[] = {
        {70, 70, 0, 70, 1},   /* the whole ring from 0 */
        {70, 70, 0, 71, 0},   /* more rows than slots */
        {70, 70, 1, 70, 0},   /* position 70 lands on position 0, which row 0 (1) attends */
        {70, 40, 100, 31, 1}, /* 130 lands on 60; row 0 (100) attends from 61 */
        {70, 40, 100, 32, 0}, /* 131 lands on 61 */
        {300, 300, 256, 32, 1},
        {300, 300, 288, 32, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_kv_ring r = {.fmt = PP_KV_F32, .capacity = cases[i].cap, .window = cases[i].window};
        char what[96];
        snprintf(what, sizeof what, "ring %d window %d: %d rows from %lld %s", cases[i].cap, cases[i].window,
                 cases[i].n, (long long)cases[i].first, cases[i].takes ? "share a call" : "go row by row");
        TEST_COND(what, pp_kv_ring_takes_rows(&r, cases[i].first, cases[i].n) == cases[i].takes);
    }
}

/* attn_rows on one ring (tables NULL) with n rows: a prefill's consecutive positions, `passes`
 * passes of `rows` rows from position 0. The device takes a pass in one call where its stores fit
 * beside every row's window (pp_kv_ring_takes_rows: two launches, the stores then the queries),
 * else a call a row, as pp_tf_prefill does; the CPU takes every pass in one call, its rows in
 * order. Outputs must match. Then, where a pass would not fit, it is forced into one device call
 * and must differ: the rule is what keeps them equal. */
static void test_attn_prefill(pp_kv_format fmt, int cap, int window, float rope, int rows, int passes) {
    enum { HEADS = 2, HD = 64, DIM = HEADS * HD };
    pp_kv_ring rc = ring_make(cpu, fmt, cap, DIM, HEADS), rg = ring_make(gpu, fmt, cap, DIM, HEADS);
    rc.window = rg.window = window;
    int64_t *pc = cpu->ops->alloc(cpu, sizeof(int64_t) * rows), *pg = gpu->ops->alloc(gpu, sizeof(int64_t) * rows);
    twin out = twin_rand((size_t)rows * DIM, 0);
    double worst = 0;
    int one_call = 0, row_by_row = 0, launches_ok = 1;
    for (int s = 0; s <= passes; s++) {
        const int first = s * rows, last_pass = s == passes;
        int64_t pos[64];
        for (int i = 0; i < rows; i++) pos[i] = first + i;
        cpu->ops->upload(cpu, pc, pos, sizeof(int64_t) * rows);
        gpu->ops->upload(gpu, pg, pos, sizeof(int64_t) * rows);
        const int fits = pp_kv_ring_takes_rows(&rg, first, rows);
        if (last_pass && fits) break; /* a window short enough that every pass fits */
        twin qkv = twin_rand((size_t)rows * 3 * DIM, 1.0f);
        cpu->ops->attn_rows(cpu, qkv.c, rows, HEADS, HD, rope, &rc, NULL, 0, pc, out.c);
        uint64_t nodes = gpu->ops->nodes_run(gpu);
        if (fits || last_pass) {
            gpu->ops->attn_rows(gpu, qkv.g, rows, HEADS, HD, rope, &rg, NULL, 0, pg, out.g);
            gpu->ops->sync(gpu);
            launches_ok &= s == 0 || gpu->ops->nodes_run(gpu) - nodes == 2; /* pass 0 grows the workspace */
            one_call += !last_pass;
        } else {
            for (int i = 0; i < rows; i++)
                gpu->ops->attn_rows(gpu, qkv.g + (size_t)i * 3 * DIM, 1, HEADS, HD, rope, &rg, NULL, 0, pg + i,
                                    out.g + (size_t)i * DIM);
            row_by_row++;
        }
        double e = result_nmse(out.g, out.c, (size_t)rows * DIM);
        twin_free(&qkv);
        if (last_pass) {
            printf("  %-44s nmse %.2e\n", "  a pass that does not fit, in one call", e);
            TEST_COND("attn prefill: one call over attended keys differs", e > 1e-4);
        } else if (!(e <= worst)) {
            worst = e;
        }
    }
    char what[112];
    snprintf(what, sizeof what, "attn prefill %s%s, cap %d window %d, %d x %d rows, worst", pp_kv_format_name(fmt),
             rope > 0 ? " rope" : "", cap, window, passes, rows);
    printf("  %-44s nmse %.2e (limit %.0e), %d passes in one call, %d row by row\n", what, worst, REDUCE, one_call,
           row_by_row);
    TEST_COND(what, worst <= REDUCE);
    TEST_COND("attn prefill: a pass in one call is 2 launches", launches_ok);
    TEST_COND("attn prefill: passes of both kinds", one_call > 0 && (row_by_row > 0 || window < cap));
    ring_free(cpu, &rc);
    ring_free(gpu, &rg);
    twin_free(&out);
    cpu->ops->release(cpu, pc);
    gpu->ops->release(gpu, pg);
}

/* The depformer's layer start: a latency-bound qkv product (normalized, preparing its inputs in
 * its own blocks) and the attention after it, which the product's blocks run as each completes a
 * head's q, k and v (one launch). Against the CPU over 20 steps of f32 rings of 16 slots, window
 * 15 (wrapped), with and without rotation; heads of 64 and of 128; one row without tables, and
 * `rows` rows each with its own ring. A block of the product completes at most a fixed number of
 * (row, head) groups at once, so narrow heads over many rows take the two launches (fused_rows:
 * the most rows the one launch takes); they once overran the block's list of completed groups. */
#define ROWS_FUSED_MAX 8
static void test_attend_in_product(int heads, int hd, float rope, int rows, int fused_rows) {
    enum { CAP = 16, STEPS = 20 };
    const int dim = heads * hd;
    held w;
    if (make_weight(PP_WF_NF2, 3 * dim, dim, 128, 128, 0, &w)) {
        TEST_COND("weight upload", 0);
        return;
    }
    pp_weight marked = w.g;
    marked.latency_bound = 1;
    char what[112];
    for (int n = 1; n <= rows; n += rows - 1) {
        pp_kv_ring rc[ROWS_FUSED_MAX], rg[ROWS_FUSED_MAX];
        for (int i = 0; i < n; i++) {
            rc[i] = ring_make(cpu, PP_KV_F32, CAP, dim, heads);
            rg[i] = ring_make(gpu, PP_KV_F32, CAP, dim, heads);
            rc[i].window = rg[i].window = CAP - 1;
        }
        /* per row its table of one layer's ring, and the rows' tables */
        pp_kv_ring *tc[ROWS_FUSED_MAX], *tg[ROWS_FUSED_MAX];
        for (int i = 0; i < n; i++) {
            tc[i] = cpu->ops->alloc(cpu, sizeof rc[i]);
            tg[i] = gpu->ops->alloc(gpu, sizeof rg[i]);
            cpu->ops->upload(cpu, tc[i], &rc[i], sizeof rc[i]);
            gpu->ops->upload(gpu, tg[i], &rg[i], sizeof rg[i]);
        }
        const pp_kv_ring **pc = cpu->ops->alloc(cpu, sizeof tc), **pg = gpu->ops->alloc(gpu, sizeof tg);
        cpu->ops->upload(cpu, pc, tc, sizeof tc);
        gpu->ops->upload(gpu, pg, tg, sizeof tg);
        int64_t *posc = cpu->ops->alloc(cpu, sizeof(int64_t) * n), *posg = gpu->ops->alloc(gpu, sizeof(int64_t) * n);
        twin a = twin_rand((size_t)dim, 1.0f), hn = twin_rand((size_t)n * dim, 0);
        twin qkv = twin_rand((size_t)n * 3 * dim, 0), out = twin_rand((size_t)n * dim, 0);
        double worst = 0;
        int one_launch = 1;
        for (int s = 0; s < STEPS; s++) {
            int64_t pos[ROWS_FUSED_MAX];
            for (int i = 0; i < n; i++) pos[i] = (i + 1) * s + 5 * i; /* every row at its own position */
            cpu->ops->upload(cpu, posc, pos, sizeof(int64_t) * n);
            gpu->ops->upload(gpu, posg, pos, sizeof(int64_t) * n);
            twin x = twin_rand((size_t)n * dim, 2.0f);
            const pp_kv_ring *const *tabc = n > 1 ? (const pp_kv_ring *const *)pc : NULL;
            const pp_kv_ring *const *tabg = n > 1 ? (const pp_kv_ring *const *)pg : NULL;
            cpu->ops->norm_matmul(cpu, x.c, a.c, n, dim, 1e-6f, hn.c, &w.c, qkv.c);
            cpu->ops->attn_rows(cpu, qkv.c, n, heads, hd, rope, &rc[0], tabc, 0, posc, out.c);
            uint64_t nodes = gpu->ops->nodes_run(gpu);
            gpu->ops->norm_matmul(gpu, x.g, a.g, n, dim, 1e-6f, hn.g, &marked, qkv.g);
            gpu->ops->attn_rows(gpu, qkv.g, n, heads, hd, rope, &rg[0], tabg, 0, posg, out.g);
            one_launch &= s == 0 || gpu->ops->nodes_run(gpu) - nodes == 1; /* step 0 grows the counters */
            double e = result_nmse(out.g, out.c, (size_t)n * dim);
            if (!(e <= worst)) worst = e;
            twin_free(&x);
        }
        snprintf(what, sizeof what, "qkv product attending, %d x %d%s, %d row%s, worst", heads, hd,
                 rope > 0 ? " rope" : "", n, n > 1 ? "s" : "");
        check_nmse(what, worst, ROUNDED);
        compare("  stored keys of the first row", rg[0].k, rc[0].k, (size_t)CAP * dim, ROUNDED);
        compare("  stored values of the first row", rg[0].v, rc[0].v, (size_t)CAP * dim, ROUNDED);
        snprintf(what, sizeof what, "qkv product attending, %d x %d, %d row%s: %s", heads, hd, n, n > 1 ? "s" : "",
                 n <= fused_rows ? "one launch" : "two launches");
        TEST_COND(what, one_launch == (n <= fused_rows));
        for (int i = 0; i < n; i++) {
            ring_free(cpu, &rc[i]);
            ring_free(gpu, &rg[i]);
            cpu->ops->release(cpu, tc[i]);
            gpu->ops->release(gpu, tg[i]);
        }
        cpu->ops->release(cpu, pc);
        gpu->ops->release(gpu, pg);
        cpu->ops->release(cpu, posc);
        gpu->ops->release(gpu, posg);
        twin *t[] = {&a, &hn, &qkv, &out};
        for (int i = 0; i < 4; i++) twin_free(t[i]);
    }
    held_free(&w);
}

/* ---- codec operations ---- */

/* Conversations in the batched codec calls. A conv row's state starts STATE_PAD floats into a
 * buffer of its own: a nonzero pp_state_rows.offset, as in an arena with other state before it. */
#define CODEC_ROWS 3
#define STATE_PAD 12

/* The rows' buffers as pp_state_rows.base: their addresses, in backend memory. */
static uint64_t *put_bases(pp_backend *be, float *const *buf, int n) {
    uint64_t h[CODEC_ROWS];
    for (int r = 0; r < n; r++) h[r] = (uint64_t)(uintptr_t)buf[r];
    uint64_t *d = be->ops->alloc(be, (size_t)n * sizeof *h);
    if (d) be->ops->upload(be, d, h, (size_t)n * sizeof *h);
    return d;
}

static void conv_call(pp_backend *be, int transposed, const pp_conv *c, const float *x, int t, float *state,
                      const pp_state_rows *rows, float *y, float *scratch, int flags) {
    if (transposed)
        be->ops->conv_tr1d(be, c, x, t, state, rows, y, scratch);
    else
        be->ops->conv1d(be, c, x, t, state, rows, y, scratch, flags);
}

/* Streaming conv (transposed or not): three calls of t columns each, flags on the first, the GPU
 * against the CPU's same call. n 0: one conversation, its state given (rows NULL); else n in each
 * call (pp_state_rows, base NULL where the conv has no state), also against the CPU running each
 * row alone. Each row's state starts STATE_PAD floats into a buffer of its own, all of whose
 * bytes are compared (random to begin with, as another conversation's state would be). */
static void test_conv(int transposed, int cin, int cout, int k, int stride, int groups, int t, int flags, int n) {
    const int rows = n ? n : 1, p = k - stride, tout = transposed ? t * stride : t / stride;
    size_t wn = transposed ? (size_t)cin * (cout / groups) * k : (size_t)cout * cin * k;
    twin w = twin_rand(wn, 0.2f), b = twin_rand((size_t)cout, 0.1f);
    pp_conv cc = {w.c, b.c, cin, cout, k, stride, groups}, cg = {w.g, b.g, cin, cout, k, stride, groups};
    size_t sn = STATE_PAD + (size_t)(transposed ? cout : cin) * p, xn = (size_t)cin * t, yn = (size_t)cout * tout;
    size_t scr = pp_conv_scratch(&cc, t, transposed);
    twin st[CODEC_ROWS];
    float *alone[CODEC_ROWS] = {0}, *y0 = rand_vec(yn * rows, 1.0f); /* y0: what accumulating calls add to */
    for (int r = 0; r < rows; r++) {
        float *h = rand_vec(sn, 1.0f);
        st[r] = twin_of(h, sn);
        if (r < n) alone[r] = put(cpu, h, sn);
        free(h);
    }
    twin y = twin_of(y0, yn * rows), sc = twin_rand(scr * rows, 0);
    float *y_alone = n ? put(cpu, y0, yn * rows) : NULL;
    float *sc_alone = n ? cpu->ops->alloc(cpu, scr * sizeof *sc_alone) : NULL;
    pp_state_rows rc = {n, NULL, STATE_PAD * sizeof(float)}, rg = rc;
    if (n && p > 0) {
        float *bc[CODEC_ROWS], *bg[CODEC_ROWS];
        for (int r = 0; r < n; r++) {
            bc[r] = st[r].c;
            bg[r] = st[r].g;
        }
        rc.base = put_bases(cpu, bc, n);
        rg.base = put_bases(gpu, bg, n);
    }
    char what[96], label[128];
    snprintf(what, sizeof what, "%s %d->%d k%d s%d g%d t%d%s", transposed ? "conv_tr1d" : "conv1d", cin, cout, k,
             stride, groups, t, n ? " x3 rows" : "");
    for (int call = 0; call < 3; call++) {
        twin x = twin_rand(xn * rows, 1.0f);
        int f = call == 0 ? flags : flags & PP_CONV_ACCUMULATE;
        conv_call(cpu, transposed, &cc, x.c, t, n ? NULL : st[0].c + STATE_PAD, n ? &rc : NULL, y.c, sc.c, f);
        conv_call(gpu, transposed, &cg, x.g, t, n ? NULL : st[0].g + STATE_PAD, n ? &rg : NULL, y.g, sc.g, f);
        for (int r = 0; r < n; r++)
            conv_call(cpu, transposed, &cc, x.c + r * xn, t, alone[r] + STATE_PAD, NULL, y_alone + r * yn, sc_alone, f);
        snprintf(label, sizeof label, "%s flags %d call %d", what, f, call);
        compare(label, y.g, y.c, y.n, REDUCE);
        snprintf(label, sizeof label, "  call %d against each row alone on the CPU", call);
        if (n) compare(label, y.g, y_alone, y.n, REDUCE);
        twin_free(&x);
    }
    double worst = 0, worst_alone = 0;
    for (int r = 0; r < rows; r++) {
        double e = result_nmse(st[r].g, st[r].c, sn), ea = r < n ? result_nmse(st[r].g, alone[r], sn) : 0;
        if (!(e <= worst)) worst = e;
        if (!(ea <= worst_alone)) worst_alone = ea;
    }
    snprintf(label, sizeof label, "  %s, worst", transposed ? "tail buffers" : "history buffers");
    check_nmse(label, worst, REDUCE);
    if (n) check_nmse("  the same against each row alone on the CPU", worst_alone, REDUCE);
    for (int r = 0; r < rows; r++) {
        twin_free(&st[r]);
        cpu->ops->release(cpu, alone[r]);
    }
    cpu->ops->release(cpu, (void *)rc.base);
    gpu->ops->release(gpu, (void *)rg.base);
    cpu->ops->release(cpu, y_alone);
    cpu->ops->release(cpu, sc_alone);
    free(y0);
    twin_free(&w);
    twin_free(&b);
    twin_free(&y);
    twin_free(&sc);
}

static void test_codec_elementwise(void) {
    const int n = 3, d = 200;
    twin x = twin_rand((size_t)n * d, 3.0f), y = twin_rand((size_t)n * d, 0);
    cpu->ops->elu(cpu, x.c, y.c, x.n);
    gpu->ops->elu(gpu, x.g, y.g, x.n);
    compare("elu", y.g, y.c, y.n, ELEM);
    cpu->ops->gelu(cpu, y.c, y.n);
    gpu->ops->gelu(gpu, y.g, y.n);
    compare("gelu (after elu)", y.g, y.c, y.n, ELEM);
    twin w = twin_rand((size_t)d, 1.0f), b = twin_rand((size_t)d, 1.0f);
    cpu->ops->layer_norm(cpu, x.c, w.c, b.c, n, d, 1e-5f, y.c);
    gpu->ops->layer_norm(gpu, x.g, w.g, b.g, n, d, 1e-5f, y.g);
    compare("layer_norm 3x200", y.g, y.c, y.n, REDUCE);
    cpu->ops->transpose(cpu, x.c, 1, n * 4, d / 4, y.c);
    gpu->ops->transpose(gpu, x.g, 1, n * 4, d / 4, y.g);
    compare("transpose 12x50", y.g, y.c, y.n, EXACT);
    cpu->ops->scale_add(cpu, y.c, x.c, w.c, n, d);
    gpu->ops->scale_add(gpu, y.g, x.g, w.g, n, d);
    compare("scale_add", y.g, y.c, y.n, ELEM); /* the GPU may fuse the multiply-add */
    twin_free(&x);
    twin_free(&y);
    twin_free(&w);
    twin_free(&b);
}

/* CODEC_ROWS blocks x [rows][cols] to y [cols][n][rows] in one call, against the CPU's same call
 * and against the CPU transposing each block alone (whose [cols][rows] is block b of each y[j]). */
static void test_transpose_rows(void) {
    const int n = CODEC_ROWS, rows = 40, cols = 37; /* both past one 32-wide tile */
    const size_t blk = (size_t)rows * cols;
    twin x = twin_rand(n * blk, 1.0f), y = twin_rand(n * blk, 0);
    float *alone = cpu->ops->alloc(cpu, n * blk * sizeof *alone);
    cpu->ops->transpose(cpu, x.c, n, rows, cols, y.c);
    gpu->ops->transpose(gpu, x.g, n, rows, cols, y.g);
    compare("transpose 3 blocks 40x37", y.g, y.c, y.n, EXACT);
    for (int b = 0; b < n; b++) cpu->ops->transpose(cpu, x.c + b * blk, 1, rows, cols, alone + b * blk);
    float *g = get(gpu, y.g, y.n), *a = get(cpu, alone, y.n);
    size_t diff = y.n;
    if (g && a) {
        diff = 0;
        for (int b = 0; b < n; b++)
            for (size_t j = 0; j < (size_t)cols; j++)
                for (size_t i = 0; i < (size_t)rows; i++)
                    diff += g[(j * n + b) * rows + i] != a[b * blk + j * rows + i];
    }
    printf("  %-44s %zu values differ\n", "  against each block alone on the CPU", diff);
    TEST_COND("transpose of 3 blocks: each block as alone", diff == 0);
    free(g);
    free(a);
    cpu->ops->release(cpu, alone);
    twin_free(&x);
    twin_free(&y);
}

/* RVQ state on both backends: the codebook, n rows x [n][dim] (the GPU's and the CPU's same
 * call) and the CPU's copy for each row run alone; codes code_stride apart in backend memory
 * (the entries between never written). */
#define VQ_BINS 2048
#define VQ_DIM 256
#define VQ_UNTOUCHED (-7)
typedef struct {
    int n, stride;
    twin cb, sq, x;
    float *alone;
    int32_t *cc, *cg, *ca; /* codes: the CPU's call, the GPU's, the rows alone (CPU) */
} vq_case;

/* One step on all three: the nearest rows (subtracting them), or those rows added back. */
static void vq_step(const vq_case *v, int add) {
    if (add) {
        cpu->ops->vq_add_row(cpu, v->cb.c, VQ_BINS, VQ_DIM, v->cc, v->stride, v->n, v->x.c);
        gpu->ops->vq_add_row(gpu, v->cb.g, VQ_BINS, VQ_DIM, v->cg, v->stride, v->n, v->x.g);
    } else {
        cpu->ops->vq_nearest(cpu, v->cb.c, v->sq.c, VQ_BINS, VQ_DIM, v->x.c, v->n, 1, v->cc, v->stride);
        gpu->ops->vq_nearest(gpu, v->cb.g, v->sq.g, VQ_BINS, VQ_DIM, v->x.g, v->n, 1, v->cg, v->stride);
    }
    for (int r = 0; r < v->n; r++) {
        float *xr = v->alone + (size_t)r * VQ_DIM;
        int32_t *code = v->ca + (size_t)r * v->stride;
        if (add)
            cpu->ops->vq_add_row(cpu, v->cb.c, VQ_BINS, VQ_DIM, code, 1, 1, xr);
        else
            cpu->ops->vq_nearest(cpu, v->cb.c, v->sq.c, VQ_BINS, VQ_DIM, xr, 1, 1, code, 1);
    }
}

/* Whether the three agree on every row's code, the entries between them untouched; first (n
 * codes or NULL) receives the GPU's. */
static int vq_codes_agree(const vq_case *v, int32_t *first) {
    size_t len = (size_t)v->n * v->stride;
    int32_t *g = malloc(len * sizeof *g), *c = malloc(len * sizeof *c), *a = malloc(len * sizeof *a);
    int ok = g && c && a;
    if (ok) {
        gpu->ops->download(gpu, g, v->cg, len * sizeof *g);
        cpu->ops->download(cpu, c, v->cc, len * sizeof *c);
        cpu->ops->download(cpu, a, v->ca, len * sizeof *a);
    }
    for (size_t i = 0; ok && i < len; i++)
        ok = g[i] == c[i] && g[i] == a[i] && (i % (size_t)v->stride == 0 || g[i] == VQ_UNTOUCHED);
    for (int r = 0; ok && first && r < v->n; r++) first[r] = g[(size_t)r * v->stride];
    free(g);
    free(c);
    free(a);
    return ok;
}

/* n rows at once, codes code_stride apart: four levels of nearest (subtracting), the row added
 * back and taken again; then codes outside the codebook, which add nothing. Row r starts on
 * codebook row 77 + 600·r, a known first answer. */
static void test_vq(int n, int code_stride) {
    vq_case v = {.n = n, .stride = code_stride};
    float *cb = rand_vec((size_t)VQ_BINS * VQ_DIM, 1.0f), sq[VQ_BINS];
    for (int i = 0; i < VQ_BINS; i++) {
        double s = 0;
        for (int j = 0; j < VQ_DIM; j++) s += (double)cb[(size_t)i * VQ_DIM + j] * cb[(size_t)i * VQ_DIM + j];
        sq[i] = (float)s;
    }
    v.cb = twin_of(cb, (size_t)VQ_BINS * VQ_DIM);
    v.sq = twin_of(sq, VQ_BINS);
    float *x0 = malloc((size_t)n * VQ_DIM * sizeof *x0);
    for (int r = 0; x0 && r < n; r++)
        memcpy(x0 + (size_t)r * VQ_DIM, cb + (size_t)(77 + 600 * r) * VQ_DIM, VQ_DIM * sizeof *x0);
    v.x = twin_of(x0, (size_t)n * VQ_DIM);
    v.alone = put(cpu, x0, (size_t)n * VQ_DIM);
    size_t len = (size_t)n * code_stride;
    int32_t *fill = malloc(len * sizeof *fill), first[CODEC_ROWS];
    for (size_t i = 0; fill && i < len; i++) fill[i] = VQ_UNTOUCHED;
    v.cc = cpu->ops->alloc(cpu, len * sizeof *fill);
    v.cg = gpu->ops->alloc(gpu, len * sizeof *fill);
    v.ca = cpu->ops->alloc(cpu, len * sizeof *fill);
    cpu->ops->upload(cpu, v.cc, fill, len * sizeof *fill);
    gpu->ops->upload(gpu, v.cg, fill, len * sizeof *fill);
    cpu->ops->upload(cpu, v.ca, fill, len * sizeof *fill);
    int same = 1, known = 0;
    for (int level = 0; level < 4; level++) {
        vq_step(&v, 0);
        same &= vq_codes_agree(&v, level == 0 ? first : NULL);
        for (int r = 0; level == 0 && r < n; r++) known += first[r] == 77 + 600 * r;
        vq_step(&v, 1);
        vq_step(&v, 0); /* subtract again: next level */
        same &= vq_codes_agree(&v, NULL);
    }
    char what[96];
    snprintf(what, sizeof what, "vq_nearest, %d rows: finds the rows x was copied from", n);
    TEST_COND(what, known == n);
    snprintf(what, sizeof what, "vq_nearest, %d rows, code stride %d: codes identical over 8 levels", n, code_stride);
    TEST_COND(what, same);
    /* codes outside the codebook add nothing (a device cannot refuse them) */
    for (int r = 0; fill && r < n; r++) fill[(size_t)r * code_stride] = r % 2 ? -1 : VQ_BINS;
    cpu->ops->upload(cpu, v.cc, fill, len * sizeof *fill);
    gpu->ops->upload(gpu, v.cg, fill, len * sizeof *fill);
    cpu->ops->upload(cpu, v.ca, fill, len * sizeof *fill);
    float *before = get(gpu, v.x.g, v.x.n);
    vq_step(&v, 1);
    float *after = get(gpu, v.x.g, v.x.n);
    snprintf(what, sizeof what, "vq_add_row, %d rows: codes past the codebook add nothing", n);
    TEST_COND(what, before && after && !memcmp(before, after, v.x.n * sizeof *after));
    snprintf(what, sizeof what, "vq residual of %d rows after 8 levels", n);
    compare(what, v.x.g, v.x.c, v.x.n, REDUCE);
    compare("  against each row alone on the CPU", v.x.g, v.alone, v.x.n, REDUCE);
    free(before);
    free(after);
    free(fill);
    free(x0);
    free(cb);
    cpu->ops->release(cpu, v.alone);
    cpu->ops->release(cpu, v.cc);
    gpu->ops->release(gpu, v.cg);
    cpu->ops->release(cpu, v.ca);
    twin_free(&v.cb);
    twin_free(&v.sq);
    twin_free(&v.x);
}

/* ---- sampling and device hooks ---- */

/* ROWS rows of logits drawn in one call, each row with its own settings (greedy, top-k 1, 25,
 * 250, all) and row 2 forced, over 16 frames: the same tokens on both backends. */
#define ROWS 5
/* Copies of a row's k-th largest logit over every 97th entry below it: ties exactly at the
 * top-k boundary, where only the lowest indices are admitted. */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void tie_at_boundary(float *row, int n, int k) {
    float *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return;
    memcpy(sorted, row, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
    float v = sorted[k - 1];
    free(sorted);
    for (int i = 3; i < n; i += 97)
        if (row[i] < v) row[i] = v;
}

static void test_sample(void) {
    static const int sizes[2] = {2048, 32000};
    static const int ks[ROWS] = {0, 1, 25, 250, 0};
    int32_t forced[ROWS] = {-1, -1, 17, -1, -1};
    int32_t *tc = cpu->ops->alloc(cpu, sizeof forced), *tg = gpu->ops->alloc(gpu, sizeof forced);
    int32_t *fc = cpu->ops->alloc(cpu, sizeof forced), *fg = gpu->ops->alloc(gpu, sizeof forced);
    pp_sample_param p[ROWS];
    pp_sample_param *pc = cpu->ops->alloc(cpu, sizeof p), *pg = gpu->ops->alloc(gpu, sizeof p);
    cpu->ops->upload(cpu, fc, forced, sizeof forced);
    gpu->ops->upload(gpu, fg, forced, sizeof forced);
    for (int si = 0; si < 2; si++) {
        int n = sizes[si], mism = 0, draws = 0, kept = 1;
        float *l = rand_vec((size_t)n * ROWS, 4.0f);
        for (int r = 0; r < ROWS; r++) /* row 0 is greedy: ties at its maximum */
            if (r == 0 || ks[r] > 0) tie_at_boundary(l + (size_t)r * n, n, ks[r] > 0 ? ks[r] : 1);
        twin tl = twin_of(l, (size_t)n * ROWS);
        for (int64_t frame = 0; frame < 16; frame++) {
            for (int r = 0; r < ROWS; r++)
                p[r] = (pp_sample_param){.seed = 42 + (uint64_t)r, .frame = frame, .temp = r == 0 ? 0.0f : 0.7f,
                                         .top_k = ks[r]};
            cpu->ops->upload(cpu, pc, p, sizeof p);
            gpu->ops->upload(gpu, pg, p, sizeof p);
            for (int stream = 0; stream < 17; stream += 8) {
                int32_t a[ROWS], b[ROWS];
                cpu->ops->sample(cpu, tl.c, ROWS, n, pc, stream, fc, tc);
                gpu->ops->sample(gpu, tl.g, ROWS, n, pg, stream, fg, tg);
                cpu->ops->download(cpu, a, tc, sizeof a);
                gpu->ops->download(gpu, b, tg, sizeof b);
                for (int r = 0; r < ROWS; r++) mism += a[r] != b[r];
                kept &= b[2] == 17;
                draws += ROWS;
            }
        }
        printf("  sample n=%d: %d of %d draws differ\n", n, mism, draws);
        TEST_COND("sample: identical tokens on both backends", mism == 0);
        TEST_COND("sample: a forced row keeps its token", kept);
        free(l);
        twin_free(&tl);
    }
    void *cbufs[] = {tc, fc, pc}, *gbufs[] = {tg, fg, pg};
    for (int i = 0; i < 3; i++) {
        cpu->ops->release(cpu, cbufs[i]);
        gpu->ops->release(gpu, gbufs[i]);
    }
}

/* A recorded frame replays with new data: rmsnorm + matmul + add, recorded once, replayed
 * on a changed input, equals the same operations run directly. */
/* Weights read in place (host_map): an INT4 weight laid out in one page-aligned "file" buffer
 * as a mapped checkpoint holds it. Where the device maps it (an integrated GPU; the emulation
 * with PK_EMU_INTEGRATED=1, where this is required) the upload takes no device memory; either
 * way the product equals the CPU's. */
static void test_host_weights(void) {
    if (!gpu->ops->host_map) return;
    const int64_t rows = 96, cols = 512;
    held h;
    if (make_weight(PP_WF_INT4, rows, cols, 64, 0, 0, &h)) {
        TEST_COND("weight upload", 0);
        return;
    }
    size_t data_bytes = (size_t)(rows * cols / 2), scale_bytes = (size_t)(rows * cols / 64) * 2;
    size_t scales_at = (data_bytes + 15) & ~(size_t)15, file_bytes = (scales_at + scale_bytes + 4095) & ~(size_t)4095;
    uint8_t *file = aligned_alloc(4096, file_bytes);
    memcpy(file, h.data, data_bytes);
    memcpy(file + scales_at, h.scales, scale_bytes);
    pp_weight host = h.host, dev;
    host.data = file;
    host.scales = file + scales_at;
    size_t before, after, b, ws, f, t, in_before, in_after;
    gpu->ops->mem_info(gpu, &before, &b, &ws, &f, &t, &in_before);
    int mapped = gpu->ops->host_map(gpu, file, file_bytes);
    const char *integrated = getenv("PK_EMU_INTEGRATED");
    if (integrated && strcmp(integrated, "1") == 0) TEST_COND("host_map on the integrated device", mapped);
    char err[PP_ERR_LEN];
    TEST_COND("upload from the mapped file", gpu->ops->weight_upload(gpu, &host, &dev, err) == PP_OK);
    gpu->ops->mem_info(gpu, &after, &b, &ws, &f, &t, &in_after);
    printf("  weights %s (device weight bytes %zu -> %zu, in place %zu -> %zu)\n", mapped ? "read in place" : "copied",
           before, after, in_before, in_after);
    TEST_COND("read in place: no device memory for the weight, else a copy",
              mapped ? after == before && in_after == in_before + data_bytes + scale_bytes
                     : after > before && in_after == in_before);
    twin x = twin_rand((size_t)cols, 1.0f), y = twin_rand((size_t)rows, 0);
    cpu->ops->matmul(cpu, &h.c, x.c, 1, y.c);
    gpu->ops->matmul(gpu, &dev, x.g, 1, y.g);
    compare(mapped ? "matmul int4 read in place" : "matmul int4 (copied: not mapped)", y.g, y.c, (size_t)rows, ROUNDED);
    twin_free(&x);
    twin_free(&y);
    gpu->ops->weight_release(gpu, &dev);
    if (mapped) gpu->ops->host_unmap(gpu, file);
    free(file);
    held_free(&h);
}

static void test_graph(void) {
    char err[PP_ERR_LEN];
    held h;
    if (make_weight(PP_WF_NF2, 256, 256, 128, 128, 0, &h)) return;
    twin x = twin_rand(256, 1.0f), a = twin_rand(256, 1.0f), t = twin_rand(256, 0), y = twin_rand(256, 0);
    const pp_backend_ops *g = gpu->ops;
    g->matmul(gpu, &h.g, x.g, 1, y.g); /* first run: the workspace takes its size outside the graph */
    int rc = g->graph_begin(gpu, 0, err);
    if (!rc) {
        g->rmsnorm(gpu, x.g, a.g, 1, 256, 1e-6f, t.g);
        g->matmul(gpu, &h.g, t.g, 1, y.g);
        g->add(gpu, y.g, x.g, 256);
        rc = g->graph_end(gpu, 0, err);
    }
    float *fresh = rand_vec(256, 1.0f);
    g->upload(gpu, x.g, fresh, 256 * sizeof(float));
    cpu->ops->upload(cpu, x.c, fresh, 256 * sizeof(float));
    if (!rc) rc = g->graph_replay(gpu, 0, err);
    if (rc) fprintf(stderr, "graph: %s\n", err);
    TEST_COND("graph record and replay", rc == 0);
    cpu->ops->rmsnorm(cpu, x.c, a.c, 1, 256, 1e-6f, t.c);
    cpu->ops->matmul(cpu, &h.c, t.c, 1, y.c);
    cpu->ops->add(cpu, y.c, x.c, 256);
    compare("graph replay on new input", y.g, y.c, 256, ROUNDED);
    free(fresh);
    twin_free(&x);
    twin_free(&a);
    twin_free(&t);
    twin_free(&y);
    held_free(&h);
}

/* A frame's tail as a recorded graph: sample rows whose settings live in device memory, embed
 * the drawn tokens from device memory. Replayed after new frame numbers are uploaded, it draws
 * the CPU's tokens for those new settings: nothing of the recording frame was kept. */
static void test_graph_sample(void) {
    enum { R = 3, N = 2048, D = 64 };
    char err[PP_ERR_LEN];
    held h;
    if (make_weight(PP_WF_BF16, N, D, 0, 0, 0, &h)) return;
    float *l = rand_vec((size_t)R * N, 4.0f);
    twin tl = twin_of(l, (size_t)R * N), y = twin_rand((size_t)R * D, 0);
    pp_sample_param p[R];
    int32_t forced[R] = {-1, 5, -1}, a[R], b[R];
    pp_sample_param *pc = cpu->ops->alloc(cpu, sizeof p), *pg = gpu->ops->alloc(gpu, sizeof p);
    int32_t *fc = cpu->ops->alloc(cpu, sizeof forced), *fg = gpu->ops->alloc(gpu, sizeof forced);
    int32_t *tc = cpu->ops->alloc(cpu, sizeof a), *tg = gpu->ops->alloc(gpu, sizeof b);
    cpu->ops->upload(cpu, fc, forced, sizeof forced);
    gpu->ops->upload(gpu, fg, forced, sizeof forced);
    int rc = PP_OK, same = 1;
    for (int64_t frame = 0; !rc && frame < 4; frame++) {
        for (int r = 0; r < R; r++)
            p[r] = (pp_sample_param){.seed = 9 + (uint64_t)r, .frame = frame, .temp = 0.8f, .top_k = 250};
        cpu->ops->upload(cpu, pc, p, sizeof p);
        gpu->ops->upload(gpu, pg, p, sizeof p);
        if (frame == 0) rc = gpu->ops->graph_begin(gpu, 1, err);
        if (!rc && frame == 0) { /* frame 0 records (graph_end runs it), the others replay */
            gpu->ops->sample(gpu, tl.g, R, N, pg, 3, fg, tg);
            gpu->ops->embed(gpu, &h.g, tg, R, y.g, 0);
        }
        if (!rc) rc = frame == 0 ? gpu->ops->graph_end(gpu, 1, err) : gpu->ops->graph_replay(gpu, 1, err);
        cpu->ops->sample(cpu, tl.c, R, N, pc, 3, fc, tc);
        cpu->ops->embed(cpu, &h.c, tc, R, y.c, 0);
        cpu->ops->download(cpu, a, tc, sizeof a);
        gpu->ops->download(gpu, b, tg, sizeof b);
        same &= memcmp(a, b, sizeof a) == 0 && b[1] == 5;
        compare("graph: embedding of the drawn tokens", y.g, y.c, y.n, EXACT);
    }
    if (rc) fprintf(stderr, "graph: %s\n", err);
    TEST_COND("graph: sample + embed recorded once, replayed with new settings", rc == 0 && same);
    void *cb[] = {pc, fc, tc}, *gb[] = {pg, fg, tg};
    for (int i = 0; i < 3; i++) {
        cpu->ops->release(cpu, cb[i]);
        gpu->ops->release(gpu, gb[i]);
    }
    free(l);
    twin_free(&tl);
    twin_free(&y);
    held_free(&h);
}

/* A product that falls to a slow kernel says so in the log, once per shape (a shape is never
 * slowed silently); one on its format's own kernel says nothing. */
static void test_slow_path_told(void) {
    char path[] = "/tmp/pp-parity-log-XXXXXX";
    int fd = mkstemp(path);
    held slow, fast;
    if (fd < 0 || make_weight(PP_WF_Q8_0, 64, 256, 32, 0, 0, &slow) ||
        make_weight(PP_WF_NF2, 64, 256, 128, 128, 0, &fast)) {
        TEST_COND("slow-path setup", 0);
        return;
    }
    close(fd);
    twin x = twin_rand(256, 1.0f), y = twin_rand(64, 0);
    pp_log_open(path);
    for (int i = 0; i < 3; i++) {
        gpu->ops->matmul(gpu, &slow.g, x.g, 1, y.g);
        gpu->ops->matmul(gpu, &fast.g, x.g, 1, y.g);
    }
    pp_log_open(NULL);
    TEST_COND("a product on a slow kernel is logged, once per shape",
              test_lines_with(path, "q8_0 products 64 x 256, group 32") == 1 && test_lines_with(path, " take ") == 1);
    unlink(path);
    twin_free(&x);
    twin_free(&y);
    held_free(&slow);
    held_free(&fast);
}

static void add_read(void *arg, const char *name, uint64_t read, uint64_t written) {
    (void)name, (void)written;
    *(uint64_t *)arg += read;
}

/* Device bytes a product of n inputs by w reads (0 where nothing counts them). */
static uint64_t product_read_bytes(const pp_weight *w, int n) {
    twin x = twin_rand((size_t)n * (size_t)w->cols, 1.0f), y = twin_rand((size_t)n * (size_t)w->rows, 0);
    uint64_t read = 0;
    gpu->ops->device_traffic(gpu, NULL, NULL);
    gpu->ops->matmul(gpu, w, x.g, n, y.g);
    gpu->ops->device_traffic(gpu, add_read, &read);
    twin_free(&x);
    twin_free(&y);
    return read;
}

/* Many inputs read each weight byte once per 64 of them (no per-conversation weight traffic,
 * no dequantized copy): from 9 inputs to 64 the device bytes read grow by the inputs' bytes
 * only. Counted where the backend counts device traffic (the emulation); last, because device
 * memory allocated while counting is slower to use. */
static void test_batched_weight_traffic(void) {
    if (!gpu->ops->device_traffic || gpu->ops->device_traffic(gpu, NULL, NULL) != 0) {
        printf("  batched weight traffic: not counted by this backend\n");
        return;
    }
    held h;
    if (make_weight(PP_WF_INT4, 1024, 2048, 64, 0, 0, &h)) {
        TEST_COND("traffic weight upload", 0);
        return;
    }
    const uint64_t weight = 1024 * 2048 / 2 + 1024 * 2048 / 64 * 2, inputs = (64 - 9) * 2048 * sizeof(float);
    uint64_t at9 = product_read_bytes(&h.g, 9), at64 = product_read_bytes(&h.g, 64);
    printf("  int4 1024 x 2048 (%.2f MB packed): %.2f MB read at 9 inputs, %.2f MB at 64\n", weight / 1e6, at9 / 1e6,
           at64 / 1e6);
    TEST_COND("9 inputs read the weight once", at9 >= weight && at9 < weight + weight / 4);
    TEST_COND("64 inputs read it once too: only the inputs' bytes added", at64 < at9 + inputs + inputs / 4);
    held_free(&h);
}

/* The device's attention takes heads up to its limit and refuses wider ones by name, so a model with
 * them fails as it opens (its frames once failed one by one); the CPU's takes any. */
static void test_head_dims(void) {
    char err[PP_ERR_LEN];
    TEST_COND("device heads of 256", pp_backend_check_head_dim(gpu, 256, "m", err) == PP_OK);
    TEST_COND("device heads of 512 refused", pp_backend_check_head_dim(gpu, 512, "m: the depformer", err) ==
                                                     PP_EUNSUPPORTED &&
                                                 strstr(err, "m: the depformer") && strstr(err, "512"));
    TEST_COND("cpu heads of 512", pp_backend_check_head_dim(cpu, 512, "m", err) == PP_OK);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_log_set_level(PP_LOG_WARN);
    /* The fused paths are opt-in on the device (cuda.c); this test checks them beside the plain
     * ones (test_matmul and the rest take the plain paths whatever the settings). */
    setenv("PP_CUDA_SELF_PREP", "1", 0);
    setenv("PP_CUDA_HAND_OVER", "1", 0);
    int rc = pp_backend_create("cuda", 0, &gpu, err);
    if (rc == PP_EUNSUPPORTED) TEST_SKIP(err);
    if (rc) {
        fprintf(stderr, "cuda backend: %s\n", err);
        return 1;
    }
    /* The reference is the CPU backend's float loops: its AVX-512 VNNI integer products round
     * activations to int16 (test_cpu_simd checks them against these loops, at their own
     * tolerance), which would hide a CUDA kernel's small errors behind their own. */
    setenv("PP_CPU_SIMD", "avx2", 1);
    if (pp_backend_create("cpu", 2, &cpu, err)) {
        fprintf(stderr, "cpu backend: %s\n", err);
        return 1;
    }
    test_slow_path_told();
    test_head_dims();
    printf("matmul and embed per format:\n");
    for (size_t i = 0; i < sizeof wcases / sizeof wcases[0]; i++) test_matmul(&wcases[i]);
    test_latency_bound(PP_WF_NF2, 128, 128, 0, "nf2 g128");
    test_latency_bound(PP_WF_INT4, 64, 0, 0, "int4 g64");
    test_latency_bound(PP_WF_NF4, 64, 0, NF4_NESTED, "nf4 g64 nested");
    test_host_weights();
    test_embed_sum();
    printf("hand-overs between operations:\n");
    test_hand_over(PP_WF_NF2, 128, 128, 0, "nf2 g128");
    test_hand_over(PP_WF_INT4, 64, 0, 0, "int4 g64");
    test_hand_over(PP_WF_NF4, 64, 0, NF4_NESTED, "nf4 g64 nested");
    printf("LM operations:\n");
    test_lm_ops();
    test_attn_rope();
    for (int f = PP_KV_F32; f <= PP_KV_INT8; f++) {
        test_attn(40, 100, 4, 64, (pp_kv_format)f);     /* wraps the ring twice; one split */
        /* many splits, wrapped: the temporal case */
        test_attn(PARITY_LONG_CONTEXT, PARITY_LONG_CONTEXT + 100, 2, 128, (pp_kv_format)f);
    }
    test_attn(16, 16, 16, 64, PP_KV_F32); /* the depformer's shape */
    test_attn(70, 80, 2, 192, PP_KV_INT8); /* heads wider than 128: 8 values per lane */
    test_attn(70, 80, 2, 66, PP_KV_BF16);  /* a head of no whole lanes: element loads */
    test_attn_rows(PP_KV_F32, 70, 0.0f, 2);
    test_attn_rows(PP_KV_INT8, 70, 0.0f, 2);
    test_attn_rows(PP_KV_BF16, 40, 0.0f, 2); /* one split: the split kernel writes the output */
    test_attn_rows(PP_KV_F32, 70, 10000.0f, 2);
    test_attn_rows(PP_KV_INT8, 300, 0.0f, 4); /* longer splits (above) */
    test_attn_rows(PP_KV_F32, 300, 10000.0f, 8);
    /* prefills: wrapping the ring (the last full passes row by row), and a window shorter than the
     * ring (every pass in one call, the ring wrapped) */
    test_ring_takes_rows();
    test_attn_prefill(PP_KV_F32, 300, 300, 10000.0f, 32, 10);
    test_attn_prefill(PP_KV_INT8, 300, 300, 0.0f, 32, 10);
    test_attn_prefill(PP_KV_BF16, 70, 40, 10000.0f, 16, 8);
    test_attend_in_product(4, 64, 0.0f, ROWS_ATTN, ROWS_ATTN);
    test_attend_in_product(2, 128, 10000.0f, ROWS_ATTN, ROWS_ATTN);
    test_attend_in_product(128, 1, 0.0f, ROWS_FUSED_MAX, 1); /* 8 rows of 128 heads of 1 */
    printf("codec operations:\n");
    test_conv(0, 8, 16, 7, 1, 1, 96, PP_CONV_REPLICATE, 0);  /* long outputs */
    test_conv(0, 32, 24, 4, 2, 1, 8, PP_CONV_ACCUMULATE, 0); /* short outputs, accumulate */
    test_conv(0, 16, 16, 3, 1, 1, 1, 0, 0);                  /* t < history */
    test_conv(1, 24, 16, 8, 4, 1, 5, 0, 0);                  /* transposed, groups 1 */
    test_conv(1, 16, 16, 4, 2, 16, 7, 0, 0);                 /* transposed, depthwise */
    /* the same, many conversations in one call */
    test_conv(0, 8, 16, 7, 1, 1, 96, PP_CONV_REPLICATE, CODEC_ROWS);
    test_conv(0, 6, 8, 8, 4, 1, 256, PP_CONV_REPLICATE, CODEC_ROWS); /* strided, long outputs */
    test_conv(0, 32, 24, 4, 2, 1, 8, PP_CONV_REPLICATE | PP_CONV_ACCUMULATE, CODEC_ROWS);
    test_conv(0, 16, 16, 3, 1, 1, 1, PP_CONV_ACCUMULATE, CODEC_ROWS);
    test_conv(0, 16, 8, 2, 2, 1, 6, 0, CODEC_ROWS); /* no state: base NULL */
    test_conv(1, 24, 16, 8, 4, 1, 5, 0, CODEC_ROWS);
    test_conv(1, 16, 16, 4, 2, 16, 7, 0, CODEC_ROWS);
    test_codec_elementwise();
    test_transpose_rows();
    test_vq(1, 1);
    test_vq(CODEC_ROWS, 8);
    printf("sampling and graphs:\n");
    test_sample();
    test_graph();
    test_graph_sample();
    test_batched_weight_traffic();
    TEST_COND("no sticky device error", gpu->ops->last_error(gpu, err) == 0);
    pp_backend_destroy(gpu);
    pp_backend_destroy(cpu);
    return test_report();
}
