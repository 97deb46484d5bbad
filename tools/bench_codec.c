/* personaplex-bench codec: Mimi encode and decode time per 1920-sample frame, single session,
 * on random weights of the real shapes (no checkpoint needed: the codec's own catalog of
 * tensors is written to a temporary safetensors file, opened and unlinked).
 *   personaplex-bench codec [--threads N] [--frames N] [--warmup N] [--config config.json]
 *                           [--device cpu|cuda] */
#include "bench.h"

#include "backend/backend.h"
#include "base/err.h"
#include "io/safetensors.h"
#include "io/tensor_list.h"
#include "model/mimi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 0x853c49e6748fea9bull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Values of a trained model's scale: unit norms, 0.01 LayerScale, fan-in scaled matrices, so
 * activations stay finite and normal (denormals would distort the timings). */
static void fill(const pp_tensor_spec *t, int64_t numel, float *v) {
    int ones = ends_with(t->name, "cluster_usage") || ends_with(t->name, "norm1.weight") ||
               ends_with(t->name, "norm2.weight");
    float base = 0.0f, amp = sqrtf(3.0f * (float)t->shape[0] / (float)numel); /* uniform, variance 1/fan-in */
    if (ones) {
        base = 1.0f;
        amp = 0.0f;
    } else if (ends_with(t->name, ".scale")) {
        base = 0.01f;
        amp = 0.0f;
    } else if (ends_with(t->name, ".bias")) {
        amp = 0.01f;
    }
    for (int64_t i = 0; i < numel; i++) v[i] = base + amp * uniform();
}

static int write_random(const char *path, const pp_tensor_list *c, char *err) {
    st_writer *w;
    int rc = pp_st_writer_create(path, &w, err);
    for (size_t i = 0; i < c->n && !rc; i++)
        rc = pp_st_writer_declare(w, c->v[i].name, ST_F32, c->v[i].ndim, c->v[i].shape, err);
    if (!rc) rc = pp_st_writer_begin(w, err);
    for (size_t i = 0; i < c->n && !rc; i++) {
        int64_t numel = 1;
        for (int d = 0; d < c->v[i].ndim; d++) numel *= c->v[i].shape[d];
        float *v = malloc((size_t)numel * sizeof(float));
        if (!v) rc = pp_fail(err, PP_ENOMEM, "bench codec: out of memory");
        if (!rc) {
            fill(&c->v[i], numel, v);
            rc = pp_st_writer_write(w, v, (size_t)numel * sizeof(float), err);
        }
        free(v);
    }
    if (rc) {
        pp_st_writer_abort(w);
        return rc;
    }
    return pp_st_writer_finish(w, err);
}

static void report(const char *what, double *ms, int n, double frame_ms) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    bench_sort(ms, n);
    printf("%-7s mean %7.2f ms  p50 %7.2f  p90 %7.2f  max %7.2f  (%.2fx real time)\n", what, sum / n, ms[n / 2],
           ms[(n * 9) / 10], ms[n - 1], frame_ms / (sum / n));
}

static void usage(void) {
    fprintf(stderr, "usage: personaplex-bench codec [--threads N] [--frames N] [--warmup N] [--config config.json] "
                    "[--device cpu|cuda]\n"
                    "  Times Mimi encode and decode per frame on random weights of the configuration's shapes\n"
                    "  (default: the released Mimi, docs/codec.md §1), one session.\n");
}

int bench_codec(int argc, char **argv) {
    int threads = 0, frames = 50, warmup = 5;
    const char *config = NULL, *device = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--threads") == 0 && v) threads = atoi(argv[++i]);
        else if (strcmp(a, "--frames") == 0 && v) frames = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(argv[++i]);
        else if (strcmp(a, "--config") == 0 && v) config = argv[++i];
        else if (strcmp(a, "--device") == 0 && v) device = argv[++i];
        else {
            usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (frames < 1 || warmup < 0) {
        usage();
        return 2;
    }
    char err[PP_ERR_LEN];
    mimi_config cfg;
    pp_mimi_config_default(&cfg);
    pp_tensor_list cat = {0};
    int rc = config ? pp_mimi_config_load(config, &cfg, err) : PP_OK;
    if (!rc) rc = pp_mimi_catalog_list(&cfg, &cat, err);
    /* A private directory, so no config.json can sit beside the stand-in weights. */
    char dir[] = "/tmp/pp_bench_codec_XXXXXX", path[64] = "";
    if (!rc && !mkdtemp(dir)) rc = pp_fail(err, PP_EIO, "bench codec: cannot create a directory in /tmp");
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        printf("writing %zu random tensors of the configuration's shapes to %s\n", cat.n, path);
        rc = write_random(path, &cat, err);
    }
    pp_backend *be = NULL;
    mimi_model *m = NULL;
    mimi_state *s = NULL;
    if (!rc) rc = pp_backend_create(device, threads, &be, err);
    if (!rc) rc = pp_mimi_open(be, path, config, &m, err);
    if (path[0]) unlink(path); /* the mapping keeps the data */
    rmdir(dir);
    if (!rc) rc = pp_mimi_state_create(m, &s, err);
    pp_tensor_list_free(&cat);
    if (rc) {
        fprintf(stderr, "bench codec: %s\n", err);
        pp_mimi_state_destroy(s);
        pp_mimi_close(m);
        pp_backend_destroy(be);
        return 1;
    }
    const mimi_config *c = pp_mimi_get_config(m);
    const int fs = c->frame_size, nq = c->quantizer.num_codebooks;
    float *pcm = malloc((size_t)fs * sizeof(float));
    double *enc_ms = malloc((size_t)frames * sizeof(double)), *dec_ms = malloc((size_t)frames * sizeof(double));
    int32_t codes[QUANTIZER_MAX_CODES];
    double rms = 0;
    for (int i = 0; i < warmup + frames && !rc; i++) {
        for (int j = 0; j < fs; j++) pcm[j] = 0.3f * sinf(0.05f * (float)(i * fs + j)) + 0.05f * uniform();
        double t0 = bench_now();
        rc = pp_mimi_encode_frame(s, pcm, codes, NULL, err);
        double t1 = bench_now();
        /* Decode random codes, as the server decodes the LM's, not the ones just encoded. */
        for (int q = 0; q < nq; q++) codes[q] = (int32_t)((uniform() + 1.0f) * 0.5f * (float)c->quantizer.bins) %
                                               c->quantizer.bins;
        if (!rc) rc = pp_mimi_decode_frame(s, codes, pcm, err);
        double t2 = bench_now();
        if (i >= warmup) {
            enc_ms[i - warmup] = 1e3 * (t1 - t0);
            dec_ms[i - warmup] = 1e3 * (t2 - t1);
        }
        for (int j = 0; j < fs; j++) rms += (double)pcm[j] * pcm[j];
    }
    if (!rc) {
        double frame_ms = 1e3 * fs / c->sample_rate;
        char th[16] = "one per CPU";
        if (threads > 0) snprintf(th, sizeof th, "%d", threads);
        printf("mimi on %s, threads %s: d_model %d, %d+%d transformer layers, %d codebooks, %zu MB weights, "
               "%zu MB state; %d frames after %d warm-up\n",
               be->ops->name, th, c->transformer.d_model, c->transformer.num_layers, c->transformer.num_layers, nq,
               pp_mimi_weight_bytes(m) >> 20, pp_mimi_state_bytes(s) >> 20, frames, warmup);
        report("encode", enc_ms, frames, frame_ms);
        report("decode", dec_ms, frames, frame_ms);
        printf("decoded pcm rms %.3g (finite: %s)\n", sqrt(rms / ((double)(warmup + frames) * fs)),
               isfinite(rms) ? "yes" : "NO");
    } else {
        fprintf(stderr, "bench codec: %s\n", err);
    }
    free(pcm);
    free(enc_ms);
    free(dec_ms);
    pp_mimi_state_destroy(s);
    pp_mimi_close(m);
    pp_backend_destroy(be);
    return rc ? 1 : 0;
}
