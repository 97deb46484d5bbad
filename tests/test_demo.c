/* test_demo: the demo model's options (pp_demo_opts).
 *
 * - sizes parse: "tiny" and "released", nothing else;
 * - the tiny LM written in NF2 (lm_nf2: random codes in model-turbo2bit's layout, what the
 *   released size writes): every matrix is NF2 with a group that divides its rows, norms stay
 *   dense, the same bytes on a second run, and the loader takes it without a code-histogram
 *   warning;
 *   the context asked for reaches the LM's config;
 * - the second run's config.json and tokenizer.model replace files that had other hard links,
 *   which keep their contents (the writer renames a temporary file over them);
 * - a conversation on it runs its prompts and frames, and its audio is audible and bounded.
 * The released size itself (2.2 GB, about 20 s to write) is not written here; tools/gpu-check.sh
 * runs it under a 64-conversation load test. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "model/lm.h"
#include "session/demo.h"
#include "session/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FRAMES 12

/* Every 2-D LM matrix in NF2 (X.packed, its group dividing the row), nothing dense but 1-D. */
static void check_layout(const char *weights) {
    char err[PP_ERR_LEN];
    st_file *f = NULL;
    TEST_COND("NF2 demo LM opens as safetensors", pp_st_open(weights, &f, err) == PP_OK);
    if (!f) return;
    int nf2 = 0, dense_matrices = 0, bad_group = 0;
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        size_t len = strlen(t->name);
        if (t->ndim == 2) dense_matrices++;
        if (len > 7 && strcmp(t->name + len - 7, ".packed") == 0) {
            char base[512], key[600];
            snprintf(base, sizeof base, "%.*s", (int)(len - 7), t->name);
            snprintf(key, sizeof key, "%s.gs", base);
            const st_tensor *gs = pp_st_find(f, key);
            snprintf(key, sizeof key, "%s.shape", base);
            const st_tensor *shape = pp_st_find(f, key);
            int64_t g = 0, cols = 0; /* the file's I64 values need not be 8-byte aligned */
            if (gs) memcpy(&g, gs->data, sizeof g);
            if (shape) memcpy(&cols, (const uint8_t *)shape->data + sizeof cols, sizeof cols);
            bad_group += !(g >= 4 && g <= 128 && cols % g == 0);
            nf2++;
        }
    }
    printf("NF2 demo LM: %d NF2 matrices, %d dense ones\n", nf2, dense_matrices);
    TEST_COND("every LM matrix is NF2", nf2 > 0 && dense_matrices == 0);
    TEST_COND("each NF2 group divides its rows", bad_group == 0);
    pp_st_close(f);
}

int main(void) {
    char err[PP_ERR_LEN], dir_a[64] = "/tmp/pp-demo-a-XXXXXX", dir_b[64] = "/tmp/pp-demo-b-XXXXXX",
                          log_path[] = "/tmp/pp-demo-log-XXXXXX";
    pp_demo_size size = PP_DEMO_TINY;
    TEST_COND("size tiny", pp_demo_size_parse("tiny", &size) == 0 && size == PP_DEMO_TINY);
    TEST_COND("size released", pp_demo_size_parse("released", &size) == 0 && size == PP_DEMO_RELEASED);
    TEST_COND("no other size", pp_demo_size_parse("huge", &size) != 0 && pp_demo_size_parse("", &size) != 0);

    int log_fd = mkstemp(log_path);
    if (!mkdtemp(dir_a) || !mkdtemp(dir_b) || log_fd < 0) TEST_SKIP("no temporary directory");
    close(log_fd);
    pp_log_set_level(PP_LOG_WARN);
    TEST_COND("log to a file", pp_log_open(log_path) == PP_OK);
    pp_demo_files files, other;
    pp_demo_opts opts = {.size = PP_DEMO_TINY, .lm_context = 200, .lm_nf2 = 1};
    int rc = pp_demo_write_opts(dir_a, &opts, &files, err);
    if (rc) fprintf(stderr, "demo: %s\n", err);
    TEST_COND("NF2 demo written", rc == PP_OK);
    /* dir_b's config.json and tokenizer.model are there as hard links to other files: a writer
     * that truncates them in place would overwrite those too; replacing them leaves those as they were. */
    char kept[sizeof dir_b + 32], linked[sizeof dir_b + 32];
    static const char *const LINKED[] = {"config.json", "tokenizer.model"};
    int links = 1;
    for (size_t i = 0; i < sizeof LINKED / sizeof *LINKED; i++) {
        snprintf(kept, sizeof kept, "%s/kept-%zu", dir_b, i);
        snprintf(linked, sizeof linked, "%s/%s", dir_b, LINKED[i]);
        FILE *k = fopen(kept, "wb");
        links &= k && fputs("the user's own file", k) >= 0;
        if (k) fclose(k);
        links &= link(kept, linked) == 0;
    }
    TEST_COND("NF2 demo written again", links && pp_demo_write_opts(dir_b, &opts, &other, err) == PP_OK);
    TEST_COND("NF2 demo LM is deterministic", test_files_equal(files.weights, other.weights));
    int untouched = 1;
    for (size_t i = 0; i < sizeof LINKED / sizeof *LINKED; i++) {
        snprintf(kept, sizeof kept, "%s/kept-%zu", dir_b, i);
        char buf[64] = "";
        FILE *k = fopen(kept, "rb");
        size_t got = k ? fread(buf, 1, sizeof buf - 1, k) : 0;
        if (k) fclose(k);
        untouched &= got == strlen("the user's own file") && strcmp(buf, "the user's own file") == 0;
    }
    snprintf(linked, sizeof linked, "%s/config.json", dir_b);
    snprintf(kept, sizeof kept, "%s/config.json", dir_a);
    TEST_COND("the config and tokenizer are replaced, not written through their old files' other links",
              untouched && test_files_equal(linked, kept) && test_files_equal(other.tokenizer, files.tokenizer));
    test_remove_dir(dir_b);
    if (rc) return test_report();
    check_layout(files.weights);

    pp_backend *be = NULL;
    pp_model *m = NULL;
    TEST_COND("cpu backend", pp_backend_cpu_create(1, &be, err) == PP_OK);
    pp_model_paths paths = pp_demo_paths(&files);
    rc = pp_model_open(be, &paths, &m, err);
    if (rc) fprintf(stderr, "model: %s\n", err);
    TEST_COND("NF2 demo model opens", rc == PP_OK);
    pp_log_open(NULL);
    TEST_COND("no code-histogram warning", test_lines_with(log_path, "histogram") == 0);
    if (rc) return test_report();
    TEST_COND("the context asked for", pp_lm_get_config(pp_model_lm(m))->context == 200);

    pp_session_params p;
    pp_params_defaults(&p);
    strcpy(p.text_prompt, "Be brief.");
    pp_session *s = NULL;
    rc = pp_session_create(m, &p, 64, &s, err);
    while (rc == 0) rc = pp_session_prefill(s, err);
    TEST_COND("prompts run", rc == 1);
    double sum = 0, peak = 0;
    int ok = rc == 1;
    for (int f = 0; f < FRAMES && ok; f++) {
        float in[PP_FRAME_SAMPLES], out[PP_FRAME_SAMPLES];
        char piece[PP_SESSION_PIECE_MAX];
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) in[i] = 0.2f * sinf(0.05f * (float)(f * PP_FRAME_SAMPLES + i));
        ok = pp_session_step(s, in, out, piece, NULL, err) == PP_OK;
        for (int i = 0; ok && i < PP_FRAME_SAMPLES; i++) {
            sum += (double)out[i] * out[i];
            if (fabs(out[i]) > peak) peak = fabs(out[i]);
        }
    }
    double rms = sqrt(sum / (FRAMES * PP_FRAME_SAMPLES));
    printf("NF2 demo output: rms %.4f, peak %.3f\n", rms, peak);
    TEST_COND("frames step", ok);
    TEST_COND("audio is audible and bounded", ok && rms > 0.005 && peak < 1.0);
    pp_session_destroy(s);
    pp_model_close(m);
    pp_backend_destroy(be);
    unlink(log_path);
    test_remove_dir(dir_a);
    return test_report();
}
