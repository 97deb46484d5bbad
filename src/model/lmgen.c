/* lmgen: see lmgen.h. Mirrors the reference's LMGen.prepare_step_input and
 * process_transformer_output (docs/model.md §5.1) on the same ring, so the ring can be compared
 * with the reference's and restored from a voices/NAME.pt cache. */
#include "model/lmgen.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define NS PP_LM_STREAMS
#define NA PP_LM_AUDIO_CODEBOOKS
#define RING_MAX 8 /* max_delay (≤ 4, lm_config) + 3 */
#define UNGENERATED (-2) /* the reference's fill value of a fresh ring */

const int32_t pp_lmgen_silence_codes[NA] = {948, 243, 1178, 546, 1736, 1030, 1978, 2008};
const int32_t pp_lmgen_sine_codes[NA] = {430, 1268, 381, 1611, 1095, 1495, 56, 472};

/* The scratch of one tick: the LM work rows, the frame's rows and tokens, and the host logits
 * of traced frames, for up to cap conversations. */
struct pp_lmbatch {
    const pp_lm *lm;
    const pp_lm_config *cfg;
    int cap;
    pp_lm_work *work;
    pp_lm_row *frame;                /* [cap]: a tick's rows for pp_lm_frame */
    int32_t *tokens;                 /* [1+dep_q][cap]: a tick's tokens */
    float *text_logits, *dep_logits; /* host [cap][text_card], [NA][cap][card]: traces */
    int32_t (*cols)[NS];             /* [cap]: prefill input columns */
    float **layer_out;               /* [cap]: trace buffers */
    int *last;                       /* [cap]: depformer steps a row needs; -1: no heads */
    int *slot;                       /* [cap]: the caller's index of row r */
    pp_lmgen **rows;                 /* [cap]: the conversations that compute this tick */
    const float **emb;               /* [cap]: a prefill row's stored voice embedding, or NULL */
    size_t host_bytes;               /* the arrays above (pp_lmbatch_bytes adds the work's) */
};

struct pp_lmgen {
    const pp_lm *lm;
    const pp_lm_config *cfg;
    pp_lm_ctx *ctx;
    pp_lmbatch *solo;               /* a one-row batch for calls on this conversation alone */
    pp_lmgen_params params;
    int width, max_delay;
    int64_t n;                      /* call counter: also the frame number of the draws */
    int sampled;                    /* the heads ran since the reset */
    int64_t ring[NS][RING_MAX];
    uint8_t provided[NS][RING_MAX];
    int32_t init[NS];               /* initial tokens: text_card, then card */
    pp_lmgen_trace *trace;
};

void pp_lmgen_params_default(pp_lmgen_params *p) {
    p->text_temp = 0.7f;
    p->text_top_k = 25;
    p->audio_temp = 0.8f;
    p->audio_top_k = 250;
    p->greedy = 0;
    p->text_seed = p->audio_seed = 42424242;
    p->kv_cache = PP_KV_F32;
}

/* Stream k's initial token, the one past its vocabulary (text_card, or card for audio): what
 * an empty ring holds, and the top a voice's ring may hold. */
static int initial_token(const pp_lm_config *c, int k) { return k == 0 ? c->text_card : c->card; }

static int set_params(pp_lmgen *g, const pp_lmgen_params *p, char *err) {
    if (!g->ctx || p->kv_cache != g->params.kv_cache) {
        pp_lm_ctx *ctx = NULL;
        int rc = pp_lm_ctx_create(g->lm, p->kv_cache, &ctx, err);
        if (rc) return rc;
        pp_lm_ctx_destroy(g->ctx);
        g->ctx = ctx;
    }
    g->params = *p;
    return PP_OK;
}

int pp_lmgen_reset(pp_lmgen *g, const pp_lmgen_params *p, char *err) {
    if (p) {
        int rc = set_params(g, p, err);
        if (rc) return rc;
    }
    g->n = 0;
    g->sampled = 0;
    memset(g->provided, 0, sizeof g->provided);
    return PP_OK;
}

void pp_lmgen_destroy(pp_lmgen *g) {
    if (!g) return;
    pp_lm_ctx_destroy(g->ctx);
    pp_lmbatch_destroy(g->solo);
    free(g);
}

int pp_lmgen_create(const pp_lm *lm, const pp_lmgen_params *p, pp_lmgen **out, char *err) {
    *out = NULL;
    pp_lmgen *g = calloc(1, sizeof *g);
    if (!g) return pp_fail(err, PP_ENOMEM, "lmgen: out of memory");
    g->lm = lm;
    g->cfg = pp_lm_get_config(lm);
    g->max_delay = pp_lm_config_max_delay(g->cfg);
    g->width = g->max_delay + 3;
    for (int k = 0; k < NS; k++) {
        g->init[k] = initial_token(g->cfg, k);
        for (int c = 0; c < RING_MAX; c++) g->ring[k][c] = UNGENERATED;
    }
    pp_lmgen_params defaults;
    pp_lmgen_params_default(&defaults);
    int rc = pp_lmbatch_create(lm, 1, &g->solo, err);
    if (!rc) rc = pp_lmgen_reset(g, p ? p : &defaults, err);
    if (rc) {
        pp_lmgen_destroy(g);
        return rc;
    }
    *out = g;
    return PP_OK;
}

void pp_lmgen_set_trace(pp_lmgen *g, pp_lmgen_trace *trace) { g->trace = trace; }
int64_t pp_lmgen_offset(const pp_lmgen *g) { return g->n; }
int pp_lmgen_ring_width(const pp_lmgen *g) { return g->width; }

void pp_lmgen_token_ring(const pp_lmgen *g, int64_t *dst) {
    for (int k = 0; k < NS; k++)
        for (int c = 0; c < g->width; c++) dst[k * g->width + c] = g->ring[k][c];
}

static int col(const pp_lmgen *g, int64_t p) { return (int)(p % g->width); }

/* Tokens handed in must index the embedding tables (the initial token included). */
static int check_codes(const int32_t *codes, int n, int32_t max, const char *what, char *err) {
    for (int i = 0; i < n; i++)
        if (codes[i] < 0 || codes[i] > max)
            return pp_fail(err, PP_EINVAL, "lmgen: %s code %d = %d is outside [0, %d]", what, i, codes[i], max);
    return PP_OK;
}

/* Writes the given tokens at column n + delay and the initial tokens of the first columns.
 * Returns 0 for the compute-free first call (n was 0), 1 when the caller must compute. */
static int prepare(pp_lmgen *g, int32_t text, const int32_t *agent, const int32_t *user) {
    const int *d = g->cfg->delays;
    for (int i = 0; user && i < NA; i++) {
        int k = 1 + NA + i, c = col(g, g->n + d[k]);
        g->ring[k][c] = user[i];
        g->provided[k][c] = 1;
    }
    for (int i = 0; agent && i < NA; i++) {
        int k = 1 + i, c = col(g, g->n + d[k]);
        g->ring[k][c] = agent[i];
        g->provided[k][c] = 1;
    }
    if (text >= 0) {
        int c = col(g, g->n + d[0]);
        g->ring[0][c] = text;
        g->provided[0][c] = 1;
    }
    /* Delayed streams have no real token for their first columns: the initial token is forced. */
    for (int k = 0; k < NS; k++)
        if (g->n <= d[k]) {
            g->ring[k][col(g, g->n)] = g->init[k];
            g->provided[k][col(g, g->n)] = 1;
        }
    if (g->n == 0) {
        for (int k = 0; k < NS; k++) g->ring[k][0] = g->init[k];
        g->n = 1;
        return 0;
    }
    return 1;
}

/* Depformer steps a frame needs: the 8 agent steps, plus later steps only while their stream
 * is unforced (steps 8.. predict user codes, which are always given); -1 when every stream of
 * column tgt is forced, so the text head and depformer are skipped. */
static int heads_needed(const pp_lmgen *g, int tgt) {
    const pp_lm_config *c = g->cfg;
    int need = !g->provided[0][tgt];
    for (int k = 1; k <= c->dep_q; k++) need |= !g->provided[k][tgt];
    if (!need) return -1;
    int last = NA < c->dep_q ? NA : c->dep_q;
    for (int k = last + 1; k <= c->dep_q; k++)
        if (!g->provided[k][tgt]) last = k;
    return last;
}

/* Row settings of g's frame: draws numbered by the call counter (so a conversation draws the
 * same alone or in any batch), and the forced entries of the column tgt it fills. */
static void frame_settings(const pp_lmgen *g, int tgt, pp_lm_row *row) {
    const pp_lmgen_params *p = &g->params;
    row->text = (pp_sample_param){.seed = p->text_seed, .frame = g->n, .temp = p->greedy ? 0 : p->text_temp,
                                  .top_k = p->text_top_k};
    row->audio = (pp_sample_param){.seed = p->audio_seed, .frame = g->n, .temp = p->greedy ? 0 : p->audio_temp,
                                   .top_k = p->audio_top_k};
    for (int k = 0; k < NS; k++) row->forced[k] = g->provided[k][tgt] ? (int32_t)g->ring[k][tgt] : -1;
}

/* Row r's tokens of a tick of n rows into its column n: streams 0..last[r] (the others are
 * forced), and its trace's logits. */
static void take_tokens(pp_lmbatch *b, int n, int r) {
    const pp_lm_config *c = b->cfg;
    pp_lmgen *g = b->rows[r];
    int tgt = col(g, g->n), last = b->last[r];
    if (last < 0) return;
    g->sampled = 1;
    for (int k = 0; k <= last; k++)
        if (!g->provided[k][tgt]) g->ring[k][tgt] = b->tokens[(size_t)k * n + r];
    if (!g->trace) return;
    if (g->trace->text_logits)
        memcpy(g->trace->text_logits, b->text_logits + (size_t)r * c->text_card, (size_t)c->text_card * sizeof(float));
    for (int s = 0; g->trace->dep_logits && s < last && s < NA; s++)
        memcpy(g->trace->dep_logits + (size_t)s * c->card, b->dep_logits + ((size_t)s * n + r) * c->card,
               (size_t)c->card * sizeof(float));
}

/* The input column n−1 of g (spec §5.1 step 4), checked against the embedding tables. */
static int input_column(const pp_lmgen *g, int32_t cols[NS], char *err) {
    int in = col(g, g->n - 1);
    for (int k = 0; k < NS; k++) {
        int64_t v = g->ring[k][in];
        if (v < 0 || v > g->init[k])
            return pp_fail(err, PP_EINVAL, "lmgen: stream %d holds token %lld at position %lld (outside [0, %d])", k,
                           (long long)v, (long long)(g->n - 1), g->init[k]);
        cols[k] = (int32_t)v;
    }
    return PP_OK;
}

/* The end of a computing call: clears the input column's flags and emits the aligned column. */
static void finish(pp_lmgen *g, pp_lmgen_out *out) {
    const pp_lm_config *c = g->cfg;
    for (int k = 0; k < NS; k++) g->provided[k][col(g, g->n - 1)] = 0;
    out->ready = g->n > g->max_delay;
    if (out->ready) {
        int32_t v[NS];
        for (int k = 0; k < NS; k++) v[k] = (int32_t)g->ring[k][col(g, g->n - g->max_delay + c->delays[k])];
        out->text = v[0];
        memcpy(out->agent, v + 1, sizeof out->agent);
        memcpy(out->user, v + 1 + NA, sizeof out->user);
    }
    g->n++;
}

/* The computing part of a call for the prepared conversations b->rows[0..n): input column
 * n−1 of each (or emb_in, host [dim], for a lone row) at its position n−1, then the heads,
 * which run as many depformer steps as the neediest row. Row r's output goes to
 * outs[b->slot[r]]. emb_out (lone row) receives the input embedding. */
static int tick(pp_lmbatch *b, int n, const float *emb_in, float *emb_out, pp_lmgen_out *outs, char *err) {
    int traced = 0, steps = -1, rc;
    for (int r = 0; r < n; r++) {
        pp_lmgen *g = b->rows[r];
        pp_lm_row *row = &b->frame[r];
        if (emb_in) memset(row->cols, 0, sizeof row->cols); /* valid ids; the embedding replaces them */
        else if ((rc = input_column(g, row->cols, err))) return rc;
        row->ctx = g->ctx;
        row->pos = g->n - 1;
        frame_settings(g, col(g, g->n), row);
        b->last[r] = heads_needed(g, col(g, g->n));
        if (b->last[r] > steps) steps = b->last[r];
        b->layer_out[r] = g->trace ? g->trace->layer_outputs : NULL;
        if (g->trace) g->trace->heads_ran = b->last[r] >= 0;
        traced |= g->trace != NULL;
    }
    if (emb_in) pp_lm_set_embedding(b->lm, b->work, 0, emb_in);
    else if (emb_out) pp_lm_embed_tokens(b->lm, b->work, 1, (const int32_t(*)[NS])b->frame[0].cols);
    if (emb_out) pp_lm_get_embedding(b->lm, b->work, 0, emb_out);
    pp_lm_trace tr = {.layer_out = b->layer_out, .text_logits = b->text_logits, .dep_logits = b->dep_logits,
                      .dep_steps = NA};
    rc = pp_lm_frame(b->lm, b->work, n, b->frame, steps, emb_in || emb_out, traced ? &tr : NULL, b->tokens, err);
    if (rc) return rc;
    for (int r = 0; r < n; r++) {
        take_tokens(b, n, r);
        finish(b->rows[r], &outs[b->slot[r]]);
    }
    return PP_OK;
}

/* A call on g alone: the n = 1 case of a tick, on g's own one-row scratch. */
static int solo_tick(pp_lmgen *g, const float *emb_in, float *emb_out, pp_lmgen_out *out, char *err) {
    g->solo->rows[0] = g;
    g->solo->slot[0] = 0;
    return tick(g->solo, 1, emb_in, emb_out, out, err);
}

int pp_lmgen_step_forced(pp_lmgen *g, int32_t text, const int32_t *agent, const int32_t *user, pp_lmgen_out *out,
                         float *embedding, char *err) {
    const pp_lm_config *c = g->cfg;
    int rc;
    memset(out, 0, sizeof *out);
    if (text > c->text_card)
        return pp_fail(err, PP_EINVAL, "lmgen: text token %d is outside [0, %d]", text, c->text_card);
    if (agent && (rc = check_codes(agent, NA, c->card, "agent", err))) return rc;
    if (user && (rc = check_codes(user, NA, c->card, "user", err))) return rc;
    if (!prepare(g, text, agent, user)) return 0;
    rc = solo_tick(g, NULL, embedding, out, err);
    return rc ? rc : 1;
}

int pp_lmgen_skip(pp_lmgen *g, int64_t frames, char *err) {
    if (g->n < 1 || frames < 0)
        return pp_fail(err, PP_EINVAL, "lmgen: skip of %lld frames at call %lld (after the first call, >= 0)",
                       (long long)frames, (long long)g->n);
    for (int k = 0; k < NS; k++)
        for (int c = 0; c < g->width; c++) {
            if (g->ring[k][c] < 0) g->ring[k][c] = g->init[k]; /* ungenerated: any valid token times the same */
            g->provided[k][c] = 0;
        }
    g->n += frames;
    return PP_OK;
}

int pp_lmgen_step(pp_lmgen *g, const int32_t user[NA], pp_lmgen_out *out, char *err) {
    int rc = pp_lmgen_step_forced(g, -1, NULL, user, out, NULL, err);
    return rc < 0 ? rc : PP_OK;
}

int pp_lmgen_check_voice_tokens(const pp_lm_config *c, const int64_t *cache, const char *label, char *err) {
    for (int k = 0; k < NS; k++) {
        const int top = initial_token(c, k);
        for (int i = 0; i < 4; i++) {
            int64_t v = cache[k * 4 + i];
            if (v < 0 || v > top)
                return pp_fail(err, PP_EINVAL, "%s: voice cache [%d][%d] = %lld is outside [0, %d]", label, k, i,
                               (long long)v, top);
        }
    }
    return PP_OK;
}

/* A voice's [17][4] token ring: only for max delay 1, every token in its table. */
static int check_voice_cache(const pp_lmgen *g, const int64_t *cache, char *err) {
    if (g->width != 4)
        return pp_fail(err, PP_EUNSUPPORTED, "lmgen: a voice prompt's [17][4] ring needs max delay 1, not %d",
                       g->max_delay);
    return pp_lmgen_check_voice_tokens(g->cfg, cache, "lmgen", err);
}

static void restore_ring(pp_lmgen *g, const int64_t *cache) {
    for (int k = 0; k < NS; k++)
        for (int c = 0; c < 4; c++) g->ring[k][c] = cache[k * 4 + c];
}

/* The reference replays each stored voice frame through a call whose tokens are dummies (text
 * PAD, audio initial tokens), all forced, so nothing it would sample is kept. */
static void prepare_voice_frame(pp_lmgen *g) {
    int32_t dummy[NA];
    for (int i = 0; i < NA; i++) dummy[i] = g->cfg->card;
    if (!prepare(g, PP_LM_TEXT_PAD, dummy, dummy)) prepare(g, PP_LM_TEXT_PAD, dummy, dummy);
}

int pp_lmgen_prompt_voice(pp_lmgen *g, const float *embeddings, int n_frames, const int64_t *cache, char *err) {
    if (n_frames < 0 || (n_frames > 0 && !embeddings) || !cache)
        return pp_fail(err, PP_EINVAL, "lmgen: voice prompt needs embeddings for %d frames and a token cache", n_frames);
    int rc = check_voice_cache(g, cache, err);
    if (rc) return rc;
    for (int j = 0; j < n_frames; j++) {
        prepare_voice_frame(g);
        pp_lmgen_out out;
        if ((rc = solo_tick(g, embeddings + (size_t)j * g->cfg->dim, NULL, &out, err))) return rc;
    }
    restore_ring(g, cache);
    return PP_OK;
}

/* Silence and text-prompt frames force the agent's silence and the user's sine codes. */
static int check_forced(const pp_lmgen *g, int n, char *err) {
    if (n > 0 && g->cfg->card < 2048)
        return pp_fail(err, PP_EUNSUPPORTED, "lmgen: silence and sine frames use Mimi codes that need card 2048, not %d",
                       g->cfg->card);
    return PP_OK;
}

static int check_text(const pp_lmgen *g, const int32_t *ids, int n, char *err) {
    if (n < 0 || (n > 0 && !ids)) return pp_fail(err, PP_EINVAL, "lmgen: text prompt of %d ids", n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > g->cfg->text_card)
            return pp_fail(err, PP_EINVAL, "lmgen: text prompt token %d = %d is outside [0, %d]", i, ids[i],
                           g->cfg->text_card);
    return PP_OK;
}

/* Forced frames of (text, agent silence, user sine): the silence and text-prompt phases. */
static int forced_frames(pp_lmgen *g, const int32_t *texts, int n, int32_t text, char *err) {
    int rc = check_forced(g, n, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        pp_lmgen_out out;
        int rc = pp_lmgen_step_forced(g, texts ? texts[i] : text, pp_lmgen_silence_codes, pp_lmgen_sine_codes, &out,
                                      NULL, err);
        if (rc < 0) return rc;
    }
    return PP_OK;
}

int pp_lmgen_prompt_silence(pp_lmgen *g, int frames, char *err) {
    if (frames < 0) return pp_fail(err, PP_EINVAL, "lmgen: %d silence frames", frames);
    return forced_frames(g, NULL, frames, PP_LM_TEXT_PAD, err);
}

int pp_lmgen_prompt_text(pp_lmgen *g, const int32_t *ids, int n, char *err) {
    int rc = check_text(g, ids, n, err);
    return rc ? rc : forced_frames(g, ids, n, 0, err);
}

void pp_lmbatch_destroy(pp_lmbatch *b) {
    if (!b) return;
    pp_lm_work_destroy(b->work);
    void *bufs[] = {b->frame, b->tokens, b->text_logits, b->dep_logits, b->cols, b->layer_out,
                    b->last, b->slot, b->rows, (void *)b->emb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(b);
}

/* calloc, counted in b->host_bytes. */
static void *batch_calloc(pp_lmbatch *b, size_t n, size_t size) {
    b->host_bytes += n * size;
    return calloc(n, size);
}

int pp_lmbatch_create(const pp_lm *lm, int capacity, pp_lmbatch **out, char *err) {
    *out = NULL;
    if (capacity < 1) return pp_fail(err, PP_EINVAL, "lmbatch: capacity %d (at least 1 conversation)", capacity);
    pp_lmbatch *b = calloc(1, sizeof *b);
    if (!b) return pp_fail(err, PP_ENOMEM, "lmbatch: out of memory");
    b->lm = lm;
    b->cfg = pp_lm_get_config(lm);
    b->cap = capacity;
    size_t n = (size_t)capacity;
    b->frame = batch_calloc(b, n, sizeof *b->frame);
    b->tokens = batch_calloc(b, n * ((size_t)b->cfg->dep_q + 1), sizeof *b->tokens);
    b->text_logits = batch_calloc(b, n * b->cfg->text_card, sizeof(float));
    b->dep_logits = batch_calloc(b, n * NA * b->cfg->card, sizeof(float));
    b->cols = batch_calloc(b, n, sizeof *b->cols);
    b->layer_out = batch_calloc(b, n, sizeof *b->layer_out);
    b->last = batch_calloc(b, n, sizeof *b->last);
    b->slot = batch_calloc(b, n, sizeof *b->slot);
    b->rows = batch_calloc(b, n, sizeof *b->rows);
    b->emb = batch_calloc(b, n, sizeof *b->emb);
    int rc = b->frame && b->tokens && b->text_logits && b->dep_logits && b->cols &&
                     b->layer_out && b->last && b->slot && b->rows && b->emb
                 ? PP_OK
                 : pp_fail(err, PP_ENOMEM, "lmbatch: out of memory for %d conversations", capacity);
    if (!rc) rc = pp_lm_work_create(lm, capacity, &b->work, err);
    if (rc) {
        pp_lmbatch_destroy(b);
        return rc;
    }
    *out = b;
    return PP_OK;
}

int pp_lmbatch_capacity(const pp_lmbatch *b) { return b->cap; }

size_t pp_lmbatch_bytes(const pp_lmbatch *b) { return b->host_bytes + pp_lm_work_bytes(b->work); }

/* Checks a tick's arguments before any state changes: distinct conversations of b's model,
 * in-range user codes. */
static int check_tick(const pp_lmbatch *b, pp_lmgen *const *gens, int n, const int32_t (*user)[NA], char *err) {
    if (n < 0 || n > b->cap)
        return pp_fail(err, PP_EINVAL, "lmbatch: %d conversations in a batch of capacity %d", n, b->cap);
    for (int i = 0; i < n; i++) {
        if (!gens[i] || gens[i]->lm != b->lm)
            return pp_fail(err, PP_EINVAL, "lmbatch: conversation %d does not run on this batch's model", i);
        for (int j = 0; j < i; j++)
            if (gens[j] == gens[i]) return pp_fail(err, PP_EINVAL, "lmbatch: conversation %d is also entry %d", i, j);
        int rc = check_codes(user[i], NA, b->cfg->card, "user", err);
        if (rc) return rc;
    }
    return PP_OK;
}

int pp_lmbatch_step(pp_lmbatch *b, pp_lmgen *const *gens, int n, const int32_t (*user)[NA], pp_lmgen_out *outs,
                    char *err) {
    int rc = check_tick(b, gens, n, user, err);
    if (rc) return rc;
    int m = 0;
    for (int i = 0; i < n; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        if (!prepare(gens[i], -1, NULL, user[i])) continue; /* a conversation's compute-free first call */
        b->rows[m] = gens[i];
        b->slot[m++] = i;
    }
    return m ? tick(b, m, NULL, NULL, outs, err) : PP_OK;
}

/* ---- batched prefill ---- */

int pp_lmgen_prompt_length(const pp_lmgen_prompt *p) { return p->n_voice + 2 * p->silence + p->n_text; }

static int check_prompt(const pp_lmgen *g, const pp_lmgen_prompt *p, char *err) {
    if (p->n_voice < 0 || p->silence < 0 || (p->n_voice > 0 && (!p->voice_emb || !p->voice_cache)))
        return pp_fail(err, PP_EINVAL, "lmgen: prompt of %d voice frames (embeddings %s, cache %s), %d silence frames",
                       p->n_voice, p->voice_emb ? "given" : "missing", p->voice_cache ? "given" : "missing",
                       p->silence);
    int rc = p->n_voice > 0 ? check_voice_cache(g, p->voice_cache, err) : PP_OK;
    if (!rc) rc = check_forced(g, 2 * p->silence + p->n_text, err);
    return rc ? rc : check_text(g, p->text, p->n_text, err);
}

/* Computes the m prefill rows gathered in b, conversation g's positions first .. first + m - 1:
 * one temporal pass, in which row r attends to the keys that rows 0..r-1 stored before it. */
static void prefill_flush(pp_lmbatch *b, pp_lmgen *g, int64_t first, int m) {
    if (m == 0) return;
    pp_lm_embed_tokens(b->lm, b->work, m, (const int32_t(*)[NS])b->cols);
    for (int r = 0; r < m; r++)
        if (b->emb[r]) pp_lm_set_embedding(b->lm, b->work, r, b->emb[r]);
    pp_lm_prefill(b->lm, b->work, g->ctx, first, m);
}

int pp_lmgen_prefill(pp_lmgen *g, pp_lmbatch *b, const pp_lmgen_prompt *p, int from, int to, char *err) {
    if (b->lm != g->lm) return pp_fail(err, PP_EINVAL, "lmgen: prefill scratch of another model");
    if (from < 0 || from > to || to > pp_lmgen_prompt_length(p))
        return pp_fail(err, PP_EINVAL, "lmgen: prompt frames [%d, %d) of %d", from, to, pp_lmgen_prompt_length(p));
    int rc = check_prompt(g, p, err), m = 0;
    int64_t first = 0;
    if (rc) return rc;
    /* Every input is forced, so a frame's input column is known as soon as it is prepared: the
     * token bookkeeping runs ahead frame by frame and the compute follows in runs of rows. */
    for (int i = from; i < to; i++) {
        const float *emb = NULL;
        if (i < p->n_voice) {
            emb = p->voice_emb + (size_t)i * g->cfg->dim;
            prepare_voice_frame(g);
        } else {
            int t = i - p->n_voice - p->silence;
            int32_t text = t >= 0 && t < p->n_text ? p->text[t] : PP_LM_TEXT_PAD;
            if (!prepare(g, text, pp_lmgen_silence_codes, pp_lmgen_sine_codes)) continue; /* compute-free call 0 */
        }
        /* Every stream of a prompt frame is given or was given by the frame before (delays),
         * so the heads never run and nothing is drawn. */
        if (heads_needed(g, col(g, g->n)) >= 0)
            return pp_fail(err, PP_EINVAL, "lmgen: prompt frame %d leaves a stream to the model", i);
        if (emb) memset(b->cols[m], 0, sizeof b->cols[m]); /* valid ids; the embedding replaces them */
        else if ((rc = input_column(g, b->cols[m], err))) return rc;
        b->emb[m] = emb;
        if (m == 0) first = g->n - 1; /* the frames that follow take the next positions */
        pp_lmgen_out out;
        finish(g, &out);
        if (++m == b->cap) {
            prefill_flush(b, g, first, m);
            m = 0;
        }
        if (i == p->n_voice - 1) restore_ring(g, p->voice_cache);
    }
    prefill_flush(b, g, first, m);
    return PP_OK;
}

/* ---- snapshots ---- */

struct pp_lmgen_snapshot {
    const pp_lm *lm;
    pp_kv_format fmt;
    int64_t n;
    int64_t ring[NS][RING_MAX];
    uint8_t provided[NS][RING_MAX];
    int slots;       /* KV slots held: positions 0 .. slots-1 */
    size_t kv_bytes;
    void *kv;        /* host: pp_lm_ctx_export of `slots` slots */
};

int pp_lmgen_snapshot_take(const pp_lmgen *g, pp_lmgen_snapshot **out, char *err) {
    *out = NULL;
    if (g->sampled)
        return pp_fail(err, PP_EUNSUPPORTED, "lmgen: only a conversation that has not sampled yet can be saved");
    pp_lmgen_snapshot *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "lmgen: out of memory for a snapshot");
    /* Call n has written positions 0 .. n-2; past the context the ring is full. */
    int64_t written = g->n > 1 ? g->n - 1 : 0;
    int cap = pp_lm_ctx_capacity(g->ctx);
    *s = (pp_lmgen_snapshot){.lm = g->lm, .fmt = g->params.kv_cache, .n = g->n,
                             .slots = written > cap ? cap : (int)written};
    memcpy(s->ring, g->ring, sizeof s->ring);
    memcpy(s->provided, g->provided, sizeof s->provided);
    s->kv_bytes = pp_lm_ctx_slots_bytes(g->ctx, s->slots);
    if (!(s->kv = malloc(s->kv_bytes ? s->kv_bytes : 1))) {
        size_t bytes = s->kv_bytes;
        free(s);
        return pp_fail(err, PP_ENOMEM, "lmgen: out of memory for a snapshot of %zu bytes", bytes);
    }
    pp_lm_ctx_export(g->ctx, s->slots, s->kv);
    *out = s;
    return PP_OK;
}

int pp_lmgen_snapshot_restore(pp_lmgen *g, const pp_lmgen_snapshot *s, char *err) {
    if (s->lm != g->lm) return pp_fail(err, PP_EINVAL, "lmgen: the snapshot was taken on another model");
    if (s->fmt != g->params.kv_cache)
        return pp_fail(err, PP_EINVAL, "lmgen: the snapshot holds KV format %d, the conversation uses %d", (int)s->fmt,
                       (int)g->params.kv_cache);
    int rc = pp_lmgen_reset(g, NULL, err);
    if (rc) return rc;
    g->n = s->n;
    memcpy(g->ring, s->ring, sizeof g->ring);
    memcpy(g->provided, s->provided, sizeof g->provided);
    pp_lm_ctx_import(g->ctx, s->slots, s->kv);
    return PP_OK;
}

size_t pp_lmgen_snapshot_bytes(const pp_lmgen_snapshot *s) { return sizeof *s + s->kv_bytes; }

void pp_lmgen_snapshot_free(pp_lmgen_snapshot *s) {
    if (!s) return;
    free(s->kv);
    free(s);
}
