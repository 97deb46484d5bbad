/* loudness: integrated loudness of a mono clip (ITU-R BS.1770-4, LUFS) and normalisation to a
 * target, as the reference does to a voice clip before encoding it (pyloudnorm, -24 LUFS).
 *
 * Method: K-weighting (a +4 dB high shelf at 1500 Hz, Q 1/sqrt(2), then a 38 Hz high-pass,
 * Q 0.5, both designed for the clip's own rate with the RBJ biquad formulas, which is what
 * pyloudnorm does), mean square over 400 ms blocks every 100 ms, absolute gate at -70 LUFS,
 * relative gate 10 LU below the mean of the blocks that passed, and
 * L = -0.691 + 10 log10(mean square of the gated blocks). Mono: channel weight 1. A 0 dBFS
 * 997 Hz sine reads -3.01 LUFS. Arithmetic is double precision. */
#ifndef PP_AUDIO_LOUDNESS_H
#define PP_AUDIO_LOUDNESS_H

#include <stdint.h>

/* *lufs gets the integrated loudness, or -INFINITY when every block is below the absolute
 * gate (silence). Clips shorter than one 400 ms block, at 3 kHz or less (the K-weighting's 1500 Hz
 * shelf must lie below Nyquist), or holding a NaN or infinite sample, are refused (PP_EINVAL). */
int pp_loudness_lufs(const float *pcm, int64_t n, int rate, double *lufs, char *err);

/* Scales pcm in place so it measures target_lufs; silent clips are refused (PP_EINVAL).
 * No limiter: peaks above 1 are kept, as in the reference. *gain_db may be NULL. */
int pp_loudness_normalize(float *pcm, int64_t n, int rate, double target_lufs, double *gain_db, char *err);

#endif
