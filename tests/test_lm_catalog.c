/* test_lm_catalog: the LM tensor catalogue lists what the released 7B checkpoint holds (count,
 * bytes at BF16, a few known shapes), every listed name is found again as the same tensor,
 * the other spellings files use are recognised, and names that are not LM tensors are not. */
#include "test.h"

#include "model/lm_catalog.h"

#include <string.h>

typedef struct tally {
    int count, norms, mismatched;
    int64_t values;
    pp_lm_tensor in_proj0, dep_ffn_out;
} tally;

static int same(const pp_lm_tensor *a, const pp_lm_tensor *b) {
    return a->part == b->part && a->depformer == b->depformer && a->layer == b->layer && a->index == b->index;
}

static int count(void *ctx, const pp_lm_tensor *t) {
    tally *y = ctx;
    y->count++;
    y->norms += t->ndim == 3;
    y->values += t->rows * t->cols;
    pp_lm_tensor found;
    if (pp_lm_catalog_find(t->name, &found) || !same(&found, t)) {
        fprintf(stderr, "  '%s' is not found as itself\n", t->name);
        y->mismatched++;
    }
    if (strcmp(t->name, "transformer.layers.0.self_attn.in_proj_weight") == 0) y->in_proj0 = *t;
    if (strcmp(t->name, "depformer.layers.5.gating.15.linear_out.weight") == 0) y->dep_ffn_out = *t;
    return 0;
}

static int stop_at_third(void *ctx, const pp_lm_tensor *t) {
    (void)t;
    return ++*(int *)ctx == 3 ? 42 : 0;
}

static int finds(const char *name, pp_lm_part part, int depformer, int layer, int index) {
    pp_lm_tensor t;
    return pp_lm_catalog_find(name, &t) == 0 && t.part == part && t.depformer == depformer && t.layer == layer &&
           t.index == index;
}

int main(void) {
    pp_lm_config c;
    char err[256];
    pp_lm_config_default(&c);
    TEST_COND("default configuration", pp_lm_config_validate(&c, "default", err) == 0);
    tally y = {0};
    TEST_COND("walk completes", pp_lm_catalog(&c, count, &y) == 0);
    /* 16 + 2 + 1 top-level, 32 x 6 temporal, 6 x (4 + 16 x 2) depformer, 16 + 16 + 15 + 1 heads */
    TEST_COND("tensor count of the 7B release", y.count == 19 + 32 * 6 + 6 * 36 + 48);
    TEST_COND("norms: out_norm and two per layer", y.norms == 1 + 2 * (32 + 6));
    TEST_COND("every name found as itself", y.mismatched == 0);
    /* 16.74 GB of BF16 in the release (header and norms aside): 8.37 G values */
    TEST_COND("values of the 7B release", y.values > 8300000000LL && y.values < 8400000000LL);
    TEST_COND("temporal in_proj is [3 dim, dim]",
              y.in_proj0.rows == 3 * 4096 && y.in_proj0.cols == 4096 && y.in_proj0.layer == 0 && !y.in_proj0.depformer);
    TEST_COND("depformer step FFN out is [dep_dim, hidden]",
              y.dep_ffn_out.depformer && y.dep_ffn_out.index == 15 && y.dep_ffn_out.layer == 5 &&
                  y.dep_ffn_out.rows == c.dep_dim && y.dep_ffn_out.cols == c.dep_ffn_hidden);
    int seen = 0;
    TEST_COND("walk stops at fn's first nonzero", pp_lm_catalog(&c, stop_at_third, &seen) == 42 && seen == 3);

    int64_t shape[3];
    pp_lm_tensor norm;
    TEST_COND("norm found", pp_lm_catalog_find("depformer.layers.2.norm2.alpha", &norm) == 0);
    TEST_COND("norm is a layer part", pp_lm_part_in_layer(norm.part) && !pp_lm_part_is_linear(norm.part));
    pp_lm_tensor dep0 = y.dep_ffn_out;
    TEST_COND("matrix shape", pp_lm_tensor_shape(&dep0, shape) == 2 && shape[0] == c.dep_dim);

    TEST_COND("emb", finds("emb.15.weight", PP_LM_EMB, 0, -1, 15));
    TEST_COND("depformer_emb", finds("depformer_emb.14.weight", PP_LM_DEP_EMB, 0, -1, 14));
    TEST_COND("temporal gating", finds("transformer.layers.31.gating.linear_in.weight", PP_LM_FFN_IN, 0, 31, -1));
    TEST_COND("in_proj.weight spelling",
              finds("transformer.layers.3.self_attn.in_proj.weight", PP_LM_ATTN_IN, 0, 3, -1));
    TEST_COND("moshi.cpp per-step in_projs",
              finds("depformer.layers.1.self_attn.in_projs.7.weight", PP_LM_ATTN_IN, 1, 1, 7));
    TEST_COND("moshi.cpp per-step out_projs",
              finds("depformer.layers.0.self_attn.out_projs.15.weight", PP_LM_ATTN_OUT, 1, 0, 15));
    TEST_COND("moshi.cpp temporal in_projs.0",
              finds("transformer.layers.2.self_attn.in_projs.0.weight", PP_LM_ATTN_IN, 0, 2, -1));
    TEST_COND("moshi.cpp temporal out_projs.0",
              finds("transformer.layers.5.self_attn.out_projs.0.weight", PP_LM_ATTN_OUT, 0, 5, -1));
    TEST_COND("the depformer's stacked in_proj has no step",
              finds("depformer.layers.4.self_attn.in_proj_weight", PP_LM_ATTN_IN, 1, 4, -1));
    TEST_COND("linear parts", pp_lm_part_is_linear(PP_LM_FFN_OUT) && !pp_lm_part_is_linear(PP_LM_LINEAR));
    TEST_COND("embedding parts", pp_lm_part_is_embedding(PP_LM_DEP_TEXT_EMB) && !pp_lm_part_is_embedding(PP_LM_LINEAR));

    static const char *const not_lm[] = {
        "emb.01.weight",
        "emb..weight",
        "emb.-1.weight",
        "emb.3.weight.absmax",
        "transformer.layers.x.norm1.alpha",
        "transformer.layers.1.gating.2.linear_in.weight",
        "depformer.layers.1.gating.linear_in.weight",
        "encoder.model.0.conv.conv.weight",
        "",
        "text_emb.weight2",
        "emb.99999999999.weight",
    };
    int refused = 0;
    pp_lm_tensor t;
    for (size_t i = 0; i < sizeof not_lm / sizeof not_lm[0]; i++) refused += pp_lm_catalog_find(not_lm[i], &t) != 0;
    TEST_COND("names that are not LM tensors", refused == (int)(sizeof not_lm / sizeof not_lm[0]));
    return test_report();
}
