/* test_audio_codecs: what the JSON endpoints put audio through. base64 (RFC 4648 §10's
 * vectors, strict refusals), G.711 μ-law and A-law (the standard's code points, round-trip
 * error within one quantisation step, codes monotonic in the sample), the streaming resampler
 * (chunk sizes, the same filter as pp_resample, pass and stop bands), and the JSON writer. */
#include "test.h"

#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include "audio/g711.h"
#include "audio/resample.h"
#include "base/base64.h"
#include "base/json.h"

static void check_base64(void) {
    static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16];
        uint8_t back[16];
        long n = pp_base64_encode((const uint8_t *)plain[i], strlen(plain[i]), out, sizeof out);
        TEST_COND("base64 encodes the RFC 4648 vectors", n == (long)strlen(coded[i]) && !strcmp(out, coded[i]));
        long m = pp_base64_decode(coded[i], strlen(coded[i]), back, sizeof back);
        TEST_COND("base64 decodes the RFC 4648 vectors",
                  m == (long)strlen(plain[i]) && !memcmp(back, plain[i], (size_t)m));
    }
    static const char *bad[] = {"Zg=", "Zg=a", "Z===", "Zm9v Yg==", "Zm9v\nYg==", "Zm=v", "====", "Zm9-", "Zg==Zg=="};
    uint8_t back[16];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TEST_COND("base64 refuses what is not base64", pp_base64_decode(bad[i], strlen(bad[i]), back, sizeof back) < 0);
    TEST_COND("base64 refuses a result that does not fit", pp_base64_decode("Zm9vYmFy", 8, back, 5) < 0);
    char small[4];
    TEST_COND("base64 refuses an output buffer without room",
              pp_base64_encode((const uint8_t *)"foo", 3, small, 4) < 0);
    uint8_t all[256], again[256];
    char text[PP_BASE64_LEN(256) + 1];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
    pp_base64_encode(all, 256, text, sizeof text);
    TEST_COND("base64 round-trips every byte value",
              pp_base64_decode(text, strlen(text), again, sizeof again) == 256 && !memcmp(all, again, 256));
}

/* The encoders of ITU-T G.191's reference g711.c, restated: the magnitude of a negative sample
 * is its one's complement, on the 14-bit (μ-law, biased by 33) or 12-bit (A-law) scale. */
static uint8_t reference_ulaw(int16_t x) {
    int mag = (x < 0 ? ~x : x) >> 2, biased = mag + 33 > 0x1FFF ? 0x1FFF : mag + 33, seg = 1;
    for (int rest = biased >> 6; rest; rest >>= 1) seg++;
    int code = (8 - seg) << 4 | (15 - ((biased >> seg) & 15));
    return (uint8_t)(x >= 0 ? code | 0x80 : code);
}

static uint8_t reference_alaw(int16_t x) {
    int mag = (x < 0 ? ~x : x) >> 4;
    if (mag > 15) {
        int exp = 1;
        for (; mag > 31; mag >>= 1) exp++;
        mag = (mag - 16) | exp << 4;
    }
    return (uint8_t)((x >= 0 ? mag | 0x80 : mag) ^ 0x55);
}

static void check_g711(void) {
    int ulaw_diff = 0, alaw_diff = 0;
    for (int s = -32768; s <= 32767; s++) {
        ulaw_diff += pp_ulaw_encode((int16_t)s) != reference_ulaw((int16_t)s);
        alaw_diff += pp_alaw_encode((int16_t)s) != reference_alaw((int16_t)s);
    }
    if (ulaw_diff || alaw_diff) fprintf(stderr, "G.711: %d μ-law, %d A-law codes differ from G.191\n", ulaw_diff, alaw_diff);
    TEST_COND("μ-law encodes every sample as G.191 does", ulaw_diff == 0);
    TEST_COND("A-law encodes every sample as G.191 does", alaw_diff == 0);
    /* Code points of the standard's tables: silence, the largest codes, a mid value. */
    TEST_COND("μ-law: 0 encodes as 0xFF", pp_ulaw_encode(0) == 0xFF);
    TEST_COND("μ-law: 0xFF and 0x7F decode to 0", pp_ulaw_decode(0xFF) == 0 && pp_ulaw_decode(0x7F) == 0);
    TEST_COND("μ-law: 0x80 is +32124, 0x00 is -32124", pp_ulaw_decode(0x80) == 32124 && pp_ulaw_decode(0x00) == -32124);
    TEST_COND("A-law: 0xD5 is +8, 0x55 is -8", pp_alaw_decode(0xD5) == 8 && pp_alaw_decode(0x55) == -8);
    TEST_COND("A-law: 0xAA is +32256, 0x2A is -32256", pp_alaw_decode(0xAA) == 32256 && pp_alaw_decode(0x2A) == -32256);
    TEST_COND("A-law: 0 encodes as 0xD5", pp_alaw_encode(0) == 0xD5);
    int worst_u = 0, worst_a = 0, monotonic = 1, prev_u = -40000, prev_a = -40000;
    for (int s = -32768; s <= 32767; s++) {
        int u = pp_ulaw_decode(pp_ulaw_encode((int16_t)s)), a = pp_alaw_decode(pp_alaw_encode((int16_t)s));
        int mag = s < 0 ? -s : s;
        /* one step of the sample's segment: 2^(segment+3) (μ-law on the biased scale, A-law 16 at the bottom) */
        int step_u = mag < 124 ? 8 : 8 << (31 - __builtin_clz((unsigned)(mag + 0x84)) - 7);
        int step_a = mag < 512 ? 16 : 16 << (31 - __builtin_clz((unsigned)mag) - 8);
        if (mag <= 32635 && abs(u - s) * 2 > step_u && abs(u - s) > worst_u) worst_u = abs(u - s);
        if (abs(a - s) * 2 > step_a + 2 && abs(a - s) > worst_a) worst_a = abs(a - s);
        monotonic &= u >= prev_u && a >= prev_a;
        prev_u = u;
        prev_a = a;
    }
    TEST_COND("μ-law round trip within half a step", worst_u == 0);
    TEST_COND("A-law round trip within half a step", worst_a == 0);
    TEST_COND("G.711 decoded values never decrease with the sample", monotonic);
}

/* The amplitude of a unit sine at hz after the rate change. */
static double tone_gain(int in_rate, int out_rate, double hz, int chunk) {
    pp_resampler *r;
    char err[256];
    if (pp_resampler_open(&r, in_rate, out_rate, chunk, err)) return -1;
    float in[4096], out[3 * 4096 + 3];
    double energy = 0;
    long t = 0, counted = 0;
    for (int k = 0; k < 40; k++) {
        for (int i = 0; i < chunk; i++, t++) in[i] = (float)sin(2 * M_PI * hz * (double)t / in_rate);
        int n = pp_resampler_process(r, in, chunk, out, (int)(sizeof out / sizeof out[0]));
        for (int i = 0; i < n && k > 4; i++, counted++) energy += (double)out[i] * out[i]; /* past the start-up */
    }
    pp_resampler_close(r);
    return sqrt(2 * energy / (double)counted); /* a unit sine's RMS is 1/sqrt(2) */
}

static void check_resampler(void) {
    char err[256];
    pp_resampler *down, *up;
    TEST_COND("resampler opens 24 kHz -> 8 kHz", !pp_resampler_open(&down, 24000, 8000, 1920, err));
    TEST_COND("resampler opens 8 kHz -> 24 kHz", !pp_resampler_open(&up, 8000, 24000, 1024, err));
    float x[1920], y[3 * 1920 + 3];
    int counts_ok = 1;
    for (int k = 0; k < 10; k++) {
        for (int i = 0; i < 1920; i++) x[i] = (float)sin(0.01 * (k * 1920 + i));
        counts_ok &= pp_resampler_process(down, x, 1920, y, 700) == 640;
        counts_ok &= pp_resampler_process(up, x, 160, y, 481) == 480;
    }
    TEST_COND("every 80 ms frame gives 640 samples at 8 kHz, every 20 ms at 8 kHz 480 at 24 kHz", counts_ok);
    pp_resampler_close(down);
    pp_resampler_close(up);

    /* The stream is pp_resample's filter, half a filter late: compare 8 kHz -> 24 kHz. */
    enum { N = 4000 };
    float in[N], *whole;
    int64_t n_whole;
    for (int i = 0; i < N; i++) in[i] = (float)(sin(0.3 * i) + 0.5 * sin(0.05 * i));
    pp_resample(in, N, 8000, 24000, &whole, &n_whole, err);
    TEST_COND("resampler opens", !pp_resampler_open(&up, 8000, 24000, 500, err));
    static float streamed[3 * N + 3];
    int got = 0;
    for (int i = 0; i < N; i += 500) got += pp_resampler_process(up, in + i, 500, streamed + got, 3 * N + 3 - got);
    int shift = 3 * pp_resampler_delay(up);
    double worst = 0;
    for (int j = 200; j + shift < got && j < n_whole - 200; j++)
        worst = fmax(worst, fabs(streamed[j + shift] - whole[j]));
    TEST_COND("the streamed output equals the whole-buffer resampler's, delayed", got == 3 * N && worst < 1e-6);
    pp_resampler_close(up);
    free(whole);

    double pass_down = tone_gain(24000, 8000, 1000, 1920), stop_down = tone_gain(24000, 8000, 6000, 1920);
    double pass_up = tone_gain(8000, 24000, 1000, 160);
    printf("24k->8k: 1 kHz gain %.4f, 6 kHz %.2e; 8k->24k: 1 kHz gain %.4f\n", pass_down, stop_down, pass_up);
    TEST_COND("1 kHz passes 24 kHz -> 8 kHz", fabs(pass_down - 1) < 0.01);
    TEST_COND("6 kHz (over the 4 kHz Nyquist) is stopped, > 60 dB", stop_down < 1e-3);
    TEST_COND("1 kHz passes 8 kHz -> 24 kHz", fabs(pass_up - 1) < 0.01);
}

static void check_json_writer(void) {
    char buf[64];
    pp_jw w;
    pp_jw_init(&w, buf, sizeof buf);
    pp_jw_raw(&w, "{\"k\":");
    pp_jw_str(&w, "a\"b\\c\n\x01\xc3\xa9", 9);
    pp_jw_raw(&w, "}");
    long n = pp_jw_end(&w);
    TEST_COND("the JSON writer escapes quotes, backslashes and controls, keeps UTF-8",
              n > 0 && !strcmp(buf, "{\"k\":\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"}"));
    pp_json_doc *doc;
    char err[256];
    TEST_COND("what it writes parses", n > 0 && !pp_json_parse(buf, (size_t)n, &doc, err));
    if (n > 0 && doc) {
        TEST_COND("and reads back", !strcmp(pp_json_get(pp_json_root(doc), "k")->string, "a\"b\\c\n\x01\xc3\xa9"));
        pp_json_free(doc);
    }
    char tiny[8];
    pp_jw_init(&w, tiny, sizeof tiny);
    pp_jw_str(&w, "longer than eight", 17);
    TEST_COND("the JSON writer fails instead of truncating", pp_jw_end(&w) < 0);
}

int main(void) {
    check_base64();
    check_g711();
    check_resampler();
    check_json_writer();
    return test_report();
}
