/* personaplex-bench: speed measurements, one mode per part of the engine.
 *
 *   personaplex-bench MODE [options]     (personaplex-bench MODE --help for a mode's options)
 *
 * Modes: gemv (CPU matrix products per weight format), and codec / lm when built in. Speed is
 * measured here, never asserted by tests. */
#include "bench.h"

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

typedef struct {
    const char *name, *what;
    int (*run)(int argc, char **argv);
} bench_mode;

static const bench_mode modes[] = {
    {"gemv", "CPU GEMV of every weight format on the real PersonaPlex shapes", bench_gemv},
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
