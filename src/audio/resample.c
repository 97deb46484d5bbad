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

/* The filter of a rate pair: L phases of taps each, M inputs per L outputs. */
typedef struct filter {
    int64_t L, M, half, taps;
    float *tab;
} filter;

static int filter_design(int in_rate, int out_rate, filter *f, char *err) {
    if (in_rate < MIN_RATE || in_rate > MAX_RATE || out_rate < MIN_RATE || out_rate > MAX_RATE)
        return pp_fail(err, PP_EINVAL, "resample: bad rates (%d Hz to %d Hz)", in_rate, out_rate);
    int64_t g = gcd(in_rate, out_rate);
    f->L = out_rate / g;
    f->M = in_rate / g;
    f->tab = NULL;
    if (f->L == f->M) {
        f->half = f->taps = 0;
        return 0;
    }
    double fc2 = ROLLOFF * (f->L < f->M ? (double)f->L / (double)f->M : 1.0); /* cutoff in units of the input Nyquist */
    f->half = (int64_t)ceil(ZEROS / fc2);
    f->taps = 2 * f->half;
    if (f->L * f->taps > MAX_TABLE)
        return pp_fail(err, PP_EUNSUPPORTED, "resample: %d Hz to %d Hz needs a %lld-phase filter; use a common rate",
                       in_rate, out_rate, (long long)f->L);
    f->tab = make_table(f->L, f->half, fc2);
    return f->tab ? 0 : pp_fail(err, PP_ENOMEM, "resample: out of memory for the filter");
}

int pp_resample(const float *in, int64_t n_in, int in_rate, int out_rate, float **out, int64_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    if (n_in < 0 || n_in > MAX_INPUT)
        return pp_fail(err, PP_EINVAL, "resample: bad request (%lld samples)", (long long)n_in);
    filter f;
    int rc = filter_design(in_rate, out_rate, &f, err);
    if (rc) return rc;
    int64_t n = (n_in * f.L + f.M - 1) / f.M;
    float *y = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!y) {
        free(f.tab);
        return pp_fail(err, PP_ENOMEM, "resample: out of memory for %lld samples", (long long)n);
    }
    if (!f.tab) {
        if (n) memcpy(y, in, (size_t)n * sizeof(float));
    }
    for (int64_t j = 0; f.tab && j < n; j++) {
        int64_t pos = j * f.M, first = pos / f.L - f.half + 1;
        const float *h = f.tab + (pos % f.L) * f.taps;
        int64_t lo = first < 0 ? -first : 0, hi = first + f.taps > n_in ? n_in - first : f.taps;
        double acc = 0;
        for (int64_t t = lo; t < hi; t++) acc += (double)h[t] * in[first + t];
        y[j] = (float)acc;
    }
    free(f.tab);
    *out = y;
    *n_out = n;
    return 0;
}

struct pp_resampler {
    filter f;
    float *buf; /* input samples from absolute index base on; those before 0 are zeros */
    int64_t base, len, cap;
    int64_t next; /* the next output's index */
};

int pp_resampler_open(pp_resampler **out, int in_rate, int out_rate, int max_chunk, char *err) {
    *out = NULL;
    pp_resampler *r = calloc(1, sizeof *r);
    if (!r) return pp_fail(err, PP_ENOMEM, "resampler: out of memory");
    int rc = max_chunk > 0 ? filter_design(in_rate, out_rate, &r->f, err)
                           : pp_fail(err, PP_EINVAL, "resampler: bad chunk size %d", max_chunk);
    r->cap = r->f.taps + r->f.half + max_chunk;
    if (!rc && !(r->buf = calloc((size_t)r->cap, sizeof(float))))
        rc = pp_fail(err, PP_ENOMEM, "resampler: out of memory");
    if (rc) {
        pp_resampler_close(r);
        return rc;
    }
    /* The filter starts on silence, and half a filter of it counts as input: each chunk then
     * yields its whole share of outputs (1920 samples at 24 kHz give 640 at 8 kHz, every time),
     * and the signal comes out half a filter late. */
    r->base = -r->f.taps;
    r->len = r->f.taps + r->f.half;
    *out = r;
    return 0;
}

void pp_resampler_close(pp_resampler *r) {
    if (!r) return;
    free(r->f.tab);
    free(r->buf);
    free(r);
}

int pp_resampler_delay(const pp_resampler *r) { return (int)r->f.half; }

int pp_resampler_process(pp_resampler *r, const float *in, int n_in, float *out, int cap) {
    if (!r->f.tab) { /* equal rates */
        int n = n_in < cap ? n_in : cap;
        memcpy(out, in, (size_t)n * sizeof(float));
        return n;
    }
    int produced = 0;
    while (n_in > 0) {
        int64_t room = r->cap - r->len, take = n_in < room ? n_in : room;
        memcpy(r->buf + r->len, in, (size_t)take * sizeof(float));
        r->len += take;
        in += take;
        n_in -= (int)take;
        /* Output j sits at input time j*M/L and needs inputs up to half past it. */
        for (;;) {
            int64_t pos = r->next * r->f.M, centre = pos / r->f.L;
            if (centre + r->f.half >= r->base + r->len || produced == cap) break;
            const float *h = r->f.tab + (pos % r->f.L) * r->f.taps, *x = r->buf + (centre - r->f.half + 1 - r->base);
            double acc = 0;
            for (int64_t t = 0; t < r->f.taps; t++) acc += (double)h[t] * x[t];
            out[produced++] = (float)acc;
            r->next++;
        }
        /* Keep only what the next output reads. */
        int64_t keep_from = (r->next * r->f.M) / r->f.L - r->f.half + 1;
        if (keep_from > r->base) {
            int64_t drop = keep_from - r->base;
            if (drop > r->len) drop = r->len;
            memmove(r->buf, r->buf + drop, (size_t)(r->len - drop) * sizeof(float));
            r->len -= drop;
            r->base += drop;
        }
        if (produced == cap) break;
    }
    return produced;
}
