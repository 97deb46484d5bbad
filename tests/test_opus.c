/* test_opus: the uplink on the real browser capture (checked against Debian's opusdec), the
 * downlink's header pages and audio pages (decoded by opusdec and by our own uplink), loss
 * concealment, the bounded frame buffer, and the Ogg fault budget clocked by audio time. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <opus.h>

#include "audio/ogg.h"
#include "audio/opus.h"
#include "base/err.h"
#include "base/log.h"
#include "io/file.h"
#include "test.h"

#define CAPTURE PP_TEST_DATA "/captures/official-client-uplink.opus"
#define CAPTURE_PAGES 157

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

static blob read_file(const char *path) {
    blob b = {0};
    char err[PP_ERR_LEN];
    if (pp_file_read_all(path, 64u << 20, &b.data, &b.len, err)) fprintf(stderr, "%s\n", err);
    return b;
}

static size_t page_len(const uint8_t *p) {
    size_t n = 27 + p[26];
    for (int i = 0; i < p[26]; i++) n += p[27 + i];
    return n;
}

/* Growable float buffer for decoded audio. */
typedef struct {
    float *x;
    size_t n, cap;
} pcm_buf;

static void pcm_add(pcm_buf *b, const float *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->x = realloc(b->x, b->cap * sizeof *b->x);
    }
    memcpy(b->x + b->n, x, n * sizeof *x);
    b->n += n;
}

static void drain(pp_uplink *u, pcm_buf *out) {
    float frame[PP_FRAME_SAMPLES];
    while (pp_uplink_frame(u, frame)) pcm_add(out, frame, PP_FRAME_SAMPLES);
}

/* Feeds a stream to a fresh uplink one page per push (as the browser sends it), draining
 * frames after each push. skip_page >= 0 leaves out `skip` pages from that one. */
static int uplink_pages(const uint8_t *d, size_t len, int skip_page, int skip, pcm_buf *out, pp_uplink_stats *st) {
    char err[PP_ERR_LEN];
    pp_uplink *u;
    int rc = pp_uplink_open(&u, 0, err);
    if (rc < 0) return rc;
    int k = 0;
    for (size_t at = 0; at < len && rc == 0; k++) {
        size_t n = page_len(d + at);
        if (k < skip_page || k >= skip_page + skip) rc = pp_uplink_push(u, d + at, n, err);
        drain(u, out);
        at += n;
    }
    *st = pp_uplink_get_stats(u);
    pp_uplink_close(u);
    return rc;
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0;
}

/* RMS of a-b over RMS of b: opusdec's output is not bit-identical to a direct
 * opus_decode_float at 24 kHz (observed peak differences of 4e-3 on speech peaking at 1.0),
 * so the tests compare energies; a misalignment by even one sample gives a ratio near 0.5. */
static double rms_diff_ratio(const float *a, const float *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : 1;
}

static int have_opusdec(void) { return system("opusdec --version >/dev/null 2>&1") == 0; }

/* Decodes an Ogg Opus file with opusdec at 24 kHz into float samples. */
static blob opusdec(const char *in, const char *raw) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "opusdec --quiet --rate 24000 --float '%s' '%s'", in, raw);
    blob b = {0};
    if (system(cmd) == 0) b = read_file(raw);
    remove(raw);
    return b;
}

static void test_capture(void) {
    blob cap = read_file(CAPTURE);
    TEST_COND("capture readable", cap.len > 0);
    if (!cap.len) return;
    pcm_buf pcm = {0};
    pp_uplink_stats st = {0};
    TEST_COND("capture decodes", uplink_pages(cap.data, cap.len, -1, 0, &pcm, &st) == 0);
    /* 155 audio pages of two 20 ms packets (480 samples at 24 kHz) minus the pre-skip of
     * 3840 at 48 kHz (1920 at 24 kHz): 146880 samples = 6.12 s. */
    size_t expect = (CAPTURE_PAGES - 2) * 2 * 480 - 1920;
    TEST_COND("capture sample count", st.samples == expect && st.packets == (CAPTURE_PAGES - 2) * 2);
    TEST_COND("capture: no concealment, no drops", st.concealed == 0 && st.dropped == 0);
    TEST_COND("capture: whole frames out", pcm.n == expect / PP_FRAME_SAMPLES * PP_FRAME_SAMPLES);
    TEST_COND("capture: about 6 s", pcm.n >= 5 * PP_SAMPLE_RATE && pcm.n <= 7 * PP_SAMPLE_RATE);
    double r = rms(pcm.x, pcm.n);
    TEST_COND("capture: speech, not silence", r > 0.01 && r < 0.5);

    if (have_opusdec()) {
        blob ref = opusdec(CAPTURE, "test_opus_capture.raw");
        size_t nref = ref.len / sizeof(float);
        TEST_COND("opusdec decodes the capture to the same length", nref == expect);
        if (nref >= pcm.n && pcm.n) {
            double e = rms_diff_ratio(pcm.x, (const float *)ref.data, pcm.n);
            printf("uplink vs opusdec: rms(diff)/rms = %.3g over %zu samples\n", e, pcm.n);
            TEST_COND("uplink PCM = opusdec PCM", e < 0.01);
        }
        free(ref.data);
    }

    /* Lost pages (two packets each): decoding goes on, and concealment fills in for all of their
     * time (one packet's at the gap, the rest once the next page's granule tells how much was
     * lost), so the model's timeline keeps the client's. Before, one packet stood for any loss:
     * 20 of 40 ms, 20 of 200 ms. */
    for (int pages = 1; pages <= 5; pages += 4) {
        pcm_buf lost = {0};
        int rc = uplink_pages(cap.data, cap.len, 40, pages, &lost, &st);
        printf("%d lost page(s): %llu samples (expected %zu), %llu concealments\n", pages,
               (unsigned long long)st.samples, expect, (unsigned long long)st.concealed);
        TEST_COND("lost pages: stream goes on", rc == 0 && st.ogg.errors == 1);
        TEST_COND("lost pages: their whole time concealed", st.concealed >= 2 && st.samples == expect);
        free(lost.x);
    }

    /* A tiny buffer that nobody drains keeps the newest samples and counts the rest. */
    char err[PP_ERR_LEN];
    pp_uplink *u;
    TEST_COND("small buffer opens", pp_uplink_open(&u, 4000, err) == 0);
    TEST_COND("buffer below a frame refused", pp_uplink_open(&(pp_uplink *){0}, 100, err) == PP_EINVAL);
    pp_uplink_push(u, cap.data, cap.len, err);
    st = pp_uplink_get_stats(u);
    TEST_COND("full buffer drops oldest", pp_uplink_buffered(u) == 4000 && st.dropped == expect - 4000);
    float frame[PP_FRAME_SAMPLES];
    TEST_COND("newest samples kept", pcm.n >= expect - 4000 + PP_FRAME_SAMPLES && pp_uplink_frame(u, frame) &&
                                         memcmp(frame, pcm.x + (expect - 4000), sizeof frame) == 0);
    pp_uplink_close(u);

    /* Odd-sized pushes give the same frames. */
    pcm_buf odd = {0};
    pp_uplink_open(&u, 0, err);
    for (size_t at = 0, n = 1; at < cap.len; at += n, n = n * 3 % 1001 + 1) {
        if (n > cap.len - at) n = cap.len - at;
        pp_uplink_push(u, cap.data + at, n, err);
        drain(u, &odd);
    }
    pp_uplink_close(u);
    TEST_COND("odd pushes: same frames", odd.n == pcm.n && (!pcm.n || memcmp(odd.x, pcm.x, pcm.n * sizeof(float)) == 0));
    free(odd.x);

    /* A second stream (new serial, new OpusHead) after the first: both decode, the decoder
     * and the pre-skip restart. The opusenc capture holds 20 ms packets too. */
    blob enc = read_file(PP_TEST_DATA "/captures/opusenc-40ms-pages.opus");
    pcm_buf both = {0};
    pp_uplink_open(&u, 0, err);
    int rc2 = pp_uplink_push(u, cap.data, cap.len, err);
    drain(u, &both);
    rc2 |= enc.len > 47 ? pp_uplink_push(u, enc.data, enc.len, err) : -1;
    drain(u, &both);
    st = pp_uplink_get_stats(u);
    /* The first stream gives the capture's samples; the second, ending in an EOS page, its last
     * granule's less its own pre-skip, read here from its OpusHead (page offset 38; both in 48 kHz
     * units): the end trim (RFC 7845 §4) drops what its last packet decoded past the granule. */
    size_t preskip2 = enc.len > 47 ? (size_t)(enc.data[38] | enc.data[39] << 8) / 2 : 0;
    size_t last = enc.len > 27 ? enc.len - 27 : 0;
    while (last > 0 && memcmp(enc.data + last, "OggS", 4)) last--;
    uint64_t granule2 = 0;
    for (int b = 7; b >= 0; b--) granule2 = granule2 << 8 | enc.data[last + 6 + b];
    printf("chained: %llu samples, %zu + %llu expected (EOS flag %d)\n", (unsigned long long)st.samples, expect,
           (unsigned long long)(granule2 / 2 - preskip2), enc.data[last + 5] & 4);
    TEST_COND("chained streams decode", rc2 == 0 && st.ogg.errors == 0 && st.dropped == 0 &&
                                            st.samples == expect + granule2 / 2 - preskip2 &&
                                            st.samples > expect + 4 * PP_SAMPLE_RATE);
    free(both.x);
    pp_uplink_close(u);
    /* The capture sent again, same serial: the client's encoder restarted. Its OpusHead resets
     * the decoder and its pre-skip applies again: each copy gives the first one's samples. */
    pcm_buf again = {0};
    pp_uplink_open(&u, 0, err);
    rc2 = 0;
    for (int i = 0; i < 10 && rc2 == 0; i++) rc2 = pp_uplink_push(u, cap.data, cap.len, err), drain(u, &again);
    st = pp_uplink_get_stats(u);
    TEST_COND("same-serial restarts: no error, each copy's samples", rc2 == 0 && st.ogg.errors == 0 &&
                                                                      st.samples == 10 * expect);
    free(again.x);
    pp_uplink_close(u);
    free(enc.data);
    free(pcm.x);
    free(cap.data);
}

/* Writes packet (len bytes) as the pages it needs (serial, from sequence *seq), as libopusenc
 * writes a tags packet with cover art: full pages of 255 segments of 255 bytes, continued. */
static size_t write_spanning_packet(const uint8_t *packet, size_t len, uint32_t serial, uint32_t *seq, uint8_t *out) {
    size_t used = 0;
    for (size_t at = 0, ends = 0; !ends;) {
        size_t body = len - at < 255 * 255 ? len - at : 255 * 255;
        ends = len - at < 255 * 255; /* else a full page, continued on the next */
        int nseg = ends ? (int)(body / 255) + 1 : 255;
        uint8_t *p = out + used;
        memcpy(p, "OggS", 4);
        p[4] = 0;
        p[5] = at ? PP_OGG_FLAG_CONTINUED : 0;
        int64_t granule = ends ? 0 : -1;
        for (int b = 0; b < 8; b++) p[6 + b] = (uint8_t)((uint64_t)granule >> (8 * b));
        for (int b = 0; b < 4; b++) p[14 + b] = (uint8_t)(serial >> (8 * b)), p[18 + b] = (uint8_t)(*seq >> (8 * b));
        memset(p + 22, 0, 4);
        p[26] = (uint8_t)nseg;
        memset(p + 27, 255, (size_t)nseg);
        if (ends) p[27 + nseg - 1] = (uint8_t)(body % 255);
        memcpy(p + 27 + nseg, packet + at, body);
        size_t n = 27 + (size_t)nseg + body;
        uint32_t crc = pp_ogg_crc(p, n);
        for (int b = 0; b < 4; b++) p[22 + b] = (uint8_t)(crc >> (8 * b));
        used += n, at += body, (*seq)++;
    }
    return used;
}

/* An OpusTags packet over the 64 KiB packet limit (opusenc --picture with cover art: 120 KB of
 * tags) is skipped without error: it is never used. Before, it cost an Ogg error, a 0x05 to the
 * client and a 20 ms concealment at the start (opusenc's file of speech-24k.wav: 115353
 * samples instead of 114873). Here the capture's tags page is replaced by 100000 bytes of tags
 * over two pages, and the audio pages renumbered after them. */
static void test_big_tags(void) {
    blob cap = read_file(CAPTURE);
    if (!cap.len) return;
    size_t head = page_len(cap.data), tags = page_len(cap.data + head), tags_len = 100000;
    uint8_t *packet = calloc(1, tags_len), *d = malloc(cap.len + tags_len + 2 * PP_OGG_MAX_PAGE);
    memcpy(packet, "OpusTags", 8);
    packet[8] = 4; /* vendor "test", no comment; the rest is padding as cover art would be */
    memcpy(packet + 12, "test", 4);
    uint32_t serial = (uint32_t)cap.data[14] | (uint32_t)cap.data[15] << 8 | (uint32_t)cap.data[16] << 16 |
                      (uint32_t)cap.data[17] << 24, seq = 1;
    memcpy(d, cap.data, head);
    size_t len = head + write_spanning_packet(packet, tags_len, serial, &seq, d + head);
    for (size_t at = head + tags; at < cap.len; at += page_len(cap.data + at)) {
        size_t n = page_len(cap.data + at);
        uint8_t *p = d + len;
        memcpy(p, cap.data + at, n);
        for (int b = 0; b < 4; b++) p[18 + b] = (uint8_t)(seq >> (8 * b)), p[22 + b] = 0;
        uint32_t crc = pp_ogg_crc(p, n);
        for (int b = 0; b < 4; b++) p[22 + b] = (uint8_t)(crc >> (8 * b));
        len += n, seq++;
    }
    pcm_buf pcm = {0};
    pp_uplink_stats st = {0};
    int rc = uplink_pages(d, len, -1, 0, &pcm, &st);
    size_t expect = (CAPTURE_PAGES - 2) * 2 * 480 - 1920;
    printf("100000-byte tags: rc %d, %llu samples (expected %zu), %d errors, %llu concealed\n", rc,
           (unsigned long long)st.samples, expect, st.ogg.errors, (unsigned long long)st.concealed);
    TEST_COND("big OpusTags: skipped without error, exact sample count",
              rc == 0 && st.ogg.errors == 0 && st.concealed == 0 && st.samples == expect);
    free(pcm.x);
    free(packet);
    free(d);
    free(cap.data);
}

/* An Ogg stream with a valid OpusHead and an invalid Opus packet: concealed, not fatal; a
 * stream whose first packet is not OpusHead: fatal. */
static void test_bad_packets(void) {
    char err[PP_ERR_LEN];
    uint8_t page[PP_OGG_MAX_PAGE], head[19] = "OpusHead";
    head[8] = 1, head[9] = 1;
    uint8_t bad[3] = {0xff, 0xff, 0xff}; /* code 3 with an impossible frame count */
    pp_ogg_writer w;
    pp_ogg_writer_init(&w, 5);
    pp_uplink *u;
    pp_uplink_open(&u, 0, err);
    size_t len;
    pp_ogg_writer_page(&w, head, sizeof head, 0, 0, page, sizeof page, &len, err);
    int rc = pp_uplink_push(u, page, len, err);
    pp_ogg_writer_page(&w, bad, sizeof bad, 960, 0, page, sizeof page, &len, err);
    rc |= pp_uplink_push(u, page, len, err);
    pp_ogg_writer_page(&w, bad, 0, 1920, 0, page, sizeof page, &len, err);
    rc |= pp_uplink_push(u, page, len, err);
    pp_uplink_stats st = pp_uplink_get_stats(u);
    TEST_COND("bad Opus packets concealed", rc == 0 && st.concealed == 2 && st.samples == 960);
    pp_uplink_close(u);

    pp_ogg_writer_init(&w, 6);
    pp_uplink_open(&u, 0, err);
    pp_ogg_writer_page(&w, bad, sizeof bad, 0, 0, page, sizeof page, &len, err);
    err[0] = 0;
    rc = pp_uplink_push(u, page, len, err);
    TEST_COND("non-Opus stream refused", rc == PP_EFORMAT && strstr(err, "OpusHead") != NULL);
    pp_uplink_close(u);
}

/* OpusHead of another channel mapping (family 1, 3 channels: a multistream a single-stream
 * decoder misreads as noise) is refused; a stream's EOS page trims what its last packet decodes
 * past the granule (RFC 7845 §4): two 20 ms packets, the second ending at 20 + 5 ms. */
static void sine(float *x, int n, int offset, double hz, double amp);
static void test_head_and_end(void) {
    char err[PP_ERR_LEN];
    uint8_t page[PP_OGG_MAX_PAGE], head[19] = "OpusHead";
    head[8] = 1, head[9] = 3, head[18] = 1;
    pp_ogg_writer w;
    pp_uplink *u;
    size_t len;
    pp_ogg_writer_init(&w, 7);
    pp_uplink_open(&u, 0, err);
    pp_ogg_writer_page(&w, head, sizeof head, 0, 0, page, sizeof page, &len, err);
    int rc = pp_uplink_push(u, page, len, err);
    printf("family 1 head: %s\n", rc ? err : "taken");
    TEST_COND("channel mapping family 1 refused", rc == PP_EFORMAT && strstr(err, "mapping family 1"));
    pp_uplink_close(u);

    int oerr;
    OpusEncoder *enc = opus_encoder_create(PP_SAMPLE_RATE, 1, OPUS_APPLICATION_VOIP, &oerr);
    float x[480];
    uint8_t packet[2][400];
    int plen[2];
    for (int k = 0; k < 2; k++) {
        sine(x, 480, k * 480, 440.0, 0.3);
        plen[k] = opus_encode_float(enc, x, 480, packet[k], sizeof packet[k]);
    }
    opus_encoder_destroy(enc);
    head[9] = 1, head[18] = 0;
    pp_ogg_writer_init(&w, 8);
    pp_uplink_open(&u, 0, err);
    pp_ogg_writer_page(&w, head, sizeof head, 0, 0, page, sizeof page, &len, err);
    rc = pp_uplink_push(u, page, len, err);
    pp_ogg_writer_page(&w, packet[0], (size_t)plen[0], 960, 0, page, sizeof page, &len, err);
    rc |= pp_uplink_push(u, page, len, err);
    pp_ogg_writer_page(&w, packet[1], (size_t)plen[1], 960 + 240, 1, page, sizeof page, &len, err);
    rc |= pp_uplink_push(u, page, len, err);
    pp_uplink_stats st = pp_uplink_get_stats(u);
    printf("EOS at 25 ms: %llu samples, %zu buffered\n", (unsigned long long)st.samples, pp_uplink_buffered(u));
    TEST_COND("EOS trims to the granule", rc == 0 && plen[0] > 0 && plen[1] > 0 && st.samples == 600 &&
                                              pp_uplink_buffered(u) == 600);
    pp_uplink_close(u);
}

static void sine(float *x, int n, int offset, double hz, double amp) {
    for (int i = 0; i < n; i++)
        x[i] = (float)(amp * sin(2 * 3.14159265358979323846 * hz * (double)(offset + i) / PP_SAMPLE_RATE));
}

/* Zero crossings per second / 2 = the frequency of a clean tone. */
static double tone_hz(const float *x, size_t n) {
    size_t z = 0;
    for (size_t i = 1; i < n; i++) z += (x[i - 1] < 0) != (x[i] < 0);
    return (double)z / 2 / ((double)n / PP_SAMPLE_RATE);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_downlink(void) {
    enum { FRAMES = 25 };
    char err[PP_ERR_LEN];
    pp_downlink *d;
    TEST_COND("downlink opens", pp_downlink_open(&d, 0, err) == 0);
    TEST_COND("bad bitrate refused", pp_downlink_open(&(pp_downlink *){0}, 100, err) == PP_EINVAL);
    uint8_t *stream = malloc((FRAMES + 2) * PP_DOWNLINK_MAX_PAGE);
    size_t slen = 0, len;

    TEST_COND("OpusHead page", pp_downlink_header(d, 0, stream, PP_DOWNLINK_MAX_PAGE, &len, err) == 0);
    const uint8_t *h = stream;
    TEST_COND("OpusHead: 47 bytes, BOS, one lacing value of 19", len == 27 + 1 + 19 && h[5] == 2 &&
                                                                     h[26] == 1 && h[27] == 19);
    TEST_COND("OpusHead: serial 42, sequence 0, granule 0",
              le32(h + 14) == 42 && le32(h + 18) == 0 && le32(h + 6) == 0 && le32(h + 10) == 0);
    TEST_COND("OpusHead: fields", memcmp(h + 28, "OpusHead", 8) == 0 && h[36] == 1 && h[37] == 1 &&
                                      (h[38] | h[39] << 8) == 3840 && le32(h + 40) == 24000 &&
                                      h[44] == 0 && h[45] == 0 && h[46] == 0);
    slen += len;
    TEST_COND("small header buffer", pp_downlink_header(d, 1, stream + slen, 10, &len, err) == PP_EFULL);
    TEST_COND("OpusTags page", pp_downlink_header(d, 1, stream + slen, PP_DOWNLINK_MAX_PAGE, &len, err) == 0);
    const uint8_t *t = stream + slen;
    TEST_COND("OpusTags: sequence 1, vendor, no comments",
              t[5] == 0 && le32(t + 18) == 1 && memcmp(t + 28, "OpusTags", 8) == 0 &&
                  le32(t + 36) == 18 && memcmp(t + 40, "personaplex-server", 18) == 0 &&
                  le32(t + 58) == 0 && len == 27 + 1 + 8 + 4 + 18 + 4);
    slen += len;

    float frame[PP_FRAME_SAMPLES];
    int ok = 1;
    size_t max_page = 0;
    for (int f = 0; f < FRAMES; f++) {
        sine(frame, PP_FRAME_SAMPLES, f * PP_FRAME_SAMPLES, 440, 0.5);
        if (f == 3) frame[7] = NAN; /* a broken model sample must not break the stream */
        int rc = pp_downlink_encode(d, frame, stream + slen, PP_DOWNLINK_MAX_PAGE, &len, err);
        const uint8_t *p = stream + slen;
        ok &= rc == 0 && p[5] == 0 && le32(p + 18) == (uint32_t)f + 2 && le32(p + 14) == 42 &&
              le32(p + 6) == (uint32_t)(f + 1) * 3840 && le32(p + 10) == 0;
        if (len > max_page) max_page = len;
        slen += len;
    }
    TEST_COND("audio pages: sequence 2.., granule 3840 per frame (48 kHz)", ok);
    printf("downlink: %d pages, largest %zu bytes, %.1f kbit/s\n", FRAMES, max_page,
           (double)(slen * 8) / (FRAMES * 0.08) / 1000);
    pp_downlink_close(d);

    /* Our own reader decodes it: pre-skip 3840 (1920 at 24 kHz) leaves FRAMES-1 frames. */
    pcm_buf pcm = {0};
    pp_uplink_stats st;
    TEST_COND("uplink reads the downlink", uplink_pages(stream, slen, -1, 0, &pcm, &st) == 0 &&
                                               st.ogg.errors == 0 && st.concealed == 0);
    TEST_COND("downlink decodes to FRAMES-1 frames", pcm.n == (FRAMES - 1) * PP_FRAME_SAMPLES);
    if (pcm.n > PP_SAMPLE_RATE) {
        /* After the first frames settle: a clean 440 Hz tone near amplitude 0.5 (RMS 0.354).
         * Opus at ~25 kbit/s keeps level within ~15% and pitch within a few Hz. */
        const float *steady = pcm.x + 8 * PP_FRAME_SAMPLES;
        size_t n = pcm.n - 8 * PP_FRAME_SAMPLES;
        double r = rms(steady, n), hz = tone_hz(steady, n);
        printf("downlink tone: rms %.3f, %.1f Hz\n", r, hz);
        TEST_COND("tone level", fabs(r - 0.3536) < 0.05);
        TEST_COND("tone pitch", fabs(hz - 440) < 5);
    }

    FILE *f = fopen("test_opus_downlink.opus", "wb");
    TEST_COND("write downlink file", f && fwrite(stream, 1, slen, f) == slen);
    if (f) fclose(f);
    if (have_opusdec()) {
        blob ref = opusdec("test_opus_downlink.opus", "test_opus_downlink.raw");
        size_t n = ref.len / sizeof(float);
        printf("opusdec: %zu samples\n", n);
        /* opusdec honours the pre-skip and the last granule: (25*3840 - 3840) / 2. */
        TEST_COND("opusdec decodes the downlink at the right length", n == (size_t)(FRAMES - 1) * PP_FRAME_SAMPLES);
        if (n == pcm.n) {
            double e = rms_diff_ratio(pcm.x, (const float *)ref.data, n);
            printf("downlink, ours vs opusdec: rms(diff)/rms = %.3g\n", e);
            TEST_COND("opusdec and our uplink agree", e < 0.01);
        }
        free(ref.data);
    } else {
        printf("opusdec not installed: downlink not cross-checked\n");
    }
    remove("test_opus_downlink.opus");

    /* A fixed bitrate is honoured: 64 kbit/s pages are larger than the automatic ones. */
    pp_downlink_open(&d, 64000, err);
    size_t total = 0;
    for (int i = 0; i < FRAMES; i++) {
        sine(frame, PP_FRAME_SAMPLES, i * PP_FRAME_SAMPLES, 440, 0.5);
        pp_downlink_encode(d, frame, stream, PP_DOWNLINK_MAX_PAGE, &len, err);
        total += len;
    }
    pp_downlink_close(d);
    TEST_COND("64 kbit/s uses more bytes", total > slen);
    free(pcm.x);
    free(stream);
}

/* Writes one page of npkt copies of packet (each under 255 bytes: one lacing value each), CRC
 * set; returns its length. */
static size_t write_packets_page(const uint8_t *packet, size_t len, int npkt, uint32_t seq, int64_t granule,
                                 uint8_t *out) {
    memcpy(out, "OggS", 4);
    out[4] = 0;
    out[5] = seq == 0 ? PP_OGG_FLAG_BOS : 0;
    for (int b = 0; b < 8; b++) out[6 + b] = (uint8_t)((uint64_t)granule >> (8 * b));
    for (int b = 0; b < 4; b++) out[14 + b] = (uint8_t)(7u >> (8 * b)), out[18 + b] = (uint8_t)(seq >> (8 * b));
    memset(out + 22, 0, 4);
    out[26] = (uint8_t)npkt;
    memset(out + 27, (int)len, (size_t)npkt);
    size_t n = 27 + (size_t)npkt;
    for (int i = 0; i < npkt; i++, n += len) memcpy(out + n, packet, len);
    uint32_t crc = pp_ogg_crc(out, n);
    for (int b = 0; b < 4; b++) out[22 + b] = (uint8_t)(crc >> (8 * b));
    return n;
}

/* Streams `seconds` of 20 ms packets in pages of page_ms, with a page of bad CRC after every
 * fault_every_s seconds of audio. Returns the audio second at which the uplink gave up on the
 * stream, or -1 if it lasted to the end. */
static int seconds_until_failure(const uint8_t *packet, size_t len, int page_ms, int fault_every_s, int seconds) {
    char err[PP_ERR_LEN];
    uint8_t page[PP_OGG_MAX_PAGE], head[19] = "OpusHead", tags[16] = "OpusTags";
    head[8] = 1, head[9] = 1;
    pp_uplink *u;
    if (pp_uplink_open(&u, 0, err)) return -2;
    int per_page = page_ms / 20, pages_per_s = 1000 / page_ms, failed_at = -1;
    uint32_t seq = 0;
    int64_t granule = 0;
    int rc = pp_uplink_push(u, page, write_packets_page(head, sizeof head, 1, seq++, 0, page), err);
    rc |= pp_uplink_push(u, page, write_packets_page(tags, sizeof tags, 1, seq++, 0, page), err);
    for (int s = 0; s < seconds && failed_at < 0; s++) {
        for (int k = 0; k < pages_per_s && rc == 0; k++) {
            granule += per_page * 960;
            rc = pp_uplink_push(u, page, write_packets_page(packet, len, per_page, seq++, granule, page), err);
        }
        if (rc == 0 && (s + 1) % fault_every_s == 0) { /* a page that fails its CRC, then the stream goes on */
            size_t n = write_packets_page(packet, len, per_page, seq, granule, page);
            page[22] ^= 1;
            rc = pp_uplink_push(u, page, n, err);
        }
        float frame[PP_FRAME_SAMPLES];
        while (pp_uplink_frame(u, frame)) {}
        if (rc) failed_at = s + 1;
    }
    pp_uplink_close(u);
    return failed_at;
}

/* The Ogg fault budget forgives by audio time, not by pages: an encoder writing 1 s pages
 * (ffmpeg -page_duration 1000000, opusenc --max-delay 1000) is treated as one writing the
 * browser's 40 ms pages. Before, one bad page per 6 s of audio lasted forever with 40 ms pages
 * (150 good pages forgave it) and closed a 1 s page stream at 102 s (6 pages forgave 6/128 of
 * it). */
static void test_fault_budget_by_time(void) {
    int oerr = 0;
    OpusEncoder *enc = opus_encoder_create(PP_SAMPLE_RATE, 1, OPUS_APPLICATION_VOIP, &oerr);
    float silence[480] = {0};
    uint8_t packet[200];
    int len = enc ? opus_encode_float(enc, silence, 480, packet, sizeof packet) : -1;
    if (enc) opus_encoder_destroy(enc);
    TEST_COND("one 20 ms packet encoded", len > 0 && len < 255);
    if (len <= 0 || len >= 255) return;
    int rare_40 = seconds_until_failure(packet, (size_t)len, 40, 6, 300);
    int rare_1000 = seconds_until_failure(packet, (size_t)len, 1000, 6, 300);
    int often_40 = seconds_until_failure(packet, (size_t)len, 40, 1, 300);
    int often_1000 = seconds_until_failure(packet, (size_t)len, 1000, 1, 300);
    printf("fault per 6 s: 40 ms pages fail at %d s, 1 s pages at %d s; fault per 1 s: at %d s and %d s "
           "(-1: never)\n", rare_40, rare_1000, often_40, often_1000);
    TEST_COND("a fault per 6 s of audio is forgiven, whatever the page duration", rare_40 == -1 && rare_1000 == -1);
    TEST_COND("a fault per second of audio closes the stream at the same time for both page durations",
              often_40 > 0 && often_40 == often_1000);
}

int main(void) {
    pp_log_set_level(PP_LOG_ERROR);
    test_capture();
    test_big_tags();
    test_bad_packets();
    test_fault_budget_by_time();
    test_head_and_end();
    test_downlink();
    int rc = test_report();
    if (rc == 0 && !have_opusdec()) TEST_SKIP("opusdec (Debian opus-tools) missing: cross-checks not run");
    return rc;
}
