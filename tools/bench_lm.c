/* personaplex-bench lm: times the language model's frames on a backend: forced prompt frames
 * (temporal transformer only) one by one, the same frames as batched prefill (runs of
 * PREFILL_ROWS rows, what a session does) and from a prompt-cache snapshot (restore into a
 * fresh conversation), and conversation frames (plus the text head and the 8 agent depformer
 * steps), with sampling as the server runs it.
 *   personaplex-bench lm --weights model.safetensors [--config config.json] [--frames N]
 *                        [--threads N] [--device cpu|cuda] [--greedy]
 * Without --config the PersonaPlex-7B hyper-parameters are used. The prompt frames use the
 * silence and sine codes, so they need a card-2048 model; smaller ones time a voice-embedding
 * replay instead. */
#include "bench.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "model/lmgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *weights, *config, *device;
    int frames, threads, greedy;
} lm_opts;

static int parse(int argc, char **argv, lm_opts *o) {
    *o = (lm_opts){.device = "cpu", .frames = 32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--greedy") == 0) o->greedy = 1;
        else if (!v) return -1;
        else if (strcmp(a, "--weights") == 0) o->weights = v, i++;
        else if (strcmp(a, "--config") == 0) o->config = v, i++;
        else if (strcmp(a, "--device") == 0) o->device = v, i++;
        else if (strcmp(a, "--frames") == 0) o->frames = atoi(v), i++;
        else if (strcmp(a, "--threads") == 0) o->threads = atoi(v), i++;
        else return -1;
    }
    return o->weights && o->frames > 0 ? 0 : -1;
}

/* Times `frames` forced prompt frames; returns ms per frame or a negative code. */
static double time_prompt(pp_lmgen *g, const pp_lm_config *c, int frames, char *err) {
    double t0 = bench_now();
    int rc;
    if (c->card >= 2048) {
        rc = pp_lmgen_prompt_silence(g, frames, err);
    } else {
        float *emb = calloc((size_t)frames * c->dim, sizeof *emb);
        int64_t cache[PP_LM_STREAMS * 4] = {0};
        rc = emb ? pp_lmgen_prompt_voice(g, emb, frames, cache, err) : pp_fail(err, PP_ENOMEM, "out of memory");
        free(emb);
    }
    return rc ? rc : 1e3 * (bench_now() - t0) / frames;
}

#define PREFILL_ROWS 32 /* PP_SESSION_PREFILL_ROWS */

/* The prompt of time_prompt as one schedule: silence frames, or voice frames on small cards. */
static pp_lmgen_prompt bench_prompt(const pp_lm_config *c, int frames, float *emb, const int64_t *cache) {
    if (c->card >= 2048) return (pp_lmgen_prompt){NULL, NULL, 0, frames / 2, NULL, 0};
    return (pp_lmgen_prompt){emb, cache, frames, 0, NULL, 0};
}

/* The prompt frames as batched prefill (ms per frame), then its snapshot's restore into another
 * conversation (ms in all) and size. */
static int time_prefill(const pp_lm *lm, const pp_lmgen_params *p, int frames, double *prefill_ms,
                        double *restore_ms, size_t *bytes, char *err) {
    const pp_lm_config *c = pp_lm_get_config(lm);
    float *emb = calloc((size_t)frames * c->dim, sizeof *emb);
    int64_t cache[PP_LM_STREAMS * 4] = {0};
    pp_lmgen_prompt pr = bench_prompt(c, frames, emb, cache);
    pp_lmgen *g = NULL, *h = NULL;
    pp_lmbatch *b = NULL;
    pp_lmgen_snapshot *snap = NULL;
    int rc = emb ? pp_lmgen_create(lm, p, &g, err) : pp_fail(err, PP_ENOMEM, "out of memory");
    if (!rc) rc = pp_lmgen_create(lm, p, &h, err);
    if (!rc) rc = pp_lmbatch_create(lm, PREFILL_ROWS, &b, err);
    double t0 = bench_now();
    if (!rc) rc = pp_lmgen_prefill(g, b, &pr, 0, pp_lmgen_prompt_length(&pr), err);
    pp_lm_backend(lm)->ops->sync(pp_lm_backend(lm));
    *prefill_ms = 1e3 * (bench_now() - t0) / pp_lmgen_prompt_length(&pr);
    if (!rc) rc = pp_lmgen_snapshot_take(g, &snap, err);
    t0 = bench_now();
    if (!rc) rc = pp_lmgen_snapshot_restore(h, snap, err);
    pp_lm_backend(lm)->ops->sync(pp_lm_backend(lm));
    *restore_ms = 1e3 * (bench_now() - t0);
    *bytes = snap ? pp_lmgen_snapshot_bytes(snap) : 0;
    pp_lmgen_snapshot_free(snap);
    pp_lmbatch_destroy(b);
    pp_lmgen_destroy(g);
    pp_lmgen_destroy(h);
    free(emb);
    return rc;
}

static double time_steps(pp_lmgen *g, const pp_lm_config *c, int frames, char *err) {
    double t0 = bench_now();
    for (int t = 0; t < frames; t++) {
        int32_t user[PP_LM_AUDIO_CODEBOOKS];
        for (int i = 0; i < PP_LM_AUDIO_CODEBOOKS; i++) user[i] = (t * 37 + i * 101) % c->card;
        pp_lmgen_out out;
        int rc = pp_lmgen_step(g, user, &out, err);
        if (rc) return rc;
    }
    return 1e3 * (bench_now() - t0) / frames;
}

int bench_lm(int argc, char **argv) {
    lm_opts o;
    if (parse(argc, argv, &o)) {
        fprintf(bench_usage_stream(), "usage: personaplex-bench lm --weights model.safetensors [--config config.json] "
                        "[--frames N] [--threads N] [--device cpu|cuda] [--greedy]\n");
        return bench_usage_status();
    }
    pp_log_set_level(PP_LOG_WARN);
    char err[PP_ERR_LEN] = "";
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    pp_lmgen *g = NULL;
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    p.greedy = o.greedy;
    int rc = pp_backend_create(o.device, o.threads, &be, err);
    double t0 = bench_now();
    if (!rc) rc = pp_lm_open(be, o.weights, o.config, &lm, err);
    double t_open = bench_now() - t0;
    if (!rc) rc = pp_lmgen_create(lm, &p, &g, err);
    double prompt_ms = 0, step_ms = 0, prefill_ms = 0, restore_ms = 0;
    size_t snap_bytes = 0;
    if (!rc) {
        prompt_ms = time_prompt(g, pp_lm_get_config(lm), o.frames, err);
        if (prompt_ms < 0) rc = (int)prompt_ms;
    }
    if (!rc) rc = time_prefill(lm, &p, o.frames, &prefill_ms, &restore_ms, &snap_bytes, err);
    if (!rc) {
        step_ms = time_steps(g, pp_lm_get_config(lm), o.frames, err);
        if (step_ms < 0) rc = (int)step_ms;
    }
    if (!rc) {
        const pp_lm_config *c = pp_lm_get_config(lm);
        printf("lm %s on %s: %d layers dim %d, open %.2f s\n", o.weights, be->ops->name, c->num_layers, c->dim, t_open);
        printf("  prompt frame       %8.2f ms  (temporal transformer only)\n", prompt_ms);
        printf("  batched prompt     %8.2f ms  per frame (runs of %d rows)\n", prefill_ms, PREFILL_ROWS);
        printf("  prompt from cache  %8.2f ms  for all %d frames (%.1f MiB snapshot)\n", restore_ms, o.frames,
               (double)snap_bytes / (1 << 20));
        printf("  conversation frame %8.2f ms  (+ text head + 8 depformer steps, %s)  real-time needs < 80 ms\n",
               step_ms, o.greedy ? "greedy" : "sampling");
    } else {
        fprintf(stderr, "personaplex-bench lm: %s\n", err);
    }
    pp_lmgen_destroy(g);
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return rc ? 1 : 0;
}
