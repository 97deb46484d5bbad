/* test_kv_cache: the bf16 and int8 KV caches against the f32 reference on every golden LM case
 * (greedy). The two conversations run in lockstep; their logits are compared stream by stream
 * (text, then the agent depformer steps) up to the first token that differs, after which they
 * are different conversations. Checks: logits within the format's tolerance before that point;
 * the first differing token only where the f32 run's top-2 logits are within the quantization
 * error (2 × tolerance, relative to the row's largest |logit|). Prints per case and format the
 * emitted tokens identical / total and the worst logit deviation. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "lm_case.h"

#include <string.h>

/* Worst row-relative logit deviation allowed before the first differing token. bf16 keeps 8
 * significant bits of each key and value (relative error <= 2^-9), int8 rounds each to within
 * absmax/254 of its head; through softmax and the later layers the golden cases' logits moved
 * by at most 3.3e-4 (bf16) and 7.8e-4 (int8). The bounds leave about 6× that; a wrong scale,
 * slot or rounding gives errors above 1e-2. */
#define TOL_BF16 2e-3
#define TOL_INT8 5e-3

typedef struct agreement {
    int same, total;         /* emitted text + agent tokens */
    double dev;              /* worst logit deviation before the first differing token */
    int div_step, div_stream; /* first differing token (-1: none) */
    double div_gap;          /* the f32 run's top-2 gap there, relative to its largest |logit| */
} agreement;

static double top2_gap(const float *l, int n) {
    double a = -INFINITY, b = -INFINITY, m = 0;
    for (int i = 0; i < n; i++) {
        if (l[i] > a) b = a, a = l[i];
        else if (l[i] > b) b = l[i];
        if (fabs(l[i]) > m) m = fabs(l[i]);
    }
    return m > 0 ? (a - b) / m : 0;
}

/* The greedy token: the largest logit, lowest index on ties. */
static int argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* One stream of one step: compares while the runs still agree. */
static void compare(agreement *ag, int t, int stream, const float *got, const float *ref, int n) {
    if (ag->div_step >= 0) return;
    double e = test_rel_err(got, ref, (size_t)n);
    if (e > ag->dev) ag->dev = e;
    if (argmax(got, n) != argmax(ref, n)) {
        ag->div_step = t;
        ag->div_stream = stream;
        ag->div_gap = top2_gap(ref, n);
    }
}

typedef struct run {
    pp_lmgen *g;
    pp_lmgen_trace tr;
} run;

static int run_open(const lm_case *c, pp_kv_format fmt, run *r, char *err) {
    memset(r, 0, sizeof *r);
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    p.greedy = 1;
    p.kv_cache = fmt;
    r->tr.text_logits = malloc((size_t)c->cfg->text_card * sizeof(float));
    r->tr.dep_logits = malloc((size_t)PP_LM_AUDIO_CODEBOOKS * c->cfg->card * sizeof(float));
    if (!r->tr.text_logits || !r->tr.dep_logits) return pp_fail(err, PP_ENOMEM, "out of memory");
    int rc = pp_lmgen_create(c->lm, &p, &r->g, err);
    if (!rc) rc = lm_case_prompt(c, r->g, err);
    if (!rc) pp_lmgen_set_trace(r->g, &r->tr);
    return rc;
}

static void run_close(run *r) {
    pp_lmgen_destroy(r->g);
    free(r->tr.text_logits);
    free(r->tr.dep_logits);
}

static int agree(const lm_case *c, pp_kv_format fmt, agreement *ag, char *err) {
    run ref = {0}, got = {0};
    memset(ag, 0, sizeof *ag);
    ag->div_step = -1;
    int rc = run_open(c, PP_KV_F32, &ref, err);
    if (!rc) rc = run_open(c, fmt, &got, err);
    const pp_lm_config *cfg = c->cfg;
    int agents = cfg->dep_q < PP_LM_AUDIO_CODEBOOKS ? cfg->dep_q : PP_LM_AUDIO_CODEBOOKS;
    for (int t = 0; !rc && t < c->n_steps; t++) {
        pp_lmgen_out a, b;
        rc = pp_lmgen_step(ref.g, c->user[t], &a, err);
        if (!rc) rc = pp_lmgen_step(got.g, c->user[t], &b, err);
        if (rc || !ref.tr.heads_ran || !got.tr.heads_ran) continue;
        compare(ag, t, 0, got.tr.text_logits, ref.tr.text_logits, cfg->text_card);
        for (int s = 0; s < agents; s++)
            compare(ag, t, 1 + s, got.tr.dep_logits + (size_t)s * cfg->card, ref.tr.dep_logits + (size_t)s * cfg->card,
                    cfg->card);
        if (!a.ready) continue;
        ag->total += 1 + PP_LM_AUDIO_CODEBOOKS;
        ag->same += a.text == b.text;
        for (int i = 0; i < PP_LM_AUDIO_CODEBOOKS; i++) ag->same += a.agent[i] == b.agent[i];
    }
    run_close(&ref);
    run_close(&got);
    return rc;
}

int main(void) {
    pp_log_set_level(PP_LOG_WARN);
    char dirs[LM_CASE_MAX][512];
    int n = lm_case_list(dirs);
    if (n == 0) TEST_SKIP("no golden LM cases under " PP_TEST_DATA "/golden");
    const struct {
        pp_kv_format fmt;
        const char *name;
        double tol;
    } fmts[] = {{PP_KV_BF16, "bf16", TOL_BF16}, {PP_KV_INT8, "int8", TOL_INT8}};
    for (int i = 0; i < n; i++) {
        lm_case c;
        char err[PP_ERR_LEN] = "", what[512];
        int rc = lm_case_open(dirs[i], 1, &c, err);
        if (rc) fprintf(stderr, "%s: %s\n", dirs[i], err);
        TEST_COND("open case", rc == 0);
        for (int f = 0; !rc && f < 2; f++) {
            agreement ag;
            rc = agree(&c, fmts[f].fmt, &ag, err);
            snprintf(what, sizeof what, "%s %s: runs (%s)", c.name, fmts[f].name, err);
            TEST_COND(what, rc == 0);
            if (rc) break;
            printf("%-22s kv %s: tokens identical %3d / %3d, max logit deviation %.2e", c.name, fmts[f].name, ag.same,
                   ag.total, ag.dev);
            if (ag.div_step >= 0)
                printf(", first difference step %d stream %d (f32 top-2 gap %.2e)\n", ag.div_step, ag.div_stream,
                       ag.div_gap);
            else
                printf("\n");
            snprintf(what, sizeof what, "%s %s: logit deviation %.2e <= %.0e", c.name, fmts[f].name, ag.dev,
                     fmts[f].tol);
            TEST_COND(what, ag.dev <= fmts[f].tol);
            snprintf(what, sizeof what, "%s %s: tokens differ only within the quantization error (gap %.2e)", c.name,
                     fmts[f].name, ag.div_gap);
            TEST_COND(what, ag.div_step < 0 || ag.div_gap <= 2 * fmts[f].tol);
        }
        lm_case_close(&c);
    }
    return test_report();
}
