/* test_weight_decode: the decode of each quantized layout and the quantizers against
 * tests/data/quant/fixtures.safetensors, written by an independent NumPy implementation of
 * spec/formats.md (tests/data/quant/make_fixtures.py); and the loader's refusal of malformed
 * quantized tensors, each with a message naming the tensor. */
#include "base/err.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURES PP_TEST_DATA "/quant/fixtures.safetensors"

static const st_tensor *get(const st_file *f, const char *base, const char *suffix) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", base, suffix);
    return st_find(f, key);
}

static float *load_f32(const st_file *f, const char *base, const char *suffix) {
    const st_tensor *t = get(f, base, suffix);
    char err[PP_ERR_LEN];
    float *v = t ? malloc(sizeof(float) * (size_t)t->numel) : NULL;
    if (v && st_load_f32(f, t, 0, t->numel, v, err)) {
        free(v);
        v = NULL;
    }
    return v;
}

/* Loads NAME as REQUEST (possibly the other in_proj spelling) and compares its decode with
 * NAME.expect. The NumPy decode runs in float64 and the C one in float32 (a 128-point
 * transform sums 128 terms): 1e-5 of the row's largest value is far above f32 rounding and
 * far below any wrong code, sign or scale (errors of order 1). */
static void check_decode(const st_file *f, const char *name, const char *request, int64_t R, int64_t C,
                         pp_wformat fmt) {
    char err[PP_ERR_LEN];
    pp_weight w;
    int rc = pp_weight_load(f, request, R, C, &w, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND(name, rc == PP_OK && w.fmt == fmt);
    if (rc) return;
    float *dec = malloc(sizeof(float) * R * C), *expect = load_f32(f, name, ".expect");
    TEST_COND(name, pp_weight_decode_rows(&w, 0, R, dec, err) == PP_OK && expect);
    double worst = 0;
    for (int64_t r = 0; r < R && expect; r++) {
        double e = test_rel_err(dec + r * C, expect + r * C, (size_t)C);
        if (e > worst) worst = e;
    }
    printf("%-32s %-5s decode vs NumPy: max rel err %.2e\n", name, pp_wformat_name(fmt), worst);
    TEST_COND(name, expect && worst < 1e-5);
    free(dec);
    free(expect);
}

/* The C quantizers reproduce the NumPy writer's bytes. NF2 codes may differ where a rotated
 * value sits within float rounding of a threshold (NumPy rotates in float64); allow 1%. */
static void check_quantizers(const st_file *f) {
    float *src = load_f32(f, "nf2a.weight", ".source");
    const st_tensor *pk = get(f, "nf2a.weight", ".packed"), *sc = get(f, "nf2a.weight", ".scales");
    uint8_t packed[384];
    uint16_t scales[12];
    quant_nf2_quantize(src, 12, 128, 128, packed, scales);
    int same = 0, sok = 1;
    for (int i = 0; i < 384; i++)
        for (int k = 0; k < 4; k++) same += ((packed[i] >> 2 * k) & 3) == ((pk->data[i] >> 2 * k) & 3);
    for (int g = 0; g < 12; g++) sok &= abs((int)scales[g] - (int)quant_ld16(sc->data, (size_t)g)) <= 1;
    printf("nf2 quantizer: %d of 1536 codes as NumPy\n", same);
    TEST_COND("nf2 quantizer codes", same >= 1536 * 99 / 100);
    TEST_COND("nf2 quantizer scales", sok);
    free(src);

    src = load_f32(f, "int4.weight", ".source");
    pk = get(f, "int4.weight", "");
    sc = get(f, "int4.weight", ".__scales__");
    uint8_t p4[512];
    uint16_t s4[32];
    quant_int4_quantize(src, 32, 32, p4, s4);
    TEST_COND("int4 quantizer bytes", memcmp(p4, pk->data, 512) == 0);
    TEST_COND("int4 quantizer scales", memcmp(s4, sc->data, sizeof s4) == 0);
    free(src);

    const char *nf = "blk.self_attn.in_proj.weight";
    src = load_f32(f, nf, ".source");
    pk = get(f, nf, "");
    uint8_t pn[1024], codes[32];
    float absmax[32], nested[4], map[256], want_map[256];
    quant_nf4_quantize(src, 32, 64, pn, absmax);
    TEST_COND("nf4 quantizer bytes", memcmp(pn, pk->data, 1024) == 0);
    quant_nf4_dynamic_map(map);
    const st_tensor *m = get(f, nf, ".nested_quant_map");
    int mok = 1;
    for (int i = 0; i < 256; i++) {
        want_map[i] = quant_ldf32(m->data, (size_t)i);
        mok &= fabsf(map[i] - want_map[i]) <= 1e-6f * fabsf(want_map[i]);
    }
    TEST_COND("dynamic map", mok);
    quant_nf4_nest(absmax, 32, 8, want_map, codes, nested);
    TEST_COND("nf4 nested codes", memcmp(codes, get(f, nf, ".absmax")->data, 32) == 0);
    free(src);
}

/* ---- malformed files: one NF2 tensor [2, 128] with one thing wrong at a time ---- */

typedef struct {
    int64_t gs, np2, numel, packed_len, scales_len;
    float scale;
    int drop_scales;
} nf2_case;

static int write_nf2(const char *path, const nf2_case *c, char *err) {
    st_writer *w;
    int64_t one = 1, four = 4, shape_v[4] = {2, 128, 0, 0};
    int64_t gs = c->gs, np2 = c->np2, numel = c->numel;
    uint8_t packed[256];
    uint16_t scales[16];
    memset(packed, 0x1b, sizeof packed); /* codes 3,2,1,0: a plausible spread */
    for (int i = 0; i < 16; i++) scales[i] = pp_f32_to_f16(c->scale);
    int rc = st_writer_create(path, &w, err);
    if (rc) return rc;
    if ((rc = st_writer_declare(w, "m.weight.shape", ST_I64, 1, &four, err)) ||
        (rc = st_writer_declare(w, "m.weight.gs", ST_I64, 1, &one, err)) ||
        (rc = st_writer_declare(w, "m.weight.np2", ST_I64, 1, &one, err)) ||
        (rc = st_writer_declare(w, "m.weight.numel", ST_I64, 1, &one, err)) ||
        (!c->drop_scales && (rc = st_writer_declare(w, "m.weight.scales", ST_F16, 1, &c->scales_len, err))) ||
        (rc = st_writer_declare(w, "m.weight.packed", ST_U8, 1, &c->packed_len, err)) ||
        (rc = st_writer_begin(w, err)) || (rc = st_writer_write(w, shape_v, sizeof shape_v, err)) ||
        (rc = st_writer_write(w, &gs, 8, err)) || (rc = st_writer_write(w, &np2, 8, err)) ||
        (rc = st_writer_write(w, &numel, 8, err)) ||
        (!c->drop_scales && (rc = st_writer_write(w, scales, (size_t)c->scales_len * 2, err))) ||
        (rc = st_writer_write(w, packed, (size_t)c->packed_len, err))) {
        st_writer_abort(w);
        return rc;
    }
    return st_writer_finish(w, err);
}

/* Expects pp_weight_load to fail with a message containing `needle`. */
static void expect_refused(const char *path, const nf2_case *c, const char *needle, const char *what) {
    char err[PP_ERR_LEN] = "";
    st_file *f;
    if (write_nf2(path, c, err) || st_open(path, &f, err)) {
        fprintf(stderr, "%s: cannot build case: %s\n", what, err);
        TEST_COND(what, 0);
        return;
    }
    pp_weight w;
    err[0] = 0;
    int rc = pp_weight_load(f, "m.weight", 2, 128, &w, err);
    printf("%-22s -> %s\n", what, rc ? err : "(accepted)");
    TEST_COND(what, rc != PP_OK && strstr(err, needle) && strstr(err, "m.weight"));
    st_close(f);
}

static void check_malformed(void) {
    char path[] = "/tmp/pp_test_wdecode_XXXXXX", err[PP_ERR_LEN];
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    const nf2_case good = {128, 128, 256, 64, 2, 0.01f, 0};
    nf2_case c = good;
    st_file *f;
    pp_weight w;
    TEST_COND("good case loads", write_nf2(path, &c, err) == 0 && st_open(path, &f, err) == 0 &&
                                     pp_weight_load(f, "m.weight", 2, 128, &w, err) == 0);
    st_close(f);
    c = good, c.drop_scales = 1;
    expect_refused(path, &c, ".scales", "missing .scales");
    c = good, c.numel = 255;
    expect_refused(path, &c, "numel", "wrong .numel");
    c = good, c.np2 = 96;
    expect_refused(path, &c, "np2", "np2 not a power of 2");
    c = good, c.np2 = 64;
    expect_refused(path, &c, "np2", "np2 below group");
    c = good, c.packed_len = 63;
    expect_refused(path, &c, "truncated", "truncated packed");
    c = good, c.gs = 96, c.np2 = 128;
    expect_refused(path, &c, "does not divide", "group vs row length");
    c = good, c.scale = -1.0f;
    expect_refused(path, &c, "scales", "negative scale");
    c = good, c.scale = NAN;
    expect_refused(path, &c, "scales", "NaN scale");
    c = good;
    if (write_nf2(path, &c, err) == 0 && st_open(path, &f, err) == 0) {
        TEST_COND("shape mismatch", pp_weight_load(f, "m.weight", 128, 2, &w, err) == PP_EFORMAT &&
                                        strstr(err, "m.weight") && strstr(err, "[2, 128]"));
        st_close(f);
    }
    unlink(path);
}

int main(void) {
    char err[PP_ERR_LEN];
    st_file *f;
    if (st_open(FIXTURES, &f, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    check_decode(f, "nf2a.weight", "nf2a.weight", 6, 256, PP_WF_NF2);
    check_decode(f, "nf2b.weight", "nf2b.weight", 4, 192, PP_WF_NF2);
    check_decode(f, "int4.weight", "int4.weight", 8, 128, PP_WF_INT4);
    check_decode(f, "blk.self_attn.in_proj.weight", "blk.self_attn.in_proj_weight", 8, 256, PP_WF_NF4);
    check_decode(f, "nf4f.weight", "nf4f.weight", 4, 128, PP_WF_NF4);
    check_quantizers(f);
    st_close(f);
    check_malformed();
    return test_report();
}
