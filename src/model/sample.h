/* sample: token choice from logits (spec/lm.md §5.2) and the per-conversation RNG.
 *
 * Greedy: the argmax, lowest index on ties. Sampling: softmax(logits / temp) restricted to
 * the top_k most probable tokens, drawn by the exponential race (argmax p_j / E_j with
 * E_j ~ Exp(1)), which is the reference's algorithm; it cannot reproduce torch's random
 * stream, so only greedy decoding is bit-comparable with it. The RNG is xoshiro256**, seeded
 * through splitmix64; each conversation owns one, so sessions do not share state. */
#ifndef PP_MODEL_SAMPLE_H
#define PP_MODEL_SAMPLE_H

#include <stdint.h>

typedef struct pp_rng {
    uint64_t s[4];
} pp_rng;

void pp_rng_seed(pp_rng *r, uint64_t seed);
uint64_t pp_rng_next(pp_rng *r);
/* Uniform in (0, 1]: never 0, so -log() is finite. */
double pp_rng_uniform(pp_rng *r);

/* Scratch for the top-k selection, sized for the largest k used (no allocation per token). */
typedef struct pp_sampler {
    int cap;
    int *idx;
    float *val;
} pp_sampler;

int pp_sampler_init(pp_sampler *s, int max_k, char *err);
void pp_sampler_free(pp_sampler *s);

/* Index of the largest of n logits; the lowest index wins ties. NaN never wins. */
int pp_sample_argmax(const float *logits, int n);
/* A token from n logits: greedy when temp <= 0, else temperature + top-k (top_k <= 0 or
 * top_k > n means all n; top_k is clamped to the sampler's capacity). */
int pp_sample(pp_sampler *s, pp_rng *r, const float *logits, int n, float temp, int top_k);

#endif
