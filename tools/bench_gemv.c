/* personaplex-bench gemv: times a backend's matmul for each weight format on the PersonaPlex
 * shapes, with synthetic Gaussian-like weights quantized in memory by the same quantizers the
 * file converter uses. Prints ms per product and the GB/s of weight bytes it reads, against the
 * backend's copy bandwidth (memcpy on the CPU, device memory on a GPU), and G weights/s (what
 * tools/bench-vs-ggml.sh compares with ggml's MUL_MAT on the same shape).
 *   personaplex-bench gemv [--device cpu|cuda] [--threads N] [--batch N] [--seconds S]
 *                          [--formats f32,bf16,...] [--small | --shape ROWSxCOLS] [--zero-points]
 *                          [--in-cache] [--compare SIMD]
 * --zero-points gives the INT8 weights a zero point per block (an ONNX bundle's asymmetric blocks).
 * The products run back to back and are timed to the last one's end. Each weight is held in
 * enough copies, taken in turn, to exceed any last-level cache, so the figure is the memory's
 * (DRAM or device memory), as in a frame, whose weights are far larger than any cache.
 * --in-cache times one copy read again and again instead, as ggml's test-backend-ops does (on a
 * CPU with a 32 MB L3, a 2-bit 4096 x 14336 weight of 15-20 MB then comes largely from it), so
 * that tools/bench-vs-ggml.sh compares like with like. --compare SIMD (CPU only) also times the
 * products alternately with the CPU backend's own loops and with the variant named (portable,
 * avx2, avx2-int16, avx512-vnni, neon; cpu_simd.h), one product each in turn, and prints the
 * medians and their ratio: steady to about 2 % where separate runs swing by 15 %. */
#include "bench.h"

#include "backend/backend.h"
#include "backend/cpu.h"
#include "base/err.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t rows, cols;
    const char *what;
} shape;

static const shape shapes[] = {
    {12288, 4096, "temporal in_proj"},
    {22528, 4096, "temporal gating linear_in"},
    {4096, 11264, "temporal gating linear_out"},
    {5632, 1024, "depformer gating linear_in"},
};
/* --small: the same kinds of shape at 1/16 the size, for a quick run or a small machine */
static const shape small_shapes[] = {
    {3072, 1024, "in_proj / 4x4"},
    {1024, 2816, "linear_out / 4x4"},
};

static uint64_t rng = 0x243f6a8885a308d3ull;
static float gauss(void) { /* sum of 4 uniforms: Gaussian enough for code histograms */
    float s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        s += (float)(rng >> 40) * (1.0f / 16777216.0f) - 0.5f;
    }
    return s * 0.035f;
}

/* The buffers behind one in-memory weight, with their sizes, so that it can be copied. */
enum { HELD_DATA, HELD_SCALES, HELD_NESTED, HELD_MAP, HELD_ZEROS, HELD_BUFFERS };
typedef struct {
    pp_weight w;
    void *buf[HELD_BUFFERS];
    size_t size[HELD_BUFFERS];
} held;

static int zero_points; /* --zero-points */

static void held_free(held *h) {
    for (int b = 0; b < HELD_BUFFERS; b++) free(h->buf[b]);
    memset(h, 0, sizeof *h);
}

/* Allocates buffer b of h, `bytes` long; NULL when out of memory. */
static void *hold(held *h, int b, size_t bytes) {
    h->size[b] = bytes;
    return h->buf[b] = malloc(bytes);
}

/* Points h->w at h's buffers (after they were allocated or copied). */
static void held_point(held *h) {
    h->w.data = h->buf[HELD_DATA];
    h->w.scales = h->buf[HELD_SCALES];
    h->w.nested_absmax = h->buf[HELD_NESTED];
    h->w.nested_map = h->buf[HELD_MAP];
    h->w.zeros = h->buf[HELD_ZEROS];
}

static int make_weight(pp_wformat fmt, const float *src, int64_t rows, int64_t cols, held *h) {
    size_t n = (size_t)(rows * cols);
    memset(h, 0, sizeof *h);
    h->w = (pp_weight){.fmt = fmt, .rows = rows, .cols = cols, .name = pp_wformat_name(fmt)};
    switch (fmt) {
    case PP_WF_F32:
        if (!hold(h, HELD_DATA, n * 4)) return -1;
        memcpy(h->buf[HELD_DATA], src, n * 4);
        break;
    case PP_WF_F16:
    case PP_WF_BF16: {
        uint16_t *d = hold(h, HELD_DATA, n * 2);
        if (!d) return -1;
        for (size_t i = 0; i < n; i++) d[i] = fmt == PP_WF_F16 ? pp_f32_to_f16(src[i]) : pp_f32_to_bf16(src[i]);
        break;
    }
    case PP_WF_NF2:
    case PP_WF_INT4: {
        int gs = fmt == PP_WF_NF2 ? 128 : 64;
        void *data = hold(h, HELD_DATA, fmt == PP_WF_NF2 ? n / 4 : n / 2);
        void *scales = hold(h, HELD_SCALES, n / (size_t)gs * 2);
        if (!data || !scales) return -1;
        if (fmt == PP_WF_NF2)
            pp_quant_nf2_quantize(src, (int64_t)n / gs, gs, gs, data, scales);
        else
            pp_quant_int4_quantize(src, (int64_t)n / gs, gs, data, scales);
        h->w.group = gs;
        h->w.np2 = gs;
        break;
    }
    case PP_WF_NF4: {
        int64_t blocks = (int64_t)n / 64, nb = (blocks + 255) / 256;
        float *absmax = malloc(sizeof(float) * (size_t)blocks);
        void *data = hold(h, HELD_DATA, n / 2), *scales = hold(h, HELD_SCALES, (size_t)blocks);
        float *nested = hold(h, HELD_NESTED, sizeof(float) * (size_t)nb), *map = hold(h, HELD_MAP, sizeof(float) * 256);
        if (!absmax || !data || !scales || !nested || !map) {
            free(absmax);
            return -1;
        }
        pp_quant_nf4_quantize(src, blocks, 64, data, absmax);
        pp_quant_nf4_dynamic_map(map);
        h->w.nested_offset = pp_quant_nf4_nest(absmax, blocks, 256, map, scales, nested);
        free(absmax);
        h->w.group = 64;
        h->w.quant_map = pp_quant_nf4_table;
        h->w.nested_block = 256;
        break;
    }
    case PP_WF_Q4_0:
    case PP_WF_Q8_0:
    case PP_WF_Q4K: {
        int block = fmt == PP_WF_Q4K ? QUANT_Q4_K_BLOCK : QUANT_Q4_0_BLOCK;
        void *data = cols % block ? NULL : hold(h, HELD_DATA, n / (size_t)block * (size_t)pp_wformat_block_bytes(fmt));
        if (!data) return -1;
        if (fmt == PP_WF_Q4_0)
            pp_quant_q4_0_quantize(src, (int64_t)n / block, data);
        else if (fmt == PP_WF_Q8_0)
            pp_quant_q8_0_quantize(src, (int64_t)n / block, data);
        else
            pp_quant_q4_k_quantize(src, (int64_t)n / block, data);
        h->w.group = block;
        break;
    }
    case PP_WF_INT8: { /* blocks of 128 along each row */
        size_t block = 128;
        void *data = cols % 128 ? NULL : hold(h, HELD_DATA, n),
             *scales = data ? hold(h, HELD_SCALES, n / block * 4) : NULL;
        if (!scales) return -1;
        pp_quant_int8_quantize(src, rows, cols, (int64_t)block, data, scales);
        h->w.group = (int)block;
        int8_t *zeros = zero_points ? hold(h, HELD_ZEROS, n / block) : NULL;
        if (zero_points && !zeros) return -1;
        for (size_t g = 0; zeros && g < n / block; g++) zeros[g] = (int8_t)(g % 17 - 8);
        break;
    }
    case PP_WF_COUNT: return -1;
    }
    held_point(h);
    return 0;
}

/* A copy of src in buffers of its own (copy is zeroed first); -1 when out of memory. */
static int held_copy(const held *src, held *copy) {
    memset(copy, 0, sizeof *copy);
    copy->w = src->w;
    for (int b = 0; b < HELD_BUFFERS; b++)
        if (src->buf[b]) {
            if (!hold(copy, b, src->size[b])) return -1;
            memcpy(copy->buf[b], src->buf[b], src->size[b]);
        }
    held_point(copy);
    return 0;
}

/* Unless --in-cache: copies of each weight taken in turn, at least this many bytes in all, so
 * that every product reads its weight from memory (DRAM, or device memory) rather than from a
 * cache that kept it from the run before: more than any last-level cache, CPU or GPU. */
#define ROTATION_BYTES ((size_t)512 << 20)
static int in_cache; /* --in-cache: one copy, read again by every product, as ggml's test-backend-ops does */

/* The CPU backend's variant another product alternates with (--compare), or -1. */
static int compare_simd = -1;

/* Runs the product until `seconds` have passed (at least 3 runs), cycling through the n
 * copies of the weight, and returns ms per run (the device drained before the clock stops). */
static double time_matmul(pp_backend *be, const pp_weight *w, int copies, const float *x, int batch, float *y,
                          double seconds) {
    be->ops->matmul(be, &w[0], x, batch, y); /* warm: pages in, scratch grown */
    be->ops->sync(be);
    int runs = 0;
    double t0 = bench_now(), t;
    do {
        for (int i = 0; i < copies; i++, runs++) be->ops->matmul(be, &w[i], x, batch, y);
        be->ops->sync(be);
        t = bench_now() - t0;
    } while (t < seconds || runs < 3);
    return 1e3 * t / runs;
}

/* --compare's figures for one weight: the medians of each variant's products, ms */
typedef struct {
    double own_ms, other_ms;
    int pairs; /* 0: none taken */
} comparison;

/* --compare: products timed one at a time, the backend's own variant and compare_simd taken in
 * turn (which goes first swapping every pair), so both see the same machine state. Differences
 * of a few percent stand out that separate runs hide. */
static comparison compare_matmul(pp_backend *be, const pp_weight *w, int copies, const float *x, int batch, float *y,
                                 double seconds) {
    comparison c = {0, 0, 0};
    cpu_ctx *ctx = be->impl;
    const cpu_simd variants[2] = {ctx->simd, (cpu_simd)compare_simd};
    int cap = 0, pairs = 0;
    double *ms = NULL; /* pair p, variant v: ms[2 p + v] */
    for (double t0 = bench_now(); bench_now() - t0 < seconds || pairs < 3; pairs++) {
        if (pairs == cap) {
            double *more = realloc(ms, sizeof(double) * 2 * (size_t)(cap = 2 * cap + 256));
            if (!more) break;
            ms = more;
        }
        for (int k = 0; k < 2; k++) {
            int v = (k + pairs) & 1;
            ctx->simd = variants[v];
            double t = bench_now();
            be->ops->matmul(be, &w[pairs % copies], x, batch, y);
            ms[2 * pairs + v] = 1e3 * (bench_now() - t);
        }
    }
    ctx->simd = variants[0];
    double *median[2] = {malloc(sizeof(double) * (size_t)pairs), malloc(sizeof(double) * (size_t)pairs)};
    if (ms && median[0] && median[1]) {
        for (int v = 0; v < 2; v++) {
            for (int p = 0; p < pairs; p++) median[v][p] = ms[2 * p + v];
            bench_sort(median[v], pairs);
        }
        c = (comparison){median[0][pairs / 2], median[1][pairs / 2], pairs};
    }
    free(ms);
    free(median[0]);
    free(median[1]);
    return c;
}

/* Times h's weight on be (uploaded, or on the CPU aliased, in copies as ROTATION_BYTES says);
 * ms per product, or < 0 after printing why not. */
static double time_weight(pp_backend *be, const held *h, const float *x_host, int batch, int64_t R, int64_t C,
                          double seconds, comparison *cmp) {
    int device = strcmp(be->ops->name, "cpu") != 0;
    size_t bytes = pp_weight_bytes(&h->w);
    int copies = in_cache ? 1 : (int)((ROTATION_BYTES + bytes - 1) / bytes);
    /* the CPU backend's upload aliases host memory: the copies are made here */
    held *host = device ? NULL : calloc((size_t)copies, sizeof *host);
    pp_weight *w = calloc((size_t)copies, sizeof *w);
    char err[PP_ERR_LEN] = "out of memory for the weight's copies";
    int up = 0;
    for (; w && (device || host) && up < copies; up++) {
        const held *from = h;
        if (!device && up > 0) {
            if (held_copy(h, &host[up])) break;
            from = &host[up];
        }
        if (be->ops->weight_upload(be, &from->w, &w[up], err)) break;
    }
    float *x = be->ops->alloc(be, sizeof(float) * (size_t)(C * batch));
    float *y = be->ops->alloc(be, sizeof(float) * (size_t)(R * batch));
    double ms = -1;
    if (up < copies || !x || !y)
        fprintf(stderr, "personaplex-bench: %s\n", up < copies ? err : "out of backend memory for x and y");
    else {
        be->ops->upload(be, x, x_host, sizeof(float) * (size_t)(C * batch));
        ms = time_matmul(be, w, copies, x, batch, y, seconds);
        if (compare_simd >= 0) *cmp = compare_matmul(be, w, copies, x, batch, y, seconds);
    }
    for (int i = 0; i < up; i++) be->ops->weight_release(be, &w[i]);
    for (int i = 1; host && i < copies; i++) held_free(&host[i]);
    free(host);
    free(w);
    if (x) be->ops->release(be, x);
    if (y) be->ops->release(be, y);
    return ms;
}

static int usage(void) {
    fprintf(bench_usage_stream(), "usage: personaplex-bench gemv [--device cpu|cuda] [--threads N] [--batch N] [--seconds S] "
                    "[--formats f32,f16,bf16,nf2,int4,nf4,q4_0,q8_0,q4_k,int8] [--small | --shape ROWSxCOLS] "
                    "[--zero-points] [--in-cache] [--compare portable|avx2|avx2-int16|avx512-vnni|neon]\n");
    return bench_usage_status();
}

int bench_gemv(int argc, char **argv) {
    int threads = 0, batch = 1, small = 0;
    shape custom = {0, 0, "--shape"};
    double seconds = 1.0;
    const char *formats = "f32,bf16,nf2,int4,nf4,q4_k,int8", *device = "cpu";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--formats") == 0 && i + 1 < argc)
            formats = argv[++i];
        else if (strcmp(argv[i], "--zero-points") == 0)
            zero_points = 1;
        else if (strcmp(argv[i], "--in-cache") == 0)
            in_cache = 1;
        else if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            for (int v = CPU_SIMD_PORTABLE; v <= CPU_SIMD_NEON && compare_simd < 0; v++)
                if (strcmp(name, pp_cpu_simd_name((cpu_simd)v)) == 0) compare_simd = v;
            if (compare_simd < 0) return usage();
        } else if (strcmp(argv[i], "--small") == 0)
            small = 1;
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            long long r, c;
            char tail;
            if (sscanf(argv[++i], "%lldx%lld%c", &r, &c, &tail) != 2 || r < 1 || c < 1) return usage();
            custom.rows = r;
            custom.cols = c;
        } else
            return usage();
    }
    /* quantized formats need whole groups (128 for NF2) */
    if (batch < 1 || threads < 0 || (custom.rows && (small || custom.cols % 128))) return usage();
    double bw;
    if (compare_simd >= 0 && strcmp(device, "cpu") != 0) return usage();
    pp_backend *be = bench_backend(device, threads, &bw);
    if (!be) return 1;
    if (compare_simd >= 0 && !pp_cpu_simd_includes(((cpu_ctx *)be->impl)->simd, (cpu_simd)compare_simd)) {
        fprintf(stderr, "personaplex-bench: --compare %s: not a variant this CPU runs (its best: %s)\n",
                pp_cpu_simd_name((cpu_simd)compare_simd), pp_cpu_simd_name(((cpu_ctx *)be->impl)->simd));
        pp_backend_destroy(be);
        return 1;
    }
    if (strcmp(device, "cpu") == 0)
        printf("memcpy bandwidth: %.1f GB/s (read + write); batch %d\n", bw, batch);
    else
        printf("%s copy bandwidth: %.1f GB/s (read + write); batch %d\n", be->ops->name, bw, batch);
    if (in_cache)
        printf("each product reads the same copy of its weight, mostly from cache if it fits (--in-cache)\n");
    else
        printf("each product reads its weight from memory: copies, %zu MB in all, taken in turn\n",
               ROTATION_BYTES >> 20);
    printf("%-28s %-6s %10s %10s %9s %8s %9s\n", "shape (rows x cols)", "format", "MB", "ms/gemv", "GB/s", "% copy",
           "Gw/s");
    const shape *list = custom.rows ? &custom : small ? small_shapes : shapes;
    size_t count = custom.rows ? 1 : small ? sizeof small_shapes / sizeof *small_shapes : sizeof shapes / sizeof *shapes;
    int rc = 0;
    for (size_t s = 0; s < count && !rc; s++) {
        int64_t R = list[s].rows, C = list[s].cols;
        float *src = malloc(sizeof(float) * (size_t)(R * C)), *x = malloc(sizeof(float) * (size_t)(C * batch));
        if (!src || !x) {
            fprintf(stderr, "personaplex-bench: out of memory for %lld x %lld\n", (long long)R, (long long)C);
            rc = 1;
        }
        for (int64_t i = 0; !rc && i < R * C; i++) src[i] = gauss();
        for (int64_t i = 0; !rc && i < C * batch; i++) x[i] = gauss();
        for (int f = 0; f < PP_WF_COUNT && !rc; f++) {
            const char *name = pp_wformat_name((pp_wformat)f), *hit = strstr(formats, name);
            size_t l = strlen(name);
            if (!hit || (hit != formats && hit[-1] != ',') || (hit[l] && hit[l] != ',')) continue;
            held h;
            if (make_weight((pp_wformat)f, src, R, C, &h)) {
                fprintf(stderr, "personaplex-bench: out of memory for %s\n", name);
                held_free(&h);
                rc = 1;
                break;
            }
            comparison cmp = {0, 0, 0};
            double ms = time_weight(be, &h, x, batch, R, C, seconds, &cmp);
            if (ms < 0 || (compare_simd >= 0 && !cmp.pairs)) {
                if (ms >= 0) fprintf(stderr, "personaplex-bench: out of memory for --compare's samples\n");
                held_free(&h);
                rc = 1;
                break;
            }
            double mb = (double)pp_weight_bytes(&h.w) / 1e6;
            char label[64];
            snprintf(label, sizeof label, "%lld x %lld", (long long)R, (long long)C);
            printf("%-28s %-6s %10.1f %10.3f %9.2f %7.0f%% %9.2f   %s\n", label, name, mb, ms, mb / ms,
                   bw > 0 ? 100.0 * (mb / ms) / bw : 0.0, (double)(R * C) / ms / 1e6, list[s].what);
            if (cmp.pairs)
                printf("%-28s %-6s %10s %10.3f   --compare: %s %.3f ms / %s %.3f ms = %.3f (medians of %d pairs)\n", "",
                       "", "", cmp.other_ms, pp_cpu_simd_name((cpu_simd)compare_simd), cmp.other_ms,
                       pp_cpu_simd_name(((cpu_ctx *)be->impl)->simd), cmp.own_ms, cmp.other_ms / cmp.own_ms, cmp.pairs);
            fflush(stdout);
            held_free(&h);
        }
        free(src);
        free(x);
    }
    pp_backend_destroy(be);
    return rc;
}
