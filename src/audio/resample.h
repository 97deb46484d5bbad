/* resample: band-limited sample-rate conversion of a whole buffer (e.g. a voice clip to
 * Mimi's 24 kHz).
 *
 * Method: rational polyphase windowed-sinc. With g = gcd(in, out), the output advances
 * M = in/g input samples per L = out/g outputs; output j sits at input time j*M/L (no
 * delay: the filter is centred) and is the dot product of the input around it with one of
 * L precomputed phases of a Kaiser-windowed sinc (beta 9, about -90 dB sidelobes; 32 zero
 * crossings each side). The cutoff is 0.91 x the lower Nyquist frequency, so for 48 kHz to
 * 24 kHz the passband is flat to about 9.9 kHz and everything from 12 kHz up is attenuated
 * by about 90 dB (no audible aliasing); each phase is normalised to unit DC gain. Samples
 * outside the input count as zero. Equal rates copy the input. */
#ifndef PP_AUDIO_RESAMPLE_H
#define PP_AUDIO_RESAMPLE_H

#include <stdint.h>

/* Resamples n_in samples at in_rate to out_rate; *out (malloc'd) gets
 * *n_out = ceil(n_in * out_rate / in_rate) samples. Rates: 1 kHz..768 kHz. */
int pp_resample(const float *in, int64_t n_in, int in_rate, int out_rate, float **out, int64_t *n_out, char *err);

/* The same filter on a stream (telephone audio to and from 24 kHz): chunks of at most max_chunk
 * input samples go in, and each yields its share of outputs (n * out_rate / in_rate, exactly
 * when that is whole). The stream starts on half a filter of silence, so the signal lags by
 * pp_resampler_delay input samples (36 from 8 kHz, 106 from 24 kHz: about 4.5 ms). */
typedef struct pp_resampler pp_resampler;
int pp_resampler_open(pp_resampler **out, int in_rate, int out_rate, int max_chunk, char *err);
void pp_resampler_close(pp_resampler *r);
int pp_resampler_delay(const pp_resampler *r);
/* Feeds n_in samples; writes at most cap outputs (n_in * out_rate / in_rate + 1 always
 * suffices) and returns how many; input left when cap is reached is dropped. */
int pp_resampler_process(pp_resampler *r, const float *in, int n_in, float *out, int cap);

#endif
