/* rng: splitmix64, the one small deterministic generator of the generated models (the demo's
 * weights, voices and random quantized tensors): the same stream on every machine. */
#ifndef PP_BASE_RNG_H
#define PP_BASE_RNG_H

#include <stdint.h>

static inline uint64_t pp_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from the top 53 bits of the next value. */
static inline double pp_splitmix64_unit(uint64_t *state) {
    return (double)(pp_splitmix64(state) >> 11) / 9007199254740992.0;
}

#endif
