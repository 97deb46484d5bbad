/* personaplex-bench codec: Mimi encode and decode time per 1920-sample frame of --batch
 * conversations at once (pp_mimi_encode_batch / pp_mimi_decode_batch; 1: a lone session), on
 * random weights of the real shapes (no checkpoint needed: the codec's own catalog of tensors
 * is written to a temporary safetensors file, opened and unlinked). On a device backend it also
 * prints the nodes of one frame and, where the backend counts device traffic (the CUDA
 * emulation), its device bytes and the H100 estimate of bench.h.
 *   personaplex-bench codec [--threads N] [--frames N] [--warmup N] [--config config.json]
 *                           [--device cpu|cuda] [--batch N] */
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

/* A call serves one frame of every conversation in it: real time is frame_ms per call. */
static void report(const char *what, double *ms, int n, double frame_ms) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    bench_sort(ms, n);
    printf("%-7s mean %7.2f ms  p50 %7.2f  p90 %7.2f  max %7.2f  (%.2fx real time)\n", what, sum / n, ms[n / 2],
           bench_nearest_rank(ms, n, 0.9), ms[n - 1], frame_ms / (sum / n));
}

static void usage(void) {
    fprintf(bench_usage_stream(), "usage: personaplex-bench codec [--threads N] [--frames N] [--warmup N] [--config config.json] "
                    "[--device cpu|cuda] [--batch N]\n"
                    "  Times Mimi encode and decode per frame on random weights of the configuration's shapes\n"
                    "  (default: the released Mimi, docs/codec.md §1), N conversations at once (default 1).\n");
}

/* n conversations' states, one batch over them, and their frames' buffers. */
typedef struct codec_bench {
    mimi_model *m;
    int n;
    int counted; /* the backend counts device traffic (from before the weights were loaded) */
    mimi_state **s;
    mimi_batch *b;
    float *pcm;       /* [n][frame_size] */
    int32_t *codes;   /* [n][QUANTIZER_MAX_CODES] */
    const float **in; /* [n] rows of pcm */
    float **out;
    int32_t **code_out;
    const int32_t **code_in;
} codec_bench;

static int codec_bench_create(codec_bench *cb, char *err) {
    const size_t n = (size_t)cb->n, fs = (size_t)pp_mimi_get_config(cb->m)->frame_size;
    cb->s = calloc(n, sizeof *cb->s);
    cb->pcm = malloc(n * fs * sizeof *cb->pcm);
    cb->codes = malloc(n * QUANTIZER_MAX_CODES * sizeof *cb->codes);
    cb->in = malloc(n * sizeof *cb->in);
    cb->out = malloc(n * sizeof *cb->out);
    cb->code_out = malloc(n * sizeof *cb->code_out);
    cb->code_in = malloc(n * sizeof *cb->code_in);
    if (!cb->s || !cb->pcm || !cb->codes || !cb->in || !cb->out || !cb->code_out || !cb->code_in)
        return pp_fail(err, PP_ENOMEM, "bench codec: out of memory for %d conversations", cb->n);
    for (size_t i = 0; i < n; i++) {
        cb->in[i] = cb->out[i] = cb->pcm + i * fs;
        cb->code_in[i] = cb->code_out[i] = cb->codes + i * QUANTIZER_MAX_CODES;
        int rc = pp_mimi_state_create(cb->m, &cb->s[i], err);
        if (rc) return rc;
    }
    return pp_mimi_batch_create(cb->m, cb->n, &cb->b, err);
}

static void codec_bench_destroy(codec_bench *cb) {
    for (int i = 0; cb->s && i < cb->n; i++) pp_mimi_state_destroy(cb->s[i]);
    pp_mimi_batch_destroy(cb->b);
    free(cb->s);
    free(cb->pcm);
    free(cb->codes);
    free(cb->in);
    free(cb->out);
    free(cb->code_out);
    free(cb->code_in);
}

/* Frame i of every conversation: encode a tone with noise, then decode random codes, as the
 * server decodes the LM's and not the ones just encoded. Adds the decoded audio's energy. */
static int codec_frame(codec_bench *cb, int i, double *enc_s, double *dec_s, double *energy, char *err) {
    const mimi_config *c = pp_mimi_get_config(cb->m);
    const int fs = c->frame_size;
    for (int k = 0; k < cb->n; k++)
        for (int j = 0; j < fs; j++)
            cb->pcm[(size_t)k * fs + j] = 0.3f * sinf(0.05f * (float)(i * fs + j) * (1 + 0.1f * k)) + 0.05f * uniform();
    double t0 = bench_now();
    int rc = pp_mimi_encode_batch(cb->b, cb->s, cb->n, cb->in, cb->code_out, err);
    double t1 = bench_now();
    for (int k = 0; k < cb->n; k++)
        for (int q = 0; q < c->quantizer.num_codebooks; q++)
            cb->codes[k * QUANTIZER_MAX_CODES + q] =
                (int32_t)((uniform() + 1.0f) * 0.5f * (float)c->quantizer.bins) % c->quantizer.bins;
    double t2 = bench_now();
    if (!rc) rc = pp_mimi_decode_batch(cb->b, cb->s, cb->n, cb->code_in, cb->out, err);
    double t3 = bench_now();
    *enc_s = t1 - t0;
    *dec_s = t3 - t2;
    for (size_t j = 0; j < (size_t)cb->n * fs; j++) *energy += (double)cb->pcm[j] * cb->pcm[j];
    return rc;
}

/* Frame i, counted: its device nodes (0 on a backend without them) and, where the backend counts
 * it, its device traffic into t. Codec products run on f32 weights (their rate in the estimate). */
static int counted_frame(codec_bench *cb, int i, double *nodes, bench_traffic *t, char *err) {
    pp_backend *be = pp_mimi_backend(cb->m);
    double enc, dec, energy = 0;
    bench_traffic_take(be, PP_WF_F32, 1, NULL);
    uint64_t n0 = be->ops->nodes_run ? be->ops->nodes_run(be) : 0;
    int rc = codec_frame(cb, i, &enc, &dec, &energy, err);
    *nodes = be->ops->nodes_run ? (double)(be->ops->nodes_run(be) - n0) : 0;
    bench_traffic_take(be, PP_WF_F32, 1, t); /* f32: no product prepares its inputs */
    return rc;
}

/* One more frame on a device backend, counted and printed. */
static int print_counted_frame(codec_bench *cb, int i, char *err) {
    if (!pp_mimi_backend(cb->m)->ops->nodes_run) return PP_OK;
    bench_traffic t = {0};
    double nodes;
    int rc = counted_frame(cb, i, &nodes, &t, err);
    if (rc) return rc;
    printf("one frame of %d conversations (encode + decode): %.0f nodes", cb->n, nodes);
    if (cb->counted)
        printf(", device %.1f MB read + %.1f MB written, H100 estimate %.3f ms\n", t.read / 1e6, t.written / 1e6,
               1e3 * bench_estimate_s(&t, nodes));
    else
        printf("\n");
    if (cb->counted) bench_traffic_print(&t);
    return PP_OK;
}

static int run_frames(codec_bench *cb, int frames, int warmup, char *err) {
    const mimi_config *c = pp_mimi_get_config(cb->m);
    double *enc_ms = malloc((size_t)frames * sizeof(double)), *dec_ms = malloc((size_t)frames * sizeof(double));
    double energy = 0;
    int rc = enc_ms && dec_ms ? PP_OK : pp_fail(err, PP_ENOMEM, "bench codec: out of memory");
    for (int i = 0; i < warmup + frames && !rc; i++) {
        double enc, dec;
        rc = codec_frame(cb, i, &enc, &dec, &energy, err);
        if (i >= warmup) {
            enc_ms[i - warmup] = 1e3 * enc;
            dec_ms[i - warmup] = 1e3 * dec;
        }
    }
    if (!rc) {
        pp_backend *be = pp_mimi_backend(cb->m);
        printf("mimi on %s, %d conversation(s) per call: d_model %d, %d+%d transformer layers, %d codebooks, %zu MB "
               "weights, %zu MB per conversation, %zu MB batch; %d frames after %d warm-up\n",
               be->ops->name, cb->n, c->transformer.d_model, c->transformer.num_layers, c->transformer.num_layers,
               c->quantizer.num_codebooks, pp_mimi_weight_bytes(cb->m) >> 20, pp_mimi_state_bytes(cb->s[0]) >> 20,
               pp_mimi_batch_bytes(cb->b) >> 20, frames, warmup);
        double frame_ms = 1e3 * c->frame_size / c->sample_rate;
        report("encode", enc_ms, frames, frame_ms);
        report("decode", dec_ms, frames, frame_ms);
        double samples = (double)(warmup + frames) * c->frame_size * cb->n;
        printf("decoded pcm rms %.3g (finite: %s)\n", sqrt(energy / samples), isfinite(energy) ? "yes" : "NO");
        rc = print_counted_frame(cb, warmup + frames, err);
    }
    free(enc_ms);
    free(dec_ms);
    return rc;
}

/* The codec of cfg's shapes (config: its file, NULL for the released Mimi) on random weights:
 * its catalog written to a private temporary file (no config.json can sit beside it), opened
 * and unlinked (the mapping keeps the data). */
static int open_random(pp_backend *be, const char *config, mimi_model **m, char *err) {
    mimi_config cfg;
    pp_mimi_config_default(&cfg);
    pp_tensor_list cat = {0};
    int rc = config ? pp_mimi_config_load(config, &cfg, err) : PP_OK;
    if (!rc) rc = pp_mimi_catalog_list(&cfg, &cat, err);
    char dir[] = "/tmp/pp_bench_codec_XXXXXX", path[64] = "";
    int made = !rc && mkdtemp(dir);
    if (!rc && !made) rc = pp_fail(err, PP_EIO, "bench codec: cannot create a directory in /tmp");
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        printf("writing %zu random tensors of the codec's shapes to %s\n", cat.n, path);
        rc = write_random(path, &cat, err);
    }
    if (!rc) rc = pp_mimi_open(be, path, config, m, err);
    if (path[0]) unlink(path);
    if (made) rmdir(dir);
    pp_tensor_list_free(&cat);
    return rc;
}

int bench_codec_count(pp_backend *be, int n, int timed, double *nodes, double *ms, bench_traffic *t,
                      double *weights, char *err) {
    codec_bench cb = {.n = n};
    int rc = open_random(be, NULL, &cb.m, err);
    if (!rc) *weights = (double)pp_mimi_weight_bytes(cb.m);
    if (!rc) rc = codec_bench_create(&cb, err);
    /* Three frames first: the rows' start (unrecorded), then a device's plain and recorded runs. */
    double enc, dec, energy = 0;
    for (int i = 0; i < 3 && !rc; i++) rc = codec_frame(&cb, i, &enc, &dec, &energy, err);
    if (!rc) rc = counted_frame(&cb, 3, nodes, t, err);
    /* then timed apart: counting traffic slows the frame it counts */
    double *frame_ms = timed > 0 ? malloc((size_t)timed * sizeof *frame_ms) : NULL;
    if (!rc && timed > 0 && !frame_ms) rc = pp_fail(err, PP_ENOMEM, "bench codec: out of memory");
    for (int i = 0; i < timed && !rc; i++) {
        rc = codec_frame(&cb, 4 + i, &enc, &dec, &energy, err);
        frame_ms[i] = 1e3 * (enc + dec);
    }
    if (!rc && timed > 0) bench_sort(frame_ms, timed);
    *ms = !rc && timed > 0 ? frame_ms[timed / 2] : 0;
    free(frame_ms);
    codec_bench_destroy(&cb);
    pp_mimi_close(cb.m);
    return rc;
}

int bench_codec(int argc, char **argv) {
    int threads = 0, frames = 50, warmup = 5, batch = 1;
    const char *config = NULL, *device = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--threads") == 0 && v) threads = atoi(argv[++i]);
        else if (strcmp(a, "--frames") == 0 && v) frames = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(argv[++i]);
        else if (strcmp(a, "--config") == 0 && v) config = argv[++i];
        else if (strcmp(a, "--device") == 0 && v) device = argv[++i];
        else if (strcmp(a, "--batch") == 0 && v)
            batch = atoi(argv[++i]);
        else {
            usage();
            return bench_usage_status();
        }
    }
    if (frames < 1 || warmup < 0 || batch < 1 || batch > 4096) {
        usage();
        return 2;
    }
    char err[PP_ERR_LEN];
    pp_backend *be = NULL;
    mimi_model *m = NULL;
    int counted = 0;
    int rc = pp_backend_create(device, threads, &be, err);
    if (!rc) counted = bench_traffic_start(be); /* before the weights are allocated: only those after count */
    if (!rc) rc = open_random(be, config, &m, err);
    codec_bench cb = {.m = m, .n = batch, .counted = counted};
    if (!rc) rc = codec_bench_create(&cb, err);
    if (!rc) rc = run_frames(&cb, frames, warmup, err);
    if (rc) fprintf(stderr, "bench codec: %s\n", err);
    codec_bench_destroy(&cb);
    pp_mimi_close(m);
    pp_backend_destroy(be);
    return rc ? 1 : 0;
}
