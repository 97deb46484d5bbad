/* wav: see wav.h. */
#include "audio/wav.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"

#define MAX_FILE ((size_t)2 << 30)
#define MAX_CHANNELS 64
#define MIN_RATE 1000
#define MAX_RATE 768000
#define TAG_PCM 1
#define TAG_FLOAT 3
#define TAG_EXTENSIBLE 0xFFFE

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

typedef struct fmt_info {
    int tag, channels, bits;
    uint32_t rate, block;
} fmt_info;

/* The tail every KSDATAFORMAT_SUBTYPE_* GUID shares after its 2-byte format tag. */
static const uint8_t guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

/* The RIFF sizes a streaming writer leaves in its header: 0xFFFFFFFF (ffmpeg, RF64's convention)
 * or 0; neither can be the size of a RIFF holding a WAVE. */
static int size_unknown(uint32_t size) { return size == 0xFFFFFFFFu || size == 0; }

static int parse_fmt(const uint8_t *c, uint32_t size, fmt_info *f, const char *label, char *err) {
    if (size < 16) return pp_fail(err, PP_EFORMAT, "%s: fmt chunk is %u bytes (need 16)", label, size);
    f->tag = (int)rd16(c);
    f->channels = (int)rd16(c + 2);
    f->rate = rd32(c + 4);
    uint32_t byte_rate = rd32(c + 8);
    f->block = rd16(c + 12);
    f->bits = (int)rd16(c + 14);
    if (f->tag == TAG_EXTENSIBLE) {
        if (size < 40 || rd16(c + 16) < 22) return pp_fail(err, PP_EFORMAT, "%s: WAVE_FORMAT_EXTENSIBLE fmt chunk too short", label);
        if (rd16(c + 18) > (uint32_t)f->bits || memcmp(c + 26, guid_tail, sizeof guid_tail) != 0)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: unknown WAVE_FORMAT_EXTENSIBLE sub-format", label);
        f->tag = (int)rd16(c + 24);
    }
    if (f->tag != TAG_PCM && f->tag != TAG_FLOAT)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: WAV format tag 0x%x (only PCM and IEEE float)", label, f->tag);
    if ((f->tag == TAG_PCM && f->bits != 8 && f->bits != 16 && f->bits != 24 && f->bits != 32) ||
        (f->tag == TAG_FLOAT && f->bits != 32 && f->bits != 64))
        return pp_fail(err, PP_EUNSUPPORTED, "%s: %d-bit %s samples are not supported", label, f->bits,
                       f->tag == TAG_PCM ? "PCM" : "float");
    if (f->channels < 1 || f->channels > MAX_CHANNELS)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: %d channels (1..%d supported)", label, f->channels, MAX_CHANNELS);
    if (f->rate < MIN_RATE || f->rate > MAX_RATE)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: sample rate %u Hz (%d..%d supported)", label, f->rate, MIN_RATE, MAX_RATE);
    if (f->block != (uint32_t)(f->channels * f->bits / 8) || byte_rate != f->rate * f->block)
        return pp_fail(err, PP_EFORMAT, "%s: block align %u / byte rate %u inconsistent with %d channels of %d bits at %u Hz",
                       label, f->block, byte_rate, f->channels, f->bits, f->rate);
    return 0;
}

/* Sample ch of frame p as float. */
static float sample(const uint8_t *p, const fmt_info *f, int ch) {
    const uint8_t *s = p + (size_t)ch * (size_t)(f->bits / 8);
    uint32_t u;
    switch (f->bits + (f->tag == TAG_FLOAT ? 1000 : 0)) {
    case 8: return ((int)s[0] - 128) / 128.0f;
    case 16: return (float)(int16_t)rd16(s) / 32768.0f;
    case 24: return (float)((int32_t)((uint32_t)s[0] << 8 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 24) >> 8) / 8388608.0f;
    case 32: return (float)((double)(int32_t)rd32(s) / 2147483648.0);
    case 1032: {
        float x;
        u = rd32(s);
        memcpy(&x, &u, 4);
        return x;
    }
    default: { /* 64-bit float */
        uint64_t v = (uint64_t)rd32(s) | (uint64_t)rd32(s + 4) << 32;
        double x;
        memcpy(&x, &v, 8);
        return (float)x;
    }
    }
}

static int convert(const uint8_t *data, uint32_t size, const fmt_info *f, pp_wav_channels how, pp_wav *out,
                   const char *label, char *err) {
    out->frames = size / f->block;
    out->rate = (int)f->rate;
    out->channels = f->channels;
    out->bits = f->bits;
    out->is_float = f->tag == TAG_FLOAT;
    out->pcm = malloc((size_t)(out->frames ? out->frames : 1) * sizeof(float));
    if (!out->pcm) return pp_fail(err, PP_ENOMEM, "%s: out of memory for %lld frames", label, (long long)out->frames);
    int nch = how == PP_WAV_MIX ? f->channels : 1;
    for (int64_t i = 0; i < out->frames; i++) {
        const uint8_t *p = data + (size_t)i * f->block;
        float acc = 0;
        for (int ch = 0; ch < nch; ch++) acc += sample(p, f, ch);
        out->pcm[i] = acc / (float)nch;
        if (!isfinite(out->pcm[i]))
            return pp_fail(err, PP_EFORMAT, "%s: sample %lld is not a finite number", label, (long long)i);
    }
    return 0;
}

int pp_wav_parse(const void *buf, size_t len, const char *label, pp_wav_channels how, pp_wav *out, char *err) {
    const uint8_t *b = buf;
    memset(out, 0, sizeof *out);
    if (len < 12 || memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0)
        return pp_fail(err, PP_EFORMAT, "%s: not a RIFF/WAVE file", label);
    /* A writer that streams (ffmpeg to a pipe, a recorder stopped before it patches the header)
     * leaves the RIFF size as a placeholder: the RIFF then runs to the end of the file. */
    int streamed = size_unknown(rd32(b + 4));
    uint64_t end = streamed ? len : 8 + (uint64_t)rd32(b + 4);
    if (end > len)
        return pp_fail(err, PP_EFORMAT, "%s: RIFF header declares %llu bytes, the file has %zu (truncated)", label,
                       (unsigned long long)end, len);
    fmt_info f = {0};
    int have_fmt = 0;
    const uint8_t *data = NULL;
    uint32_t data_size = 0;
    for (uint64_t pos = 12; pos < end;) {
        if (end - pos < 8) return pp_fail(err, PP_EFORMAT, "%s: partial chunk header at byte %llu", label, (unsigned long long)pos);
        const uint8_t *c = b + pos;
        uint32_t size = rd32(c + 4);
        /* A streamed data chunk (size 0xFFFFFFFF, or 0 in a streamed RIFF) holds the rest of the
         * file, less a partial frame where the writer was stopped mid-frame. */
        int data_to_end = memcmp(c, "data", 4) == 0 && have_fmt &&
                          (size == 0xFFFFFFFFu || (streamed && size == 0 && end - pos > 8));
        if (data_to_end) size = (uint32_t)((end - pos - 8) / f.block * f.block);
        if (size > end - pos - 8)
            return pp_fail(err, PP_EFORMAT, "%s: chunk '%.4s' declares %u bytes, only %llu remain (truncated)", label,
                           (const char *)c, size, (unsigned long long)(end - pos - 8));
        if (memcmp(c, "fmt ", 4) == 0) {
            if (have_fmt || data) return pp_fail(err, PP_EFORMAT, "%s: a second fmt chunk, or fmt after data", label);
            int rc = parse_fmt(c + 8, size, &f, label, err);
            if (rc) return rc;
            have_fmt = 1;
        } else if (memcmp(c, "data", 4) == 0) {
            if (!have_fmt || data) return pp_fail(err, PP_EFORMAT, "%s: data chunk before fmt, or a second data chunk", label);
            data = c + 8;
            data_size = size;
        }
        if (data_to_end) break;
        pos += 8 + (uint64_t)size + (size & 1); /* chunks are padded to even sizes */
    }
    if (!data) return pp_fail(err, PP_EFORMAT, "%s: no %s chunk", label, have_fmt ? "data" : "fmt");
    if (data_size % f.block != 0)
        return pp_fail(err, PP_EFORMAT, "%s: data chunk of %u bytes is not a whole number of %u-byte frames", label, data_size,
                       f.block);
    int rc = convert(data, data_size, &f, how, out, label, err);
    if (rc) pp_wav_free(out);
    return rc;
}

int pp_wav_read(const char *path, pp_wav_channels how, pp_wav *out, char *err) {
    unsigned char *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    int rc = pp_file_read_all(path, MAX_FILE, &buf, &len, err);
    if (rc) return rc;
    rc = pp_wav_parse(buf, len, path, how, out, err);
    free(buf);
    return rc;
}

void pp_wav_free(pp_wav *w) {
    if (!w) return;
    free(w->pcm);
    memset(w, 0, sizeof *w);
}

/* ---- writer ---- */

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v & 0xFFFF), put16(p + 2, v >> 16); }

int16_t pp_pcm16_sample(float x) {
    float s = roundf((isfinite(x) ? x : 0.0f) * 32768.0f);
    return (int16_t)(s > 32767.0f ? 32767.0f : s < -32768.0f ? -32768.0f : s);
}

int pp_wav_write(const char *path, const float *pcm, int64_t frames, int channels, int rate, pp_wav_format fmt, char *err) {
    int bytes = fmt == PP_WAV_PCM16 ? 2 : 4;
    if (channels < 1 || channels > MAX_CHANNELS || rate < MIN_RATE || rate > MAX_RATE || frames < 0)
        return pp_fail(err, PP_EINVAL, "%s: bad WAV parameters (%d channels, %d Hz, %lld frames)", path, channels, rate,
                       (long long)frames);
    uint64_t data = (uint64_t)frames * (uint64_t)channels * (uint64_t)bytes;
    /* IEEE float files carry cbSize and a fact chunk, as the format requires for non-PCM tags. */
    uint32_t fmt_size = fmt == PP_WAV_PCM16 ? 16 : 18, header = 12 + 8 + fmt_size + (fmt == PP_WAV_PCM16 ? 0 : 12) + 8;
    if (data + header > 0xFFFFFFFFu) return pp_fail(err, PP_EINVAL, "%s: WAV data over 4 GiB", path);
    uint8_t h[64], *p = h;
    memcpy(p, "RIFF", 4), put32(p + 4, (uint32_t)(header - 8 + data)), memcpy(p + 8, "WAVE", 4), p += 12;
    memcpy(p, "fmt ", 4), put32(p + 4, fmt_size), p += 8;
    put16(p, fmt == PP_WAV_PCM16 ? TAG_PCM : TAG_FLOAT), put16(p + 2, (uint32_t)channels), put32(p + 4, (uint32_t)rate);
    put32(p + 8, (uint32_t)(rate * channels * bytes)), put16(p + 12, (uint32_t)(channels * bytes)), put16(p + 14, 8 * (uint32_t)bytes);
    p += 16;
    if (fmt != PP_WAV_PCM16) {
        put16(p, 0), p += 2;
        memcpy(p, "fact", 4), put32(p + 4, 4), put32(p + 8, (uint32_t)frames), p += 12;
    }
    memcpy(p, "data", 4), put32(p + 4, (uint32_t)data), p += 8;
    FILE *f;
    int rc = pp_file_create(path, &f, err);
    if (rc) return rc;
    fwrite(h, 1, (size_t)(p - h), f);
    uint8_t chunk[4096];
    size_t n = 0, total = (size_t)(frames * channels);
    for (size_t i = 0; i < total; i++) {
        float x = pcm[i];
        if (fmt == PP_WAV_PCM16) {
            put16(chunk + n, (uint16_t)pp_pcm16_sample(x));
        } else {
            uint32_t u;
            memcpy(&u, &x, 4);
            put32(chunk + n, u);
        }
        n += (size_t)bytes;
        if (n == sizeof chunk || i + 1 == total) {
            fwrite(chunk, 1, n, f);
            n = 0;
        }
    }
    return pp_file_commit(path, f, err);
}
