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

void pp_seanet_state_bind(codec_arena *a, const seanet *net, int t_in, seanet_state *s) {
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
        s->carry[i] = pp_codec_arena_take(a, pp_conv_state_floats(c));
        t = t_out;
    }
    s->a = pp_codec_arena_take(a, act);
    s->b = pp_codec_arena_take(a, act);
    s->e = pp_codec_arena_take(a, act);
    s->h = pp_codec_arena_take(a, act);
    s->scratch = pp_codec_arena_take(a, scratch);
    s->t_in = t_in;
}

/* Runs conv *i on x and moves the cursor; returns the output length. */
static int run_conv(pp_backend *be, const seanet *net, seanet_state *s, int *i, const float *x, int t, float *y,
                    int flags) {
    const mimi_conv *c = &net->conv[*i];
    pp_conv_step(be, c, s->carry[*i], x, t, y, s->scratch, flags);
    (*i)++;
    return pp_conv_out_len(c, t);
}

/* The activation ping-pong of one call: cur holds the running tensor. */
typedef struct seanet_bufs {
    float *cur, *next;
} seanet_bufs;

/* cur += block_3(ELU(block_1(ELU(cur)))), cur [dim][t]. */
static void resblock(pp_backend *be, const seanet *net, seanet_state *s, int *i, seanet_bufs *bf, int t) {
    const mimi_conv *b1 = &net->conv[*i];
    be->ops->elu(be, bf->cur, s->e, (size_t)b1->c.cin * t);
    run_conv(be, net, s, i, s->e, t, s->h, 0);
    be->ops->elu(be, s->h, s->h, (size_t)b1->c.cout * t);
    run_conv(be, net, s, i, s->h, t, bf->cur, PP_CONV_ACCUMULATE);
}

/* ELU then conv *i from cur into y, or into next which then becomes cur. */
static int elu_conv(pp_backend *be, const seanet *net, seanet_state *s, int *i, seanet_bufs *bf, int t, float *y) {
    be->ops->elu(be, bf->cur, s->e, (size_t)net->conv[*i].c.cin * t);
    t = run_conv(be, net, s, i, s->e, t, y ? y : bf->next, 0);
    float *tmp = bf->cur;
    bf->cur = bf->next;
    bf->next = tmp;
    return t;
}

void pp_seanet_step(pp_backend *be, const seanet *net, seanet_state *s, const float *x, float *y) {
    seanet_bufs bf = {s->a, s->b};
    int i = 0, t = run_conv(be, net, s, &i, x, s->t_in, bf.cur, 0);
    for (int stage = 0; stage < net->cfg.n_ratios; stage++) {
        if (!net->decoder) {
            resblock(be, net, s, &i, &bf, t);
            t = elu_conv(be, net, s, &i, &bf, t, NULL);
        } else {
            t = elu_conv(be, net, s, &i, &bf, t, NULL);
            resblock(be, net, s, &i, &bf, t);
        }
    }
    elu_conv(be, net, s, &i, &bf, t, y);
}
