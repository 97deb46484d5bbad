/* test_quantize_load: quantizing while loading (pp_lm_open_quantized, the server's --quantize)
 * gives byte for byte the weights personaplex-quantize writes, for every format and for INT8 per
 * row, on the golden BF16 LM: same format, group, codes, scales and NF4 tables for every tensor
 * the format covers, the rest loaded as stored. The temporal-only policy covers exactly the
 * temporal projections, and a checkpoint already quantized is refused with its format named. */
#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "model/lm.h"
#include "test.h"

#include <string.h>
#include <unistd.h>

#define CASE PP_TEST_DATA "/golden/lm-bf16"

static pp_backend *be;

typedef struct walk {
    const pp_lm *lm;
    const st_file *offline;
    const pp_lm_quantize *q;
    int quantized, as_stored, differ;
} walk;

static size_t code_bytes(const pp_weight *w) {
    size_t n = (size_t)(w->rows * w->cols);
    return w->fmt == PP_WF_NF2 ? n / 4 : w->fmt == PP_WF_INT8 ? n : n / 2;
}

static size_t scale_bytes(const pp_weight *w) {
    size_t g = (size_t)(w->rows * w->cols / w->group);
    return g * (w->fmt == PP_WF_INT8 ? 4 : w->fmt == PP_WF_NF4 ? 1 : 2);
}

static int same_weight(const pp_weight *a, const pp_weight *b) {
    if (a->fmt != b->fmt || a->group != b->group || a->np2 != b->np2 || memcmp(a->data, b->data, code_bytes(a)) ||
        memcmp(a->scales, b->scales, scale_bytes(a)))
        return 0;
    if (a->fmt != PP_WF_NF4) return 1;
    size_t nested = (size_t)((a->rows * a->cols / a->group + a->nested_block - 1) / a->nested_block);
    return a->nested_block == b->nested_block && a->nested_offset == b->nested_offset &&
           !memcmp(a->nested_absmax, b->nested_absmax, nested * 4) && !memcmp(a->nested_map, b->nested_map, 256 * 4) &&
           !memcmp(a->quant_map, b->quant_map, 16 * 4);
}

static int compare(void *ctx, const pp_lm_tensor *t) {
    walk *k = ctx;
    const pp_weight *w = pp_lm_weight(k->lm, t);
    if (!w) return 0;
    char err[PP_ERR_LEN];
    if (!pp_lm_quantizes(k->q, t->name, 2)) {
        k->as_stored++;
        k->differ += w->fmt != PP_WF_BF16;
        return 0;
    }
    pp_weight o;
    int ok = pp_weight_load(k->offline, t->name, t->rows, t->cols, &o, err) == 0 && same_weight(w, &o);
    if (!ok) fprintf(stderr, "  %s differs from the offline tool's\n", t->name);
    k->quantized++;
    k->differ += !ok;
    return 0;
}

static void check(pp_wformat fmt, int group, int temporal_only, int want_quantized) {
    char err[PP_ERR_LEN], path[] = "/tmp/pp_test_qload_XXXXXX", what[96];
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    pp_lm_quantize q = {.fmt = fmt, .group = group, .temporal_only = temporal_only};
    pp_quantize_opts o = {.fmt = fmt, .group = group};
    st_file *offline = NULL;
    pp_lm *lm = NULL;
    int rc = pp_quantize_file(CASE "/model.safetensors", path, &o, err);
    if (!rc) rc = pp_st_open(path, &offline, err);
    if (!rc) rc = pp_lm_open_quantized(be, CASE "/model.safetensors", CASE "/config.json", &q, &lm, err);
    snprintf(what, sizeof what, "%s group %d%s loads", pp_wformat_name(fmt), group, temporal_only ? " temporal" : "");
    if (rc) fprintf(stderr, "%s: %s\n", what, err);
    TEST_COND(what, rc == PP_OK);
    if (!rc) {
        walk k = {.lm = lm, .offline = offline, .q = &q};
        pp_lm_catalog(pp_lm_get_config(lm), compare, &k);
        printf("%s: %d quantized as the offline tool writes them (%d differ), %d as stored\n", what, k.quantized,
               k.differ, k.as_stored);
        snprintf(what, sizeof what, "%s group %d: byte-identical to personaplex-quantize", pp_wformat_name(fmt), group);
        TEST_COND(what, k.differ == 0 && k.quantized == want_quantized);
    }
    pp_lm_close(lm);
    pp_st_close(offline);
    unlink(path);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_log_set_level(PP_LOG_WARN);
    if (pp_backend_cpu_create(2, &be, err)) TEST_SKIP("no CPU backend");
    /* lm-bf16: 146 matrices; its 12 temporal projections (3 layers x 4) are NF4's */
    check(PP_WF_NF2, 64, 0, 146);
    check(PP_WF_INT4, 64, 0, 146);
    check(PP_WF_NF4, 64, 0, 12);
    check(PP_WF_INT8, 32, 0, 146);
    check(PP_WF_INT8, PP_QUANTIZE_ROW, 0, 146);
    check(PP_WF_INT8, 32, 1, 12);

    pp_lm *lm = NULL;
    pp_lm_quantize q = {.fmt = PP_WF_INT8, .group = 32};
    int rc = pp_lm_open_quantized(be, PP_TEST_DATA "/golden/lm-int4/model.safetensors",
                                  PP_TEST_DATA "/golden/lm-int4/config.json", &q, &lm, err);
    printf("quantized checkpoint -> %s\n", err);
    TEST_COND("a quantized checkpoint is refused, its format named",
              rc == PP_EINVAL && !lm && strstr(err, "int4") && strstr(err, "--quantize"));
    q.group = 48;
    rc = pp_lm_open_quantized(be, CASE "/model.safetensors", CASE "/config.json", &q, &lm, err);
    TEST_COND("a group that does not divide the rows is refused", rc == PP_EINVAL && strstr(err, "group size 48"));
    pp_backend_destroy(be);
    return test_report();
}
