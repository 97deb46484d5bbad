/* test_voice_clone: voice cloning. The codes path against the reference's clone.safetensors
 * (embeddings and token ring), the clone surviving a .pt round trip, and the audio path on
 * the golden speech clip with the small golden LM and codec: frame count, and loudness
 * normalisation making the result independent of the input level. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/wav.h"
#include "backend/backend.h"
#include "base/clock.h"
#include "base/err.h"
#include "io/safetensors.h"
#include "io/voice.h"
#include "model/lm.h"
#include "model/mimi.h"
#include "session/voice_clone.h"
#include "test.h"

#define GOLDEN PP_TEST_DATA "/golden/"

/* Embeddings: fp32 compute against the reference's fp32 run differs only in summation order
 * (observed ~0); 1e-3 is the golden README's bound for fp32 results. */
#define EMB_TOL 1e-3

static void test_codes(const pp_lm *lm) {
    char err[PP_ERR_LEN];
    st_file *f;
    if (pp_st_open(GOLDEN "lm-bf16/clone.safetensors", &f, err)) TEST_SKIP(err);
    const st_tensor *tc = pp_st_find(f, "voice_codes"), *te = pp_st_find(f, "embeddings"), *tk = pp_st_find(f, "cache");
    TEST_COND("clone.safetensors tensors", tc && te && tk && tc->ndim == 2 && tc->shape[1] == 8);
    if (!tc || !te || !tk) return;
    int64_t n = tc->shape[0];
    int64_t *c64 = malloc((size_t)tc->numel * sizeof *c64), cache[17 * 4];
    int32_t *codes = malloc((size_t)tc->numel * sizeof *codes);
    float *want = malloc((size_t)te->numel * sizeof *want);
    pp_st_load_i64(f, tc, 0, tc->numel, c64, err);
    pp_st_load_f32(f, te, 0, te->numel, want, err);
    pp_st_load_i64(f, tk, 0, 68, cache, err);
    for (int64_t i = 0; i < tc->numel; i++) codes[i] = (int32_t)c64[i];
    pp_voice v;
    int rc = pp_voice_clone_codes(lm, codes, n, &v, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("clone from codes", rc == 0);
    TEST_COND("N frames give N-1 embeddings", rc == 0 && v.frames == n - 1 && te->numel == (n - 1) * v.dim);
    double e = rc == 0 ? test_rel_err(v.embeddings, want, (size_t)te->numel) : INFINITY;
    printf("clone embeddings vs reference: rel err %.2e\n", e);
    TEST_COND("embeddings match the reference (rel err <= 1e-3)", e <= EMB_TOL);
    TEST_COND("token ring matches the reference exactly", rc == 0 && memcmp(v.cache, cache, sizeof cache) == 0);

    /* Saved and reloaded: BF16-rounded embeddings, same ring. */
    char dir[] = "/tmp/test_voice_clone.XXXXXX", path[64];
    if (!mkdtemp(dir)) TEST_SKIP("cannot create a temporary directory");
    snprintf(path, sizeof path, "%s/clone.pt", dir);
    pp_voice back;
    TEST_COND("save clone", rc == 0 && pp_voice_save_pt(path, &v, err) == 0);
    TEST_COND("reload clone", pp_voice_load(path, v.dim, &back, err) == 0);
    int same = back.frames == v.frames && memcmp(back.cache, v.cache, sizeof v.cache) == 0;
    for (int64_t i = 0; same && i < v.frames * v.dim; i++)
        same = back.embeddings[i] == pp_bf16_to_f32(pp_f32_to_bf16(v.embeddings[i]));
    TEST_COND("reloaded clone is the BF16 rounding of the clone", same);
    unlink(path);
    rmdir(dir);
    pp_voice_free(&back);
    pp_voice_free(&v);
    TEST_COND("one frame is refused", pp_voice_clone_codes(lm, codes, 1, &v, err) == PP_EINVAL);
    codes[3] = 5000;
    TEST_COND("out-of-range code is refused", pp_voice_clone_codes(lm, codes, n, &v, err) < 0 && v.embeddings == NULL);
    free(c64);
    free(codes);
    free(want);
    pp_st_close(f);
}

static void test_audio(const pp_lm *lm, const mimi_model *mimi) {
    char err[PP_ERR_LEN];
    pp_wav w;
    if (pp_wav_read(GOLDEN "speech-24k.wav", PP_WAV_CHANNEL0, &w, err)) TEST_SKIP(err);
    pp_voice a, b;
    double gain_a, gain_b;
    int64_t frames;
    int rc = pp_voice_clone_audio(lm, mimi, w.pcm, w.frames, w.rate, &a, &gain_a, &frames, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("clone from audio", rc == 0);
    TEST_COND("frames = ceil(samples / 1920), embeddings = frames - 1",
              frames == (w.frames + 1919) / 1920 && a.frames == frames - 1);
    /* Half the level: the normalisation gain differs by 6.02 dB and the normalised audio is
     * the same up to float rounding, so the codes and hence the voice come out the same. */
    for (int64_t i = 0; i < w.frames; i++) w.pcm[i] *= 0.5f;
    rc = pp_voice_clone_audio(lm, mimi, w.pcm, w.frames, w.rate, &b, &gain_b, NULL, err);
    printf("normalisation gains: %.3f dB and %.3f dB\n", gain_a, gain_b);
    TEST_COND("half-level clip gets 6.02 dB more gain", rc == 0 && fabs(gain_b - gain_a - 20 * log10(2.0)) < 1e-6);
    TEST_COND("and the same voice", rc == 0 && a.frames == b.frames && memcmp(a.cache, b.cache, sizeof a.cache) == 0 &&
                                        test_rel_err(b.embeddings, a.embeddings, (size_t)(a.frames * a.dim)) <= EMB_TOL);
    pp_voice_free(&b);
    TEST_COND("a clip under 400 ms is refused", pp_voice_clone_audio(lm, mimi, w.pcm, 4000, 24000, &b, NULL, NULL, err) == PP_EINVAL);
    /* One frame past the longest voice, at 8 kHz: refused before it is resampled or encoded, so
     * the zero pages of the 168 MB buffer are never touched (that work took 24 s and 2 GB on
     * the demo model before the refusal came). */
    const int64_t long_n = (int64_t)(PP_VOICE_MAX_FRAMES + 2) * 640;
    float *silence = calloc((size_t)long_n, sizeof *silence);
    double t0 = pp_now_ms();
    TEST_COND("a clip past the longest voice is refused at once, naming the limit",
              silence && pp_voice_clone_audio(lm, mimi, silence, long_n, 8000, &b, NULL, NULL, err) == PP_EINVAL &&
                  strstr(err, "65538 codec frames") && pp_now_ms() - t0 < 1000);
    free(silence);
    memset(w.pcm, 0, (size_t)w.frames * sizeof(float));
    TEST_COND("a silent clip is refused", pp_voice_clone_audio(lm, mimi, w.pcm, w.frames, 24000, &b, NULL, NULL, err) == PP_EINVAL &&
                                              strstr(err, "silent"));
    pp_voice_free(&a);
    pp_wav_free(&w);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    mimi_model *mimi = NULL;
    if (pp_backend_cpu_create(0, &be, err) ||
        pp_lm_open(be, GOLDEN "lm-bf16/model.safetensors", GOLDEN "lm-bf16/config.json", &lm, err) ||
        pp_mimi_open(be, GOLDEN "mimi-speech/model.safetensors", GOLDEN "mimi-speech/config.json", &mimi, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_codes(lm);
    test_audio(lm, mimi);
    pp_mimi_close(mimi);
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return test_report();
}
