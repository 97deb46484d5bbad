/* sample: see sample.h. */
#include "model/sample.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void pp_rng_seed(pp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t pp_rng_next(pp_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double pp_rng_uniform(pp_rng *r) { return (double)((pp_rng_next(r) >> 11) + 1) * 0x1.0p-53; }

int pp_sampler_init(pp_sampler *s, int max_k, char *err) {
    s->cap = max_k > 0 ? max_k : 1;
    s->idx = malloc((size_t)s->cap * sizeof *s->idx);
    s->val = malloc((size_t)s->cap * sizeof *s->val);
    if (!s->idx || !s->val) {
        pp_sampler_free(s);
        return pp_fail(err, PP_ENOMEM, "sampler: out of memory");
    }
    return PP_OK;
}

void pp_sampler_free(pp_sampler *s) {
    free(s->idx);
    free(s->val);
    s->idx = NULL;
    s->val = NULL;
    s->cap = 0;
}

int pp_sample_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best] || logits[best] != logits[best]) best = i;
    return best;
}

/* Min-heap on (value, then higher index first) so the root is the weakest kept candidate and,
 * among equal values, the lowest indices stay. */
static int weaker(const pp_sampler *s, int a, int b) {
    return s->val[a] < s->val[b] || (s->val[a] == s->val[b] && s->idx[a] > s->idx[b]);
}

static void sift_down(pp_sampler *s, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && weaker(s, l, m)) m = l;
        if (r < n && weaker(s, r, m)) m = r;
        if (m == i) return;
        float v = s->val[i];
        int x = s->idx[i];
        s->val[i] = s->val[m];
        s->idx[i] = s->idx[m];
        s->val[m] = v;
        s->idx[m] = x;
        i = m;
    }
}

int pp_sample(pp_sampler *s, pp_rng *r, const float *logits, int n, float temp, int top_k) {
    if (!(temp > 0)) return pp_sample_argmax(logits, n);
    int k = top_k <= 0 || top_k > n ? n : top_k;
    if (k > s->cap) k = s->cap;
    /* Top-k of the logits (same order as top-k of the probabilities). NaN logits are skipped. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue;
        if (m < k) {
            s->val[m] = v;
            s->idx[m] = i;
            if (++m == k)
                for (int j = k / 2 - 1; j >= 0; j--) sift_down(s, k, j);
        } else if (v > s->val[0]) {
            s->val[0] = v;
            s->idx[0] = i;
            sift_down(s, k, 0);
        }
    }
    if (m == 0) return 0;
    /* Exponential race in the log domain: argmax_j l_j/T − log(E_j), E_j = −log(U_j) ~ Exp(1).
     * The softmax normaliser is common to all candidates and drops out. */
    int best = s->idx[0];
    double best_score = -INFINITY;
    for (int j = 0; j < m; j++) {
        double e = -log(pp_rng_uniform(r));
        double score = (double)s->val[j] / temp - log(e);
        if (score > best_score) {
            best_score = score;
            best = s->idx[j];
        }
    }
    return best;
}
