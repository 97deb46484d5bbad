/* test_ogg: the streaming Ogg reader against libogg as an independent oracle, on the real
 * browser captures split every way a WebSocket may split them, plus every fault the reader
 * must survive (CRC, BOS, garbage, gaps, oversize packets), and the page writer. */
#include <ogg/ogg.h>
#include <stdint.h>
#include <string.h>

#include "audio/ogg.h"
#include "base/err.h"
#include "base/log.h"
#include "io/file.h"
#include "test.h"

/* ---- helpers ---- */

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

static blob read_blob(const char *name) {
    char path[1024], err[PP_ERR_LEN];
    snprintf(path, sizeof path, "%s/captures/%s", PP_TEST_DATA, name);
    blob b = {0};
    if (pp_file_read_all(path, 64u << 20, &b.data, &b.len, err)) fprintf(stderr, "%s\n", err);
    return b;
}

/* The packets a reader delivered: all bytes concatenated plus per-packet fields. */
#define MAXP 4096
typedef struct {
    uint8_t *bytes;
    size_t used, cap;
    size_t n, len[MAXP];
    int64_t granule[MAXP];
    int bos[MAXP], eos[MAXP], gap[MAXP];
} packets;

static void packets_add(packets *p, const uint8_t *d, size_t len, int64_t granule, int bos, int eos,
                        int gap) {
    if (p->n >= MAXP) return;
    if (p->used + len > p->cap) {
        p->cap = (p->used + len) * 2 + 1024;
        p->bytes = realloc(p->bytes, p->cap);
    }
    if (len) memcpy(p->bytes + p->used, d, len);
    p->used += len;
    p->len[p->n] = len;
    p->granule[p->n] = granule;
    p->bos[p->n] = bos;
    p->eos[p->n] = eos;
    p->gap[p->n] = gap;
    p->n++;
}

static void packets_free(packets *p) { free(p->bytes); }

static int same_packets(const packets *a, const packets *b) {
    if (a->n != b->n || a->used != b->used || (a->used && memcmp(a->bytes, b->bytes, a->used) != 0)) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->len[i] != b->len[i] || a->granule[i] != b->granule[i] || a->bos[i] != b->bos[i] ||
            a->eos[i] != b->eos[i])
            return 0;
    return 1;
}

static int collect(void *user, const pp_ogg_packet *pkt, char *err) {
    (void)err;
    packets_add(user, pkt->data, pkt->len, pkt->granule, pkt->bos, pkt->eos, pkt->gap);
    return 0;
}

/* The oracle: libogg's sync + stream layers over the whole buffer (single serial). */
static void libogg_packets(const uint8_t *d, size_t len, packets *out) {
    ogg_sync_state oy;
    ogg_stream_state os;
    ogg_page og;
    ogg_packet op;
    int started = 0;
    ogg_sync_init(&oy);
    char *buf = ogg_sync_buffer(&oy, (long)len);
    memcpy(buf, d, len);
    ogg_sync_wrote(&oy, (long)len);
    while (ogg_sync_pageout(&oy, &og) == 1) {
        if (!started) {
            ogg_stream_init(&os, ogg_page_serialno(&og));
            started = 1;
        }
        ogg_stream_pagein(&os, &og);
        while (ogg_stream_packetout(&os, &op) == 1)
            packets_add(out, op.packet, (size_t)op.bytes, op.granulepos, op.b_o_s != 0,
                        op.e_o_s != 0, 0);
    }
    if (started) ogg_stream_clear(&os);
    ogg_sync_clear(&oy);
}

/* Feeds d in chunks chosen by next_chunk; returns the first error code (or 0). */
typedef size_t (*chunker)(size_t at, void *state);

static int feed_chunks(pp_ogg_reader *r, const uint8_t *d, size_t len, chunker next, void *state,
                       packets *out, char *err) {
    for (size_t at = 0; at < len;) {
        size_t n = next(at, state);
        if (n > len - at) n = len - at;
        int rc = pp_ogg_reader_feed(r, d + at, n, collect, out, err);
        if (rc < 0) return rc;
        at += n;
    }
    return 0;
}

static int read_all(const uint8_t *d, size_t len, const pp_ogg_limits *lim, chunker next,
                    void *state, packets *out, pp_ogg_stats *st, char *err) {
    pp_ogg_reader *r;
    if (st) memset(st, 0, sizeof *st);
    int rc = pp_ogg_reader_open(&r, lim, err);
    if (rc < 0) return rc;
    rc = feed_chunks(r, d, len, next, state, out, err);
    if (st) *st = pp_ogg_reader_stats(r);
    pp_ogg_reader_close(r);
    return rc;
}

static size_t chunk_one(size_t at, void *s) { (void)at, (void)s; return 1; }
static size_t chunk_all(size_t at, void *s) { (void)at, (void)s; return SIZE_MAX; }
static size_t chunk_random(size_t at, void *s) {
    (void)at;
    uint32_t *x = s; /* xorshift: reproducible, covers 1..700-byte chunks */
    *x ^= *x << 13, *x ^= *x >> 17, *x ^= *x << 5;
    return 1 + *x % 700;
}

/* Page boundaries from the headers: chunk = exactly the page starting at `at`, or `per` pages. */
typedef struct {
    const uint8_t *d;
    size_t len;
    int per;
} page_state;

static size_t page_len(const uint8_t *p) {
    size_t n = 27 + p[26];
    for (int i = 0; i < p[26]; i++) n += p[27 + i];
    return n;
}

static size_t chunk_pages(size_t at, void *s) {
    page_state *ps = s;
    size_t n = 0;
    for (int i = 0; i < ps->per && at + n < ps->len; i++) n += page_len(ps->d + at + n);
    return n;
}

/* Byte offset of page k in a valid stream. */
static size_t page_offset(const uint8_t *d, int k) {
    size_t at = 0;
    for (int i = 0; i < k; i++) at += page_len(d + at);
    return at;
}

static int count_pages(const uint8_t *d, size_t len) {
    int n = 0;
    for (size_t at = 0; at < len; at += page_len(d + at)) n++;
    return n;
}

/* ---- tests ---- */

static void test_crc(void) {
    /* CRC-32 with poly 0x04c11db7, init 0, no reflection, no final xor: check value of
     * "123456789" is the bitwise complement of the POSIX cksum check 0x765e7680. */
    TEST_COND("crc check value", pp_ogg_crc((const uint8_t *)"123456789", 9) == 0x89a1897fu);
}

/* two_per_page: the browser's layout (OpusHead, OpusTags, then two packets per page). */
static void test_capture_splits(const char *name, int expect_pages, int two_per_page) {
    blob b = read_blob(name);
    TEST_COND("capture readable", b.len > 0);
    if (!b.len) return;
    char err[PP_ERR_LEN];
    packets ref = {0}, whole = {0};
    libogg_packets(b.data, b.len, &ref);
    int pages = count_pages(b.data, b.len);
    TEST_COND("capture page count", pages == expect_pages);
    TEST_COND("libogg sees packets", ref.n > 100);

    pp_ogg_stats st;
    TEST_COND("whole buffer reads", read_all(b.data, b.len, NULL, chunk_all, NULL, &whole, &st, err) == 0);
    TEST_COND("whole = libogg packets", same_packets(&whole, &ref));
    TEST_COND("pages counted", st.pages == (uint64_t)pages && st.errors == 0 && st.skipped == 0);
    TEST_COND("OpusHead first, BOS", whole.n > 2 && whole.bos[0] && whole.len[0] == 19 &&
                                         memcmp(whole.bytes, "OpusHead", 8) == 0);
    if (two_per_page)
        TEST_COND("browser pages hold two packets", whole.n == 2 + 2 * (size_t)(pages - 2));

    packets one = {0};
    TEST_COND("byte at a time reads", read_all(b.data, b.len, NULL, chunk_one, NULL, &one, NULL, err) == 0);
    TEST_COND("byte at a time = libogg", same_packets(&one, &ref));
    packets_free(&one);

    for (uint32_t seed = 1; seed <= 5; seed++) {
        packets rnd = {0};
        uint32_t x = seed * 2654435761u;
        int rc = read_all(b.data, b.len, NULL, chunk_random, &x, &rnd, &st, err);
        TEST_COND("random chunks = libogg", rc == 0 && same_packets(&rnd, &ref) && st.errors == 0);
        packets_free(&rnd);
    }
    for (int per = 1; per <= 3; per++) {
        packets pg = {0};
        page_state ps = {b.data, b.len, per};
        int rc = read_all(b.data, b.len, NULL, chunk_pages, &ps, &pg, NULL, err);
        TEST_COND("page-aligned chunks = libogg", rc == 0 && same_packets(&pg, &ref));
        packets_free(&pg);
    }
    packets_free(&whole);
    packets_free(&ref);
    free(b.data);
}

/* Corrupting one byte of page 10 loses that page's packets only, flags the gap, and a strict
 * reader (max_errors 0) fails on it. */
static void test_crc_corruption(const blob *b, const packets *ref) {
    char err[PP_ERR_LEN];
    uint8_t *d = malloc(b->len);
    memcpy(d, b->data, b->len);
    size_t at = page_offset(d, 10);
    d[at + page_len(d + at) - 1] ^= 0x40;
    packets got = {0};
    pp_ogg_stats st;
    int rc = read_all(d, b->len, NULL, chunk_all, NULL, &got, &st, err);
    TEST_COND("corrupt page: stream goes on", rc == 0);
    TEST_COND("corrupt page: one error", st.errors == 1);
    TEST_COND("corrupt page: two packets lost", got.n == ref->n - 2);
    /* Page k >= 2 holds packets 2k-2 and 2k-1: page 10's loss makes packet 20 the 19th. */
    TEST_COND("corrupt page: gap flagged on the next packet", got.n > 18 && got.gap[18] && !got.gap[17]);
    pp_ogg_reader *r;
    pp_ogg_reader_open(&r, NULL, err);
    pp_ogg_reader_feed(r, d, b->len, NULL, NULL, err);
    TEST_COND("corrupt page: message names the CRC",
              strstr(pp_ogg_reader_last_error(r), "CRC mismatch") != NULL);
    pp_ogg_reader_close(r);

    pp_ogg_limits strict = pp_ogg_limits_default();
    strict.max_errors = 0;
    packets s = {0};
    err[0] = 0;
    rc = read_all(d, b->len, &strict, chunk_one, NULL, &s, NULL, err);
    TEST_COND("strict reader fails on CRC", rc == PP_EFORMAT && strstr(err, "CRC") != NULL);
    packets_free(&s);
    packets_free(&got);
    free(d);
}

static void test_missing_bos(const blob *b) {
    char err[PP_ERR_LEN];
    size_t skip = page_len(b->data);
    packets got = {0};
    pp_ogg_stats st;
    err[0] = 0;
    int rc = read_all(b->data + skip, b->len - skip, NULL, chunk_all, NULL, &got, &st, err);
    TEST_COND("missing BOS: no packet delivered", got.n == 0);
    TEST_COND("missing BOS: reader fails past the error limit",
              rc == PP_EFORMAT && st.errors == pp_ogg_limits_default().max_errors + 1);
    TEST_COND("missing BOS: message says so", strstr(err, "before its BOS") != NULL);
    packets_free(&got);
}

static void test_duplicate_bos(const blob *b, const packets *ref) {
    char err[PP_ERR_LEN];
    size_t p0 = page_len(b->data), at = page_offset(b->data, 3);
    uint8_t *d = malloc(b->len + p0);
    memcpy(d, b->data, at);
    memcpy(d + at, b->data, p0); /* the BOS page again after page 2 */
    memcpy(d + at + p0, b->data + at, b->len - at);
    packets got = {0};
    pp_ogg_stats st;
    pp_ogg_reader *r;
    pp_ogg_reader_open(&r, NULL, err);
    int rc = feed_chunks(r, d, b->len + p0, chunk_all, NULL, &got, err);
    st = pp_ogg_reader_stats(r);
    TEST_COND("duplicate BOS: rejected, stream goes on", rc == 0 && st.errors == 1);
    TEST_COND("duplicate BOS: message", strstr(pp_ogg_reader_last_error(r), "second BOS") != NULL);
    TEST_COND("duplicate BOS: other packets intact", same_packets(&got, ref));
    pp_ogg_reader_close(r);
    packets_free(&got);
    free(d);
}

/* An encoder restarted mid-call with the same serial (sphn writes 42 every time) sends its BOS
 * page again, then sequence 1, 2, ...: a new stream, not a fault. Fed whole and byte by byte
 * (the held BOS page must outlive the input buffer). */
static void test_restart_same_serial(const blob *b, const packets *ref) {
    enum { RESTARTS = 12 }; /* over the error limit: each used to cost two errors */
    size_t len = b->len * (RESTARTS + 1);
    uint8_t *d = malloc(len);
    for (int i = 0; i <= RESTARTS; i++) memcpy(d + (size_t)i * b->len, b->data, b->len);
    packets want = {0};
    for (int i = 0; i <= RESTARTS; i++)
        for (size_t k = 0, off = 0; k < ref->n; off += ref->len[k++])
            packets_add(&want, ref->bytes + off, ref->len[k], ref->granule[k], ref->bos[k], ref->eos[k], 0);
    chunker how[2] = {chunk_all, chunk_one};
    const char *name[2] = {"restart, same serial, whole: every packet, no error",
                           "restart, same serial, byte by byte: every packet, no error"};
    for (int c = 0; c < 2; c++) {
        char err[PP_ERR_LEN] = "";
        packets got = {0};
        pp_ogg_stats st;
        int rc = read_all(d, c ? b->len * 2 : len, NULL, how[c], NULL, &got, &st, err);
        packets cut = want;
        if (c) cut.n = ref->n * 2, cut.used = ref->used * 2; /* byte by byte: two copies will do */
        int gaps = 0;
        for (size_t k = 0; k < got.n; k++) gaps += got.gap[k];
        int ok = rc == 0 && st.errors == 0 && gaps == 0 && same_packets(&got, &cut) && got.bos[ref->n];
        if (!ok) fprintf(stderr, "%s: rc %d, %d errors, %zu packets (%s)\n", name[c], rc, st.errors, got.n, err);
        TEST_COND(name[c], ok);
        packets_free(&got);
    }
    packets_free(&want);
    free(d);
}

static void test_garbage_prefix(const blob *b, const packets *ref) {
    char err[PP_ERR_LEN];
    size_t g = 1000;
    uint8_t *d = malloc(g + b->len);
    uint32_t x = 12345;
    for (size_t i = 0; i < g; i++) d[i] = (uint8_t)chunk_random(0, &x);
    memcpy(d + g - 3, "Ogg", 3); /* a capture cut short right before the real one */
    memcpy(d + g, b->data, b->len);
    for (int mode = 0; mode < 2; mode++) {
        packets got = {0};
        pp_ogg_stats st;
        int rc = read_all(d, g + b->len, NULL, mode ? chunk_one : chunk_all, NULL, &got, &st, err);
        TEST_COND("garbage prefix: same packets", rc == 0 && same_packets(&got, ref));
        TEST_COND("garbage prefix: counted once, all bytes skipped", st.errors == 1 && st.skipped == g);
        packets_free(&got);
    }
    free(d);
}

/* Endless garbage, random or made of bad captures, ends in PP_EFORMAT after bounded work. */
static void test_endless_garbage(void) {
    char err[PP_ERR_LEN];
    pp_ogg_reader *r;
    pp_ogg_reader_open(&r, NULL, err);
    uint8_t chunk[4096];
    uint32_t x = 99;
    int rc = 0;
    size_t fed = 0;
    for (int i = 0; i < 4096 && rc == 0; i++, fed += sizeof chunk) {
        for (size_t k = 0; k < sizeof chunk; k++) chunk[k] = (uint8_t)chunk_random(0, &x);
        rc = pp_ogg_reader_feed(r, chunk, sizeof chunk, collect, NULL, err);
    }
    pp_ogg_stats st = pp_ogg_reader_stats(r);
    size_t limit = pp_ogg_limits_default().max_skip;
    TEST_COND("random garbage: fails", rc == PP_EFORMAT && strstr(err, "garbage") != NULL);
    TEST_COND("random garbage: stops soon after the skip limit",
              st.skipped > limit && fed <= limit + PP_OGG_MAX_PAGE + sizeof chunk);
    TEST_COND("random garbage: stays failed",
              pp_ogg_reader_feed(r, chunk, 1, collect, NULL, err) == PP_EFORMAT);
    pp_ogg_reader_close(r);

    /* Captures with a plausible header and a bad CRC: the error limit stops them. */
    pp_ogg_reader_open(&r, NULL, err);
    uint8_t fake[64] = "OggS";
    fake[26] = 1;
    fake[27] = 30;
    rc = 0;
    int sent = 0;
    for (; sent < 10000 && rc == 0; sent++) rc = pp_ogg_reader_feed(r, fake, 58, collect, NULL, err);
    TEST_COND("bad captures: fail at the error limit",
              rc == PP_EFORMAT && sent <= pp_ogg_limits_default().max_errors + 1 &&
                  strstr(err, "too many") != NULL);
    pp_ogg_reader_close(r);
}

/* A libogg-written stream with packets spanning pages, exact multiples of 255, empty packets,
 * an oversize packet and EOS. */
static void test_spanning_packets(void) {
    static const size_t sizes[] = {19, 0, 255, 510, 20000, 70000, 3, 65535, 254, 100};
    const size_t np = sizeof sizes / sizeof *sizes;
    ogg_stream_state os;
    ogg_stream_init(&os, 77);
    uint8_t *stream = NULL, *pkt = malloc(70000);
    size_t slen = 0;
    ogg_page og;
    for (size_t i = 0; i < np; i++) {
        for (size_t k = 0; k < sizes[i]; k++) pkt[k] = (uint8_t)(k * 7 + i);
        ogg_packet op = {.packet = pkt, .bytes = (long)sizes[i], .b_o_s = i == 0,
                         .e_o_s = i == np - 1, .granulepos = (ogg_int64_t)i * 960,
                         .packetno = (ogg_int64_t)i};
        ogg_stream_packetin(&os, &op);
        while (ogg_stream_pageout(&os, &og) || (i == np - 1 && ogg_stream_flush(&os, &og))) {
            stream = realloc(stream, slen + (size_t)og.header_len + (size_t)og.body_len);
            memcpy(stream + slen, og.header, (size_t)og.header_len);
            memcpy(stream + slen + og.header_len, og.body, (size_t)og.body_len);
            slen += (size_t)og.header_len + (size_t)og.body_len;
        }
    }
    ogg_stream_clear(&os);

    char err[PP_ERR_LEN];
    packets ref = {0};
    libogg_packets(stream, slen, &ref);
    TEST_COND("libogg reads its own stream", ref.n == np);
    packets got = {0};
    pp_ogg_stats st;
    uint32_t x = 7;
    int rc = read_all(stream, slen, NULL, chunk_random, &x, &got, &st, err);
    /* The default 64 KiB packet limit drops the 70000-byte packet (one error). */
    TEST_COND("spanning: reads", rc == 0 && st.errors == 1 && got.n == np - 1);
    int ok = got.n == np - 1;
    for (size_t i = 0, j = 0; ok && i < np; i++) {
        if (sizes[i] == 70000) {
            ok = got.gap[j];
            continue;
        }
        ok = got.len[j] == sizes[i] && (sizes[i] == 0 || got.bytes != NULL);
        j++;
    }
    TEST_COND("spanning: sizes match, gap after the dropped packet", ok);
    TEST_COND("spanning: EOS on the last packet", got.n && got.eos[got.n - 1] && !got.eos[0]);

    pp_ogg_limits big = pp_ogg_limits_default();
    big.max_packet = 70000;
    packets all = {0};
    rc = read_all(stream, slen, &big, chunk_one, NULL, &all, &st, err);
    TEST_COND("spanning: larger limit = libogg", rc == 0 && st.errors == 0 && same_packets(&all, &ref));
    /* Counted as a header packet, the 70000-byte one comes cut to the limit, without error. */
    pp_ogg_limits headers = pp_ogg_limits_default();
    headers.header_packets = 6;
    packets cut = {0};
    rc = read_all(stream, slen, &headers, chunk_one, NULL, &cut, &st, err);
    TEST_COND("spanning: a header packet over the limit is cut, not an error",
              rc == 0 && st.errors == 0 && cut.n == np && cut.len[5] == headers.max_packet &&
                  !memcmp(cut.bytes + 19 + 255 + 510 + 20000, ref.bytes + 19 + 255 + 510 + 20000, headers.max_packet) &&
                  !cut.gap[6] && cut.len[7] == 65535);
    packets_free(&cut);
    /* After EOS a page of the same serial is an error. */
    pp_ogg_reader *r;
    pp_ogg_reader_open(&r, NULL, err);
    pp_ogg_reader_feed(r, stream, slen, NULL, NULL, err);
    size_t last = page_offset(stream, count_pages(stream, slen) - 1);
    pp_ogg_reader_feed(r, stream + last, slen - last, NULL, NULL, err);
    TEST_COND("page after EOS rejected", strstr(pp_ogg_reader_last_error(r), "after EOS") != NULL);
    pp_ogg_reader_close(r);
    packets_free(&all);
    packets_free(&got);
    packets_free(&ref);
    free(stream);
    free(pkt);
}

static void test_sequence_gap(const blob *b, const packets *ref) {
    char err[PP_ERR_LEN];
    size_t at = page_offset(b->data, 20), n = page_len(b->data + at);
    uint8_t *d = malloc(b->len);
    memcpy(d, b->data, at);
    memcpy(d + at, b->data + at + n, b->len - at - n); /* page 20 never arrives */
    packets got = {0};
    pp_ogg_stats st;
    int rc = read_all(d, b->len - n, NULL, chunk_all, NULL, &got, &st, err);
    TEST_COND("sequence gap: counted, stream goes on", rc == 0 && st.errors == 1 && got.n == ref->n - 2);
    TEST_COND("sequence gap: flagged", got.n > 38 && got.gap[38] && !got.gap[37]);
    packets_free(&got);
    free(d);
}

/* A stream of n_pages one-packet pages (serial 9, the first BOS) of 60-byte packets, but the
 * pages listed in bad[] hold bad_size bytes and have a corrupt CRC. */
static uint8_t *stream_with_bad_pages(int n_pages, const int *bad, int n_bad, size_t bad_size, size_t *len) {
    char err[PP_ERR_LEN];
    uint8_t *pkt = malloc(bad_size > 60 ? bad_size : 60);
    uint8_t *d = malloc((size_t)n_pages * (27 + 1 + 60) + (size_t)n_bad * PP_OGG_MAX_PAGE);
    pp_ogg_writer w;
    pp_ogg_writer_init(&w, 9);
    *len = 0;
    for (int k = 0, next_bad = 0; k < n_pages; k++) {
        int is_bad = next_bad < n_bad && bad[next_bad] == k;
        size_t size = is_bad ? bad_size : 60, n;
        memset(pkt, k & 0xff, size);
        pp_ogg_writer_page(&w, pkt, size, (int64_t)k * 960, 0, d + *len, PP_OGG_MAX_PAGE, &n, err);
        if (is_bad) d[*len + n - 1] ^= 0x40, next_bad++;
        *len += n;
    }
    free(pkt);
    return d;
}

/* The error limit is a rate: 20 bad pages scattered over 6000 good ones (a flaky client over a
 * long call: one bad page every 12 s of the browser's 40 ms pages) cost 20 errors and the call
 * goes on, while bad pages with little good data between them are still cut at the 17th. Before,
 * the 16 errors were a lifetime count: the 17th scattered bad page failed the stream. Likewise
 * the garbage limit holds for one run: 20 scattered bad pages of 20000 bytes (400 KB skipped in
 * all) go by, where a 256 KiB lifetime total failed the stream at the 14th. */
static void test_scattered_errors(void) {
    enum { PAGES = 6000, BAD = 20 };
    int bad[BAD], dense[BAD];
    for (int i = 0; i < BAD; i++) bad[i] = 300 * (i + 1) - 1, dense[i] = 100 + 2 * i;
    size_t len;
    uint8_t *d = stream_with_bad_pages(PAGES, bad, BAD, 60, &len);
    char err[PP_ERR_LEN] = "";
    packets got = {0};
    pp_ogg_stats st;
    int rc = read_all(d, len, NULL, chunk_all, NULL, &got, &st, err);
    printf("scattered: rc %d, %d errors, %llu packets of %d (%s)\n", rc, st.errors,
           (unsigned long long)st.packets, PAGES - BAD, err);
    TEST_COND("20 scattered bad pages: the stream goes on",
              rc == 0 && st.errors == BAD && st.packets == PAGES - BAD);
    packets_free(&got);
    free(d);

    d = stream_with_bad_pages(PAGES, bad, BAD, 20000, &len);
    rc = read_all(d, len, NULL, chunk_all, NULL, &got, &st, err);
    printf("scattered big: rc %d, %d errors, %llu bytes skipped (%s)\n", rc, st.errors,
           (unsigned long long)st.skipped, err);
    TEST_COND("20 scattered big bad pages: the stream goes on",
              rc == 0 && st.errors == BAD && st.packets == PAGES - BAD && st.skipped > 400000);
    free(d);

    d = stream_with_bad_pages(PAGES, dense, BAD, 60, &len);
    packets few = {0};
    rc = read_all(d, len, NULL, chunk_all, NULL, &few, &st, err);
    int limit = pp_ogg_limits_default().max_errors;
    TEST_COND("every other page bad: cut at the error limit",
              rc == PP_EFORMAT && st.errors == limit + 1 && strstr(err, "too many") != NULL);
    packets_free(&few);
    free(d);
}

static void test_writer(void) {
    char err[PP_ERR_LEN];
    pp_ogg_writer w;
    pp_ogg_writer_init(&w, 42);
    static const size_t sizes[] = {19, 255, 600, 0, 65024};
    uint8_t *stream = malloc(5 * PP_OGG_MAX_PAGE), *pkt = malloc(65024);
    size_t slen = 0;
    for (size_t i = 0; i < 5; i++) {
        for (size_t k = 0; k < sizes[i]; k++) pkt[k] = (uint8_t)(k ^ i);
        size_t len;
        int rc = pp_ogg_writer_page(&w, pkt, sizes[i], (int64_t)i * 3840, i == 4, stream + slen,
                                    PP_OGG_MAX_PAGE, &len, err);
        TEST_COND("writer page", rc == 0 && len == 27 + sizes[i] / 255 + 1 + sizes[i]);
        if (i == 1) TEST_COND("255 bytes: lacing 255,0", stream[slen + 26] == 2 &&
                                  stream[slen + 27] == 255 && stream[slen + 28] == 0);
        if (i == 0) TEST_COND("first page BOS, serial 42, seq 0",
                              stream[5] == 2 && stream[14] == 42 && stream[18] == 0);
        slen += len;
    }
    size_t len;
    TEST_COND("writer rejects 65025 bytes",
              pp_ogg_writer_page(&w, pkt, 65025, 0, 0, stream, PP_OGG_MAX_PAGE, &len, err) == PP_EINVAL);
    TEST_COND("writer reports a small buffer",
              pp_ogg_writer_page(&w, pkt, 100, 0, 0, stream, 100, &len, err) == PP_EFULL);
    packets ref = {0}, got = {0};
    libogg_packets(stream, slen, &ref); /* libogg checks our CRCs */
    TEST_COND("libogg accepts our pages", ref.n == 5 && ref.granule[4] == 4 * 3840 && ref.eos[4] && !ref.eos[3]);
    pp_ogg_stats st;
    TEST_COND("our reader accepts our pages",
              read_all(stream, slen, NULL, chunk_one, NULL, &got, &st, err) == 0 && st.errors == 0 &&
                  same_packets(&got, &ref));
    packets_free(&got);
    packets_free(&ref);
    free(stream);
    free(pkt);
}

int main(void) {
    pp_log_set_level(PP_LOG_ERROR); /* the fault tests would otherwise print every warning */
    test_crc();
    test_capture_splits("official-client-uplink.opus", 157, 1);
    test_capture_splits("opusenc-40ms-pages.opus", 122, 0); /* counted by a Python script */

    blob b = read_blob("official-client-uplink.opus");
    if (b.len) {
        packets ref = {0};
        libogg_packets(b.data, b.len, &ref);
        test_crc_corruption(&b, &ref);
        test_missing_bos(&b);
        test_duplicate_bos(&b, &ref);
        test_restart_same_serial(&b, &ref);
        test_garbage_prefix(&b, &ref);
        test_sequence_gap(&b, &ref);
        packets_free(&ref);
        free(b.data);
    }
    test_endless_garbage();
    test_spanning_packets();
    test_scattered_errors();
    test_writer();
    return test_report();
}
