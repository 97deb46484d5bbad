/* test_sample: greedy ties, the top-k / temperature distribution against the exact one
 * (chi-square), top-k boundary ties, RNG range and seed reproducibility. */
#include "test.h"

#include "model/sample.h"

#include <math.h>
#include <string.h>

#define DRAWS 200000

/* Chi-square statistic of observed counts against probabilities p over n cells (cells with
 * p = 0 must be empty: any count there makes the statistic infinite). */
static double chi_square(const int *count, const double *p, int n, int draws) {
    double x2 = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            if (count[i]) return INFINITY;
            continue;
        }
        double e = p[i] * draws, d = count[i] - e;
        x2 += d * d / e;
    }
    return x2;
}

/* The distribution the reference samples from: softmax(l/T) over the top_k largest logits. */
static void exact_topk(const float *l, int n, float temp, int top_k, double *p) {
    double z = 0;
    for (int i = 0; i < n; i++) {
        int rank = 0; /* how many logits beat l[i] (lower index wins ties, as our selection keeps) */
        for (int j = 0; j < n; j++) rank += l[j] > l[i] || (l[j] == l[i] && j < i);
        p[i] = rank < top_k ? exp((double)l[i] / temp) : 0;
        z += p[i];
    }
    for (int i = 0; i < n; i++) p[i] /= z;
}

static void test_argmax(void) {
    const float a[] = {1, 3, 3, 2};
    TEST_COND("argmax: lowest index wins a tie", pp_sample_argmax(a, 4) == 1);
    const float b[] = {7, 7, 7};
    TEST_COND("argmax: all equal gives 0", pp_sample_argmax(b, 3) == 0);
    const float c[] = {NAN, -1, 4, 4};
    TEST_COND("argmax: NaN never wins", pp_sample_argmax(c, 4) == 2);
    const float d[] = {-5, -2, -9};
    TEST_COND("argmax: negative logits", pp_sample_argmax(d, 3) == 1);
}

static void test_greedy_through_sample(void) {
    pp_sampler s;
    pp_rng r;
    pp_rng_seed(&r, 1);
    TEST_COND("sampler init", pp_sampler_init(&s, 8, NULL) == 0);
    const float a[] = {0.5f, 2, 2, -1};
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= pp_sample(&s, &r, a, 4, 0, 3) == 1;
    TEST_COND("temperature 0 is greedy", ok);
    pp_sampler_free(&s);
}

/* Draws DRAWS tokens and checks them against the exact distribution. The 1e-6 upper quantile
 * of chi-square is 33.4 for 4 degrees of freedom, 40.5 for 7 and 44.8 for 9: a correct sampler
 * fails a bound just above it once in a million runs (the seed is fixed, so never here), while a wrong temperature or top-k moves the statistic into the
 * thousands at this sample size. */
static void check_distribution(const char *what, const float *l, int n, float temp, int top_k, double bound) {
    pp_sampler s;
    pp_rng r;
    pp_rng_seed(&r, 12345);
    if (pp_sampler_init(&s, top_k > 0 ? top_k : n, NULL)) {
        TEST_COND("sampler init", 0);
        return;
    }
    int count[64] = {0};
    double p[64];
    for (int i = 0; i < DRAWS; i++) count[pp_sample(&s, &r, l, n, temp, top_k)]++;
    exact_topk(l, n, temp, top_k > 0 && top_k < n ? top_k : n, p);
    double x2 = chi_square(count, p, n, DRAWS);
    /* Power check: the same draws against a 25% different temperature must be rejected. */
    exact_topk(l, n, temp * 1.25f, top_k > 0 && top_k < n ? top_k : n, p);
    double x2_wrong = chi_square(count, p, n, DRAWS);
    printf("%s: chi-square %.2f (bound %.0f), against a wrong temperature %.0f\n", what, x2, bound, x2_wrong);
    TEST_COND(what, x2 < bound);
    TEST_COND("the statistic rejects a wrong temperature", x2_wrong > 10 * bound);
    pp_sampler_free(&s);
}

static void test_distributions(void) {
    const float l[10] = {0.3f, 1.9f, -0.4f, 1.2f, 2.5f, 0.0f, 1.95f, -2.0f, 0.8f, 1.1f};
    /* top 5 of 10 (4 degrees of freedom), the text head's temperature */
    check_distribution("top-5 of 10 at T=0.7", l, 10, 0.7f, 5, 34);
    /* whole vocabulary (9 dof), audio temperature: every token reachable */
    check_distribution("all 10 at T=0.8", l, 10, 0.8f, 0, 45);
    /* hot temperature flattens the distribution (7 dof) */
    check_distribution("top-8 of 10 at T=3", l, 10, 3.0f, 8, 41);
}

static void test_topk_ties(void) {
    /* Equal logits at the top-k boundary: the lowest indices are kept, never the others. */
    const float l[6] = {1, 5, 5, 5, 5, 0};
    pp_sampler s;
    pp_rng r;
    pp_rng_seed(&r, 9);
    pp_sampler_init(&s, 2, NULL);
    int seen[6] = {0};
    for (int i = 0; i < 20000; i++) seen[pp_sample(&s, &r, l, 6, 1.0f, 2)]++;
    TEST_COND("top-2 among four equal logits keeps indices 1 and 2", seen[1] && seen[2] && !seen[3] && !seen[4]);
    TEST_COND("top-2 excludes the smaller logits", !seen[0] && !seen[5]);
    pp_sampler_free(&s);
}

static void test_rng(void) {
    pp_rng a, b, c;
    pp_rng_seed(&a, 42424242);
    pp_rng_seed(&b, 42424242);
    pp_rng_seed(&c, 42424243);
    int same = 1, differ = 0, in_range = 1;
    double mean = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t x = pp_rng_next(&a), y = pp_rng_next(&b), z = pp_rng_next(&c);
        same &= x == y;
        differ |= x != z;
        double u = pp_rng_uniform(&a);
        pp_rng_uniform(&b);
        in_range &= u > 0 && u <= 1;
        mean += u;
    }
    mean /= 100000;
    TEST_COND("same seed, same stream", same);
    TEST_COND("different seed, different stream", differ);
    TEST_COND("uniform in (0, 1]", in_range);
    /* standard error of the mean is 0.29/sqrt(1e5) ≈ 9e-4: 5e-3 is > 5 sigma */
    TEST_COND("uniform mean ~ 1/2", fabs(mean - 0.5) < 5e-3);

    /* Sampling with the same seed reproduces the same tokens. */
    const float l[5] = {1, 2, 3, 2.5f, 0};
    pp_sampler s;
    pp_sampler_init(&s, 5, NULL);
    pp_rng_seed(&a, 7);
    pp_rng_seed(&b, 7);
    int rep = 1;
    for (int i = 0; i < 1000; i++) rep &= pp_sample(&s, &a, l, 5, 0.8f, 4) == pp_sample(&s, &b, l, 5, 0.8f, 4);
    TEST_COND("seeded sampling is reproducible", rep);
    pp_sampler_free(&s);
}

int main(void) {
    test_argmax();
    test_greedy_through_sample();
    test_distributions();
    test_topk_ties();
    test_rng();
    return test_report();
}
