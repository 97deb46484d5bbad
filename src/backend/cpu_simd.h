/* cpu_simd: how the CPU backend picks between its portable loops and their x86-64 AVX2 twins.
 *
 * The build assumes only the baseline ISA (SSE2 on x86-64), so one binary runs everywhere.
 * Hot loops are written once as an always-inline body and compiled twice: plainly, and under
 * CPU_AVX2 (a function attribute, GCC and clang). The backend detects the CPU once at
 * creation (pp_cpu_simd_detect) and every operation calls the variant for ctx->simd, so tests
 * can run both on the same data and compare. PP_CPU_SIMD=portable (avx2, avx2-int16, avx512-vnni, neon) in
 * the environment caps the variant (to compare speed or rule the SIMD code out when chasing a difference);
 * any other value stops the backend's creation.
 * On aarch64, where NEON is part of the baseline, the matrix products, NF2's rotation and the
 * attention have NEON twins (cpu_gemv_neon.c, cpu_attn_simd.c; chosen unless
 * PP_CPU_SIMD=portable); the other loops are the portable ones, written with GCC vector types
 * that the compiler maps to NEON. */
#ifndef PP_BACKEND_CPU_SIMD_H
#define PP_BACKEND_CPU_SIMD_H

typedef enum {
    CPU_SIMD_PORTABLE,   /* plain C: the reference, and the only variant off x86-64 and aarch64 */
    CPU_SIMD_AVX2,       /* x86-64 with AVX2, FMA and F16C (Haswell, Zen and later), float loops only: a cap
                            (PP_CPU_SIMD=avx2) that keeps every product in float, as references want */
    CPU_SIMD_AVX2_INT16, /* the same CPUs' default: the AVX2 loops, and integer products on int16 activations
                            for NF2, INT4, NF4, Q4_K, Q4_0 and Q8_0 (cpu_gemv_i16.c) */
    CPU_SIMD_VNNI,       /* AVX2 plus AVX-512 F/BW/VL/VNNI/VBMI (Ice Lake, Zen 4 and later): the above, and
                            AVX-512 integer products for the low-bit and ggml block weights (cpu_gemv_vnni.c),
                            float ones for the dense weights (cpu_gemv_avx512.c) and the codec's direct and
                            transposed convs (cpu_codec.c) */
    CPU_SIMD_NEON,       /* aarch64: the float products of cpu_gemv_neon.c (and cpu_gemv_int8.c) and
                            cpu_attn_simd.c's attention. Never chosen on x86-64, whose code compares the four above
                            by order */
    CPU_SIMD_COUNT
} cpu_simd;

/* The weight loops read their rows front to back: a prefetch CPU_FETCH_AHEAD bytes past what a
 * loop reads now keeps enough of the stream in flight for one core to draw its share of DRAM
 * bandwidth (on x86-64 the hardware prefetchers alone left a whole frame's products, 2 GB of
 * weights, at half of it). */
#define CPU_FETCH_AHEAD 8192
static inline __attribute__((always_inline)) void cpu_fetch_ahead(const void *p) {
    __builtin_prefetch((const char *)p + CPU_FETCH_AHEAD, 0, 3); /* x86-64: prefetcht0; aarch64: prfm pldl1keep */
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_HAVE_AVX2 1
/* FMA contraction of a*b + c in the AVX2 variants: C11 mode otherwise compiles with
 * -ffp-contract=off (clang contracts within an expression by default). */
#if defined(__clang__)
#define CPU_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define CPU_AVX2 __attribute__((target("avx2,fma,f16c"), optimize("fp-contract=fast")))
#endif
#define CPU_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))
#include <immintrin.h>
/* The sum of a vector's eight floats: the SIMD loops' row totals. */
__attribute__((target("avx2"), always_inline)) static inline float cpu_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define CPU_HAVE_NEON 0
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_HAVE_AVX2 0
#define CPU_HAVE_NEON 1
#else
#define CPU_HAVE_AVX2 0
#define CPU_HAVE_NEON 0
#endif

/* *out: the best variant this CPU runs, or the one PP_CPU_SIMD names when the CPU runs it (a
 * cap: a variant above what the CPU runs leaves its best). PP_EINVAL, naming the value and the
 * variants this build has, for any other value: "portable" and, on x86-64, "avx2", "avx2-int16"
 * and "avx512-vnni", on aarch64 "neon". */
int pp_cpu_simd_detect(cpu_simd *out, char *err);
const char *pp_cpu_simd_name(cpu_simd s);
/* Whether a CPU that runs `best` runs s too: the portable loops always, and on x86-64 the
 * variants below best (their order above is what each adds). */
int pp_cpu_simd_includes(cpu_simd best, cpu_simd s);

/* Eight floats as one GCC/clang vector, at any float alignment, allowed to alias float data.
 * Loads and stores go through it directly (no helper returning a vector: that changes the
 * ABI without AVX). */
typedef float cpu_v8f __attribute__((vector_size(32)));
typedef float cpu_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define CPU_LD8(p) (*(const cpu_v8f_u *)(p))
#define CPU_ST8(p, v) (*(cpu_v8f_u *)(p) = (v))

/* Defines NAME_portable and (on x86-64) NAME_avx2, two pool task functions with the body of
 * the always-inline NAME_body(ctx, task): the same C source and the same order of sums; the
 * AVX2 one fuses multiply-adds, so results differ by float rounding only. */
#if CPU_HAVE_AVX2
#define CPU_TASK_VARIANTS(name)                                                   \
    static void name##_portable(void *ctx, int task) { name##_body(ctx, task); } \
    CPU_AVX2 static void name##_avx2(void *ctx, int task) { name##_body(ctx, task); }
#define CPU_PICK(simd, name) ((simd) >= CPU_SIMD_AVX2 ? name##_avx2 : name##_portable)
#else
#define CPU_TASK_VARIANTS(name) \
    static void name##_portable(void *ctx, int task) { name##_body(ctx, task); }
#define CPU_PICK(simd, name) ((void)(simd), name##_portable)
#endif

#endif
