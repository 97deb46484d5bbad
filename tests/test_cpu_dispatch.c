/* test_cpu_dispatch: PP_CPU_SIMD picks the CPU backend's loop variant (backend/cpu_simd.h).
 * Each name this build has gives that variant when the CPU runs it and the CPU's best when it
 * does not (a cap); unset or empty gives the best; any other value (a misspelling, another
 * architecture's variant) refuses to create the backend and names the value, instead of
 * running the SIMD loops the user meant to rule out. */
#include "backend/cpu.h"
#include "base/err.h"
#include "test.h"

#include <stdlib.h>

/* The variant a backend created under PP_CPU_SIMD=value runs, or -1 with the error in err. */
static int variant_under(const char *value, char *err) {
    if (value) setenv("PP_CPU_SIMD", value, 1);
    else unsetenv("PP_CPU_SIMD");
    pp_backend *be;
    err[0] = 0;
    if (pp_backend_cpu_create(1, &be, err) != PP_OK) return -1;
    int simd = (int)cpu_simd_of(be);
    pp_backend_destroy(be);
    return simd;
}

int main(void) {
    char err[PP_ERR_LEN], what[160];
    int best = variant_under(NULL, err);
    TEST_COND("a backend without PP_CPU_SIMD", best >= 0);
    if (best < 0) return test_report();
    printf("this CPU's best variant: %s\n", pp_cpu_simd_name((cpu_simd)best));
    TEST_COND("an empty PP_CPU_SIMD is the best variant", variant_under("", err) == best);
    TEST_COND("portable is always there", variant_under("portable", err) == CPU_SIMD_PORTABLE);
#if CPU_HAVE_AVX2
    static const cpu_simd mine[] = {CPU_SIMD_AVX2, CPU_SIMD_AVX2_INT16, CPU_SIMD_VNNI};
    const char *foreign = "neon";
#elif CPU_HAVE_NEON
    static const cpu_simd mine[] = {CPU_SIMD_NEON};
    const char *foreign = "avx2";
#else
    static const cpu_simd mine[] = {CPU_SIMD_PORTABLE};
    const char *foreign = "avx2";
#endif
    for (size_t i = 0; i < sizeof mine / sizeof *mine; i++) {
        const char *name = pp_cpu_simd_name(mine[i]);
        int expect = pp_cpu_simd_includes((cpu_simd)best, mine[i]) ? (int)mine[i] : best;
        int got = variant_under(name, err);
        snprintf(what, sizeof what, "PP_CPU_SIMD=%s runs %s", name, pp_cpu_simd_name((cpu_simd)expect));
        if (got != expect) fprintf(stderr, "%s: got %d (%s)\n", what, got, got < 0 ? err : "");
        TEST_COND(what, got == expect);
    }
    const char *refused[] = {"scalar", "AVX2", "avx512", "avx2 ", foreign};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int got = variant_under(refused[i], err);
        snprintf(what, sizeof what, "PP_CPU_SIMD='%s' is refused, naming the value and the variants", refused[i]);
        if (got >= 0 || !strstr(err, refused[i]) || !strstr(err, "portable"))
            fprintf(stderr, "%s: got %d, '%s'\n", what, got, err);
        TEST_COND(what, got < 0 && strstr(err, refused[i]) && strstr(err, "PP_CPU_SIMD") && strstr(err, "portable"));
    }
    printf("refused: %s\n", err);
    unsetenv("PP_CPU_SIMD");
    return test_report();
}
