/* test_safetensors: the container reader and writer. A written file reads back exactly;
 * every golden checkpoint opens; each malformation docs/formats.md §1 forbids is refused
 * with a one-line message; the fp16/bf16 conversions round to nearest even. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* Builds [u64 N][header][data_len bytes of 0..] in buf; returns the total size. */
static size_t build(uint8_t *buf, const char *header, size_t data_len) {
    uint64_t n = strlen(header);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++) buf[8 + n + i] = (uint8_t)i;
    return 8 + n + data_len;
}

static uint8_t scratch[1 << 16];

/* The buffer must be refused, and the message must contain `needle`. */
static void check_bad_buf(const uint8_t *buf, size_t len, const char *needle, const char *why) {
    st_file *f = NULL;
    char err[PP_ERR_LEN] = "";
    int rc = pp_st_open_memory(buf, len, "bad.safetensors", &f, err);
    int ok = rc < 0 && !f && strstr(err, "bad.safetensors") && strstr(err, needle) && !strchr(err, '\n');
    if (!ok) fprintf(stderr, "  %s: rc=%d err='%s' (wanted '%s')\n", why, rc, err, needle);
    TEST_COND(why, ok);
    pp_st_close(f);
}

static void check_bad(const char *header, size_t data_len, const char *needle, const char *why) {
    check_bad_buf(scratch, build(scratch, header, data_len), needle, why);
}

/* ---- malformed files ---------------------------------------------------------------------- */

static void test_malformed(void) {
    uint8_t b[16] = {0};
    check_bad_buf(b, 5, "too short", "truncated header length");
    uint64_t big = 100000001;
    memcpy(b, &big, 8);
    check_bad_buf(b, 16, "exceeds", "N above 100,000,000");
    uint64_t past = 9;
    memcpy(b, &past, 8);
    memcpy(b + 8, "{}      ", 8);
    check_bad_buf(b, 16, "past the end", "N beyond the file");

    const char *t1 = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char h[512];
    check_bad("{\"t\":", 0, "json", "non-JSON header");
    check_bad(" {}", 0, "start with '{'", "header not starting with '{'");
    check_bad("[]", 0, "start with '{'", "array header");
    check_bad("{\"t\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype",
              "dtype spelling is exact");
    check_bad("{\"t\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'t'", "unknown dtype");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, "shape", "bad shape type");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "shape[0]", "fractional dim");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]", "negative dim");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "exactly",
              "extra entry field");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "exactly", "missing data_offsets");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets", "one offset");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", 8, "data_offsets",
              "negative offset");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12",
              "wrong size for dtype");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflow",
              "numel overflow");
    check_bad("{\"t\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "whole number of bytes",
              "F4 with an odd count");
    snprintf(h, sizeof(h), "{%s,\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", t1);
    check_bad(h, 16, "hole", "offsets with a hole");
    snprintf(h, sizeof(h), "{%s,\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", t1);
    check_bad(h, 8, "overlaps", "overlapping tensors");
    snprintf(h, sizeof(h), "{\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}");
    check_bad(h, 8, "'u' starts at 4", "first tensor not at 0");
    snprintf(h, sizeof(h), "{%s}", t1);
    check_bad(h, 12, "cover 8 of the 12", "buffer not covered");
    check_bad(h, 7, "past the 7-byte", "truncated data");
    snprintf(h, sizeof(h), "{%s,%s}", t1, t1);
    check_bad(h, 8, "duplicate tensor 't'", "duplicate key");
    snprintf(h, sizeof(h), "{\"__metadata__\":{\"a\":1},%s}", t1);
    check_bad(h, 8, "__metadata__ value of 'a'", "metadata with a non-string value");
    snprintf(h, sizeof(h), "{\"__metadata__\":[\"a\"],%s}", t1);
    check_bad(h, 8, "__metadata__", "metadata not an object");
    check_bad("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions",
              "more dimensions than supported");
}

/* ---- accepted edge cases ------------------------------------------------------------------ */

static void test_edge_cases(void) {
    char err[PP_ERR_LEN];
    st_file *f = NULL;
    /* scalar, empty tensor sharing an offset, metadata, unaligned F32, space padding */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[1,1]},"
                    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[1,5]}}   ";
    size_t len = build(scratch, h, 5);
    float one = 1.5f;
    memcpy(scratch + len - 4, &one, 4);
    int rc = pp_st_open_memory(scratch, len, "edge", &f, err);
    TEST_COND("edge-case file opens", rc == 0);
    if (rc) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    TEST_COND("three tensors, metadata skipped", pp_st_count(f) == 3);
    TEST_COND("metadata value", pp_st_metadata(f, "format") && !strcmp(pp_st_metadata(f, "format"), "pt"));
    TEST_COND("missing metadata", pp_st_metadata(f, "nope") == NULL);
    const st_tensor *s = pp_st_find(f, "s"), *e = pp_st_find(f, "e");
    TEST_COND("scalar numel 1", s && s->ndim == 0 && s->numel == 1 && s->nbytes == 4);
    TEST_COND("empty tensor", e && e->numel == 0 && e->nbytes == 0 && e->ndim == 2);
    float v = 0;
    TEST_COND("unaligned F32 load", pp_st_load_f32(f, s, 0, 1, &v, err) == 0 && v == 1.5f);
    TEST_COND("load past the end refused", pp_st_load_f32(f, s, 0, 2, &v, err) == PP_EINVAL && strstr(err, "'s'"));
    int64_t iv;
    TEST_COND("U8 as int", pp_st_load_i64(f, pp_st_find(f, "b"), 0, 1, &iv, err) == 0 && iv == 0);
    TEST_COND("F32 as int refused", pp_st_load_i64(f, s, 0, 1, &iv, err) == PP_EUNSUPPORTED && strstr(err, "'s'"));
    TEST_COND("U8 as float refused", pp_st_load_f32(f, pp_st_find(f, "b"), 0, 1, &v, err) == PP_EUNSUPPORTED);
    TEST_COND("header order kept", !strcmp(pp_st_at(f, 0)->name, "b") && pp_st_at(f, 3) == NULL);
    const st_tensor *t;
    int64_t want[2] = {0, 5}, wrong[2] = {5, 0};
    TEST_COND("pp_st_expect ok", pp_st_expect(f, "e", 2, want, &t, err) == 0 && t == e);
    rc = pp_st_expect(f, "e", 2, wrong, &t, err);
    TEST_COND("pp_st_expect names both shapes", rc == PP_EFORMAT && !t && strstr(err, "edge") && strstr(err, "'e'") &&
                                                    strstr(err, "[0, 5]") && strstr(err, "[5, 0]"));
    TEST_COND("pp_st_expect missing", pp_st_expect(f, "zz", 0, NULL, &t, err) == PP_ENOTFOUND && strstr(err, "'zz'"));
    pp_st_close(f);

    build(scratch, "{}      ", 0);
    rc = pp_st_open_memory(scratch, 16, "empty", &f, err);
    TEST_COND("empty header is a valid file", rc == 0 && pp_st_count(f) == 0 && pp_st_find(f, "x") == NULL);
    pp_st_close(f);
}

/* ---- writer round trip -------------------------------------------------------------------- */

static void test_round_trip(void) {
    char path[] = "/tmp/pp_test_st_XXXXXX", err[PP_ERR_LEN];
    int fd = mkstemp(path);
    TEST_COND("temp file", fd >= 0);
    if (fd < 0) return;
    close(fd);
    st_writer *w;
    float a[6] = {1, -2, 3.25f, 0, -0.0f, 1e-3f};
    uint16_t hb[3] = {pp_f32_to_bf16(1.0f), pp_f32_to_bf16(-3.5f), pp_f32_to_bf16(65504.0f)};
    int32_t iv[2] = {-7, 2000000000};
    int64_t sa[2] = {2, 3}, sh[1] = {3}, si[1] = {2};
    int rc = pp_st_writer_create(path, &w, err);
    rc = rc ? rc : pp_st_writer_declare(w, "layer.a", ST_F32, 2, sa, err);
    rc = rc ? rc : pp_st_writer_declare(w, "b \"quoted\"\n", ST_BF16, 1, sh, err);
    rc = rc ? rc : pp_st_writer_declare(w, "ints", ST_I32, 1, si, err);
    TEST_COND("duplicate declare refused", rc || pp_st_writer_declare(w, "ints", ST_I32, 1, si, err) == PP_EINVAL);
    rc = rc ? rc : pp_st_writer_metadata(w, "format", "pt", err);
    rc = rc ? rc : pp_st_writer_begin(w, err);
    rc = rc ? rc : pp_st_writer_write(w, a, 8, err); /* one tensor in two calls */
    rc = rc ? rc : pp_st_writer_write(w, (const char *)a + 8, sizeof(a) - 8, err);
    rc = rc ? rc : pp_st_writer_write(w, hb, sizeof(hb), err);
    rc = rc ? rc : pp_st_writer_write(w, iv, sizeof(iv), err);
    TEST_COND("overlong write refused", rc || pp_st_writer_write(w, iv, 1, err) == PP_EINVAL);
    rc = rc ? rc : pp_st_writer_finish(w, err);
    TEST_COND("writer succeeds", rc == 0);
    if (rc) fprintf(stderr, "  %s\n", err);

    st_file *f = NULL;
    rc = pp_st_open(path, &f, err);
    TEST_COND("written file opens", rc == 0);
    if (!rc) {
        const st_tensor *ta = pp_st_find(f, "layer.a"), *tb = pp_st_find(f, "b \"quoted\"\n"),
                        *ti = pp_st_find(f, "ints");
        float ra[6], rb[3];
        int64_t ri[2];
        TEST_COND("names, dtypes, shapes", ta && tb && ti && ta->dtype == ST_F32 && ta->ndim == 2 &&
                                               ta->shape[1] == 3 && tb->dtype == ST_BF16 && ti->numel == 2);
        TEST_COND("data 8-byte aligned", ta && ((uintptr_t)ta->data & 7) == 0);
        TEST_COND("f32 round trip", ta && pp_st_load_f32(f, ta, 0, 6, ra, err) == 0 && !memcmp(ra, a, sizeof(a)));
        TEST_COND("bf16 round trip", tb && pp_st_load_f32(f, tb, 0, 3, rb, err) == 0 && rb[0] == 1.0f &&
                                         rb[1] == -3.5f && rb[2] == 65536.0f);
        TEST_COND("partial load", ta && pp_st_load_f32(f, ta, 4, 2, ra, err) == 0 && ra[1] == 1e-3f);
        TEST_COND("i32 round trip",
                  ti && pp_st_load_i64(f, ti, 0, 2, ri, err) == 0 && ri[0] == -7 && ri[1] == 2000000000);
        TEST_COND("metadata round trip", pp_st_metadata(f, "format") && !strcmp(pp_st_metadata(f, "format"), "pt"));
    }
    pp_st_close(f);

    /* A rewrite of the file, open meanwhile (personaplex-quantize IN IN): the complete file
     * stays until the new one is; a short one is refused at finish, an aborted one dropped,
     * neither leaving its '.tmp'; a finished one replaces it and the old mapping still reads. */
    char tmp[sizeof path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    st_file *old = NULL, *now = NULL;
    rc = pp_st_open(path, &old, err);
    rc = rc ? rc : pp_st_writer_create(path, &w, err);
    rc = rc ? rc : pp_st_writer_declare(w, "x", ST_F32, 1, sh, err);
    rc = rc ? rc : pp_st_writer_begin(w, err);
    rc = rc ? rc : pp_st_writer_write(w, a, 4, err);
    int whole = rc == 0 && pp_st_open(path, &now, err) == 0 && pp_st_find(now, "layer.a");
    pp_st_close(now);
    TEST_COND("the file is whole while a rewrite runs", whole);
    TEST_COND("short file refused at finish", rc == 0 && pp_st_writer_finish(w, err) == PP_EINVAL);
    TEST_COND("... its .tmp removed, the file kept",
              access(tmp, F_OK) != 0 && pp_st_open(path, &now, err) == 0 && pp_st_find(now, "ints"));
    pp_st_close(now);
    rc = pp_st_writer_create(path, &w, err);
    if (!rc) pp_st_writer_abort(w);
    TEST_COND("abort removes the .tmp, keeps the file", rc == 0 && access(tmp, F_OK) != 0 && access(path, F_OK) == 0);
    rc = pp_st_writer_create(path, &w, err);
    rc = rc ? rc : pp_st_writer_declare(w, "x", ST_F32, 1, sh, err);
    rc = rc ? rc : pp_st_writer_begin(w, err);
    rc = rc ? rc : pp_st_writer_write(w, a, sizeof(float) * 3, err);
    rc = rc ? rc : pp_st_writer_finish(w, err);
    TEST_COND("a finished rewrite replaces the file",
              rc == 0 && pp_st_open(path, &now, err) == 0 && pp_st_find(now, "x") && !pp_st_find(now, "layer.a"));
    pp_st_close(now);
    float ra[6];
    const st_tensor *ta = whole && rc == 0 ? pp_st_find(old, "layer.a") : NULL; /* not read from a truncated map */
    TEST_COND("the reader of the old file still reads it",
              ta && pp_st_load_f32(old, ta, 0, 6, ra, err) == 0 && !memcmp(ra, a, sizeof(a)));
    pp_st_close(old);
    remove(path);
    TEST_COND("missing file is an I/O error", pp_st_open(path, &f, err) == PP_EIO && strstr(err, path));
}

/* ---- golden checkpoints ------------------------------------------------------------------- */

static void test_golden(void) {
    static const char *cases[] = {"lm-bf16", "lm-int4", "lm-nf2", "lm-nf4", "mimi-speech", "mimi-synth"};
    static const char *files[] = {"model.safetensors", "golden.safetensors"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t j = 0; j < 2; j++) {
            char path[512], err[PP_ERR_LEN];
            snprintf(path, sizeof(path), "%s/golden/%s/%s", PP_TEST_DATA, cases[i], files[j]);
            st_file *f = NULL;
            int rc = pp_st_open(path, &f, err);
            if (rc) fprintf(stderr, "  %s\n", err);
            TEST_COND("golden file opens", rc == 0 && pp_st_count(f) > 0);
            for (size_t k = 0; f && k < pp_st_count(f); k++) {
                const st_tensor *t = pp_st_at(f, k);
                TEST_COND("pp_st_find agrees with pp_st_at", pp_st_find(f, t->name) == t);
            }
            pp_st_close(f);
        }
    }
}

/* ---- fp16 / bf16 -------------------------------------------------------------------------- */

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_half(void) {
    TEST_COND("f16 1.0", pp_f32_to_f16(1.0f) == 0x3C00 && pp_f16_to_f32(0x3C00) == 1.0f);
    TEST_COND("f16 -2.0", pp_f32_to_f16(-2.0f) == 0xC000);
    TEST_COND("f16 max", pp_f32_to_f16(65504.0f) == 0x7BFF && pp_f16_to_f32(0x7BFF) == 65504.0f);
    TEST_COND("f16 65519 rounds down to max", pp_f32_to_f16(65519.0f) == 0x7BFF);
    TEST_COND("f16 65520 ties to infinity", pp_f32_to_f16(65520.0f) == 0x7C00);
    TEST_COND("f16 inf", pp_f32_to_f16(INFINITY) == 0x7C00 && pp_f32_to_f16(-INFINITY) == 0xFC00);
    TEST_COND("f16 inf decode", isinf(pp_f16_to_f32(0x7C00)) && pp_f16_to_f32(0xFC00) < 0);
    uint16_t hn = pp_f32_to_f16(NAN);
    TEST_COND("f16 NaN stays NaN", (hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0 && isnan(pp_f16_to_f32(hn)));
    TEST_COND("f16 NaN payload low bits only", (pp_f32_to_f16(from_bits(0x7F800001)) & 0x3FF) != 0);
    TEST_COND("f16 -0", pp_f32_to_f16(-0.0f) == 0x8000 && signbit(pp_f16_to_f32(0x8000)));
    TEST_COND("f16 smallest subnormal", pp_f32_to_f16(0x1p-24f) == 0x0001 && pp_f16_to_f32(0x0001) == 0x1p-24f);
    TEST_COND("f16 2^-25 ties to zero", pp_f32_to_f16(0x1p-25f) == 0x0000);
    TEST_COND("f16 just above 2^-25 rounds up", pp_f32_to_f16(from_bits(0x33000001)) == 0x0001);
    TEST_COND("f16 1.5*2^-24 ties to even (2)", pp_f32_to_f16(1.5f * 0x1p-24f) == 0x0002);
    TEST_COND("f16 largest subnormal", pp_f16_to_f32(0x03FF) == 1023 * 0x1p-24f &&
                                           pp_f32_to_f16(1023 * 0x1p-24f) == 0x03FF);
    TEST_COND("f16 subnormal carries to normal", pp_f32_to_f16(1023.5f * 0x1p-24f) == 0x0400);
    TEST_COND("f16 smallest normal", pp_f32_to_f16(0x1p-14f) == 0x0400 && pp_f16_to_f32(0x0400) == 0x1p-14f);
    TEST_COND("f16 1+2^-11 ties to even (1)", pp_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00);
    TEST_COND("f16 1+3*2^-11 ties to even (up)", pp_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02);
    TEST_COND("f16 above tie rounds up", pp_f32_to_f16(from_bits(0x3F801001)) == 0x3C01);
    TEST_COND("f16 tiny to zero", pp_f32_to_f16(1e-10f) == 0 && pp_f32_to_f16(-1e-10f) == 0x8000);
    /* every finite half survives half -> float -> half */
    int all = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        if (pp_f32_to_f16(pp_f16_to_f32((uint16_t)h)) != h) all = 0;
    }
    TEST_COND("f16 exhaustive round trip", all);

    TEST_COND("bf16 1.0", pp_f32_to_bf16(1.0f) == 0x3F80 && pp_bf16_to_f32(0x3F80) == 1.0f);
    TEST_COND("bf16 tie to even (down)", pp_f32_to_bf16(from_bits(0x3F808000)) == 0x3F80);
    TEST_COND("bf16 tie to even (up)", pp_f32_to_bf16(from_bits(0x3F818000)) == 0x3F82);
    TEST_COND("bf16 above tie", pp_f32_to_bf16(from_bits(0x3F808001)) == 0x3F81);
    TEST_COND("bf16 overflow to inf", pp_f32_to_bf16(from_bits(0x7F7FFFFF)) == 0x7F80);
    TEST_COND("bf16 inf", pp_f32_to_bf16(-INFINITY) == 0xFF80);
    uint16_t bn = pp_f32_to_bf16(from_bits(0x7F800001));
    TEST_COND("bf16 NaN with low payload stays NaN", (bn & 0x7F80) == 0x7F80 && (bn & 0x7F) != 0);
    TEST_COND("bf16 subnormal kept", pp_bf16_to_f32(pp_f32_to_bf16(0x1p-130f)) == 0x1p-130f);
    TEST_COND("bf16 -0", pp_f32_to_bf16(-0.0f) == 0x8000);
}

/* A folder that is not an ONNX bundle (a download folder given for its checkpoint) is named as one,
 * not reported as missing. */
static void test_folder(void) {
    char dir[] = "/tmp/test_safetensors_XXXXXX";
    st_file *f = NULL;
    char err[PP_ERR_LEN] = "";
    if (!mkdtemp(dir)) {
        TEST_COND("temporary folder", 0);
        return;
    }
    int rc = pp_st_open(dir, &f, err);
    printf("folder -> %s\n", err);
    TEST_COND("a folder is refused as a folder, not as a missing file",
              rc != 0 && !f && strstr(err, dir) && strstr(err, "a folder") && !strstr(err, "no such file"));
    rmdir(dir);
}

/* A checkpoint cut short in place while mapped (what `cp new model.safetensors` does first): the
 * next read of a page past its new end is SIGBUS. With pp_file_explain_sigbus the process still
 * dies of it, but says which file and what to do. Run in a child, whose stderr is kept. */
static void test_truncated_while_mapped(void) {
    char dir[] = "/tmp/test_safetensors_XXXXXX", path[128], said[1024] = "";
    int fds[2];
    if (!mkdtemp(dir) || pipe(fds)) {
        TEST_COND("temporary folder and pipe", 0);
        return;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char header[128];
    snprintf(header, sizeof header, "{\"w\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[0,%d]}}",
             (int)sizeof scratch - 128, (int)sizeof scratch - 128);
    size_t len = build(scratch, header, sizeof scratch - 128);
    FILE *out = fopen(path, "wb");
    int written = out && fwrite(scratch, 1, len, out) == len;
    if (out) fclose(out);
    pid_t pid = written ? fork() : -1;
    if (pid == 0) {
        char err[PP_ERR_LEN];
        st_file *f = NULL;
        dup2(fds[1], STDERR_FILENO);
        pp_file_explain_sigbus();
        if (pp_st_open(path, &f, err) || truncate(path, 100)) _exit(3);
        const volatile uint8_t *last = pp_st_find(f, "w")->data + (sizeof scratch - 129);
        _exit(*last == 42 ? 4 : 5); /* not reached: the page is gone */
    }
    close(fds[1]);
    size_t got = 0;
    for (ssize_t k; got + 1 < sizeof said && (k = read(fds[0], said + got, sizeof said - 1 - got)) > 0;)
        got += (size_t)k;
    said[got] = 0;
    close(fds[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    printf("truncated while mapped -> %s", said);
    char offset[64];
    snprintf(offset, sizeof offset, "at byte %zu:", len - 1); /* the file's last byte, read */
    TEST_COND("a checkpoint truncated while mapped still ends the process with SIGBUS",
              pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
    TEST_COND("... after a line naming the file and the offset, and saying to replace files by renaming",
              strstr(said, path) && strstr(said, offset) && strstr(said, "rewritten in place") &&
                  strstr(said, "mv "));
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_folder();
    test_truncated_while_mapped();
    test_malformed();
    test_edge_cases();
    test_round_trip();
    test_golden();
    test_half();
    return test_report();
}
