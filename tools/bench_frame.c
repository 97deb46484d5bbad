/* personaplex-bench frame: one whole 80 ms frame on a backend, from synthetic weights of the
 * real PersonaPlex-7B shapes generated in memory in each packed format (random codes and
 * scales: no file, no quantizer run). Per frame it times the temporal step (17 embeddings, the
 * transformer, the text head and its sampling), the depformer (8 steps by default, each sampled), Mimi
 * encode and decode (bench_frame_mimi.c), and the whole frame; it prints the median and p99 of
 * each, the LM weight bytes read per frame, the GB/s achieved against the backend's measured
 * copy bandwidth, and device memory. Contexts are KV-cache fills: the frame at context C
 * attends over min(C, 2999) past frames. Each format also gives the time per prompt frame, the
 * prompt phases running 32 frames to a pass as pp_session_prefill runs them: the wait before a
 * conversation whose voice and prompt the prompt cache does not hold (on a device, with a
 * pass's nodes).
 *   personaplex-bench frame [--device auto|cpu|cuda] [--threads N] [--layers N] [--dep-layers N]
 *       [--dep-steps N] [--formats nf2,int4,nf4,bf16,f16,f32] [--frames N] [--contexts 100,3000] [--kv f32|bf16|int8]
 *       [--small] [--no-mimi] [--project GBPS,CORES] [--kernels] [--extrapolate] [--busy N]
 * On a device backend each row also gives the last frame's nodes per stage and, where the
 * backend counts device traffic (the CUDA emulation), its device bytes read and written per
 * stage, the LM's device bytes over its floor (the weights and KV it must read) and the H100
 * estimate of bench.h; --kernels adds the frame's bytes and estimate per kernel name.
 * --extrapolate gives those figures for --layers and --dep-layers (default 32 and 6) from two
 * counted models of 1 and 2 layers each (tens of seconds per format at real widths, where all
 * 32 layers would take minutes): per stage, X(L) = X(1) + (L - 1)·(X(2) - X(1)) for nodes,
 * bytes, estimate and floor, L the temporal layers for the temporal step and the depformer's
 * for the depformer (every layer does the same work; a direct 3 + 3-layer count matches the
 * extrapolation exactly); the codec's figures are the 1-layer run's. No times then.
 * With --project (CPU) each format's contexts run again on one thread, and the tool ends with
 * the frame time projected for a machine of GBPS copy bandwidth and CORES cores like these:
 *   T = max(t1 / CORES, bytes / GBPS)
 * t1 the one-thread LM frame time (a core's throughput, its share of memory stalls included),
 * bytes what the frame reads (weights and KV); the same formula for this machine sits beside
 * the measured time, so its error shows.
 * --busy N runs N threads that only spin beside the frames: the CPU shared with other work, where
 * a frame should slow down by about its share of the cores, not stall on threads that wait for
 * a time slice. */
#include "bench.h"
#include "bench_frame.h"

#include "base/err.h"
#include "base/log.h"
#include "base/pool.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "model/transformer.h"
#include "personaplex.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEP_Q 16
#define CAPACITY 3000 /* the temporal KV ring: PersonaPlex's context */

/* A frame's stages, and the whole frame. */
enum { T_TEMPORAL, T_DEP, T_ENC, T_DEC, T_FRAME, T_COUNT };

typedef struct dims {
    int dim, heads, hidden, layers, dep_dim, dep_heads, dep_hidden, dep_layers, card, text_card;
} dims;

/* PersonaPlex-7B (docs/model.md); --small divides the widths by 8 for a quick CPU run. */
static const dims full_dims = {4096, 32, 11264, 32, 1024, 16, 2816, 6, 2048, 32000};
static const dims small_dims = {512, 4, 1408, 32, 128, 2, 384, 6, 2048, 4000}; /* widths: multiples of 128 */

/* ---- random data ---- */

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void bench_fill(uint64_t *state, float *v, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) v[i] = ((float)(next(state) >> 40) * (2.0f / 16777216.0f) - 1.0f) * scale;
}

float *bench_rand_buffer(pp_backend *be, uint64_t *state, size_t n, float scale) {
    float *d = be->ops->alloc(be, n * sizeof *d), *h = scale != 0 ? malloc(n * sizeof *h) : NULL;
    if (d && h) {
        bench_fill(state, h, n, scale);
        be->ops->upload(be, d, h, n * sizeof *h);
    }
    free(h);
    return d;
}

/* ---- synthetic packed weights ---- */

typedef struct synth {
    pp_backend *be;
    uint64_t rng;
    int keep_host;  /* CPU backend: its weights ARE the host buffers */
    void **held;    /* host buffers kept until the end */
    size_t n_held, cap_held;
    float nested_map[256];
    uint64_t lm_bytes[2]; /* packed bytes of the weights a frame multiplies by: [T_TEMPORAL], [T_DEP] */
} synth;

static void *host_buffer(synth *s, size_t bytes) {
    if (s->n_held == s->cap_held) {
        size_t cap = s->cap_held ? 2 * s->cap_held : 256;
        void **p = realloc(s->held, cap * sizeof *p);
        if (!p) return NULL;
        s->held = p;
        s->cap_held = cap;
    }
    void *b = malloc(bytes ? bytes : 1);
    if (b) s->held[s->n_held++] = b;
    return b;
}

/* Random 16-bit words with the exponent field pinned (|value| in [2^-7, 2^-6)), so dense
 * weights are finite and of a realistic size; or random bytes (codes). */
static void fill_bits(synth *s, void *dst, size_t bytes, uint64_t keep, uint64_t set) {
    uint8_t *d = dst;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t r = (next(&s->rng) & keep) | set;
        memcpy(d + i, &r, 8);
    }
    for (; i < bytes; i++) d[i] = (uint8_t)next(&s->rng);
}

static int synth_weight(synth *s, pp_wformat fmt, int64_t rows, int64_t cols, pp_weight *dev, char *err) {
    size_t n = (size_t)(rows * cols);
    pp_weight w = {.fmt = fmt, .rows = rows, .cols = cols, .name = "synthetic"};
    size_t first = s->n_held;
    int gs = fmt == PP_WF_NF2 ? 128 : 64;
    size_t groups = n / (size_t)gs;
    if (pp_wformat_block_bytes(fmt))
        return pp_fail(err, PP_EUNSUPPORTED, "bench frame: no synthetic %s model; time a GGUF file with `bench lm`",
                       pp_wformat_name(fmt));
    if (fmt >= PP_WF_NF2 && cols % gs)
        return pp_fail(err, PP_EINVAL, "bench frame: %lld columns are not a multiple of the %s group %d",
                       (long long)cols, pp_wformat_name(fmt), gs);
    void *data = NULL, *scales = NULL;
    float *nested = NULL;
    switch (fmt) {
    case PP_WF_F32:
        if ((data = host_buffer(s, n * 4))) bench_fill(&s->rng, data, n, 0.01f);
        break;
    case PP_WF_F16:
        if ((data = host_buffer(s, n * 2))) fill_bits(s, data, n * 2, 0x83ff83ff83ff83ffull, 0x2000200020002000ull);
        break;
    case PP_WF_BF16:
        if ((data = host_buffer(s, n * 2))) fill_bits(s, data, n * 2, 0x807f807f807f807full, 0x3c003c003c003c00ull);
        break;
    default:
        data = host_buffer(s, fmt == PP_WF_NF2 ? n / 4 : n / 2);
        scales = host_buffer(s, fmt == PP_WF_NF4 ? groups : groups * 2);
        if (fmt == PP_WF_NF4) nested = host_buffer(s, (groups / 256 + 1) * sizeof(float));
        if (!data || !scales || (fmt == PP_WF_NF4 && !nested)) break;
        fill_bits(s, data, fmt == PP_WF_NF2 ? n / 4 : n / 2, ~0ull, 0);
        w.group = gs;
        w.np2 = fmt == PP_WF_NF2 ? gs : 0;
        if (fmt == PP_WF_NF4) { /* nested absmax, as bitsandbytes saves it */
            fill_bits(s, scales, groups, ~0ull, 0);
            for (size_t g = 0; g <= groups / 256; g++) nested[g] = 0.05f;
            w.quant_map = pp_quant_nf4_table;
            w.nested_absmax = nested;
            w.nested_map = s->nested_map;
            w.nested_block = 256;
            w.nested_offset = 0.02f;
        } else {
            uint16_t *sc = scales;
            for (size_t g = 0; g < groups; g++)
                sc[g] = pp_f32_to_f16(0.01f + 0.02f * (float)(next(&s->rng) >> 40) / 16777216.0f);
        }
    }
    if (!data) return pp_fail(err, PP_ENOMEM, "bench frame: out of host memory for a %lld x %lld %s weight",
                              (long long)rows, (long long)cols, pp_wformat_name(fmt));
    w.data = data;
    w.scales = scales;
    int rc = s->be->ops->weight_upload(s->be, &w, dev, err);
    if (!s->keep_host) { /* uploaded: the host copy is not needed any more */
        for (size_t i = first; i < s->n_held; i++) free(s->held[i]);
        s->n_held = first;
    }
    return rc;
}

static void synth_free(synth *s) {
    for (size_t i = 0; i < s->n_held; i++) free(s->held[i]);
    free(s->held);
}

/* ---- the LM ---- */

typedef struct lm {
    pp_backend *be;
    dims d;
    pp_tf temporal, depformer;
    pp_tf_cache tc, dc;
    const pp_kv_ring **tables; /* backend [2]: the temporal and the depformer ring tables (one row) */
    pp_tf_scratch tsc, dsc;
    pp_weight emb[DEP_Q], text_emb, text_linear, dep_in[DEP_Q], linears[DEP_Q], dep_emb[DEP_Q - 1], dep_text_emb;
    const pp_weight *inputs[DEP_Q + 1]; /* the input's tables as the model sums them, text last */
    int input_rows[DEP_Q + 1];          /* and their ids' rows: ids [17] holds the audio streams, then text */
    float *out_norm, *x, *h, *dx, *logits;
    int64_t *pos, *dep_pos;
    int32_t *ids, *tokens; /* ids: the input column; tokens: the frame's [1+DEP_Q] */
    pp_sample_param *params;               /* [2]: text, audio */
    int dep_steps;                         /* depformer steps run per frame */
} lm;

/* Counts in *lm_bytes the weights that `steps_run` steps read; steps marked latency-bound as the
 * model marks the depformer's (pp_tf_link). */
static int build_tf(synth *s, pp_wformat fmt, const pp_tf_shape *shape, int steps_run, int latency_bound, pp_tf *tf,
                    uint64_t *lm_bytes, char *err) {
    memset(tf, 0, sizeof *tf);
    tf->shape = *shape;
    tf->layers = calloc((size_t)shape->num_layers, sizeof *tf->layers);
    if (!tf->layers) return pp_fail(err, PP_ENOMEM, "bench frame: out of memory");
    int64_t d = shape->dim, hid = shape->hidden, ns = shape->n_steps;
    for (int l = 0; l < shape->num_layers; l++) {
        pp_tf_layer *L = &tf->layers[l];
        L->norm1 = bench_rand_buffer(s->be, &s->rng, (size_t)d, 1.0f);
        L->norm2 = bench_rand_buffer(s->be, &s->rng, (size_t)d, 1.0f);
        L->ffn_in = calloc((size_t)ns, sizeof *L->ffn_in);
        L->ffn_out = calloc((size_t)ns, sizeof *L->ffn_out);
        L->steps = calloc((size_t)ns, sizeof *L->steps);
        if (!L->norm1 || !L->norm2 || !L->ffn_in || !L->ffn_out || !L->steps)
            return pp_fail(err, PP_ENOMEM, "bench frame: out of memory");
        int rc = synth_weight(s, fmt, ns * 3 * d, d, &L->in_proj, err);
        if (!rc) rc = synth_weight(s, fmt, ns * d, d, &L->out_proj, err);
        for (int st = 0; st < ns && !rc; st++) {
            rc = synth_weight(s, fmt, 2 * hid, d, &L->ffn_in[st], err);
            if (!rc) rc = synth_weight(s, fmt, d, hid, &L->ffn_out[st], err);
            if (st < steps_run) *lm_bytes += pp_weight_bytes(&L->ffn_in[st]) + pp_weight_bytes(&L->ffn_out[st]);
        }
        if (rc) return rc;
        *lm_bytes += (pp_weight_bytes(&L->in_proj) + pp_weight_bytes(&L->out_proj)) / (size_t)ns * (size_t)steps_run;
    }
    pp_tf_link(tf, latency_bound);
    return PP_OK;
}

/* The two recorded parts of a frame (run_recorded keys; forgotten with the model). */
#define KEY_TEMPORAL 0x62656e6368746d70ull /* "benchtmp" */
#define KEY_DEPFORMER 0x62656e6368646570ull

static void lm_free(lm *m) {
    pp_backend *be = m->be;
    pp_backend_forget_recorded(be, KEY_TEMPORAL);
    pp_backend_forget_recorded(be, KEY_DEPFORMER);
    pp_tf_cache_free(be, &m->tc);
    pp_tf_cache_free(be, &m->dc);
    pp_tf_scratch_free(be, &m->tsc);
    pp_tf_scratch_free(be, &m->dsc);
    pp_tf_free(be, &m->temporal);
    pp_tf_free(be, &m->depformer);
    pp_weight *ws[] = {&m->text_emb, &m->text_linear, &m->dep_text_emb};
    for (int i = 0; i < 3; i++)
        if (ws[i]->data) be->ops->weight_release(be, ws[i]);
    for (int k = 0; k < DEP_Q; k++) {
        pp_weight *per[] = {&m->emb[k], &m->dep_in[k], &m->linears[k], k < DEP_Q - 1 ? &m->dep_emb[k] : NULL};
        for (int i = 0; i < 4; i++)
            if (per[i] && per[i]->data) be->ops->weight_release(be, per[i]);
    }
    void *bufs[] = {m->out_norm, m->x,   m->h,      m->dx,     m->logits, m->pos,
                    m->dep_pos,  m->ids, m->tokens, m->params, m->tables};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->ops->release(be, bufs[i]);
    memset(m, 0, sizeof *m);
}

static int lm_build(synth *s, pp_wformat fmt, pp_kv_format kv, const dims *d, int dep_steps, lm *m, char *err) {
    pp_backend *be = s->be;
    memset(m, 0, sizeof *m);
    m->be = be;
    m->d = *d;
    m->dep_steps = dep_steps;
    pp_tf_shape ts = {.prefix = "transformer",
                      .dim = d->dim,
                      .num_heads = d->heads,
                      .hidden = d->hidden,
                      .num_layers = d->layers,
                      .n_steps = 1,
                      .rope = 1,
                      .max_period = 10000.0f,
                      .eps = 1e-8f};
    pp_tf_shape ds = {.prefix = "depformer",
                      .dim = d->dep_dim,
                      .num_heads = d->dep_heads,
                      .hidden = d->dep_hidden,
                      .num_layers = d->dep_layers,
                      .n_steps = DEP_Q,
                      .eps = 1e-8f};
    int rc = build_tf(s, fmt, &ts, 1, 0, &m->temporal, &s->lm_bytes[T_TEMPORAL], err);
    if (!rc) rc = build_tf(s, fmt, &ds, dep_steps, 1, &m->depformer, &s->lm_bytes[T_DEP], err);
    if (!rc) rc = synth_weight(s, fmt, d->text_card + 1, d->dim, &m->text_emb, err);
    if (!rc) rc = synth_weight(s, fmt, d->text_card, d->dim, &m->text_linear, err);
    if (!rc) rc = synth_weight(s, fmt, d->text_card + 1, d->dep_dim, &m->dep_text_emb, err);
    for (int k = 0; k < DEP_Q && !rc; k++) {
        rc = synth_weight(s, fmt, d->card + 1, d->dim, &m->emb[k], err);
        if (!rc) rc = synth_weight(s, fmt, d->dep_dim, d->dim, &m->dep_in[k], err);
        if (!rc) rc = synth_weight(s, fmt, d->card, d->dep_dim, &m->linears[k], err);
        if (!rc && k < DEP_Q - 1) rc = synth_weight(s, fmt, d->card + 1, d->dep_dim, &m->dep_emb[k], err);
        if (!rc && k < dep_steps)
            s->lm_bytes[T_DEP] += pp_weight_bytes(&m->dep_in[k]) + pp_weight_bytes(&m->linears[k]);
        m->dep_in[k].latency_bound = m->linears[k].latency_bound = 1; /* as the model marks them */
        m->inputs[k] = &m->emb[k];
        m->input_rows[k] = k;
    }
    if (rc) return rc;
    m->inputs[DEP_Q] = &m->text_emb;
    m->input_rows[DEP_Q] = DEP_Q;
    s->lm_bytes[T_TEMPORAL] += pp_weight_bytes(&m->text_linear);
    rc = pp_tf_cache_init(be, &m->temporal, CAPACITY, CAPACITY - 1, kv, &m->tc, err);
    if (!rc) rc = pp_tf_cache_init(be, &m->depformer, DEP_Q, DEP_Q - 1, PP_KV_F32, &m->dc, err);
    if (!rc) rc = pp_tf_scratch_init(be, &m->temporal, 1, &m->tsc, err);
    if (!rc) rc = pp_tf_scratch_init(be, &m->depformer, 1, &m->dsc, err);
    if (rc) return rc;
    int nlog = d->text_card > d->card ? d->text_card : d->card;
    m->out_norm = bench_rand_buffer(be, &s->rng, (size_t)d->dim, 1.0f);
    m->x = bench_rand_buffer(be, &s->rng, (size_t)d->dim, 0);
    m->h = bench_rand_buffer(be, &s->rng, (size_t)d->dim, 0);
    m->dx = bench_rand_buffer(be, &s->rng, (size_t)d->dep_dim, 0);
    m->logits = bench_rand_buffer(be, &s->rng, (size_t)nlog, 0);
    m->pos = be->ops->alloc(be, sizeof(int64_t));
    m->dep_pos = be->ops->alloc(be, DEP_Q * sizeof(int64_t));
    m->ids = be->ops->alloc(be, (DEP_Q + 1) * sizeof(int32_t));
    m->tokens = be->ops->alloc(be, (DEP_Q + 1) * sizeof(int32_t));
    m->params = be->ops->alloc(be, 2 * sizeof(pp_sample_param));
    m->tables = be->ops->alloc(be, 2 * sizeof *m->tables);
    if (!m->out_norm || !m->x || !m->h || !m->dx || !m->logits || !m->pos || !m->dep_pos || !m->ids || !m->tokens ||
        !m->params || !m->tables)
        return pp_fail(err, PP_ENOMEM, "bench frame: out of backend memory for the LM state");
    const pp_kv_ring *tables[2] = {m->tc.table, m->dc.table};
    be->ops->upload(be, m->tables, tables, sizeof tables);
    int64_t steps[DEP_Q];
    for (int k = 0; k < DEP_Q; k++) steps[k] = k;
    be->ops->upload(be, m->dep_pos, steps, sizeof steps);
    return PP_OK;
}

/* The temporal step: embeddings, the transformer, the text head and its token. */
static void issue_temporal(void *arg) {
    lm *m = arg;
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    op->embed_sum(be, m->inputs, m->input_rows, DEP_Q + 1, m->ids, 1, m->x);
    pp_tf_cache *tc = &m->tc;
    pp_tf_forward(be, &m->temporal, &m->tsc, &tc, m->tables, 1, m->x, m->pos, 0, NULL);
    op->norm_matmul(be, m->x, m->out_norm, 1, m->d.dim, 1e-8f, m->h, &m->text_linear, m->logits); /* as lm.c */
    op->sample(be, m->logits, 1, m->d.text_card, m->params, 0, NULL, m->tokens);
}

/* The depformer's steps, each token drawn and fed back in backend memory. */
static void issue_depformer(void *arg) {
    lm *m = arg;
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    pp_tf_cache *dc = &m->dc;
    for (int k = 0; k < m->dep_steps; k++) {
        op->matmul(be, &m->dep_in[k], m->h, 1, m->dx);
        op->embed(be, k == 0 ? &m->dep_text_emb : &m->dep_emb[k - 1], m->tokens + k, 1, m->dx, 1);
        pp_tf_forward(be, &m->depformer, &m->dsc, &dc, m->tables + 1, 1, m->dx, m->dep_pos + k, k, NULL);
        op->matmul(be, &m->linears[k], m->dx, 1, m->logits);
        op->sample(be, m->logits, 1, m->d.card, m->params + 1, k + 1, NULL, m->tokens + k + 1);
    }
}

static uint64_t nodes_now(pp_backend *be) { return be->ops->nodes_run ? be->ops->nodes_run(be) : 0; }

/* What a frame's stages cost: seconds, device nodes and, where the backend counts it, device
 * traffic. */
typedef struct frame_cost {
    double s[T_COUNT], nodes[T_COUNT];
    bench_traffic traffic[T_COUNT];
} frame_cost;

/* Splits a frame into stages: each mark ends one, which gets what ran since the previous mark. */
typedef struct meter {
    pp_backend *be;
    int fmt; /* the LM's weight format, for the estimate (the codec's is f32: bench_frame_mimi.c) */
    double t;
    uint64_t nodes;
} meter;

static void meter_start(meter *mt) {
    bench_traffic_take(mt->be, mt->fmt, 1, NULL);
    mt->nodes = nodes_now(mt->be);
    mt->t = bench_now();
}

static void meter_mark(meter *mt, frame_cost *fc, int stage) {
    fc->s[stage] = bench_now() - mt->t;
    uint64_t n = nodes_now(mt->be);
    fc->nodes[stage] = (double)(n - mt->nodes);
    memset(&fc->traffic[stage], 0, sizeof fc->traffic[stage]);
    bench_traffic_take(mt->be, stage == T_ENC || stage == T_DEC ? PP_WF_F32 : mt->fmt, 1, &fc->traffic[stage]);
    mt->nodes = n;
    mt->t = bench_now(); /* collecting the traffic is no stage's time */
}

/* The whole frame: the sum of its stages. */
static void sum_stages(frame_cost *fc) {
    fc->s[T_FRAME] = fc->nodes[T_FRAME] = 0;
    memset(&fc->traffic[T_FRAME], 0, sizeof fc->traffic[T_FRAME]);
    for (int i = 0; i < T_FRAME; i++) {
        fc->s[T_FRAME] += fc->s[i];
        fc->nodes[T_FRAME] += fc->nodes[i];
        bench_traffic_mix(&fc->traffic[T_FRAME], &fc->traffic[T_FRAME], 1, &fc->traffic[i], 1);
    }
}

/* One frame of the LM as src/model/lm.c runs it: inputs uploaded first, each part run as a
 * recorded frame (a CUDA graph once recorded, as the server runs it), every token drawn and fed
 * back in backend memory, the frame's tokens downloaded once at the end; marks the temporal
 * part and the depformer part (a sync between them splits the two). */
static int lm_frame(lm *m, int64_t pos, int32_t prev_text, meter *mt, frame_cost *fc, char *err) {
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    int32_t ids[DEP_Q + 1], tokens[DEP_Q + 1];
    for (int k = 0; k < DEP_Q; k++) ids[k] = (int32_t)((pos * 31 + k * 7) % m->d.card);
    ids[DEP_Q] = prev_text;
    pp_sample_param p[2] = {{.seed = 1234, .frame = pos, .temp = 0.7f, .top_k = 25},
                            {.seed = 1234, .frame = pos, .temp = 0.7f, .top_k = 250}};
    op->upload(be, m->ids, ids, sizeof ids);
    op->upload(be, m->params, p, sizeof p);
    op->upload(be, m->pos, &pos, sizeof pos);
    int rc = pp_backend_run_recorded(be, KEY_TEMPORAL, issue_temporal, m, err);
    op->sync(be);
    meter_mark(mt, fc, T_TEMPORAL);
    if (!rc) rc = pp_backend_run_recorded(be, KEY_DEPFORMER, issue_depformer, m, err);
    op->download(be, tokens, m->tokens, sizeof tokens);
    meter_mark(mt, fc, T_DEP);
    return rc;
}

/* ---- measurement ---- */

/* Median and p99 (nearest rank) of n samples, in ms; sorts v. */
static void stats(double *v, int n, double *p50, double *p99) {
    bench_sort(v, n);
    *p50 = 1e3 * v[n / 2];
    *p99 = 1e3 * bench_nearest_rank(v, n, 0.99);
}

typedef struct run_opts {
    int frames, mimi, threads, dep_steps;
    int counted;     /* the backend counts device traffic */
    int kernels;     /* --kernels */
    int extrapolate; /* --extrapolate: rows are counted, not printed (they time 1- and 2-layer models) */
    double copy_bw;
} run_opts;

/* The bytes each LM stage must read per frame at a context, its floor: the weights and, for
 * the temporal step, the keys and values it attends over (the depformer's 16-slot cache is
 * noise beside them). */
static void lm_floor(const lm *m, const uint64_t weight_bytes[2], int context, pp_kv_format kv, double floor[2]) {
    int keys = context + 1 < CAPACITY - 1 ? context + 1 : CAPACITY - 1;
    floor[T_TEMPORAL] = (double)weight_bytes[T_TEMPORAL] + (double)pp_tf_cache_bytes(&m->temporal.shape, keys, kv);
    floor[T_DEP] = (double)weight_bytes[T_DEP];
}

/* The counted lines of a row: nodes per stage and, where traffic is counted, bytes, the LM's
 * bytes over its floor and the estimate. */
static void print_costs(const frame_cost *fc, const double floor[2], pp_wformat fmt, const run_opts *o) {
    printf("      nodes per frame: temporal %.0f, depformer %.0f, mimi encode %.0f, decode %.0f, whole %.0f\n",
           fc->nodes[T_TEMPORAL], fc->nodes[T_DEP], fc->nodes[T_ENC], fc->nodes[T_DEC], fc->nodes[T_FRAME]);
    if (!o->counted) return;
    const bench_traffic *t = fc->traffic;
    printf("      device MB per frame (read + written): temporal %.1f + %.1f, depformer %.1f + %.1f, mimi encode "
           "%.1f + %.1f, decode %.1f + %.1f, whole %.1f + %.1f\n",
           t[T_TEMPORAL].read / 1e6, t[T_TEMPORAL].written / 1e6, t[T_DEP].read / 1e6, t[T_DEP].written / 1e6,
           t[T_ENC].read / 1e6, t[T_ENC].written / 1e6, t[T_DEC].read / 1e6, t[T_DEC].written / 1e6,
           t[T_FRAME].read / 1e6, t[T_FRAME].written / 1e6);
    double est[T_COUNT];
    for (int i = 0; i < T_COUNT; i++) est[i] = 1e3 * bench_estimate_s(&t[i], fc->nodes[i]);
    double lm = t[T_TEMPORAL].read + t[T_TEMPORAL].written + t[T_DEP].read + t[T_DEP].written;
    double need = floor[T_TEMPORAL] + floor[T_DEP];
    printf("      LM device bytes / (weights + KV) %.1f / %.1f MB = %.2f; H100 estimate (LM GEMV %.3f warp instr/B) "
           "ms: temporal %.3f, depformer %.3f, LM %.3f, mimi encode %.3f, decode %.3f, whole %.3f\n",
           lm / 1e6, need / 1e6, lm / need, bench_gemv_instr_per_byte(fmt, 1), est[T_TEMPORAL], est[T_DEP],
           est[T_TEMPORAL] + est[T_DEP], est[T_ENC], est[T_DEC], est[T_FRAME]);
    if (o->kernels) bench_traffic_print(&t[T_FRAME]);
}

/* Times `frames` frames at a context and prints the table's row (unless extrapolating); the last
 * frame's costs go to *last. Returns the LM's median seconds per frame (temporal step +
 * depformer). */
static double run_context(lm *m, bench_mimi *mimi, int context, const run_opts *o, const double floor[2],
                          uint64_t mimi_bytes, pp_wformat fmt, frame_cost *last) {
    double *t[T_COUNT], *all = calloc((size_t)o->frames * T_COUNT, sizeof(double));
    if (!all) return 0;
    for (int i = 0; i < T_COUNT; i++) t[i] = all + (size_t)i * o->frames;
    int32_t codes[8] = {0};
    meter mt = {.be = m->be, .fmt = (int)fmt};
    char err[PP_ERR_LEN];
    for (int f = -3; f < o->frames; f++) { /* 3 warm-up frames: plain, recorded, replayed */
        meter_start(&mt);
        if (mimi) bench_mimi_encode(mimi, codes);
        meter_mark(&mt, last, T_ENC);
        if (lm_frame(m, context + (f < 0 ? 0 : f), 3, &mt, last, err)) {
            fprintf(stderr, "personaplex-bench: %s\n", err);
            free(all);
            return 0;
        }
        if (mimi) {
            bench_mimi_decode(mimi, codes);
            m->be->ops->sync(m->be);
        }
        meter_mark(&mt, last, T_DEC);
        sum_stages(last);
        for (int i = 0; f >= 0 && i < T_COUNT; i++) t[i][f] = last->s[i];
    }
    double p50[T_COUNT] = {0}, p99[T_COUNT] = {0};
    for (int i = 0; i < T_COUNT; i++) stats(t[i], o->frames, &p50[i], &p99[i]);
    double lm_bytes = floor[T_TEMPORAL] + floor[T_DEP], lm_s = (p50[T_TEMPORAL] + p50[T_DEP]) / 1e3;
    double gbps = lm_s > 0 ? lm_bytes / lm_s / 1e9 : 0;
    free(all);
    if (o->extrapolate) return lm_s;
    printf("%-5s %5d %3d | %7.2f %7.2f | %7.2f %7.2f | %7.2f %7.2f | %7.2f %7.2f | %7.2f %7.2f | %8.1f %6.1f %7.1f "
           "%5.0f%%\n",
           pp_wformat_name(fmt), context, o->threads, p50[T_TEMPORAL], p99[T_TEMPORAL], p50[T_DEP], p99[T_DEP],
           p50[T_ENC], p99[T_ENC], p50[T_DEC], p99[T_DEC], p50[T_FRAME], p99[T_FRAME], lm_bytes / 1e6,
           (double)mimi_bytes / 1e6, gbps, o->copy_bw > 0 ? 100.0 * gbps / o->copy_bw : 0);
    if (m->be->ops->nodes_run) print_costs(last, floor, fmt, o);
    return lm_s;
}

/* The prompt phases as pp_session_prefill runs them (docs/model.md §6): PP_SESSION_PREFILL_ROWS
 * frames of one conversation through the temporal transformer in one pass, at positions 0 on (no
 * heads, no depformer, nothing sampled). *ms: the median ms per prompt frame of `runs` passes (at
 * most PROMPT_RUNS); *nodes: the device nodes of one pass (0 on the CPU). */
#define PROMPT_RUNS 3
static int time_prompt(lm *m, int runs, double *ms, uint64_t *nodes, char *err) {
    enum { N = PP_SESSION_PREFILL_ROWS };
    pp_backend *be = m->be;
    pp_tf_scratch sc;
    int rc = pp_tf_scratch_init(be, &m->temporal, N, &sc, err);
    if (rc) return rc;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    float *x = bench_rand_buffer(be, &rng, (size_t)N * (size_t)m->d.dim, 1.0f);
    int64_t *pos = be->ops->alloc(be, N * sizeof(int64_t));
    if (x && pos) {
        double per_frame[PROMPT_RUNS];
        for (int r = 0; r < runs; r++) {
            int64_t p[N];
            for (int i = 0; i < N; i++) p[i] = r * N + i;
            be->ops->upload(be, pos, p, sizeof p);
            uint64_t n0 = nodes_now(be);
            double t0 = bench_now();
            pp_tf_prefill(be, &m->temporal, &sc, &m->tc, r * N, N, x, pos);
            be->ops->sync(be);
            per_frame[r] = (bench_now() - t0) / N;
            *nodes = nodes_now(be) - n0;
        }
        double p99;
        stats(per_frame, runs, ms, &p99);
    } else {
        rc = pp_fail(err, PP_ENOMEM, "bench frame: out of backend memory for %d prompt rows", N);
    }
    if (x) be->ops->release(be, x);
    if (pos) be->ops->release(be, pos);
    pp_tf_scratch_free(be, &sc);
    return rc;
}

static void print_memory(pp_backend *be, const lm *m, pp_kv_format kv) {
    size_t bytes = pp_tf_cache_bytes(&m->temporal.shape, CAPACITY, kv) +
                   pp_tf_cache_bytes(&m->depformer.shape, DEP_Q, PP_KV_F32);
    printf("      KV caches (temporal %s): %.1f MiB\n", pp_kv_format_name(kv), (double)bytes / (1 << 20));
    if (!be->ops->mem_info) return;
    size_t w, b, ws, fr, tot, in_place;
    be->ops->mem_info(be, &w, &b, &ws, &fr, &tot, &in_place);
    printf("      device memory: weights %.1f MiB (and %.1f MiB read in place from host memory), buffers %.1f MiB "
           "(KV included), workspace %.1f MiB; %.1f of %.1f GiB free\n",
           (double)w / (1 << 20), (double)in_place / (1 << 20), (double)b / (1 << 20), (double)ws / (1 << 20),
           (double)fr / (1 << 30), (double)tot / (1 << 30));
}

/* --busy: threads that spin until stopped. */
typedef struct busy {
    pthread_t threads[64];
    int n;
    atomic_int stop;
} busy;

static void *spin_until_stopped(void *arg) {
    busy *b = arg;
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
    }
    return NULL;
}

static void busy_start(busy *b, int n) {
    for (b->n = 0; b->n < n && pthread_create(&b->threads[b->n], NULL, spin_until_stopped, b) == 0; b->n++) {
    }
}

static void busy_stop(busy *b) {
    atomic_store(&b->stop, 1);
    for (int i = 0; i < b->n; i++) pthread_join(b->threads[i], NULL);
}

static int usage(void) {
    fprintf(bench_usage_stream(),
            "usage: personaplex-bench frame [--device auto|cpu|cuda] [--threads N] [--layers N] "
            "[--dep-layers N] [--dep-steps N] [--formats nf2,int4,nf4,bf16,f16,f32] [--frames N] [--contexts 100,3000] "
            "[--kv f32|bf16|int8] [--small] [--no-mimi] [--project GBPS,CORES] [--kernels] [--extrapolate] "
            "[--busy N]\n");
    return bench_usage_status();
}

static int parse_format(const char *s, size_t len, pp_wformat *out) {
    for (int f = 0; f < PP_WF_COUNT; f++) {
        const char *n = pp_wformat_name((pp_wformat)f);
        if (strlen(n) == len && strncmp(n, s, len) == 0) {
            *out = (pp_wformat)f;
            return 1;
        }
    }
    return 0;
}

#define MAX_CONTEXTS 16
#define REAL_TIME_S 0.080 /* a frame's audio */

static int count_contexts(const char *list) {
    int n = 0;
    for (const char *c = list; *c && n < MAX_CONTEXTS; n++) c += strcspn(c, ","), c += *c == ',';
    return n;
}

static int context_at(const char *list, int i) {
    const char *c = list;
    for (; i > 0; i--) c += strcspn(c, ","), c += *c == ',';
    return atoi(c);
}

/* One format's rows at every context on backend be: the LM's seconds per frame in t[], the
 * floors of its stages in floor[] and the last frame's costs in fc[]. */
static int run_format(pp_backend *be, bench_mimi *mimi, pp_wformat fmt, pp_kv_format kv, const dims *d,
                      const char *contexts, const run_opts *o, double *t, double (*floor)[2], frame_cost *fc,
                      char *err) {
    synth s = {.be = be, .rng = 0x2545f4914f6cdd1dull, .keep_host = strcmp(be->ops->name, "cpu") == 0};
    pp_quant_nf4_dynamic_map(s.nested_map);
    lm m;
    int rc = lm_build(&s, fmt, kv, d, o->dep_steps, &m, err);
    for (int c = 0; !rc && c < count_contexts(contexts); c++) {
        int context = context_at(contexts, c);
        lm_floor(&m, s.lm_bytes, context, kv, floor[c]);
        t[c] = run_context(&m, mimi, context, o, floor[c], mimi ? bench_mimi_weight_bytes(mimi) : 0, fmt, &fc[c]);
    }
    if (!rc && !o->extrapolate) {
        double prompt_ms = 0;
        uint64_t prompt_nodes = 0;
        rc = time_prompt(&m, o->frames < PROMPT_RUNS ? o->frames : PROMPT_RUNS, &prompt_ms, &prompt_nodes, err);
        if (!rc)
            printf("      prompt frames, %d to a pass (as pp_session_prefill): %.2f ms each", PP_SESSION_PREFILL_ROWS,
                   prompt_ms);
        if (!rc && be->ops->nodes_run) printf(", %llu nodes a pass", (unsigned long long)prompt_nodes);
        if (!rc) printf("\n");
        if (!rc) print_memory(be, &m, kv);
    }
    lm_free(&m);
    synth_free(&s);
    return rc;
}

/* --extrapolate: one format counted with 1 and 2 layers of each transformer, its costs at d's
 * layers printed per context (the rule in the header). */
static int run_extrapolated(pp_backend *be, bench_mimi *mimi, pp_wformat fmt, pp_kv_format kv, const dims *d,
                            const char *contexts, const run_opts *o, char *err) {
    int nc = count_contexts(contexts), rc = PP_OK;
    frame_cost *fc = calloc((size_t)(3 * nc), sizeof *fc); /* [layers 1 | layers 2 | extrapolated][context] */
    double t[MAX_CONTEXTS], floor[2][MAX_CONTEXTS][2];
    if (!fc) return pp_fail(err, PP_ENOMEM, "bench frame: out of memory");
    for (int r = 0; r < 2 && !rc; r++) {
        dims dr = *d;
        dr.layers = dr.dep_layers = r + 1;
        rc = run_format(be, mimi, fmt, kv, &dr, contexts, o, t, floor[r], fc + r * nc, err);
    }
    /* X = X(1) + k·(X(2) − X(1)); the codec's stages keep X(1) */
    const double k[T_FRAME] = {[T_TEMPORAL] = d->layers - 1, [T_DEP] = d->dep_layers - 1};
    for (int c = 0; !rc && c < nc; c++) {
        const frame_cost *one = &fc[c], *two = &fc[nc + c];
        frame_cost *x = &fc[2 * nc + c];
        double fl[2];
        for (int i = 0; i < T_FRAME; i++) {
            x->nodes[i] = (1 - k[i]) * one->nodes[i] + k[i] * two->nodes[i];
            bench_traffic_mix(&x->traffic[i], &one->traffic[i], 1 - k[i], &two->traffic[i], k[i]);
            if (i <= T_DEP) fl[i] = (1 - k[i]) * floor[0][c][i] + k[i] * floor[1][c][i]; /* the LM's stages */
        }
        sum_stages(x);
        printf("%-5s %5d: counted at 1 and 2 layers, extrapolated to %d + %d\n", pp_wformat_name(fmt),
               context_at(contexts, c), d->layers, d->dep_layers);
        print_costs(x, fl, fmt, o);
    }
    free(fc);
    return rc;
}

/* T = max(t1 / cores, bytes / bandwidth): for this machine beside the measured time, for the
 * machine asked about, and what real time (REAL_TIME_S a frame) needs. */
static void print_projection(const char *fmt, int context, double t1, double tn, double bytes, const run_opts *o,
                             double gbps, int cores) {
    double here = fmax(t1 / o->threads, bytes / (o->copy_bw * 1e9)), there = fmax(t1 / cores, bytes / (gbps * 1e9));
    printf("projection %s ctx %d: one core %.0f ms, %.2f GB read per frame; here (%d cores, %.1f GB/s) %.0f ms "
           "(measured %.0f); with %d cores and %.0f GB/s %.0f ms%s; real time needs %.1f cores and %.0f GB/s\n",
           fmt, context, 1e3 * t1, bytes / 1e9, o->threads, o->copy_bw, 1e3 * here, 1e3 * tn, cores, gbps, 1e3 * there,
           there <= REAL_TIME_S ? " (real time)" : "", t1 / REAL_TIME_S, bytes / REAL_TIME_S / 1e9);
}

int bench_frame(int argc, char **argv) {
    const char *device = "auto", *formats = "nf2,int4,nf4,bf16", *contexts = "100,3000", *kv_name = "f32";
    int threads = 0, layers = -1, dep_layers = -1, small = 0, project_cores = 0, n_busy = 0;
    double project_gbps = 0;
    /* 8 depformer steps: the server's frame, whose user-code steps 8..15 are given, not drawn */
    run_opts o = {.frames = 50, .mimi = 1, .dep_steps = 8};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--small") == 0) small = 1;
        else if (strcmp(a, "--no-mimi") == 0) o.mimi = 0;
        else if (strcmp(a, "--kernels") == 0)
            o.kernels = 1;
        else if (strcmp(a, "--extrapolate") == 0)
            o.extrapolate = 1;
        else if (!v) return usage();
        else if (strcmp(a, "--device") == 0) device = argv[++i];
        else if (strcmp(a, "--threads") == 0) threads = atoi(argv[++i]);
        else if (strcmp(a, "--layers") == 0) layers = atoi(argv[++i]);
        else if (strcmp(a, "--dep-layers") == 0) dep_layers = atoi(argv[++i]);
        else if (strcmp(a, "--dep-steps") == 0) o.dep_steps = atoi(argv[++i]);
        else if (strcmp(a, "--formats") == 0) formats = argv[++i];
        else if (strcmp(a, "--frames") == 0) o.frames = atoi(argv[++i]);
        else if (strcmp(a, "--contexts") == 0) contexts = argv[++i];
        else if (strcmp(a, "--kv") == 0) kv_name = argv[++i];
        else if (strcmp(a, "--busy") == 0)
            n_busy = atoi(argv[++i]);
        else if (strcmp(a, "--project") == 0) {
            if (sscanf(argv[++i], "%lf,%d", &project_gbps, &project_cores) != 2 || project_gbps <= 0 ||
                project_cores < 1)
                return usage();
        } else
            return usage();
    }
    dims d = small ? small_dims : full_dims;
    if (layers > 0) d.layers = layers;
    if (dep_layers > 0) d.dep_layers = dep_layers;
    pp_kv_format kv = PP_KV_F32;
    if (o.frames < 1 || threads < 0 || layers == 0 || dep_layers == 0 || o.dep_steps < 0 || o.dep_steps > DEP_Q ||
        pp_kv_format_parse(kv_name, &kv) != 0 || (o.extrapolate && project_cores) || n_busy < 0 || n_busy > 64)
        return usage();
    char err[PP_ERR_LEN];
    pp_backend *be;
    pp_log_set_level(PP_LOG_WARN);
    if (pp_backend_create(device, threads, &be, err)) {
        fprintf(stderr, "personaplex-bench: %s\n", err);
        return 1;
    }
    if (o.extrapolate && !be->ops->nodes_run) {
        fprintf(stderr, "personaplex-bench: --extrapolate counts a device backend's work (--device cuda)\n");
        pp_backend_destroy(be);
        return 2;
    }
    o.copy_bw = bench_backend_copy_gbps(be);
    o.threads = pp_pool_threads_for(threads);
    o.counted = bench_traffic_start(be); /* before the weights are allocated: only those after count */
    printf("frame benchmark on %s: temporal %d layers dim %d, depformer %d layers dim %d x %d steps, %s;\n"
           "copy bandwidth %.1f GB/s (read + write); %d frames per row; times in ms (p50 p99);\n"
           "LM MB/fr: weights and temporal KV read per frame\n",
           be->ops->name, d.layers, d.dim, d.dep_layers, d.dep_dim, o.dep_steps,
           o.mimi ? "Mimi-shaped codec ops" : "no codec", o.copy_bw, o.frames);
    if (o.counted)
        printf("device bytes: counted by the backend per page touched (up to its allocation's end), last frame;\n"
               "H100 estimate: per kernel max(bytes / 3.0 TB/s, warp instructions / (132 SMs x 4 x 1.755 GHz)), plus "
               "1.3 us per node;\nwarp instructions: a GEMV's (pk_gemv*) bytes read x its weights' warp instructions "
               "per byte (the LM's format; the codec's f32), 0 for the rest\n");
    if (o.extrapolate)
        printf("extrapolated: counted at 1 and 2 layers of each transformer, per stage X(L) = X(1) + (L - 1)·(X(2) - "
               "X(1)), L = %d for the temporal step, %d for the depformer; no times\n",
               d.layers, d.dep_layers);
    else
        printf("%-5s %5s %3s | %-15s | %-15s | %-15s | %-15s | %-15s | %8s %6s %7s %6s\n", "fmt", "ctx", "thr",
               "temporal step", "depformer", "mimi encode", "mimi decode", "whole frame", "LM MB/fr", "codec",
               "LM GB/s", "%copy");
    int rc = 0;
    bench_mimi *mimi = NULL;
    if (o.mimi && (rc = bench_mimi_create(be, 99, &mimi, err))) fprintf(stderr, "personaplex-bench: %s\n", err);
    pp_backend *one = NULL; /* --project: the one-thread CPU backend */
    if (project_cores && strcmp(be->ops->name, "cpu") != 0) {
        fprintf(stderr, "personaplex-bench: --project measures the CPU backend (--device cpu)\n");
        rc = 2;
    } else if (project_cores && (rc = pp_backend_create("cpu", 1, &one, err))) {
        fprintf(stderr, "personaplex-bench: %s\n", err);
    }
    frame_cost *fc = calloc(MAX_CONTEXTS, sizeof *fc); /* each context's last frame */
    if (!rc && !fc) {
        fprintf(stderr, "personaplex-bench: out of memory\n");
        rc = 1;
    }
    busy spinners = {.n = 0};
    busy_start(&spinners, n_busy);
    if (n_busy) /* the threads that started */
        printf("beside %d busy thread%s (--busy) on %d cores\n", spinners.n, spinners.n == 1 ? "" : "s",
               pp_pool_threads_for(0));
    for (const char *f = formats; !rc && *f;) {
        size_t len = strcspn(f, ",");
        pp_wformat fmt;
        if (!parse_format(f, len, &fmt)) {
            fprintf(stderr, "personaplex-bench: unknown format '%.*s'\n", (int)len, f);
            rc = 2;
            break;
        }
        double t_n[MAX_CONTEXTS], t_1[MAX_CONTEXTS], floor[MAX_CONTEXTS][2];
        if (o.extrapolate)
            rc = run_extrapolated(be, mimi, fmt, kv, &d, contexts, &o, err);
        else
            rc = run_format(be, mimi, fmt, kv, &d, contexts, &o, t_n, floor, fc, err);
        run_opts o1 = {.frames = o.frames < 3 ? o.frames : 3, .threads = 1, .dep_steps = o.dep_steps, .copy_bw = o.copy_bw};
        if (!rc && one) rc = run_format(one, NULL, fmt, kv, &d, contexts, &o1, t_1, floor, fc, err);
        if (rc) fprintf(stderr, "personaplex-bench: %s\n", err);
        for (int c = 0; !rc && one && c < count_contexts(contexts); c++)
            print_projection(pp_wformat_name(fmt), context_at(contexts, c), t_1[c], t_n[c], floor[c][0] + floor[c][1],
                             &o, project_gbps, project_cores);
        f += len;
        f += *f == ',';
    }
    busy_stop(&spinners);
    free(fc);
    if (one) pp_backend_destroy(one);
    bench_mimi_destroy(mimi);
    if (!rc && be->ops->last_error && be->ops->last_error(be, err)) {
        fprintf(stderr, "personaplex-bench: %s\n", err);
        rc = 1;
    }
    pp_backend_destroy(be);
    return rc;
}
