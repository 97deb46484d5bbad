/* test_quantize: pp_quantize_file round trip on the golden BF16 LM. Each quantized tensor
 * reloads through pp_weight_load in the expected format, and its decode has a cosine to the
 * source of at least 0.93 (NF2: 2 bits, the spec's ~0.94 on Gaussian groups), 0.99 (INT4,
 * NF4) or 0.9999 (INT8); tensors the format leaves alone come through byte for byte.
 * pp_qtensor_random_nf2 (the released-size demo's matrices): its codes come at the frequencies
 * a Gaussian's quantization gives and its decode has the asked RMS, the same bytes per seed. */
#include "base/err.h"
#include "io/file.h"
#include "io/quant.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "model/lm.h"
#include "model/lm_export.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SRC PP_TEST_DATA "/golden/lm-bf16/model.safetensors"

typedef struct {
    int count;
    double worst;
} seen;

static void on_report(void *user, const char *name, int64_t rows, int64_t cols, double cosine) {
    seen *s = user;
    (void)name, (void)rows, (void)cols;
    if (s->count++ == 0 || cosine < s->worst) s->worst = cosine;
}

static void round_trip(pp_wformat fmt, int group, double min_cos, int want_quantized) {
    char err[PP_ERR_LEN], path[] = "/tmp/pp_test_quantize_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    seen s = {0};
    pp_quantize_opts o = {.fmt = fmt, .group = group, .report = on_report, .user = &s};
    int rc = pp_quantize_file(SRC, path, &o, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("quantize", rc == PP_OK);
    st_file *src, *out;
    if (rc || pp_st_open(SRC, &src, err) || pp_st_open(path, &out, err)) {
        unlink(path);
        return;
    }
    int quantized = 0, copied = 0, bad = 0;
    double worst = 1;
    for (size_t i = 0; i < pp_st_count(src); i++) {
        const st_tensor *t = pp_st_at(src, i);
        if (!pp_quantize_selects(fmt, t->name, t->ndim)) {
            const st_tensor *c = pp_st_find(out, t->name);
            copied += c && c->dtype == t->dtype && c->nbytes == t->nbytes && memcmp(c->data, t->data, t->nbytes) == 0;
            continue;
        }
        pp_weight w;
        if (pp_weight_load(out, t->name, t->shape[0], t->shape[1], &w, err) || w.fmt != fmt) {
            fprintf(stderr, "%s\n", err);
            bad++;
            continue;
        }
        float *a = malloc(sizeof(float) * t->numel), *b = malloc(sizeof(float) * t->numel);
        pp_st_load_f32(src, t, 0, t->numel, a, err);
        pp_weight_decode_rows(&w, 0, w.rows, b, err);
        double ab = 0, aa = 0, bb = 0;
        for (int64_t k = 0; k < t->numel; k++) ab += (double)a[k] * b[k], aa += (double)a[k] * a[k], bb += (double)b[k] * b[k];
        double cs = ab / sqrt(aa * bb);
        if (cs < worst) worst = cs;
        quantized++;
        free(a);
        free(b);
    }
    printf("%s: %d quantized (worst cos %.5f; tool reported %.5f), %d copied\n", pp_wformat_name(fmt), quantized,
           worst, s.worst, copied);
    TEST_COND("all reload", bad == 0 && quantized == want_quantized && s.count == quantized);
    TEST_COND("copied through", copied == (int)pp_st_count(src) - quantized);
    TEST_COND("cosine", worst >= min_cos);
    /* the tool's streamed cosine is the same quantity (float sums in another order) */
    TEST_COND("reported cosine", fabs(worst - s.worst) < 1e-4);
    pp_st_close(src);
    pp_st_close(out);
    unlink(path);
}

/* --format bf16 on a checkpoint of each layout: every catalogued tensor of the output is the
 * BF16 rounding of the source's decode, exactly, under the release's names. */
typedef struct exported {
    const st_file *src, *out;
    int tensors, differ;
} exported;

static int compare_export(void *ctx, const pp_lm_tensor *t) {
    exported *x = ctx;
    char err[PP_ERR_LEN];
    int64_t n = t->rows * t->cols;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    const st_tensor *o = pp_st_find(x->out, t->name);
    int ok = o && o->dtype == ST_BF16 && o->numel == n && pp_st_load_f32(x->out, o, 0, n, b, err) == 0;
    if (ok && t->ndim == 3) {
        ok = pp_st_load_f32(x->src, pp_st_find(x->src, t->name), 0, n, a, err) == 0;
    } else if (ok) {
        pp_weight w;
        ok = pp_weight_load(x->src, t->name, t->rows, t->cols, &w, err) == 0 &&
             pp_weight_decode_rows(&w, 0, t->rows, a, err) == 0;
    }
    for (int64_t i = 0; ok && i < n; i++) ok = pp_bf16_to_f32(pp_f32_to_bf16(a[i])) == b[i];
    x->tensors++;
    x->differ += !ok;
    free(a);
    free(b);
    return 0;
}

static void export_bf16(const char *case_dir, const char *weights) {
    char err[PP_ERR_LEN], src_path[512], cfg_path[512], path[] = "/tmp/pp_test_export_XXXXXX";
    int fd = mkstemp(path), layers = 0;
    if (fd < 0) return;
    close(fd);
    snprintf(src_path, sizeof src_path, "%s/%s/%s", PP_TEST_DATA "/golden", case_dir, weights);
    snprintf(cfg_path, sizeof cfg_path, "%s/%s/config.json", PP_TEST_DATA "/golden", case_dir);
    st_file *src = NULL, *out = NULL;
    pp_lm_config c;
    int rc = pp_lm_export_bf16(src_path, path, &layers, err);
    if (!rc) rc = pp_st_open(src_path, &src, err);
    if (!rc) rc = pp_st_open(path, &out, err);
    if (!rc) rc = pp_lm_config_for(cfg_path, src, &c, err);
    if (rc) fprintf(stderr, "%s: %s\n", case_dir, err);
    TEST_COND("export to bf16", rc == PP_OK);
    if (!rc) {
        exported x = {.src = src, .out = out};
        pp_lm_catalog(&c, compare_export, &x);
        printf("%s -> bf16: %d tensors, %d differ from the rounded decode (%zu in the file)\n", case_dir, x.tensors,
               x.differ, pp_st_count(out));
        TEST_COND("bf16 export is the rounded decode", x.differ == 0 && x.tensors == (int)pp_st_count(out));
    }
    pp_st_close(src);
    pp_st_close(out);
    unlink(path);
}

static void random_nf2(void) {
    char err[PP_ERR_LEN];
    enum { ROWS = 96, COLS = 384, GROUP = 128 };
    pp_qtensor q, again, other;
    int rc = pp_qtensor_random_nf2(ROWS, COLS, GROUP, 0.02f, 7, &q, err);
    TEST_COND("random NF2 tensor", rc == PP_OK && q.codes_bytes == ROWS * COLS / 4 &&
                                       q.scales_bytes == 2 * ROWS * COLS / GROUP && q.w.np2 == GROUP);
    if (rc) return;
    /* Quantizing N(0, 1) groups: an outer code past the midpoint 0.9816 of the positive
     * centroids, 16.3 % each side; 36,864 codes give a standard error of 0.2 %. */
    int count[4] = {0};
    const uint8_t *codes = q.codes;
    for (size_t i = 0; i < q.codes_bytes; i++)
        for (int k = 0; k < 4; k++) count[(codes[i] >> (2 * k)) & 3]++;
    double n = ROWS * COLS, expect_outer = 0.5 * erfc(0.9816 / sqrt(2.0));
    printf("random NF2 codes: %.1f / %.1f / %.1f / %.1f %%\n", 100 * count[0] / n, 100 * count[1] / n,
           100 * count[2] / n, 100 * count[3] / n);
    int near = 1;
    for (int c = 0; c < 4; c++)
        near &= fabs(count[c] / n - (c == 0 || c == 3 ? expect_outer : 0.5 - expect_outer)) < 0.01;
    TEST_COND("codes at a quantized Gaussian's frequencies", near);
    static float dec[ROWS * COLS];
    rc = pp_weight_decode_rows(&q.w, 0, ROWS, dec, err);
    double sum = 0;
    for (int i = 0; i < ROWS * COLS; i++) sum += (double)dec[i] * dec[i];
    double rms = sqrt(sum / (ROWS * COLS));
    printf("random NF2 decode: rms %.5f (asked 0.02)\n", rms);
    TEST_COND("decode has the asked RMS", rc == PP_OK && fabs(rms / 0.02 - 1) < 0.02);
    TEST_COND("same seed, same tensor", pp_qtensor_random_nf2(ROWS, COLS, GROUP, 0.02f, 7, &again, err) == PP_OK &&
                                            memcmp(q.codes, again.codes, q.codes_bytes) == 0 &&
                                            memcmp(q.scales, again.scales, q.scales_bytes) == 0);
    TEST_COND("another seed, other codes", pp_qtensor_random_nf2(ROWS, COLS, GROUP, 0.02f, 8, &other, err) == PP_OK &&
                                               memcmp(q.codes, other.codes, q.codes_bytes) != 0);
    pp_qtensor_free(&other);
    TEST_COND("a group must divide the rows",
              pp_qtensor_random_nf2(ROWS, 200, GROUP, 0.02f, 7, &other, err) == PP_EINVAL && strstr(err, "128"));
    pp_qtensor_free(&q);
    pp_qtensor_free(&again);
}

/* An in-memory checkpoint of one F32 tensor 'w.weight' [2, 64] holding v; buf must outlive f. */
#define ONE_TENSOR_HEADER "{\"w.weight\":{\"dtype\":\"F32\",\"shape\":[2,64],\"data_offsets\":[0,512]}}"
typedef unsigned char one_tensor_buf[8 + sizeof ONE_TENSOR_HEADER - 1 + 512];

static st_file *one_tensor(const float v[128], one_tensor_buf buf, const char *name) {
    uint64_t n = sizeof ONE_TENSOR_HEADER - 1;
    memcpy(buf, &n, 8);
    memcpy(buf + 8, ONE_TENSOR_HEADER, n);
    memcpy(buf + 8 + n, v, 128 * sizeof(float));
    st_file *f = NULL;
    char err[PP_ERR_LEN];
    if (pp_st_open_memory(buf, sizeof(one_tensor_buf), name, &f, err)) fprintf(stderr, "%s\n", err);
    return f;
}

static const pp_wformat all_fmts[] = {PP_WF_NF2, PP_WF_INT4, PP_WF_NF4, PP_WF_INT8};

/* A source holding a NaN or an infinity is refused, naming the tensor and the element, in every
 * format: quantized, it gave a file the loader refuses (an infinite scale) or a wrong code. */
static void non_finite(void) {
    static one_tensor_buf buf;
    for (int bad = 0; bad < 2; bad++) {
        float v[128];
        for (int i = 0; i < 128; i++) v[i] = 0.01f * (float)(i % 7 - 3);
        v[70] = bad ? INFINITY : NAN;
        char err[PP_ERR_LEN] = "";
        st_file *f = one_tensor(v, buf, "nan.safetensors");
        if (!f) {
            TEST_COND("non-finite source opens", 0);
            return;
        }
        for (size_t k = 0; k < sizeof all_fmts / sizeof all_fmts[0]; k++) {
            pp_qtensor q;
            int rc = pp_quantize_tensor(f, pp_st_find(f, "w.weight"), all_fmts[k], 64, &q, err);
            if (!rc) pp_qtensor_free(&q);
            printf("%s %s -> %s\n", bad ? "inf" : "nan", pp_wformat_name(all_fmts[k]), rc ? err : "quantized");
            TEST_COND("a non-finite weight is refused, naming tensor and element",
                      rc == PP_EFORMAT && strstr(err, "'w.weight'") && strstr(err, "element 70 (row 1)"));
        }
        pp_st_close(f);
    }
}

/* One finite outlier too large for an F16 scale: NF2 (its group's RMS) and INT4 (max/7) are refused,
 * naming the tensor, the group and the weight, instead of writing an infinite scale the loader
 * refuses; INT8 and NF4 (F32 scales) quantize it. Just under the limit, every format quantizes. */
static void scale_overflow(void) {
    static one_tensor_buf buf;
    for (int over = 0; over < 2; over++) {
        float v[128];
        for (int i = 0; i < 128; i++) v[i] = 0.01f * (float)(i % 7 - 3);
        /* group 1 of 64: RMS 1e6/8 = 125000 and 1e6/7 pass 65504; 4e5/8 and 4e5/7 stay under */
        v[70] = over ? 1e6f : 4e5f;
        char err[PP_ERR_LEN] = "";
        st_file *f = one_tensor(v, buf, "outlier.safetensors");
        if (!f) {
            TEST_COND("outlier source opens", 0);
            return;
        }
        for (size_t k = 0; k < sizeof all_fmts / sizeof all_fmts[0]; k++) {
            pp_wformat fmt = all_fmts[k];
            pp_qtensor q;
            int rc = pp_quantize_tensor(f, pp_st_find(f, "w.weight"), fmt, 64, &q, err);
            int f16_scales = fmt == PP_WF_NF2 || fmt == PP_WF_INT4, finite = 1;
            if (!rc && f16_scales)
                for (size_t g = 0; g < q.scales_bytes / 2; g++)
                    finite &= isfinite(pp_f16_to_f32(((const uint16_t *)q.scales)[g])) != 0;
            printf("outlier %g %s -> %s\n", (double)v[70], pp_wformat_name(fmt), rc ? err : "quantized");
            if (!rc) pp_qtensor_free(&q);
            if (over && f16_scales)
                TEST_COND("an F16 scale overflow is refused, naming tensor, group and weight",
                          rc == PP_EFORMAT && strstr(err, "'w.weight'") && strstr(err, "group 1 (row 1)") &&
                              strstr(err, "1e+06") && strstr(err, "int8 or nf4"));
            else
                TEST_COND("quantized with finite scales", rc == PP_OK && finite);
        }
        pp_st_close(f);
    }
}

/* INT8 on a group of subnormal weights (absmax 3e-40, so 127/absmax is infinite): each code is
 * round(w·127/absmax), a zero weight codes 0 and the decode keeps the tensor's direction. */
static void int8_subnormal(void) {
    static one_tensor_buf buf;
    float v[128];
    for (int i = 0; i < 128; i++) v[i] = 1e-40f * (float)(i % 7 - 3);
    st_file *f = one_tensor(v, buf, "subnormal.safetensors");
    char err[PP_ERR_LEN] = "";
    pp_qtensor q;
    if (!f || pp_quantize_tensor(f, pp_st_find(f, "w.weight"), PP_WF_INT8, 64, &q, err)) {
        TEST_COND("subnormal source quantizes", 0);
        pp_st_close(f);
        return;
    }
    const int8_t *codes = q.codes;
    int wrong = 0;
    for (int i = 0; i < 128; i++) wrong += codes[i] != (int8_t)lrintf(127.0f * (float)(i % 7 - 3) / 3.0f);
    printf("int8 on subnormal weights: %d of 128 codes wrong (zero codes as %d), cos %.5f\n", wrong, codes[3],
           q.cosine);
    TEST_COND("subnormal weights code as w*127/absmax", wrong == 0);
    TEST_COND("their decode keeps the direction", q.cosine > 0.999);
    pp_qtensor_free(&q);
    pp_st_close(f);
}

/* An all-zero tensor is stored exactly in every format: its reported cosine is 1, and it decodes to zeros. */
static void zero_tensor(void) {
    static one_tensor_buf buf;
    float v[128] = {0};
    st_file *f = one_tensor(v, buf, "zeros.safetensors");
    for (size_t k = 0; f && k < sizeof all_fmts / sizeof all_fmts[0]; k++) {
        char err[PP_ERR_LEN] = "";
        pp_qtensor q;
        float dec[128];
        int rc = pp_quantize_tensor(f, pp_st_find(f, "w.weight"), all_fmts[k], 64, &q, err), zeros = 0;
        if (!rc && !pp_weight_decode_rows(&q.w, 0, 2, dec, err))
            for (int i = 0; i < 128; i++) zeros += dec[i] == 0.0f;
        printf("zero tensor %s: cos %.5f, %d of 128 decode to 0\n", pp_wformat_name(all_fmts[k]), rc ? -1 : q.cosine,
               zeros);
        TEST_COND("an all-zero tensor is exact, cosine 1", rc == PP_OK && q.cosine == 1.0 && zeros == 128);
        if (!rc) pp_qtensor_free(&q);
    }
    TEST_COND("zero source opens", f != NULL);
    pp_st_close(f);
}

/* INT4 on groups whose max|w|/7 is a subnormal F16 (max 4.5e-7: 6.43e-8 rounds down to 5.96e-8,
 * 7.55 steps): no code passes ±7, so no nibble 0 (the loader's sign of NF4 data), and the largest
 * weight is not clamped. */
static void int4_subnormal_scale(void) {
    static one_tensor_buf buf;
    float v[128];
    for (int i = 0; i < 128; i++) v[i] = 4.5e-7f * (float)(i % 9 - 4) / 4.0f;
    st_file *f = one_tensor(v, buf, "tiny.safetensors");
    char err[PP_ERR_LEN] = "";
    pp_qtensor q;
    if (!f || pp_quantize_tensor(f, pp_st_find(f, "w.weight"), PP_WF_INT4, 64, &q, err)) {
        TEST_COND("tiny source quantizes", 0);
        pp_st_close(f);
        return;
    }
    const uint8_t *codes = q.codes;
    int nibble0 = 0;
    for (size_t i = 0; i < q.codes_bytes; i++) nibble0 += (codes[i] & 15) == 0 || (codes[i] >> 4) == 0;
    float dec[128], worst = 0, step = pp_f16_to_f32(((const uint16_t *)q.scales)[0]);
    pp_weight_decode_rows(&q.w, 0, 2, dec, err);
    for (int i = 0; i < 128; i++) worst = fmaxf(worst, fabsf(dec[i] - v[i]) / step);
    printf("int4 with a subnormal scale %g: %d codes at nibble 0, worst error %.3f steps, cos %.5f\n", (double)step,
           nibble0, (double)worst, q.cosine);
    TEST_COND("no nibble 0 under a subnormal scale", nibble0 == 0);
    TEST_COND("no weight clamped: each within half a step", worst <= 0.5f + 1e-4f);
    pp_qtensor_free(&q);
    pp_st_close(f);
}

/* A NaN in a tensor the format copies (a norm's alpha) or in a dense source exported to BF16 is
 * refused, naming the tensor and element, as one in a tensor to quantize: it was written as it
 * was, and the output loaded. */
static void non_finite_copied(void) {
    char dir[] = "/tmp/pp_test_quantize_nan_XXXXXX", model[64], out[64], err[PP_ERR_LEN] = "";
    unsigned char *bytes = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    st_file *f = NULL;
    const st_tensor *t = NULL;
    if (!mkdtemp(dir) || pp_file_read_all(SRC, 1 << 26, &bytes, &len, err) ||
        pp_file_read_all(PP_TEST_DATA "/golden/lm-bf16/config.json", 1 << 20, &cfg, &cfg_len, err) ||
        pp_st_open_memory(bytes, len, "golden", &f, err) || !(t = pp_st_find(f, "depformer.layers.0.norm1.alpha"))) {
        TEST_COND("golden LM read", 0);
        pp_st_close(f);
        free(bytes);
        free(cfg);
        return;
    }
    static const uint8_t bf16_nan[2] = {0xC0, 0x7F};
    memcpy((uint8_t *)t->data + 4, bf16_nan, 2); /* element 2: the reader points into bytes */
    pp_st_close(f);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(out, sizeof out, "%s/config.json", dir);
    FILE *fp = fopen(model, "wb"), *fc = fopen(out, "wb");
    int wrote = fp && fc && fwrite(bytes, 1, len, fp) == len && fwrite(cfg, 1, cfg_len, fc) == cfg_len;
    if (fp) fclose(fp);
    if (fc) fclose(fc);
    TEST_COND("NaN copy written", wrote);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    pp_quantize_opts o = {.fmt = PP_WF_INT4, .group = 32};
    int rc = pp_quantize_file(model, out, &o, err);
    printf("NaN in a copied norm -> %s\n", rc ? err : "written");
    TEST_COND("a NaN in a copied tensor is refused, naming it",
              rc == PP_EFORMAT && strstr(err, "'depformer.layers.0.norm1.alpha'") && strstr(err, "element 2 is nan"));
    TEST_COND("no output left", access(out, F_OK) != 0);
    int layers = 0;
    rc = pp_lm_export_bf16(model, out, &layers, err);
    printf("NaN in a dense source exported to BF16 -> %s\n", rc ? err : "written");
    TEST_COND("a NaN exported to BF16 is refused, naming it",
              rc == PP_EFORMAT && strstr(err, "'depformer.layers.0.norm1.alpha'") && strstr(err, "column 2 is nan"));
    TEST_COND("no output left", access(out, F_OK) != 0);
    unlink(model);
    snprintf(out, sizeof out, "%s/config.json", dir);
    unlink(out);
    rmdir(dir);
    free(bytes);
    free(cfg);
}

/* --format bf16 of a checkpoint whose out_norm.alpha holds twice the configured values: refused,
 * naming the tensor and the config key, as loading refuses it; it was cut to its first half. */
static void export_wrong_norm(void) {
    char dir[] = "/tmp/pp_test_export_norm_XXXXXX", model[64], out[64], err[PP_ERR_LEN] = "";
    st_file *src = NULL;
    st_writer *w = NULL;
    unsigned char *cfg = NULL;
    size_t cfg_len = 0;
    int rc = mkdtemp(dir) ? pp_st_open(SRC, &src, err) : PP_EIO;
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    if (!rc) rc = pp_st_writer_create(model, &w, err);
    for (size_t i = 0; !rc && i < pp_st_count(src); i++) {
        const st_tensor *t = pp_st_at(src, i);
        int64_t shape[ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (!strcmp(t->name, "out_norm.alpha")) shape[t->ndim - 1] *= 2;
        rc = pp_st_writer_declare(w, t->name, t->dtype, t->ndim, shape, err);
    }
    if (!rc) rc = pp_st_writer_begin(w, err);
    for (size_t i = 0; !rc && i < pp_st_count(src); i++) {
        const st_tensor *t = pp_st_at(src, i);
        rc = pp_st_writer_write(w, t->data, t->nbytes, err);
        if (!rc && !strcmp(t->name, "out_norm.alpha")) rc = pp_st_writer_write(w, t->data, t->nbytes, err);
    }
    if (w && rc)
        pp_st_writer_abort(w);
    else if (w)
        rc = pp_st_writer_finish(w, err);
    snprintf(out, sizeof out, "%s/config.json", dir);
    FILE *fc = NULL;
    if (!rc) rc = pp_file_read_all(PP_TEST_DATA "/golden/lm-bf16/config.json", 1 << 20, &cfg, &cfg_len, err);
    if (!rc && (!(fc = fopen(out, "wb")) || fwrite(cfg, 1, cfg_len, fc) != cfg_len)) rc = PP_EIO;
    if (fc) fclose(fc);
    TEST_COND("checkpoint with a long norm written", rc == PP_OK);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    int layers = 0;
    rc = rc ? rc : pp_lm_export_bf16(model, out, &layers, err);
    printf("bf16 export of a 128-value out_norm.alpha (config: 64) -> %s\n", rc ? err : "written");
    TEST_COND("a norm of another length is refused, naming it and its config key",
              rc == PP_EFORMAT && strstr(err, "'out_norm.alpha' has 128 values") && strstr(err, "dim give 64"));
    TEST_COND("no output left", access(out, F_OK) != 0);
    unlink(model);
    snprintf(out, sizeof out, "%s/config.json", dir);
    unlink(out);
    rmdir(dir);
    pp_st_close(src);
    free(cfg);
}

/* Tensors without weights, [4, 0] and [0, 64], beside a [2, 64] one: a file in every format copies
 * them as stored (rows of no weights crashed the quantizer, dividing by zero), and quantizing one
 * alone is refused, naming it. */
static void empty_tensors(void) {
    char path[] = "/tmp/pp_test_quantize_empty_XXXXXX", out[64], err[PP_ERR_LEN] = "";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    float v[128];
    for (int i = 0; i < 128; i++) v[i] = 0.01f * (float)(i % 7 - 3);
    static const int64_t no_cols[2] = {4, 0}, no_rows[2] = {0, 64}, full[2] = {2, 64};
    st_writer *w = NULL;
    int rc = pp_st_writer_create(path, &w, err);
    if (!rc) rc = pp_st_writer_declare(w, "a.weight", ST_F32, 2, no_cols, err);
    if (!rc) rc = pp_st_writer_declare(w, "b.weight", ST_F32, 2, no_rows, err);
    if (!rc) rc = pp_st_writer_declare(w, "c.weight", ST_F32, 2, full, err);
    if (!rc) rc = pp_st_writer_begin(w, err);
    if (!rc) rc = pp_st_writer_write(w, v, sizeof v, err);
    if (w && rc)
        pp_st_writer_abort(w);
    else if (w)
        rc = pp_st_writer_finish(w, err);
    TEST_COND("checkpoint with empty tensors written", rc == PP_OK);
    snprintf(out, sizeof out, "%s.out", path);
    for (size_t k = 0; !rc && k < sizeof all_fmts / sizeof all_fmts[0]; k++) {
        if (all_fmts[k] == PP_WF_NF4) continue; /* quantizes transformer linears only */
        pp_quantize_opts o = {.fmt = all_fmts[k], .group = 64};
        st_file *f = NULL;
        int q = pp_quantize_file(path, out, &o, err);
        if (!q) q = pp_st_open(out, &f, err);
        const st_tensor *a = f ? pp_st_find(f, "a.weight") : NULL, *b = f ? pp_st_find(f, "b.weight") : NULL;
        printf("empty tensors to %s -> %s\n", pp_wformat_name(all_fmts[k]), q ? err : "copied as stored");
        TEST_COND("empty tensors copied as stored",
                  q == PP_OK && a && a->dtype == ST_F32 && a->numel == 0 && b && b->dtype == ST_F32 && b->numel == 0);
        pp_st_close(f);
        unlink(out);
    }
    st_file *f = NULL;
    pp_qtensor q;
    if (!rc) rc = pp_st_open(path, &f, err);
    rc = rc ? rc : pp_quantize_tensor(f, pp_st_find(f, "a.weight"), PP_WF_INT8, 64, &q, err);
    printf("quantizing [4, 0] -> %s\n", rc ? err : "quantized");
    TEST_COND("a tensor of no weights is refused, naming it", rc == PP_EINVAL && strstr(err, "'a.weight' [4, 0]"));
    if (!rc) pp_qtensor_free(&q);
    pp_st_close(f);
    unlink(path);
}

int main(void) {
    random_nf2();
    non_finite();
    scale_overflow();
    int8_subnormal();
    zero_tensor();
    int4_subnormal_scale();
    non_finite_copied();
    export_wrong_norm();
    empty_tensors();
    /* lm-bf16: 146 two-dimensional tensors; 12 temporal linears (3 layers x 4) for bnb NF4 */
    round_trip(PP_WF_NF2, 64, 0.93, 146);
    round_trip(PP_WF_INT4, 64, 0.99, 146);
    round_trip(PP_WF_NF4, 64, 0.99, 12);
    /* INT8 in blocks and per row (the bitsandbytes layout): half a step of 1/127 at most */
    round_trip(PP_WF_INT8, 32, 0.9999, 146);
    round_trip(PP_WF_INT8, PP_QUANTIZE_ROW, 0.9999, 146);
    char err[PP_ERR_LEN];
    pp_quantize_opts o = {.fmt = PP_WF_NF2, .group = 128};
    int rc = pp_quantize_file(SRC, "/tmp/pp_test_quantize_never", &o, err);
    printf("group 128 on 64-wide rows -> %s\n", err);
    TEST_COND("group must divide rows", rc == PP_EINVAL && strstr(err, "not a multiple of the group size"));
    TEST_COND("no partial file", access("/tmp/pp_test_quantize_never", F_OK) != 0);
    o = (pp_quantize_opts){.fmt = PP_WF_NF4, .group = PP_QUANTIZE_ROW};
    TEST_COND("one scale per row is INT8's",
              pp_quantize_file(SRC, "/tmp/pp_test_quantize_never", &o, err) == PP_EINVAL && strstr(err, "INT8"));
    /* the report alone: the same cosines, no file */
    seen r = {0};
    o = (pp_quantize_opts){.fmt = PP_WF_INT4, .group = 64, .report = on_report, .user = &r};
    TEST_COND("report", pp_quantize_report(SRC, &o, err) == PP_OK && r.count == 146 && r.worst > 0.99);
    export_bf16("lm-nf2", "model.safetensors");
    export_bf16("lm-nf4", "model.safetensors");
    export_bf16("lm-int8b", "model.safetensors");
    export_bf16("lm-q4k", "model.gguf");
    return test_report();
}
