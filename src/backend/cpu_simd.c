/* cpu_simd: CPU feature detection for the backend's loop variants (see cpu_simd.h). */
#include "backend/cpu_simd.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CPU_HAVE_AVX2
#include <cpuid.h>
#endif

/* The best variant this CPU runs. */
static cpu_simd best_variant(void) {
#if CPU_HAVE_AVX2
    /* __builtin_cpu_supports checks that the OS saves the YMM registers too; clang's has no
     * "f16c", which cpuid leaf 1 reports (ECX bit 29) on every AVX2 part anyway. */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__get_cpuid(1, &a, &b, &c, &d) ||
        !(c & bit_F16C))
        return CPU_SIMD_PORTABLE;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx512vbmi"))
        return CPU_SIMD_VNNI;
    return CPU_SIMD_AVX2_INT16;
#elif CPU_HAVE_NEON
    return CPU_SIMD_NEON;
#else
    return CPU_SIMD_PORTABLE;
#endif
}

/* Whether this build has the loops of variant s (whatever the CPU it runs on). */
static int build_has(cpu_simd s) {
#if CPU_HAVE_AVX2
    return s != CPU_SIMD_NEON;
#elif CPU_HAVE_NEON
    return s == CPU_SIMD_PORTABLE || s == CPU_SIMD_NEON;
#else
    return s == CPU_SIMD_PORTABLE;
#endif
}

int pp_cpu_simd_detect(cpu_simd *out, char *err) {
    cpu_simd best = best_variant();
    *out = best;
    const char *force = getenv("PP_CPU_SIMD");
    if (!force || !*force) return PP_OK;
    char known[96] = "";
    for (int s = CPU_SIMD_PORTABLE; s < CPU_SIMD_COUNT; s++) {
        if (!build_has((cpu_simd)s)) continue;
        /* a cap: the named variant, or the best this CPU runs when it lacks that one */
        if (strcmp(force, pp_cpu_simd_name((cpu_simd)s)) == 0) {
            if (pp_cpu_simd_includes(best, (cpu_simd)s)) *out = (cpu_simd)s;
            return PP_OK;
        }
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", pp_cpu_simd_name((cpu_simd)s));
    }
    /* a misspelt cap must not leave the SIMD loops running unnoticed */
    return pp_fail(err, PP_EINVAL, "PP_CPU_SIMD=%s: not a CPU loop variant of this build (%s)", force, known);
}

const char *pp_cpu_simd_name(cpu_simd s) {
    static const char *const names[] = {"portable", "avx2", "avx2-int16", "avx512-vnni", "neon"};
    return names[s];
}

int pp_cpu_simd_includes(cpu_simd best, cpu_simd s) {
    return s == CPU_SIMD_PORTABLE || s == best || (best != CPU_SIMD_NEON && s != CPU_SIMD_NEON && s < best);
}
