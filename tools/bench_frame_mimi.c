/* bench_frame_mimi: the Mimi codec's per-frame work for `personaplex-bench frame`, as the
 * sequence of backend operations docs/codec.md §4 lists, with its real shapes and random f32
 * weights (no checkpoint needed). It times what the codec costs on a backend; it is not the
 * codec (src/model/mimi.c is), so its output is noise. */
#include "bench_frame.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define FRAME 1920 /* samples per 80 ms frame */
#define D 512      /* latent and transformer width */
#define LAYERS 8
#define HEADS 8
#define FFN 2048
#define CONTEXT 250
#define BINS 2048
#define CB_DIM 256
#define N_CODES 8
#define MAX_CONVS 48

typedef struct bconv {
    pp_conv c;
    int transposed;
    float *state; /* history (conv) or tail (transposed) */
} bconv;

typedef struct tlayer {
    pp_weight in_proj, out_proj, lin1, lin2; /* f32, backend memory */
    float *n1w, *n1b, *n2w, *n2b, *s1, *s2;
    float *k, *v;
} tlayer;

typedef struct tstack {
    tlayer l[LAYERS];
    int64_t *pos; /* backend [2]: this call's two positions */
    int32_t next;
} tstack;

struct bench_mimi {
    pp_backend *be;
    bconv convs[MAX_CONVS];
    int n_convs, cursor;
    tstack enc_tf, dec_tf;
    pp_weight proj_in[2], proj_out[2]; /* semantic / acoustic 512<->256 */
    float *cb[N_CODES], *cb_sq[N_CODES];
    float *a, *b, *h, *scratch;         /* activations (channel-major) and conv scratch */
    float *xt, *tq, *tqkv, *tatt, *tff; /* transformer buffers (time-major) */
    float *lat, *u[2], *sum[2];
    int32_t *codes; /* backend [N_CODES]: a frame's codes between the quantizer and one transfer */
    size_t scratch_floats, weight_bytes;
    uint64_t rng;
    int first_encode;
};

/* ---- construction ---- */

static float *rbuf(bench_mimi *m, size_t n, float scale) {
    float *p = bench_rand_buffer(m->be, &m->rng, n, scale);
    if (p && scale != 0) m->weight_bytes += n * sizeof(float);
    return p;
}

static int dense(bench_mimi *m, int64_t rows, int64_t cols, pp_weight *w) {
    memset(w, 0, sizeof *w);
    w->fmt = PP_WF_F32;
    w->rows = rows;
    w->cols = cols;
    w->name = "mimi";
    w->data = rbuf(m, (size_t)(rows * cols), 0.02f);
    return w->data ? PP_OK : PP_ENOMEM;
}

static int add_conv(bench_mimi *m, int cin, int cout, int k, int stride, int transposed, int groups, int t_in) {
    if (m->n_convs == MAX_CONVS) return PP_EINVAL;
    bconv *c = &m->convs[m->n_convs++];
    size_t wn = transposed ? (size_t)cin * (size_t)(cout / groups) * k : (size_t)cout * cin * k;
    c->c = (pp_conv){rbuf(m, wn, 0.05f), rbuf(m, (size_t)cout, 0.01f), cin, cout, k, stride, groups};
    c->transposed = transposed;
    c->state = rbuf(m, (size_t)(transposed ? cout : cin) * (size_t)(k - stride) + 1, 0);
    size_t s = pp_conv_scratch(&c->c, t_in, transposed);
    if (s > m->scratch_floats) m->scratch_floats = s;
    return c->c.w && c->c.b && c->state ? PP_OK : PP_ENOMEM;
}

static int tstack_init(bench_mimi *m, tstack *s) {
    int rc = PP_OK;
    for (int i = 0; i < LAYERS && !rc; i++) {
        tlayer *l = &s->l[i];
        rc = dense(m, 3 * D, D, &l->in_proj);
        if (!rc) rc = dense(m, D, D, &l->out_proj);
        if (!rc) rc = dense(m, FFN, D, &l->lin1);
        if (!rc) rc = dense(m, D, FFN, &l->lin2);
        float **vec[] = {&l->n1w, &l->n1b, &l->n2w, &l->n2b, &l->s1, &l->s2};
        for (size_t j = 0; j < 6 && !rc; j++)
            if (!(*vec[j] = rbuf(m, D, 0.5f))) rc = PP_ENOMEM;
        if (!rc && (!(l->k = rbuf(m, (size_t)CONTEXT * D, 0)) || !(l->v = rbuf(m, (size_t)CONTEXT * D, 0))))
            rc = PP_ENOMEM;
    }
    if (!rc && !(s->pos = m->be->ops->alloc(m->be, 2 * sizeof(int64_t)))) rc = PP_ENOMEM;
    return rc;
}

/* SEANet layers in call order (docs/codec.md §2.1-2.2): per stage a ResBlock's two convs, then
 * the strided conv. t tracks each conv's input length for the scratch size. */
static int seanet_init(bench_mimi *m) {
    static const int ratios[4] = {4, 5, 6, 8};
    int rc = add_conv(m, 1, 64, 7, 1, 0, 1, FRAME), ch = 64, t = FRAME;
    for (int s = 0; s < 4 && !rc; s++) {
        rc = add_conv(m, ch, ch / 2, 3, 1, 0, 1, t);
        if (!rc) rc = add_conv(m, ch / 2, ch, 1, 1, 0, 1, t);
        if (!rc) rc = add_conv(m, ch, 2 * ch, 2 * ratios[s], ratios[s], 0, 1, t);
        t /= ratios[s];
        ch *= 2;
    }
    if (!rc) rc = add_conv(m, 1024, D, 3, 1, 0, 1, 2);
    if (!rc) rc = add_conv(m, D, D, 4, 2, 0, 1, 2);       /* downsample to 12.5 Hz */
    if (!rc) rc = add_conv(m, D, D, 4, 2, 1, D, 1);       /* upsample, depthwise */
    if (!rc) rc = add_conv(m, D, 1024, 7, 1, 0, 1, 2);
    ch = 1024;
    t = 2;
    for (int s = 3; s >= 0 && !rc; s--) {
        rc = add_conv(m, ch, ch / 2, 2 * ratios[s], ratios[s], 1, 1, t);
        t *= ratios[s];
        ch /= 2;
        if (!rc) rc = add_conv(m, ch, ch / 2, 3, 1, 0, 1, t);
        if (!rc) rc = add_conv(m, ch / 2, ch, 1, 1, 0, 1, t);
    }
    if (!rc) rc = add_conv(m, 64, 1, 3, 1, 0, 1, FRAME);
    return rc;
}

int bench_mimi_create(pp_backend *be, uint64_t seed, bench_mimi **out, char *err) {
    bench_mimi *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "bench mimi: out of memory");
    m->be = be;
    m->rng = seed | 1;
    m->first_encode = 1;
    int rc = seanet_init(m);
    if (!rc) rc = tstack_init(m, &m->enc_tf);
    if (!rc) rc = tstack_init(m, &m->dec_tf);
    for (int i = 0; i < 2 && !rc; i++) {
        rc = dense(m, CB_DIM, D, &m->proj_in[i]);
        if (!rc) rc = dense(m, D, CB_DIM, &m->proj_out[i]);
        if (!rc && (!(m->u[i] = rbuf(m, CB_DIM, 0)) || !(m->sum[i] = rbuf(m, CB_DIM, 0)))) rc = PP_ENOMEM;
    }
    if (!rc && !(m->codes = (int32_t *)rbuf(m, N_CODES, 0))) rc = PP_ENOMEM;
    for (int i = 0; i < N_CODES && !rc; i++)
        if (!(m->cb[i] = rbuf(m, (size_t)BINS * CB_DIM, 1.0f)) || !(m->cb_sq[i] = rbuf(m, BINS, 1.0f))) rc = PP_ENOMEM;
    size_t act = (size_t)1024 * FRAME;
    float **bufs[] = {&m->a, &m->b, &m->h};
    for (size_t i = 0; i < 3 && !rc; i++)
        if (!(*bufs[i] = rbuf(m, act, 0))) rc = PP_ENOMEM;
    if (!rc && !(m->scratch = rbuf(m, m->scratch_floats, 0))) rc = PP_ENOMEM;
    float **tb[] = {&m->xt, &m->tq, &m->tqkv, &m->tatt, &m->tff, &m->lat};
    size_t tn[] = {2 * D, 2 * D, 6 * D, 2 * D, 2 * FFN, 2 * D};
    for (size_t i = 0; i < 6 && !rc; i++)
        if (!(*tb[i] = rbuf(m, tn[i], 0))) rc = PP_ENOMEM;
    if (rc) {
        bench_mimi_destroy(m);
        return pp_fail(err, rc, "bench mimi: out of backend memory for the codec's weights and state");
    }
    *out = m;
    return PP_OK;
}

static void rel(bench_mimi *m, void *p) {
    if (p) m->be->ops->release(m->be, p);
}

void bench_mimi_destroy(bench_mimi *m) {
    if (!m) return;
    for (int i = 0; i < m->n_convs; i++) {
        rel(m, (void *)m->convs[i].c.w);
        rel(m, (void *)m->convs[i].c.b);
        rel(m, m->convs[i].state);
    }
    tstack *ts[2] = {&m->enc_tf, &m->dec_tf};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < LAYERS; i++) {
            tlayer *l = &ts[s]->l[i];
            void *p[] = {(void *)l->in_proj.data, (void *)l->out_proj.data, (void *)l->lin1.data,
                         (void *)l->lin2.data, l->n1w, l->n1b, l->n2w, l->n2b, l->s1, l->s2, l->k, l->v};
            for (size_t j = 0; j < sizeof p / sizeof *p; j++) rel(m, p[j]);
        }
        rel(m, ts[s]->pos);
    }
    for (int i = 0; i < 2; i++) {
        rel(m, (void *)m->proj_in[i].data);
        rel(m, (void *)m->proj_out[i].data);
        rel(m, m->u[i]);
        rel(m, m->sum[i]);
    }
    for (int i = 0; i < N_CODES; i++) {
        rel(m, m->cb[i]);
        rel(m, m->cb_sq[i]);
    }
    void *p[] = {m->a, m->b, m->h, m->scratch, m->xt, m->tq, m->tqkv, m->tatt, m->tff, m->lat, m->codes};
    for (size_t j = 0; j < sizeof p / sizeof *p; j++) rel(m, p[j]);
    free(m);
}

size_t bench_mimi_weight_bytes(const bench_mimi *m) { return m->weight_bytes; }

/* ---- one frame ---- */

/* Runs the next conv of the sequence on x [cin][t] into y. */
static int run_conv(bench_mimi *m, const float *x, int t, float *y, int flags) {
    bconv *c = &m->convs[m->cursor++];
    if (c->transposed) {
        m->be->ops->conv_tr1d(m->be, &c->c, x, t, c->state, NULL, y, m->scratch);
        return t * c->c.stride;
    }
    m->be->ops->conv1d(m->be, &c->c, x, t, c->state, NULL, y, m->scratch, flags);
    return t / c->c.stride;
}

/* ResBlock on x [ch][t] in place: x += conv_k1(ELU(conv_k3(ELU(x)))). */
static void resblock(bench_mimi *m, float *x, int ch, int t) {
    const pp_backend_ops *op = m->be->ops;
    op->elu(m->be, x, m->h, (size_t)ch * t);
    run_conv(m, m->h, t, m->b, 0);
    op->elu(m->be, m->b, m->b, (size_t)ch / 2 * t);
    run_conv(m, m->b, t, x, PP_CONV_ACCUMULATE);
}

/* The 8-layer transformer on x [D][2] (channel-major), in place. */
static void transformer(bench_mimi *m, tstack *s, float *x) {
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    int64_t pos[2] = {s->next, s->next + 1};
    s->next += 2;
    op->upload(be, s->pos, pos, sizeof pos);
    op->transpose(be, x, 1, D, 2, m->xt);
    for (int i = 0; i < LAYERS; i++) {
        tlayer *l = &s->l[i];
        op->layer_norm(be, m->xt, l->n1w, l->n1b, 2, D, 1e-5f, m->tq);
        op->matmul(be, &l->in_proj, m->tq, 2, m->tqkv);
        for (int q = 0; q < 2; q++) {
            pp_kv_ring ring = {.fmt = PP_KV_F32, .capacity = CONTEXT, .window = CONTEXT - 2 + q, .k = l->k, .v = l->v};
            op->attn_rows(be, m->tqkv + (size_t)q * 3 * D, 1, HEADS, D / HEADS, 10000.0f, &ring, NULL, 0, s->pos + q,
                          m->tatt + (size_t)q * D);
        }
        op->matmul(be, &l->out_proj, m->tatt, 2, m->tq);
        op->scale_add(be, m->xt, m->tq, l->s1, 2, D);
        op->layer_norm(be, m->xt, l->n2w, l->n2b, 2, D, 1e-5f, m->tq);
        op->matmul(be, &l->lin1, m->tq, 2, m->tff);
        op->gelu(be, m->tff, 2 * FFN);
        op->matmul(be, &l->lin2, m->tff, 2, m->tq);
        op->scale_add(be, m->xt, m->tq, l->s2, 2, D);
    }
    op->transpose(be, m->xt, 1, 2, D, x);
}

void bench_mimi_encode(bench_mimi *m, int32_t codes[8]) {
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    int ch = 64, t;
    m->cursor = 0;
    t = run_conv(m, m->h, FRAME, m->a, 0); /* the frame's PCM sits in h */
    for (int s = 0; s < 4; s++) {
        resblock(m, m->a, ch, t);
        op->elu(be, m->a, m->h, (size_t)ch * t);
        t = run_conv(m, m->h, t, m->a, 0);
        ch *= 2;
    }
    op->elu(be, m->a, m->h, (size_t)ch * t);
    t = run_conv(m, m->h, t, m->a, 0);
    transformer(m, &m->enc_tf, m->a);
    run_conv(m, m->a, t, m->lat, m->first_encode ? PP_CONV_REPLICATE : 0);
    m->first_encode = 0;
    for (int q = 0; q < 2; q++) op->matmul(be, &m->proj_in[q], m->lat, 1, m->u[q]);
    for (int c = 0; c < N_CODES; c++)
        op->vq_nearest(be, m->cb[c], m->cb_sq[c], BINS, CB_DIM, m->u[c ? 1 : 0], 1, c > 0, &m->codes[c], 1);
    op->download(be, codes, m->codes, N_CODES * sizeof *codes);
}

void bench_mimi_decode(bench_mimi *m, const int32_t codes[8]) {
    pp_backend *be = m->be;
    const pp_backend_ops *op = be->ops;
    m->cursor = 15; /* the decoder's convs follow the encoder's 15 in the list (upsample first) */
    for (int q = 0; q < 2; q++) op->zero(be, m->sum[q], CB_DIM * sizeof(float));
    op->upload(be, m->codes, codes, N_CODES * sizeof *codes);
    for (int c = 0; c < N_CODES; c++) op->vq_add_row(be, m->cb[c], BINS, CB_DIM, &m->codes[c], 1, 1, m->sum[c ? 1 : 0]);
    op->matmul(be, &m->proj_out[0], m->sum[0], 1, m->lat);
    op->matmul(be, &m->proj_out[1], m->sum[1], 1, m->h);
    op->add(be, m->lat, m->h, D);
    int t = run_conv(m, m->lat, 1, m->a, 0), ch = 1024;
    transformer(m, &m->dec_tf, m->a);
    t = run_conv(m, m->a, t, m->b, 0);
    for (int s = 0; s < 4; s++) {
        op->elu(be, m->b, m->h, (size_t)ch * t);
        t = run_conv(m, m->h, t, m->b, 0);
        ch /= 2;
        resblock(m, m->b, ch, t);
    }
    op->elu(be, m->b, m->h, (size_t)ch * t);
    run_conv(m, m->h, t, m->a, 0);
}
