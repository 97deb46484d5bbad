/* test_lmbatch: conversations advanced together by pp_lmbatch_step give exactly the tokens
 * they give alone (pp_lmgen_step), on every golden LM case: batches of 1, 2 and 3
 * conversations that join at different ticks (so they sit at different positions of their
 * rings), leave at different ticks and feed different user codes. Greedy decoding everywhere,
 * plus sampling with per-conversation seeds, temperatures and top-k on each case (a draw depends
 * only on its conversation's seed, frame and stream), and the same seed repeating its tokens;
 * then MANY_CONV greedy conversations in one batch, more rows than a device's batched GEMV
 * takes (the CUDA backend's tensor-core products). The lone runs are also checked against the
 * reference's tokens. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "lm_case.h"

#include <string.h>

#define SWEEP_CONV 3 /* batches of 1..SWEEP_CONV with their own sampling settings */
#define MANY_CONV 9  /* and one of MANY_CONV: above kernels.h's PK_GEMV_MAX_BATCH (8) */
#define MAX_CONV MANY_CONV
#define JOIN_EVERY 3 /* conversation j joins at tick JOIN_EVERY·j */
#define SHORTER 2    /* ... and runs SHORTER·j fewer frames */
#define ROTATE 5     /* ... on the case's user codes rotated by ROTATE·j frames */

typedef struct plan {
    int start, steps;
    pp_lmgen_params params;
} plan;

static const int32_t *user_at(const lm_case *c, int j, int t) { return c->user[(t + ROTATE * j) % c->n_steps]; }

static int same_out(const pp_lmgen_out *a, const pp_lmgen_out *b) {
    if (a->ready != b->ready) return 0;
    if (!a->ready) return 1;
    return a->text == b->text && memcmp(a->agent, b->agent, sizeof a->agent) == 0 &&
           memcmp(a->user, b->user, sizeof a->user) == 0;
}

static int new_conv(const lm_case *c, const pp_lmgen_params *p, pp_lmgen **g, char *err) {
    int rc = pp_lmgen_create(c->lm, p, g, err);
    if (!rc) rc = lm_case_prompt(c, *g, err);
    return rc;
}

/* Conversation j alone: its outputs of every step into ref[steps]. */
static int run_alone(const lm_case *c, int j, const plan *pl, pp_lmgen_out *ref, char *err) {
    pp_lmgen *g = NULL;
    int rc = new_conv(c, &pl->params, &g, err);
    for (int t = 0; !rc && t < pl->steps; t++) rc = pp_lmgen_step(g, user_at(c, j, t), &ref[t], err);
    pp_lmgen_destroy(g);
    return rc;
}

/* The lone conversation 0 (unrotated codes, greedy) must reproduce the reference's tokens. */
static int matches_reference(const lm_case *c, const pp_lmgen_out *ref) {
    for (int t = 0; t < c->n_steps; t++) {
        const int64_t *w = c->tokens + (size_t)t * PP_LM_STREAMS;
        if (!ref[t].ready) {
            if (w[0] != -1) return 0;
            continue;
        }
        int ok = ref[t].text == w[0];
        for (int i = 0; i < PP_LM_AUDIO_CODEBOOKS; i++) ok &= ref[t].agent[i] == w[1 + i] && ref[t].user[i] == w[9 + i];
        if (!ok) return 0;
    }
    return 1;
}

/* n conversations in one batch, joining and leaving as planned; counts the outputs that differ
 * from the lone runs. */
static int run_batch(const lm_case *c, int n, const plan *pl, pp_lmgen_out *const *ref, int *diffs, char *err) {
    pp_lmbatch *b = NULL;
    pp_lmgen *conv[MAX_CONV] = {0};
    int rc = pp_lmbatch_create(c->lm, MAX_CONV, &b, err);
    int end = 0;
    for (int j = 0; j < n; j++)
        if (pl[j].start + pl[j].steps > end) end = pl[j].start + pl[j].steps;
    *diffs = 0;
    for (int tick = 0; !rc && tick < end; tick++) {
        pp_lmgen *active[MAX_CONV];
        int32_t user[MAX_CONV][PP_LM_AUDIO_CODEBOOKS];
        pp_lmgen_out outs[MAX_CONV];
        int who[MAX_CONV], m = 0;
        for (int j = 0; j < n && !rc; j++) {
            if (tick == pl[j].start) rc = new_conv(c, &pl[j].params, &conv[j], err); /* joins: prompt alone */
            if (tick == pl[j].start + pl[j].steps) {                                /* leaves */
                pp_lmgen_destroy(conv[j]);
                conv[j] = NULL;
            }
            if (!conv[j]) continue;
            active[m] = conv[j];
            memcpy(user[m], user_at(c, j, tick - pl[j].start), sizeof user[m]);
            who[m++] = j;
        }
        if (!rc) rc = pp_lmbatch_step(b, active, m, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])user, outs, err);
        for (int i = 0; !rc && i < m; i++) *diffs += !same_out(&outs[i], &ref[who[i]][tick - pl[who[i]].start]);
    }
    for (int j = 0; j < n; j++) pp_lmgen_destroy(conv[j]);
    pp_lmbatch_destroy(b);
    return rc;
}

static void test_case(const lm_case *c, int sampling) {
    char err[PP_ERR_LEN] = "", what[256];
    plan pl[SWEEP_CONV];
    pp_lmgen_out *ref[SWEEP_CONV] = {0};
    int rc = PP_OK;
    for (int j = 0; j < SWEEP_CONV; j++) {
        pl[j].start = JOIN_EVERY * j;
        pl[j].steps = c->n_steps - SHORTER * j;
        pp_lmgen_params_default(&pl[j].params);
        pl[j].params.greedy = !sampling;
        pl[j].params.text_seed = pl[j].params.audio_seed = 1000 + (uint64_t)j;
        /* Each conversation its own settings: a row's draw must not depend on its neighbours'. */
        pl[j].params.text_temp = 0.6f + 0.2f * (float)j;
        pl[j].params.text_top_k = 25 - 10 * j;
        pl[j].params.audio_temp = 0.8f + 0.3f * (float)j;
        pl[j].params.audio_top_k = j == 2 ? 0 : 250 / (j + 1);
        ref[j] = calloc((size_t)c->n_steps, sizeof *ref[j]);
        if (!rc && !ref[j]) rc = pp_fail(err, PP_ENOMEM, "out of memory");
        if (!rc) rc = run_alone(c, j, &pl[j], ref[j], err);
    }
    snprintf(what, sizeof what, "%s: lone runs (%s): %s", c->name, sampling ? "sampling" : "greedy", err);
    TEST_COND(what, rc == 0);
    if (!rc && !sampling) {
        snprintf(what, sizeof what, "%s: a lone greedy run gives the reference's tokens", c->name);
        TEST_COND(what, matches_reference(c, ref[0]));
    }
    for (int n = 1; !rc && n <= SWEEP_CONV; n++) {
        int diffs = -1;
        rc = run_batch(c, n, pl, ref, &diffs, err);
        snprintf(what, sizeof what, "%s: %d conversation(s) batched (%s) give the lone tokens (%d differ) %s",
                 c->name, n, sampling ? "sampling" : "greedy", diffs, err);
        TEST_COND(what, rc == 0 && diffs == 0);
    }
    for (int j = 0; j < SWEEP_CONV; j++) free(ref[j]);
}

/* MANY_CONV greedy conversations, joining over the first JOIN_EVERY ticks on rotated codes. */
static void test_many(const lm_case *c) {
    char err[PP_ERR_LEN] = "", what[256];
    plan pl[MANY_CONV];
    pp_lmgen_out *ref[MANY_CONV] = {0};
    int rc = PP_OK, diffs = -1;
    for (int j = 0; j < MANY_CONV; j++) {
        pl[j].start = j % JOIN_EVERY;
        pl[j].steps = c->n_steps - SHORTER * (j % JOIN_EVERY);
        pp_lmgen_params_default(&pl[j].params);
        pl[j].params.greedy = 1;
        ref[j] = calloc((size_t)c->n_steps, sizeof *ref[j]);
        if (!rc && !ref[j]) rc = pp_fail(err, PP_ENOMEM, "out of memory");
        if (!rc) rc = run_alone(c, j, &pl[j], ref[j], err);
    }
    if (!rc) rc = run_batch(c, MANY_CONV, pl, ref, &diffs, err);
    snprintf(what, sizeof what, "%s: %d conversations batched (greedy) give the lone tokens (%d differ) %s", c->name,
             MANY_CONV, diffs, err);
    TEST_COND(what, rc == 0 && diffs == 0);
    for (int j = 0; j < MANY_CONV; j++) free(ref[j]);
}

/* Sampling draws from (seed, frame, stream) only: the same seed repeats a conversation's
 * tokens exactly, another seed changes them. */
static void test_seeds(const lm_case *c) {
    char err[PP_ERR_LEN] = "", what[256];
    plan pl = {.start = 0, .steps = c->n_steps};
    pp_lmgen_params_default(&pl.params);
    pp_lmgen_out *out[3];
    int rc = PP_OK;
    for (int k = 0; k < 3; k++) {
        out[k] = calloc((size_t)c->n_steps, sizeof *out[k]);
        pl.params.text_seed = pl.params.audio_seed = k < 2 ? 77 : 78;
        if (!rc) rc = out[k] ? run_alone(c, 0, &pl, out[k], err) : pp_fail(err, PP_ENOMEM, "out of memory");
    }
    int same = 0, other = 0, ready = 0;
    for (int t = 0; !rc && t < c->n_steps; t++) {
        same += same_out(&out[0][t], &out[1][t]);
        other += !same_out(&out[0][t], &out[2][t]);
        ready += out[0][t].ready;
    }
    snprintf(what, sizeof what, "%s: the same seed repeats every output (%d of %d) %s", c->name, same, c->n_steps,
             err);
    TEST_COND(what, rc == 0 && same == c->n_steps && ready > 0);
    snprintf(what, sizeof what, "%s: another seed changes the outputs (%d of %d ready differ)", c->name, other, ready);
    TEST_COND(what, rc == 0 && other > 0);
    for (int k = 0; k < 3; k++) free(out[k]);
}

/* Bad ticks are refused before any conversation changes. */
static void test_refusals(const lm_case *c) {
    char err[PP_ERR_LEN];
    pp_lmbatch *b = NULL;
    pp_lmgen *g[2] = {0};
    pp_lmgen_out outs[3];
    int32_t user[3][PP_LM_AUDIO_CODEBOOKS] = {{0}};
    if (pp_lmbatch_create(c->lm, 2, &b, err) || pp_lmgen_create(c->lm, NULL, &g[0], err) ||
        pp_lmgen_create(c->lm, NULL, &g[1], err)) {
        TEST_COND("create", 0);
    } else {
        pp_lmgen *dup[2] = {g[0], g[0]}, *three[3] = {g[0], g[1], g[1]};
        TEST_COND("a conversation twice in a tick is refused",
                  pp_lmbatch_step(b, dup, 2, (const int32_t(*)[8])user, outs, err) == PP_EINVAL);
        TEST_COND("more conversations than the capacity are refused",
                  pp_lmbatch_step(b, three, 3, (const int32_t(*)[8])user, outs, err) == PP_EINVAL);
        user[1][3] = c->cfg->card + 1;
        TEST_COND("an out-of-range user code is refused",
                  pp_lmbatch_step(b, g, 2, (const int32_t(*)[8])user, outs, err) == PP_EINVAL);
        TEST_COND("... and no conversation moved", pp_lmgen_offset(g[0]) == 0 && pp_lmgen_offset(g[1]) == 0);
        TEST_COND("an empty tick is fine", pp_lmbatch_step(b, g, 0, (const int32_t(*)[8])user, outs, err) == 0);
        TEST_COND("capacity", pp_lmbatch_capacity(b) == 2);
    }
    pp_lmgen_destroy(g[0]);
    pp_lmgen_destroy(g[1]);
    pp_lmbatch_destroy(b);
    TEST_COND("capacity 0 is refused", pp_lmbatch_create(c->lm, 0, &b, err) == PP_EINVAL && !b);
}

/* test_lmbatch [CASE_DIR...]: the given cases, or every golden LM case. */
int main(int argc, char **argv) {
    pp_log_set_level(PP_LOG_WARN);
    char dirs[LM_CASE_MAX][512];
    int n = 0;
    for (int i = 1; i < argc && n < LM_CASE_MAX; i++) snprintf(dirs[n++], sizeof dirs[0], "%s", argv[i]);
    if (argc == 1) n = lm_case_list(dirs);
    if (n == 0) TEST_SKIP("no golden LM cases under " PP_TEST_DATA "/golden");
    for (int i = 0; i < n; i++) {
        lm_case c;
        char err[PP_ERR_LEN] = "";
        int rc = lm_case_open(dirs[i], 1, &c, err);
        if (rc) fprintf(stderr, "%s: %s\n", dirs[i], err);
        TEST_COND("open case", rc == 0);
        if (rc) continue;
        test_case(&c, 0);
        test_case(&c, 1);
        test_seeds(&c);
        test_many(&c);
        if (i == 0) test_refusals(&c);
        printf("%s: batches of 1-3 conversations match the lone runs (greedy and sampling), and of %d (greedy)\n",
               c.name, MANY_CONV);
        lm_case_close(&c);
    }
    return test_report();
}
