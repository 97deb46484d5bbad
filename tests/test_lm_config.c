/* test_lm_config: config.json parsing (defaults, derived FFN widths, refused options, unknown
 * keys) and the loader's refusal of configs that contradict the tensors. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "model/lm.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CASE PP_TEST_DATA "/golden/lm-bf16"

static int parse(const char *json, pp_lm_config *c, char *err) {
    return pp_lm_config_parse(json, strlen(json), "test.json", c, err);
}

static void test_parse(void) {
    pp_lm_config c;
    char err[PP_ERR_LEN] = "";
    TEST_COND("empty object parses", parse("{}", &c, err) == 0);
    /* docs/model.md §1: 2·int(4.125·4096)/3 = 11264 and 2·int(4.125·1024)/3 = 2816 */
    TEST_COND("PersonaPlex temporal FFN width 11264", c.ffn_hidden == 11264);
    TEST_COND("PersonaPlex depformer FFN width 2816", c.dep_ffn_hidden == 2816);
    TEST_COND("PersonaPlex context 3000 and dep_q 16", c.context == 3000 && c.dep_q == 16);
    TEST_COND("PersonaPlex delays", c.delays[0] == 0 && c.delays[1] == 0 && c.delays[2] == 1 && c.delays[9] == 0 &&
                                        c.delays[16] == 1 && pp_lm_config_max_delay(&c) == 1);

    TEST_COND("tiny config parses",
              parse("{\"dim\": 64, \"hidden_scale\": 4.5, \"depformer_dim\": 64, \"depformer_dim_feedforward\": 288,"
                    " \"num_heads\": 4, \"depformer_num_heads\": 2, \"context\": 6, \"some_new_key\": [1]}",
                    &c, err) == 0);
    TEST_COND("int(4.5·64) = 288 gives hidden 192", c.ffn_hidden == 192 && c.dep_ffn_hidden == 192);
    TEST_COND("dim_feedforward = 4·dim uses 21/8·dim",
              parse("{\"dim\": 64, \"num_heads\": 4, \"hidden_scale\": 4}", &c, err) == 0 && c.ffn_hidden == 168);

    int rc = parse("{\"gating\": \"gelu\"}", &c, err);
    TEST_COND("gelu gating is refused", rc == PP_EUNSUPPORTED && strstr(err, "gating"));
    rc = parse("{\"dim\": \"wide\"}", &c, err);
    TEST_COND("non-integer dim is refused naming the key", rc == PP_EINVAL && strstr(err, "'dim'"));
    rc = parse("{\"dim\": 100, \"num_heads\": 3}", &c, err);
    TEST_COND("dim not divisible by heads is refused", rc == PP_EINVAL && strstr(err, "num_heads"));
    rc = parse("{\"delays\": [0, 1]}", &c, err);
    TEST_COND("short delays array is refused", rc == PP_EINVAL && strstr(err, "delays"));
    rc = parse("{\"layer_scale\": 0.01}", &c, err);
    TEST_COND("LayerScale is refused", rc == PP_EUNSUPPORTED && strstr(err, "layer_scale"));
    rc = parse("{\"dep_q\": 4}", &c, err);
    TEST_COND("dep_q below 8 is refused", rc == PP_EINVAL && strstr(err, "dep_q"));
    rc = parse("{\"existing_text_padding_id\": 5}", &c, err);
    TEST_COND("a pad token other than 3 is refused",
              rc == PP_EUNSUPPORTED && strstr(err, "existing_text_padding_id"));
    rc = parse("{\"max_period\": 1e39}", &c, err);
    TEST_COND("a rotary period past a float is refused", rc == PP_EINVAL && strstr(err, "max_period"));
    rc = parse("[1, 2]", &c, err);
    TEST_COND("non-object is refused", rc == PP_EFORMAT);
    rc = parse("{\"dim\": 64,", &c, err);
    TEST_COND("malformed JSON is refused", rc < 0);
}

/* Writes the case's config.json with one key's value replaced, then opens the model with it. */
static int open_with(pp_backend *be, const char *key, const char *value, char *err) {
    char path[256], src[4096];
    FILE *f = fopen(CASE "/config.json", "rb");
    if (!f) return PP_EIO;
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = 0;
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    char *at = strstr(src, pattern);
    if (!at) return PP_ENOTFOUND;
    char *val = at + strlen(pattern), *end = strpbrk(val, ",\n}");
    snprintf(path, sizeof path, "/tmp/pp_test_lm_config_%d.json", (int)getpid());
    f = fopen(path, "wb");
    if (!f) return PP_EIO;
    fprintf(f, "%.*s%s%s", (int)(val - src), src, value, end);
    fclose(f);
    pp_lm *lm = NULL;
    int rc = pp_lm_open(be, CASE "/model.safetensors", path, &lm, err);
    pp_lm_close(lm);
    remove(path);
    return rc;
}

static void test_contradictions(void) {
    pp_backend *be = NULL;
    char err[PP_ERR_LEN] = "";
    if (pp_backend_create("cpu", 1, &be, err)) {
        TEST_COND("cpu backend", 0);
        return;
    }
    pp_lm *lm = NULL;
    int rc = pp_lm_open(be, CASE "/model.safetensors", CASE "/config.json", &lm, err);
    TEST_COND("the case's own config opens", rc == 0);
    if (rc) fprintf(stderr, "%s\n", err);
    pp_lm_close(lm);

    rc = open_with(be, "dim", "128", err);
    TEST_COND("dim 128 on a dim-64 model is refused naming a tensor and the key",
              rc < 0 && strstr(err, "emb.0.weight") && strstr(err, "dim"));
    rc = open_with(be, "num_layers", "2", err);
    TEST_COND("too few layers is refused naming the key and the extra tensor",
              rc == PP_EINVAL && strstr(err, "num_layers") && strstr(err, "transformer.layers.2"));
    rc = open_with(be, "num_layers", "4", err);
    TEST_COND("too many layers is refused naming the missing tensor",
              rc < 0 && strstr(err, "transformer.layers.3") && strstr(err, "num_layers"));
    rc = open_with(be, "text_card", "99", err);
    TEST_COND("wrong text_card is refused naming text_card", rc < 0 && strstr(err, "text_card"));
    rc = open_with(be, "dep_q", "15", err);
    TEST_COND("wrong dep_q is refused", rc < 0 && strstr(err, "dep_q"));
    pp_backend_destroy(be);
}

/* Without a config, the temporal layers are counted from the tensors; a count past the bounds a
 * config may give is refused the same way (it once went on unchecked). Only the layers' first
 * tensors are written: the count needs nothing else. */
static int config_for_layers_but(int layers, int skip, const char *config, pp_lm_config *c, char *err) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pp_test_lm_layers_%d.safetensors", (int)getpid());
    st_writer *wr = NULL;
    const int64_t shape[1] = {1};
    const float one = 1.0f;
    char name[64];
    int rc = pp_st_writer_create(path, &wr, err);
    for (int l = 0; l < layers && !rc; l++) {
        snprintf(name, sizeof name, "transformer.layers.%d.norm1.alpha", l);
        if (l != skip) rc = pp_st_writer_declare(wr, name, ST_F32, 1, shape, err);
    }
    if (!rc) rc = pp_st_writer_begin(wr, err);
    for (int l = 0; l < layers && !rc; l++)
        if (l != skip) rc = pp_st_writer_write(wr, &one, sizeof one, err);
    if (!rc) rc = pp_st_writer_finish(wr, err);
    else if (wr) pp_st_writer_abort(wr);
    st_file *f = NULL;
    if (!rc) rc = pp_st_open(path, &f, err);
    if (!rc && config) {
        char cpath[64];
        snprintf(cpath, sizeof cpath, "/tmp/pp_test_lm_layers_%d.json", (int)getpid());
        FILE *cf = fopen(cpath, "w");
        if (cf) fputs(config, cf), fclose(cf);
        rc = pp_lm_config_for(cpath, f, c, err);
        if (!rc) rc = pp_lm_check_extra(c, f, err);
        remove(cpath);
    } else if (!rc) {
        rc = pp_lm_config_for(NULL, f, c, err);
    }
    pp_st_close(f);
    remove(path);
    return rc;
}

static int config_for_layers(int layers, pp_lm_config *c, char *err) {
    return config_for_layers_but(layers, -1, NULL, c, err);
}

static void test_layers_from_tensors(void) {
    pp_lm_config c;
    char err[PP_ERR_LEN] = "";
    int rc = config_for_layers(3, &c, err);
    TEST_COND("3 layers counted from the tensors", rc == PP_OK && c.num_layers == 3);
    rc = config_for_layers(1024, &c, err);
    TEST_COND("1024 layers counted", rc == PP_OK && c.num_layers == 1024);
    rc = config_for_layers(1025, &c, err);
    TEST_COND("1025 layers refused naming the key and the count",
              rc == PP_EINVAL && strstr(err, "num_layers") && strstr(err, "1025"));
    /* layers 0, 1 and 3: counted to the last (loading then reports layer 2 missing), never cut to 2 */
    rc = config_for_layers_but(4, 2, NULL, &c, err);
    TEST_COND("a skipped layer number: counted to the highest", rc == PP_OK && c.num_layers == 4);
    /* the same file under a config of 2 layers: layer 3 would be dropped */
    rc = config_for_layers_but(4, 2, "{\"num_layers\": 2}", &c, err);
    TEST_COND("a layer past a skipped number is refused naming it",
              rc == PP_EINVAL && strstr(err, "'num_layers' = 2") && strstr(err, "transformer.layers.3.norm1.alpha"));
}

/* Keys the engine does not use are logged, by name, in one line: unknown ones and the two the
 * reference overrides (docs/model.md §1). */
static void test_unused_logged(void) {
    char path[] = "/tmp/test_lm_config_log_XXXXXX", line[1024] = "", err[PP_ERR_LEN] = "";
    int fd = mkstemp(path);
    pp_lm_config c;
    if (fd < 0 || pp_log_open(path)) {
        TEST_COND("log file", 0);
        return;
    }
    pp_log_level was = pp_log_get_level();
    pp_log_set_level(PP_LOG_INFO);
    int rc = parse("{\"dim\": 4096, \"depformer_context\": 8, \"depformer_max_period\": 10000, \"model_type\": \"moshi\"}",
                   &c, err);
    pp_log_set_level(was);
    pp_log_open(NULL);
    FILE *f = fdopen(fd, "r");
    size_t n = f ? fread(line, 1, sizeof line - 1, f) : 0;
    line[n] = 0;
    if (f) fclose(f);
    unlink(path);
    printf("logged: %s", line);
    TEST_COND("a config with unused keys parses", rc == 0);
    TEST_COND("unused keys are logged by name", strstr(line, "ignoring 3 key(s)") && strstr(line, "depformer_context") &&
                                                   strstr(line, "depformer_max_period") && strstr(line, "model_type") &&
                                                   !strstr(line, "dim,"));
}

int main(void) {
    test_parse();
    test_unused_logged();
    test_contradictions();
    test_layers_from_tensors();
    return test_report();
}
