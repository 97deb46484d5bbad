/* test_aec: the echo canceller (audio/aec.h) on a synthetic echo path.
 *
 * The far end (what the server sends) is speech; the microphone hears it back after a delay of
 * 80 to 400 ms (network, jitter buffer, room), 6 dB down, through a small room response (direct
 * path and three reflections) and a low-pass, plus near-end speech (the same recording reversed:
 * speech-like, uncorrelated with the far end) in the first seconds, plus a faint noise floor.
 * Frames go through in the server's order: an uplink frame, then the downlink frame of that tick.
 *   - ERLE: over the last seconds, where only the echo is present, the echo's energy over the
 *     output's must be at least 20 dB once converged;
 *   - near-end speech preservation: with a silent far end, the output must match the near-end
 *     speech with an SNR of at least 20 dB, up to a fixed short filter (the module's resampling
 *     delays it by a fraction of a sample; see snr_db).
 * Skipped (77) in a build without libwebrtc-audio-processing. */
#include "test.h"

#include "audio/aec.h"
#include "audio/wav.h"
#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE PP_SAMPLE_RATE
#define FRAME 1920     /* one 80 ms model frame */
#define SECONDS 24
#define NEAR_UNTIL 6   /* near-end speech during the first seconds (double talk) */
#define MEASURE_FROM 16 /* ERLE over the last seconds: converged, echo only */
#define N ((size_t)RATE * SECONDS)

static float g_far[N], g_speech_rev[N];

/* The microphone: far end after delay_ms through the echo path, plus near (may be NULL). */
static void echo_path(const float *far, const float *near, int delay_ms, float *echo, float *mic) {
    static const struct {
        int ms;
        float gain;
    } taps[] = {{0, 0.5f}, {3, 0.2f}, {11, -0.1f}, {27, 0.05f}};
    size_t d = (size_t)delay_ms * RATE / 1000;
    float lp = 0;
    uint32_t rng = 12345;
    for (size_t i = 0; i < N; i++) {
        float x = 0;
        for (size_t t = 0; t < sizeof taps / sizeof taps[0]; t++) {
            size_t lag = d + (size_t)taps[t].ms * RATE / 1000;
            if (i >= lag) x += taps[t].gain * far[i - lag];
        }
        lp += 0.6f * (x - lp); /* a speaker and microphone without much treble */
        echo[i] = lp;
        rng = rng * 1664525u + 1013904223u;
        float noise = ((float)(rng >> 8) / 16777216.0f - 0.5f) * 2e-4f;
        mic[i] = lp + noise + (near && i < (size_t)NEAR_UNTIL * RATE ? near[i] : 0);
    }
}

/* Runs mic through a fresh canceller with far as the downlink; out gets the result. */
static int cancel(const float *far, const float *mic, float *out) {
    char err[PP_ERR_LEN];
    pp_aec *a;
    if (pp_aec_create(&a, err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    memcpy(out, mic, N * sizeof *out);
    int rc = 0;
    for (size_t f = 0; f + FRAME <= N && !rc; f += FRAME) {
        rc = pp_aec_near(a, out + f, FRAME, err);
        if (!rc) rc = pp_aec_far(a, far + f, FRAME, err);
    }
    if (rc) fprintf(stderr, "%s\n", err);
    pp_aec_destroy(a);
    return rc;
}

static double energy(const float *x, size_t from, size_t to) {
    double e = 0;
    for (size_t i = from; i < to; i++) e += (double)x[i] * x[i];
    return e;
}

/* SNR (dB) of out as a copy of ref passed through a short linear filter: the canceller's
 * resampling to its processing rate and back delays the signal by a fraction of a sample, which
 * is no loss of speech. The best integer lag in [0, 30 ms] first, then a least-squares FIR of
 * FIT_TAPS taps around it; what the filter cannot explain is the distortion. */
#define FIT_TAPS 16
static double snr_db(const float *ref, const float *out, size_t from, size_t to) {
    size_t best_lag = 0;
    double best = -1;
    for (size_t lag = 0; lag <= (size_t)RATE * 30 / 1000; lag++) {
        double ro = 0;
        for (size_t i = from; i < to; i++) ro += (double)ref[i] * out[i + lag];
        if (fabs(ro) > best) best = fabs(ro), best_lag = lag;
    }
    /* out[i + best_lag] ~ sum_t h[t] ref[i + FIT_TAPS / 2 - t]: normal equations A h = b. */
    double A[FIT_TAPS][FIT_TAPS + 1] = {{0}}, h[FIT_TAPS];
    for (size_t i = from; i < to; i++)
        for (int r = 0; r < FIT_TAPS; r++) {
            double xr = ref[i + FIT_TAPS / 2 - r];
            for (int c = 0; c < FIT_TAPS; c++) A[r][c] += xr * ref[i + FIT_TAPS / 2 - c];
            A[r][FIT_TAPS] += xr * out[i + best_lag];
        }
    for (int p = 0; p < FIT_TAPS; p++) /* Gaussian elimination; A is symmetric positive definite */
        for (int r = p + 1; r < FIT_TAPS; r++) {
            double f = A[r][p] / A[p][p];
            for (int c = p; c <= FIT_TAPS; c++) A[r][c] -= f * A[p][c];
        }
    for (int r = FIT_TAPS - 1; r >= 0; r--) {
        double v = A[r][FIT_TAPS];
        for (int c = r + 1; c < FIT_TAPS; c++) v -= A[r][c] * h[c];
        h[r] = v / A[r][r];
    }
    double sig = 0, err = 0;
    for (size_t i = from; i < to; i++) {
        double y = 0;
        for (int t = 0; t < FIT_TAPS; t++) y += h[t] * ref[i + FIT_TAPS / 2 - t];
        double e = out[i + best_lag] - y;
        sig += y * y;
        err += e * e;
    }
    return 10 * log10(sig / (err + 1e-20));
}

int main(void) {
    if (!pp_aec_available()) {
        printf("built without libwebrtc-audio-processing: skipped\n");
        return 77;
    }
    char err[PP_ERR_LEN];
    pp_wav w;
    if (pp_wav_read(PP_TEST_DATA "/golden/speech-24k.wav", PP_WAV_MIX, &w, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    TEST_COND("speech at 24 kHz", w.rate == RATE && w.frames > RATE);
    for (size_t i = 0; i < N; i++) {
        g_far[i] = w.pcm[i % (size_t)w.frames];
        g_speech_rev[i] = w.pcm[(size_t)w.frames - 1 - i % (size_t)w.frames];
    }
    free(w.pcm);

    float *echo = malloc(N * sizeof *echo), *mic = malloc(N * sizeof *mic), *out = malloc(N * sizeof *out);
    static float silence[N];
    TEST_COND("memory", echo && mic && out);
    if (!echo || !mic || !out) return test_report();
    static const int delays[] = {80, 150, 250, 400};
    for (size_t k = 0; k < sizeof delays / sizeof delays[0]; k++) {
        echo_path(g_far, g_speech_rev, delays[k], echo, mic);
        TEST_COND("the canceller runs", cancel(g_far, mic, out) == 0);
        size_t from = (size_t)MEASURE_FROM * RATE;
        double erle = 10 * log10(energy(echo, from, N) / (energy(out, from, N) + 1e-20));
        printf("echo delay %3d ms: ERLE %.1f dB over the last %d s\n", delays[k], erle, SECONDS - MEASURE_FROM);
        TEST_COND("ERLE >= 20 dB once converged", erle >= 20);
    }
    /* No echo: the far end is silent, the near-end speech must come through. */
    echo_path(silence, g_speech_rev, 0, echo, mic);
    TEST_COND("the canceller runs", cancel(silence, mic, out) == 0);
    size_t to = (size_t)NEAR_UNTIL * RATE - (size_t)RATE / 10;
    double snr = snr_db(g_speech_rev, out, (size_t)RATE, to - RATE / 20);
    printf("near-end speech without echo: SNR %.1f dB\n", snr);
    TEST_COND("near-end SNR >= 20 dB", snr >= 20);
    /* The same with one NaN and one inf in the far end and a NaN in the microphone: each goes in
     * as silence; before, one poisoned WebRTC's filter state for the rest of the call (output
     * 20 dB over the input, peaks of 1.5). */
    static float far_bad[N];
    far_bad[RATE / 2] = NAN;
    far_bad[RATE] = INFINITY;
    mic[RATE / 4] = NAN;
    TEST_COND("the canceller runs", cancel(far_bad, mic, out) == 0);
    int finite = 1;
    for (size_t i = 0; i < N; i++) finite &= isfinite(out[i]) != 0;
    double snr_bad = snr_db(g_speech_rev, out, (size_t)RATE, to - RATE / 20);
    printf("near-end speech, non-finite samples in both ends: SNR %.1f dB\n", snr_bad);
    TEST_COND("non-finite far samples: output finite", finite);
    TEST_COND("non-finite far samples: near-end SNR >= 20 dB", snr_bad >= 20);
    free(echo), free(mic), free(out);
    return test_report();
}
