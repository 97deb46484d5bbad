/* onnx: the protobuf reader's bounds, the ONNX model reader (external data, locations that leave
 * the folder), the bundle mapper's refusals naming the node or file at fault, speech-core's voice
 * and prompt files, and a named prompt selected in a session. The bundles' numerics are the
 * golden cases' (golden_lm-onnx-*). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "io/file.h"
#include "io/onnx.h"
#include "io/onnx_bundle.h"
#include "io/onnx_mimi.h"
#include "io/prompts.h"
#include "io/protobuf.h"
#include "io/safetensors.h"
#include "io/voice.h"
#include "model/mimi.h"
#include "personaplex.h"
#include "test.h"

#define BUNDLE PP_TEST_DATA "/golden/lm-onnx-int8/bundle"
#define SEEDS PP_TEST_DATA "/../fuzz/corpus/fuzz_onnx"

static void test_protobuf(void) {
    char err[PP_ERR_LEN];
    pp_pb_field f;
    /* field 1 varint 150, field 2 bytes "hi", field 3 fixed32 */
    const uint8_t ok[] = {0x08, 0x96, 0x01, 0x12, 0x02, 'h', 'i', 0x1d, 1, 2, 3, 4};
    pp_pb c = pp_pb_open(ok, sizeof ok);
    int a = pp_pb_next(&c, &f, "t", err) == 1 && f.number == 1 && f.u == 150;
    int b = pp_pb_next(&c, &f, "t", err) == 1 && f.number == 2 && f.len == 2 && !memcmp(f.bytes, "hi", 2);
    int d = pp_pb_next(&c, &f, "t", err) == 1 && f.wire == PP_PB_FIXED32 && f.u == 0x04030201;
    TEST_COND("protobuf: varint, bytes, fixed32 fields read", a && b && d && pp_pb_next(&c, &f, "t", err) == 0);
    const uint8_t past[] = {0x12, 0x05, 'h', 'i'};
    c = pp_pb_open(past, sizeof past);
    TEST_COND("protobuf: a length past the end is refused",
              pp_pb_next(&c, &f, "t", err) == PP_EFORMAT && strstr(err, "past the"));
    const uint8_t group[] = {0x0b};
    c = pp_pb_open(group, sizeof group);
    TEST_COND("protobuf: groups are refused", pp_pb_next(&c, &f, "t", err) == PP_EFORMAT && strstr(err, "wire type 3"));
    const uint8_t overlong[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    c = pp_pb_open(overlong, sizeof overlong);
    TEST_COND("protobuf: an 11-byte varint is refused", pp_pb_next(&c, &f, "t", err) == PP_EFORMAT);
    const uint8_t truncated[] = {0x08, 0x80};
    c = pp_pb_open(truncated, sizeof truncated);
    TEST_COND("protobuf: a truncated varint is refused", pp_pb_next(&c, &f, "t", err) == PP_EFORMAT);
}

static void test_model(void) {
    char err[PP_ERR_LEN];
    pp_onnx_model *m = NULL;
    int rc = pp_onnx_open(BUNDLE "/temporal_step.onnx", &m, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("temporal_step.onnx opens with its external data", rc == 0);
    if (rc) return;
    const pp_onnx_value *in = pp_onnx_input_at(m, 0);
    TEST_COND("graph inputs with shapes (text_token [1, 1], past_k_all [L, 1, H, T, hd] with T symbolic)",
              pp_onnx_input_count(m) == 4 && !strcmp(in->name, "text_token") && in->ndim == 2 &&
                  pp_onnx_input_at(m, 2)->ndim == 5 && pp_onnx_input_at(m, 2)->dims[3] == -1);
    size_t nbits = 0, external = 0;
    for (size_t i = 0; i < pp_onnx_node_count(m); i++) {
        const pp_onnx_node *n = pp_onnx_node_at(m, i);
        if (strcmp(n->op_type, "MatMulNBits")) continue;
        nbits++;
        const pp_onnx_tensor *b = pp_onnx_constant(m, n->in[1]);
        const pp_onnx_attr *bits = pp_onnx_attr_find(n, "bits");
        external += b && b->data && b->nbytes == (size_t)b->numel && bits && bits->i == 8 &&
                    !strcmp(n->domain, "com.microsoft");
    }
    TEST_COND("13 MatMulNBits nodes, their B read from the .data file", nbits == 13 && external == 13);
    pp_onnx_close(m);

    /* a tensor whose external location leaves the folder */
    char dir[] = "/tmp/pp-onnx-XXXXXX", path[256];
    if (!mkdtemp(dir)) return;
    /* ModelProto{graph{initializer{dims 1, data_type 1, name "w", data_location 1,
     * external_data{key "location", value "../x"}}}} */
    const uint8_t model[] = {0x3a, 29,  0x2a, 27,  0x08, 0x01, 0x10, 0x01, 0x42, 0x01, 'w', 0x70, 0x01, 0x6a, 16, 0x0a,
                             8,    'l', 'o',  'c', 'a',  't',  'i',  'o',  'n',  0x12, 4,   '.',  '.',  '/',  'x'};
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(model, 1, sizeof model, f), fclose(f);
    rc = pp_onnx_open(path, &m, err);
    TEST_COND("an external location outside the folder is refused, naming tensor and location",
              rc == PP_EFORMAT && strstr(err, "'w'") && strstr(err, "../x"));
    rc = pp_onnx_parse(model, sizeof model, "mem", &m, err);
    TEST_COND("external data from memory is refused", rc == PP_EUNSUPPORTED);
    /* ModelProto{graph{initializer{dims 1, data_type 1, name "w", raw_data 1.0f} x2}}: the same
     * name twice is refused; "w" and "v" load */
    unsigned char twice[] = {0x3a, 30,   0x2a, 13,   0x08, 0x01, 0x10, 0x01, 0x42, 0x01, 'w',
                             0x4a, 4,    0,    0,    0x80, 0x3f, 0x2a, 13,   0x08, 0x01, 0x10,
                             0x01, 0x42, 0x01, 'w',  0x4a, 4,    0,    0,    0x80, 0x3f};
    rc = pp_onnx_parse(twice, sizeof twice, "mem", &m, err);
    TEST_COND("two initializers of one name are refused, naming it",
              rc == PP_EFORMAT && !m && strstr(err, "mem: two constants are named 'w'"));
    twice[25] = 'v';
    rc = pp_onnx_parse(twice, sizeof twice, "mem", &m, err);
    TEST_COND("two initializers of two names load", rc == 0 && m && pp_onnx_constant(m, "v"));
    pp_onnx_close(m);
    /* the same tensor's data in a file that is not there */
    uint8_t missing[sizeof model];
    memcpy(missing, model, sizeof model);
    memcpy(missing + sizeof model - 4, "nope", 4);
    f = fopen(path, "wb");
    if (f) fwrite(missing, 1, sizeof missing, f), fclose(f);
    rc = pp_onnx_open(path, &m, err);
    TEST_COND("a missing external-data file is named with the graph and the tensor reading it",
              rc != 0 && strstr(err, "m.onnx: tensor 'w': external data: ") && strstr(err, "/nope"));
    unlink(path);
    rmdir(dir);
}

static int copy_file(const char *from, const char *to) {
    unsigned char *buf;
    size_t len;
    char err[PP_ERR_LEN];
    FILE *f;
    if (pp_file_read_all(from, 1u << 28, &buf, &len, err)) return -1;
    int rc = pp_file_create(to, &f, err) || fwrite(buf, 1, len, f) != len || pp_file_commit(to, f, err);
    free(buf);
    return rc ? -1 : 0;
}

static void test_structure(void) {
    char err[PP_ERR_LEN], dir[] = "/tmp/pp-bundle-XXXXXX", a[256], b[256];
    if (!mkdtemp(dir)) return;
    /* the temporal graph where the depformer's should be */
    static const char *const files[][2] = {{"temporal_step.onnx", "temporal_step.onnx"},
                                           {"temporal_step.onnx.data", "temporal_step.onnx.data"},
                                           {"temporal_step.onnx", "depformer_step.onnx"}};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", BUNDLE, files[i][0]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i][1]);
        ok &= copy_file(a, b) == 0;
    }
    st_file *f = NULL;
    int rc = pp_st_open(dir, &f, err);
    TEST_COND("a depformer graph of the wrong structure is refused, naming the file",
              ok && rc == PP_EFORMAT && strstr(err, "depformer_step.onnx") && !f);
    /* a .data file cut short */
    snprintf(b, sizeof b, "%s/temporal_step.onnx.data", dir);
    ok = truncate(b, 1000) == 0;
    rc = pp_st_open(dir, &f, err);
    TEST_COND("external data past the end of its file is refused",
              ok && rc == PP_EFORMAT && strstr(err, "past the end"));
    for (int i = 0; i < 3; i++) {
        snprintf(b, sizeof b, "%s/%s", dir, files[i][1]);
        unlink(b);
    }
    rmdir(dir);

    rc = pp_st_open(BUNDLE, &f, err);
    TEST_COND("the int8 bundle opens as a checkpoint", rc == 0);
    if (rc) return;
    const st_tensor *z = pp_st_find(f, "transformer.layers.0.self_attn.in_proj_weight.zero_point");
    const st_tensor *w = pp_st_find(f, "depformer.layers.0.self_attn.in_proj_weight");
    const st_tensor *s = pp_st_find(f, "depformer.layers.0.self_attn.in_proj_weight.SCB");
    TEST_COND("MatMulNBits zero points kept; the INT8 step stacks become one [steps·3·dim, dim] weight per layer",
              z && z->dtype == ST_I8 && w && w->dtype == ST_I8 && s && w->shape[0] == s->shape[0] &&
                  w->shape[0] == 16 * 3 * w->shape[1]);
    pp_st_drop_data(f); /* what a device backend does once it holds every weight */
    TEST_COND("dropping the converted weights keeps the table, without data",
              pp_st_find(f, "text_linear.weight") && !pp_st_find(f, "text_linear.weight")->data);
    pp_st_close(f);

    /* the fuzz seeds convert completely from memory; the depformer's step scales stored float16 give the
     * same scales as float32, to f16 rounding, in every step (steps past the first are offset by the
     * scale's own width); the depformer's stacks stored [steps, N, K] for Gemm(transB) give the same
     * tensors as [steps, K, N] for MatMul (each step's own slice) */
    static const char *const seeds[] = {"bundle-int8", "bundle-int4", "bundle-mixed", "bundle-int8-f16-scales",
                                        "bundle-mixed-gemm"};
    enum { SEEDS_N = sizeof seeds / sizeof *seeds };
    st_tensor *tables[SEEDS_N] = {0};
    size_t counts[SEEDS_N] = {0};
    onnx_bundle *bundles[SEEDS_N] = {0};
    for (int i = 0; i < SEEDS_N; i++) {
        unsigned char *buf = NULL;
        size_t len, bytes;
        const void *base;
        snprintf(a, sizeof a, "%s/%s", SEEDS, seeds[i]);
        rc = pp_file_read_all(a, 1u << 24, &buf, &len, err);
        size_t first = rc ? 0 : (size_t)buf[1] | (size_t)buf[2] << 8 | (size_t)buf[3] << 16 | (size_t)buf[4] << 24;
        if (!rc)
            rc = pp_onnx_bundle_open_memory(buf + 5, first, buf + 5 + first, len - 5 - first, &tables[i], &counts[i],
                                            &base, &bytes, &bundles[i], err);
        if (rc) fprintf(stderr, "%s: %s\n", seeds[i], err);
        TEST_COND("fuzz seed bundle maps and converts", rc == 0);
        free(buf);
    }
    double worst = 0;
    int compared = 0;
    for (size_t k = 0; k < counts[0]; k++) {
        const st_tensor *x = &tables[0][k], *y = NULL;
        if (strncmp(x->name, "depformer.", 10) || !strstr(x->name, ".SCB")) continue;
        for (size_t j = 0; j < counts[3] && !y; j++)
            if (!strcmp(tables[3][j].name, x->name)) y = &tables[3][j];
        for (int64_t e = 0; y && y->numel == x->numel && e < x->numel; e++) {
            float u, v;
            memcpy(&u, x->data + 4 * e, 4);
            memcpy(&v, y->data + 4 * e, 4);
            if (fabs(v - u) > worst * fabs(u)) worst = fabs(v - u) / fabs(u);
        }
        compared += y && y->numel == x->numel;
    }
    TEST_COND("float16 step scales equal the float32 ones to f16 rounding, in all 4 projections of every step",
              compared == 2 + 2 * 16 && worst < 1e-3);
    size_t same = 0;
    for (size_t k = 0; k < counts[2] && counts[4] == counts[2]; k++) {
        const st_tensor *x = &tables[2][k], *y = &tables[4][k];
        same += !strcmp(x->name, y->name) && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
    }
    TEST_COND("Gemm(transB) step stacks load as the MatMul ones, every tensor byte for byte",
              counts[2] > 0 && same == counts[2]);
    for (int i = 0; i < SEEDS_N; i++) {
        free(tables[i]);
        pp_onnx_bundle_free(bundles[i]);
    }
}

static const st_tensor *table_find(const st_tensor *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

/* Seed NAME's two graphs (selector byte, u32 length of the first, then both) into *buf. */
static int read_seed(const char *name, unsigned char **buf, size_t *len, size_t *first, char *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", SEEDS, name);
    *buf = NULL; /* what the caller frees on every path */
    int rc = pp_file_read_all(path, 1u << 24, buf, len, err);
    if (rc) return rc;
    *first = *len > 5 ? (size_t)(*buf)[1] | (size_t)(*buf)[2] << 8 | (size_t)(*buf)[3] << 16 | (size_t)(*buf)[4] << 24
                      : 0;
    if (*len < 5 || *first > *len - 5) {
        free(*buf);
        *buf = NULL;
        return pp_fail(err, PP_EFORMAT, "%s: not a bundle seed", name);
    }
    return 0;
}

static const unsigned char *find_bytes(const unsigned char *hay, size_t n, const void *needle, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return hay + i;
    return NULL;
}

/* DequantizeLinear's axis says which way its scales run: along axis 0 of a square [K, N] weight
 * they are per input row, with the count of a per-column set; the loader refuses them. */
static void test_dequantize_axis(void) {
    char err[PP_ERR_LEN];
    unsigned char *buf;
    size_t len, first;
    if (read_seed("bundle-int8", &buf, &len, &first, err)) {
        TEST_COND("int8 seed read", 0);
        return;
    }
    /* the depformer's out_proj (16 x 16): its node's axis attribute -1, then the same 10 bytes for 0 */
    static const unsigned char axis_m1[] = {0x0a, 4,    'a',  'x',  'i',  's',  0x18, 0xff,
                                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    const unsigned char *node = find_bytes(buf + 5 + first, len - 5 - first, "/Gather_6_deq", 13);
    unsigned char *at = node ? (unsigned char *)find_bytes(node, (size_t)(buf + len - node), axis_m1, sizeof axis_m1)
                             : NULL;
    if (at) memcpy(at + 7, (const unsigned char[]){0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0}, 10);
    st_tensor *t = NULL;
    size_t count, size;
    const void *base;
    onnx_bundle *b = NULL;
    int rc = at ? pp_onnx_bundle_open_memory(buf + 5, first, buf + 5 + first, len - 5 - first, &t, &count, &base,
                                             &size, &b, err)
                : -1;
    TEST_COND("per-row scales (DequantizeLinear axis 0) of a square weight are refused, naming the node",
              rc == PP_EFORMAT && strstr(err, "'/Gather_6_deq'") && strstr(err, "axis 0"));
    free(t);
    pp_onnx_bundle_free(b);
    free(buf);
}

/* Where in the graph bytes g (a ModelProto's graph field) node NAME's field begins and ends. */
static int node_span(const unsigned char *g, size_t len, const char *name, size_t *start, size_t *end) {
    char err[PP_ERR_LEN];
    pp_pb c = pp_pb_open(g, len), n;
    pp_pb_field f, nf;
    for (const unsigned char *at = c.p; pp_pb_next(&c, &f, "g", err) == 1; at = c.p) {
        if (f.number != 1 || f.wire != PP_PB_BYTES) continue;
        n = pp_pb_open(f.bytes, f.len);
        while (pp_pb_next(&n, &nf, "n", err) == 1)
            if (nf.number == 3 && nf.len == strlen(name) && !memcmp(nf.bytes, name, nf.len)) {
                *start = (size_t)(at - g), *end = (size_t)(c.p - g);
                return 1;
            }
    }
    return 0;
}

static size_t put_varint(unsigned char *p, size_t v) {
    size_t n = 0;
    do p[n++] = (unsigned char)((v & 127) | (v > 127 ? 128 : 0));
    while (v >>= 7);
    return n;
}

/* A copy of model bytes m (*len, updated) where node NODE reads one more input, INPUT (a name
 * shorter than 128 bytes): the graph and node lengths grow by its field. NULL when not found. */
static unsigned char *add_input(const unsigned char *m, size_t *len, const char *node, const char *input) {
    char err[PP_ERR_LEN];
    pp_pb c = pp_pb_open(m, *len), nc;
    pp_pb_field f, nf;
    const unsigned char *g = NULL, *g_field = NULL;
    size_t g_len = 0, n0, n1, k = strlen(input);
    for (const unsigned char *at = c.p; !g && pp_pb_next(&c, &f, "m", err) == 1; at = c.p)
        if (f.number == 7 && f.wire == PP_PB_BYTES) g = f.bytes, g_len = f.len, g_field = at;
    if (!g || k > 127 || !node_span(g, g_len, node, &n0, &n1)) return NULL;
    nc = pp_pb_open(g + n0, n1 - n0);
    if (pp_pb_next(&nc, &nf, "n", err) != 1) return NULL;
    size_t body = nf.len + 2 + k, graph = g_len - (n1 - n0) + 1 + 10 + body; /* an upper bound until written */
    unsigned char *out = malloc(*len + 2 + k + 40), *node_buf = malloc(body + 12), *graph_buf = malloc(graph);
    if (!out || !node_buf || !graph_buf) return free(out), free(node_buf), free(graph_buf), NULL;
    size_t nn = 0, gn = 0, on = 0;
    node_buf[nn++] = 0x0a; /* GraphProto.node */
    nn += put_varint(node_buf + nn, body);
    memcpy(node_buf + nn, nf.bytes, nf.len), nn += nf.len;
    node_buf[nn++] = 0x0a, node_buf[nn++] = (unsigned char)k; /* NodeProto.input */
    memcpy(node_buf + nn, input, k), nn += k;
    memcpy(graph_buf, g, n0), gn = n0;
    memcpy(graph_buf + gn, node_buf, nn), gn += nn;
    memcpy(graph_buf + gn, g + n1, g_len - n1), gn += g_len - n1;
    memcpy(out, m, (size_t)(g_field - m)), on = (size_t)(g_field - m);
    out[on++] = 0x3a; /* ModelProto.graph */
    on += put_varint(out + on, gn);
    memcpy(out + on, graph_buf, gn), on += gn;
    memcpy(out + on, g + g_len, (size_t)(m + *len - (g + g_len))), on += (size_t)(m + *len - (g + g_len));
    free(node_buf);
    free(graph_buf);
    *len = on;
    return out;
}

/* A copy of model bytes m (*len, updated) whose graph ends with the GraphProto fields extra[n]. */
static unsigned char *append_to_graph(const unsigned char *m, size_t *len, const unsigned char *extra, size_t n) {
    char err[PP_ERR_LEN];
    pp_pb c = pp_pb_open(m, *len);
    pp_pb_field f;
    const unsigned char *g = NULL, *g_field = NULL;
    size_t g_len = 0, on;
    for (const unsigned char *at = c.p; !g && pp_pb_next(&c, &f, "m", err) == 1; at = c.p)
        if (f.number == 7 && f.wire == PP_PB_BYTES) g = f.bytes, g_len = f.len, g_field = at;
    unsigned char *out = g ? malloc(*len + n + 10) : NULL;
    if (!out) return NULL;
    memcpy(out, m, (size_t)(g_field - m)), on = (size_t)(g_field - m);
    out[on++] = 0x3a; /* ModelProto.graph */
    on += put_varint(out + on, g_len + n);
    memcpy(out + on, g, g_len), on += g_len;
    memcpy(out + on, extra, n), on += n;
    memcpy(out + on, g + g_len, (size_t)(m + *len - (g + g_len))), on += (size_t)(m + *len - (g + g_len));
    *len = on;
    return out;
}

/* Sets initializer NAME's data_type (a one-byte varint) in model bytes m, in place; 0 when not found. */
static int set_initializer_dtype(unsigned char *m, size_t len, const char *name, int dtype) {
    char err[PP_ERR_LEN];
    pp_pb c = pp_pb_open(m, len), gc, tc;
    pp_pb_field f, gf, tf;
    while (pp_pb_next(&c, &f, "m", err) == 1) {
        if (f.number != 7 || f.wire != PP_PB_BYTES) continue;
        gc = pp_pb_open(f.bytes, f.len);
        while (pp_pb_next(&gc, &gf, "g", err) == 1) {
            if (gf.number != 5 || gf.wire != PP_PB_BYTES) continue;
            unsigned char *type_at = NULL;
            int named = 0;
            tc = pp_pb_open(gf.bytes, gf.len);
            for (const unsigned char *at = tc.p; pp_pb_next(&tc, &tf, "t", err) == 1; at = tc.p) {
                if (tf.number == 2 && tc.p == at + 2) type_at = (unsigned char *)at + 1;
                if (tf.number == 8 && tf.len == strlen(name) && !memcmp(tf.bytes, name, tf.len)) named = 1;
            }
            if (named && type_at) {
                *type_at = (unsigned char)dtype;
                return 1;
            }
        }
    }
    return 0;
}

/* ONNX requires a zero point of its codes' type; an int8 one of uint8 codes (or the reverse) would
 * offset every weight by 128 if read. MatMulInteger's B zero point and DequantizeLinear's. */
static void test_zero_point_type(void) {
    char err[PP_ERR_LEN] = "";
    unsigned char *buf;
    size_t len, first, count, size;
    st_tensor *tensors = NULL;
    const void *base;
    onnx_bundle *b = NULL;
    /* bundle-mixed: the temporal graph's first MatMulInteger has int8 B and an int8 zero point */
    int rc = read_seed("bundle-mixed", &buf, &len, &first, err);
    int found = !rc && set_initializer_dtype(buf + 5, first, "onnx__MatMul_610_zero_point", 2 /* uint8 */);
    rc = found ? pp_onnx_bundle_open_memory(buf + 5, first, buf + 5 + first, len - 5 - first, &tensors, &count, &base,
                                            &size, &b, err)
               : -1;
    if (rc != PP_EFORMAT) fprintf(stderr, "MatMulInteger zero point: rc %d %s\n", rc, err);
    TEST_COND("a uint8 zero point of int8 MatMulInteger weights is refused, naming the node and both types",
              rc == PP_EFORMAT && strstr(err, "'/MatMul_mmi'") && strstr(err, "is uint8") && strstr(err, "int8: they"));
    free(tensors), tensors = NULL;
    pp_onnx_bundle_free(b), b = NULL;
    free(buf);

    /* bundle-int8: the depformer's out_proj DequantizeLinear (int8 [16 steps, 16, 16] codes, 256
     * scales) gets a zero point of 256 values, int8 zeros (accepted) or uint8 128s (refused) */
    for (int type = 3; type >= 2; type--) {
        if (read_seed("bundle-int8", &buf, &len, &first, err)) {
            TEST_COND("int8 seed read", 0);
            return;
        }
        /* GraphProto.initializer: TensorProto{dims 16, 16; data_type; name "zp"; raw_data 256 bytes} */
        unsigned char field[3 + 13 + 256] = {0x2a, 0, 0, 0x08, 16, 0x08, 16, 0x10, (unsigned char)type,
                                             0x42, 2,  'z', 'p', 0x4a, 0x80, 0x02};
        put_varint(field + 1, 13 + 256); /* two bytes */
        memset(field + 16, type == 3 ? 0 : 128, 256);
        size_t fn = sizeof field, d_len = len - 5 - first;
        unsigned char *with_input = add_input(buf + 5 + first, &d_len, "/Gather_6_deq", "zp");
        unsigned char *d = with_input ? append_to_graph(with_input, &d_len, field, fn) : NULL;
        rc = d ? pp_onnx_bundle_open_memory(buf + 5, first, d, d_len, &tensors, &count, &base, &size, &b, err) : -1;
        if (type == 3) {
            if (rc) fprintf(stderr, "int8 zero point: rc %d %s\n", rc, err);
            TEST_COND("an int8 zero point of int8 DequantizeLinear codes loads", rc == 0);
        } else {
            if (rc != PP_EFORMAT) fprintf(stderr, "uint8 zero point: rc %d %s\n", rc, err);
            TEST_COND("a uint8 zero point of int8 DequantizeLinear codes is refused, naming the node",
                      rc == PP_EFORMAT && strstr(err, "'/Gather_6_deq'") && strstr(err, "zero point 'zp' is uint8"));
        }
        free(tensors), tensors = NULL;
        pp_onnx_bundle_free(b), b = NULL;
        free(d);
        free(with_input);
        free(buf);
    }
}

/* Inputs that change a projection's values are refused, not dropped: MatMulNBits' g_idx (blocks
 * in another order) and Gemm's bias C. */
static void test_projection_inputs(void) {
    static const struct {
        const char *seed, *node, *input;
        int depformer;
    } cases[] = {{"bundle-int8", "/out_proj/MatMul_Q8", "g_idx", 0},
                 {"bundle-mixed-gemm", "/MatMul_4_gemm", "bias", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[PP_ERR_LEN] = "", want[80];
        unsigned char *buf, *edited = NULL;
        size_t len, first;
        if (read_seed(cases[i].seed, &buf, &len, &first, err)) {
            TEST_COND("seed read", 0);
            continue;
        }
        const unsigned char *t = buf + 5, *d = buf + 5 + first;
        size_t t_len = first, d_len = len - 5 - first;
        if (cases[i].depformer)
            d = edited = add_input(d, &d_len, cases[i].node, cases[i].input);
        else
            t = edited = add_input(t, &t_len, cases[i].node, cases[i].input);
        st_tensor *tensors = NULL;
        size_t count, size;
        const void *base;
        onnx_bundle *b = NULL;
        int rc = edited ? pp_onnx_bundle_open_memory(t, t_len, d, d_len, &tensors, &count, &base, &size, &b, err) : -1;
        snprintf(want, sizeof want, "'%s'", cases[i].node);
        TEST_COND("a projection with g_idx or a bias input is refused, naming the node",
                  rc == PP_EFORMAT && strstr(err, want));
        if (rc != PP_EFORMAT) fprintf(stderr, "%s: rc %d %s\n", cases[i].node, rc, err);
        free(tensors);
        pp_onnx_bundle_free(b);
        free(edited);
        free(buf);
    }
}

/* The audio embeddings' Gathers depend on nothing of one another, so any order of them is a
 * valid graph: emb.1's nodes before emb.0's must still load emb.0 from the Gather of codebook 0. */
static void test_embedding_order(void) {
    char err[PP_ERR_LEN];
    unsigned char *buf, *moved = NULL;
    size_t len, first, g_len = 0;
    if (read_seed("bundle-int8", &buf, &len, &first, err)) {
        TEST_COND("int8 seed read", 0);
        return;
    }
    /* the temporal graph: ModelProto field 7 */
    pp_pb c = pp_pb_open(buf + 5, first);
    pp_pb_field f;
    unsigned char *g = NULL;
    while (!g && pp_pb_next(&c, &f, "m", err) == 1)
        if (f.number == 7 && f.wire == PP_PB_BYTES) g = (unsigned char *)f.bytes, g_len = f.len;
    /* [/Slice .. /emb.0/Where] [/Add] [/Constant_5 .. /emb.1/Where] -> the third, the first, the second */
    size_t a0, a1, add0, add1, b0, b1, x;
    int found = g && node_span(g, g_len, "/Slice", &a0, &x) && node_span(g, g_len, "/emb.0/Where", &x, &a1) &&
                node_span(g, g_len, "/Add", &add0, &add1) && node_span(g, g_len, "/Constant_5", &b0, &x) &&
                node_span(g, g_len, "/emb.1/Where", &x, &b1) && a1 == add0 && add1 == b0 && (moved = malloc(b1 - a0));
    if (found) {
        memcpy(moved, g + b0, b1 - b0);
        memcpy(moved + (b1 - b0), g + a0, a1 - a0);
        memcpy(moved + (b1 - b0) + (a1 - a0), g + add0, add1 - add0);
        memcpy(g + a0, moved, b1 - a0);
    }
    st_tensor *t = NULL;
    size_t count = 0, size;
    const void *base;
    onnx_bundle *b = NULL;
    int rc = found ? pp_onnx_bundle_open_memory(buf + 5, first, buf + 5 + first, len - 5 - first, &t, &count, &base,
                                                &size, &b, err)
                   : -1;
    if (rc > 0 || rc < -1) fprintf(stderr, "%s\n", err);
    /* the seed's tables: emb.K's first row differs from every other's */
    const st_tensor *e0 = rc ? NULL : table_find(t, count, "emb.0.weight");
    const st_tensor *e1 = rc ? NULL : table_find(t, count, "emb.1.weight");
    st_tensor *ref = NULL;
    size_t ref_count = 0;
    onnx_bundle *rb = NULL;
    unsigned char *orig;
    size_t olen, ofirst;
    int rrc = read_seed("bundle-int8", &orig, &olen, &ofirst, err);
    if (!rrc) {
        rrc = pp_onnx_bundle_open_memory(orig + 5, ofirst, orig + 5 + ofirst, olen - 5 - ofirst, &ref, &ref_count,
                                         &base, &size, &rb, err);
        free(orig);
    }
    const st_tensor *r0 = rrc ? NULL : table_find(ref, ref_count, "emb.0.weight");
    const st_tensor *r1 = rrc ? NULL : table_find(ref, ref_count, "emb.1.weight");
    TEST_COND("audio embeddings in another node order keep their codebooks (emb.0, emb.1 byte for byte)",
              found && e0 && e1 && r0 && r1 && e0->nbytes == r0->nbytes && !memcmp(e0->data, r0->data, r0->nbytes) &&
                  !memcmp(e1->data, r1->data, r1->nbytes) && memcmp(r0->data, r1->data, r0->nbytes));
    free(moved);
    free(t);
    pp_onnx_bundle_free(b);
    free(ref);
    pp_onnx_bundle_free(rb);
    free(buf);
}

static void test_voice_and_prompts(void) {
    char err[PP_ERR_LEN], path[512];
    pp_voice v;
    int rc = pp_voice_resolve(BUNDLE "/voices", "NATF2", path, sizeof path, err);
    TEST_COND("voice NATF2 resolves to voices/NATF2.bin", rc == 0 && strstr(path, "NATF2.bin"));
    rc = pp_voice_load(path, 128, &v, err);
    TEST_COND("voices/NATF2.bin loads (3 frames x 128)", rc == 0 && v.frames == 3 && v.dim == 128);
    pp_voice_free(&v);
    char **names;
    size_t count;
    rc = pp_voice_list(BUNDLE "/voices", &names, &count, err);
    TEST_COND("the bundle's voices are listed", rc == 0 && count == 1 && !strcmp(names[0], "NATF2"));
    if (!rc) free(names);
    unsigned char *buf;
    size_t len;
    if (pp_file_read_all(path, 1u << 20, &buf, &len, err)) return;
    TEST_COND("a voice .bin one byte short is refused",
              pp_voice_load_sc_memory(buf, len - 1, "v.bin", 0, &v, err) == PP_EFORMAT);
    buf[0] ^= 1;
    TEST_COND("a voice .bin with another magic is refused",
              pp_voice_load_sc_memory(buf, len, "v.bin", 0, &v, err) == PP_EFORMAT && strstr(err, "magic"));
    free(buf);

    pp_prompts *p;
    rc = pp_prompts_load(BUNDLE "/system_prompts.bin", &p, err);
    TEST_COND("system_prompts.bin loads its 4 prompts", rc == 0 && pp_prompts_count(p) == 4);
    if (rc) return;
    const int32_t *ids;
    size_t n;
    rc = pp_prompts_find(p, "expert", &ids, &n, err);
    TEST_COND("prompt 'expert' is [9, 8, 7]", rc == 0 && n == 3 && ids[0] == 9 && ids[2] == 7);
    rc = pp_prompts_find(p, "nope", &ids, &n, err);
    TEST_COND("an unknown prompt name lists those there are",
              rc == PP_ENOTFOUND && strstr(err, "helpful, expert, warm, direct"));
    pp_prompts_free(p);
    const uint8_t dup[] = {0x73, 0x65, 0x50, 0x50, 1, 0, 0, 0, 2, 0, 0,   0, 1, 0, 0,
                           0,    'a',  0,    0,    0, 0, 1, 0, 0, 0, 'a', 0, 0, 0, 0};
    TEST_COND("a prompt named twice is refused",
              pp_prompts_parse(dup, sizeof dup, "p", &p, err) == PP_EFORMAT && strstr(err, "twice"));
    TEST_COND("a prompts file cut short is refused", pp_prompts_parse(dup, sizeof dup - 2, "p", &p, err) == PP_EFORMAT);
}

/* A text prompt "@NAME" runs the named prompt's ids; unknown names and ids past the vocabulary
 * are refused when the conversation is created. */
static void test_named_prompt(void) {
    char err[PP_ERR_LEN], dir[] = "/tmp/pp-prompts-XXXXXX", path[256];
    if (!mkdtemp(dir)) return;
    pp_demo_files files;
    if (pp_demo_write(dir, &files, err)) {
        TEST_COND("demo model written", 0);
        return;
    }
    /* helpful [5, 6, 7], big [1000000] */
    const uint8_t prompts[] = {0x73, 0x65, 0x50, 0x50, 1,   0, 0, 0,   2,   0,   0, 0, 7, 0, 0,    0,    'h',  'e',
                               'l',  'p',  'f',  'u',  'l', 3, 0, 0,   0,   5,   0, 0, 0, 6, 0,    0,    0,    7,
                               0,    0,    0,    3,    0,   0, 0, 'b', 'i', 'g', 1, 0, 0, 0, 0x40, 0x42, 0x0f, 0};
    snprintf(path, sizeof path, "%s/system_prompts.bin", dir);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(prompts, 1, sizeof prompts, f), fclose(f);
    pp_backend *be = NULL;
    pp_model *m = NULL;
    pp_model_paths paths = pp_demo_paths(&files);
    paths.prompts = path;
    int rc = pp_backend_cpu_create(1, &be, err);
    if (!rc) rc = pp_model_open(be, &paths, &m, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("a model opens with its system prompts",
              rc == 0 && pp_model_prompt_count(m) == 2 && !strcmp(pp_model_prompt_name(m, 1), "big"));
    if (!rc) {
        pp_session_params p;
        pp_session *s = NULL;
        pp_params_defaults(&p);
        snprintf(p.text_prompt, sizeof p.text_prompt, "@helpful");
        rc = pp_session_create(m, &p, 64, &s, err);
        TEST_COND("text prompt @helpful starts a conversation", rc == 0);
        pp_session_destroy(s);
        snprintf(p.text_prompt, sizeof p.text_prompt, "@nope");
        TEST_COND("@nope is refused, naming the prompts there are",
                  pp_session_create(m, &p, 64, &s, err) == PP_ENOTFOUND && strstr(err, "helpful, big"));
        snprintf(p.text_prompt, sizeof p.text_prompt, "@big");
        /* EFORMAT: the server's file, not the client (who would otherwise get a 1008 close). */
        TEST_COND("a prompt with ids past the text vocabulary is refused as the file's fault",
                  pp_session_create(m, &p, 64, &s, err) == PP_EFORMAT && strstr(err, "vocabulary"));
    }
    pp_model_close(m);
    pp_backend_destroy(be);
    test_remove_dir(dir);
}

#define CODEC PP_TEST_DATA "/golden/mimi-onnx"

static size_t le32(const unsigned char *p) {
    return (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
}

static float f32_at(const st_tensor *t, int64_t i) {
    float v;
    memcpy(&v, t->data + 4 * i, 4);
    return v;
}

/* The codebook's row value: embedding_sum / max(cluster_usage, 1e-5), as the codec computes it. */
static float codeword(const st_tensor *sum, const st_tensor *usage, int64_t i) {
    float n = f32_at(usage, i / sum->shape[1]);
    return f32_at(sum, i) / (n > 1e-5f ? n : 1e-5f);
}

/* cluster_usage's name beside embedding_sum's. */
static void usage_name(const char *sum_name, char *out, size_t cap) {
    snprintf(out, cap, "%.*scluster_usage", (int)(strlen(sum_name) - strlen("embedding_sum")), sum_name);
}

/* Whether tensors x and y (F32) hold the same values; codebooks compared by their rows. */
static int same_values(const st_tensor *x, const st_tensor *xu, const st_tensor *y, const st_tensor *yu) {
    if (!x || !y || x->numel != y->numel || x->dtype != ST_F32 || y->dtype != ST_F32) return 0;
    if (!xu || !yu) return !memcmp(x->data, y->data, x->nbytes);
    if (xu->numel * x->shape[1] != x->numel || yu->numel * y->shape[1] != y->numel || x->shape[1] != y->shape[1])
        return 0;
    for (int64_t k = 0; k < x->numel; k++)
        if (codeword(x, xu, k) != codeword(y, yu, k)) return 0;
    return 1;
}

/* A codec fuzz seed (selector 3; config.json, encoder and decoder, each length-prefixed) converted. */
typedef struct codec_seed {
    unsigned char *buf;
    const unsigned char *enc;
    size_t enc_len, len;
    pp_tensor_list want;
    st_tensor *tensors;
    size_t count;
    onnx_bundle *b;
} codec_seed;

/* Puts decoder nodes [/Constant_19 .. /Transpose_4] (codebook 1 of rvq_rest) before
 * [/Constant_17 .. /Add_1] (its codebook 0): a valid order of the same graph. 0 when not found. */
static int reorder_codebooks(unsigned char *dec, size_t len) {
    pp_pb c = pp_pb_open(dec, len);
    pp_pb_field f;
    char err[PP_ERR_LEN];
    unsigned char *g = NULL, *moved;
    size_t g_len = 0, a0, a1, b0, b1, x;
    while (!g && pp_pb_next(&c, &f, "m", err) == 1)
        if (f.number == 7 && f.wire == PP_PB_BYTES) g = (unsigned char *)f.bytes, g_len = f.len;
    if (!g || !node_span(g, g_len, "/Constant_17", &a0, &x) || !node_span(g, g_len, "/Add_1", &x, &a1) ||
        !node_span(g, g_len, "/Constant_19", &b0, &x) || !node_span(g, g_len, "/Transpose_4", &x, &b1) || a1 != b0 ||
        !(moved = malloc(b1 - a0)))
        return 0;
    memcpy(moved, g + b0, b1 - b0);
    memcpy(moved + (b1 - b0), g + a0, a1 - a0);
    memcpy(g + a0, moved, b1 - a0);
    free(moved);
    return 1;
}

/* reorder: the decoder's codebook Gathers in another valid order first (reorder_codebooks). */
static int codec_seed_open(const char *name, int reorder, codec_seed *s, char *err) {
    char path[512];
    size_t len = 0, size;
    const void *base;
    memset(s, 0, sizeof *s);
    snprintf(path, sizeof path, "%s/%s", SEEDS, name);
    int rc = pp_file_read_all(path, 1u << 24, &s->buf, &len, err);
    if (rc) return rc;
    s->len = len;
    size_t cfg_len = len > 9 ? le32(s->buf + 1) : len;
    s->enc_len = cfg_len + 9 <= len ? le32(s->buf + 5 + cfg_len) : len;
    if (s->buf[0] != 3 || s->enc_len > len - 9 - cfg_len) return pp_fail(err, PP_EFORMAT, "%s: not a codec seed", name);
    s->enc = s->buf + 9 + cfg_len;
    mimi_config cfg;
    pp_mimi_config_default(&cfg);
    rc = pp_mimi_config_parse((const char *)s->buf + 5, cfg_len, name, &cfg, err);
    if (!rc) rc = pp_mimi_catalog_list(&cfg, &s->want, err);
    if (!rc && reorder && !reorder_codebooks(s->buf + 9 + cfg_len + s->enc_len, len - 9 - cfg_len - s->enc_len))
        rc = pp_fail(err, PP_EFORMAT, "%s: codebook nodes not found", name);
    if (!rc)
        rc = pp_onnx_mimi_open_memory(s->enc, s->enc_len, s->enc + s->enc_len, len - 9 - cfg_len - s->enc_len, &s->want,
                                      &s->tensors, &s->count, &base, &size, &s->b, err);
    return rc;
}

static void codec_seed_close(codec_seed *s) {
    free(s->tensors);
    pp_onnx_bundle_free(s->b);
    pp_tensor_list_free(&s->want);
    free(s->buf);
}

/* Converts the seed's graphs again, from its bytes as they are now. */
static int codec_seed_reopen(codec_seed *s, char *err) {
    const void *base;
    size_t size, dec_len = s->len - (size_t)(s->enc + s->enc_len - s->buf);
    free(s->tensors), s->tensors = NULL;
    pp_onnx_bundle_free(s->b), s->b = NULL;
    return pp_onnx_mimi_open_memory(s->enc, s->enc_len, s->enc + s->enc_len, dec_len, &s->want, &s->tensors, &s->count,
                                    &base, &size, &s->b, err);
}

/* Replaces the first `from` (n bytes) after the first mention of NODE in the seed by `to`. */
static int patch_node(codec_seed *s, const char *node, const void *from, const void *to, size_t n) {
    unsigned char *at = (unsigned char *)find_bytes(s->buf, s->len, node, strlen(node));
    at = at ? (unsigned char *)find_bytes(at, (size_t)(s->buf + s->len - at), from, n) : NULL;
    if (at) memcpy(at, to, n);
    return at != NULL;
}

/* A convolution node whose stride, group, dilation or padding is not the codec's computes another
 * model's function: refused, naming the node. A Transpose of a weight with perm [0, 1] keeps it
 * as stored; the loader used to transpose it as if the perm were [1, 0]. */
static void test_codec_node_attrs(void) {
    static const char conv[] = "/encoder/model/model.0/conv/conv/Conv",
                      up[] = "/upsample/convtr/convtr/convtr/ConvTranspose";
    static const struct {
        const char *node, *from, *to, *needle;
        size_t n;
    } cases[] = {
        {conv, "strides\x40\x01", "strides\x40\x02", "(stride 1, group 1)", 9},
        {conv, "dilations\x40\x01", "dilations\x40\x02", "dilations other than [1]", 11},
        {conv, "pads\x40\x00\x40\x00", "pads\x40\x06\x40\x00", "pads or auto_pad", 8},
        {up, "group\x18\x08", "group\x18\x01", "(stride 2, group 8)", 7},
    };
    char err[PP_ERR_LEN] = "", want[128];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        codec_seed s;
        int rc = codec_seed_open("codec", 0, &s, err);
        int patched = !rc && patch_node(&s, cases[i].node, cases[i].from, cases[i].to, cases[i].n);
        rc = patched ? codec_seed_reopen(&s, err) : -1;
        snprintf(want, sizeof want, "node '%s'", cases[i].node);
        if (rc != PP_EFORMAT) fprintf(stderr, "%s, %s: rc %d %s\n", cases[i].node, cases[i].needle, rc, err);
        TEST_COND("a convolution with another stride, group, dilation or padding is refused, naming the node",
                  rc == PP_EFORMAT && strstr(err, want) && strstr(err, cases[i].needle));
        codec_seed_close(&s);
    }
    /* codec-unfolded: out_proj's weight [8, 8] reaches its MatMul through Transpose(perm [1, 0]) */
    codec_seed ref, s;
    const char *key = "encoder_transformer.transformer.layers.0.self_attn.out_proj.weight";
    int rc = codec_seed_open("codec-unfolded", 0, &ref, err);
    if (!rc) rc = codec_seed_open("codec-unfolded", 0, &s, err);
    int patched = !rc && patch_node(&s, "/encoder_transformer/transformer/layers.0/self_attn/out_proj/Transpose",
                                    "perm\x40\x01\x40\x00", "perm\x40\x00\x40\x01", 8);
    rc = patched ? codec_seed_reopen(&s, err) : -1;
    if (rc) fprintf(stderr, "identity Transpose: rc %d %s\n", rc, err);
    const st_tensor *x = rc ? NULL : table_find(ref.tensors, ref.count, key);
    const st_tensor *y = rc ? NULL : table_find(s.tensors, s.count, key);
    int transposed = x && y && x->ndim == 2 && x->shape[0] == x->shape[1] && x->dtype == ST_F32 && y->dtype == ST_F32;
    for (int64_t r = 0; transposed && r < x->shape[0]; r++)
        for (int64_t c = 0; c < x->shape[1]; c++)
            transposed &= !memcmp(x->data + 4 * (r * x->shape[1] + c), y->data + 4 * (c * x->shape[1] + r), 4);
    TEST_COND("a weight through Transpose(perm [0, 1]) is read as stored: the transpose of the [1, 0] one", transposed);
    codec_seed_close(&ref);
    codec_seed_close(&s);
}

static void test_codec(void) {
    char err[PP_ERR_LEN];
    st_file *f = NULL, *ref = NULL;
    int rc = pp_mimi_weights_open(CODEC "/bundle/mimi_encoder.onnx", CODEC "/config.json", &f, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("the codec graphs open as the codec's weights", rc == 0);
    if (!rc) rc = pp_st_open(PP_TEST_DATA "/golden/mimi-synth/model.safetensors", &ref, err);
    if (rc) return pp_st_close(f);
    /* the graphs were exported from mimi-synth's weights: every tensor read from them is the
     * checkpoint's, bit for bit (a codebook as its rows, embedding_sum / cluster_usage) */
    size_t same = 0, codebooks = 0;
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i), *tu = NULL, *ru = NULL;
        char u[160];
        if (strstr(t->name, "cluster_usage")) { /* compared with its codebook */
            same++;
            continue;
        }
        if (strstr(t->name, "embedding_sum")) {
            usage_name(t->name, u, sizeof u);
            tu = pp_st_find(f, u), ru = pp_st_find(ref, u);
        }
        int ok = same_values(t, tu, pp_st_find(ref, t->name), ru);
        same += ok;
        codebooks += ok && tu;
    }
    TEST_COND("all 118 codec tensors equal mimi-synth's, its 8 codebooks as their rows",
              pp_st_count(f) == 118 && same == 118 && codebooks == 8);
    pp_st_close(f);
    pp_st_close(ref);

    /* the released codec's configuration against the tiny graphs: the first convolution differs */
    rc = pp_mimi_weights_open(CODEC "/bundle/mimi_encoder.onnx", NULL, &f, err);
    TEST_COND("graphs of another configuration are refused, naming node, tensor and both shapes",
              rc == PP_EFORMAT && strstr(err, "mimi_encoder.onnx: node '") &&
                  strstr(err, "'encoder.model.0.conv.conv.weight' is [64, 1, 7]"));
    /* the fuzz seeds' micro codec converts from memory, exported with constant folding and
     * without it (weights through Transpose, codebooks through Div): the same tensors, byte for
     * byte; its encoder read as the decoder has a convolution where the first codebook should be */
    codec_seed folded, unfolded;
    rc = codec_seed_open("codec", 0, &folded, err);
    if (rc) fprintf(stderr, "codec seed: %s\n", err);
    TEST_COND("the codec fuzz seed maps and converts, every tensor of its list",
              rc == 0 && folded.count == folded.want.n);
    rc = codec_seed_open("codec-unfolded", 0, &unfolded, err);
    if (rc) fprintf(stderr, "codec-unfolded seed: %s\n", err);
    same = 0;
    for (size_t k = 0; !rc && k < folded.count && unfolded.count == folded.count; k++) {
        const st_tensor *x = &folded.tensors[k], *xu = NULL, *yu = NULL;
        char u[160];
        if (strstr(x->name, "cluster_usage")) {
            same++;
            continue;
        }
        if (strstr(x->name, "embedding_sum")) {
            usage_name(x->name, u, sizeof u);
            xu = table_find(folded.tensors, folded.count, u), yu = table_find(unfolded.tensors, unfolded.count, u);
        }
        same += same_values(x, xu, table_find(unfolded.tensors, unfolded.count, x->name), yu);
    }
    TEST_COND("the codec exported without constant folding gives the same tensors", rc == 0 && same == folded.count);
    /* rvq_rest's codebook Gathers depend on nothing of one another: another order of them reads
     * each codebook from the Gather its codes select, not from the next Gather in node order */
    codec_seed reordered;
    rc = codec_seed_open("codec", 1, &reordered, err);
    if (rc) fprintf(stderr, "reordered codec seed: %s\n", err);
    same = 0;
    for (size_t k = 0; !rc && k < folded.count && reordered.count == folded.count; k++) {
        const st_tensor *x = &folded.tensors[k], *y = table_find(reordered.tensors, reordered.count, x->name);
        same += y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
    }
    /* (the graph holds two rvq_rest levels, of different values; the codec reads the first) */
    TEST_COND("codebook Gathers in another node order give the same tensors", rc == 0 && same == folded.count &&
                                                                                   folded.count > 0);
    codec_seed_close(&reordered);
    st_tensor *tensors = NULL;
    size_t count = 0, size;
    const void *base;
    onnx_bundle *b = NULL;
    rc = folded.want.n ? pp_onnx_mimi_open_memory(folded.enc, folded.enc_len, folded.enc, folded.enc_len, &folded.want,
                                                  &tensors, &count, &base, &size, &b, err)
                       : 0;
    TEST_COND("a decoder graph without codebooks is refused, naming the node found and the tensor wanted",
              rc == PP_EFORMAT && strstr(err, "mimi_decoder.onnx: node '") && strstr(err, "(Conv) is a convolution") &&
                  strstr(err, "'quantizer.rvq_first.vq.layers.0._codebook.embedding_sum' (a codebook Gather)"));
    codec_seed_close(&folded);
    codec_seed_close(&unfolded);
}

int main(void) {
    pp_log_set_level(PP_LOG_WARN);
    test_protobuf();
    test_model();
    test_structure();
    test_dequantize_axis();
    test_embedding_order();
    test_projection_inputs();
    test_zero_point_type();
    test_voice_and_prompts();
    test_named_prompt();
    test_codec();
    test_codec_node_attrs();
    return test_report();
}
