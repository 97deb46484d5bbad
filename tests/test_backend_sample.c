/* test_backend_sample: the backends' token sampler on the CPU backend (pp_cpu_sample.c), the
 * reference the CUDA kernel is checked against in test_backend_parity: greedy agrees with a
 * plain argmax, top-k admits exactly the k best (boundary ties by lowest index), and the
 * counter-based race draws softmax(l/T) frequencies. Deterministic: fixed seeds throughout. */
#include "backend/backend.h"
#include "backend/sample_key.h"
#include "base/err.h"
#include "test.h"

#include <math.h>
#include <string.h>

static pp_backend *be;

/* One row drawn as frame `frame`, stream 0 (on the CPU, backend memory is host memory). */
static int draw(const float *l, int n, float temp, int k, uint64_t seed, uint64_t frame) {
    int32_t t = -1;
    pp_sample_param p = {.seed = seed, .frame = (int64_t)frame, .temp = temp, .top_k = k};
    be->ops->sample(be, l, 1, n, &p, 0, NULL, &t);
    return t;
}

/* The greedy token written out plainly: the largest logit, lowest index on ties. */
static int argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

static void test_greedy(void) {
    float l[300];
    uint64_t s = 7;
    int agree = 1;
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < 300; i++) l[i] = (float)(pp_sk_uniform(s, (uint64_t)rep, (uint32_t)i) * 20.0 - 10.0);
        agree &= draw(l, 300, 0.0f, 0, 0, 0) == argmax(l, 300);
    }
    TEST_COND("greedy = a plain argmax on 50 random vectors", agree);
    float t[5] = {1, 3, 2, 3, 0};
    TEST_COND("greedy: the lowest index wins a tie", draw(t, 5, 0, 0, 0, 0) == 1);
    float nan[4] = {NAN, -1, NAN, -2};
    TEST_COND("greedy: NaN never wins", draw(nan, 4, 0, 0, 0, 0) == 1);
    TEST_COND("top_k 1 is greedy whatever the draw", draw(t, 5, 2.0f, 1, 9, 123) == 1);
}

static void test_topk(void) {
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = (float)((i * 37) % 64) * 0.01f; /* a permutation of 0..0.63 */
    int seen[64] = {0}, outside = 0;
    for (uint64_t c = 0; c < 4000; c++) {
        int t = draw(l, 64, 50.0f, 5, 1, c); /* high temperature: near-uniform over the five */
        seen[t]++;
        outside += l[t] < 0.585f;            /* the five best are 0.59 .. 0.63 */
    }
    int all_five = 1;
    for (int i = 0; i < 64; i++)
        if (l[i] > 0.585f) all_five &= seen[i] > 600;
    TEST_COND("top_k 5: no token outside the five best", outside == 0);
    TEST_COND("top_k 5: each of the five drawn (> 600 of 4000)", all_five);
    float eq[10];
    for (int i = 0; i < 10; i++) eq[i] = 1.0f;
    int beyond = 0;
    for (uint64_t c = 0; c < 500; c++) beyond += draw(eq, 10, 1.0f, 3, 5, c) >= 3;
    TEST_COND("top_k 3 of ten ties: the three lowest indices only", beyond == 0);
    float nan[4] = {NAN, 0.0f, NAN, 0.0f};
    int nan_won = 0;
    for (uint64_t c = 0; c < 200; c++) nan_won += (draw(nan, 4, 1.0f, 0, 3, c) & 1) == 0;
    TEST_COND("sampling: NaN logits never drawn", nan_won == 0);
}

/* 20000 draws from softmax([0, 1, 2, 3] / 0.8): each frequency within 0.015 of its
 * probability (about 5 standard deviations of a binomial at this count). */
static void test_distribution(void) {
    const float l[4] = {0, 1, 2, 3};
    const float temp = 0.8f;
    int count[4] = {0};
    const int n = 20000;
    for (uint64_t c = 0; c < (uint64_t)n; c++) count[draw(l, 4, temp, 0, 2024, c)]++;
    double z = 0, worst = 0;
    for (int i = 0; i < 4; i++) z += exp(l[i] / temp);
    for (int i = 0; i < 4; i++) {
        double d = fabs((double)count[i] / n - exp(l[i] / temp) / z);
        if (d > worst) worst = d;
    }
    printf("softmax frequencies: worst deviation %.4f\n", worst);
    TEST_COND("race frequencies follow softmax(l/T)", worst < 0.015);
    int same = 1, differs = 0;
    for (uint64_t c = 0; c < 100; c++) {
        same &= draw(l, 4, 1.0f, 0, 11, c) == draw(l, 4, 1.0f, 0, 11, c);
        differs += draw(l, 4, 1.0f, 0, 11, c) != draw(l, 4, 1.0f, 0, 12, c);
    }
    TEST_COND("same (seed, counter): same token", same);
    TEST_COND("another seed: other tokens", differs > 10);
}

int main(void) {
    char err[PP_ERR_LEN];
    if (pp_backend_create("cpu", 1, &be, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_greedy();
    test_topk();
    test_distribution();
    pp_backend_destroy(be);
    return test_report();
}
