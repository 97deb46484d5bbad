/* test_wav: WAV round trips, every sample format, refusal of malformed headers, and the
 * resampler's accuracy on sines (frequency, amplitude and phase against the exact sine). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audio/resample.h"
#include "audio/wav.h"
#include "base/err.h"
#include "test.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- building WAV bytes ---- */

typedef struct wbuf {
    uint8_t b[1 << 16];
    size_t n;
} wbuf;

static void w_bytes(wbuf *w, const void *p, size_t n) {
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void w16(wbuf *w, uint32_t v) { w_bytes(w, (uint8_t[]){(uint8_t)v, (uint8_t)(v >> 8)}, 2); }
static void w32(wbuf *w, uint32_t v) { w16(w, v & 0xFFFF), w16(w, v >> 16); }

/* RIFF header + fmt (tag, channels, rate, bits; block/byte rate derived unless overridden)
 * + data chunk of `data` bytes. */
typedef struct spec {
    int tag, channels, rate, bits, block, byte_rate, extensible_tag;
} spec;

static void build(wbuf *w, spec s, const void *data, uint32_t n) {
    int block = s.block ? s.block : s.channels * s.bits / 8;
    int fmt_size = s.extensible_tag ? 40 : 16;
    w->n = 0;
    w_bytes(w, "RIFF", 4), w32(w, (uint32_t)(4 + 8 + fmt_size + 8 + n)), w_bytes(w, "WAVE", 4);
    w_bytes(w, "fmt ", 4), w32(w, (uint32_t)fmt_size);
    w16(w, s.extensible_tag ? 0xFFFE : (uint32_t)s.tag), w16(w, (uint32_t)s.channels), w32(w, (uint32_t)s.rate);
    w32(w, s.byte_rate ? (uint32_t)s.byte_rate : (uint32_t)(s.rate * block)), w16(w, (uint32_t)block), w16(w, (uint32_t)s.bits);
    if (s.extensible_tag) {
        static const uint8_t tail[14] = {0, 0, 0, 0, 0x10, 0, 0x80, 0, 0, 0xAA, 0, 0x38, 0x9B, 0x71};
        w16(w, 22), w16(w, (uint32_t)s.bits), w32(w, 0), w16(w, (uint32_t)s.extensible_tag), w_bytes(w, tail, 14);
    }
    w_bytes(w, "data", 4), w32(w, n), w_bytes(w, data, n);
}

static int parse(const wbuf *w, pp_wav_channels how, pp_wav *out, char *err) {
    return pp_wav_parse(w->b, w->n, "t.wav", how, out, err);
}

static void test_formats(void) {
    char err[PP_ERR_LEN];
    pp_wav v;
    wbuf w;
    /* Two channels, two frames each; channel 0 then 1. */
    int16_t s16[] = {16384, -32768, -8192, 32767};
    build(&w, (spec){1, 2, 16000, 16, 0, 0, 0}, s16, sizeof s16);
    TEST_COND("16-bit stereo channel 0", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.frames == 2 && v.rate == 16000 &&
                                             v.channels == 2 && v.pcm[0] == 0.5f && v.pcm[1] == -0.25f);
    pp_wav_free(&v);
    TEST_COND("16-bit stereo mix", parse(&w, PP_WAV_MIX, &v, err) == 0 && v.pcm[0] == (0.5f - 1.0f) / 2 &&
                                       v.pcm[1] == (-0.25f + 32767 / 32768.0f) / 2);
    pp_wav_free(&v);
    uint8_t s24[] = {0x00, 0x00, 0xC0, 0xFF, 0xFF, 0x7F}; /* -0.5, max */
    build(&w, (spec){1, 1, 44100, 24, 0, 0, 0}, s24, sizeof s24);
    TEST_COND("24-bit", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.pcm[0] == -0.5f && v.pcm[1] == 8388607 / 8388608.0f);
    pp_wav_free(&v);
    int32_t s32[] = {INT32_MIN, 1 << 29};
    build(&w, (spec){1, 1, 48000, 32, 0, 0, 0}, s32, sizeof s32);
    TEST_COND("32-bit int", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.pcm[0] == -1.0f && v.pcm[1] == 0.25f);
    pp_wav_free(&v);
    uint8_t s8[] = {0, 128, 192};
    build(&w, (spec){1, 1, 8000, 8, 0, 0, 0}, s8, sizeof s8);
    TEST_COND("8-bit unsigned", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.pcm[0] == -1.0f && v.pcm[1] == 0 && v.pcm[2] == 0.5f);
    pp_wav_free(&v);
    float f32[] = {0.125f, -2.0f};
    build(&w, (spec){3, 1, 22050, 32, 0, 0, 0}, f32, sizeof f32);
    TEST_COND("float32 (values beyond 1 kept)", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.is_float && v.pcm[0] == 0.125f && v.pcm[1] == -2.0f);
    pp_wav_free(&v);
    double f64[] = {0.375, -0.0625};
    build(&w, (spec){3, 1, 32000, 64, 0, 0, 0}, f64, sizeof f64);
    TEST_COND("float64", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.pcm[0] == 0.375f && v.pcm[1] == -0.0625f);
    pp_wav_free(&v);
    build(&w, (spec){0, 2, 16000, 16, 0, 0, 1}, s16, sizeof s16);
    TEST_COND("WAVE_FORMAT_EXTENSIBLE PCM", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.pcm[1] == -0.25f);
    pp_wav_free(&v);
    build(&w, (spec){1, 1, 16000, 16, 0, 0, 0}, s16, 0);
    TEST_COND("empty data chunk", parse(&w, PP_WAV_CHANNEL0, &v, err) == 0 && v.frames == 0);
    pp_wav_free(&v);

    char path[512];
    snprintf(path, sizeof path, "%s/golden/speech-24k.wav", PP_TEST_DATA);
    TEST_COND("golden speech-24k.wav", pp_wav_read(path, PP_WAV_CHANNEL0, &v, err) == 0 && v.rate == 24000 && v.channels == 1 && v.frames > 24000);
    pp_wav_free(&v);
}

static void expect_refused(const char *what, const void *buf, size_t n, const char *needle) {
    char err[PP_ERR_LEN] = "";
    pp_wav v;
    int rc = pp_wav_parse(buf, n, "t.wav", PP_WAV_CHANNEL0, &v, err);
    int ok = rc < 0 && strstr(err, needle) && strstr(err, "t.wav") && v.pcm == NULL;
    if (!ok) fprintf(stderr, "%s: rc %d, '%s' (wanted '%s')\n", what, rc, err, needle);
    TEST_COND(what, ok);
}

static void test_malformed(void) {
    wbuf w, x;
    int16_t s16[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    build(&w, (spec){1, 1, 16000, 16, 0, 0, 0}, s16, sizeof s16);
    expect_refused("truncated data", w.b, w.n - 1, "truncated");
    expect_refused("truncated header", w.b, 30, "truncated");
    expect_refused("too short", w.b, 8, "not a RIFF");
    x = w, memcpy(x.b + 8, "AVI ", 4);
    expect_refused("not WAVE", x.b, x.n, "not a RIFF");
    x = w, x.b[40] = 0xFF; /* data size beyond the RIFF end */
    expect_refused("data size overruns", x.b, x.n, "chunk 'data' declares");
    build(&x, (spec){1, 1, 16000, 16, 3, 0, 0}, s16, sizeof s16);
    expect_refused("bad block align", x.b, x.n, "block align");
    build(&x, (spec){1, 1, 16000, 16, 0, 1234, 0}, s16, sizeof s16);
    expect_refused("bad byte rate", x.b, x.n, "byte rate");
    build(&x, (spec){0x55, 1, 16000, 16, 0, 0, 0}, s16, sizeof s16);
    expect_refused("MP3 tag", x.b, x.n, "format tag 0x55");
    build(&x, (spec){1, 1, 16000, 12, 2, 32000, 0}, s16, sizeof s16);
    expect_refused("12-bit", x.b, x.n, "12-bit");
    build(&x, (spec){1, 0, 16000, 16, 0, 0, 0}, s16, sizeof s16);
    expect_refused("0 channels", x.b, x.n, "channels");
    build(&x, (spec){1, 1, 0, 16, 0, 0, 0}, s16, sizeof s16);
    expect_refused("rate 0", x.b, x.n, "sample rate");
    build(&x, (spec){1, 2, 16000, 16, 0, 0, 0}, s16, 6);
    expect_refused("partial frame", x.b, x.n, "whole number");
    build(&x, (spec){0, 1, 16000, 16, 0, 0, 0x55}, s16, sizeof s16);
    expect_refused("extensible with an MP3 sub-format", x.b, x.n, "format tag 0x55");
    float nan[2] = {0, NAN};
    build(&x, (spec){3, 1, 16000, 32, 0, 0, 0}, nan, sizeof nan);
    expect_refused("NaN sample", x.b, x.n, "finite");
    /* data before fmt: swap the order by hand. */
    x.n = 0;
    w_bytes(&x, "RIFF", 4), w32(&x, 4 + 8 + 4 + 8 + 16), w_bytes(&x, "WAVE", 4);
    w_bytes(&x, "data", 4), w32(&x, 4), w32(&x, 0);
    w_bytes(&x, w.b + 12, 24);
    expect_refused("data before fmt", x.b, x.n, "data chunk before fmt");
    /* A second data chunk. */
    x = w;
    memcpy(x.b + x.n, w.b + 36, 8 + sizeof s16);
    x.n += 8 + sizeof s16;
    uint32_t riff = (uint32_t)(x.n - 8);
    memcpy(x.b + 4, &riff, 4);
    expect_refused("two data chunks", x.b, x.n, "second data");
    /* No data: fmt only. */
    x = w, x.n = 36;
    riff = 28;
    memcpy(x.b + 4, &riff, 4);
    expect_refused("no data chunk", x.b, x.n, "no data chunk");
}

/* Headers a streaming writer leaves unpatched (ffmpeg to a pipe writes 0xFFFFFFFF for both sizes;
 * others write 0): the samples run to the end of the file, less a partial last frame. */
static void set32(wbuf *w, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) w->b[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static int parses_as(const wbuf *w, int64_t frames, float first, float last) {
    char err[PP_ERR_LEN] = "";
    pp_wav v;
    int rc = parse(w, PP_WAV_CHANNEL0, &v, err);
    int ok = rc == 0 && v.frames == frames && v.pcm[0] == first && v.pcm[frames - 1] == last;
    if (!ok) fprintf(stderr, "streamed WAV: rc %d (%s), %lld frames\n", rc, err, (long long)v.frames);
    pp_wav_free(&v);
    return ok;
}

static void test_streamed(void) {
    int16_t st[6] = {16384, 1, -8192, 2, 4096, 3}; /* three stereo frames; channel 0: 0.5, -0.25, 0.125 */
    wbuf w, x;
    build(&w, (spec){1, 2, 16000, 16, 0, 0, 0}, st, sizeof st);
    const size_t riff_size = 4, data_size = 40;
    x = w, set32(&x, riff_size, 0xFFFFFFFFu), set32(&x, data_size, 0xFFFFFFFFu);
    TEST_COND("streamed: RIFF and data sizes 0xFFFFFFFF (ffmpeg to a pipe)", parses_as(&x, 3, 0.5f, 0.125f));
    x = w, set32(&x, riff_size, 0), set32(&x, data_size, 0);
    TEST_COND("streamed: RIFF and data sizes 0", parses_as(&x, 3, 0.5f, 0.125f));
    x = w, set32(&x, data_size, 0xFFFFFFFFu), x.n -= 3; /* stopped mid-frame */
    x.b[x.n++] = 0x11; /* a lone byte of the cut frame */
    set32(&x, riff_size, (uint32_t)(x.n - 8));
    TEST_COND("streamed: data 0xFFFFFFFF, partial last frame dropped", parses_as(&x, 2, 0.5f, -0.25f));
    x = w, set32(&x, riff_size, 0xFFFFFFFFu); /* exact data size, then a LIST chunk */
    w_bytes(&x, "LIST", 4), w32(&x, 4), w_bytes(&x, "INFO", 4);
    TEST_COND("streamed: RIFF 0xFFFFFFFF, exact data, trailing chunk", parses_as(&x, 3, 0.5f, 0.125f));
    /* A real size is still checked: a file cut short stays refused, as does a data size of 0 in a
     * RIFF whose size is known (an empty clip, then a chunk that overruns). */
    x = w, set32(&x, riff_size, 0xFFFFFFFFu), set32(&x, data_size, 16);
    expect_refused("streamed RIFF, data cut short", x.b, x.n, "truncated");
    x = w, set32(&x, data_size, 0);
    expect_refused("data size 0 in a sized RIFF", x.b, x.n, "chunk");
}

static void test_roundtrip(void) {
    char err[PP_ERR_LEN], path[] = "/tmp/test_wav.XXXXXX";
    int fd = mkstemp(path);
    TEST_COND("temp file", fd >= 0);
    close(fd);
    float pcm[2 * 100];
    for (int i = 0; i < 200; i++) pcm[i] = (float)sin(0.1 * i) * (i % 2 ? 0.3f : 1.2f); /* ch 0 clips */
    pp_wav v;
    TEST_COND("write PCM16", pp_wav_write(path, pcm, 100, 2, 24000, PP_WAV_PCM16, err) == 0);
    int ok = pp_wav_read(path, PP_WAV_CHANNEL0, &v, err) == 0 && v.frames == 100 && v.channels == 2 && v.bits == 16;
    for (int i = 0; ok && i < 100; i++) {
        float x = pcm[2 * i] > 32767 / 32768.0f ? 32767 / 32768.0f : pcm[2 * i] < -1 ? -1 : pcm[2 * i];
        ok = v.pcm[i] == roundf(x * 32768) / 32768;
    }
    TEST_COND("PCM16 round trip: each sample is the nearest 16-bit value, clipped", ok);
    pp_wav_free(&v);
    TEST_COND("write float32", pp_wav_write(path, pcm, 100, 2, 44100, PP_WAV_FLOAT32, err) == 0);
    ok = pp_wav_read(path, PP_WAV_MIX, &v, err) == 0 && v.frames == 100 && v.rate == 44100 && v.is_float;
    for (int i = 0; ok && i < 100; i++) ok = v.pcm[i] == (pcm[2 * i] + pcm[2 * i + 1]) / 2;
    TEST_COND("float32 round trip is exact", ok);
    pp_wav_free(&v);
    TEST_COND("bad write parameters refused", pp_wav_write(path, pcm, 100, 0, 24000, PP_WAV_PCM16, err) == PP_EINVAL);
    unlink(path);
    TEST_COND("missing file", pp_wav_read("/nonexistent.wav", PP_WAV_CHANNEL0, &v, err) == PP_ENOTFOUND);
}

/* ---- resampler ---- */

/* Resamples 1 s of amp*sin(2 pi f t) at `rate` to 24 kHz; returns the worst absolute error
 * against the exact sine over the interior (the first and last 20 ms see the zero padding). */
static double sine_error(int rate, double f, double amp, int64_t *n_out) {
    float *in = malloc((size_t)rate * sizeof(float)), *out;
    for (int i = 0; i < rate; i++) in[i] = (float)(amp * sin(2 * M_PI * f * i / rate));
    char err[PP_ERR_LEN];
    if (pp_resample(in, rate, rate, 24000, &out, n_out, err) != 0) {
        fprintf(stderr, "%s\n", err);
        free(in);
        return INFINITY;
    }
    double worst = 0;
    for (int64_t j = 480; j < *n_out - 480; j++) {
        double d = fabs(out[j] - amp * sin(2 * M_PI * f * (double)j / 24000));
        if (d > worst) worst = d;
    }
    free(in);
    free(out);
    return worst;
}

static void test_resample(void) {
    int rates[] = {16000, 44100, 48000, 8000, 22050, 11025, 96000, 24000};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        int64_t n;
        /* 1 kHz at half scale: in the flat passband, so the output is the same sine sampled at
         * 24 kHz. Measured: 3e-6..9e-6. The bound, 1e-4 of full scale (-80 dB), leaves room
         * for the Kaiser window's ~-90 dB ripple plus float32 rounding; far below audibility. */
        double e = sine_error(rates[i], 1000, 0.5, &n);
        printf("resample %6d -> 24000, 1 kHz: max error %.2e\n", rates[i], e);
        TEST_COND("1 kHz sine keeps frequency, amplitude and phase (error < 1e-4)", e < 1e-4);
        TEST_COND("output length is ceil(n * 24000 / rate)", n == 24000);
    }
    /* 9 kHz is near the top of the passband (flat to ~9.9 kHz for 44.1/48 kHz input).
     * Measured ~1.2e-5; the same 1e-4 bound. */
    int64_t n;
    double e = sine_error(48000, 9000, 0.5, &n);
    printf("resample  48000 -> 24000, 9 kHz: max error %.2e\n", e);
    TEST_COND("9 kHz from 48 kHz preserved (error < 1e-4)", e < 1e-4);
    e = sine_error(44100, 9000, 0.5, &n);
    printf("resample  44100 -> 24000, 9 kHz: max error %.2e\n", e);
    TEST_COND("9 kHz from 44.1 kHz preserved (error < 1e-4)", e < 1e-4);
    /* 14 kHz cannot exist at 24 kHz: it must vanish instead of aliasing to 10 kHz. Measured
     * residual ~1.4e-6; bound 1e-4 (the stopband is ~-90 dB). */
    float *in = malloc(48000 * sizeof(float)), *out;
    for (int i = 0; i < 48000; i++) in[i] = (float)(0.5 * sin(2 * M_PI * 14000 * i / 48000.0));
    char err[PP_ERR_LEN];
    TEST_COND("resample", pp_resample(in, 48000, 48000, 24000, &out, &n, err) == 0);
    double peak = 0;
    for (int64_t j = 480; j < n - 480; j++) peak = fmax(peak, fabs(out[j]));
    printf("resample  48000 -> 24000, 14 kHz: residual peak %.2e\n", peak);
    TEST_COND("14 kHz from 48 kHz is removed, not aliased (peak < 1e-4)", peak < 1e-4);
    free(in);
    free(out);
    TEST_COND("bad rate refused", pp_resample(NULL, 0, 0, 24000, &out, &n, err) == PP_EINVAL);
    TEST_COND("empty input", pp_resample(NULL, 0, 16000, 24000, &out, &n, err) == 0 && n == 0);
    free(out);
}

/* Outputs that are not plain files. A FIFO (`personaplex-codec decode x.codes /dev/stdout | aplay`)
 * is written through, not replaced by a plain file renamed over it; a symbolic link (a models
 * folder of links into a data volume) keeps its link, the new file replacing the link's target. */
static void test_special_outputs(void) {
    char dir[] = "/tmp/pp_test_wav_XXXXXX", path[64], tmp[72], target[64], link[64], err[PP_ERR_LEN];
    if (!mkdtemp(dir)) {
        TEST_COND("temp dir", 0);
        return;
    }
    snprintf(path, sizeof path, "%s/out.wav", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    float pcm[100] = {0.5f};
    int rfd = mkfifo(path, 0600) == 0 ? open(path, O_RDONLY | O_NONBLOCK) : -1;
    TEST_COND("fifo", rfd >= 0);
    TEST_COND("WAV written into a FIFO", rfd >= 0 && pp_wav_write(path, pcm, 100, 1, 24000, PP_WAV_PCM16, err) == 0);
    struct stat sb;
    TEST_COND("... which is still the FIFO", stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode) && access(tmp, F_OK) != 0);
    unsigned char got[512];
    ssize_t n = rfd >= 0 ? read(rfd, got, sizeof got) : -1;
    TEST_COND("... and the reader got the file", n == 44 + 200 && !memcmp(got, "RIFF", 4));
    if (rfd >= 0) close(rfd);

    snprintf(target, sizeof target, "%s/data.wav", dir);
    snprintf(link, sizeof link, "%s/link.wav", dir);
    TEST_COND("old target", pp_wav_write(target, pcm, 10, 1, 24000, PP_WAV_PCM16, err) == 0);
    TEST_COND("link", symlink(target, link) == 0);
    TEST_COND("WAV written through the link", pp_wav_write(link, pcm, 100, 1, 24000, PP_WAV_PCM16, err) == 0);
    TEST_COND("... which is still a link", lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    TEST_COND("... whose target holds the new file", stat(target, &sb) == 0 && sb.st_size == 44 + 200);
    const char *made[] = {tmp, path, link, target};
    for (int i = 0; i < 4; i++) remove(made[i]);
    rmdir(dir);
}

int main(void) {
    test_special_outputs();
    test_formats();
    test_malformed();
    test_streamed();
    test_roundtrip();
    test_resample();
    return test_report();
}
