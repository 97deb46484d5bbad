/* test_session: one conversation on the built-in demo model.
 *
 * - pp_demo_write is deterministic (two runs, same bytes) and its model opens;
 * - the prompt schedule runs voice + 6 + prompt tokens + 6 frames, PP_SESSION_PREFILL_ROWS per
 *   call;
 * - the session's frames equal a pipeline built by hand from the model modules with the
 *   prompt phases run frame by frame (pp_lmgen_prompt_voice, ...): the session's batched
 *   prefill changes nothing, bit for bit;
 * - sessions are independent: interleaving two gives each the output it has alone;
 * - the decoded audio is audible and bounded; errors come back for unknown voices,
 *   path-like voice names, over-long prompts and a step before the prompts. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "io/voice.h"
#include "model/lmgen.h"
#include "model/mimi.h"
#include "session/demo.h"
#include "session/session.h"
#include "text/spm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FRAMES 12
#define PROMPT "You are a wise and friendly teacher."

static pp_demo_files g_files;

/* Deterministic test input: a chirp with some noise. */
static void input_frame(int f, float *pcm) {
    uint32_t s = 12345u + (uint32_t)f;
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
        double t = (f * PP_FRAME_SAMPLES + i) / 24000.0;
        s = s * 1664525u + 1013904223u;
        pcm[i] = (float)(0.3 * sin(6.2832 * (200 + 300 * t) * t) + 0.02 * ((s >> 8) / 16777216.0 - 0.5));
    }
}

static pp_session *start(pp_model *m, const pp_session_params *p) {
    char err[PP_ERR_LEN];
    pp_session *s = NULL;
    if (pp_session_create(m, p, 512, &s, err)) {
        fprintf(stderr, "session: %s\n", err);
        return NULL;
    }
    int calls = 1, rc, frames = pp_session_prompt_frames(s);
    while ((rc = pp_session_prefill(s, err)) == 0) calls++;
    TEST_COND("prefill ends with 1 after one call per run of prompt frames",
              rc == 1 && calls == (frames + PP_SESSION_PREFILL_ROWS - 1) / PP_SESSION_PREFILL_ROWS &&
                  pp_session_prompt_done(s) == frames && !pp_session_prompt_cached(s));
    return s;
}

/* The reference: the same modules driven directly, prompt phases in one call each. */
static void reference_run(pp_backend *be, const pp_session_params *p, float out[FRAMES][PP_FRAME_SAMPLES]) {
    char err[PP_ERR_LEN], path[PP_DEMO_PATH_MAX + 32];
    pp_lm *lm = NULL;
    mimi_model *mm = NULL;
    mimi_state *ms = NULL;
    pp_spm *spm = NULL;
    pp_lmgen *g = NULL;
    pp_voice v = {0};
    int32_t ids[512];
    size_t n = 0;
    snprintf(path, sizeof path, "%s", g_files.weights);
    strcpy(strrchr(path, '/') + 1, "config.json");
    int rc = pp_lm_open(be, g_files.weights, path, &lm, err);
    if (!rc) rc = pp_mimi_open(be, g_files.mimi, NULL, &mm, err);
    if (!rc) rc = pp_mimi_state_create(mm, &ms, err);
    if (!rc) rc = pp_spm_load_file(&spm, g_files.tokenizer, err);
    if (!rc) rc = pp_spm_encode_prompt(spm, p->text_prompt, ids, 512, &n, err);
    if (!rc) rc = pp_voice_resolve(g_files.voices_dir, p->voice, path, sizeof path, err);
    if (!rc) rc = pp_voice_load(path, 0, &v, err);
    pp_lmgen_params lp;
    pp_lmgen_params_default(&lp);
    lp.text_seed = p->text_seed;
    lp.audio_seed = p->audio_seed;
    if (!rc) rc = pp_lmgen_create(lm, &lp, &g, err);
    if (!rc) rc = pp_lmgen_prompt_voice(g, v.embeddings, (int)v.frames, &v.cache[0][0], err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, PP_LMGEN_SILENCE_FRAMES, err);
    if (!rc) rc = pp_lmgen_prompt_text(g, ids, (int)n, err);
    if (!rc) rc = pp_lmgen_prompt_silence(g, PP_LMGEN_SILENCE_FRAMES, err);
    for (int f = 0; f < FRAMES && !rc; f++) {
        float pcm[PP_FRAME_SAMPLES];
        int32_t codes[PP_LM_AUDIO_CODEBOOKS];
        pp_lmgen_out o;
        input_frame(f, pcm);
        rc = pp_mimi_encode_frame(ms, pcm, codes, NULL, err);
        if (!rc) rc = pp_lmgen_step(g, codes, &o, err);
        if (!rc) rc = pp_mimi_decode_frame(ms, o.agent, out[f], err);
    }
    if (rc) fprintf(stderr, "reference: %s\n", err);
    TEST_COND("reference pipeline runs", rc == PP_OK);
    pp_lmgen_destroy(g);
    pp_voice_free(&v);
    pp_spm_free(spm);
    pp_mimi_state_destroy(ms);
    pp_mimi_close(mm);
    pp_lm_close(lm);
}

/* A codec config that opens as a codec but not as a conversation's: 4 codebooks a frame (a frame
 * holds the LM's 8 codes: fewer once left the rest stale, more wrote past a session's arrays), or
 * 16 kHz audio (the protocol streams 24 kHz). Each rewrites one key of the demo codec's config. */
static void test_codec_mismatch(pp_backend *be, const pp_demo_files *files) {
    static const struct {
        const char *key, *value, *refusal;
    } cases[] = {{"\"num_codebooks\": 8", "\"num_codebooks\": 4", "4 codebooks"},
                 {"\"sample_rate\": 24000", "\"sample_rate\": 16000", "sample rate 16000"}};
    char err[PP_ERR_LEN], path[PP_DEMO_PATH_MAX + 32], original[4096];
    snprintf(path, sizeof path, "%s", files->mimi);
    strcpy(strrchr(path, '/') + 1, "config.json");
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(original, 1, sizeof original - 1, f) : 0;
    if (f) fclose(f);
    original[n] = '\0';
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *at = strstr(original, cases[i].key);
        TEST_COND("demo codec config holds the key", at != NULL);
        if (!at) continue;
        f = fopen(path, "wb");
        TEST_COND("codec config rewritten", f && fprintf(f, "%.*s%s%s", (int)(at - original), original,
                                                         cases[i].value, at + strlen(cases[i].key)) > 0);
        if (f) fclose(f);
        mimi_model *codec = NULL;
        int rc = pp_mimi_open(be, files->mimi, NULL, &codec, err);
        if (rc) fprintf(stderr, "%s\n", err);
        TEST_COND("opens as a codec", rc == PP_OK);
        pp_mimi_close(codec);
        pp_model *m = NULL;
        pp_model_paths paths = pp_demo_paths(files);
        TEST_COND("refused for conversations",
                  pp_model_open(be, &paths, &m, err) == PP_EUNSUPPORTED && strstr(err, cases[i].refusal));
        pp_model_close(m);
    }
}

/* A voice whose token ring holds a code the LM does not read is refused as the conversation
 * starts, naming the file (it once failed later, in the prompt phase, naming no file). */
static void test_voice_tokens_checked(pp_model *m, const pp_session_params *p) {
    char err[PP_ERR_LEN], path[PP_DEMO_PATH_MAX + 32];
    pp_voice v = {0};
    snprintf(path, sizeof path, "%s/NATF2.pt", g_files.voices_dir);
    int rc = pp_voice_load(path, 0, &v, err);
    snprintf(path, sizeof path, "%s/BADCODE.pt", g_files.voices_dir);
    v.cache[3][2] = 1 << 20;
    if (!rc) rc = pp_voice_save_pt(path, &v, err);
    pp_voice_free(&v);
    TEST_COND("voice with an out-of-range code written", rc == PP_OK);
    pp_session_params q = *p;
    strcpy(q.voice, "BADCODE");
    pp_session *s = NULL;
    TEST_COND("voice with an out-of-range code refused naming the file",
              pp_session_create(m, &q, 512, &s, err) == PP_EFORMAT && !s && strstr(err, "BADCODE.pt") &&
                  strstr(err, "1048576"));
    remove(path);
}

/* An LM drawing from other codes than the codec decodes: the golden nf2 LM (a card of 64) with
 * the demo codec (2048 bins). Such a model once opened, and the codec refused the LM's frames,
 * failing every conversation's tick. */
/* A voice whose stem has the longest length the voices directory accepts (64 bytes) is listed
 * by /api/voices, so a client can ask for it, with or without its .pt suffix. */
static void test_long_voice_name(pp_model *m, const pp_session_params *base) {
    char err[PP_ERR_LEN], stem[PP_VOICE_NAME_MAX + 1], src[PP_DEMO_PATH_MAX + 16], dst[PP_DEMO_PATH_MAX + 80];
    memset(stem, 'L', PP_VOICE_NAME_MAX);
    stem[PP_VOICE_NAME_MAX] = '\0';
    snprintf(src, sizeof src, "%s/NATF2.pt", g_files.voices_dir);
    snprintf(dst, sizeof dst, "%s/%s.pt", g_files.voices_dir, stem);
    TEST_COND("a voice with a 64-byte name", symlink(src, dst) == 0);
    char **names = NULL;
    size_t count = 0;
    int listed = 0;
    if (pp_voice_list(g_files.voices_dir, &names, &count, err) == PP_OK)
        for (size_t i = 0; i < count; i++) listed |= strcmp(names[i], stem) == 0;
    free(names);
    TEST_COND("it is listed", listed);
    for (int suffix = 0; suffix < 2; suffix++) {
        pp_session_params q = *base;
        char name[PP_VOICE_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s%s", stem, suffix ? ".pt" : "");
        pp_session *s = NULL;
        int rc = pp_params_set(&q, "voice_prompt", name, err);
        if (!rc) rc = pp_session_create(m, &q, 512, &s, err);
        if (rc) fprintf(stderr, "%s\n", err);
        TEST_COND(suffix ? "it can be asked for as NAME.pt" : "it can be asked for as NAME", rc == PP_OK);
        pp_session_destroy(s);
    }
    unlink(dst);
}

static void test_card_mismatch(pp_backend *be, const pp_demo_files *files) {
    char err[PP_ERR_LEN];
    pp_model *m = NULL;
    pp_model_paths paths = pp_demo_paths(files);
    paths.weights = PP_TEST_DATA "/golden/lm-nf2/model.safetensors";
    TEST_COND("a codec of other codes than the LM's card refused",
              pp_model_open(be, &paths, &m, err) == PP_EUNSUPPORTED && strstr(err, "2048 codes per codebook") &&
                  strstr(err, "card is 64"));
    pp_model_close(m);
}

int main(void) {
    char err[PP_ERR_LEN], dir_a[64] = "/tmp/pp-session-a-XXXXXX", dir_b[64] = "/tmp/pp-session-b-XXXXXX";
    pp_log_set_level(PP_LOG_WARN);
    if (!mkdtemp(dir_a) || !mkdtemp(dir_b)) TEST_SKIP("no temporary directory");
    pp_demo_files other;
    TEST_COND("demo model written", pp_demo_write(dir_a, &g_files, err) == PP_OK);
    TEST_COND("demo model written again", pp_demo_write(dir_b, &other, err) == PP_OK);
    TEST_COND("demo LM is deterministic", test_files_equal(g_files.weights, other.weights));
    TEST_COND("demo codec is deterministic", test_files_equal(g_files.mimi, other.mimi));
    TEST_COND("demo tokenizer is deterministic", test_files_equal(g_files.tokenizer, other.tokenizer));

    pp_backend *be = NULL;
    pp_model *m = NULL;
    TEST_COND("cpu backend", pp_backend_cpu_create(1, &be, err) == PP_OK);
    pp_model_paths paths = pp_demo_paths(&g_files);
    int rc = pp_model_open(be, &paths, &m, err);
    if (rc) fprintf(stderr, "model: %s\n", err);
    TEST_COND("demo model opens", rc == PP_OK);
    if (rc) return test_report();
    TEST_COND("model name", strcmp(pp_model_name(m), "demo") == 0 && strcmp(pp_model_backend(m), "cpu") == 0);

    pp_session_params p;
    pp_params_defaults(&p);
    strcpy(p.text_prompt, PROMPT);
    pp_session *a = start(m, &p), *b = NULL, *c = NULL;
    TEST_COND("session starts", a != NULL);
    if (!a) return test_report();

    static float ref[FRAMES][PP_FRAME_SAMPLES], got[FRAMES][PP_FRAME_SAMPLES], got2[FRAMES][PP_FRAME_SAMPLES];
    reference_run(be, &p, ref);
    char piece[PP_SESSION_PIECE_MAX];
    double sum = 0, peak = 0;
    int ok = 1, texts = 0;
    for (int f = 0; f < FRAMES; f++) {
        float in[PP_FRAME_SAMPLES];
        pp_step_times t;
        input_frame(f, in);
        ok &= pp_session_step(a, in, got[f], piece, &t, err) == PP_OK;
        texts += piece[0] != '\0';
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
            sum += (double)got[f][i] * got[f][i];
            if (fabs(got[f][i]) > peak) peak = fabs(got[f][i]);
        }
    }
    TEST_COND("frames step", ok);
    TEST_COND("frame-by-frame prompts equal the whole-phase reference bit for bit",
              memcmp(got, ref, sizeof got) == 0);
    double rms = sqrt(sum / (FRAMES * PP_FRAME_SAMPLES));
    printf("demo output: rms %.4f, peak %.3f, %d text pieces in %d frames\n", rms, peak, texts, FRAMES);
    TEST_COND("demo audio is audible and bounded", rms > 0.005 && peak < 1.0);

    /* Interleaving two sessions gives each the output it has alone. */
    b = start(m, &p);
    pp_session_params q = p;
    strcpy(q.voice, "NATM1");
    strcpy(q.text_prompt, "Be brief.");
    c = start(m, &q);
    ok = b && c;
    for (int f = 0; f < FRAMES && ok; f++) {
        float in[PP_FRAME_SAMPLES], junk[PP_FRAME_SAMPLES];
        input_frame(f, in);
        ok &= pp_session_step(b, in, got2[f], piece, NULL, err) == PP_OK;
        input_frame(FRAMES - f, in);
        ok &= pp_session_step(c, in, junk, piece, NULL, err) == PP_OK;
    }
    TEST_COND("interleaved sessions are independent", ok && memcmp(got2, ref, sizeof got2) == 0);

    /* Errors. */
    pp_session *s = NULL;
    strcpy(q.voice, "NOSUCHVOICE");
    TEST_COND("unknown voice", pp_session_create(m, &q, 512, &s, err) == PP_ENOTFOUND && !s);
    strcpy(q.voice, "../voices/NATF2");
    TEST_COND("path-like voice", pp_session_create(m, &q, 512, &s, err) == PP_EINVAL && !s);
    test_voice_tokens_checked(m, &q);
    test_long_voice_name(m, &q);
    strcpy(q.voice, "NATF2");
    TEST_COND("prompt over the token limit", pp_session_create(m, &q, 3, &s, err) == PP_EFULL && !s &&
                                                 strstr(err, "3 tokens"));
    TEST_COND("a fresh session refuses to step", pp_session_create(m, &q, 512, &s, err) == PP_OK &&
                                                     pp_session_step(s, got[0], got2[0], piece, NULL, err) == PP_EINVAL);
    pp_session_destroy(s);
    strcpy(q.text_prompt, "");
    TEST_COND("an empty prompt is zero text frames",
              pp_session_create(m, &q, 512, &s, err) == PP_OK && pp_session_prompt_frames(s) == 8 + 12);
    pp_session_destroy(s);

    pp_session_destroy(a);
    pp_session_destroy(b);
    pp_session_destroy(c);
    pp_model_close(m);
    test_codec_mismatch(be, &other);
    test_card_mismatch(be, &g_files); /* other's codec config is rewritten by now */
    pp_backend_destroy(be);
    test_remove_dir(dir_a);
    test_remove_dir(dir_b);
    return test_report();
}
