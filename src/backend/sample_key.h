/* sample_key: what the backends' samplers share so that the CPU (pp_cpu_sample.c) and the GPU
 * (kernels/sample.cu) draw the same token from the same logits: the order key of a logit and
 * a counter-based uniform. Plain C that also compiles as CUDA (host and device).
 *
 * The uniform for candidate `index` of draw `counter` under `seed` is a pure function of the
 * three (splitmix64's finaliser chained over them), so a device draws every candidate's number
 * in parallel and no RNG state lives anywhere: a draw's counter is frame·PP_SK_STREAMS + stream
 * (backend.h's sample), so each (conversation seed, frame, stream) has its own numbers. */
#ifndef PP_BACKEND_SAMPLE_KEY_H
#define PP_BACKEND_SAMPLE_KEY_H

#include <stdint.h>
#include <math.h>
#include <string.h>

#define PP_SK_STREAMS 32 /* counters per frame: room for the 17 streams */

#ifdef __CUDACC__
#define PP_SK_FN static __host__ __device__ __forceinline__
#else
#define PP_SK_FN static inline
#endif

PP_SK_FN uint64_t pp_sk_counter(int64_t frame, int stream) {
    return (uint64_t)frame * PP_SK_STREAMS + (uint64_t)stream;
}

PP_SK_FN uint64_t pp_sk_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1] (never 0, so −log is finite), 53 random bits. */
PP_SK_FN double pp_sk_uniform(uint64_t seed, uint64_t counter, uint32_t index) {
    uint64_t h = pp_sk_mix(seed + 0x9e3779b97f4a7c15ULL);
    h = pp_sk_mix(h ^ (counter + 0x632be59bd9b4e019ULL));
    h = pp_sk_mix(h ^ ((uint64_t)index + 0x85157af5ULL));
    return (double)((h >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* An unsigned key whose order is the float order: larger logit, larger key. NaN maps to 0,
 * below −inf, so it never wins; −0 sorts just below +0. */
PP_SK_FN uint32_t pp_sk_key(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Score of a top-k candidate in the exponential race: argmax over candidates of
 * l/T − log(E), E = −log(U) ~ Exp(1), draws l with probability softmax(l/T) among them. */
PP_SK_FN double pp_sk_score(float logit, float temp, double u) { return (double)logit / (double)temp - log(-log(u)); }

#endif
