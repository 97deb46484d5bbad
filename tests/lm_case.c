/* lm_case: see lm_case.h. */
#include "lm_case.h"

#include "golden_case.h"

#include "base/err.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_dir(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static int list_into(const char *parent, char dirs[LM_CASE_MAX][512], int n) {
    DIR *d = opendir(parent);
    if (!d) return n;
    struct dirent *e;
    while ((e = readdir(d)) && n < LM_CASE_MAX)
        if (strncmp(e->d_name, "lm-", 3) == 0) snprintf(dirs[n++], 512, "%s/%s", parent, e->d_name);
    closedir(d);
    return n;
}

int lm_case_list(char dirs[LM_CASE_MAX][512]) {
    int n = list_into(PP_TEST_DATA "/golden", dirs, 0);
    n = list_into(PP_TEST_DATA "/golden/heldout", dirs, n);
    qsort(dirs, (size_t)n, sizeof dirs[0], cmp_dir);
    return n;
}

/* A whole tensor of golden.safetensors: int64 into *i64 or float into *f32. */
static int load(const st_file *f, const char *name, int64_t **i64, float **f32, int64_t *numel, char *err) {
    const st_tensor *t = pp_st_find(f, name);
    if (!t) return pp_fail(err, PP_ENOTFOUND, "%s: no tensor '%s'", pp_st_path(f), name);
    size_t n = t->numel > 0 ? (size_t)t->numel : 1;
    void *buf = malloc(n * (i64 ? sizeof(int64_t) : sizeof(float)));
    if (!buf) return pp_fail(err, PP_ENOMEM, "out of memory");
    int rc = i64 ? pp_st_load_i64(f, t, 0, t->numel, buf, err) : pp_st_load_f32(f, t, 0, t->numel, buf, err);
    if (rc) {
        free(buf);
        return rc;
    }
    if (i64) *i64 = buf;
    else *f32 = buf;
    *numel = t->numel;
    return PP_OK;
}

static int read_golden(lm_case *c, char *err) {
    char path[600];
    snprintf(path, sizeof path, "%s/golden.safetensors", c->dir);
    st_file *f = NULL;
    int64_t *silence = NULL, *text = NULL, *user = NULL, n = 0;
    int rc = pp_st_open(path, &f, err);
    if (!rc) rc = load(f, "voice_embeddings", NULL, &c->voice_emb, &n, err);
    c->n_voice = (int)(n / c->cfg->dim);
    if (!rc) rc = load(f, "voice_cache", &c->voice_cache, NULL, &n, err);
    if (!rc && n != PP_LM_STREAMS * 4) rc = pp_fail(err, PP_EFORMAT, "%s: voice_cache of %lld", path, (long long)n);
    if (!rc) rc = load(f, "silence_frames", &silence, NULL, &n, err);
    if (!rc) c->silence = (int)silence[0];
    if (!rc) rc = load(f, "text_prompt", &text, NULL, &n, err);
    if (!rc) {
        c->n_text = (int)n;
        c->text = malloc(((size_t)n + 1) * sizeof *c->text);
        for (int64_t i = 0; c->text && i < n; i++) c->text[i] = (int32_t)text[i];
        if (!c->text) rc = pp_fail(err, PP_ENOMEM, "out of memory");
    }
    if (!rc) rc = load(f, "user_tokens", &user, NULL, &n, err);
    if (!rc) {
        c->n_steps = (int)(n / PP_LM_AUDIO_CODEBOOKS);
        c->user = malloc(((size_t)c->n_steps + 1) * sizeof *c->user);
        for (int64_t i = 0; c->user && i < n; i++) c->user[i / 8][i % 8] = (int32_t)user[i];
        if (!c->user) rc = pp_fail(err, PP_ENOMEM, "out of memory");
    }
    if (!rc) rc = load(f, "out_tokens", &c->tokens, NULL, &n, err);
    if (!rc && n != (int64_t)c->n_steps * PP_LM_STREAMS)
        rc = pp_fail(err, PP_EFORMAT, "%s: out_tokens of %lld", path, (long long)n);
    free(silence);
    free(text);
    free(user);
    pp_st_close(f);
    return rc;
}

int lm_case_open(const char *dir, int threads, lm_case *c, char *err) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    const char *g = strstr(c->dir, "/golden/");
    c->name = g ? g + 8 : c->dir;
    char wpath[600], cpath[600];
    golden_case_paths(dir, wpath, sizeof wpath, cpath, sizeof cpath);
    int rc = pp_backend_create(LM_CASE_DEVICE, threads, &c->be, err);
    if (!rc) rc = pp_lm_open(c->be, wpath, cpath, &c->lm, err);
    if (!rc) {
        c->cfg = pp_lm_get_config(c->lm);
        rc = read_golden(c, err);
    }
    if (rc) lm_case_close(c);
    return rc;
}

void lm_case_close(lm_case *c) {
    pp_lm_close(c->lm);
    if (c->be) pp_backend_destroy(c->be);
    free(c->voice_emb);
    free(c->voice_cache);
    free(c->text);
    free(c->user);
    free(c->tokens);
    memset(c, 0, sizeof *c);
}

int lm_case_prompt(const lm_case *c, pp_lmgen *g, char *err) {
    int rc = pp_lmgen_prompt_voice(g, c->voice_emb, c->n_voice, c->voice_cache, err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, c->silence, err);
    if (!rc) rc = pp_lmgen_prompt_text(g, c->text, c->n_text, err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, c->silence, err);
    return rc;
}
