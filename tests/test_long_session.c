/* test_long_session: conversations longer than the LM's 3000-frame context.
 *
 * 1. The attention window at S >= 2999 (docs/model.md §3.4): the CPU backend's attn_rows on a
 *    ring of the real capacity 3000 (tiny heads) for 3100 positions matches a naive attention
 *    over the whole history restricted to positions max(0, S−2998)..S; a naive window of 3000
 *    keys (current Moshi's rule) does not match from S = 2999 on, so the check can tell.
 * 2. RoPE at long-session positions (docs/model.md §3.3, docs/codec.md §10): the backend's angles
 *    are float32(pos)·freq in float32, bit for bit, at positions of an hour and more (up to 3e9,
 *    past int32); angles in double would differ there, so the float32 rule is what this pins.
 * 3. Positions keep growing: a generator on the small golden LM (context 6) runs 3100 frames,
 *    its offset is 3100 and every token stays in range.
 * 4. The demo model through the session API for 3100 conversation frames after its prompts (its
 *    LM ring of 3000 wraps, its Mimi rings of 250 wrap many times): every output sample is
 *    finite and every 100-frame block is audible, late blocks as loud as early ones within a
 *    factor of 10. */
#include "test.h"

#include "audio/wav.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "model/lm.h"
#include "model/lmgen.h"
#include "session/demo.h"
#include "session/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAPACITY 3000
#define STEPS 3100

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* Naive attention of the query at position s over keys first..s of the full history. */
static void naive_attn(const float *q, const float *k, const float *v, int heads, int hd, int first, int s, float *out) {
    int dim = heads * hd;
    for (int h = 0; h < heads; h++) {
        double mx = -INFINITY, sum = 0, acc[64] = {0};
        for (int p = first; p <= s; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * k[(size_t)p * dim + h * hd + i];
            mx = fmax(mx, d / sqrt(hd));
        }
        for (int p = first; p <= s; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * k[(size_t)p * dim + h * hd + i];
            double w = exp(d / sqrt(hd) - mx);
            sum += w;
            for (int i = 0; i < hd; i++) acc[i] += w * v[(size_t)p * dim + h * hd + i];
        }
        for (int i = 0; i < hd; i++) out[h * hd + i] = (float)(acc[i] / sum);
    }
}

static void test_window(pp_backend *be) {
    enum { HEADS = 2, HD = 8, DIM = HEADS * HD };
    float *k = malloc((size_t)STEPS * DIM * sizeof *k), *v = malloc((size_t)STEPS * DIM * sizeof *v);
    float *kc = be->ops->alloc(be, (size_t)CAPACITY * DIM * sizeof(float));
    float *vc = be->ops->alloc(be, (size_t)CAPACITY * DIM * sizeof(float));
    float *qkv_d = be->ops->alloc(be, 3 * DIM * sizeof(float)), *out_d = be->ops->alloc(be, DIM * sizeof(float));
    int64_t *pos_d = be->ops->alloc(be, sizeof(int64_t));
    double err_rule = 0, err_full = 0; /* vs the PersonaPlex window, vs a 3000-key window */
    for (int s = 0; s < STEPS; s++) {
        float qkv[3 * DIM], out[DIM], ref[DIM], full[DIM];
        for (int i = 0; i < 3 * DIM; i++) qkv[i] = uniform() * 2.0f;
        memcpy(k + (size_t)s * DIM, qkv + DIM, sizeof(float) * DIM);
        memcpy(v + (size_t)s * DIM, qkv + 2 * DIM, sizeof(float) * DIM);
        int64_t pos = s;
        be->ops->upload(be, qkv_d, qkv, sizeof qkv);
        be->ops->upload(be, pos_d, &pos, sizeof pos);
        pp_kv_ring ring = {.fmt = PP_KV_F32, .capacity = CAPACITY, .window = CAPACITY - 1, .k = kc, .v = vc};
        be->ops->attn_rows(be, qkv_d, 1, HEADS, HD, 0.0f, &ring, NULL, 0, pos_d, out_d);
        be->ops->download(be, out, out_d, sizeof out);
        naive_attn(qkv, k, v, HEADS, HD, s - (CAPACITY - 2) > 0 ? s - (CAPACITY - 2) : 0, s, ref);
        naive_attn(qkv, k, v, HEADS, HD, s - (CAPACITY - 1) > 0 ? s - (CAPACITY - 1) : 0, s, full);
        for (int i = 0; i < DIM; i++) {
            err_rule = fmax(err_rule, fabs(out[i] - ref[i]));
            if (s >= CAPACITY - 1) err_full = fmax(err_full, fabs(out[i] - full[i]));
        }
    }
    printf("attention past the ring: max |backend - naive window 2999| = %.2e, vs window 3000 = %.2e\n", err_rule,
           err_full);
    /* fp32 accumulation over 2999 keys against a double reference: about 1e-6 of unit values. */
    TEST_COND("attention at S >= 2999 sees max(0, S-2998)..S (naive reference)", err_rule < 2e-5);
    TEST_COND("a 3000-key window would differ (the check can tell)", err_full > 10 * 2e-5);
    be->ops->release(be, kc);
    be->ops->release(be, vc);
    be->ops->release(be, qkv_d);
    be->ops->release(be, out_d);
    be->ops->release(be, pos_d);
    free(k);
    free(v);
}

/* The key attn_rows stores is the rotated one: a ring of one slot and window holds it. */
static void test_rope(pp_backend *be) {
    enum { HD = 128 };
    /* 4 min, 1 h, 4 h, 11 h of frames, and 7.6 years: past int32, which positions were */
    const int64_t positions[] = {2999, 90000, 360000, 1000000, 3000000000};
    int exact = 1;
    double double_diff = 0;
    float *qkv_d = be->ops->alloc(be, 3 * HD * sizeof(float)), *out_d = be->ops->alloc(be, HD * sizeof(float));
    pp_kv_ring ring = {.fmt = PP_KV_F32, .capacity = 1, .window = 1};
    ring.k = be->ops->alloc(be, HD * sizeof(float));
    ring.v = be->ops->alloc(be, HD * sizeof(float));
    int64_t *pos_d = be->ops->alloc(be, sizeof(int64_t));
    for (size_t n = 0; n < sizeof positions / sizeof positions[0]; n++) {
        float qkv[3 * HD], y[HD], *x = qkv + HD; /* the key */
        for (int i = 0; i < 3 * HD; i++) qkv[i] = uniform();
        be->ops->upload(be, qkv_d, qkv, sizeof qkv);
        be->ops->upload(be, pos_d, &positions[n], sizeof(int64_t));
        be->ops->attn_rows(be, qkv_d, 1, 1, HD, 10000.0f, &ring, NULL, 0, pos_d, out_d);
        be->ops->download(be, y, ring.k, sizeof y);
        /* The reference's float32 formula, written out from the spec. */
        float c = (float)(-log(10000.0) * 2.0 / HD), t = (float)positions[n];
        for (int j = 0; j < HD / 2; j++) {
            float angle = expf((float)j * c) * t;
            float co = cosf(angle), si = sinf(angle);
            float a = x[2 * j] * co - x[2 * j + 1] * si, b = x[2 * j] * si + x[2 * j + 1] * co;
            exact &= a == y[2 * j] && b == y[2 * j + 1];
            double ad = exp(-log(10000.0) * 2.0 * j / HD) * positions[n];
            double_diff = fmax(double_diff, fabs(x[2 * j] * cos(ad) - x[2 * j + 1] * sin(ad) - y[2 * j]));
        }
    }
    printf("RoPE at positions up to 3e9: float32 angles bit-exact %d; double angles would differ by %.2e\n", exact,
           double_diff);
    TEST_COND("RoPE angles are float32(pos)*freq in float32 (bit-exact)", exact);
    TEST_COND("double-precision angles would differ at long positions", double_diff > 1e-3);
    void *bufs[] = {qkv_d, out_d, ring.k, ring.v, pos_d};
    for (int i = 0; i < 5; i++) be->ops->release(be, bufs[i]);
}

static void test_positions(pp_backend *be) {
    pp_lm *lm = NULL;
    pp_lmgen *g = NULL;
    char err[PP_ERR_LEN];
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    const char *dir = PP_TEST_DATA "/golden/lm-bf16";
    int rc = pp_lm_open(be, PP_TEST_DATA "/golden/lm-bf16/model.safetensors", PP_TEST_DATA "/golden/lm-bf16/config.json",
                        &lm, err);
    if (!rc) rc = pp_lmgen_create(lm, &p, &g, err);
    int in_range = 1;
    for (int t = 0; !rc && t < STEPS; t++) {
        int32_t u[PP_LM_AUDIO_CODEBOOKS];
        pp_lmgen_out o;
        for (int i = 0; i < PP_LM_AUDIO_CODEBOOKS; i++) u[i] = (t * 131 + i * 17) % 2048;
        rc = pp_lmgen_step(g, u, &o, err);
        for (int i = 0; !rc && i < PP_LM_AUDIO_CODEBOOKS; i++) in_range &= o.agent[i] >= -1 && o.agent[i] < 2048;
    }
    if (rc) fprintf(stderr, "%s: %s\n", dir, err);
    TEST_COND("3100 frames on a context-6 LM", rc == PP_OK);
    TEST_COND("the position keeps growing past the context (offset 3100)", g && pp_lmgen_offset(g) == STEPS);
    TEST_COND("tokens stay in range", in_range);
    pp_lmgen_destroy(g);
    pp_lm_close(lm);
}

static void test_demo_session(pp_backend *be) {
    char err[PP_ERR_LEN], dir[64] = "/tmp/pp-long-XXXXXX";
    pp_demo_files files;
    pp_model *m = NULL;
    pp_session *s = NULL;
    pp_wav w = {0};
    if (!mkdtemp(dir)) TEST_SKIP("no temporary directory");
    int rc = pp_demo_write(dir, &files, err);
    pp_model_paths paths = pp_demo_paths(&files);
    if (!rc) rc = pp_model_open(be, &paths, &m, err);
    pp_session_params p;
    pp_params_defaults(&p);
    if (!rc) rc = pp_session_create(m, &p, 512, &s, err);
    while (!rc && (rc = pp_session_prefill(s, err)) == 0) {
    }
    if (rc == 1) rc = pp_wav_read(PP_TEST_DATA "/golden/speech-24k.wav", PP_WAV_MIX, &w, err);
    int finite = 1, blocks = 0, quiet_blocks = 0;
    double first_rms = 0, last_rms = 0;
    int64_t whole = w.frames / PP_FRAME_SAMPLES;
    for (int f = 0; !rc && f < STEPS; f += 100, blocks++) {
        double ss = 0;
        for (int i = f; !rc && i < f + 100; i++) {
            float out[PP_FRAME_SAMPLES];
            char piece[PP_SESSION_PIECE_MAX];
            rc = pp_session_step(s, w.pcm + (size_t)(i % whole) * PP_FRAME_SAMPLES, out, piece, NULL, err);
            for (int j = 0; j < PP_FRAME_SAMPLES; j++) {
                finite &= isfinite(out[j]) != 0;
                ss += (double)out[j] * out[j];
            }
        }
        double rms = sqrt(ss / (100.0 * PP_FRAME_SAMPLES));
        if (!blocks) first_rms = rms;
        last_rms = rms;
        quiet_blocks += rms < 1e-3;
    }
    if (rc) fprintf(stderr, "demo session: %s\n", err);
    printf("demo session: %d prompt + %d frames, RMS first block %.4f, last block %.4f, %d silent blocks\n",
           s ? pp_session_prompt_frames(s) : 0, STEPS, first_rms, last_rms, quiet_blocks);
    TEST_COND("demo session runs 3100 frames past its prompts", rc == PP_OK && blocks == STEPS / 100);
    TEST_COND("every output sample is finite", finite);
    TEST_COND("no silent 100-frame block", quiet_blocks == 0);
    TEST_COND("late blocks as loud as early ones (x10)", last_rms > first_rms / 10 && last_rms < first_rms * 10);
    pp_wav_free(&w);
    pp_session_destroy(s);
    pp_model_close(m);
    test_remove_dir(dir);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_backend *be = NULL;
    pp_log_set_level(PP_LOG_WARN);
    if (pp_backend_create("cpu", 0, &be, err)) TEST_SKIP(err);
    test_window(be);
    test_rope(be);
    test_positions(be);
    test_demo_session(be);
    pp_backend_destroy(be);
    return test_report();
}
