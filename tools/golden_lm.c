/* golden_lm: an lm-* golden case. Runs every prompt phase from golden.safetensors (voice
 * embeddings + ring, silence, text prompt, silence) greedily, checks the generator's counter and
 * token ring against the reference's, then feeds the user codes step by step and compares
 * the emitted tokens (exactly), the text logits, the agent depformer logits (steps 0-7; steps
 * 8-15 predict user codes that are always given, and are skipped) and every temporal layer's
 * output. Tokens must match exactly, except where the reference's own choice was a near tie
 * (its top-2 logits within LM_TOL of the row's largest): a device's rounding may flip that
 * choice, the conversations then part ways, and the comparison stops at that step (reported).
 *
 * With --prompt-cache the prompts run as a server's prompt cache runs them: batched prefill
 * (pp_lmgen_prefill, runs of PREFILL_ROWS frames) on a scratch conversation, a snapshot of its
 * state, the scratch destroyed, the snapshot restored into a fresh conversation, which then
 * replays the steps: the same comparisons prove the cached start gives the reference's outputs. */
#include "golden.h"
#include "golden_case.h"

#include "io/voice.h"
#include "model/lmgen.h"
#include "session/voice_clone.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Relative error bound for fp32 compute against the reference's eager fp32 run: both use the
 * same bf16-representable weights, so the only differences are summation orders and libm
 * ulps (observed ~1e-6); 1e-3 leaves room for the quantized cases' dequantisation in another
 * order while staying far below what a wrong formula produces (> 1e-2). */
#define LM_TOL 1e-3
/* Prefill run length in --prompt-cache mode: prime, so runs straddle the phase boundaries. */
#define PREFILL_ROWS 7

typedef struct lm_golden {
    float *voice_emb, *text_logits, *dep_logits, *layers;
    int64_t *voice_cache, *silence, *text, *offset, *cache, *user, *tokens;
    int64_t n_voice, n_text, n_steps;
} lm_golden;

static void golden_free(lm_golden *g) {
    void *p[] = {g->voice_emb, g->text_logits, g->dep_logits, g->layers, g->voice_cache, g->silence,
                 g->text,      g->offset,      g->cache,      g->user,   g->tokens};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

static int golden_read(const st_file *f, const pp_lm_config *c, lm_golden *g, char *err) {
    int64_t n;
    int rc;
    if ((rc = golden_load_f32(f, "voice_embeddings", -1, &g->voice_emb, &n, err))) return rc;
    g->n_voice = n / c->dim;
    if (n % c->dim) return pp_fail(err, PP_EFORMAT, "voice_embeddings: %lld values is not a multiple of dim", (long long)n);
    if ((rc = golden_load_i64(f, "voice_cache", PP_LM_STREAMS * 4, &g->voice_cache, NULL, err))) return rc;
    if ((rc = golden_load_i64(f, "silence_frames", 1, &g->silence, NULL, err))) return rc;
    if ((rc = golden_load_i64(f, "text_prompt", -1, &g->text, &g->n_text, err))) return rc;
    if ((rc = golden_load_i64(f, "prompt_offset", 1, &g->offset, NULL, err))) return rc;
    if ((rc = golden_load_i64(f, "prompt_cache", PP_LM_STREAMS * 4, &g->cache, NULL, err))) return rc;
    if ((rc = golden_load_i64(f, "user_tokens", -1, &g->user, &n, err))) return rc;
    g->n_steps = n / PP_LM_AUDIO_CODEBOOKS;
    int64_t T = g->n_steps;
    if ((rc = golden_load_i64(f, "out_tokens", T * PP_LM_STREAMS, &g->tokens, NULL, err))) return rc;
    if ((rc = golden_load_f32(f, "text_logits", T * c->text_card, &g->text_logits, NULL, err))) return rc;
    if ((rc = golden_load_f32(f, "dep_logits", T * c->dep_q * c->card, &g->dep_logits, NULL, err))) return rc;
    return golden_load_f32(f, "layer_outputs", T * c->num_layers * c->dim, &g->layers, NULL, err);
}

/* --prompt-cache: batched prefill on a scratch conversation, snapshot, restore into gen. */
static int run_prompts_cached(pp_lmgen *gen, const pp_lm *lm, const pp_lmgen_prompt *p, size_t *bytes, char *err) {
    pp_lmgen_params params;
    pp_lmgen_params_default(&params);
    params.greedy = 1;
    pp_lmgen *scratch = NULL;
    pp_lmbatch *b = NULL;
    pp_lmgen_snapshot *snap = NULL;
    int rc = pp_lmgen_create(lm, &params, &scratch, err);
    if (!rc) rc = pp_lmbatch_create(lm, PREFILL_ROWS, &b, err);
    if (!rc) rc = pp_lmgen_prefill(scratch, b, p, 0, pp_lmgen_prompt_length(p), err);
    if (!rc) rc = pp_lmgen_snapshot_take(scratch, &snap, err);
    pp_lmgen_destroy(scratch);
    pp_lmbatch_destroy(b);
    if (!rc) rc = pp_lmgen_snapshot_restore(gen, snap, err);
    if (snap) *bytes = pp_lmgen_snapshot_bytes(snap);
    pp_lmgen_snapshot_free(snap);
    return rc;
}

/* The prompt phases as the reference's step_system_prompts runs them; the voice prompt comes
 * from golden.safetensors, or from a voices/NAME.pt file when voice is not NULL. *bytes gets the
 * snapshot's size in --prompt-cache mode. */
static int run_prompts(pp_lmgen *gen, const pp_lm *lm, const lm_golden *g, const pp_voice *voice, int cached,
                       size_t *bytes, char *err) {
    int32_t *ids = malloc((size_t)(g->n_text ? g->n_text : 1) * sizeof *ids);
    if (!ids) return pp_fail(err, PP_ENOMEM, "out of memory");
    for (int64_t i = 0; i < g->n_text; i++) ids[i] = (int32_t)g->text[i];
    pp_lmgen_prompt p = {voice ? voice->embeddings : g->voice_emb, voice ? &voice->cache[0][0] : g->voice_cache,
                         (int)(voice ? voice->frames : g->n_voice), (int)g->silence[0], ids, (int)g->n_text};
    int rc;
    if (cached) {
        rc = run_prompts_cached(gen, lm, &p, bytes, err);
    } else {
        rc = pp_lmgen_prompt_voice(gen, p.voice_emb, p.n_voice, p.voice_cache, err);
        if (!rc) rc = pp_lmgen_prompt_silence(gen, p.silence, err);
        if (!rc) rc = pp_lmgen_prompt_text(gen, ids, p.n_text, err);
        if (!rc) rc = pp_lmgen_prompt_silence(gen, p.silence, err);
    }
    free(ids);
    return rc;
}

typedef struct lm_result {
    int prompt_ok, tokens_ok, steps_emitted;
    double text_err, dep_err, layer_err;
    int64_t tie_step; /* the step of an accepted near-tie flip, or -1 */
    double tie_gap;
} lm_result;

static int check_prompt(pp_lmgen *gen, const lm_golden *g, const char *name) {
    int64_t ring[PP_LM_STREAMS * 8];
    int ok = pp_lmgen_offset(gen) == g->offset[0];
    if (!ok)
        fprintf(stderr, "%s: prompt offset %lld, reference %lld\n", name, (long long)pp_lmgen_offset(gen),
                (long long)g->offset[0]);
    if (pp_lmgen_ring_width(gen) != 4) return 0;
    pp_lmgen_token_ring(gen, ring);
    for (int i = 0; i < PP_LM_STREAMS * 4; i++)
        if (ring[i] != g->cache[i]) {
            fprintf(stderr, "%s: prompt ring [%d][%d] = %lld, reference %lld\n", name, i / 4, i % 4,
                    (long long)ring[i], (long long)g->cache[i]);
            ok = 0;
        }
    return ok;
}

static double max_d(double a, double b) { return a > b ? a : b; }

static size_t argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* Whether our greedy choice of a row differs from the reference's; *gap gets the reference's
 * top-2 gap relative to its largest |logit|. */
static int choice_differs(const float *ours, const float *ref, size_t n, double *gap) {
    size_t top = argmax(ref, n);
    double second = -INFINITY, scale = 0;
    for (size_t i = 0; i < n; i++) {
        if (i != top && ref[i] > second) second = ref[i];
        scale = max_d(scale, fabs(ref[i]));
    }
    *gap = scale > 0 ? (ref[top] - second) / scale : 0;
    return argmax(ours, n) != top;
}

/* The first row of a step's choices (text, then the agent codebooks) that differs from the
 * reference's at a near tie (gap <= LM_TOL): its index (0 text, 1 + s codebook s), or -1. A
 * choice that differs elsewhere is left to the token and logit checks, which fail. */
static int near_tie(const pp_lmgen_trace *tr, const pp_lm_config *c, const lm_golden *g, int64_t t, double *gap) {
    if (choice_differs(tr->text_logits, g->text_logits + t * c->text_card, (size_t)c->text_card, gap))
        return *gap <= LM_TOL ? 0 : -1;
    for (int s = 0; s < PP_LM_AUDIO_CODEBOOKS; s++)
        if (choice_differs(tr->dep_logits + (size_t)s * c->card,
                           g->dep_logits + ((size_t)t * c->dep_q + (size_t)s) * c->card, (size_t)c->card, gap))
            return *gap <= LM_TOL ? 1 + s : -1;
    return -1;
}

/* The conversation: one step per user frame, comparing everything the reference recorded. */
static int run_steps(pp_lmgen *gen, const pp_lm_config *c, const lm_golden *g, const char *name, lm_result *r,
                     char *err) {
    size_t nl = (size_t)c->num_layers * c->dim;
    pp_lmgen_trace tr = {0};
    tr.text_logits = malloc((size_t)c->text_card * sizeof(float));
    tr.dep_logits = malloc((size_t)PP_LM_AUDIO_CODEBOOKS * c->card * sizeof(float));
    tr.layer_outputs = malloc(nl * sizeof(float));
    if (!tr.text_logits || !tr.dep_logits || !tr.layer_outputs) {
        free(tr.text_logits);
        free(tr.dep_logits);
        free(tr.layer_outputs);
        return pp_fail(err, PP_ENOMEM, "out of memory");
    }
    pp_lmgen_set_trace(gen, &tr);
    int rc = PP_OK;
    r->tokens_ok = 1;
    r->tie_step = -1;
    for (int64_t t = 0; t < g->n_steps && !rc && r->tie_step < 0; t++) {
        int32_t user[PP_LM_AUDIO_CODEBOOKS];
        for (int i = 0; i < PP_LM_AUDIO_CODEBOOKS; i++) user[i] = (int32_t)g->user[t * PP_LM_AUDIO_CODEBOOKS + i];
        pp_lmgen_out out;
        int computed = pp_lmgen_step_forced(gen, -1, NULL, user, &out, NULL, err);
        if (computed < 0) {
            rc = computed;
            break;
        }
        /* A near tie: the text logits (and the codebooks before the flip) of this step still
         * compare; what follows is conditioned on the other choice. */
        int tie = out.ready && computed ? near_tie(&tr, c, g, t, &r->tie_gap) : -1;
        if (tie >= 0) {
            r->tie_step = t;
            r->text_err = max_d(r->text_err, golden_rel_err(tr.text_logits, g->text_logits + t * c->text_card, 1,
                                                            (size_t)c->text_card));
            if (tie > 1)
                r->dep_err =
                    max_d(r->dep_err, golden_rel_err(tr.dep_logits, g->dep_logits + (size_t)t * c->dep_q * c->card,
                                                     (size_t)tie - 1, (size_t)c->card));
            break;
        }
        const int64_t *want = g->tokens + t * PP_LM_STREAMS;
        int32_t got[PP_LM_STREAMS] = {out.text};
        memcpy(got + 1, out.agent, sizeof out.agent);
        memcpy(got + 1 + PP_LM_AUDIO_CODEBOOKS, out.user, sizeof out.user);
        int same = 1;
        for (int k = 0; k < PP_LM_STREAMS; k++) same &= out.ready ? got[k] == want[k] : want[k] == -1;
        if (!same) {
            fprintf(stderr, "%s: step %lld tokens differ (ready %d): text %d vs %lld, agent0 %d vs %lld\n", name,
                    (long long)t, out.ready, got[0], (long long)want[0], got[1], (long long)want[1]);
            r->tokens_ok = 0;
        }
        if (computed)
            r->layer_err = max_d(r->layer_err, golden_rel_err(tr.layer_outputs, g->layers + t * nl,
                                                              (size_t)c->num_layers, (size_t)c->dim));
        if (!out.ready) continue;
        r->steps_emitted++;
        r->text_err = max_d(r->text_err, golden_rel_err(tr.text_logits, g->text_logits + t * c->text_card, 1,
                                                        (size_t)c->text_card));
        r->dep_err = max_d(r->dep_err, golden_rel_err(tr.dep_logits, g->dep_logits + (size_t)t * c->dep_q * c->card,
                                                      PP_LM_AUDIO_CODEBOOKS, (size_t)c->card));
    }
    pp_lmgen_set_trace(gen, NULL);
    free(tr.text_logits);
    free(tr.dep_logits);
    free(tr.layer_outputs);
    return rc;
}

/* clone.safetensors (when present): the voice-cloning path after the codec. Each frame's codes
 * go in as the agent's stream (text PAD, user sine) from a fresh conversation; the input
 * embeddings of the computing calls and the final ring are what a voices/NAME.pt stores. */
/* The voice-cloning path after the codec (docs/model.md §6.1) through the library's own
 * pp_voice_clone_codes: the saved embeddings and token ring must be the reference's. */
static int run_clone(const pp_lm *lm, const char *dir, double *emb_err, int *ring_ok, char *err) {
    const pp_lm_config *c = pp_lm_get_config(lm);
    st_file *f = NULL;
    int64_t *codes64 = NULL, *cache = NULL, n = 0;
    int32_t *codes = NULL;
    float *want = NULL;
    pp_voice voice = {0};
    int rc = golden_open(dir, "clone.safetensors", &f, err);
    if (!rc) rc = golden_load_i64(f, "voice_codes", -1, &codes64, &n, err);
    n /= PP_LM_AUDIO_CODEBOOKS;
    if (!rc && n < 2) rc = pp_fail(err, PP_EFORMAT, "%s/clone.safetensors: fewer than 2 voice_codes frames", dir);
    if (!rc) rc = golden_load_f32(f, "embeddings", (n - 1) * c->dim, &want, NULL, err);
    if (!rc) rc = golden_load_i64(f, "cache", PP_LM_STREAMS * 4, &cache, NULL, err);
    if (!rc && !(codes = malloc((size_t)n * PP_LM_AUDIO_CODEBOOKS * sizeof *codes)))
        rc = pp_fail(err, PP_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n * PP_LM_AUDIO_CODEBOOKS; i++) codes[i] = (int32_t)codes64[i];
    if (!rc) rc = pp_voice_clone_codes(lm, codes, n, &voice, err);
    if (!rc) {
        *ring_ok = memcmp(&voice.cache[0][0], cache, sizeof voice.cache) == 0;
        *emb_err = golden_rel_err(voice.embeddings, want, (size_t)voice.frames, (size_t)c->dim);
    }
    pp_voice_free(&voice);
    free(codes64);
    free(codes);
    free(cache);
    free(want);
    pp_st_close(f);
    return rc;
}

int golden_lm_run(const char *dir, const golden_opts *o, char *err) {
    char wpath[4096], cpath[4096];
    golden_case_paths(dir, wpath, sizeof wpath, cpath, sizeof cpath);
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    pp_lmgen *gen = NULL;
    st_file *gf = NULL;
    lm_golden g = {0};
    lm_result r = {.tie_step = -1};
    pp_voice voice = {0};
    int rc = golden_backend(o, &be, err);
    if (!rc) rc = pp_lm_open(be, wpath, cpath, &lm, err);
    if (!rc && o->voice) rc = pp_voice_load(o->voice, pp_lm_get_config(lm)->dim, &voice, err);
    if (!rc) rc = golden_open(dir, "golden.safetensors", &gf, err);
    if (!rc) rc = golden_read(gf, pp_lm_get_config(lm), &g, err);
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    p.greedy = 1; /* the golden cases decode by argmax */
    if (!rc) rc = pp_lmgen_create(lm, &p, &gen, err);
    size_t snap_bytes = 0;
    if (!rc) rc = run_prompts(gen, lm, &g, o->voice ? &voice : NULL, o->prompt_cache, &snap_bytes, err);
    if (!rc) {
        r.prompt_ok = check_prompt(gen, &g, dir);
        rc = run_steps(gen, pp_lm_get_config(lm), &g, dir, &r, err);
    }
    char clone_note[96] = "";
    int clone_ok = 1;
    if (!rc && golden_exists(dir, "clone.safetensors")) {
        double emb_err = 0;
        int ring_ok = 0;
        rc = run_clone(lm, dir, &emb_err, &ring_ok, err);
        clone_ok = ring_ok && emb_err <= LM_TOL;
        snprintf(clone_note, sizeof clone_note, ", clone ring %s embeddings %.2e", ring_ok ? "ok" : "DIFF", emb_err);
    }
    if (o->prompt_cache)
        snprintf(clone_note + strlen(clone_note), sizeof clone_note - strlen(clone_note),
                 ", from a %zu-byte prompt snapshot", snap_bytes);
    int pass = 0;
    char tie_note[96] = "";
    if (!rc && r.tie_step >= 0)
        snprintf(tie_note, sizeof tie_note, " until a near tie at step %lld (reference top-2 gap %.1e), where it stops",
                 (long long)r.tie_step, r.tie_gap);
    if (!rc) {
        pass = clone_ok && r.prompt_ok && r.tokens_ok && r.text_err <= LM_TOL && r.dep_err <= LM_TOL &&
               r.layer_err <= LM_TOL;
        printf("%s%s%s%s: prompt %s, tokens %s%s (%d steps emitted of %lld), text_logits %.2e, dep_logits %.2e, "
               "layers %.2e%s (tol %.0e): %s\n",
               dir, o->voice ? " --voice " : "", o->voice ? o->voice : "", o->prompt_cache ? " --prompt-cache" : "",
               r.prompt_ok ? "ok" : "DIFF", r.tokens_ok ? "exact" : "DIFF", tie_note, r.steps_emitted,
               (long long)g.n_steps, r.text_err, r.dep_err, r.layer_err, clone_note, LM_TOL, pass ? "PASS" : "FAIL");
    }
    golden_free(&g);
    pp_voice_free(&voice);
    pp_st_close(gf);
    pp_lmgen_destroy(gen);
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return rc ? rc : !pass;
}
