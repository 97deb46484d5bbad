/* voice_clone: see voice_clone.h. */
#include "session/voice_clone.h"

#include <stdlib.h>
#include <string.h>

#include "audio/loudness.h"
#include "audio/resample.h"
#include "base/err.h"
#include "model/lmgen.h"

int pp_voice_clone_codes(const pp_lm *lm, const int32_t *codes, int64_t n_frames, pp_voice *out, char *err) {
    memset(out, 0, sizeof *out);
    const pp_lm_config *c = pp_lm_get_config(lm);
    if (n_frames < 2 || n_frames > PP_VOICE_MAX_FRAMES + 1)
        return pp_fail(err, PP_EINVAL, "voice clone: %lld codec frames (need 2..%d)", (long long)n_frames, PP_VOICE_MAX_FRAMES + 1);
    pp_lmgen *g = NULL;
    int rc = pp_lmgen_create(lm, NULL, &g, err);
    if (rc) return rc;
    if (pp_lmgen_ring_width(g) != PP_VOICE_RING) {
        pp_lmgen_destroy(g);
        return pp_fail(err, PP_EUNSUPPORTED, "voice clone: token ring width %d, a voice file stores %d", pp_lmgen_ring_width(g),
                       PP_VOICE_RING);
    }
    out->dim = c->dim;
    out->embeddings = malloc((size_t)(n_frames * c->dim) * sizeof(float));
    if (!out->embeddings) rc = pp_fail(err, PP_ENOMEM, "voice clone: out of memory");
    for (int64_t j = 0; j < n_frames && rc == 0; j++) {
        pp_lmgen_out o;
        int r = pp_lmgen_step_forced(g, PP_LM_TEXT_PAD, codes + j * PP_LM_AUDIO_CODEBOOKS, pp_lmgen_sine_codes, &o,
                                     out->embeddings + out->frames * c->dim, err);
        if (r < 0) rc = r;
        else out->frames += r;
    }
    if (rc == 0 && out->frames != n_frames - 1)
        rc = pp_fail(err, PP_EINVAL, "voice clone: %lld computing calls for %lld frames", (long long)out->frames,
                     (long long)n_frames);
    if (rc == 0) pp_lmgen_token_ring(g, &out->cache[0][0]);
    pp_lmgen_destroy(g);
    if (rc) pp_voice_free(out);
    return rc;
}

/* Resampled, normalised, zero-padded audio -> codes [frames][8]. */
static int encode(const mimi_model *mimi, const float *pcm, int64_t n, int32_t *codes, int64_t frames, char *err) {
    const mimi_config *mc = pp_mimi_get_config(mimi);
    int fs = mc->frame_size, nq = mc->quantizer.num_codebooks;
    mimi_state *s = NULL;
    float *frame = malloc((size_t)fs * sizeof *frame);
    int32_t *all = malloc((size_t)nq * sizeof *all);
    int rc = frame && all ? pp_mimi_state_create(mimi, &s, err) : pp_fail(err, PP_ENOMEM, "voice clone: out of memory");
    for (int64_t j = 0; j < frames && rc == 0; j++) {
        int64_t have = n - j * fs < fs ? n - j * fs : fs;
        memcpy(frame, pcm + j * fs, (size_t)have * sizeof *frame);
        memset(frame + have, 0, (size_t)(fs - have) * sizeof *frame);
        rc = pp_mimi_encode_frame(s, frame, all, NULL, err);
        if (rc == 0) memcpy(codes + j * PP_LM_AUDIO_CODEBOOKS, all, PP_LM_AUDIO_CODEBOOKS * sizeof *codes);
    }
    pp_mimi_state_destroy(s);
    free(frame);
    free(all);
    return rc;
}

int pp_voice_clone_audio(const pp_lm *lm, const mimi_model *mimi, const float *pcm, int64_t n, int rate, pp_voice *out,
                         double *gain_db, int64_t *n_frames, char *err) {
    memset(out, 0, sizeof *out);
    const mimi_config *mc = pp_mimi_get_config(mimi);
    if (mc->quantizer.num_codebooks < PP_LM_AUDIO_CODEBOOKS || mc->frame_size <= 0)
        return pp_fail(err, PP_EUNSUPPORTED, "voice clone: the codec gives %d codes per frame, the LM needs %d",
                       mc->quantizer.num_codebooks, PP_LM_AUDIO_CODEBOOKS);
    /* The clip's codec frames are known before any work on it (pp_resample makes
     * ceil(n · sample_rate / rate) samples): one too long is refused now, not after minutes of
     * resampling and encoding and gigabytes of buffers. */
    if (rate > 0 && mc->sample_rate > 0 && n > 0 && n <= INT64_MAX / mc->sample_rate) {
        int64_t frames = ((n * mc->sample_rate + rate - 1) / rate + mc->frame_size - 1) / mc->frame_size;
        if (frames > PP_VOICE_MAX_FRAMES + 1)
            return pp_fail(err, PP_EINVAL,
                           "voice clone: a %.0f s clip is %lld codec frames; a voice takes at most %d (%.0f minutes)",
                           (double)n / rate, (long long)frames, PP_VOICE_MAX_FRAMES + 1,
                           (double)(PP_VOICE_MAX_FRAMES + 1) * mc->frame_size / mc->sample_rate / 60);
    }
    float *x = NULL;
    int64_t m = 0;
    int rc = pp_resample(pcm, n, rate, mc->sample_rate, &x, &m, err);
    if (rc == 0) rc = pp_loudness_normalize(x, m, mc->sample_rate, PP_VOICE_CLONE_LUFS, gain_db, err);
    int64_t frames = (m + mc->frame_size - 1) / mc->frame_size;
    int32_t *codes = NULL;
    if (rc == 0 && !(codes = malloc((size_t)(frames * PP_LM_AUDIO_CODEBOOKS) * sizeof *codes)))
        rc = pp_fail(err, PP_ENOMEM, "voice clone: out of memory");
    if (rc == 0) rc = encode(mimi, x, m, codes, frames, err);
    if (rc == 0) rc = pp_voice_clone_codes(lm, codes, frames, out, err);
    if (rc == 0 && n_frames) *n_frames = frames;
    free(codes);
    free(x);
    return rc;
}
