/* test_lmgen: the generation state machine's bookkeeping (token ring, delays, forcing, prompt
 * phases, output alignment) against expectations worked out by hand from docs/model.md §5-6, on
 * the tiny lm-bf16 model (dim 64, text_card 100, card 2048, context 6). The numerics are the
 * golden runner's job; here only which token goes where is checked. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "model/lmgen.h"

#include <string.h>

#define CASE PP_TEST_DATA "/golden/lm-bf16"
#define TEXT_CARD 100
#define CARD 2048
#define DIM 64

static const int32_t *SIL = pp_lmgen_silence_codes;
static const int32_t *SINE = pp_lmgen_sine_codes;

static int delay_of(int k) { return k == 0 || k == 1 || k == 9 ? 0 : 1; }

static pp_lmgen_params greedy(void) {
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    p.greedy = 1;
    return p;
}

/* Expected prompt token of stream k in a forced (text, SILENCE, SINE) frame. */
static int64_t forced_tok(int k, int64_t text) {
    if (k == 0) return text;
    return k <= 8 ? SIL[k - 1] : SINE[k - 9];
}

static void user_frame(int seed, int32_t u[8]) {
    for (int i = 0; i < 8; i++) u[i] = (seed * 131 + i * 17) % CARD;
}

static void test_first_calls(const pp_lm *lm) {
    pp_lmgen *g = NULL;
    pp_lmgen_params p = greedy();
    char err[PP_ERR_LEN];
    if (pp_lmgen_create(lm, &p, &g, err)) {
        TEST_COND("create", 0);
        return;
    }
    int64_t ring[17 * 4], after1[17 * 4];
    int32_t u0[8], u1[8], u2[8];
    user_frame(1, u0);
    user_frame(2, u1);
    user_frame(3, u2);
    pp_lmgen_out out;
    int rc = pp_lmgen_step_forced(g, -1, NULL, u0, &out, NULL, err);
    TEST_COND("call 0 computes nothing", rc == 0 && !out.ready && pp_lmgen_offset(g) == 1);
    pp_lmgen_token_ring(g, ring);
    int init_ok = ring[0] == TEXT_CARD;
    for (int k = 1; k < 17; k++) init_ok &= ring[k * 4] == CARD;
    TEST_COND("call 0 leaves column 0 all initial tokens (its own tokens are lost)", init_ok);

    rc = pp_lmgen_step_forced(g, -1, NULL, u1, &out, NULL, err);
    TEST_COND("call 1 computes but emits nothing", rc == 1 && !out.ready);
    pp_lmgen_token_ring(g, after1);
    int col1 = after1[9 * 4 + 1] == u1[0];
    for (int k = 2; k < 17; k++)
        if (delay_of(k)) col1 &= after1[k * 4 + 1] == CARD;
    TEST_COND("column 1: user semantic of call 1, initial tokens on delayed streams", col1);
    int col2 = 1;
    for (int i = 1; i < 8; i++) col2 &= after1[(9 + i) * 4 + 2] == u1[i];
    TEST_COND("user acoustic codes of call 1 land in column 2", col2);

    rc = pp_lmgen_step_forced(g, -1, NULL, u2, &out, NULL, err);
    pp_lmgen_token_ring(g, ring);
    TEST_COND("call 2 emits", rc == 1 && out.ready);
    TEST_COND("text out = column 1's text", out.text == after1[0 * 4 + 1]);
    TEST_COND("agent semantic out = column 1's", out.agent[0] == after1[1 * 4 + 1]);
    int ac = 1;
    for (int i = 1; i < 8; i++) ac &= out.agent[i] == ring[(1 + i) * 4 + 2];
    TEST_COND("agent acoustic out = column 2 (delay 1)", ac);
    TEST_COND("the echoed user frame is call 1's", memcmp(out.user, u1, sizeof u1) == 0);
    pp_lmgen_destroy(g);
}

/* Σ of the 17 embedding rows of a token column, decoded straight from the file. */
static void expected_embedding(const int64_t col[17], float *out) {
    st_file *f = NULL;
    float row[DIM];
    memset(out, 0, DIM * sizeof *out);
    if (pp_st_open(CASE "/model.safetensors", &f, NULL)) return;
    for (int k = 0; k < 17; k++) {
        char name[64];
        pp_weight w;
        if (k == 0) snprintf(name, sizeof name, "text_emb.weight");
        else snprintf(name, sizeof name, "emb.%d.weight", k - 1);
        if (pp_weight_load(f, name, k ? CARD + 1 : TEXT_CARD + 1, DIM, &w, NULL) ||
            pp_weight_decode_rows(&w, col[k], 1, row, NULL))
            break;
        for (int i = 0; i < DIM; i++) out[i] += row[i];
    }
    pp_st_close(f);
}

static void test_prompts(const pp_lm *lm) {
    pp_lmgen *g = NULL;
    pp_lmgen_params p = greedy();
    char err[PP_ERR_LEN];
    if (pp_lmgen_create(lm, &p, &g, err)) {
        TEST_COND("create", 0);
        return;
    }
    pp_lmgen_trace tr = {0};
    pp_lmgen_set_trace(g, &tr);
    float emb[3 * DIM];
    for (int i = 0; i < 3 * DIM; i++) emb[i] = (float)((i % 7) - 3) * 0.1f;
    int64_t cache[17 * 4], ring[17 * 4];
    for (int k = 0; k < 17; k++)
        for (int c = 0; c < 4; c++) cache[k * 4 + c] = k == 0 ? 10 + c : 100 + 10 * k + c;

    TEST_COND("voice prompt", pp_lmgen_prompt_voice(g, emb, 3, cache, err) == 0);
    pp_lmgen_token_ring(g, ring);
    /* V = 3 frames: call 0 is the compute-free dummy, positions 0..2 at calls 1..3. */
    TEST_COND("after the voice: n = V + 1 = 4", pp_lmgen_offset(g) == 4);
    TEST_COND("after the voice: the ring is the stored cache", memcmp(ring, cache, sizeof ring) == 0);
    TEST_COND("prompt frames skip the heads", tr.heads_ran == 0);

    TEST_COND("silence", pp_lmgen_prompt_silence(g, 2, err) == 0);
    pp_lmgen_token_ring(g, ring);
    TEST_COND("after 2 silence frames: n = 6", pp_lmgen_offset(g) == 6);
    /* Calls 4 and 5 wrote delay-0 streams to columns 0, 1 and delay-1 streams to 1, 2. */
    int ok = 1;
    for (int k = 0; k < 17; k++) {
        int d = delay_of(k);
        ok &= ring[k * 4 + 0] == (d ? cache[k * 4 + 0] : forced_tok(k, 3));
        ok &= ring[k * 4 + 1] == forced_tok(k, 3);
        ok &= ring[k * 4 + 2] == (d ? forced_tok(k, 3) : cache[k * 4 + 2]);
        ok &= ring[k * 4 + 3] == cache[k * 4 + 3];
    }
    TEST_COND("ring after silence (hand-worked)", ok);

    const int32_t ids[2] = {5, 17};
    TEST_COND("text prompt", pp_lmgen_prompt_text(g, ids, 2, err) == 0);
    pp_lmgen_token_ring(g, ring);
    TEST_COND("after 2 text frames: n = 8", pp_lmgen_offset(g) == 8);
    /* Calls 6 and 7: text 5 at column 2, 17 at column 3; every delayed stream now holds silence/sine. */
    ok = 1;
    const int64_t text_at[4] = {3, 3, 5, 17};
    for (int k = 0; k < 17; k++)
        for (int c = 0; c < 4; c++) ok &= ring[k * 4 + c] == forced_tok(k, text_at[c]);
    TEST_COND("ring after the text prompt (hand-worked)", ok);

    TEST_COND("silence 2", pp_lmgen_prompt_silence(g, 2, err) == 0);
    TEST_COND("after the prompts: n = V + 1 + 2 + 2 + 2 = 10", pp_lmgen_offset(g) == 10);
    TEST_COND("prompts never ran the heads", tr.heads_ran == 0);

    /* First conversation call (n = 10) feeds position 9 = the last silence frame, and emits it. */
    int64_t col9[17];
    for (int k = 0; k < 17; k++) col9[k] = forced_tok(k, 3);
    float want[DIM], got[DIM];
    expected_embedding(col9, want);
    int32_t u[8];
    user_frame(5, u);
    pp_lmgen_out out;
    int rc = pp_lmgen_step_forced(g, -1, NULL, u, &out, got, err);
    TEST_COND("first conversation call computes and emits", rc == 1 && out.ready);
    TEST_COND("its input is the last silence column", test_rel_err(got, want, DIM) < 1e-6);
    TEST_COND("it runs the heads", tr.heads_ran == 1);
    TEST_COND("it emits the last silence frame: text PAD", out.text == 3);
    TEST_COND("agent silence", memcmp(out.agent, SIL, sizeof out.agent) == 0);
    TEST_COND("user sine", memcmp(out.user, SINE, sizeof out.user) == 0);

    /* Forcing. Agent codes given at call n land at columns n (semantic) and n+1 (acoustic), so
     * a frame is fully forced only from the second consecutive forced call on. */
    const int32_t A[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t u6[8], u7[8];
    user_frame(6, u6);
    user_frame(7, u7);
    rc = pp_lmgen_step_forced(g, -1, A, u6, &out, NULL, err);
    TEST_COND("call 11: text left to the model runs the heads", rc == 1 && tr.heads_ran == 1);
    rc = pp_lmgen_step_forced(g, 42, A, u7, &out, NULL, err);
    TEST_COND("call 12: every stream forced skips the heads", rc == 1 && tr.heads_ran == 0);
    TEST_COND("call 12 emits the agent frame forced at call 11", memcmp(out.agent, A, sizeof A) == 0);
    TEST_COND("call 12 echoes call 11's user frame", memcmp(out.user, u6, sizeof u6) == 0);
    user_frame(8, u);
    rc = pp_lmgen_step_forced(g, 7, NULL, u, &out, NULL, err);
    TEST_COND("call 13: agent left to the model runs the heads", rc == 1 && tr.heads_ran == 1);
    TEST_COND("forced text comes out one call later", out.text == 42);
    TEST_COND("forced agent frame comes out aligned", memcmp(out.agent, A, sizeof A) == 0);
    TEST_COND("echoed user frame is the previous call's", memcmp(out.user, u7, sizeof u7) == 0);
    user_frame(9, u);
    TEST_COND("plain step", pp_lmgen_step(g, u, &out, err) == 0 && out.ready);
    TEST_COND("forced text 7 comes out", out.text == 7);
    pp_lmgen_destroy(g);
}

/* Runs the case's prompts and n steps, recording the emitted columns. */
static int run(pp_lmgen *g, int n, int32_t *rec, char *err) {
    int64_t cache[17 * 4];
    float emb[2 * DIM];
    for (int i = 0; i < 17 * 4; i++) cache[i] = i % 4 + 3;
    for (int i = 0; i < 2 * DIM; i++) emb[i] = (float)((i % 5) - 2) * 0.2f;
    const int32_t ids[3] = {9, 8, 7};
    int rc = pp_lmgen_prompt_voice(g, emb, 2, cache, err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, 1, err);
    if (!rc) rc = pp_lmgen_prompt_text(g, ids, 3, err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, 1, err);
    for (int t = 0; t < n && !rc; t++) {
        int32_t u[8];
        pp_lmgen_out out;
        user_frame(t + 20, u);
        rc = pp_lmgen_step(g, u, &out, err);
        rec[t * 9] = out.text;
        memcpy(rec + t * 9 + 1, out.agent, sizeof out.agent);
    }
    return rc;
}

static void test_reset_and_seeds(const pp_lm *lm) {
    enum { N = 10 }; /* past the context of 6: the ring window wraps */
    int32_t a[N * 9], b[N * 9], c[N * 9], d[N * 9];
    char err[PP_ERR_LEN];
    pp_lmgen *g = NULL, *h = NULL;
    pp_lmgen_params p = greedy();
    if (pp_lmgen_create(lm, &p, &g, err)) {
        TEST_COND("create", 0);
        return;
    }
    TEST_COND("greedy run", run(g, N, a, err) == 0);
    TEST_COND("reset", pp_lmgen_reset(g, NULL, err) == 0 && pp_lmgen_offset(g) == 0);
    TEST_COND("greedy rerun", run(g, N, b, err) == 0);
    TEST_COND("reset replays identically (stale ring and keys are never read)", memcmp(a, b, sizeof a) == 0);

    pp_lmgen_params_default(&p);
    p.text_seed = p.audio_seed = 5;
    TEST_COND("sampled runs", pp_lmgen_reset(g, &p, err) == 0 && run(g, N, c, err) == 0);
    TEST_COND("second session", pp_lmgen_create(lm, &p, &h, err) == 0 && run(h, N, d, err) == 0);
    TEST_COND("same seed, same tokens across sessions", memcmp(c, d, sizeof c) == 0);
    p.text_seed = p.audio_seed = 6;
    TEST_COND("reseeded run", pp_lmgen_reset(h, &p, err) == 0 && run(h, N, d, err) == 0);
    TEST_COND("another seed gives other tokens", memcmp(c, d, sizeof c) != 0);
    /* The client's text_seed and audio_seed each drive their own streams' draws. */
    p.text_seed = 5;
    TEST_COND("only audio_seed changed", pp_lmgen_reset(h, &p, err) == 0 && run(h, N, d, err) == 0);
    TEST_COND("another audio seed gives other tokens", memcmp(c, d, sizeof c) != 0);
    p.text_seed = 6;
    p.audio_seed = 5;
    TEST_COND("only text_seed changed", pp_lmgen_reset(h, &p, err) == 0 && run(h, N, d, err) == 0);
    TEST_COND("another text seed gives other tokens", memcmp(c, d, sizeof c) != 0);
    pp_lmgen_destroy(g);
    pp_lmgen_destroy(h);
}

/* A conversation past 2^31 frames (1988 days): the frame counter jumps (pp_lmgen_skip) to just
 * below it and greedy frames cross it. Positions were int32 in backend memory, so position 2^31
 * became −2^31 and its key went to slot (size_t)(−2^31 mod 6), far outside the ring (a crash);
 * now they are int64, as the reference's are unbounded. */
static void test_position_limit(const pp_lm *lm) {
    enum { FRAMES = 6 };
    const int64_t target = ((int64_t)1 << 31) - 3; /* the first of FRAMES calls processes position 2^31 − 4 */
    pp_lmgen *g = NULL;
    char err[PP_ERR_LEN];
    pp_lmgen_params p = greedy();
    int32_t rec[FRAMES * 9];
    int rc = pp_lmgen_create(lm, &p, &g, err);
    if (!rc) rc = run(g, 2, rec, err);
    if (!rc) rc = pp_lmgen_skip(g, target - pp_lmgen_offset(g), err);
    int in_range = 1;
    for (int t = 0; t < FRAMES && !rc; t++) {
        int32_t u[8];
        pp_lmgen_out out;
        user_frame(t, u);
        rc = pp_lmgen_step(g, u, &out, err);
        in_range &= out.ready && out.text >= 0 && out.text < TEXT_CARD;
        for (int i = 0; i < 8; i++) in_range &= out.agent[i] >= 0 && out.agent[i] < CARD;
    }
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("frames at positions 2^31 - 4 .. 2^31 + 1 run", rc == PP_OK);
    TEST_COND("the counter passes 2^31", g && pp_lmgen_offset(g) == target + FRAMES);
    TEST_COND("tokens past 2^31 are in range", in_range);
    pp_lmgen_destroy(g);
}

static void test_bad_input(const pp_lm *lm, const pp_lm *small) {
    pp_lmgen *g = NULL, *s = NULL;
    char err[PP_ERR_LEN];
    pp_lmgen_params p = greedy();
    if (pp_lmgen_create(lm, &p, &g, err) || pp_lmgen_create(small, &p, &s, err)) {
        TEST_COND("create", 0);
        pp_lmgen_destroy(g);
        return;
    }
    int32_t u[8] = {0, 1, 2, 3, 4, 5, 6, CARD + 1};
    pp_lmgen_out out;
    TEST_COND("user code above card is refused", pp_lmgen_step(g, u, &out, err) == PP_EINVAL);
    TEST_COND("a refused call does not advance", pp_lmgen_offset(g) == 0);
    u[7] = -3;
    TEST_COND("negative user code is refused", pp_lmgen_step(g, u, &out, err) == PP_EINVAL);
    u[7] = 7;
    TEST_COND("text token above text_card is refused",
              pp_lmgen_step_forced(g, TEXT_CARD + 1, NULL, u, &out, NULL, err) == PP_EINVAL);
    int64_t cache[17 * 4] = {0};
    cache[5] = CARD + 9;
    float emb[DIM] = {0};
    TEST_COND("voice cache out of range is refused", pp_lmgen_prompt_voice(g, emb, 1, cache, err) == PP_EINVAL);
    const int32_t bad[1] = {TEXT_CARD + 5};
    TEST_COND("text prompt id out of range is refused", pp_lmgen_prompt_text(g, bad, 1, err) == PP_EINVAL);
    /* card 64: silence and sine codes do not exist, but zero frames of them is fine */
    TEST_COND("no silence frames on a card-64 model", pp_lmgen_prompt_silence(s, 0, err) == 0);
    TEST_COND("silence frames need card 2048", pp_lmgen_prompt_silence(s, 1, err) == PP_EUNSUPPORTED);
    pp_lmgen_destroy(g);
    pp_lmgen_destroy(s);
}

int main(void) {
    pp_backend *be = NULL;
    pp_lm *lm = NULL, *small = NULL;
    char err[PP_ERR_LEN];
    if (pp_backend_create("cpu", 1, &be, err)) TEST_SKIP(err);
    if (pp_lm_open(be, CASE "/model.safetensors", CASE "/config.json", &lm, err) ||
        pp_lm_open(be, PP_TEST_DATA "/golden/lm-int4/model.safetensors", PP_TEST_DATA "/golden/lm-int4/config.json",
                   &small, err)) {
        fprintf(stderr, "%s\n", err);
        TEST_COND("open the test models", 0);
    } else {
        test_first_calls(lm);
        test_prompts(lm);
        test_reset_and_seeds(lm);
        test_position_limit(lm);
        test_bad_input(lm, small);
    }
    pp_lm_close(lm);
    pp_lm_close(small);
    pp_backend_destroy(be);
    return test_report();
}
