/* personaplex-bench: speed measurements, one mode per part of the engine.
 *
 *   personaplex-bench MODE [options]     (personaplex-bench MODE --help for a mode's options)
 *
 * Modes: gemv (CPU matrix products per weight format), and attn, codec, lm, frame, batch when
 * built in. Speed is measured here, never asserted by tests. */
#include "bench.h"

#include "backend/backend.h"
#include "base/err.h"
#include "io/weight.h"
#include "personaplex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_double); }

double bench_memcpy_gbps(void) {
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t = bench_now();
        memcpy(rep & 1 ? a : b, rep & 1 ? b : a, n);
        t = bench_now() - t;
        if (2.0 * (double)n / t > best) best = 2.0 * (double)n / t;
    }
    free(a);
    free(b);
    return best / 1e9;
}

pp_backend *bench_cpu_backend(int threads, double *bw) {
    char err[PP_ERR_LEN];
    pp_backend *be;
    if (pp_backend_cpu_create(threads, &be, err)) {
        fprintf(stderr, "personaplex-bench: %s\n", err);
        return NULL;
    }
    *bw = bench_memcpy_gbps();
    return be;
}

double bench_backend_copy_gbps(pp_backend *be) {
    size_t n = (size_t)256 << 20;
    void *a = be->ops->alloc(be, n), *b = be->ops->alloc(be, n);
    double best = 0;
    for (int rep = 0; a && b && rep < 5; rep++) {
        be->ops->sync(be);
        double t = bench_now();
        be->ops->copy(be, rep & 1 ? a : b, rep & 1 ? b : a, n);
        be->ops->sync(be);
        t = bench_now() - t;
        if (2.0 * (double)n / t > best) best = 2.0 * (double)n / t;
    }
    if (a) be->ops->release(be, a);
    if (b) be->ops->release(be, b);
    return best / 1e9;
}

pp_backend *bench_backend(const char *device, int threads, double *bw) {
    if (strcmp(device, "cpu") == 0) return bench_cpu_backend(threads, bw);
    char err[PP_ERR_LEN];
    pp_backend *be;
    if (pp_backend_create(device, threads, &be, err)) {
        fprintf(stderr, "personaplex-bench: %s\n", err);
        return NULL;
    }
    *bw = bench_backend_copy_gbps(be);
    return be;
}

/* ---- device traffic and the H100 estimate ---- */

#define H100_BYTES_PER_S 3.0e12
#define H100_WARP_INSTR_PER_S (132 * 4 * 1.755e9)
#define H100_NODE_S 1.3e-6

/* Warp instructions a GEMV issues per byte it reads, by weight format and kernel instance (1, 2,
 * 3..4 and 5..8 inputs): the loops' warp/B as tools/kernel-report.sh derives them from the PTX
 * (sm_90, November 2026; NF2, INT4 and NF4 the integer kernel). The two must be updated
 * together. Each input adds its products to the shared decode, so 8 inputs cost NF2 7x the
 * instructions of one (an H200 ran a tick of 8 conversations 9x slower than one: an estimate
 * at one input's rate had it 2x). Q4_K has an instance for 1 input and one for more. Q4_0 and
 * Q8_0 run the one-element kernel, which the report does not measure: the figures of Q4_K's
 * earlier kernel (a lane per sub-block) stand in. The model prices issue only, every
 * instruction alike: that Q4_K kernel's activation loads (32 cache lines per warp load) held it
 * to 4 % of an H200's bandwidth, which no per-byte instruction rate shows, and the present one
 * counts more PTX instructions for having traded its integer-to-float conversions (an eighth of
 * the float rate) for pairs of full-rate ones (kernels/decode_ggml.cuh). */
static const double gemv_instr_per_byte[PP_WF_COUNT][4] = {
    [PP_WF_F32] = {0.031, 0.052, 0.094, 0.172},  [PP_WF_F16] = {0.082, 0.119, 0.193, 0.349},
    [PP_WF_BF16] = {0.074, 0.111, 0.186, 0.341}, [PP_WF_NF2] = {0.250, 0.453, 0.816, 1.814},
    [PP_WF_INT4] = {0.088, 0.158, 0.338, 0.682}, [PP_WF_NF4] = {0.237, 0.315, 0.530, 0.982},
    [PP_WF_Q4_0] = {0.587, 4.286, 4.286, 4.286}, [PP_WF_Q8_0] = {0.587, 4.286, 4.286, 4.286},
    [PP_WF_Q4K] = {0.894, 2.217, 2.217, 2.217},  [PP_WF_INT8] = {0.210, 0.278, 0.503, 1.242}};

double bench_gemv_instr_per_byte(int fmt, int inputs) {
    const int instance = inputs <= 1 ? 0 : inputs == 2 ? 1 : inputs <= 4 ? 2 : 3;
    return fmt >= 0 && fmt < PP_WF_COUNT ? gemv_instr_per_byte[fmt][instance] : 0;
}

/* The same for the tensor-core product of more than 8 inputs (kernels/gemm_tc.cuh), per step of
 * one block (32 rows x 32 columns, up to 64 inputs): the PTX instructions of its loop on the
 * aligned-input path (sm_90, November 2026; the moves nvcc wraps around each cvt.rna dropped,
 * ptxas folds them) x 4 warps / the step's weight bytes with scales, e.g. NF2 340 x 4 / 288 B.
 * Nearly all of it is decode, split and staging, which is paid once per block whatever the
 * inputs. The ggml blocks' (Q4_0 218, Q8_0 183, Q4_K 235 PTX instructions in the whole kernel,
 * NF2 264) are NF2's path scaled by those totals: Q4_K 303 x 4 / 576 B. */
static const double gemm_tc_instr_per_byte[PP_WF_COUNT] = {
    [PP_WF_F16] = 0.37,  [PP_WF_BF16] = 0.37, [PP_WF_NF2] = 4.7, [PP_WF_INT4] = 1.94, [PP_WF_NF4] = 1.96,
    [PP_WF_Q4_0] = 1.95, [PP_WF_Q8_0] = 0.87, [PP_WF_Q4K] = 2.1, [PP_WF_INT8] = 1.21};

double bench_gemm_tc_instr_per_byte(int fmt) { return fmt >= 0 && fmt < PP_WF_COUNT ? gemm_tc_instr_per_byte[fmt] : 0; }

/* The same for the integer tensor-core product (kernels/gemm_int.cuh), NF2 and INT4: a warp takes
 * 16 inputs by 32 rows (the launcher's tile for the large weights), so n inputs run the chunk loop
 * ceil(n / 16) times over each weight byte. Per run, the PTX instructions of its chunk loop (sm_90,
 * November 2026) with each mma.sync counted as 8 (an m16n8k32 of bytes is 4096 multiply-adds; a
 * Hopper SM's quarter does ~512 a clock through mma.sync), over the chunk's weight bytes with
 * their f16 scales (32 rows; NF2 64 columns, 18 bytes a row; INT4 32, 17 bytes):
 *   NF2 (360 - 32 + 32 x 8) / 576 = 1.01;  INT4 (251 - 8 + 8 x 8) / 544 = 0.56
 * Issue only: the kernel's warps wait on their activation loads (gemm_int.cuh), which this model
 * does not count. On the H200 the 64-input NF2 product of 12288 x 4096 took 0.091 ms; this model
 * says 0.058. */
double bench_gemm_int_instr_per_byte(int fmt, int inputs) {
    const double per_run = fmt == PP_WF_NF2 ? 1.01 : fmt == PP_WF_INT4 ? 0.56 : 0;
    return per_run * ((inputs + 15) / 16);
}

/* A product that prepares its inputs in each of its blocks (pk_gemv_int_self_kernel, the
 * depformer's) repeats the preparation per block: n inputs of `cols` per block of `rows per block`
 * rows, so n·cols·(thread instructions per element) / 32 warp instructions per rows·cols weights.
 * Per element, NF2 ~80 (loading and normalising 25, the warp WHT 41 at 128 values, rounding a
 * run 213 / 16, counted before the rounding moved to 64-input chunks: the same work per
 * element), INT4 and NF4 ~40 (no WHT; the same rounding, in other byte orders): the loops' PTX
 * instructions of the self kernel's normalising instance, sm_90, November 2026. Rows per block:
 * 8 warps' (kernels/gemv.cu: 4 rows a warp at 1 input, 2 beyond; NF4, whose chunks are twice as
 * wide, 2 at 1 and 2 inputs, 1 beyond); weight bytes per element with the group scales of 64-weight groups (f16;
 * NF4 the nested absmax's byte). The latency of a block's preparation before its first product
 * (about as long as its instructions in sequence) is not in this model. */
static double self_prep_instr_per_byte(int fmt, int inputs) {
    const double per_elem = fmt == PP_WF_NF2 ? 80 : fmt == PP_WF_INT4 || fmt == PP_WF_NF4 ? 40 : 0;
    const double bytes_per_weight = fmt == PP_WF_NF2   ? (2 + 16.0 / 64) / 8
                                    : fmt == PP_WF_NF4 ? (4 + 8.0 / 64) / 8
                                                       : (4 + 16.0 / 64) / 8;
    const int rows_per_warp = fmt == PP_WF_NF4 ? (inputs <= 2 ? 2 : 1) : inputs == 1 ? 4 : 2;
    const int rows_per_block = 8 * rows_per_warp;
    return inputs * per_elem / (32.0 * rows_per_block * bytes_per_weight);
}

static bench_kernel *kernel_row(bench_traffic *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->k[i].name, name) == 0) return &t->k[i];
    if (t->n == BENCH_KERNELS) return &t->k[BENCH_KERNELS - 1];
    bench_kernel *k = &t->k[t->n++];
    *k = (bench_kernel){.name = t->n == BENCH_KERNELS ? "(other names)" : name};
    return k;
}

static void add_row(bench_traffic *t, const bench_kernel *k, double scale) {
    bench_kernel *r = kernel_row(t, k->name);
    r->launches += scale * k->launches;
    r->read += scale * k->read;
    r->written += scale * k->written;
    r->s += scale * k->s;
    t->read += scale * k->read;
    t->written += scale * k->written;
    t->s += scale * k->s;
}

typedef struct take_ctx {
    bench_traffic *t;
    int fmt, inputs;
} take_ctx;

double bench_kernel_s(const char *name, int fmt, int inputs, double read, double written) {
    double per_byte = strncmp(name, "pk_gemv", 7) == 0        ? bench_gemv_instr_per_byte(fmt, inputs)
                      : strncmp(name, "pk_gemm_tc", 10) == 0  ? bench_gemm_tc_instr_per_byte(fmt)
                      : strncmp(name, "pk_gemm_int", 11) == 0 ? bench_gemm_int_instr_per_byte(fmt, inputs)
                                                              : 0;
    if (strncmp(name, "pk_gemv_int_self", 16) == 0) per_byte += self_prep_instr_per_byte(fmt, inputs);
    return fmax((read + written) / H100_BYTES_PER_S, per_byte * read / H100_WARP_INSTR_PER_S);
}

static void take_item(void *arg, const char *name, uint64_t read, uint64_t written) {
    take_ctx *c = arg;
    bench_kernel k = {.name = name, .launches = 1, .read = (double)read, .written = (double)written};
    k.s = bench_kernel_s(name, c->fmt, c->inputs, k.read, k.written);
    add_row(c->t, &k, 1);
}

int bench_traffic_start(pp_backend *be) {
    return be->ops->device_traffic && be->ops->device_traffic(be, NULL, NULL) == 0;
}

void bench_traffic_take(pp_backend *be, int fmt, int inputs, bench_traffic *t) {
    take_ctx c = {t, fmt, inputs};
    if (be->ops->device_traffic) be->ops->device_traffic(be, t ? take_item : NULL, &c);
}

void bench_traffic_mix(bench_traffic *out, const bench_traffic *a, double ka, const bench_traffic *b, double kb) {
    bench_traffic m = {0};
    for (int i = 0; i < a->n; i++) add_row(&m, &a->k[i], ka);
    for (int i = 0; i < b->n; i++) add_row(&m, &b->k[i], kb);
    *out = m;
}

double bench_estimate_s(const bench_traffic *t, double nodes) { return t->s + nodes * H100_NODE_S; }

static int by_cost(const void *a, const void *b) {
    double x = ((const bench_kernel *)a)->s, y = ((const bench_kernel *)b)->s;
    return (x < y) - (x > y);
}

void bench_traffic_print(const bench_traffic *t) {
    bench_kernel k[BENCH_KERNELS];
    memcpy(k, t->k, (size_t)t->n * sizeof *k);
    qsort(k, (size_t)t->n, sizeof *k, by_cost);
    printf("        %-46s %9s %10s %10s %10s\n", "device work", "launches", "MB read", "MB written", "est. us");
    for (int i = 0; i < t->n; i++)
        printf("        %-46s %9.0f %10.2f %10.2f %10.1f\n", k[i].name, k[i].launches, k[i].read / 1e6,
               k[i].written / 1e6, 1e6 * k[i].s);
}

typedef struct {
    const char *name, *what;
    int (*run)(int argc, char **argv);
} bench_mode;

static const bench_mode modes[] = {
    {"gemv", "GEMV of every weight format on the real PersonaPlex shapes (CPU or device)", bench_gemv},
#ifdef PP_BENCH_ATTN
    {"attn", "CPU attention over a filled KV ring per ring format and context", bench_attn},
#endif
#ifdef PP_BENCH_CODEC
    {"codec", "Mimi encode/decode frame times", bench_codec},
#endif
#ifdef PP_BENCH_LM
    {"lm", "LM step times", bench_lm},
#endif
#ifdef PP_BENCH_BATCH
    {"batch", "LM tick times of n conversations advancing together", bench_batch},
#endif
#ifdef PP_BENCH_FRAME
    {"frame", "whole-frame times (LM + codec) on a backend, synthetic 7B-shaped weights", bench_frame},
#endif
};

int bench_help_asked;

FILE *bench_usage_stream(void) { return bench_help_asked ? stdout : stderr; }

int bench_usage_status(void) { return bench_help_asked ? 0 : 2; }

int main(int argc, char **argv) {
    /* each row as it is measured, also into a log: a run stopped at its time limit (gpu-check's
     * steps) keeps the rows it had */
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t n = sizeof modes / sizeof modes[0];
    for (int i = 2; i < argc; i++) bench_help_asked |= strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0;
    for (size_t i = 0; argc > 1 && i < n; i++)
        if (strcmp(argv[1], modes[i].name) == 0) return modes[i].run(argc - 1, argv + 1);
    /* asked for (-h, --help): the manual on stdout, status 0, as every other tool's; otherwise a usage error */
    int asked = argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
    FILE *to = asked ? stdout : stderr;
    fprintf(to, "usage: personaplex-bench MODE [options]   (personaplex-bench MODE --help: the mode's options)\nmodes:\n");
    for (size_t i = 0; i < n; i++) fprintf(to, "  %-6s %s\n", modes[i].name, modes[i].what);
    return asked ? 0 : 2;
}
