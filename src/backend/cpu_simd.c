/* cpu_simd: CPU feature detection for the backend's loop variants (see cpu_simd.h). */
#include "backend/cpu_simd.h"

#include <stdlib.h>
#include <string.h>

#if CPU_HAVE_AVX2
#include <cpuid.h>
#endif

cpu_simd pp_cpu_simd_detect(void) {
    const char *force = getenv("PP_CPU_SIMD");
    if (force && strcmp(force, "portable") == 0) return CPU_SIMD_PORTABLE;
#if CPU_HAVE_AVX2
    /* __builtin_cpu_supports checks that the OS saves the YMM registers too; clang's has no
     * "f16c", which cpuid leaf 1 reports (ECX bit 29) on every AVX2 part anyway. */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__get_cpuid(1, &a, &b, &c, &d) ||
        !(c & bit_F16C))
        return CPU_SIMD_PORTABLE;
    if (force && strcmp(force, "avx2") == 0) return CPU_SIMD_AVX2;
    if (force && strcmp(force, "avx2-int16") == 0) return CPU_SIMD_AVX2_INT16;
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

const char *pp_cpu_simd_name(cpu_simd s) {
    static const char *const names[] = {"portable", "avx2", "avx2-int16", "avx512-vnni", "neon"};
    return names[s];
}

int pp_cpu_simd_includes(cpu_simd best, cpu_simd s) {
    return s == CPU_SIMD_PORTABLE || s == best || (best != CPU_SIMD_NEON && s != CPU_SIMD_NEON && s < best);
}
