/* test_loudness: BS.1770 integrated loudness against the standard's own reference points
 * (a 997 Hz sine at 0 dBFS reads -3.01 LUFS; levels scale 1:1 in dB), the K-weighting's
 * shape, both gates, and normalisation to -24 LUFS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/loudness.h"
#include "base/err.h"
#include "test.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* seconds of amp * sin(2 pi f t) at rate, appended at *pos. */
static void sine(float *x, int64_t *pos, int rate, double f, double amp, double seconds) {
    int64_t n = (int64_t)(seconds * rate);
    for (int64_t i = 0; i < n; i++) x[*pos + i] = (float)(amp * sin(2 * M_PI * f * (double)i / rate));
    *pos += n;
}

static double measure(const float *x, int64_t n, int rate) {
    double l;
    char err[PP_ERR_LEN];
    if (pp_loudness_lufs(x, n, rate, &l, err)) {
        fprintf(stderr, "%s\n", err);
        return NAN;
    }
    return l;
}

int main(void) {
    float *x = malloc(48000 * 12 * sizeof(float));
    int64_t n;
    char err[PP_ERR_LEN];
    int rates[] = {48000, 44100, 24000, 16000};
    double l0_24k = 0;
    for (int r = 0; r < 4; r++) {
        n = 0;
        sine(x, &n, rates[r], 997, 1.0, 5);
        double l = measure(x, n, rates[r]);
        if (rates[r] == 24000) l0_24k = l;
        printf("997 Hz 0 dBFS at %5d Hz: %.4f LUFS\n", rates[r], l);
        /* BS.1770-4: -3.01 LUFS. The biquads are pyloudnorm's per-rate RBJ designs, not the
         * standard's 48 kHz coefficients, and read 0.04-0.08 LU low; EBU Tech 3341 accepts
         * +-0.1 LU for a meter. */
        TEST_COND("997 Hz full-scale sine reads -3.01 LUFS (+-0.1)", fabs(l + 3.01) < 0.1);
    }
    n = 0;
    sine(x, &n, 24000, 997, 0.1, 5);
    double l20 = measure(x, n, 24000);
    TEST_COND("-20 dBFS reads 20 LU lower (+-0.001)", fabs(l20 - (l0_24k - 20)) < 1e-3);

    /* K-weighting shape: the 38 Hz high-pass cuts 20 Hz by ~11 dB (2nd order); the shelf lifts
     * 10 kHz by ~4 dB. Bounds are loose: they check the filters are there and in the right
     * direction, not the third decimal. */
    n = 0;
    sine(x, &n, 48000, 20, 0.1, 5);
    double l_low = measure(x, n, 48000);
    n = 0;
    sine(x, &n, 48000, 10000, 0.1, 5);
    double l_high = measure(x, n, 48000);
    printf("20 Hz: %.2f, 1 kHz: %.2f, 10 kHz: %.2f LUFS at -20 dBFS\n", l_low, l20, l_high);
    TEST_COND("20 Hz is attenuated by 8..14 dB", l20 - l_low > 8 && l20 - l_low < 14);
    TEST_COND("10 kHz is boosted by 3..5 dB", l_high - l20 > 3 && l_high - l20 < 5);

    /* Absolute gate: after 5 s of sine (47 full blocks), 5 s of silence adds 3 straddling
     * blocks holding 3/4, 1/2 and 1/4 of a block's energy (they pass both gates) and 47
     * silent blocks (dropped). Expected: the sine's loudness + 10 log10(48.5 / 50). */
    n = 0;
    sine(x, &n, 24000, 997, 0.1, 5);
    sine(x, &n, 24000, 997, 0.0, 5);
    double l_sil = measure(x, n, 24000);
    TEST_COND("silence is gated out (+-0.005)", fabs(l_sil - (l20 + 10 * log10(48.5 / 50))) < 0.005);
    /* Relative gate: a 5 s tail at -40 dBFS instead of silence passes the absolute gate but
     * sits 20 LU below the loud part, so it is dropped and the reading equals the silence
     * case; without the relative gate it would read ~3 LU lower. */
    n = 0;
    sine(x, &n, 24000, 997, 0.1, 5);
    sine(x, &n, 24000, 997, 0.01, 5);
    double l_rel = measure(x, n, 24000);
    printf("with silence: %.3f, with -40 dBFS tail: %.3f LUFS\n", l_sil, l_rel);
    TEST_COND("quiet tail is gated out by the relative gate", fabs(l_rel - l_sil) < 0.005);

    /* Normalisation lands on the target. */
    double gain;
    TEST_COND("normalize", pp_loudness_normalize(x, n, 24000, -24.0, &gain, err) == 0);
    TEST_COND("normalised clip measures -24 LUFS", fabs(measure(x, n, 24000) + 24.0) < 1e-6);
    TEST_COND("gain reported", fabs(gain - (-24.0 - l_rel)) < 1e-9);

    /* Refusals. */
    n = 0;
    sine(x, &n, 24000, 997, 0.0, 2);
    double l_zero = measure(x, n, 24000);
    TEST_COND("digital silence reads -inf", isinf(l_zero) && l_zero < 0);
    TEST_COND("normalising silence is refused", pp_loudness_normalize(x, n, 24000, -24.0, NULL, err) == PP_EINVAL);
    TEST_COND("a clip shorter than 400 ms is refused", pp_loudness_lufs(x, 9599, 24000, &l_zero, err) == PP_EINVAL);
    /* A rate that puts the 1500 Hz shelf at or past Nyquist is refused; before, a 2 kHz clip read
     * -inf (and normalising it was refused as silent) and a 1 kHz one a wrong finite level. */
    for (int k = 0; k < 2; k++) {
        int low = k ? 2000 : 1000;
        const char *named = k ? "2000 Hz" : "1000 Hz";
        n = 0;
        sine(x, &n, low, low / 20.0, 0.1, 2);
        TEST_COND("a rate of 3 kHz or less is refused, naming it",
                  pp_loudness_lufs(x, n, low, &l_zero, err) == PP_EINVAL && strstr(err, named));
    }
    n = 0;
    sine(x, &n, 8000, 400, 0.1, 2);
    TEST_COND("8 kHz is measured", pp_loudness_lufs(x, n, 8000, &l_zero, err) == 0 && isfinite(l_zero));
    /* A NaN or infinite sample is refused, naming it; before, the clip read -inf and was
     * refused as silent. */
    n = 0;
    sine(x, &n, 24000, 997, 0.1, 2);
    for (int k = 0; k < 2; k++) {
        float saved = x[12345];
        x[12345] = k ? INFINITY : NAN;
        int rc = pp_loudness_normalize(x, n, 24000, -24.0, NULL, err);
        TEST_COND("a non-finite sample is refused, naming it", rc == PP_EINVAL && strstr(err, "sample 12345"));
        x[12345] = saved;
    }
    free(x);
    return test_report();
}
