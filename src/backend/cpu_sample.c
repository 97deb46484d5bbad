/* pp_cpu_sample: the CPU backend's token sampler, the reference for kernels/sample.cu.
 *
 * Rows are drawn one after the other, each with its own settings; a forced row copies its
 * token. Greedy (temp <= 0): the largest logit, lowest index on ties, NaN never wins.
 * Otherwise the top_k largest logits (ties at the boundary keep the lowest indices) compete in an
 * exponential race whose uniforms come from sample_key.h. The k-th largest key is found by a
 * four-pass radix select over 8-bit digits, as the GPU does, so no scratch is needed and both
 * backends agree on which candidates enter the race. */
#include "backend/cpu.h"
#include "backend/sample_key.h"

#include <math.h>

/* Key of the k-th largest logit (1 <= k <= n); *take_eq = how many logits equal to it, in
 * index order, belong to the top k. */
static uint32_t kth_key(const float *logits, int n, int k, int *take_eq) {
    uint32_t prefix = 0, mask = 0;
    int remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        int hist[256] = {0};
        for (int i = 0; i < n; i++) {
            uint32_t key = pp_sk_key(logits[i]);
            if ((key & mask) == prefix) hist[(key >> shift) & 255]++;
        }
        int b = 255;
        while (b > 0 && hist[b] < remaining) remaining -= hist[b--];
        prefix |= (uint32_t)b << shift;
        mask |= 255u << shift;
    }
    *take_eq = remaining;
    return prefix;
}

/* One row's draw: see backend.h's sample. */
static int32_t sample_row(const float *logits, int n, const pp_sample_param *p, int stream) {
    if (n <= 0) return 0;
    int best = 0;
    if (!(p->temp > 0)) {
        uint32_t bk = pp_sk_key(logits[0]);
        for (int i = 1; i < n; i++) {
            uint32_t key = pp_sk_key(logits[i]);
            if (key > bk) {
                bk = key;
                best = i;
            }
        }
        return best;
    }
    int k = p->top_k <= 0 || p->top_k > n ? n : p->top_k, take_eq;
    uint32_t th = kth_key(logits, n, k, &take_eq);
    uint64_t counter = pp_sk_counter(p->frame, stream);
    double best_score = -INFINITY;
    for (int i = 0; i < n; i++) {
        uint32_t key = pp_sk_key(logits[i]);
        if (key == 0 || key < th) continue;
        if (key == th && take_eq-- <= 0) continue;
        double s = pp_sk_score(logits[i], p->temp, pp_sk_uniform(p->seed, counter, (uint32_t)i));
        if (s > best_score) {
            best_score = s;
            best = i;
        }
    }
    return best;
}

void pp_cpu_sample(pp_backend *be, const float *logits, int rows, int n, const pp_sample_param *params, int stream,
                   const int32_t *forced, int32_t *tokens) {
    (void)be;
    for (int r = 0; r < rows; r++)
        tokens[r] = forced && forced[r] >= 0 ? forced[r]
                                              : sample_row(logits + (size_t)r * (n > 0 ? n : 0), n, &params[r], stream);
}
