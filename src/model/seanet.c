/* seanet: see seanet.h. */
#include "model/seanet.h"

#include "base/err.h"

#include <stdio.h>

#define KEY_LEN 256

int pp_seanet_hop(const seanet_config *cfg) {
    int hop = 1;
    for (int i = 0; i < cfg->n_ratios; i++) hop *= cfg->ratios[i];
    return hop;
}

/* Appends conv `model.{idx}` (suffix: ".conv.conv" or ".convtr.convtr" or a block path). */
static int add_conv(codec_arena *a, const st_file *f, seanet *net, int idx, const char *suffix, int cin, int cout,
                    int k, int stride, int transposed, char *err) {
    char prefix[KEY_LEN];
    snprintf(prefix, sizeof prefix, "%s.model.%d%s", net->decoder ? "decoder" : "encoder", idx, suffix);
    return pp_conv_load(a, f, prefix, cin, cout, k, stride, 1, 1, transposed, &net->conv[net->n_conv++], err);
}

static int add_resblock(codec_arena *a, const st_file *f, seanet *net, int idx, int dim, char *err) {
    int hidden = dim / net->cfg.compress;
    int rc = add_conv(a, f, net, idx, ".block.1.conv.conv", dim, hidden, net->cfg.residual_kernel_size, 1, 0, err);
    return rc ? rc : add_conv(a, f, net, idx, ".block.3.conv.conv", hidden, dim, 1, 1, 0, err);
}

int pp_seanet_load(codec_arena *a, const st_file *f, const seanet_config *cfg, int decoder, seanet *out, char *err) {
    const int n = cfg->n_ratios, nf = cfg->n_filters;
    out->cfg = *cfg;
    out->decoder = decoder;
    out->n_conv = 0;
    int rc, idx = 1;
    if (!decoder) {
        int ch = nf;
        rc = add_conv(a, f, out, 0, ".conv.conv", cfg->channels, ch, cfg->kernel_size, 1, 0, err);
        for (int i = n - 1; i >= 0 && !rc; i--, idx += 3, ch *= 2) {
            int r = cfg->ratios[i];
            rc = add_resblock(a, f, out, idx, ch, err);
            if (!rc) rc = add_conv(a, f, out, idx + 2, ".conv.conv", ch, 2 * ch, 2 * r, r, 0, err);
        }
        if (!rc) rc = add_conv(a, f, out, idx + 1, ".conv.conv", ch, cfg->dimension, cfg->last_kernel_size, 1, 0, err);
    } else {
        int ch = nf << n;
        rc = add_conv(a, f, out, 0, ".conv.conv", cfg->dimension, ch, cfg->kernel_size, 1, 0, err);
        for (int i = 0; i < n && !rc; i++, idx += 3, ch /= 2) {
            int r = cfg->ratios[i];
            rc = add_conv(a, f, out, idx + 1, ".convtr.convtr", ch, ch / 2, 2 * r, r, 1, err);
            if (!rc) rc = add_resblock(a, f, out, idx + 2, ch / 2, err);
        }
        if (!rc) rc = add_conv(a, f, out, idx + 1, ".conv.conv", ch, cfg->channels, cfg->last_kernel_size, 1, 0, err);
    }
    return rc;
}

void pp_seanet_layout(codec_arena *state, const seanet *net, seanet_layout *out) {
    for (int i = 0; i < net->n_conv; i++)
        out->carry[i] = pp_codec_arena_reserve(state, pp_conv_state_floats(&net->conv[i]));
}

void pp_seanet_work_bind(codec_arena *a, const seanet *net, int t_in, int rows, seanet_work *w) {
    size_t act = 0, scratch = 0;
    int t = t_in;
    /* The convs form one chain (residual convs keep the length), so walking them in order
     * visits every activation size. */
    for (int i = 0; i < net->n_conv; i++) {
        const mimi_conv *c = &net->conv[i];
        int t_out = pp_conv_out_len(c, t);
        size_t in = (size_t)c->c.cin * t, out = (size_t)c->c.cout * t_out;
        if (in > act) act = in;
        if (out > act) act = out;
        if (pp_conv_scratch_floats(c, t) > scratch) scratch = pp_conv_scratch_floats(c, t);
        t = t_out;
    }
    w->a = pp_codec_arena_take(a, act * rows);
    w->b = pp_codec_arena_take(a, act * rows);
    w->e = pp_codec_arena_take(a, act * rows);
    w->h = pp_codec_arena_take(a, act * rows);
    w->scratch = pp_codec_arena_take(a, scratch * rows);
    w->t_in = t_in;
}

/* One call's walk through the convs: the batch, and the activation ping-pong (cur holds the
 * running tensor). */
typedef struct seanet_run {
    pp_backend *be;
    const seanet *net;
    const seanet_layout *lay;
    const seanet_work *w;
    const uint64_t *base;
    int n;
    int i; /* the next conv */
    float *cur, *next;
} seanet_run;

/* Runs the next conv on x; returns the output length. */
static int run_conv(seanet_run *r, const float *x, int t, float *y, int flags) {
    const mimi_conv *c = &r->net->conv[r->i];
    pp_state_rows rows = {r->n, r->base, r->lay->carry[r->i] * sizeof(float)};
    pp_conv_step(r->be, c, &rows, x, t, y, r->w->scratch, flags);
    r->i++;
    return pp_conv_out_len(c, t);
}

/* cur += block_3(ELU(block_1(ELU(cur)))), cur [n][dim][t]. */
static void resblock(seanet_run *r, int t) {
    const mimi_conv *b1 = &r->net->conv[r->i];
    size_t rows = (size_t)r->n * t;
    r->be->ops->elu(r->be, r->cur, r->w->e, b1->c.cin * rows);
    run_conv(r, r->w->e, t, r->w->h, 0);
    r->be->ops->elu(r->be, r->w->h, r->w->h, b1->c.cout * rows);
    run_conv(r, r->w->h, t, r->cur, PP_CONV_ACCUMULATE);
}

/* ELU then the next conv from cur into y, or into next which then becomes cur. */
static int elu_conv(seanet_run *r, int t, float *y) {
    r->be->ops->elu(r->be, r->cur, r->w->e, (size_t)r->net->conv[r->i].c.cin * r->n * t);
    t = run_conv(r, r->w->e, t, y ? y : r->next, 0);
    float *tmp = r->cur;
    r->cur = r->next;
    r->next = tmp;
    return t;
}

void pp_seanet_step(pp_backend *be, const seanet *net, const seanet_layout *lay, const seanet_work *w,
                    const uint64_t *base, int n, const float *x, float *y) {
    seanet_run r = {be, net, lay, w, base, n, 0, w->a, w->b};
    int t = run_conv(&r, x, w->t_in, r.cur, 0);
    for (int stage = 0; stage < net->cfg.n_ratios; stage++) {
        if (!net->decoder) {
            resblock(&r, t);
            t = elu_conv(&r, t, NULL);
        } else {
            t = elu_conv(&r, t, NULL);
            resblock(&r, t);
        }
    }
    elu_conv(&r, t, y);
}
