/* test_weight: loading every layout of the golden LM checkpoints, and the CPU matrix products
 * and embedding lookups of every format against a naive double-precision product of the
 * reference decode (pp_weight_decode_rows; the decode itself is checked against independent
 * fixtures in test_weight_decode.c). */
#include "backend/backend.h"
#include "base/err.h"
#include "io/quant.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pp_backend *be;
static st_file *int4; /* lm-int4, whose shape keys give the dims of lm-nf4's tensors */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1), xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Creates an empty file from the template path (its XXXXXX replaced); 0 when it did. */
static int temp_file(char *path) {
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* A tensor to write with write_entries. */
typedef struct st_entry {
    const char *name;
    st_dtype dt;
    int ndim;
    const int64_t *shape;
    const void *data;
    size_t bytes;
} st_entry;

static int write_entries(const char *path, const st_entry *t, size_t n) {
    char err[PP_ERR_LEN];
    st_writer *wr;
    int rc = pp_st_writer_create(path, &wr, err);
    for (size_t i = 0; i < n && !rc; i++) rc = pp_st_writer_declare(wr, t[i].name, t[i].dt, t[i].ndim, t[i].shape, err);
    if (!rc) rc = pp_st_writer_begin(wr, err);
    for (size_t i = 0; i < n && !rc; i++) rc = pp_st_writer_write(wr, t[i].data, t[i].bytes, err);
    if (!rc) rc = pp_st_writer_finish(wr, err);
    if (rc) fprintf(stderr, "%s\n", err);
    return rc;
}

/* matmul for n inputs against sum_k decoded[r][k] * x[i][k] in double. f32 accumulation over
 * a few thousand terms in another order differs by ~1e-6 relative, and the AVX-512 integer
 * loops round activations to int16 (NF4: 15 bits), which on short rows with cancelling terms
 * reaches ~1.5e-4 of the largest output; 1e-3 leaves margin and still catches any decode or
 * indexing mistake (those give errors of order 1). */
static void check_matmul(const pp_weight *w, int n, const char *what) {
    int64_t R = w->rows, C = w->cols;
    float *dec = malloc(sizeof(float) * R * C), *x = malloc(sizeof(float) * n * C);
    float *y = malloc(sizeof(float) * n * R), *ref = malloc(sizeof(float) * n * R);
    char err[PP_ERR_LEN];
    int decoded = pp_weight_decode_rows(w, 0, R, dec, err) == PP_OK;
    TEST_COND(what, decoded);
    if (decoded) {
        for (int64_t i = 0; i < n * C; i++) x[i] = frand();
        for (int i = 0; i < n; i++)
            for (int64_t r = 0; r < R; r++) {
                double s = 0;
                for (int64_t k = 0; k < C; k++) s += (double)dec[r * C + k] * x[i * C + k];
                ref[i * R + r] = (float)s;
            }
        be->ops->matmul(be, w, x, n, y);
        double e = test_rel_err(y, ref, (size_t)(n * R));
        if (e > 1e-3) fprintf(stderr, "%s n=%d: rel err %g\n", what, n, e);
        TEST_COND(what, e <= 1e-3);
    }
    free(dec);
    free(x);
    free(y);
    free(ref);
}

/* Embedding rows (overwrite and accumulate) equal the reference decode of the same rows. */
static void check_embed(const pp_weight *w, const char *what) {
    int32_t ids[4] = {0, (int32_t)(w->rows - 1), (int32_t)(w->rows / 2), -1};
    int64_t C = w->cols;
    float *y = malloc(sizeof(float) * 4 * C), *ref = calloc(4 * C, sizeof(float));
    char err[PP_ERR_LEN];
    for (int i = 0; i < 3; i++) pp_weight_decode_rows(w, ids[i], 1, ref + i * C, err);
    be->ops->embed(be, w, ids, 4, y, 0);
    TEST_COND(what, memcmp(y, ref, sizeof(float) * 4 * C) == 0);
    be->ops->embed(be, w, ids, 4, y, 1);
    int ok = 1;
    for (int64_t k = 0; k < 4 * C; k++) ok &= y[k] == 2 * ref[k];
    TEST_COND(what, ok);
    free(y);
    free(ref);
}

static void test_dense_golden(void) {
    char err[PP_ERR_LEN];
    st_file *f;
    if (pp_st_open(PP_TEST_DATA "/golden/lm-bf16/model.safetensors", &f, err)) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("open lm-bf16", 0);
        return;
    }
    pp_weight w, a;
    const char *n = "transformer.layers.0.self_attn.in_proj_weight";
    TEST_COND("load bf16", pp_weight_load(f, n, 192, 64, &w, err) == PP_OK);
    TEST_COND("bf16 format", w.fmt == PP_WF_BF16);
    /* The module-key spelling finds the raw parameter. */
    TEST_COND("alias", pp_weight_load(f, "transformer.layers.0.self_attn.in_proj.weight", 192, 64, &a, err) == 0 &&
                           a.data == w.data);
    TEST_COND("exists alias", pp_weight_exists(f, "transformer.layers.0.self_attn.in_proj.weight"));
    TEST_COND("not exists", !pp_weight_exists(f, "transformer.layers.0.nothing.weight"));
    TEST_COND("shape mismatch", pp_weight_load(f, n, 64, 192, &a, err) == PP_EFORMAT && strstr(err, n));
    TEST_COND("missing", pp_weight_load(f, "nope.weight", 4, 4, &a, err) == PP_ENOTFOUND && strstr(err, "nope"));
    /* decode = the container's own conversion */
    float *d = malloc(sizeof(float) * 192 * 64), *s = malloc(sizeof(float) * 192 * 64);
    pp_weight_decode_rows(&w, 0, 192, d, err);
    pp_st_load_f32(f, pp_st_find(f, n), 0, 192 * 64, s, err);
    TEST_COND("bf16 decode", memcmp(d, s, sizeof(float) * 192 * 64) == 0);
    TEST_COND("decode range", pp_weight_decode_rows(&w, 190, 3, d, err) == PP_EINVAL);
    /* A view's rows are the stored rows */
    pp_weight v = pp_weight_rows(&w, 64, 64);
    pp_weight_decode_rows(&v, 0, 64, d, err);
    TEST_COND("row view", memcmp(d, s + 64 * 64, sizeof(float) * 64 * 64) == 0);
    TEST_COND("bytes", pp_weight_bytes(&w) == 192 * 64 * 2 && pp_weight_bytes(&v) == 64 * 64 * 2);
    for (int nb = 1; nb <= 5; nb += 2) check_matmul(&w, nb, "bf16 matmul");
    check_matmul(&v, 2, "bf16 view matmul");
    TEST_COND("load emb", pp_weight_load(f, "emb.3.weight", 2049, 64, &w, err) == PP_OK);
    check_embed(&w, "bf16 embed");
    free(d);
    free(s);
    pp_st_close(f);
}

/* F32 and F16 tensors with a row length that is not a multiple of the kernels' chunk. */
static void test_dense_synthetic(void) {
    char err[PP_ERR_LEN], path[] = "/tmp/pp_test_weight_XXXXXX";
    if (temp_file(path)) return;
    enum { R = 37, C = 301 };
    static float v[R * C];
    static uint16_t h[R * C];
    for (int i = 0; i < R * C; i++) {
        v[i] = frand() * 3;
        h[i] = pp_f32_to_f16(v[i]);
    }
    st_writer *wr;
    int64_t shape[2] = {R, C};
    int rc = pp_st_writer_create(path, &wr, err);
    if (!rc) rc = pp_st_writer_declare(wr, "a.weight", ST_F32, 2, shape, err);
    if (!rc) rc = pp_st_writer_declare(wr, "b.weight", ST_F16, 2, shape, err);
    /* the product's own half conversion on specials: inf, -inf, NaN, subnormals, largest */
    static const uint16_t special[6] = {0x7c00, 0xfc00, 0x7e00, 0x0001, 0x83ff, 0x7bff};
    int64_t sshape[2] = {6, 1};
    if (!rc) rc = pp_st_writer_declare(wr, "c.weight", ST_F16, 2, sshape, err);
    if (!rc) rc = pp_st_writer_begin(wr, err);
    if (!rc) rc = pp_st_writer_write(wr, v, sizeof v, err);
    if (!rc) rc = pp_st_writer_write(wr, h, sizeof h, err);
    if (!rc) rc = pp_st_writer_write(wr, special, sizeof special, err);
    if (!rc) rc = pp_st_writer_finish(wr, err);
    TEST_COND("write synthetic", rc == PP_OK);
    st_file *f;
    if (rc || pp_st_open(path, &f, err)) {
        unlink(path);
        return;
    }
    pp_weight a, b;
    TEST_COND("load f32", pp_weight_load(f, "a.weight", R, C, &a, err) == 0 && a.fmt == PP_WF_F32);
    TEST_COND("load f16", pp_weight_load(f, "b.weight", R, C, &b, err) == 0 && b.fmt == PP_WF_F16);
    float *d = malloc(sizeof v);
    pp_weight_decode_rows(&a, 0, R, d, err);
    TEST_COND("f32 decode", memcmp(d, v, sizeof v) == 0);
    pp_weight_decode_rows(&b, 0, R, d, err);
    int ok = 1;
    for (int i = 0; i < R * C; i++) ok &= d[i] == pp_f16_to_f32(h[i]);
    TEST_COND("f16 decode", ok);
    for (int nb = 1; nb <= 4; nb++) {
        check_matmul(&a, nb, "f32 matmul");
        check_matmul(&b, nb, "f16 matmul");
    }
    check_embed(&b, "f16 embed");
    pp_weight c;
    float one = 1, y[6];
    TEST_COND("load f16 specials", pp_weight_load(f, "c.weight", 6, 1, &c, err) == 0);
    be->ops->matmul(be, &c, &one, 1, y);
    ok = 1;
    for (int i = 0; i < 6; i++) {
        float want = pp_f16_to_f32(special[i]);
        ok &= isnan(want) ? isnan(y[i]) : y[i] == want;
    }
    TEST_COND("f16 specials in matmul", ok);
    free(d);
    pp_st_close(f);
    unlink(path);
}

/* INT8 as bitsandbytes' Linear8bitLt saves it (P.weight I8 + P.SCB F32 per row) and in blocks
 * along the rows (P.SCB [rows, blocks]): the value is q·absmax/127; products and embeddings
 * agree with the decoded rows; every malformed pair is refused with the key at fault. */
static void test_int8(void) {
    char err[PP_ERR_LEN], path[] = "/tmp/pp_test_int8_XXXXXX";
    if (temp_file(path)) return;
    enum { R = 24, C = 256, B = 64 };
    static float v[R * C], row_absmax[R], blk_absmax[R * C / B], bad_scales[R];
    static int8_t row_q[R * C], blk_q[R * C];
    for (int i = 0; i < R * C; i++) v[i] = frand();
    pp_quant_int8_quantize(v, R, C, C, row_q, row_absmax);
    pp_quant_int8_quantize(v, R, C, B, blk_q, blk_absmax);
    memcpy(bad_scales, row_absmax, sizeof bad_scales);
    bad_scales[5] = NAN;
    int64_t shape[2] = {R, C}, rows[1] = {R}, blocks[2] = {R, C / B}, short_rows[1] = {R - 1};
    const st_entry t[] = {
        {"row.weight", ST_I8, 2, shape, row_q, sizeof row_q},
        {"row.SCB", ST_F32, 1, rows, row_absmax, sizeof row_absmax},
        {"blk.in_proj_weight", ST_I8, 2, shape, blk_q, sizeof blk_q},
        {"blk.in_proj_weight.SCB", ST_F32, 2, blocks, blk_absmax, sizeof blk_absmax},
        {"short.weight", ST_I8, 2, shape, row_q, sizeof row_q},
        {"short.SCB", ST_F32, 1, short_rows, row_absmax, sizeof row_absmax - sizeof(float)},
        {"nan.weight", ST_I8, 2, shape, row_q, sizeof row_q},
        {"nan.SCB", ST_F32, 1, rows, bad_scales, sizeof bad_scales},
        {"u8.weight", ST_U8, 2, shape, row_q, sizeof row_q},
        {"u8.SCB", ST_F32, 1, rows, row_absmax, sizeof row_absmax},
        {"noscb.weight", ST_I8, 2, shape, row_q, sizeof row_q},
    };
    int rc = write_entries(path, t, sizeof t / sizeof *t);
    TEST_COND("write int8", rc == PP_OK);
    st_file *f;
    if (rc || pp_st_open(path, &f, err)) {
        unlink(path);
        return;
    }
    pp_weight a, b, x;
    TEST_COND("load int8 per row",
              pp_weight_load(f, "row.weight", R, C, &a, err) == 0 && a.fmt == PP_WF_INT8 && a.group == C);
    TEST_COND("load int8 blocks",
              pp_weight_load(f, "blk.in_proj_weight", R, C, &b, err) == 0 && b.fmt == PP_WF_INT8 && b.group == B);
    float *d = malloc(sizeof v);
    int ok = pp_weight_decode_rows(&a, 0, R, d, err) == 0;
    for (int i = 0; ok && i < R * C; i++) ok = d[i] == (float)row_q[i] * (row_absmax[i / C] / 127.0f);
    TEST_COND("int8 per-row decode is q·absmax/127", ok);
    ok = pp_weight_decode_rows(&b, 0, R, d, err) == 0;
    double worst = 0;
    for (int i = 0; ok && i < R * C; i++) {
        ok = d[i] == (float)blk_q[i] * (blk_absmax[i / B] / 127.0f);
        worst = fmax(worst, fabs(d[i] - v[i]) / blk_absmax[i / B]);
    }
    TEST_COND("int8 block decode is q·absmax/127", ok);
    TEST_COND("int8 rounding error at most half a step", worst <= 0.5 / 127 + 1e-6);
    TEST_COND("int8 bytes", pp_weight_bytes(&a) == R * C + R * 4 && pp_weight_bytes(&b) == R * C + R * C / B * 4);
    for (int nb = 1; nb <= 4; nb++) {
        check_matmul(&a, nb, "int8 per-row matmul");
        check_matmul(&b, nb, "int8 block matmul");
    }
    check_embed(&a, "int8 embed");
    TEST_COND("int8 scales of the wrong length",
              pp_weight_load(f, "short.weight", R, C, &x, err) == PP_EFORMAT && strstr(err, "short.SCB"));
    TEST_COND("int8 non-finite scale",
              pp_weight_load(f, "nan.weight", R, C, &x, err) == PP_EFORMAT && strstr(err, "nan.SCB"));
    TEST_COND("int8 codes not I8",
              pp_weight_load(f, "u8.weight", R, C, &x, err) == PP_EFORMAT && strstr(err, "u8.weight"));
    TEST_COND("I8 without its scales", pp_weight_load(f, "noscb.weight", R, C, &x, err) == PP_EUNSUPPORTED &&
                                           strstr(err, "noscb.weight") && strstr(err, "I8"));
    TEST_COND("int8 shape mismatch", pp_weight_load(f, "row.weight", C, R, &x, err) == PP_EFORMAT);
    free(d);
    pp_st_close(f);
    unlink(path);
}

/* q, a valid NF4 tensor of [3, 2 * QUANT_MAX_NP2], with a quant_state of the nested block and
 * offset given as JSON numbers, must be refused with a message naming nested_blocksize or
 * nested_offset. */
static void check_nested_state(const pp_qtensor *q, const char *path, const char *block, const char *offset,
                               const char *why) {
    char err[PP_ERR_LEN], blob[256];
    int blen = snprintf(blob, sizeof blob,
                        "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"float32\", \"shape\": [3, %d], "
                        "\"nested_blocksize\": %s, \"nested_dtype\": \"float32\", \"nested_offset\": %s}",
                        q->w.group, 2 * QUANT_MAX_NP2, block, offset);
    int64_t codes[2] = {(int64_t)q->codes_bytes, 1}, absmax = (int64_t)q->scales_bytes,
            nested = (int64_t)(q->nested_bytes / sizeof(float)), n256 = 256, n16 = 16, nblob = blen;
    const st_entry t[] = {
        {"nest.weight", ST_U8, 2, codes, q->codes, q->codes_bytes},
        {"nest.weight.absmax", ST_U8, 1, &absmax, q->scales, q->scales_bytes},
        {"nest.weight.nested_absmax", ST_F32, 1, &nested, q->nested, q->nested_bytes},
        {"nest.weight.nested_quant_map", ST_F32, 1, &n256, q->nested_map, 256 * sizeof(float)},
        {"nest.weight.quant_map", ST_F32, 1, &n16, pp_quant_nf4_table, 16 * sizeof(float)},
        {"nest.weight.quant_state.bitsandbytes__nf4", ST_U8, 1, &nblob, blob, (size_t)blen},
    };
    st_file *f;
    pp_weight w;
    TEST_COND("write the nf4 tensor", write_entries(path, t, sizeof t / sizeof *t) == 0);
    if (pp_st_open(path, &f, err)) return;
    TEST_COND(why, pp_weight_load(f, "nest.weight", 3, 2 * QUANT_MAX_NP2, &w, err) == PP_EFORMAT &&
                       strstr(err, "nested_blocksize or nested_offset"));
    pp_st_close(f);
}

/* A tensor whose own shape holds a 0 is empty whatever its other dims: [4, 0, 8] is not a [4, 8]
 * weight (the 0 was once dropped as the shape keys' padding is, and products read past the file). */
static void test_empty_dims(void) {
    char err[PP_ERR_LEN], path[] = "/tmp/pp_test_empty_XXXXXX";
    if (temp_file(path)) return;
    static const int64_t empty[3] = {4, 0, 8}, rows[1] = {4};
    static const float absmax[4] = {1, 1, 1, 1};
    const st_entry t[] = {
        {"dense.weight", ST_F32, 3, empty, NULL, 0},
        {"int8.weight", ST_I8, 3, empty, NULL, 0},
        {"int8.SCB", ST_F32, 1, rows, absmax, sizeof absmax},
    };
    st_file *f;
    pp_weight w;
    if (write_entries(path, t, sizeof t / sizeof *t) == 0 && pp_st_open(path, &f, err) == 0) {
        TEST_COND("dense [4, 0, 8] refused as [4, 8]",
                  pp_weight_load(f, "dense.weight", 4, 8, &w, err) == PP_EFORMAT && strstr(err, "dense.weight"));
        TEST_COND("int8 [4, 0, 8] refused as [4, 8]",
                  pp_weight_load(f, "int8.weight", 4, 8, &w, err) == PP_EFORMAT && strstr(err, "int8.weight"));
        pp_st_close(f);
    } else {
        TEST_COND("write empty tensors", 0);
    }
    unlink(path);
}

/* INT4 and NF4 group sizes: the largest the decoders take (QUANT_MAX_NP2, a whole row of 8192 in
 * two groups) loads, multiplies and embeds; a file with larger groups is refused at load, naming
 * the tensor and the group (its products once wrote a group into a QUANT_MAX_NP2 scratch, and its
 * embedding lookups looped forever on chunks of no whole group). */
static void test_group_limits(void) {
    char err[PP_ERR_LEN], src[] = "/tmp/pp_test_groups_src_XXXXXX", out[] = "/tmp/pp_test_groups_XXXXXX";
    if (temp_file(src) || temp_file(out)) return;
    enum { R = 3, C = 2 * QUANT_MAX_NP2 };
    static float v[R * C];
    for (int i = 0; i < R * C; i++) v[i] = frand() * 0.05f;
    int64_t shape[2] = {R, C};
    st_writer *wr;
    int rc = pp_st_writer_create(src, &wr, err);
    if (!rc) rc = pp_st_writer_declare(wr, "m.weight", ST_F32, 2, shape, err);
    if (!rc) rc = pp_st_writer_begin(wr, err);
    if (!rc) rc = pp_st_writer_write(wr, v, sizeof v, err);
    if (!rc) rc = pp_st_writer_finish(wr, err);
    st_file *f = NULL;
    if (!rc) rc = pp_st_open(src, &f, err);
    pp_qtensor q4, qn;
    int have4 = !rc && pp_quantize_tensor(f, pp_st_find(f, "m.weight"), PP_WF_INT4, QUANT_MAX_NP2, &q4, err) == 0;
    int haven = !rc && pp_quantize_tensor(f, pp_st_find(f, "m.weight"), PP_WF_NF4, QUANT_MAX_NP2, &qn, err) == 0;
    TEST_COND("quantize groups of QUANT_MAX_NP2", have4 && haven);
    if (f) pp_st_close(f);
    unlink(src);
    if (!have4 || !haven) {
        if (have4) pp_qtensor_free(&q4);
        if (haven) pp_qtensor_free(&qn);
        unlink(out);
        return;
    }
    /* twice the group: INT4 keeps every other scale, NF4 its first absmax codes and a blob that says so */
    pp_qtensor big4 = q4, bign = qn;
    uint16_t *half_scales = malloc(q4.scales_bytes / 2);
    for (size_t g = 0; g < q4.scales_bytes / 4; g++) half_scales[g] = ((const uint16_t *)q4.scales)[2 * g];
    big4.scales = half_scales, big4.scales_bytes = q4.scales_bytes / 2, big4.w.group = C;
    bign.scales_bytes = qn.scales_bytes / 2, bign.w.group = C;
    const struct {
        const char *name;
        const pp_qtensor *q;
    } t[] = {{"int4.weight", &q4}, {"nf4.weight", &qn}, {"int4big.weight", &big4}, {"nf4big.weight", &bign}};
    enum { N = sizeof t / sizeof *t };
    rc = pp_st_writer_create(out, &wr, err);
    for (int i = 0; i < N && !rc; i++)
        rc = pp_quantize_declare(wr, t[i].name, ST_F32, R, C, t[i].q->w.fmt, t[i].q->w.group, err);
    if (!rc) rc = pp_st_writer_begin(wr, err);
    for (int i = 0; i < N && !rc; i++) rc = pp_quantize_write(wr, t[i].name, ST_F32, t[i].q, err);
    if (!rc) rc = pp_st_writer_finish(wr, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("write groups", rc == PP_OK);
    if (!rc && pp_st_open(out, &f, err) == 0) {
        pp_weight w;
        TEST_COND("int4 group 4096 loads", pp_weight_load(f, "int4.weight", R, C, &w, err) == PP_OK &&
                                               w.fmt == PP_WF_INT4 && w.group == QUANT_MAX_NP2);
        check_matmul(&w, 1, "int4 g4096 matmul");
        check_matmul(&w, 3, "int4 g4096 matmul");
        check_embed(&w, "int4 g4096 embed");
        TEST_COND("nf4 block 4096 loads", pp_weight_load(f, "nf4.weight", R, C, &w, err) == PP_OK &&
                                              w.fmt == PP_WF_NF4 && w.group == QUANT_MAX_NP2);
        check_matmul(&w, 1, "nf4 g4096 matmul");
        check_matmul(&w, 3, "nf4 g4096 matmul");
        check_embed(&w, "nf4 g4096 embed");
        TEST_COND("int4 group 8192 refused", pp_weight_load(f, "int4big.weight", R, C, &w, err) == PP_EUNSUPPORTED &&
                                                 strstr(err, "int4big.weight") && strstr(err, "8192"));
        TEST_COND("nf4 block 8192 refused", pp_weight_load(f, "nf4big.weight", R, C, &w, err) == PP_EUNSUPPORTED &&
                                                strstr(err, "nf4big.weight") && strstr(err, "8192"));
        pp_st_close(f);
    }
    free(half_scales);
    pp_qtensor_free(&q4);
    /* a nested block of 2^32 + 1 (one block, so the nested_absmax count agrees): stored as an int
     * it became 1, and scale lookups read past the one nested value */
    char offset[32];
    snprintf(offset, sizeof offset, "%.8e", (double)qn.w.nested_offset);
    TEST_COND("the nf4 tensor's absmax codes nest in one block", qn.nested_bytes == sizeof(float));
    check_nested_state(&qn, out, "4294967297", offset, "nf4 nested block 2^32 + 1 refused");
    /* an offset past float's range: every scale would be infinite */
    check_nested_state(&qn, out, "256", "1e300", "nf4 nested_offset beyond float refused");
    pp_qtensor_free(&qn);
    unlink(out);
}

/* Every quantized tensor of a golden quantized checkpoint loads with the dims its own keys
 * give, and the products agree with the decode. */
static void test_quant_golden(const char *dir, const char *marker, pp_wformat fmt) {
    char err[PP_ERR_LEN], path[512];
    snprintf(path, sizeof path, "%s/golden/%s/model.safetensors", PP_TEST_DATA, dir);
    st_file *f;
    if (pp_st_open(path, &f, err)) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("open quant golden", 0);
        return;
    }
    int loaded = 0, bad = 0;
    size_t ml = strlen(marker);
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        size_t nl = strlen(t->name);
        if (nl <= ml || strcmp(t->name + nl - ml, marker) != 0) continue;
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(nl - ml), t->name);
        /* dims from the INT4 file of the same config (bnb keeps them in a JSON blob) */
        int64_t dims[4] = {0, 0, 0, 0};
        char key[300];
        snprintf(key, sizeof key, fmt == PP_WF_NF2 ? "%s.shape" : "%s.__shape__", base);
        const st_tensor *sh = pp_st_find(fmt == PP_WF_NF4 ? int4 : f, key);
        if (!sh || pp_st_load_i64(fmt == PP_WF_NF4 ? int4 : f, sh, 0, 2, dims, err)) {
            bad++;
            continue;
        }
        pp_weight w;
        if (pp_weight_load(f, base, dims[0], dims[1], &w, err)) {
            fprintf(stderr, "%s\n", err);
            bad++;
            continue;
        }
        bad += w.fmt != fmt;
        if (loaded++ % 8 == 0) {
            check_matmul(&w, 1, base);
            check_matmul(&w, 3, base);
            if (w.rows > 8) {
                pp_weight v = pp_weight_rows(&w, w.rows / 2, w.rows / 4);
                check_matmul(&v, 2, base);
            }
            check_embed(&w, base);
        }
    }
    printf("%s: %d tensors loaded\n", dir, loaded);
    TEST_COND(dir, loaded > 50 && bad == 0);
    pp_st_close(f);
}

/* The NumPy fixtures add the odd layouts: NF2 with np2 > gs (96 in 128), INT4 groups of 32,
 * NF4 with several nested blocks and with f32 absmax. */
static void test_fixtures(void) {
    static const struct {
        const char *name;
        int64_t rows, cols;
    } cases[] = {{"nf2a.weight", 6, 256}, {"nf2b.weight", 4, 192}, {"int4.weight", 8, 128},
                 {"blk.self_attn.in_proj_weight", 8, 256}, {"nf4f.weight", 4, 128}};
    char err[PP_ERR_LEN];
    st_file *f;
    if (pp_st_open(PP_TEST_DATA "/quant/fixtures.safetensors", &f, err)) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("open fixtures", 0);
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_weight w;
        int rc = pp_weight_load(f, cases[i].name, cases[i].rows, cases[i].cols, &w, err);
        TEST_COND(cases[i].name, rc == PP_OK);
        if (rc) continue;
        for (int n = 1; n <= 3; n++) check_matmul(&w, n, cases[i].name);
        pp_weight v = pp_weight_rows(&w, 1, 2);
        check_matmul(&v, 2, cases[i].name);
        check_embed(&w, cases[i].name);
    }
    pp_st_close(f);
}

int main(void) {
    char err[PP_ERR_LEN];
    if (pp_backend_cpu_create(2, &be, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_dense_golden();
    test_dense_synthetic();
    test_int8();
    test_fixtures();
    test_group_limits();
    test_empty_dims();
    if (pp_st_open(PP_TEST_DATA "/golden/lm-int4/model.safetensors", &int4, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_quant_golden("lm-nf2", ".packed", PP_WF_NF2);
    test_quant_golden("lm-int4", ".__scales__", PP_WF_INT4);
    test_quant_golden("lm-nf4", ".quant_state.bitsandbytes__nf4", PP_WF_NF4);
    pp_st_close(int4);
    pp_backend_destroy(be);
    return test_report();
}
