/* test_gguf: GGUF checkpoints. The golden lm-q4k file is rewritten by a small writer here into
 * the variants users meet: sts-web's pruned layout (a layer removed, the rest renumbered, a KV
 * block_count that lies), byte-sharded copies (whole pages, mapped; odd sizes, read), moshi.cpp's
 * `lm.` names and per-step attention projections. Each must load as the
 * model it stores (every tensor equal to the source's); the malformed copies (truncated, a
 * tensor past the end, an unknown type, a shape the config rejects, a missing shard, tensor data
 * out of ggml's layout) must be
 * refused with one line naming the file and the tensor. The Q4_0/Q8_0/Q4_K decoders are
 * checked on hand-made blocks. */
#define _DEFAULT_SOURCE /* open_memstream, mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "io/gguf.h"
#include "io/quant.h"
#include "io/weight.h"
#include "model/lm.h"
#include "model/transformer.h"
#include "test.h"

#define CASE PP_TEST_DATA "/golden/lm-q4k"

/* ---- a minimal GGUF writer ---------------------------------------------------------------- */

/* The writer streams into memory (open_memstream): b.p and b.n are valid after finish(). */
typedef struct {
    FILE *f;
    char *p;
    size_t n;
} buf;

static void open_buf(buf *b) {
    b->p = NULL;
    b->n = 0;
    if (!(b->f = open_memstream(&b->p, &b->n))) abort();
}
static void finish(buf *b) {
    if (fclose(b->f)) abort();
}
static void put(buf *b, const void *src, size_t n) {
    if (n && fwrite(src, 1, n, b->f) != n) abort();
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static size_t pos(buf *b) { return (size_t)ftell(b->f); }
static void pad(buf *b) {
    static const uint8_t zero[32];
    put(b, zero, (32 - pos(b) % 32) % 32);
}

static uint32_t ggml_type_of(st_dtype dt) {
    return dt == ST_F32 ? 0 : dt == ST_F16 ? 1 : dt == ST_Q4_0 ? 2 : dt == ST_Q8_0 ? 8 : dt == ST_Q4_K ? 12 : 30;
}

/* What a variant does to the source: a transformer layer to drop (later ones move down), a
 * name prefix, a tensor whose type or outer dimension to corrupt. */
typedef struct {
    int drop_layer;
    const char *prefix;
    const char *bad_type, *bad_rows;
    int split_steps; /* the attention projections as moshi.cpp's per-step tensors (the temporal one as step 0) */
    const char *nan_scale; /* a tensor whose block nan_block gets a NaN f16 scale at byte nan_at of the block */
    int nan_block, nan_at;
} variant;

#define DEP_STEPS 16 /* lm-q4k's dep_q */

/* How many per-step tensors the variant splits attention projection t into (0: none; the
 * depformer's DEP_STEPS, the temporal transformer's 1), and the base of their names
 * (`...self_attn.in_projs`). */
static int split_name(const variant *v, const char *name, char *base, size_t cap) {
    const char *in = strstr(name, ".self_attn.in_proj_weight"), *out = strstr(name, ".self_attn.out_proj.weight");
    if (!v->split_steps || (!in && !out)) return 0;
    const char *at = in ? in : out;
    snprintf(base, cap, "%s%.*s.self_attn.%s", v->prefix, (int)(at - name), name, in ? "in_projs" : "out_projs");
    return strncmp(name, "depformer.", 10) ? 1 : DEP_STEPS;
}

/* The name tensor t gets in the variant, or 0 when the variant drops it. */
static int rename_tensor(const variant *v, const char *name, char *out, size_t cap) {
    int l, k;
    if (v->drop_layer >= 0 && sscanf(name, "transformer.layers.%d.%n", &l, &k) == 1) {
        if (l == v->drop_layer) return 0;
        snprintf(out, cap, "%stransformer.layers.%d.%s", v->prefix, l > v->drop_layer ? l - 1 : l, name + k);
        return 1;
    }
    snprintf(out, cap, "%s%s", v->prefix, name);
    return 1;
}

/* The source rewritten as a GGUF v3 buffer. */
static buf write_variant(const st_file *src, const variant *v) {
    buf b, data;
    open_buf(&b);
    open_buf(&data);
    size_t n = pp_st_count(src), kept = 0;
    char name[256];
    for (size_t i = 0; i < n; i++) {
        int steps = split_name(v, pp_st_at(src, i)->name, name, sizeof name);
        kept += steps ? (size_t)steps : (size_t)rename_tensor(v, pp_st_at(src, i)->name, name, sizeof name);
    }
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, kept);
    put_u64(&b, 3);
    put_str(&b, "general.architecture"), put_u32(&b, 8), put_str(&b, "personaplex");
    put_str(&b, "personaplex.block_count"), put_u32(&b, 4), put_u32(&b, 32); /* as sts-web: wrong */
    put_str(&b, "tokenizer.tokens"), put_u32(&b, 9), put_u32(&b, 8), put_u64(&b, 2); /* skipped */
    put_str(&b, "a"), put_str(&b, "bc");
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = pp_st_at(src, i);
        int steps = split_name(v, t->name, name, sizeof name);
        if (steps) { /* rows of a step are contiguous bytes */
            for (int st = 0; st < steps; st++) {
                char step[300];
                snprintf(step, sizeof step, "%s.%d.weight", name, st);
                put_str(&b, step);
                put_u32(&b, 2);
                put_u64(&b, (uint64_t)t->shape[1]);
                put_u64(&b, (uint64_t)(t->shape[0] / steps));
                put_u32(&b, ggml_type_of(t->dtype));
                put_u64(&b, pos(&data));
                put(&data, t->data + t->nbytes / (size_t)steps * (size_t)st, t->nbytes / (size_t)steps);
                pad(&data);
            }
            continue;
        }
        if (!rename_tensor(v, t->name, name, sizeof name)) continue;
        int shrink = v->bad_rows && !strcmp(t->name, v->bad_rows);
        size_t bytes = shrink ? t->nbytes / (size_t)t->shape[0] * (size_t)(t->shape[0] - 1) : t->nbytes;
        put_str(&b, name);
        put_u32(&b, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--) put_u64(&b, (uint64_t)(t->shape[d] - (d == 0 && shrink)));
        put_u32(&b, v->bad_type && !strcmp(t->name, v->bad_type) ? 99 : ggml_type_of(t->dtype));
        put_u64(&b, pos(&data));
        if (v->nan_scale && !strcmp(t->name, v->nan_scale)) {
            uint8_t *copy = malloc(bytes);
            if (!copy) abort();
            memcpy(copy, t->data, bytes);
            size_t block_bytes = (size_t)pp_wformat_block_bytes(t->dtype == ST_Q4_0   ? PP_WF_Q4_0
                                                                : t->dtype == ST_Q8_0 ? PP_WF_Q8_0
                                                                                      : PP_WF_Q4K);
            memcpy(copy + (size_t)v->nan_block * block_bytes + (size_t)v->nan_at, (const uint8_t[]){0x00, 0x7E}, 2);
            put(&data, copy, bytes);
            free(copy);
        } else {
            put(&data, t->data, bytes);
        }
        pad(&data);
    }
    pad(&b);
    finish(&data);
    put(&b, data.p, data.n);
    free(data.p);
    finish(&b);
    return b;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static char tmpdir[] = "/tmp/test_gguf_XXXXXX";

static const char *tmp(const char *name) {
    static char path[8][256];
    static int turn;
    char *p = path[turn++ % 8];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* ---- checks ------------------------------------------------------------------------------- */

/* Every tensor of the variant equals (name, shape, dtype, bytes) the source tensor it came from. */
static int same_tensors(const st_file *src, const st_file *f, const variant *v) {
    char name[256];
    size_t kept = 0;
    for (size_t i = 0; i < pp_st_count(src); i++) {
        const st_tensor *a = pp_st_at(src, i);
        int steps = split_name(v, a->name, name, sizeof name);
        if (steps) {
            kept += (size_t)steps;
            continue; /* compared step by step in same_steps */
        }
        if (!rename_tensor(v, a->name, name, sizeof name)) continue;
        kept++;
        const st_tensor *b = pp_st_find(f, name + (v->prefix ? strlen(v->prefix) : 0)); /* lm. is dropped */
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(b->shape, a->shape, sizeof a->shape) || memcmp(b->data, a->data, a->nbytes)) {
            fprintf(stderr, "  tensor '%s' differs from '%s'\n", name, a->name);
            return 0;
        }
    }
    return kept == pp_st_count(f);
}

typedef struct dep_load {
    pp_backend *be;
    const st_file *f;
    pp_tf *tf;
    char *err;
} dep_load;

static int load_dep_tensor(void *ctx, const pp_lm_tensor *t) {
    dep_load *d = ctx;
    if (!t->depformer || !pp_lm_part_in_layer(t->part)) return 0;
    return pp_tf_load_tensor(d->be, d->f, NULL, d->tf, t, d->err);
}

/* The depformer stack of f alone, loaded as the LM loads it: its catalogue entries. */
static int load_depformer(pp_backend *be, const st_file *f, const pp_tf_shape *sh, pp_tf *tf, char *err) {
    pp_lm_config c = {
        .dep_dim = sh->dim, .dep_num_layers = sh->num_layers, .dep_q = sh->n_steps, .dep_ffn_hidden = sh->hidden};
    dep_load d = {.be = be, .f = f, .tf = tf, .err = err};
    int rc = pp_tf_init(sh, tf, err);
    if (!rc) rc = pp_lm_catalog(&c, load_dep_tensor, &d);
    if (!rc) pp_tf_link(tf, 0);
    return rc;
}

/* The depformer of the per-step file computes with the same projections as the source's row
 * views of its stacked tensors: every step's qkv and out weights decode equal. */
static int same_steps(const st_file *src, const char *path) {
    pp_backend *be = NULL;
    st_file *f = NULL;
    char err[PP_ERR_LEN] = "";
    pp_tf a = {0}, b = {0};
    pp_tf_shape sh = {.prefix = "depformer",
                      .dim = 256,
                      .num_heads = 2,
                      .hidden = 512,
                      .num_layers = 1,
                      .n_steps = DEP_STEPS,
                      .eps = 1e-8f};
    int ok = !pp_backend_cpu_create(1, &be, err) && !pp_st_open(path, &f, err) &&
             !load_depformer(be, src, &sh, &a, err) && !load_depformer(be, f, &sh, &b, err) && !a.layers[0].step_proj &&
             b.layers[0].step_proj;
    static float x[768 * 256], y[768 * 256];
    for (int st = 0; ok && st < DEP_STEPS; st++) {
        const pp_tf_step *p = &a.layers[0].steps[st], *q = &b.layers[0].steps[st];
        ok = !pp_weight_decode_rows(&p->qkv, 0, 768, x, err) && !pp_weight_decode_rows(&q->qkv, 0, 768, y, err) &&
             !memcmp(x, y, sizeof x) && !pp_weight_decode_rows(&p->out, 0, 256, x, err) &&
             !pp_weight_decode_rows(&q->out, 0, 256, y, err) && !memcmp(x, y, 256 * 256 * sizeof *x);
    }
    if (!ok) fprintf(stderr, "  per-step projections: %s\n", err);
    pp_tf_free(be, &a);
    pp_tf_free(be, &b);
    pp_st_close(f);
    pp_backend_destroy(be);
    return ok;
}

/* The model opens on the CPU backend, with `layers` temporal layers. */
static int opens_with(const char *path, int layers) {
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    char err[PP_ERR_LEN] = "";
    int ok = !pp_backend_cpu_create(1, &be, err) && !pp_lm_open(be, path, CASE "/config.json", &lm, err) &&
             pp_lm_get_config(lm)->num_layers == layers;
    if (!ok) fprintf(stderr, "  %s: %s\n", path, err);
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return ok;
}

/* pp_lm_open must fail with a one-line message holding both needles. */
static void refused(const char *path, const char *needle1, const char *needle2, const char *why) {
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    char err[PP_ERR_LEN] = "";
    int rc = pp_backend_cpu_create(1, &be, err);
    if (!rc) rc = pp_lm_open(be, path, CASE "/config.json", &lm, err);
    int ok = rc < 0 && !lm && strstr(err, needle1) && strstr(err, needle2) && !strchr(err, '\n');
    if (!ok) fprintf(stderr, "  %s: rc=%d err='%s'\n", why, rc, err);
    TEST_COND(why, ok);
    pp_lm_close(lm);
    pp_backend_destroy(be);
}

static void test_variants(const st_file *src) {
    /* sts-web's pruning: layer 1 of 3 removed, layer 2 renumbered 1; KV says 32 layers */
    variant pruned = {.drop_layer = 1, .prefix = ""};
    buf b = write_variant(src, &pruned);
    write_file(tmp("pruned.gguf"), b.p, b.n);
    st_file *f = NULL;
    char err[PP_ERR_LEN] = "";
    TEST_COND("pruned copy opens", !pp_st_open(tmp("pruned.gguf"), &f, err));
    TEST_COND("pruned copy holds the source's tensors, renumbered", f && same_tensors(src, f, &pruned));
    TEST_COND("KV values read as metadata", f && !strcmp(pp_st_metadata(f, "personaplex.block_count"), "32") &&
                                                !strcmp(pp_st_metadata(f, "general.architecture"), "personaplex"));
    pp_st_close(f);
    TEST_COND("pruned model loads with 2 layers (config and KV say otherwise)", opens_with(tmp("pruned.gguf"), 2));

    /* the same file in page-multiple byte shards, opened by its first shard or its plain name */
    size_t shard = 4096 * 1024, n_shards = (b.n + shard - 1) / shard;
    for (size_t i = 0; i < n_shards; i++) {
        char name[64];
        snprintf(name, sizeof name, "split.gguf.shard-%02zu", i);
        write_file(tmp(name), b.p + i * shard, i + 1 < n_shards ? shard : b.n - i * shard);
    }
    TEST_COND("several shards written", n_shards >= 3);
    f = NULL;
    TEST_COND("sharded copy opens by its first shard", !pp_st_open(tmp("split.gguf.shard-00"), &f, err));
    TEST_COND("sharded copy holds the same tensors", f && same_tensors(src, f, &pruned));
    TEST_COND("a tensor spanning shards reads whole", f && strstr(pp_st_path(f), "shard-00..") != NULL);
    pp_st_close(f);
    TEST_COND("sharded model loads by its unsplit name", opens_with(tmp("split.gguf"), 2));
    char last[64];
    snprintf(last, sizeof last, "split.gguf.shard-%02zu", n_shards - 1);
    unlink(tmp(last));
    refused(tmp("split.gguf"), "split.gguf.shard-00..", "shard missing", "missing last shard refused");
    /* shards of no whole pages: the first is mapped, the rest read */
    write_file(tmp("odd.gguf.shard-00"), b.p, 4096 * 3);
    write_file(tmp("odd.gguf.shard-01"), b.p + 4096 * 3, 5000);
    write_file(tmp("odd.gguf.shard-02"), b.p + 4096 * 3 + 5000, b.n - 4096 * 3 - 5000);
    f = NULL;
    TEST_COND("shards of no whole pages open", !pp_st_open(tmp("odd.gguf.shard-00"), &f, err));
    TEST_COND("shards of no whole pages hold the same tensors", f && same_tensors(src, f, &pruned));
    pp_st_close(f);
    free(b.p);

    /* moshi.cpp's naming: the lm. prefix and per-step projections (the temporal layers' as in_projs.0) */
    variant moshi = {.drop_layer = -1, .prefix = "lm.", .split_steps = 1};
    b = write_variant(src, &moshi);
    write_file(tmp("moshi.gguf"), b.p, b.n);
    f = NULL;
    TEST_COND("lm.-prefixed copy opens", !pp_st_open(tmp("moshi.gguf"), &f, err));
    TEST_COND("lm.-prefixed names map to the torch keys", f && same_tensors(src, f, &moshi));
    pp_st_close(f);
    TEST_COND("lm.-prefixed model loads", opens_with(tmp("moshi.gguf"), 3));
    TEST_COND("per-step projections equal the stored tensor's step views", same_steps(src, tmp("moshi.gguf")));

    /* truncations: inside the tensor infos, then inside the data */
    write_file(tmp("short.gguf"), b.p, 300);
    refused(tmp("short.gguf"), "short.gguf", "truncated", "truncated header refused");
    write_file(tmp("cut.gguf"), b.p, b.n - 1000);
    refused(tmp("cut.gguf"), "runs past the end", "tensor '", "tensor past the end refused");
    free(b.p);

    variant typ = {.drop_layer = -1, .prefix = "", .bad_type = "text_emb.weight"};
    b = write_variant(src, &typ);
    write_file(tmp("type.gguf"), b.p, b.n);
    free(b.p);
    refused(tmp("type.gguf"), "'text_emb.weight'", "ggml type 99", "unknown tensor type refused");

    variant rows = {.drop_layer = -1, .prefix = "", .bad_rows = "text_linear.weight"};
    b = write_variant(src, &rows);
    write_file(tmp("rows.gguf"), b.p, b.n);
    free(b.p);
    refused(tmp("rows.gguf"), "'text_linear.weight' has shape [99, 256]", "text_card", "shape disagreement refused");

    refused(tmp("nothing.gguf"), "nothing.gguf", "no such file", "missing file refused");

    /* a NaN block scale: Q4_K's d (row 37 of a one-block-per-row tensor), its dmin, Q4_0's d */
    static const struct {
        const char *tensor;
        int block, at;
        const char *needle, *file, *why;
    } nan_cases[] = {
        {"transformer.layers.1.self_attn.out_proj.weight", 37, 0, "block 37 (row 37) has d = nan", "nan-d.gguf",
         "a NaN Q4_K d refused, naming tensor and block"},
        {"linears.3.weight", 1000, 2, "block 1000 (row 1000) has dmin = nan", "nan-dmin.gguf",
         "a NaN Q4_K dmin refused, naming tensor and block"},
        {"emb.2.weight", 4200, 0, "block 4200 (row 525) has d = nan", "nan-q4_0.gguf",
         "a NaN Q4_0 d refused, naming tensor and block"},
    };
    for (size_t i = 0; i < sizeof nan_cases / sizeof *nan_cases; i++) {
        variant nan = {.drop_layer = -1, .prefix = "", .nan_scale = nan_cases[i].tensor,
                       .nan_block = nan_cases[i].block, .nan_at = nan_cases[i].at};
        char quoted[128];
        snprintf(quoted, sizeof quoted, "'%s'", nan_cases[i].tensor);
        b = write_variant(src, &nan);
        write_file(tmp(nan_cases[i].file), b.p, b.n);
        free(b.p);
        refused(tmp(nan_cases[i].file), quoted, nan_cases[i].needle, nan_cases[i].why);
    }
}

/* ---- block decoders ----------------------------------------------------------------------- */

static void test_blocks(void) {
    uint8_t q40[18], q80[34], q4k[144];
    float out[256];
    uint16_t two = pp_f32_to_f16(2.0f), half = pp_f32_to_f16(0.5f);
    memcpy(q40, &two, 2);
    for (int j = 0; j < 16; j++) q40[2 + j] = (uint8_t)(j | (15 - j) << 4);
    pp_quant_q4_0_decode_block(q40, out);
    TEST_COND("q4_0 low nibbles first", out[0] == -16 && out[15] == 14 && out[16] == 14 && out[31] == -16);
    memcpy(q80, &half, 2);
    for (int j = 0; j < 32; j++) q80[2 + j] = (uint8_t)(int8_t)(j - 16);
    pp_quant_q8_0_decode_block(q80, out);
    TEST_COND("q8_0 signed codes", out[0] == -8 && out[31] == 7.5f);
    /* Q4_K: sub-block j gets scale j+1 and min 2j (j >= 4: high bits in the first bytes) */
    memset(q4k, 0, sizeof q4k);
    memcpy(q4k, &two, 2);
    memcpy(q4k + 2, &half, 2);
    int sc[8] = {1, 2, 3, 4, 37, 50, 63, 17}, mn[8] = {0, 2, 4, 6, 40, 63, 33, 16};
    uint8_t *s = q4k + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    for (int l = 0; l < 128; l++) q4k[16 + l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
    pp_quant_q4_k_decode_block(q4k, out);
    int ok = 1;
    for (int i = 0; i < 256; i++) {
        int j = i / 32, l = i % 32, b = 16 + (j / 2) * 32 + l;
        int q = j % 2 ? q4k[b] >> 4 : q4k[b] & 15;
        ok &= out[i] == 2.0f * (float)sc[j] * (float)q - 0.5f * (float)mn[j];
    }
    TEST_COND("q4_k 6-bit scales and mins, sub-block pairs share bytes", ok);

    /* the scale check: one non-finite f16 among many blocks, past the first chunk of blocks */
    enum { N_BLOCKS = 9000 };
    uint8_t *blocks = calloc(N_BLOCKS, QUANT_Q4_K_BYTES);
    if (!blocks) abort();
    int which = -1;
    for (int b = 0; b < N_BLOCKS; b++) memcpy(blocks + b * QUANT_Q8_0_BYTES, &half, 2);
    TEST_COND("finite q8_0 scales pass", pp_quant_ggml_bad_scale(blocks, N_BLOCKS, QUANT_Q8_0_BYTES, &which) == -1);
    memcpy(blocks + 8191 * QUANT_Q8_0_BYTES, (const uint8_t[]){0x00, 0x7C}, 2); /* +inf */
    TEST_COND("an infinite q8_0 d found", pp_quant_ggml_bad_scale(blocks, N_BLOCKS, QUANT_Q8_0_BYTES, &which) == 8191 &&
                                              which == 0);
    memset(blocks, 0, (size_t)N_BLOCKS * QUANT_Q4_K_BYTES);
    memcpy(blocks + 4097 * QUANT_Q4_K_BYTES + 2, (const uint8_t[]){0x01, 0xFE}, 2); /* a negative NaN dmin */
    TEST_COND("a NaN q4_k dmin found", pp_quant_ggml_bad_scale(blocks, N_BLOCKS, QUANT_Q4_K_BYTES, &which) == 4097 &&
                                           which == 1);
    free(blocks);
}

/* The fuzzer's seeds parse (so mutations start from valid files): every type and KV kind. */
static void test_seeds(void) {
    static const char *const seeds[] = {"all_types", "v2_align64", "empty", "nested_array"};
    for (int i = 0; i < 4; i++) {
        char path[512], err[PP_ERR_LEN] = "";
        snprintf(path, sizeof path, "%s/../fuzz/corpus/fuzz_gguf/%s.gguf", PP_TEST_DATA, seeds[i]);
        st_file *f = NULL;
        int ok = !pp_st_open(path, &f, err);
        if (!ok) fprintf(stderr, "  %s\n", err);
        TEST_COND(seeds[i], ok);
        if (ok && i == 0) {
            const st_tensor *t = pp_st_find(f, "y.f16"), *q = pp_st_find(f, "linears.0.weight");
            TEST_COND("seed: lm. prefix dropped, shape reversed", t && q && q->ndim == 2 && q->shape[0] == 2 &&
                                                                     q->shape[1] == 256 && q->dtype == ST_Q4_K);
            TEST_COND("seed: scalar KV as text", !strcmp(pp_st_metadata(f, "personaplex.rope.freq_base"), "10000") &&
                                                     !strcmp(pp_st_metadata(f, "x.i64"), "-5"));
        }
        pp_st_close(f);
    }
}

/* The tensors' data must lie as ggml lays it out (and as its reader demands: gguf.cpp's "has
 * offset N, expected M"): in table order, each right after the previous one's bytes padded to the
 * alignment. a: 16 floats, b: 16 floats, c: 8 floats (or none), 256 bytes of data. Before, a gap
 * (b 64 bytes past a's end) and two equal-sized tensors' offsets swapped (a damaged table that
 * reads each tensor's values as the other's) opened; an overlap was refused. */
static void test_layout(void) {
    static const struct {
        const char *what;
        uint64_t off_a, off_b, off_c, elems_c;
        int ok;
    } cases[] = {
        {"one after another", 0, 64, 128, 8, 1},
        {"an empty tensor in its place", 0, 64, 128, 0, 1},
        {"a gap between a and b", 0, 128, 192, 8, 0},
        {"a and b swapped", 64, 0, 128, 8, 0},
        {"b overlapping a", 0, 32, 96, 8, 0},
        {"an empty tensor out of its place", 0, 64, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        buf b;
        open_buf(&b);
        put(&b, "GGUF", 4);
        put_u32(&b, 3);
        put_u64(&b, 3);
        put_u64(&b, 0);
        const char *names[3] = {"a", "b", "c"};
        uint64_t elems[3] = {16, 16, cases[k].elems_c}, offs[3] = {cases[k].off_a, cases[k].off_b, cases[k].off_c};
        for (int i = 0; i < 3; i++) {
            put_str(&b, names[i]);
            put_u32(&b, 1);
            put_u64(&b, elems[i]);
            put_u32(&b, 0); /* F32 */
            put_u64(&b, offs[i]);
        }
        pad(&b);
        static const uint8_t data[256];
        put(&b, data, sizeof data);
        finish(&b);
        st_file *f = NULL;
        char err[PP_ERR_LEN] = "", what[160];
        int rc = pp_st_open_memory(b.p, b.n, "layout.gguf", &f, err);
        snprintf(what, sizeof what, "%s: %s", cases[k].what, cases[k].ok ? "opens" : "refused, naming the tensor");
        if (cases[k].ok) {
            TEST_COND(what, rc == 0);
        } else {
            TEST_COND(what, rc == PP_EFORMAT && strstr(err, "layout.gguf: tensor '") && strstr(err, "expected"));
        }
        if (rc) fprintf(stderr, "  %s\n", err);
        pp_st_close(f);
        free(b.p);
    }
}

/* The process's address space in KiB (/proc/self/status VmSize), -1 where it cannot be read. */
static long vm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* Opening a GGUF maps the file once; its tensor table costs the table's size, not another
 * file's worth of memory (a 4.4 GB checkpoint must not need 4.4 GB more). The golden file is
 * extended with 256 MiB of sparse trailing bytes, so the mapping dominates. */
static void test_table_memory(void) {
    const size_t extra = (size_t)256 << 20;
    FILE *in = fopen(CASE "/model.gguf", "rb");
    FILE *out = fopen(tmp("big.gguf"), "wb");
    char chunk[65536];
    size_t n, size = 0;
    while (in && out && (n = fread(chunk, 1, sizeof chunk, in)) > 0) size += fwrite(chunk, 1, n, out);
    if (in) fclose(in);
    if (!out || fclose(out) || truncate(tmp("big.gguf"), (off_t)(size + extra))) abort();
    st_file *f = NULL;
    char err[PP_ERR_LEN] = "";
    long before = vm_kib();
    TEST_COND("GGUF with trailing bytes opens", !pp_st_open(tmp("big.gguf"), &f, err));
    long grew = vm_kib() - before, file_kib = (long)((size + extra) >> 10);
    if (before >= 0) {
        if (grew > file_kib + file_kib / 4)
            fprintf(stderr, "  opening a %ld KiB GGUF grew the address space by %ld KiB\n", file_kib, grew);
        TEST_COND("opening a GGUF costs about its mapping, no file-sized buffer", grew <= file_kib + file_kib / 4);
    }
    pp_st_close(f);
    unlink(tmp("big.gguf"));
}

int main(void) {
    test_blocks();
    test_seeds();
    test_layout();
    st_file *src = NULL;
    char err[PP_ERR_LEN] = "";
    if (!mkdtemp(tmpdir) || pp_st_open(CASE "/model.gguf", &src, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_variants(src);
    pp_st_close(src);
    test_table_memory();
    test_remove_dir(tmpdir);
    return test_report();
}
