/* personaplex-bench batch: the LM tick of n conversations advancing together (pp_lmbatch_step)
 * against one: per-tick time and per-conversation cost at each batch size.
 *   personaplex-bench batch [--weights model.safetensors [--config config.json]]
 *                           [--layers L] [--dep-layers D] [--format bf16|nf2|int4|nf4]
 *                           [--batches 1,2,8] [--ticks N] [--kv f32|bf16|int8] [--threads N]
 *                           [--device cpu|cuda] [--context N] [--codec] [--extrapolate]
 *                           [--project 32,64]
 * Without --weights it writes a synthetic model with the PersonaPlex-7B shapes but only L
 * temporal and D depformer layers (default 1 and 1, so a CPU finishes in seconds) to a
 * temporary directory, quantized to --format, and removes it afterwards. The conversations
 * sample at the default settings and start at position 0, or --context frames on (pp_lmgen_skip: every query then
 * attends over that many keys, the whole ring at the model's context); the first two ticks (a
 * compute-free first call and a warm-up) are not timed. On a device backend it also prints the
 * nodes per tick and, where the backend counts device traffic (the CUDA emulation), the device
 * bytes per tick, the H100 estimate of bench.h (its products at --format's rates) and the
 * bytes against the tick's floor: the weights read once and each conversation's rings up to its
 * position. --codec adds the batch's Mimi encode and decode (the released codec's shapes) to the
 * tick: its nodes and traffic, and where timed its median time over --ticks frames (codec ms). --extrapolate counts synthetic models of 1 and 2 layers of each transformer and scales
 * the counts linearly to L and D, and the times too on a real GPU (the emulation's times are
 * its CPU's, not shown): the real model's tick from small ones. --project adds rows for batch
 * sizes too large to emulate, from the counts at the first and last of --batches (project()). */
#include "bench.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "model/admission.h"
#include "model/lm_catalog.h"
#include "model/lmgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BATCHES 8

typedef struct {
    const char *weights, *config, *device, *format, *kv;
    int layers, dep_layers, ticks, threads, context;
    int batches[MAX_BATCHES], n_batches;
    int project[MAX_BATCHES], n_project; /* --project: batch sizes projected from the counted ones */
    int codec;       /* --codec: the tick includes the batch's Mimi encode and decode */
    int extrapolate; /* --extrapolate: counted at 1 and 2 layers, scaled to --layers / --dep-layers */
} batch_opts;

static int parse_list(const char *v, int *out, int max) {
    int n = 0;
    for (const char *p = v; *p && n < max;) {
        int x = atoi(p);
        if (x < 1) return -1;
        out[n++] = x;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

static int parse(int argc, char **argv, batch_opts *o) {
    *o = (batch_opts){.device = "cpu", .format = "bf16", .kv = "f32", .layers = 1, .dep_layers = 1, .ticks = 3,
                      .batches = {1, 2, 8}, .n_batches = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--codec") == 0 || strcmp(a, "--extrapolate") == 0) { /* flags: no value */
            *(strcmp(a, "--codec") == 0 ? &o->codec : &o->extrapolate) = 1;
            continue;
        }
        if (!v) return -1;
        i++;
        if (strcmp(a, "--weights") == 0) o->weights = v;
        else if (strcmp(a, "--config") == 0) o->config = v;
        else if (strcmp(a, "--device") == 0) o->device = v;
        else if (strcmp(a, "--format") == 0) o->format = v;
        else if (strcmp(a, "--kv") == 0) o->kv = v;
        else if (strcmp(a, "--layers") == 0) o->layers = atoi(v);
        else if (strcmp(a, "--dep-layers") == 0) o->dep_layers = atoi(v);
        else if (strcmp(a, "--ticks") == 0) o->ticks = atoi(v);
        else if (strcmp(a, "--threads") == 0) o->threads = atoi(v);
        else if (strcmp(a, "--context") == 0)
            o->context = atoi(v);
        else if (strcmp(a, "--batches") == 0) {
            if ((o->n_batches = parse_list(v, o->batches, MAX_BATCHES)) < 1) return -1;
        } else if (strcmp(a, "--project") == 0) {
            if ((o->n_project = parse_list(v, o->project, MAX_BATCHES)) < 1) return -1;
        } else
            return -1;
    }
    return o->layers >= 1 && o->dep_layers >= 1 && o->ticks >= 1 && o->context >= 0 &&
                   !(o->extrapolate && o->weights) && (!o->n_project || o->n_batches >= 2)
               ? 0
               : -1;
}

/* ---- the synthetic model ---- */

typedef struct {
    st_writer *w;
    int writing; /* 0: declaring, 1: writing values */
    int rc;
    char *err;
    uint64_t rng;
} synth;

static float uniform(uint64_t *s) { /* xorshift64: uniform in [-1, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)(*s >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* Weights uniform with variance 1/cols (activations keep their scale through the layers),
 * norms 1, embeddings of unit variance. */
static int synth_tensor(void *ctx, const pp_lm_tensor *t) {
    synth *s = ctx;
    int64_t shape[3];
    int ndim = pp_lm_tensor_shape(t, shape);
    if (!s->writing) return s->rc = pp_st_writer_declare(s->w, t->name, ST_BF16, ndim, shape, s->err);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    int is_norm = ndim == 3, is_emb = pp_lm_part_is_embedding(t->part);
    float amp = is_emb ? 1.7320508f : 1.7320508f / sqrtf((float)shape[ndim - 1]);
    uint16_t buf[4096];
    for (int64_t o = 0; o < numel && !s->rc; o += 4096) {
        int n = numel - o < 4096 ? (int)(numel - o) : 4096;
        for (int k = 0; k < n; k++) buf[k] = pp_f32_to_bf16(is_norm ? 1.0f : amp * uniform(&s->rng));
        s->rc = pp_st_writer_write(s->w, buf, (size_t)n * sizeof *buf, s->err);
    }
    return s->rc;
}

/* A synthetic model of `layers` temporal and `dep_layers` depformer layers in --format. */
static int write_synthetic(const char *dir, const batch_opts *o, int layers, int dep_layers, char *wpath, char *cpath,
                           char *err) {
    pp_lm_config c;
    pp_lm_config_default(&c);
    c.num_layers = layers;
    c.dep_num_layers = dep_layers;
    int rc = pp_lm_config_validate(&c, "synthetic", err);
    char dense[600];
    snprintf(dense, sizeof dense, "%s/dense.safetensors", dir);
    snprintf(cpath, 600, "%s/config.json", dir);
    FILE *f = rc ? NULL : fopen(cpath, "w");
    if (!rc && !f) rc = pp_fail(err, PP_EIO, "cannot create %s", cpath);
    if (f) {
        fprintf(f, "{\"num_layers\": %d, \"depformer_num_layers\": %d}\n", layers, dep_layers);
        fclose(f);
    }
    synth s = {.err = err, .rng = 0x9e3779b97f4a7c15ull};
    if (!rc) rc = pp_st_writer_create(dense, &s.w, err);
    if (rc) return rc;
    pp_lm_catalog(&c, synth_tensor, &s);
    if (!s.rc) s.rc = pp_st_writer_begin(s.w, err);
    s.writing = 1;
    if (!s.rc) pp_lm_catalog(&c, synth_tensor, &s);
    if (s.rc) {
        pp_st_writer_abort(s.w);
        return s.rc;
    }
    if ((rc = pp_st_writer_finish(s.w, err))) return rc;
    if (strcmp(o->format, "bf16") == 0) {
        snprintf(wpath, 600, "%s", dense);
        return PP_OK;
    }
    pp_quantize_opts q = {0};
    if (strcmp(o->format, "nf2") == 0) q.fmt = PP_WF_NF2;
    else if (strcmp(o->format, "int4") == 0) q.fmt = PP_WF_INT4;
    else if (strcmp(o->format, "nf4") == 0) q.fmt = PP_WF_NF4;
    else return pp_fail(err, PP_EINVAL, "--format %s: bf16, nf2, int4 or nf4", o->format);
    snprintf(wpath, 600, "%s/%s.safetensors", dir, o->format);
    rc = pp_quantize_file(dense, wpath, &q, err);
    remove(dense);
    return rc;
}

/* ---- the measurement ---- */

/* Median tick time of n conversations (ms). */
static int time_ticks(const pp_lm *lm, int n, int ticks, pp_kv_format kv, int context, double *median, char *err) {
    double *ms = calloc((size_t)ticks, sizeof *ms);
    int rc =
        ms ? pp_admission_time_ticks(lm, n, ticks, kv, context, ms, err) : pp_fail(err, PP_ENOMEM, "out of memory");
    if (!rc) {
        bench_sort(ms, ticks);
        *median = ms[ticks / 2];
    }
    free(ms);
    return rc;
}

/* Median tick time of n conversations (ms) and, where the backend counts them, the device nodes
 * and traffic per tick (else 0): the timed run of `ticks` against a run of one, so the
 * conversations' start and warm-up cancel out. fmt prices the products of the estimate. */
static int measure_ticks(const pp_lm *lm, pp_backend *be, int fmt, int n, int ticks, pp_kv_format kv, int context,
                         double *median, double *nodes, bench_traffic *traffic, char *err) {
    *nodes = 0;
    memset(traffic, 0, sizeof *traffic);
    if (!be->ops->nodes_run || ticks < 2) return time_ticks(lm, n, ticks, kv, context, median, err);
    double ms;
    bench_traffic one = {0}, many = {0};
    bench_traffic_take(be, fmt, n, NULL);
    uint64_t n0 = be->ops->nodes_run(be);
    int rc = time_ticks(lm, n, ticks, kv, context, median, err);
    uint64_t n1 = be->ops->nodes_run(be);
    bench_traffic_take(be, fmt, n, &many);
    if (!rc) rc = time_ticks(lm, n, 1, kv, context, &ms, err);
    bench_traffic_take(be, fmt, n, &one);
    if (!rc) *nodes = (double)((n1 - n0) - (be->ops->nodes_run(be) - n1)) / (ticks - 1);
    bench_traffic_mix(traffic, &many, 1.0 / (ticks - 1), &one, -1.0 / (ticks - 1));
    return rc;
}

/* One batch size's counts. */
typedef struct tick_counts {
    double ms, nodes;
    double codec_ms; /* --codec, timed: the batch's codec frame, part of ms */
    double weight_bytes, kv_bytes; /* the floor's parts: the LM's weights, the rings a tick reads */
    bench_traffic t;
} tick_counts;

/* The matrices a tick reads whole; of an embedding table it reads only its conversations' rows. */
static int sum_weight_bytes(void *ctx, const pp_lm_tensor *t) {
    void **a = ctx;
    const pp_weight *w = pp_lm_weight(a[0], t);
    if (w && !pp_lm_part_is_embedding(t->part)) *(double *)a[1] += (double)pp_weight_bytes(w);
    return 0;
}

/* Opens the model and counts a tick of every batch size into out[i]. */
static int measure_model(const batch_opts *o, pp_backend *be, pp_wformat fmt, pp_kv_format kv, const char *wpath,
                         const char *cpath, tick_counts *out, char *err) {
    pp_lm *lm = NULL;
    int rc = pp_lm_open(be, wpath, cpath, &lm, err);
    double weights = 0, kv_ring = 0;
    if (!rc) {
        const pp_lm_config *c = pp_lm_get_config(lm);
        printf("batch: %d temporal layers dim %d, %d depformer layers dim %d, weights %s, KV %s, context %d, on %s\n",
               c->num_layers, c->dim, c->dep_num_layers, c->dep_dim, wpath, o->kv, o->context, be->ops->name);
        void *ctx[2] = {lm, &weights};
        pp_lm_catalog(c, sum_weight_bytes, ctx);
        /* A tick reads each conversation's rings up to its position: the share of the whole. */
        int seen = o->context + 1 < c->context ? o->context + 1 : c->context;
        kv_ring = (double)pp_lm_ctx_bytes(c, kv) * seen / c->context;
    }
    for (int i = 0; !rc && i < o->n_batches; i++) {
        tick_counts *tc = &out[i];
        rc = measure_ticks(lm, be, (int)fmt, o->batches[i], o->ticks, kv, o->context, &tc->ms, &tc->nodes, &tc->t, err);
        tc->weight_bytes = weights;
        tc->kv_bytes = kv_ring * o->batches[i];
    }
    pp_lm_close(lm);
    return rc;
}

/* out = a + ka·(b − a) + kc·(c − a), counts and traffic alike: X(L, D) from X(1, 1), X(2, 1) and
 * X(1, 2) with ka = L − 1, kc = D − 1. */
static void extrapolate(tick_counts *out, const tick_counts *a, const tick_counts *b, double ka, const tick_counts *c,
                        double kc) {
#define LIN(f) (a->f + ka * (b->f - a->f) + kc * (c->f - a->f))
    out->ms = LIN(ms);
    out->nodes = LIN(nodes);
    out->weight_bytes = LIN(weight_bytes);
    out->kv_bytes = LIN(kv_bytes);
#undef LIN
    bench_traffic ab;
    bench_traffic_mix(&ab, &a->t, 1.0 - ka - kc, &b->t, ka);
    bench_traffic_mix(&out->t, &ab, 1.0, &c->t, kc);
}

/* --project: the counts at n from those at the first and last counted sizes a < b. Each kernel's
 * bytes are linear in n through its counts at a and b (a kernel that ran only at b keeps b's: a
 * product whose kernel changed with n, whose weights it reads once); its estimate is priced at n
 * inputs; the nodes are b's (the tick's launches do not depend on n once the products take
 * their many-input kernels: 772 at 1, 8, 32 and 64 conversations on an H200). */
static void project(tick_counts *out, const tick_counts *a, int na, const tick_counts *b, int nb, int n, int fmt) {
    const double k = (double)(n - nb) / (nb - na);
    *out = *b;
    out->kv_bytes = b->kv_bytes / nb * n;
    out->t.read = out->t.written = out->t.s = 0;
    for (int i = 0; i < b->t.n; i++) {
        bench_kernel *r = &out->t.k[i];
        for (int j = 0; j < a->t.n; j++)
            if (strcmp(a->t.k[j].name, r->name) == 0) {
                r->read += k * (r->read - a->t.k[j].read);
                r->written += k * (r->written - a->t.k[j].written);
            }
        r->s = bench_kernel_s(r->name, fmt, n, r->read, r->written);
        out->t.read += r->read;
        out->t.written += r->written;
        out->t.s += r->s;
    }
}

/* The tick's codec, one batch size: added to the LM's counts when --codec, and its median time
 * of `timed` frames to the tick's (0: not timed). */
static int add_codec(pp_backend *be, int n, int timed, tick_counts *tc, double *codec_weights, char *err) {
    double nodes = 0, ms = 0;
    bench_traffic t = {0}, sum;
    int rc = bench_codec_count(be, n, timed, &nodes, &ms, &t, codec_weights, err);
    tc->nodes += nodes;
    tc->codec_ms = ms;
    tc->ms += ms;
    bench_traffic_mix(&sum, &tc->t, 1.0, &t, 1.0);
    tc->t = sum;
    return rc;
}

static int run(const batch_opts *o, const char *wpath, const char *cpath, const char *dir, char *err) {
    pp_kv_format kv;
    if (pp_kv_format_parse(o->kv, &kv)) return pp_fail(err, PP_EINVAL, "--kv %s: f32, bf16 or int8", o->kv);
    pp_wformat fmt = PP_WF_BF16;
    if (pp_wformat_parse(o->format, &fmt)) return pp_fail(err, PP_EINVAL, "--format %s: unknown", o->format);
    pp_backend *be = NULL;
    int counted = 0, nb = o->n_batches;
    tick_counts *tc = calloc((size_t)nb * 4, sizeof *tc); /* [model][batch]: as run, then (1,1) (2,1) (1,2) */
    int rc = tc ? pp_backend_create(o->device, o->threads, &be, err) : pp_fail(err, PP_ENOMEM, "out of memory");
    if (!rc) counted = bench_traffic_start(be); /* before the weights are allocated: only those after count */
    /* Times mean something on a real device; extrapolated on the emulation they are its own CPU's. */
    int timed = !o->extrapolate || !counted;
    if (!rc && o->extrapolate && !be->ops->nodes_run)
        rc = pp_fail(err, PP_EINVAL, "--extrapolate counts a device backend's work (--device cuda)");
    if (!rc && !o->extrapolate) rc = measure_model(o, be, fmt, kv, wpath, cpath, tc, err);
    static const int LAYERS[3][2] = {{1, 1}, {2, 1}, {1, 2}};
    for (int m = 0; !rc && o->extrapolate && m < 3; m++) {
        char w[600], c[600];
        rc = write_synthetic(dir, o, LAYERS[m][0], LAYERS[m][1], w, c, err);
        if (!rc) rc = measure_model(o, be, fmt, kv, w, c, tc + (size_t)(m + 1) * nb, err);
        remove(w);
        remove(c);
    }
    for (int i = 0; !rc && o->extrapolate && i < nb; i++)
        extrapolate(&tc[i], &tc[nb + i], &tc[2 * nb + i], o->layers - 1, &tc[3 * nb + i], o->dep_layers - 1);
    double codec_weights = 0;
    for (int i = 0; !rc && o->codec && i < nb; i++)
        rc = add_codec(be, o->batches[i], timed ? o->ticks : 0, &tc[i], &codec_weights, err);
    if (!rc) {
        if (o->extrapolate)
            printf("extrapolated to %d + %d layers: X(L, D) = X(1, 1) + (L - 1)·(X(2, 1) - X(1, 1)) + (D - 1)·(X(1, "
                   "2) - X(1, 1)), nodes, traffic%s per tick alike\n",
                   o->layers, o->dep_layers, timed ? " and times" : " (no times: the emulation's are its own)");
        if (o->codec)
            printf("the tick includes the batch's Mimi encode and decode (released shapes, f32 weights)%s\n",
                   timed ? "; tick ms: the LM's median plus the codec's (codec ms), timed apart" : "");
        if (counted && o->n_project)
            printf("projected rows: each kernel's bytes linear in n through its counts at %d and %d (one that ran only "
                   "at %d keeps them), priced at n inputs; nodes and weights as at %d\n",
                   o->batches[0], o->batches[nb - 1], o->batches[nb - 1], o->batches[nb - 1]);
        if (counted)
            printf("device MB per tick: counted by the backend per page touched; est. ms: the H100 estimate "
                   "(bench.h), warp instructions per byte (%s): GEMVs %.3f at 1 input to %.3f at 5-8, tensor-core "
                   "products %.2f (integer: %.2f at 16 inputs to %.2f at 64); floor MB: the LM's matrices (not its "
                   "embedding tables)%s and each conversation's rings up to its position, read once\n",
                   o->format, bench_gemv_instr_per_byte(fmt, 1), bench_gemv_instr_per_byte(fmt, 8),
                   bench_gemm_tc_instr_per_byte(fmt), bench_gemm_int_instr_per_byte(fmt, 16),
                   bench_gemm_int_instr_per_byte(fmt, 64), o->codec ? ", the codec's" : "");
        printf("%6s %12s %18s %14s%s %12s%s\n", "batch", timed ? "tick ms" : "", timed ? "ms/conversation" : "",
               timed ? "vs batch 1" : "", timed && o->codec ? "     codec ms" : "", be->ops->nodes_run ? "nodes/tick" : "",
               counted ? "  dev MB/tick  est. ms/tick  floor MB  vs floor" : "");
    }
    double one = 0;
    const int rows = nb + (counted ? o->n_project : 0);
    for (int i = 0; !rc && i < rows; i++) {
        const int n = i < nb ? o->batches[i] : o->project[i - nb];
        tick_counts projected;
        if (i >= nb) project(&projected, &tc[0], o->batches[0], &tc[nb - 1], o->batches[nb - 1], n, (int)fmt);
        const tick_counts *t = i < nb ? &tc[i] : &projected;
        double per = t->ms / n;
        if (n == 1) one = per;
        if (i >= nb)
            printf("%6d %12s %18s %14s", n, "", "(projected)", "");
        else if (!timed)
            printf("%6d %12s %18s %14s", o->batches[i], "", "", "");
        else if (one > 0)
            printf("%6d %12.1f %18.2f %13.2fx", o->batches[i], t->ms, per, one / per);
        else
            printf("%6d %12.1f %18.2f %14s", o->batches[i], t->ms, per, "-");
        if (timed && o->codec && i < nb) printf(" %12.1f", t->codec_ms);
        else if (timed && o->codec) printf(" %12s", "");
        if (t->nodes > 0) printf(" %12.0f", t->nodes);
        if (counted && t->nodes > 0) {
            double bytes = t->t.read + t->t.written, floor = t->weight_bytes + t->kv_bytes + codec_weights;
            printf(" %12.1f %13.3f %9.1f %8.2fx", bytes / 1e6, 1e3 * bench_estimate_s(&t->t, t->nodes), floor / 1e6,
                   bytes / floor);
        }
        printf("\n");
        fflush(stdout);
    }
    free(tc);
    if (be) pp_backend_destroy(be);
    return rc;
}

int bench_batch(int argc, char **argv) {
    batch_opts o;
    if (parse(argc, argv, &o)) {
        fprintf(bench_usage_stream(),
                "usage: personaplex-bench batch [--weights W [--config C]] [--layers L] [--dep-layers D] "
                "[--format bf16|nf2|int4|nf4] [--batches 1,2,8] [--ticks N] [--kv f32|bf16|int8] "
                "[--threads N] [--device cpu|cuda] [--context N] [--codec] [--extrapolate] [--project N,...]\n");
        return bench_usage_status();
    }
    pp_log_set_level(PP_LOG_WARN);
    char err[PP_ERR_LEN] = "", dir[] = "/tmp/pp-bench-batch-XXXXXX", wpath[600], cpath[600];
    int rc = PP_OK, made = 0;
    if (o.weights) {
        snprintf(wpath, sizeof wpath, "%s", o.weights);
        if (o.config) snprintf(cpath, sizeof cpath, "%s", o.config);
    } else if (!mkdtemp(dir)) {
        rc = pp_fail(err, PP_EIO, "cannot create a temporary directory");
    } else {
        made = 1;
        double t0 = bench_now();
        rc = o.extrapolate ? PP_OK : write_synthetic(dir, &o, o.layers, o.dep_layers, wpath, cpath, err);
        if (!rc) printf("batch: synthetic %s model written in %.1f s\n", o.format, bench_now() - t0);
    }
    if (!rc) rc = run(&o, wpath, o.weights && !o.config ? NULL : cpath, dir, err);
    if (made && !o.extrapolate) {
        remove(wpath);
        remove(cpath);
    }
    if (made) rmdir(dir);
    if (rc) fprintf(stderr, "personaplex-bench batch: %s\n", err);
    return rc ? 1 : 0;
}
