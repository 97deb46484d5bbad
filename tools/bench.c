/* personaplex-bench: speed measurements, one mode per part of the engine.
 *
 *   personaplex-bench MODE [options]     (personaplex-bench MODE --help for a mode's options)
 *
 * Modes: gemv (CPU matrix products per weight format), and attn, codec, lm, frame, batch when
 * built in. Speed is measured here, never asserted by tests. */
#include "bench.h"

#include "backend/backend.h"
#include "base/err.h"
#include "personaplex.h"

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

int main(int argc, char **argv) {
    size_t n = sizeof modes / sizeof modes[0];
    for (size_t i = 0; argc > 1 && i < n; i++)
        if (strcmp(argv[1], modes[i].name) == 0) return modes[i].run(argc - 1, argv + 1);
    fprintf(stderr, "usage: personaplex-bench MODE [options]\nmodes:\n");
    for (size_t i = 0; i < n; i++) fprintf(stderr, "  %-6s %s\n", modes[i].name, modes[i].what);
    return 2;
}
