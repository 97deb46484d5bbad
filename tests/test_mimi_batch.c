/* test_mimi_batch: the codec's batched calls (pp_mimi_encode_batch / pp_mimi_decode_batch)
 * against each conversation run alone, on the golden mimi-synth codec. Conversations join at
 * different frames (so a call mixes rows that start their downsample with rows that do not),
 * the batch's order changes from frame to frame, and a row count repeats long enough for a
 * device backend to record the call and replay it. Built for the CPU backend and, as
 * test_mimi_batch_emu, for the emulated CUDA backend. */
#include "test.h"

#include "model/mimi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MIMI_BATCH_DEVICE
#define MIMI_BATCH_DEVICE "cpu"
#endif

#define CONVS 5
#define FRAMES 8
static const int JOIN[CONVS] = {0, 1, 0, 3, 2}; /* the frame each conversation starts at */

/* Largest |a − b| over the largest |b|. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, big = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
        if (fabs(b[i]) > big) big = fabs(b[i]);
    }
    return d / big;
}

/* Conversation k's frame fr: a chirp of its own pitch with noise. */
static void signal(int k, int fr, int frame, float *out) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(k * 1000 + fr + 1);
    for (int i = 0; i < frame; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        float noise = (float)((x * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 24) - 0.5f;
        float t = (float)(fr * frame + i);
        out[i] = 0.3f * sinf(0.0004f * (k + 1) * t * (1 + 0.0001f * t)) + 0.05f * noise;
    }
}

typedef struct conv_run {
    mimi_state *lone, *batched;
    int32_t codes[QUANTIZER_MAX_CODES], lone_codes[QUANTIZER_MAX_CODES];
    float *pcm_in, *pcm, *lone_pcm;
} conv_run;

int main(void) {
    char err[PP_ERR_LEN];
    pp_backend *be;
    if (pp_backend_create(MIMI_BATCH_DEVICE, 2, &be, err)) {
        fprintf(stderr, "backend: %s\n", err);
        return 1;
    }
    mimi_model *m;
    int rc = pp_mimi_open(be, PP_TEST_DATA "/golden/mimi-synth/model.safetensors", NULL, &m, err);
    if (rc) fprintf(stderr, "mimi-synth: %s\n", err);
    TEST_COND("mimi-synth opens", rc == 0);
    if (rc) return test_report();
    const int frame = pp_mimi_get_config(m)->frame_size, ncb = pp_mimi_get_config(m)->quantizer.num_codebooks;
    const int bins = pp_mimi_get_config(m)->quantizer.bins;
    mimi_batch *batch;
    TEST_COND("batch of capacity 5", pp_mimi_batch_create(m, CONVS, &batch, err) == 0);
    conv_run run[CONVS];
    for (int k = 0; k < CONVS; k++) {
        TEST_COND("lone state", pp_mimi_state_create(m, &run[k].lone, err) == 0);
        TEST_COND("batched state", pp_mimi_state_create(m, &run[k].batched, err) == 0);
        run[k].pcm_in = malloc((size_t)frame * sizeof(float));
        run[k].pcm = malloc((size_t)frame * sizeof(float));
        run[k].lone_pcm = malloc((size_t)frame * sizeof(float));
    }

    int codes_same = 1, calls = 0;
    double worst_pcm = 0;
    for (int fr = 0; fr < FRAMES; fr++) {
        mimi_state *ss[CONVS];
        const float *in[CONVS];
        int32_t *codes[CONVS];
        const int32_t *codes_in[CONVS];
        float *out[CONVS];
        int n = 0;
        /* Odd frames list the conversations backwards: a row's place in the batch varies. */
        for (int i = 0; i < CONVS; i++) {
            int k = fr % 2 ? CONVS - 1 - i : i;
            if (fr < JOIN[k]) continue;
            conv_run *r = &run[k];
            signal(k, fr - JOIN[k], frame, r->pcm_in);
            TEST_COND("lone encode", pp_mimi_encode_frame(r->lone, r->pcm_in, r->lone_codes, NULL, err) == 0);
            TEST_COND("lone decode", pp_mimi_decode_frame(r->lone, r->lone_codes, r->lone_pcm, err) == 0);
            ss[n] = r->batched;
            in[n] = r->pcm_in;
            codes[n] = r->codes;
            codes_in[n] = r->codes;
            out[n++] = r->pcm;
        }
        rc = pp_mimi_encode_batch(batch, ss, n, in, codes, err);
        if (!rc) rc = pp_mimi_decode_batch(batch, ss, n, codes_in, out, err);
        if (rc) fprintf(stderr, "frame %d: %s\n", fr, err);
        TEST_COND("batched encode and decode run", rc == 0);
        calls++;
        for (int k = 0; k < CONVS; k++) {
            if (fr < JOIN[k]) continue;
            codes_same &= memcmp(run[k].codes, run[k].lone_codes, (size_t)ncb * sizeof(int32_t)) == 0;
            double d = rel_diff(run[k].pcm, run[k].lone_pcm, (size_t)frame);
            if (d > worst_pcm) worst_pcm = d;
        }
    }
    printf("%s: %d batched frames of up to %d conversations: codes %s, worst pcm difference %.2e of the peak\n",
           MIMI_BATCH_DEVICE, calls, CONVS, codes_same ? "identical" : "DIFFER", worst_pcm);
    TEST_COND("batched codes equal the lone conversations' codes", codes_same);
    /* The CPU forms every output of a batched call as it forms it alone, so bit for bit; a device's
     * batched products (tensor cores above 8 rows) round differently, within the golden codec
     * tolerance. */
    const double pcm_tol = strcmp(MIMI_BATCH_DEVICE, "cpu") == 0 ? 0.0 : 1e-5;
    TEST_COND("batched audio equals the lone conversations' audio", worst_pcm <= pcm_tol);

    /* Refusals, before anything changes. */
    mimi_state *twice[2] = {run[0].batched, run[0].batched};
    const float *in2[2] = {run[0].pcm_in, run[0].pcm_in};
    int32_t *codes2[2] = {run[0].codes, run[1].codes};
    TEST_COND("a state listed twice is refused", pp_mimi_encode_batch(batch, twice, 2, in2, codes2, err) == PP_EINVAL);
    mimi_state *all[CONVS + 1];
    for (int k = 0; k <= CONVS; k++) all[k] = run[k % CONVS].batched;
    TEST_COND("more rows than the capacity are refused",
              pp_mimi_encode_batch(batch, all, CONVS + 1, in2, codes2, err) == PP_EINVAL);
    int32_t bad[QUANTIZER_MAX_CODES] = {0};
    bad[2] = bins;
    const int32_t *bad_in[2] = {run[0].codes, bad};
    float *out2[2] = {run[0].pcm, run[1].pcm};
    mimi_state *pair[2] = {run[0].batched, run[1].batched};
    TEST_COND("an out-of-range code is refused", pp_mimi_decode_batch(batch, pair, 2, bad_in, out2, err) == PP_EINVAL);
    TEST_COND("the refusal names the conversation", strstr(err, "conversation 1") != NULL);
    /* ... and changed nothing: one more frame still matches the lone runs. */
    signal(0, 99, frame, run[0].pcm_in);
    memcpy(run[1].pcm_in, run[0].pcm_in, (size_t)frame * sizeof(float));
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        ok &= pp_mimi_encode_frame(run[k].lone, run[0].pcm_in, run[k].lone_codes, NULL, err) == 0;
        ok &= pp_mimi_decode_frame(run[k].lone, run[k].lone_codes, run[k].lone_pcm, err) == 0;
    }
    const float *in_pair[2] = {run[0].pcm_in, run[1].pcm_in};
    int32_t *codes_pair[2] = {run[0].codes, run[1].codes};
    const int32_t *codes_pair_in[2] = {run[0].codes, run[1].codes};
    ok &= pp_mimi_encode_batch(batch, pair, 2, in_pair, codes_pair, err) == 0;
    ok &= pp_mimi_decode_batch(batch, pair, 2, codes_pair_in, out2, err) == 0;
    for (int k = 0; k < 2; k++)
        ok &= memcmp(run[k].codes, run[k].lone_codes, (size_t)ncb * sizeof(int32_t)) == 0 &&
              rel_diff(run[k].pcm, run[k].lone_pcm, (size_t)frame) <= 1e-5;
    TEST_COND("refused calls leave the states as they were", ok);

    for (int k = 0; k < CONVS; k++) {
        pp_mimi_state_destroy(run[k].lone);
        pp_mimi_state_destroy(run[k].batched);
        free(run[k].pcm_in);
        free(run[k].pcm);
        free(run[k].lone_pcm);
    }
    pp_mimi_batch_destroy(batch);
    pp_mimi_close(m);
    pp_backend_destroy(be);
    return test_report();
}
