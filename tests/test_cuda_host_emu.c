/* test_cuda_host_emu: the CUDA backend's host code (src/backend/cuda.c) on the emulated device,
 * with the emulation's failure hooks (tests/cuda_emu/cuda_runtime_api.h) making one call fail
 * at a time: creating the backend, loading the golden mimi-synth codec, running its batched
 * frames and an LM frame must each fail with an error naming the call, leave no allocation
 * behind, and never report a frame whose device work failed as done. Also: the environment
 * switches' parse, and the codec's recorded calls when the batch's row count alternates from
 * frame to frame (as conversations whose frame clocks are out of phase make it). */
#include "test.h"

#include "backend/backend.h"
#include "lm_case.h"
#include "model/mimi.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- environment switches ---- */

/* Whether the backend is created with `name` set to `value`; on refusal err says why. */
static int creates_with(const char *name, const char *value, char *err) {
    setenv(name, value, 1);
    pp_backend *be;
    int rc = pp_backend_create("cuda", 1, &be, err);
    if (!rc) pp_backend_destroy(be);
    unsetenv(name);
    return rc == PP_OK;
}

static void test_env(void) {
    char err[PP_ERR_LEN];
    static const char *const imma_ok[] = {"0", "2", "9", " 4", "+3"};
    static const char *const imma_bad[] = {"1", "10", "-2", "abc", "", "4x", "4 ", "99999999999999999999"};
    int ok = 1, named = 1;
    for (size_t i = 0; i < sizeof imma_ok / sizeof *imma_ok; i++)
        ok &= creates_with("PP_CUDA_IMMA_MIN", imma_ok[i], err);
    for (size_t i = 0; i < sizeof imma_bad / sizeof *imma_bad; i++) {
        ok &= !creates_with("PP_CUDA_IMMA_MIN", imma_bad[i], err);
        named &= strstr(err, "PP_CUDA_IMMA_MIN=") != NULL;
    }
    TEST_COND("PP_CUDA_IMMA_MIN: whole integers 0 or 2..9 only", ok && named);
    ok = creates_with("PP_CUDA_ATTN_SPAN", "0", err) && creates_with("PP_CUDA_ATTN_SPAN", "128", err) &&
         !creates_with("PP_CUDA_ATTN_SPAN", "100", err) && !creates_with("PP_CUDA_ATTN_SPAN", "-64", err) &&
         !creates_with("PP_CUDA_ATTN_SPAN", "64k", err) && !creates_with("PP_CUDA_ATTN_SPAN", "1114112", err);
    TEST_COND("PP_CUDA_ATTN_SPAN: whole multiples of 64 up to 2^20 only",
              ok && strstr(err, "PP_CUDA_ATTN_SPAN=1114112") != NULL);
    ok = creates_with("PP_CUDA_ATTN_AHEAD", "1", err) && creates_with("PP_CUDA_IMMA_L1_AHEAD", "0", err) &&
         !creates_with("PP_CUDA_ATTN_AHEAD", "2", err) && !creates_with("PP_CUDA_ATTN_AHEAD", "1.0", err) &&
         !creates_with("PP_CUDA_IMMA_L1_AHEAD", "", err);
    TEST_COND("the on/off switches: 0 or 1 only", ok && strstr(err, "PP_CUDA_IMMA_L1_AHEAD=") != NULL);
    creates_with("PP_CUDA_IMMA_L1_AHEAD", "1", err); /* back to the defaults for what follows */
}

/* ---- failures while creating the backend ---- */

static const struct {
    enum pk_emu_call call;
    const char *named; /* what the error must name */
} CREATE_CALLS[] = {
    {PK_EMU_MALLOC, "cudaMalloc"}, {PK_EMU_MALLOC_HOST, "cudaMallocHost"}, {PK_EMU_CREATE, "Create"},
    {PK_EMU_SYNC, "Synchronize"},  {PK_EMU_LAUNCH, "kernel"},
};

static void test_create_failures(void) {
    char err[PP_ERR_LEN];
    const long live = pk_emu_live_objects();
    for (size_t k = 0; k < sizeof CREATE_CALLS / sizeof *CREATE_CALLS; k++) {
        int failures = 0, named = 1, leaks = 0;
        for (long nth = 1; nth < 64; nth++) {
            pk_emu_fail_nth(CREATE_CALLS[k].call, nth);
            pp_backend *be;
            err[0] = 0;
            int rc = pp_backend_create("cuda", 1, &be, err);
            pk_emu_fail_nth(CREATE_CALLS[k].call, 0);
            if (!rc) {
                pp_backend_destroy(be);
                leaks += pk_emu_live_objects() != live;
                break;
            }
            failures++;
            if (!strstr(err, CREATE_CALLS[k].named)) {
                fprintf(stderr, "call %zu, %ld-th: error '%s' does not name %s\n", k, nth, err, CREATE_CALLS[k].named);
                named = 0;
            }
            leaks += pk_emu_live_objects() != live;
        }
        char what[160];
        snprintf(what, sizeof what, "creating the backend: each failing %s is an error naming it, nothing left behind",
                 CREATE_CALLS[k].named);
        TEST_COND(what, failures > 0 && named && !leaks);
    }
}

/* ---- failures while loading the codec ---- */

#define CODEC PP_TEST_DATA "/golden/mimi-synth/model.safetensors"

static const struct {
    enum pk_emu_call call;
    const char *name;
} LOAD_CALLS[] = {{PK_EMU_MALLOC, "cudaMalloc"}, {PK_EMU_COPY, "cudaMemcpyAsync"}, {PK_EMU_SYNC, "a synchronisation"},
                  {PK_EMU_SET, "cudaMemsetAsync"}};

static void test_load_failures(void) {
    char err[PP_ERR_LEN];
    const long live = pk_emu_live_objects();
    for (size_t k = 0; k < sizeof LOAD_CALLS / sizeof *LOAD_CALLS; k++) {
        int failures = 0, unreported = 0, leaks = 0, loaded = 0;
        /* the n-th call for n = 1, 2, 3, 4, 5, 7, 9, 12, 16, ... until the load meets none */
        for (long nth = 1; nth < 4000 && !loaded; nth += 1 + nth / 4) {
            pp_backend *be;
            if (pp_backend_create("cuda", 1, &be, err)) break;
            pk_emu_fail_nth(LOAD_CALLS[k].call, nth);
            mimi_model *m;
            int rc = pp_mimi_open(be, CODEC, NULL, &m, err);
            const int fired = !pk_emu_fail_pending(LOAD_CALLS[k].call);
            pk_emu_fail_nth(LOAD_CALLS[k].call, 0);
            if (!rc) {
                /* a load that returns PP_OK must not have met the failure */
                if (fired) {
                    fprintf(stderr, "the %ld-th %s failed, yet the codec loaded\n", nth, LOAD_CALLS[k].name);
                    unreported++;
                }
                loaded = !fired;
                pp_mimi_close(m);
            } else {
                failures++;
            }
            pp_backend_destroy(be);
            leaks += pk_emu_live_objects() != live;
        }
        char what[160];
        snprintf(what, sizeof what, "loading the codec: each failing %s fails the load, nothing left behind",
                 LOAD_CALLS[k].name);
        if (!(failures > 0 && loaded && !unreported && !leaks))
            fprintf(stderr, "%s: %d failed loads, %d unreported failures, %d leaks, loaded %d\n", LOAD_CALLS[k].name,
                    failures, unreported, leaks, loaded);
        TEST_COND(what, failures > 0 && loaded && !unreported && !leaks);
    }
}

/* ---- the codec's batched frames ---- */

#define CONVS 2

/* A codec on its own backend, a batch and CONVS conversations. */
typedef struct codec_run {
    pp_backend *be;
    mimi_model *m;
    mimi_batch *batch;
    mimi_state *s[CONVS];
    int frame, ncb, frames;
    float *pcm_in, *pcm_out[CONVS];
    int32_t codes[CONVS][QUANTIZER_MAX_CODES];
} codec_run;

static void codec_close(codec_run *r);

/* Opens the codec run, or leaves nothing open and r closed (codec_close may still be called). */
static int codec_open(codec_run *r, char *err) {
    memset(r, 0, sizeof *r);
    int rc = pp_backend_create("cuda", 1, &r->be, err);
    if (!rc) rc = pp_mimi_open(r->be, CODEC, NULL, &r->m, err);
    if (rc) return rc;
    r->frame = pp_mimi_get_config(r->m)->frame_size;
    r->ncb = pp_mimi_get_config(r->m)->quantizer.num_codebooks;
    rc = pp_mimi_batch_create(r->m, CONVS, &r->batch, err);
    for (int k = 0; k < CONVS && !rc; k++) rc = pp_mimi_state_create(r->m, &r->s[k], err);
    r->pcm_in = calloc((size_t)r->frame, sizeof(float));
    for (int k = 0; k < CONVS; k++) r->pcm_out[k] = calloc((size_t)r->frame, sizeof(float));
    if (rc) codec_close(r);
    return rc;
}

/* Closes what is open of r and zeroes it, so a second close does nothing. */
static void codec_close(codec_run *r) {
    for (int k = 0; k < CONVS; k++) {
        pp_mimi_state_destroy(r->s[k]);
        free(r->pcm_out[k]);
    }
    free(r->pcm_in);
    pp_mimi_batch_destroy(r->batch);
    pp_mimi_close(r->m);
    pp_backend_destroy(r->be);
    memset(r, 0, sizeof *r);
}

/* One frame, encoded and decoded, of conversations 0..n-1: a tone that changes with the frame. */
static int codec_tick(codec_run *r, int n, char *err) {
    for (int i = 0; i < r->frame; i++) r->pcm_in[i] = 0.3f * sinf(0.01f * (float)(i + 1) * (float)(r->frames % 7 + 1));
    r->frames++;
    const float *in[CONVS];
    int32_t *codes[CONVS];
    const int32_t *codes_in[CONVS];
    for (int k = 0; k < n; k++) {
        in[k] = r->pcm_in;
        codes[k] = r->codes[k];
        codes_in[k] = r->codes[k];
    }
    int rc = pp_mimi_encode_batch(r->batch, r->s, n, in, codes, err);
    return rc ? rc : pp_mimi_decode_batch(r->batch, r->s, n, codes_in, r->pcm_out, err);
}

/* A device call failing in a frame: the frame reports it, naming the call, and so does every
 * later frame (the device's failure is kept); nothing is left behind. `warm`: frames before it
 * (the first of each row count runs plainly, the second records, later ones replay). */
static void tick_failure(enum pk_emu_call call, int warm, const char *what, const char *named) {
    char err[PP_ERR_LEN];
    const long live = pk_emu_live_objects();
    codec_run r;
    int rc = codec_open(&r, err);
    for (int t = 0; t < warm && !rc; t++) rc = codec_tick(&r, CONVS, err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("the codec runs before the failure", 0);
        codec_close(&r);
        return;
    }
    pk_emu_fail_nth(call, 1);
    err[0] = 0;
    int failed = codec_tick(&r, CONVS, err) != PP_OK, is_named = strstr(err, named) != NULL;
    const int fired = !pk_emu_fail_pending(call);
    pk_emu_fail_nth(call, 0);
    if (!is_named) fprintf(stderr, "%s: error '%s' does not name %s\n", what, err, named);
    err[0] = 0;
    int later_failed = codec_tick(&r, CONVS, err) != PP_OK && strstr(err, named) != NULL;
    codec_close(&r);
    char cond[200];
    snprintf(cond, sizeof cond, "%s: the frame fails naming it, so do later frames, nothing left behind", what);
    TEST_COND(cond, fired && failed && is_named && later_failed && pk_emu_live_objects() == live);
}

static void test_tick_failures(void) {
    tick_failure(PK_EMU_LAUNCH, 1, "a kernel launch failing in a plain frame", "launch failure");
    tick_failure(PK_EMU_COPY, 3, "an upload failing before a frame", "cudaMemcpyAsync");
    tick_failure(PK_EMU_SYNC, 3, "a download's synchronisation failing", "cudaStreamSynchronize");
    tick_failure(PK_EMU_END_CAPTURE, 2, "a recording that the device invalidates", "cudaStreamEndCapture");
    tick_failure(PK_EMU_INSTANTIATE, 2, "a recording that cannot be instantiated", "cudaGraphInstantiate");
    tick_failure(PK_EMU_GRAPH_LAUNCH, 4, "a replay failing", "cudaGraphLaunch");
}

/* A fill failing in the first frames, the n-th for n = 1..6 (among them the zeroing of the
 * attention's counters as the backend first grows them): nothing is left behind. */
static void test_growth_failures(void) {
    char err[PP_ERR_LEN];
    int fired = 0, leaks = 0;
    for (long nth = 1; nth <= 6; nth++) {
        const long live = pk_emu_live_objects();
        codec_run r;
        if (codec_open(&r, err)) {
            fprintf(stderr, "%s\n", err);
            break;
        }
        pk_emu_fail_nth(PK_EMU_SET, nth);
        for (int t = 0; t < 3; t++) codec_tick(&r, CONVS, err);
        fired += !pk_emu_fail_pending(PK_EMU_SET);
        pk_emu_fail_nth(PK_EMU_SET, 0);
        codec_close(&r);
        if (pk_emu_live_objects() != live) {
            fprintf(stderr, "the %ld-th fill in a frame failed: %ld objects left behind\n", nth,
                    pk_emu_live_objects() - live);
            leaks++;
        }
    }
    TEST_COND("a fill failing in the first frames leaves nothing behind", fired > 0 && !leaks);
}

/* A kernel launch failing in an LM frame (the golden lm-nf2 model): that step fails naming it,
 * and so does the next. */
static void test_lm_failure(void) {
    char err[PP_ERR_LEN];
    const long live = pk_emu_live_objects();
    lm_case c;
    pp_lmgen *g = NULL;
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    int rc = lm_case_open(PP_TEST_DATA "/golden/lm-nf2", 1, &c, err);
    if (!rc) rc = pp_lmgen_create(c.lm, &p, &g, err);
    pp_lmgen_out out;
    if (!rc) rc = pp_lmgen_step(g, c.user[0], &out, err);
    if (rc) {
        fprintf(stderr, "lm-nf2: %s\n", err);
        TEST_COND("the LM runs before the failure", 0);
        return;
    }
    pk_emu_fail_nth(PK_EMU_LAUNCH, 1);
    err[0] = 0;
    const int failed = pp_lmgen_step(g, c.user[1], &out, err) != PP_OK && strstr(err, "launch failure") != NULL;
    const int fired = !pk_emu_fail_pending(PK_EMU_LAUNCH);
    pk_emu_fail_nth(PK_EMU_LAUNCH, 0);
    err[0] = 0;
    const int later_failed = pp_lmgen_step(g, c.user[2], &out, err) != PP_OK && strstr(err, "launch failure") != NULL;
    pp_lmgen_destroy(g);
    lm_case_close(&c);
    TEST_COND("a kernel launch failing in an LM frame: the step fails naming it, so does the next, nothing left behind",
              fired && failed && later_failed && pk_emu_live_objects() == live);
}

/* ---- recordings of alternating row counts ---- */

static struct {
    const pp_backend_ops *device;
    int begins, replays;
} counted;

static int counting_begin(pp_backend *be, int slot, char *err) {
    counted.begins++;
    return counted.device->graph_begin(be, slot, err);
}

static int counting_replay(pp_backend *be, int slot, char *err) {
    counted.replays++;
    return counted.device->graph_replay(be, slot, err);
}

/* Conversations whose frame clocks are out of phase: the codec's calls alternate between 2 rows
 * and 1. Each row count is recorded once and replayed from then on, and the replayed frames
 * give the codes and audio of the same conversations run alone on a second backend. */
static void test_alternating_rows(void) {
    char err[PP_ERR_LEN];
    codec_run r, lone;
    int rc = codec_open(&r, err); /* each open leaves nothing open when it fails */
    if (!rc && (rc = codec_open(&lone, err)) != PP_OK) codec_close(&r);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("two codecs open", 0);
        return;
    }
    pp_backend_ops ops = *r.be->ops;
    counted.device = r.be->ops;
    ops.graph_begin = counting_begin;
    ops.graph_replay = counting_replay;
    r.be->ops = &ops;
    const int ticks = 16;
    int same = 1;
    for (int t = 0; t < ticks && !rc; t++) {
        const int n = t % 2 ? 1 : 2;
        rc = codec_tick(&r, n, err);
        for (int k = 0; k < n && !rc; k++) {
            mimi_state *alone[1] = {lone.s[k]};
            const float *in[1] = {r.pcm_in};
            int32_t *codes[1] = {lone.codes[k]};
            const int32_t *codes_in[1] = {lone.codes[k]};
            lone.frames = r.frames;
            rc = pp_mimi_encode_batch(lone.batch, alone, 1, in, codes, err);
            if (!rc) rc = pp_mimi_decode_batch(lone.batch, alone, 1, codes_in, &lone.pcm_out[k], err);
            same &= !rc && memcmp(lone.codes[k], r.codes[k], (size_t)r.ncb * sizeof(int32_t)) == 0 &&
                    memcmp(lone.pcm_out[k], r.pcm_out[k], (size_t)r.frame * sizeof(float)) == 0;
        }
    }
    if (rc) fprintf(stderr, "%s\n", err);
    printf("%d frames of alternating 2 and 1 rows: %d recordings, %d replays\n", ticks, counted.begins,
           counted.replays);
    r.be->ops = counted.device;
    /* per direction and row count: the first call is fresh or plain, the second records */
    TEST_COND("alternating row counts: each recorded once, then replayed",
              rc == 0 && counted.begins == 4 && counted.replays >= 2 * (ticks - 6));
    TEST_COND("the replayed frames equal the conversations run alone", rc == 0 && same);
    codec_close(&lone);
    codec_close(&r);
}

/* ---- recordings of the LM frame under changing conversation sets ---- */

#define SET_CONV 3  /* conversations A, B, C */
#define SET_TICKS 9 /* ticks of each alternation */
#define SET_STEPS (1 + 2 * SET_TICKS)

/* Conversation j's user codes at its own k-th step. */
static const int32_t *set_user(const lm_case *c, int j, int k) { return c->user[(k + 5 * j) % c->n_steps]; }

static int set_same(const pp_lmgen_out *a, const pp_lmgen_out *b) {
    return a->ready == b->ready && a->text == b->text && memcmp(a->agent, b->agent, sizeof a->agent) == 0 &&
           memcmp(a->user, b->user, sizeof a->user) == 0;
}

/* Tick t's conversations: all three once (every conversation's first call computes nothing),
 * then {A,B},{A},{A,B},{A},... (a conversation skipping every other tick) and
 * {A,B},{B,C},{A,B},{B,C},... (one leaving as another joins: the same size, other rings). */
static int set_at(int t, int *who) {
    static const int sets[4][SET_CONV + 1] = {{3, 0, 1, 2}, {2, 0, 1}, {1, 0}, {2, 1, 2}};
    const int *s = t == 0 ? sets[0] : t <= SET_TICKS ? sets[1 + (t - 1) % 2] : sets[(t - SET_TICKS - 1) % 2 ? 3 : 1];
    for (int i = 0; i < s[0]; i++) who[i] = s[1 + i];
    return s[0];
}

/* The schedule on one batch (counting the frames' recordings and replays), then each
 * conversation alone with the same codes: outputs must be identical. */
static void lm_sets(const lm_case *c, int sampling) {
    char err[PP_ERR_LEN] = "";
    static pp_lmgen_out batched[SET_CONV][SET_STEPS], alone[SET_CONV][SET_STEPS];
    int steps[SET_CONV] = {0};
    pp_lmgen *g[SET_CONV] = {0};
    pp_lmgen_params p[SET_CONV];
    pp_lmbatch *b = NULL;
    int rc = pp_lmbatch_create(c->lm, SET_CONV, &b, err);
    for (int j = 0; j < SET_CONV; j++) {
        pp_lmgen_params_default(&p[j]);
        p[j].greedy = !sampling;
        p[j].text_seed = p[j].audio_seed = 700 + (uint64_t)j;
        p[j].text_temp = 0.6f + 0.2f * (float)j;
        p[j].audio_top_k = 60 + 50 * j;
        if (!rc) rc = pp_lmgen_create(c->lm, &p[j], &g[j], err);
    }
    pp_backend_ops ops = *c->be->ops;
    counted.device = c->be->ops;
    counted.begins = counted.replays = 0;
    ops.graph_begin = counting_begin;
    ops.graph_replay = counting_replay;
    c->be->ops = &ops;
    for (int t = 0; !rc && t <= 2 * SET_TICKS; t++) {
        int who[SET_CONV], n = set_at(t, who);
        pp_lmgen *rows[SET_CONV];
        int32_t user[SET_CONV][PP_LM_AUDIO_CODEBOOKS];
        pp_lmgen_out outs[SET_CONV];
        for (int i = 0; i < n; i++) {
            rows[i] = g[who[i]];
            memcpy(user[i], set_user(c, who[i], steps[who[i]]), sizeof user[i]);
        }
        rc = pp_lmbatch_step(b, rows, n, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])user, outs, err);
        for (int i = 0; !rc && i < n; i++) batched[who[i]][steps[who[i]]++] = outs[i];
    }
    c->be->ops = counted.device;
    const int begins = counted.begins, replays = counted.replays;
    for (int j = 0; j < SET_CONV; j++) pp_lmgen_destroy(g[j]);
    pp_lmbatch_destroy(b);
    int diffs = 0;
    for (int j = 0; !rc && j < SET_CONV; j++) {
        pp_lmgen *lone = NULL;
        rc = pp_lmgen_create(c->lm, &p[j], &lone, err);
        for (int k = 0; !rc && k < steps[j]; k++) {
            rc = pp_lmgen_step(lone, set_user(c, j, k), &alone[j][k], err);
            diffs += !rc && !set_same(&alone[j][k], &batched[j][k]);
        }
        pp_lmgen_destroy(lone);
    }
    if (rc) fprintf(stderr, "%s\n", err);
    printf("LM frames (%s), %d ticks of {A,B},{A} then %d of {A,B},{B,C}: %d recordings, %d replays, %d outputs "
           "differ from the conversations alone\n",
           sampling ? "sampling" : "greedy", SET_TICKS, SET_TICKS, begins, replays, diffs);
    char what[200];
    /* each of the two shapes (2 rows, 1 row): the first frame plain, the second recorded */
    snprintf(what, sizeof what, "LM frames under alternating conversation sets (%s): each shape recorded once, then "
                                "replayed", sampling ? "sampling" : "greedy");
    TEST_COND(what, rc == 0 && begins == 2 && replays == 2 * SET_TICKS - 4);
    snprintf(what, sizeof what, "LM frames under alternating conversation sets (%s): the tokens of each conversation "
                                "alone", sampling ? "sampling" : "greedy");
    TEST_COND(what, rc == 0 && diffs == 0);
}

static void test_lm_sets(void) {
    char err[PP_ERR_LEN];
    lm_case c;
    if (lm_case_open(PP_TEST_DATA "/golden/lm-nf2", 1, &c, err)) {
        fprintf(stderr, "lm-nf2: %s\n", err);
        TEST_COND("the LM opens", 0);
        return;
    }
    lm_sets(&c, 0);
    lm_sets(&c, 1);
    /* The frame's shape holds one KV format for all rows (the attention kernel reads row 0's):
     * conversations with different ones are refused, not read in the wrong format. */
    pp_lmgen *g[2] = {0};
    pp_lmbatch *b = NULL;
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    int rc = pp_lmbatch_create(c.lm, 2, &b, err);
    if (!rc) rc = pp_lmgen_create(c.lm, &p, &g[0], err);
    p.kv_cache = PP_KV_INT8;
    if (!rc) rc = pp_lmgen_create(c.lm, &p, &g[1], err);
    pp_lmgen_out outs[2];
    for (int t = 0; !rc && t < 2; t++) /* the first call computes nothing */
        rc = pp_lmbatch_step(b, g, 2, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])c.user, outs, err);
    TEST_COND("a frame whose rows' KV formats differ is refused, naming it",
              rc == PP_EINVAL && strstr(err, "KV cache") != NULL);
    for (int j = 0; j < 2; j++) pp_lmgen_destroy(g[j]);
    pp_lmbatch_destroy(b);
    lm_case_close(&c);
}

int main(void) {
    test_env();
    test_create_failures();
    test_load_failures();
    test_tick_failures();
    test_growth_failures();
    test_lm_failure();
    test_alternating_rows();
    test_lm_sets();
    return test_report();
}
