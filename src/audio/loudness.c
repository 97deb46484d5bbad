/* loudness: see loudness.h. */
#include "audio/loudness.h"

#include <math.h>
#include <stdlib.h>

#include "base/err.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define BLOCK_S 0.4     /* gating block length */
#define STEP 0.25       /* blocks start every quarter block: 75 % overlap */
#define ABS_GATE -70.0  /* LUFS */
#define REL_GATE -10.0  /* LU below the absolutely gated mean */
#define OFFSET -0.691   /* makes a 997 Hz 0 dBFS sine read -3.01 */
#define SHELF_HZ 1500.0 /* the K-weighting's high shelf: a rate must put it below Nyquist */

typedef struct biquad {
    double b0, b1, b2, a1, a2; /* normalised by a0 */
} biquad;

/* RBJ "Audio EQ Cookbook" high shelf (gain_db at fc) or high-pass (gain ignored). */
static biquad design(int high_shelf, double gain_db, double q, double fc, double rate) {
    double A = pow(10.0, gain_db / 40.0), w0 = 2 * M_PI * fc / rate, c = cos(w0), alpha = sin(w0) / (2 * q);
    double b0, b1, b2, a0, a1, a2;
    if (high_shelf) {
        double s = 2 * sqrt(A) * alpha;
        b0 = A * ((A + 1) + (A - 1) * c + s);
        b1 = -2 * A * ((A - 1) + (A + 1) * c);
        b2 = A * ((A + 1) + (A - 1) * c - s);
        a0 = (A + 1) - (A - 1) * c + s;
        a1 = 2 * ((A - 1) - (A + 1) * c);
        a2 = (A + 1) - (A - 1) * c - s;
    } else {
        b0 = (1 + c) / 2;
        b1 = -(1 + c);
        b2 = (1 + c) / 2;
        a0 = 1 + alpha;
        a1 = -2 * c;
        a2 = 1 - alpha;
    }
    return (biquad){b0 / a0, b1 / a0, b2 / a0, a1 / a0, a2 / a0};
}

/* Direct form I over x in place, from rest. */
static void run_biquad(const biquad *f, double *x, int64_t n) {
    double x1 = 0, x2 = 0, y1 = 0, y2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double y = f->b0 * x[i] + f->b1 * x1 + f->b2 * x2 - f->a1 * y1 - f->a2 * y2;
        x2 = x1, x1 = x[i], y2 = y1, y1 = y;
        x[i] = y;
    }
}

static double block_loudness(double ms) { return OFFSET + 10.0 * log10(ms); }

int pp_loudness_lufs(const float *pcm, int64_t n, int rate, double *lufs, char *err) {
    *lufs = -INFINITY;
    /* At or below twice the shelf's frequency the biquad designs alias: a 2 kHz clip read -inf. */
    if (rate <= 2 * SHELF_HZ)
        return pp_fail(err, PP_EINVAL, "loudness: %d Hz is too low a rate for K-weighting (over %.0f Hz)", rate,
                       2 * SHELF_HZ);
    if (n < (int64_t)(BLOCK_S * rate))
        return pp_fail(err, PP_EINVAL, "loudness: %lld samples at %d Hz is shorter than one 400 ms block", (long long)n, rate);
    double *k = malloc((size_t)n * sizeof *k);
    /* Block count as pyloudnorm computes it (round half to even); the last block may run past
     * the end (shorter sum, same divisor). */
    int64_t blocks = (int64_t)nearbyint(((double)n / rate - BLOCK_S) / (BLOCK_S * STEP)) + 1;
    double *z = malloc((size_t)blocks * sizeof *z);
    if (!k || !z) {
        free(k);
        free(z);
        return pp_fail(err, PP_ENOMEM, "loudness: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        /* A NaN or infinity would make every block's loudness NaN, which no gate passes: the
         * clip would read as silence. */
        if (!isfinite(pcm[i])) {
            free(k);
            free(z);
            return pp_fail(err, PP_EINVAL, "loudness: sample %lld is not a finite number", (long long)i);
        }
        k[i] = pcm[i];
    }
    biquad shelf = design(1, 4.0, 1 / sqrt(2.0), SHELF_HZ, rate), hp = design(0, 0.0, 0.5, 38.0, rate);
    run_biquad(&shelf, k, n);
    run_biquad(&hp, k, n);
    for (int64_t j = 0; j < blocks; j++) {
        int64_t lo = (int64_t)(BLOCK_S * (j * STEP) * rate), hi = (int64_t)(BLOCK_S * (j * STEP + 1) * rate);
        double s = 0;
        for (int64_t i = lo; i < hi && i < n; i++) s += k[i] * k[i];
        z[j] = s / (BLOCK_S * rate);
    }
    double sum = 0;
    int64_t count = 0;
    for (int64_t j = 0; j < blocks; j++)
        if (block_loudness(z[j]) >= ABS_GATE) sum += z[j], count++;
    if (count > 0) {
        double rel = block_loudness(sum / (double)count) + REL_GATE;
        sum = 0, count = 0;
        for (int64_t j = 0; j < blocks; j++)
            if (block_loudness(z[j]) > rel && block_loudness(z[j]) > ABS_GATE) sum += z[j], count++;
        if (count > 0) *lufs = block_loudness(sum / (double)count);
    }
    free(k);
    free(z);
    return 0;
}

int pp_loudness_normalize(float *pcm, int64_t n, int rate, double target_lufs, double *gain_db, char *err) {
    double lufs;
    int rc = pp_loudness_lufs(pcm, n, rate, &lufs, err);
    if (rc) return rc;
    if (!isfinite(lufs)) return pp_fail(err, PP_EINVAL, "loudness: the clip is silent (below -70 LUFS everywhere)");
    double db = target_lufs - lufs, g = pow(10.0, db / 20.0);
    for (int64_t i = 0; i < n; i++) pcm[i] = (float)(pcm[i] * g);
    if (gain_db) *gain_db = db;
    return 0;
}
