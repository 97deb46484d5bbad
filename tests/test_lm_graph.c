/* test_lm_graph: the recorded LM frame keeps no host value of the frame it was recorded in.
 *
 * A test backend wraps the CPU backend and implements the graph hooks the way a device does:
 * between graph_begin and graph_end the frame's operations are only written down (function and
 * arguments), graph_end runs the list and keeps it in its slot, graph_replay runs it again. Any
 * upload, download, sync, allocation or release while recording is counted as a violation.
 * Conversations with sampling on (each its own seed, temperature and top-k) then run the same
 * schedule on a model opened on the plain CPU backend and on one opened on the recording
 * backend: a batch whose rows change (same size with another conversation, another order,
 * another size), lone conversations that leave their slot idle or join when the slots are
 * taken (so a slot changes hands, and one conversation finds none),
 * a dropped set of graphs (as when a device's workspace moves) and a traced frame. The tokens
 * must be identical on both over 20 ticks, with graphs both recorded and replayed. */
#include "test.h"

#include "backend/backend.h"
#include "backend/graph_cache.h"
#include "base/err.h"
#include "base/log.h"
#include "lm_case.h"

#include <stdlib.h>
#include <string.h>

#define SLOTS 8
#define TICKS 20
#define SOLO 9 /* lone conversations, each with its own scratch */
#define LEAVE 5 /* ... this one pauses from tick EARLY to BACK, leaving its slot idle to be taken */
#define EARLY 4
#define BACK 16
#define LATE 6 /* ... these from tick LATE_AT on: one takes the free slot, one the idle one, and one
                * finds none and runs plainly */
#define LATE_AT 8
#define BATCHED 4
#define CONV (SOLO + BATCHED)

enum {
    OP_MATMUL,
    OP_EMBED,
    OP_EMBED_SUM,
    OP_ADD,
    OP_RMSNORM,
    OP_NORM_MATMUL,
    OP_MATMUL_ADD,
    OP_ATTN_ROWS,
    OP_MATMUL_SILU_ADD,
    OP_SAMPLE,
    OP_COPY
};

/* One operation written down: its arguments as the caller passed them. */
typedef struct call {
    int op;
    const void *p[4];
    void *out, *out2; /* out2: norm_matmul's second output, h */
    int i[4];
    float f;
    size_t z;
} call;

typedef struct list {
    call *v;
    size_t n, cap;
} list;

typedef struct rec {
    pp_backend be; /* first: the wrappers get back to rec from their pp_backend */
    pp_backend_ops ops;
    pp_backend *inner;
    int recording, slot, oom;
    list cur, slots[SLOTS];
    int records, replays, violations;
    pp_graph_cache *cache; /* as a device backend keeps one over its slots */
} rec;

static rec *rec_of(pp_backend *be) { return (rec *)be; }

static void run_call(pp_backend *in, const call *c) {
    const pp_backend_ops *o = in->ops;
    switch (c->op) {
    case OP_MATMUL: o->matmul(in, c->p[0], c->p[1], c->i[0], c->out); break;
    case OP_EMBED: o->embed(in, c->p[0], c->p[1], c->i[0], c->out, c->i[1]); break;
    case OP_EMBED_SUM: o->embed_sum(in, c->p[0], c->p[1], c->i[0], c->p[2], c->i[1], c->out); break;
    case OP_ADD: o->add(in, c->out, c->p[1], c->z); break;
    case OP_RMSNORM: o->rmsnorm(in, c->p[0], c->p[1], c->i[0], c->i[1], c->f, c->out); break;
    case OP_NORM_MATMUL: o->norm_matmul(in, c->p[0], c->p[1], c->i[0], c->i[1], c->f, c->out2, c->p[2], c->out); break;
    case OP_ATTN_ROWS:
        o->attn_rows(in, (float *)c->p[0], c->i[0], c->i[1], c->i[2], c->f, c->p[2], c->p[3], c->i[3], c->p[1], c->out);
        break;
    case OP_MATMUL_ADD: o->matmul_add(in, c->p[0], c->p[1], c->i[0], c->out); break;
    case OP_MATMUL_SILU_ADD: o->matmul_silu_add(in, c->p[0], c->p[1], c->i[0], c->out); break;
    case OP_SAMPLE: o->sample(in, c->p[0], c->i[0], c->i[1], c->p[1], c->i[2], c->p[2], c->out); break;
    case OP_COPY: o->copy(in, c->out, c->p[0], c->z); break;
    }
}

/* Written down while recording, else run at once. */
static void issue(pp_backend *be, call c) {
    rec *r = rec_of(be);
    if (!r->recording) {
        run_call(r->inner, &c);
        return;
    }
    if (r->cur.n == r->cur.cap) {
        size_t cap = r->cur.cap ? 2 * r->cur.cap : 256;
        call *v = realloc(r->cur.v, cap * sizeof *v);
        if (!v) {
            r->oom = 1;
            return;
        }
        r->cur.v = v;
        r->cur.cap = cap;
    }
    r->cur.v[r->cur.n++] = c;
}

static void w_matmul(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    issue(be, (call){.op = OP_MATMUL, .p = {w, x}, .i = {n}, .out = y});
}
static void w_embed(pp_backend *be, const pp_weight *t, const int32_t *ids, int n, float *y, int acc) {
    issue(be, (call){.op = OP_EMBED, .p = {t, ids}, .i = {n, acc}, .out = y});
}
/* tables and id_rows: the caller keeps them (backend.h), so the recorded pointers stay valid */
static void w_embed_sum(pp_backend *be, const pp_weight *const *tables, const int *id_rows, int n_tables,
                        const int32_t *ids, int n, float *y) {
    issue(be, (call){.op = OP_EMBED_SUM, .p = {tables, id_rows, ids}, .i = {n_tables, n}, .out = y});
}
static void w_add(pp_backend *be, float *y, const float *x, size_t count) {
    issue(be, (call){.op = OP_ADD, .p = {NULL, x}, .z = count, .out = y});
}
static void w_rmsnorm(pp_backend *be, const float *x, const float *a, int n, int d, float eps, float *y) {
    issue(be, (call){.op = OP_RMSNORM, .p = {x, a}, .i = {n, d}, .f = eps, .out = y});
}
static void w_norm_matmul(pp_backend *be, const float *x, const float *a, int n, int d, float eps, float *h,
                          const pp_weight *w, float *y) {
    issue(be, (call){.op = OP_NORM_MATMUL, .p = {x, a, w}, .i = {n, d}, .f = eps, .out = y, .out2 = h});
}
static void w_matmul_add(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    issue(be, (call){.op = OP_MATMUL_ADD, .p = {w, x}, .i = {n}, .out = y});
}
static void w_attn_rows(pp_backend *be, float *qkv, int n, int nh, int hd, float rope, const pp_kv_ring *ring,
                        const pp_kv_ring *const *tables, int layer, const int64_t *pos, float *out) {
    issue(be,
          (call){.op = OP_ATTN_ROWS, .p = {qkv, pos, ring, tables}, .i = {n, nh, hd, layer}, .f = rope, .out = out});
}
static void w_matmul_silu_add(pp_backend *be, const pp_weight *w, const float *u, int n, float *y) {
    issue(be, (call){.op = OP_MATMUL_SILU_ADD, .p = {w, u}, .i = {n}, .out = y});
}
static void w_sample(pp_backend *be, const float *l, int rows, int n, const pp_sample_param *p, int stream,
                     const int32_t *forced, int32_t *tokens) {
    issue(be, (call){.op = OP_SAMPLE, .p = {l, p, forced}, .i = {rows, n, stream}, .out = tokens});
}
static void w_copy(pp_backend *be, void *dst, const void *src, size_t bytes) {
    issue(be, (call){.op = OP_COPY, .p = {src}, .z = bytes, .out = dst});
}

/* Memory traffic is legal only outside a recording. */
static void w_upload(pp_backend *be, void *dst, const void *src, size_t bytes) {
    rec_of(be)->violations += rec_of(be)->recording;
    rec_of(be)->inner->ops->upload(rec_of(be)->inner, dst, src, bytes);
}
static void w_download(pp_backend *be, void *dst, const void *src, size_t bytes) {
    rec_of(be)->violations += rec_of(be)->recording;
    rec_of(be)->inner->ops->download(rec_of(be)->inner, dst, src, bytes);
}
static void *w_alloc(pp_backend *be, size_t bytes) {
    rec_of(be)->violations += rec_of(be)->recording;
    return rec_of(be)->inner->ops->alloc(rec_of(be)->inner, bytes);
}
static void w_release(pp_backend *be, void *p) {
    rec_of(be)->violations += rec_of(be)->recording;
    rec_of(be)->inner->ops->release(rec_of(be)->inner, p);
}
static void w_sync(pp_backend *be) { rec_of(be)->violations += rec_of(be)->recording; }

static void run_list(rec *r, const list *l) {
    for (size_t i = 0; i < l->n; i++) run_call(r->inner, &l->v[i]);
}

static int g_begin(pp_backend *be, int slot, char *err) {
    rec *r = rec_of(be);
    if (slot < 0 || slot >= SLOTS || r->recording) return pp_fail(err, PP_EINVAL, "rec: graph_begin slot %d", slot);
    r->recording = 1;
    r->slot = slot;
    r->cur.n = 0;
    return PP_OK;
}

static int g_end(pp_backend *be, int slot, char *err) {
    rec *r = rec_of(be);
    if (!r->recording || slot != r->slot || r->oom) return pp_fail(err, PP_EINVAL, "rec: graph_end slot %d", slot);
    r->recording = 0;
    list t = r->slots[slot];
    r->slots[slot] = r->cur;
    r->cur = t;
    r->records++;
    run_list(r, &r->slots[slot]);
    return PP_OK;
}

static int g_replay(pp_backend *be, int slot, char *err) {
    rec *r = rec_of(be);
    if (slot < 0 || slot >= SLOTS) return pp_fail(err, PP_EINVAL, "rec: graph_replay slot %d", slot);
    if (!r->slots[slot].n) return pp_fail(err, PP_ENOTFOUND, "rec: slot %d holds no graph", slot);
    r->replays++;
    run_list(r, &r->slots[slot]);
    return PP_OK;
}

static int g_run(pp_backend *be, uint64_t key, void (*issue)(void *), void *arg, char *err) {
    return pp_graph_cache_run(rec_of(be)->cache, be, key, issue, arg, err);
}
static void g_forget(pp_backend *be, uint64_t key) { pp_graph_cache_forget(rec_of(be)->cache, key); }

/* What a device does when its workspace moves: every graph is dropped. */
static void drop_graphs(rec *r) {
    for (int i = 0; i < SLOTS; i++) r->slots[i].n = 0;
}

/* The recording backend over inner. Its impl is the inner CPU backend's, so every operation
 * not wrapped here runs as the CPU's own. */
static void rec_init(rec *r, pp_backend *inner) {
    memset(r, 0, sizeof *r);
    r->inner = inner;
    r->ops = *inner->ops;
    r->ops.name = "rec";
    r->ops.matmul = w_matmul;
    r->ops.embed = w_embed;
    r->ops.embed_sum = w_embed_sum;
    r->ops.add = w_add;
    r->ops.rmsnorm = w_rmsnorm;
    r->ops.norm_matmul = w_norm_matmul;
    r->ops.attn_rows = w_attn_rows;
    r->ops.matmul_add = w_matmul_add;
    r->ops.matmul_silu_add = w_matmul_silu_add;
    r->ops.sample = w_sample;
    r->ops.copy = w_copy;
    r->ops.upload = w_upload;
    r->ops.download = w_download;
    r->ops.alloc = w_alloc;
    r->ops.release = w_release;
    r->ops.sync = w_sync;
    r->ops.graph_begin = g_begin;
    r->ops.graph_end = g_end;
    r->ops.graph_replay = g_replay;
    r->ops.run_recorded = g_run;
    r->ops.forget_recorded = g_forget;
    r->cache = pp_graph_cache_create(SLOTS);
    r->be.ops = &r->ops;
    r->be.impl = inner->impl;
}

static void rec_free(rec *r) {
    pp_graph_cache_destroy(r->cache);
    free(r->cur.v);
    for (int i = 0; i < SLOTS; i++) free(r->slots[i].v);
}

/* ---- the schedule ---- */

/* The batch's rows at tick t (conversations SOLO..SOLO+3): same size with another member,
 * another order, a smaller and a larger batch. */
static int batch_rows(int t, int *who) {
    static const int plan[4][BATCHED + 1] = {{3, 0, 1, 2}, {3, 0, 1, 3}, {2, 1, 0}, {4, 3, 0, 1, 2}};
    const int *p = plan[t / 5];
    for (int i = 0; i < p[0]; i++) who[i] = SOLO + p[1 + i];
    return p[0];
}

/* All conversations of one model through the schedule; outs[t][j] the output of j at tick t. */
static int run(const lm_case *c, const pp_lm *lm, rec *r, pp_lmgen_out (*outs)[CONV], char *err) {
    pp_lmgen *g[CONV] = {0};
    pp_lmbatch *b = NULL;
    float *trace_buf = malloc(((size_t)c->cfg->text_card + 8 * (size_t)c->cfg->card) * sizeof(float));
    int rc = trace_buf ? pp_lmbatch_create(lm, BATCHED, &b, err) : pp_fail(err, PP_ENOMEM, "out of memory");
    for (int j = 0; !rc && j < CONV; j++) {
        pp_lmgen_params p;
        pp_lmgen_params_default(&p);
        p.text_seed = p.audio_seed = 500 + (uint64_t)j;
        p.text_temp = 0.5f + 0.1f * (float)(j % 4);
        p.audio_top_k = 50 + 40 * (j % 3);
        rc = pp_lmgen_create(lm, &p, &g[j], err);
        if (!rc) rc = lm_case_prompt(c, g[j], err);
    }
    pp_lmgen_trace tr = {.text_logits = trace_buf, .dep_logits = trace_buf ? trace_buf + c->cfg->text_card : NULL};
    for (int t = 0; !rc && t < TICKS; t++) {
        const int32_t *user = c->user[t % c->n_steps];
        if (r && t == 12) drop_graphs(r);
        pp_lmgen_set_trace(g[2], t == 7 ? &tr : NULL); /* a traced frame runs unrecorded */
        for (int j = 0; !rc && j < SOLO; j++)
            if (j < LEAVE || (j == LEAVE && (t < EARLY || t >= BACK)) || (j >= LATE && t >= LATE_AT))
                rc = pp_lmgen_step(g[j], user, &outs[t][j], err);
        int who[BATCHED], n = batch_rows(t, who);
        pp_lmgen *rows[BATCHED];
        int32_t u[BATCHED][PP_LM_AUDIO_CODEBOOKS];
        pp_lmgen_out o[BATCHED];
        for (int i = 0; i < n; i++) {
            rows[i] = g[who[i]];
            memcpy(u[i], c->user[(t + 3 * i) % c->n_steps], sizeof u[i]);
        }
        if (!rc) rc = pp_lmbatch_step(b, rows, n, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])u, o, err);
        for (int i = 0; !rc && i < n; i++) outs[t][who[i]] = o[i];
    }
    for (int j = 0; j < CONV; j++) pp_lmgen_destroy(g[j]);
    pp_lmbatch_destroy(b);
    free(trace_buf);
    return rc;
}

static int same_out(const pp_lmgen_out *a, const pp_lmgen_out *b) {
    return a->ready == b->ready && a->text == b->text && memcmp(a->agent, b->agent, sizeof a->agent) == 0 &&
           memcmp(a->user, b->user, sizeof a->user) == 0;
}

int main(void) {
    pp_log_set_level(PP_LOG_WARN);
    char dirs[LM_CASE_MAX][512], err[PP_ERR_LEN] = "", path[600], cfg[600];
    if (lm_case_list(dirs) == 0) TEST_SKIP("no golden LM cases under " PP_TEST_DATA "/golden");
    lm_case c;
    if (lm_case_open(dirs[0], 1, &c, err)) {
        fprintf(stderr, "%s: %s\n", dirs[0], err);
        return 1;
    }
    static rec r;
    static pp_lmgen_out plain[TICKS][CONV], graphed[TICKS][CONV];
    rec_init(&r, c.be);
    pp_lm *lm = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", c.dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", c.dir);
    int rc = pp_lm_open(&r.be, path, cfg, &lm, err);
    if (!rc) rc = run(&c, c.lm, NULL, plain, err);
    if (!rc) rc = run(&c, lm, &r, graphed, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("both schedules ran", rc == 0);
    int diffs = 0, ready = 0;
    for (int t = 0; t < TICKS; t++)
        for (int j = 0; j < CONV; j++) {
            diffs += !same_out(&plain[t][j], &graphed[t][j]);
            ready += graphed[t][j].ready;
        }
    printf("%s: %d recordings, %d replays, %d outputs (%d ready), %d differ, %d violations\n", c.name, r.records,
           r.replays, TICKS * CONV, ready, diffs, r.violations);
    TEST_COND("graphs were recorded and replayed", r.records > 0 && r.replays > r.records);
    TEST_COND("the recorded frames give the plain CPU tokens (sampling on)", rc == 0 && diffs == 0 && ready > 0);
    TEST_COND("nothing uploads, downloads, syncs or allocates while recording", r.violations == 0);
    pp_lm_close(lm);
    rec_free(&r);
    lm_case_close(&c);
    return test_report();
}
