/* personaplex-bench gemv: times a backend's matmul for each weight format on the PersonaPlex
 * shapes, with synthetic Gaussian-like weights quantized in memory by the same quantizers the
 * file converter uses. Prints ms per product and the GB/s of weight bytes it reads, against the
 * backend's copy bandwidth (memcpy on the CPU, device memory on a GPU), and G weights/s (what
 * tools/bench-vs-ggml.sh compares with ggml's MUL_MAT on the same shape).
 *   personaplex-bench gemv [--device cpu|cuda] [--threads N] [--batch N] [--seconds S]
 *                          [--formats f32,bf16,...] [--small | --shape ROWSxCOLS] [--zero-points]
 * --zero-points gives the INT8 weights a zero point per block (an ONNX bundle's asymmetric blocks).
 * On a device the products run back to back and are timed to the last one's end; the weight
 * is uploaded in enough copies (taken in turn) to exceed any last-level cache, so the figure
 * is the device memory's, not the cache's. */
#include "bench.h"

#include "backend/backend.h"
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

/* Owns the buffers behind one in-memory weight. */
typedef struct {
    pp_weight w;
    void *data, *scales, *nested, *map;
} held;

static int zero_points; /* --zero-points */

static void held_free(held *h) {
    free(h->data);
    free(h->scales);
    free(h->nested);
    free(h->map);
    free((void *)h->w.zeros);
    memset(h, 0, sizeof *h);
}

static int make_weight(pp_wformat fmt, const float *src, int64_t rows, int64_t cols, held *h) {
    size_t n = (size_t)(rows * cols);
    memset(h, 0, sizeof *h);
    h->w = (pp_weight){.fmt = fmt, .rows = rows, .cols = cols, .name = pp_wformat_name(fmt)};
    switch (fmt) {
    case PP_WF_F32:
        if (!(h->data = malloc(n * 4))) return -1;
        memcpy(h->data, src, n * 4);
        break;
    case PP_WF_F16:
    case PP_WF_BF16: {
        uint16_t *d = h->data = malloc(n * 2);
        if (!d) return -1;
        for (size_t i = 0; i < n; i++) d[i] = fmt == PP_WF_F16 ? pp_f32_to_f16(src[i]) : pp_f32_to_bf16(src[i]);
        break;
    }
    case PP_WF_NF2:
    case PP_WF_INT4: {
        int gs = fmt == PP_WF_NF2 ? 128 : 64;
        h->data = malloc(fmt == PP_WF_NF2 ? n / 4 : n / 2);
        h->scales = malloc(n / (size_t)gs * 2);
        if (!h->data || !h->scales) return -1;
        if (fmt == PP_WF_NF2)
            pp_quant_nf2_quantize(src, (int64_t)n / gs, gs, gs, h->data, h->scales);
        else
            pp_quant_int4_quantize(src, (int64_t)n / gs, gs, h->data, h->scales);
        h->w.group = gs;
        h->w.np2 = gs;
        break;
    }
    case PP_WF_NF4: {
        int64_t blocks = (int64_t)n / 64, nb = (blocks + 255) / 256;
        float *absmax = malloc(sizeof(float) * (size_t)blocks);
        h->data = malloc(n / 2);
        h->scales = malloc((size_t)blocks);
        h->nested = malloc(sizeof(float) * (size_t)nb);
        h->map = malloc(sizeof(float) * 256);
        if (!absmax || !h->data || !h->scales || !h->nested || !h->map) {
            free(absmax);
            return -1;
        }
        pp_quant_nf4_quantize(src, blocks, 64, h->data, absmax);
        pp_quant_nf4_dynamic_map(h->map);
        h->w.nested_offset = pp_quant_nf4_nest(absmax, blocks, 256, h->map, h->scales, h->nested);
        free(absmax);
        h->w.group = 64;
        h->w.quant_map = pp_quant_nf4_table;
        h->w.nested_absmax = h->nested;
        h->w.nested_map = h->map;
        h->w.nested_block = 256;
        break;
    }
    case PP_WF_Q4_0:
    case PP_WF_Q8_0:
    case PP_WF_Q4K: {
        int block = fmt == PP_WF_Q4K ? QUANT_Q4_K_BLOCK : QUANT_Q4_0_BLOCK;
        if (cols % block || !(h->data = malloc(n / (size_t)block * (size_t)pp_wformat_block_bytes(fmt)))) return -1;
        if (fmt == PP_WF_Q4_0)
            pp_quant_q4_0_quantize(src, (int64_t)n / block, h->data);
        else if (fmt == PP_WF_Q8_0)
            pp_quant_q8_0_quantize(src, (int64_t)n / block, h->data);
        else
            pp_quant_q4_k_quantize(src, (int64_t)n / block, h->data);
        h->w.group = block;
        break;
    }
    case PP_WF_INT8: { /* blocks of 128 along each row */
        int64_t block = 128;
        if (cols % block || !(h->data = malloc(n)) || !(h->scales = malloc(n / (size_t)block * 4))) return -1;
        pp_quant_int8_quantize(src, rows, cols, block, h->data, h->scales);
        h->w.group = (int)block;
        int8_t *zeros = zero_points ? malloc(n / (size_t)block) : NULL;
        for (size_t g = 0; zeros && g < n / (size_t)block; g++) zeros[g] = (int8_t)(g % 17 - 8);
        if (zero_points && !(h->w.zeros = zeros)) return -1;
        break;
    }
    case PP_WF_COUNT: return -1;
    }
    h->w.data = h->data;
    h->w.scales = h->scales;
    return 0;
}

/* Copies of one weight a device product cycles through: at least this many bytes in all. */
#define DEVICE_ROTATION_BYTES ((size_t)512 << 20)
#define MAX_COPIES 64

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

/* Times h's weight on be, uploaded first when be is a device; ms per product, or < 0 after
 * printing why not. */
static double time_weight(pp_backend *be, const held *h, const float *x_host, int batch, int64_t R, int64_t C,
                          double seconds) {
    int device = strcmp(be->ops->name, "cpu") != 0;
    size_t bytes = pp_weight_bytes(&h->w);
    int copies = device ? (int)((DEVICE_ROTATION_BYTES + bytes - 1) / bytes) : 1;
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    pp_weight w[MAX_COPIES];
    char err[PP_ERR_LEN];
    int up = 0;
    for (; up < copies; up++)
        if (be->ops->weight_upload(be, &h->w, &w[up], err)) break;
    float *x = be->ops->alloc(be, sizeof(float) * (size_t)(C * batch));
    float *y = be->ops->alloc(be, sizeof(float) * (size_t)(R * batch));
    double ms = -1;
    if (up < copies || !x || !y)
        fprintf(stderr, "personaplex-bench: %s\n", up < copies ? err : "out of backend memory for x and y");
    else {
        be->ops->upload(be, x, x_host, sizeof(float) * (size_t)(C * batch));
        ms = time_matmul(be, w, copies, x, batch, y, seconds);
    }
    for (int i = 0; i < up; i++) be->ops->weight_release(be, &w[i]);
    if (x) be->ops->release(be, x);
    if (y) be->ops->release(be, y);
    return ms;
}

static int usage(void) {
    fprintf(stderr, "usage: personaplex-bench gemv [--device cpu|cuda] [--threads N] [--batch N] [--seconds S] "
                    "[--formats f32,f16,bf16,nf2,int4,nf4,q4_0,q8_0,q4_k,int8] [--small | --shape ROWSxCOLS] "
                    "[--zero-points]\n");
    return 2;
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
        else if (strcmp(argv[i], "--small") == 0)
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
    pp_backend *be = bench_backend(device, threads, &bw);
    if (!be) return 1;
    if (strcmp(device, "cpu") == 0)
        printf("memcpy bandwidth: %.1f GB/s (read + write); batch %d\n", bw, batch);
    else
        printf("%s copy bandwidth: %.1f GB/s (read + write); batch %d\n", be->ops->name, bw, batch);
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
            double ms = time_weight(be, &h, x, batch, R, C, seconds);
            if (ms < 0) {
                held_free(&h);
                rc = 1;
                break;
            }
            double mb = (double)pp_weight_bytes(&h.w) / 1e6;
            char label[64];
            snprintf(label, sizeof label, "%lld x %lld", (long long)R, (long long)C);
            printf("%-28s %-6s %10.1f %10.3f %9.2f %7.0f%% %9.2f   %s\n", label, name, mb, ms, mb / ms,
                   bw > 0 ? 100.0 * (mb / ms) / bw : 0.0, (double)(R * C) / ms / 1e6, list[s].what);
            fflush(stdout);
            held_free(&h);
        }
        free(src);
        free(x);
    }
    pp_backend_destroy(be);
    return rc;
}
