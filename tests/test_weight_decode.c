/* test_weight_decode: the decode of each quantized layout and the quantizers against
 * tests/data/quant/fixtures.safetensors, written by an independent NumPy implementation of
 * docs/formats.md (tests/data/quant/make_fixtures.py); and the loader's refusal of malformed
 * quantized tensors, each with a message naming the tensor. */
#include "base/err.h"
#include "base/log.h"
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
    return pp_st_find(f, key);
}

static float *load_f32(const st_file *f, const char *base, const char *suffix) {
    const st_tensor *t = get(f, base, suffix);
    char err[PP_ERR_LEN];
    float *v = t ? malloc(sizeof(float) * (size_t)t->numel) : NULL;
    if (v && pp_st_load_f32(f, t, 0, t->numel, v, err)) {
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
    pp_quant_nf2_quantize(src, 12, 128, 128, packed, scales);
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
    pp_quant_int4_quantize(src, 32, 32, p4, s4);
    TEST_COND("int4 quantizer bytes", memcmp(p4, pk->data, 512) == 0);
    TEST_COND("int4 quantizer scales", memcmp(s4, sc->data, sizeof s4) == 0);
    free(src);
    /* a zero group: its scale underflows F16 to 0; the codes must be zeros (nibble 8), not the
     * nibble 0 the loader warns about as NF4 data */
    float zero[32] = {0};
    pp_quant_int4_quantize(zero, 1, 32, p4, s4);
    int eights = s4[0] == 0;
    for (int i = 0; i < 16; i++) eights &= p4[i] == 0x88;
    TEST_COND("int4 quantizer: a zero group codes nibble 8", eights);

    const char *nf = "blk.self_attn.in_proj.weight";
    src = load_f32(f, nf, ".source");
    pk = get(f, nf, "");
    uint8_t pn[1024], codes[32];
    float absmax[32], nested[4], map[256], want_map[256];
    pp_quant_nf4_quantize(src, 32, 64, pn, absmax);
    TEST_COND("nf4 quantizer bytes", memcmp(pn, pk->data, 1024) == 0);
    pp_quant_nf4_dynamic_map(map);
    const st_tensor *m = get(f, nf, ".nested_quant_map");
    int mok = 1;
    for (int i = 0; i < 256; i++) {
        want_map[i] = quant_ldf32(m->data, (size_t)i);
        mok &= fabsf(map[i] - want_map[i]) <= 1e-6f * fabsf(want_map[i]);
    }
    TEST_COND("dynamic map", mok);
    pp_quant_nf4_nest(absmax, 32, 8, want_map, codes, nested);
    TEST_COND("nf4 nested codes", memcmp(codes, get(f, nf, ".absmax")->data, 32) == 0);
    free(src);
}

/* ---- malformed files: one tensor [2, 128] per file, with one thing wrong at a time ---- */

typedef struct {
    const char *suffix;
    st_dtype dt;
    int64_t len; /* 1-D length; < 0 leaves the key out */
    const void *data;
} key_spec;

static int write_keys(const char *path, const char *base, const key_spec *k, int n, char *err) {
    st_writer *w;
    char name[128];
    int rc = pp_st_writer_create(path, &w, err);
    for (int i = 0; i < n && !rc; i++) {
        if (k[i].len < 0) continue;
        snprintf(name, sizeof name, "%s%s", base, k[i].suffix);
        rc = pp_st_writer_declare(w, name, k[i].dt, 1, &k[i].len, err);
    }
    if (!rc) rc = pp_st_writer_begin(w, err);
    for (int i = 0; i < n && !rc; i++)
        if (k[i].len >= 0)
            rc = pp_st_writer_write(w, k[i].data, (size_t)(k[i].len * pp_st_dtype_bits(k[i].dt) / 8), err);
    if (rc) {
        pp_st_writer_abort(w);
        return rc;
    }
    return pp_st_writer_finish(w, err);
}

/* Expects pp_weight_load(base, [2, 128]) to fail with a message naming base and containing needle. */
static void expect_refused(const char *path, const char *base, const key_spec *k, int n, const char *needle,
                           const char *what) {
    char err[PP_ERR_LEN] = "";
    st_file *f;
    if (write_keys(path, base, k, n, err) || pp_st_open(path, &f, err)) {
        fprintf(stderr, "%s: cannot build case: %s\n", what, err);
        TEST_COND(what, 0);
        return;
    }
    pp_weight w;
    err[0] = 0;
    int rc = pp_weight_load(f, base, 2, 128, &w, err);
    printf("%-24s -> %s\n", what, rc ? err : "(accepted)");
    TEST_COND(what, rc != PP_OK && strstr(err, needle) && strstr(err, base));
    pp_st_close(f);
}

typedef struct {
    int64_t gs, np2, numel, packed_len, scales_len;
    float scale;
} nf2_case;

static void nf2_refused(const char *path, nf2_case c, const char *needle, const char *what) {
    static uint8_t packed[256];
    uint16_t scales[16];
    int64_t shape[4] = {2, 128, 0, 0};
    memset(packed, 0x1b, sizeof packed); /* codes 3,2,1,0: a plausible spread */
    for (int i = 0; i < 16; i++) scales[i] = pp_f32_to_f16(c.scale);
    key_spec k[] = {{".shape", ST_I64, 4, shape},          {".gs", ST_I64, 1, &c.gs},
                    {".np2", ST_I64, 1, &c.np2},           {".numel", ST_I64, 1, &c.numel},
                    {".scales", ST_F16, c.scales_len, scales}, {".packed", ST_U8, c.packed_len, packed}};
    expect_refused(path, "m.weight", k, 6, needle, what);
}

static void check_malformed(void) {
    char path[] = "/tmp/pp_test_wdecode_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    const nf2_case good = {128, 128, 256, 64, 2, 0.01f};
    nf2_case c = good;
    nf2_refused(path, (c.scales_len = -1, c), ".scales", "nf2 missing .scales");
    c = good, nf2_refused(path, (c.numel = 255, c), "numel", "nf2 wrong .numel");
    c = good, nf2_refused(path, (c.np2 = 96, c), "np2", "nf2 np2 not a power of 2");
    c = good, nf2_refused(path, (c.np2 = 64, c), "np2", "nf2 np2 below group");
    c = good, nf2_refused(path, (c.packed_len = 63, c), "truncated", "nf2 truncated packed");
    c = good, c.gs = 96, nf2_refused(path, (c.np2 = 128, c), "does not divide", "nf2 group vs row");
    c = good, nf2_refused(path, (c.scale = -1.0f, c), "scales", "nf2 negative scale");
    c = good, nf2_refused(path, (c.scale = NAN, c), "scales", "nf2 NaN scale");
    /* the good case loads, and a shape mismatch names both shapes */
    char err[PP_ERR_LEN];
    c = good;
    int64_t shape[4] = {2, 128, 0, 0};
    uint8_t packed[64];
    uint16_t scales[2] = {pp_f32_to_f16(0.01f), pp_f32_to_f16(0.01f)};
    memset(packed, 0x1b, sizeof packed);
    key_spec k[] = {{".shape", ST_I64, 4, shape}, {".gs", ST_I64, 1, &c.gs},         {".np2", ST_I64, 1, &c.np2},
                    {".numel", ST_I64, 1, &c.numel}, {".scales", ST_F16, 2, scales}, {".packed", ST_U8, 64, packed}};
    st_file *f;
    pp_weight w;
    if (write_keys(path, "m.weight", k, 6, err) == 0 && pp_st_open(path, &f, err) == 0) {
        TEST_COND("good case loads", pp_weight_load(f, "m.weight", 2, 128, &w, err) == 0);
        TEST_COND("shape mismatch", pp_weight_load(f, "m.weight", 128, 2, &w, err) == PP_EFORMAT &&
                                        strstr(err, "m.weight") && strstr(err, "[2, 128]"));
        pp_st_close(f);
    }
    /* INT4: 256 elements in groups of 64 need 128 bytes and 4 scales */
    int64_t dims[2] = {2, 128}, numel = 256;
    uint16_t s4[4] = {0x2000, 0x2000, 0x2000, 0x2000};
    uint8_t p4[128];
    memset(p4, 0x99, sizeof p4);
    key_spec i4[] = {{"", ST_U8, 127, p4}, {".__scales__", ST_F16, 4, s4}, {".__shape__", ST_I64, 2, dims},
                     {".__numel__", ST_I64, 1, &numel}};
    expect_refused(path, "q.weight", i4, 4, "truncated", "int4 truncated");
    i4[0].len = 128, i4[3].len = -1;
    expect_refused(path, "q.weight", i4, 4, ".__numel__", "int4 missing .__numel__");
    i4[3].len = 1, i4[1].len = 3;
    expect_refused(path, "q.weight", i4, 4, "do not divide", "int4 scale count");
    /* bitsandbytes: the state blob decides the layout */
    static const char fp4[] = "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"shape\": [2, 128]}";
    static const char nf4[] = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"shape\": [2, 128]}";
    float absmax[4] = {1, 1, 1, 1};
    key_spec b4[] = {{"", ST_U8, 128, p4},
                     {".absmax", ST_F32, 4, absmax},
                     {".quant_map", ST_F32, 16, pp_quant_nf4_table},
                     {".quant_state.bitsandbytes__nf4", ST_U8, (int64_t)strlen(fp4), fp4}};
    expect_refused(path, "b.weight", b4, 4, "fp4", "nf4 quant_type fp4");
    b4[3].data = nf4, b4[3].len = (int64_t)strlen(nf4), b4[1].len = -1;
    expect_refused(path, "b.weight", b4, 4, ".absmax", "nf4 missing .absmax");
    b4[1].len = 4, absmax[2] = INFINITY;
    expect_refused(path, "b.weight", b4, 4, "finite", "nf4 infinite absmax");
    unlink(path);
}

/* Loads BASE (a valid tensor that looks wrong) with the log sent to a file; the load succeeds
 * and the log gets a warning naming the tensor and containing needle. */
static void expect_warning(const char *path, const char *base, const key_spec *k, int n, int64_t rows, int64_t cols,
                           const char *needle, const char *what) {
    char err[PP_ERR_LEN], logpath[] = "/tmp/pp_test_wlog_XXXXXX", line[1024];
    int fd = mkstemp(logpath);
    if (fd < 0) return;
    close(fd);
    st_file *f;
    pp_weight w;
    int loaded = 0, warned = 0;
    if (write_keys(path, base, k, n, err) == 0 && pp_st_open(path, &f, err) == 0) {
        pp_log_open(logpath);
        loaded = pp_weight_load(f, base, rows, cols, &w, err) == PP_OK;
        pp_log_open(NULL);
        pp_st_close(f);
    }
    FILE *lf = fopen(logpath, "r");
    while (lf && fgets(line, sizeof line, lf))
        if (strstr(line, needle) && strstr(line, base)) {
            printf("%-24s -> %s", what, line);
            warned = 1;
        }
    if (lf) fclose(lf);
    unlink(logpath);
    TEST_COND(what, loaded && warned);
}

static void check_warnings(void) {
    char path[] = "/tmp/pp_test_wwarn_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    /* NF2 [8, 512] whose codes are all 0: 4096 codes, none of them 1, 2 or 3 */
    static uint8_t packed[1024];
    uint16_t scales[32];
    int64_t shape[4] = {8, 512, 0, 0}, gs = 128, numel = 4096;
    for (int i = 0; i < 32; i++) scales[i] = pp_f32_to_f16(0.01f);
    key_spec k[] = {{".shape", ST_I64, 4, shape}, {".gs", ST_I64, 1, &gs},        {".np2", ST_I64, 1, &gs},
                    {".numel", ST_I64, 1, &numel}, {".scales", ST_F16, 32, scales}, {".packed", ST_U8, 1024, packed}};
    expect_warning(path, "h.weight", k, 6, 8, 512, "histogram", "nf2 skewed histogram");
    /* INT4 holding nibble 0, which its writer never emits */
    int64_t dims[2] = {2, 128}, n4 = 256;
    uint16_t s4[4] = {0x2000, 0x2000, 0x2000, 0x2000};
    uint8_t p4[128];
    memset(p4, 0x90, sizeof p4);
    key_spec i4[] = {{"", ST_U8, 128, p4}, {".__scales__", ST_F16, 4, s4}, {".__shape__", ST_I64, 2, dims},
                     {".__numel__", ST_I64, 1, &n4}};
    expect_warning(path, "z.weight", i4, 4, 2, 128, "nibble 0", "int4 nibble 0");
    unlink(path);
}

int main(void) {
    char err[PP_ERR_LEN];
    st_file *f;
    if (pp_st_open(FIXTURES, &f, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    check_decode(f, "nf2a.weight", "nf2a.weight", 6, 256, PP_WF_NF2);
    check_decode(f, "nf2b.weight", "nf2b.weight", 4, 192, PP_WF_NF2);
    check_decode(f, "int4.weight", "int4.weight", 8, 128, PP_WF_INT4);
    check_decode(f, "blk.self_attn.in_proj.weight", "blk.self_attn.in_proj_weight", 8, 256, PP_WF_NF4);
    check_decode(f, "nf4f.weight", "nf4f.weight", 4, 128, PP_WF_NF4);
    check_quantizers(f);
    pp_st_close(f);
    check_malformed();
    check_warnings();
    return test_report();
}
