/* wav: RIFF/WAVE files: a strict reader to mono float and a writer.
 *
 * Read: PCM 8 (unsigned), 16, 24 and 32-bit integer, IEEE float 32 and 64-bit, plain or
 * WAVE_FORMAT_EXTENSIBLE, 1..64 channels, 1 kHz..768 kHz. Every header field is checked
 * (RIFF size against the file, chunk sizes, one fmt before one data, block align and byte
 * rate consistent with channels x bits, data a whole number of frames); truncated files
 * are refused rather than read short. A streamed file is read to its end, less a partial
 * last frame: its writer left the RIFF size as 0 or 0xFFFFFFFF, or the data size as
 * 0xFFFFFFFF (or 0 in such a RIFF). Samples become float in [-1, 1]: integer PCM is
 * divided by 2^(bits-1); non-finite float samples are refused.
 * Multichannel files give channel 0 (what the reference's voice loader keeps) or the
 * average of all channels, as the caller asks.
 * Write: 16-bit PCM (rounded, clipped to [-1, 1)) or 32-bit float, interleaved channels. */
#ifndef PP_AUDIO_WAV_H
#define PP_AUDIO_WAV_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PP_WAV_CHANNEL0 = 0, PP_WAV_MIX = 1 } pp_wav_channels;
typedef enum { PP_WAV_PCM16 = 0, PP_WAV_FLOAT32 = 1 } pp_wav_format;

typedef struct pp_wav {
    float *pcm;      /* frames mono samples, malloc'd */
    int64_t frames;
    int rate;
    int channels;    /* in the file */
    int bits;        /* per sample in the file */
    int is_float;    /* the file held IEEE float samples */
} pp_wav;

int pp_wav_read(const char *path, pp_wav_channels how, pp_wav *out, char *err);
/* The same from memory (the fuzzer's entry point); label names the source in messages. */
int pp_wav_parse(const void *buf, size_t len, const char *label, pp_wav_channels how, pp_wav *out, char *err);
void pp_wav_free(pp_wav *w);

/* A float sample as 16-bit PCM: scaled by 32768, rounded, clipped; not-a-number is silence. */
int16_t pp_pcm16_sample(float x);
/* Writes frames x channels interleaved samples. Atomic (a temporary file renamed over path). */
int pp_wav_write(const char *path, const float *pcm, int64_t frames, int channels, int rate, pp_wav_format fmt, char *err);

#endif
