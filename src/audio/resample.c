/* resample: see resample.h. */
#include "audio/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define MIN_RATE 1000
#define MAX_RATE 768000
#define MAX_INPUT ((int64_t)1 << 40)
#define MAX_TABLE ((int64_t)1 << 25) /* floats; bounds odd rate pairs like 44101 -> 24000 */
#define ROLLOFF 0.91                 /* cutoff / lower Nyquist: leaves room for the transition band */
#define ZEROS 32                     /* sinc zero crossings on each side */
#define BETA 9.0                     /* Kaiser shape: about -90 dB sidelobes */

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static double bessel_i0(double x) {
    double sum = 1, term = 1, q = x * x / 4;
    for (int k = 1; k < 200 && term > 1e-14 * sum; k++) {
        term *= q / ((double)k * k);
        sum += term;
    }
    return sum;
}

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* L phases of 2*half taps: phase p, tap t weighs input sample i0 - half + 1 + t for an
 * output at input time i0 + p/L. */
static float *make_table(int64_t L, int64_t half, double fc2) {
    int64_t taps = 2 * half;
    float *tab = malloc((size_t)(L * taps) * sizeof(float));
    double *w = malloc((size_t)taps * sizeof(double));
    if (!tab || !w) {
        free(tab);
        free(w);
        return NULL;
    }
    double i0_beta = bessel_i0(BETA);
    for (int64_t p = 0; p < L; p++) {
        double sum = 0;
        for (int64_t t = 0; t < taps; t++) {
            double x = (double)(t - half + 1) - (double)p / (double)L, r = x / (double)half;
            double sinc = x == 0 ? 1.0 : sin(M_PI * fc2 * x) / (M_PI * fc2 * x);
            w[t] = fabs(r) < 1 ? fc2 * sinc * bessel_i0(BETA * sqrt(1 - r * r)) / i0_beta : 0;
            sum += w[t];
        }
        for (int64_t t = 0; t < taps; t++) tab[p * taps + t] = (float)(w[t] / sum);
    }
    free(w);
    return tab;
}

int pp_resample(const float *in, int64_t n_in, int in_rate, int out_rate, float **out, int64_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    if (in_rate < MIN_RATE || in_rate > MAX_RATE || out_rate < MIN_RATE || out_rate > MAX_RATE || n_in < 0 || n_in > MAX_INPUT)
        return pp_fail(err, PP_EINVAL, "resample: bad request (%lld samples, %d Hz to %d Hz)", (long long)n_in, in_rate, out_rate);
    int64_t g = gcd(in_rate, out_rate), L = out_rate / g, M = in_rate / g;
    int64_t n = (n_in * L + M - 1) / M;
    float *y = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!y) return pp_fail(err, PP_ENOMEM, "resample: out of memory for %lld samples", (long long)n);
    if (L == M) {
        if (n) memcpy(y, in, (size_t)n * sizeof(float));
        *out = y;
        *n_out = n;
        return 0;
    }
    double fc2 = ROLLOFF * (L < M ? (double)L / (double)M : 1.0); /* cutoff in units of the input Nyquist */
    int64_t half = (int64_t)ceil(ZEROS / fc2), taps = 2 * half;
    if (L * taps > MAX_TABLE) {
        free(y);
        return pp_fail(err, PP_EUNSUPPORTED, "resample: %d Hz to %d Hz needs a %lld-phase filter; use a common rate", in_rate,
                       out_rate, (long long)L);
    }
    float *tab = make_table(L, half, fc2);
    if (!tab) {
        free(y);
        return pp_fail(err, PP_ENOMEM, "resample: out of memory for the filter");
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t pos = j * M, first = pos / L - half + 1;
        const float *h = tab + (pos % L) * taps;
        int64_t lo = first < 0 ? -first : 0, hi = first + taps > n_in ? n_in - first : taps;
        double acc = 0;
        for (int64_t t = lo; t < hi; t++) acc += (double)h[t] * in[first + t];
        y[j] = (float)acc;
    }
    free(tab);
    *out = y;
    *n_out = n;
    return 0;
}
