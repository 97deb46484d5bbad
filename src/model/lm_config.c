/* lm_config: see lm_config.h. */
#include "model/lm_config.h"

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A config file larger than this is not a config file. */
#define CONFIG_MAX_BYTES (1 << 20)

void pp_lm_config_default(pp_lm_config *c) {
    static const int delays[PP_LM_STREAMS] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
    memset(c, 0, sizeof *c);
    c->dim = 4096;
    c->num_heads = 32;
    c->num_layers = 32;
    c->hidden_scale = 4.125;
    c->context = 3000;
    c->max_period = 10000;
    c->norm_eps = 1e-8f;
    c->n_q = 16;
    c->dep_q = 16;
    c->card = 2048;
    c->text_card = 32000;
    c->existing_text_padding_id = 3;
    memcpy(c->delays, delays, sizeof delays);
    c->dep_dim = 1024;
    c->dep_num_heads = 16;
    c->dep_num_layers = 6;
    c->dep_dim_feedforward = 0; /* 0: int(hidden_scale · dep_dim), as the reference when it is None */
}

/* How a key is handled: stored into an int or double field, or only checked against the one
 * value the engine implements. */
typedef enum { K_INT, K_DOUBLE, K_INT_OR_NULL, K_TRUE, K_FALSE, K_NULL, K_STRING, K_DELAYS, K_UNUSED } key_kind;

typedef struct key_spec {
    const char *key;
    key_kind kind;
    size_t field;        /* offsetof for K_INT/K_DOUBLE/K_INT_OR_NULL */
    const char *strings; /* K_STRING: accepted values separated by '|' */
} key_spec;

#define F(name) offsetof(pp_lm_config, name)
static const key_spec KEYS[] = {
    {"dim", K_INT, F(dim), NULL},
    {"num_heads", K_INT, F(num_heads), NULL},
    {"num_layers", K_INT, F(num_layers), NULL},
    {"hidden_scale", K_DOUBLE, F(hidden_scale), NULL},
    {"context", K_INT, F(context), NULL},
    {"max_period", K_DOUBLE, F(max_period), NULL},
    {"n_q", K_INT, F(n_q), NULL},
    {"dep_q", K_INT, F(dep_q), NULL},
    {"card", K_INT, F(card), NULL},
    {"text_card", K_INT, F(text_card), NULL},
    {"existing_text_padding_id", K_INT, F(existing_text_padding_id), NULL},
    {"depformer_dim", K_INT, F(dep_dim), NULL},
    {"depformer_num_heads", K_INT, F(dep_num_heads), NULL},
    {"depformer_num_layers", K_INT, F(dep_num_layers), NULL},
    {"depformer_dim_feedforward", K_INT_OR_NULL, F(dep_dim_feedforward), NULL},
    {"delays", K_DELAYS, 0, NULL},
    {"causal", K_TRUE, 0, NULL},
    {"depformer_causal", K_TRUE, 0, NULL},
    {"depformer_multi_linear", K_TRUE, 0, NULL},
    {"depformer_weights_per_step", K_TRUE, 0, NULL},
    {"norm_emb", K_FALSE, 0, NULL},
    {"bias_proj", K_FALSE, 0, NULL},
    {"layer_scale", K_NULL, 0, NULL},
    {"depformer_layer_scale", K_NULL, 0, NULL},
    {"depformer_weights_per_step_schedule", K_NULL, 0, NULL},
    {"gating", K_STRING, 0, "silu"},
    {"depformer_gating", K_STRING, 0, "silu"},
    {"norm", K_STRING, 0, "rms_norm_f32|rms_norm"},
    {"positional_embedding", K_STRING, 0, "rope"},
    {"depformer_pos_emb", K_STRING, 0, "none"},
    /* The reference overrides the depformer's context to None (its ring holds dep_q steps) and
     * gives it no positional embedding, so these two have no effect. */
    {"depformer_context", K_UNUSED, 0, NULL},
    {"depformer_max_period", K_UNUSED, 0, NULL},
};
#undef F

static int string_allowed(const char *allowed, const char *s) {
    size_t n = strlen(s);
    for (const char *p = allowed; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int json_int(const pp_json *v, int *out) {
    if (!v || v->type != PP_JSON_NUMBER || !v->is_integer || v->integer < -2147483647 || v->integer > 2147483647)
        return 0;
    *out = (int)v->integer;
    return 1;
}

static int apply_key(const key_spec *k, const pp_json *v, const char *label, pp_lm_config *c, char *err) {
    char *base = (char *)c;
    switch (k->kind) {
    case K_INT:
        if (!json_int(v, (int *)(base + k->field)))
            return pp_fail(err, PP_EINVAL, "%s: key '%s' must be an integer", label, k->key);
        return PP_OK;
    case K_INT_OR_NULL:
        if (v->type == PP_JSON_NULL) {
            *(int *)(base + k->field) = 0;
            return PP_OK;
        }
        if (!json_int(v, (int *)(base + k->field)))
            return pp_fail(err, PP_EINVAL, "%s: key '%s' must be an integer or null", label, k->key);
        return PP_OK;
    case K_DOUBLE:
        if (v->type != PP_JSON_NUMBER) return pp_fail(err, PP_EINVAL, "%s: key '%s' must be a number", label, k->key);
        *(double *)(base + k->field) = v->number;
        return PP_OK;
    case K_TRUE:
    case K_FALSE:
        if (v->type != PP_JSON_BOOL) return pp_fail(err, PP_EINVAL, "%s: key '%s' must be true or false", label, k->key);
        if (v->boolean != (k->kind == K_TRUE))
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s' = %s is not supported (only %s)", label, k->key,
                           v->boolean ? "true" : "false", k->kind == K_TRUE ? "true" : "false");
        return PP_OK;
    case K_NULL:
        if (v->type != PP_JSON_NULL)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s' is not supported (only null)", label, k->key);
        return PP_OK;
    case K_STRING:
        if (v->type != PP_JSON_STRING) return pp_fail(err, PP_EINVAL, "%s: key '%s' must be a string", label, k->key);
        if (!string_allowed(k->strings, v->string))
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key '%s' = \"%s\" is not supported (only %s)", label, k->key,
                           v->string, k->strings);
        return PP_OK;
    case K_DELAYS:
        if (v->type != PP_JSON_ARRAY || v->count != PP_LM_STREAMS)
            return pp_fail(err, PP_EINVAL, "%s: key 'delays' must be an array of %d integers", label, PP_LM_STREAMS);
        for (size_t i = 0; i < v->count; i++)
            if (!json_int(v->items[i], &c->delays[i]))
                return pp_fail(err, PP_EINVAL, "%s: key 'delays' item %zu must be an integer", label, i);
        return PP_OK;
    case K_UNUSED:
        return PP_OK;
    }
    return PP_OK;
}

/* Lists in one log line the keys the engine does not use: those it does not know, and the
 * K_UNUSED ones the reference itself overrides. */
static void log_unused_keys(const pp_json *root, const char *label) {
    char line[1024];
    size_t used = 0;
    int n = 0;
    for (size_t i = 0; i < root->count; i++) {
        int used_key = 0;
        for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0] && !used_key; k++)
            used_key = KEYS[k].kind != K_UNUSED && strcmp(KEYS[k].key, root->keys[i]) == 0;
        if (used_key) continue;
        if (used < sizeof line) {
            int w = snprintf(line + used, sizeof line - used, "%s%s", n ? ", " : "", root->keys[i]);
            if (w > 0) used += (size_t)w;
        }
        n++;
    }
    if (n) PP_INFO("lm", "%s: ignoring %d key(s) the engine does not use: %s", label, n, line);
}

static int ffn_hidden(int dim, int dim_ff) {
    /* The reference's ActivationGating: 21/8·dim when dim_ff is exactly 4·dim, else 2/3 of dim_ff. */
    return dim_ff == 4 * dim ? (21 * dim) / 8 : (2 * dim_ff) / 3;
}

int pp_lm_config_validate(pp_lm_config *c, const char *label, char *err) {
    struct {
        const char *key;
        int value, lo, hi;
    } ranges[] = {
        {"dim", c->dim, 2, 1 << 16},
        {"num_heads", c->num_heads, 1, 1 << 12},
        {"num_layers", c->num_layers, 1, 1024},
        {"context", c->context, 2, 1 << 20},
        {"n_q", c->n_q, 16, 16},
        {"dep_q", c->dep_q, PP_LM_AUDIO_CODEBOOKS, PP_LM_MAX_DEP_Q},
        {"card", c->card, 1, 1 << 20},
        {"text_card", c->text_card, 4, 1 << 24},
        {"existing_text_padding_id", c->existing_text_padding_id, 0, c->text_card - 1},
        {"depformer_dim", c->dep_dim, 2, 1 << 16},
        {"depformer_num_heads", c->dep_num_heads, 1, 1 << 12},
        {"depformer_num_layers", c->dep_num_layers, 1, 1024},
        {"depformer_dim_feedforward", c->dep_dim_feedforward, 0, 1 << 20},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (ranges[i].value < ranges[i].lo || ranges[i].value > ranges[i].hi)
            return pp_fail(err, PP_EINVAL, "%s: key '%s' = %d is out of range [%d, %d]", label, ranges[i].key,
                           ranges[i].value, ranges[i].lo, ranges[i].hi);
    if (c->existing_text_padding_id != PP_LM_TEXT_PAD) /* the generator pads with it, as the released models */
        return pp_fail(err, PP_EUNSUPPORTED, "%s: key 'existing_text_padding_id' = %d: only %d is supported", label,
                       c->existing_text_padding_id, PP_LM_TEXT_PAD);
    if (c->dim % c->num_heads || (c->dim / c->num_heads) % 2)
        return pp_fail(err, PP_EINVAL, "%s: key 'dim' = %d must split into 'num_heads' = %d heads of even size", label,
                       c->dim, c->num_heads);
    if (c->dep_dim % c->dep_num_heads)
        return pp_fail(err, PP_EINVAL, "%s: key 'depformer_dim' = %d is not a multiple of 'depformer_num_heads' = %d",
                       label, c->dep_dim, c->dep_num_heads);
    if (!(c->hidden_scale > 0 && c->hidden_scale < 64))
        return pp_fail(err, PP_EINVAL, "%s: key 'hidden_scale' = %g is out of range (0, 64)", label, c->hidden_scale);
    if (!(c->max_period > 1) || c->max_period > FLT_MAX) /* the device takes it as a float */
        return pp_fail(err, PP_EINVAL, "%s: key 'max_period' = %g must be > 1 and a float", label, c->max_period);
    for (int k = 0; k < PP_LM_STREAMS; k++)
        if (c->delays[k] < 0 || c->delays[k] > 4)
            return pp_fail(err, PP_EUNSUPPORTED, "%s: key 'delays' item %d = %d is out of range [0, 4]", label, k,
                           c->delays[k]);
    int dim_ff = (int)(c->hidden_scale * c->dim);
    int dep_ff = c->dep_dim_feedforward ? c->dep_dim_feedforward : (int)(c->hidden_scale * c->dep_dim);
    c->ffn_hidden = ffn_hidden(c->dim, dim_ff);
    c->dep_ffn_hidden = ffn_hidden(c->dep_dim, dep_ff);
    if (c->ffn_hidden < 1 || c->dep_ffn_hidden < 1)
        return pp_fail(err, PP_EINVAL, "%s: 'hidden_scale' / 'depformer_dim_feedforward' give an empty FFN", label);
    return PP_OK;
}

int pp_lm_config_parse(const char *text, size_t len, const char *label, pp_lm_config *c, char *err) {
    pp_lm_config_default(c);
    pp_json_doc *doc = NULL;
    int rc = pp_json_parse(text, len, &doc, err);
    if (rc) {
        char inner[PP_ERR_LEN];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return pp_fail(err, rc, "%s: %s", label, inner);
    }
    const pp_json *root = pp_json_root(doc);
    if (root->type != PP_JSON_OBJECT) {
        pp_json_free(doc);
        return pp_fail(err, PP_EFORMAT, "%s: the top level must be an object", label);
    }
    const char *dup = pp_json_dup_key(root);
    if (dup) {
        rc = pp_fail(err, PP_EFORMAT, "%s: key '%s' appears twice", label, dup);
        pp_json_free(doc);
        return rc;
    }
    for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0] && !rc; k++) {
        const pp_json *v = pp_json_get(root, KEYS[k].key);
        if (v) rc = apply_key(&KEYS[k], v, label, c, err);
    }
    if (!rc) log_unused_keys(root, label);
    pp_json_free(doc);
    return rc ? rc : pp_lm_config_validate(c, label, err);
}

int pp_lm_config_load(const char *path, pp_lm_config *c, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return pp_fail(err, PP_EIO, "%s: cannot open", path);
    char *buf = malloc(CONFIG_MAX_BYTES);
    if (!buf) {
        fclose(f);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, CONFIG_MAX_BYTES, f);
    int rd_err = ferror(f), too_big = n == CONFIG_MAX_BYTES;
    fclose(f);
    int rc;
    if (rd_err) rc = pp_fail(err, PP_EIO, "%s: read error", path);
    else if (too_big) rc = pp_fail(err, PP_EFORMAT, "%s: larger than %d bytes", path, CONFIG_MAX_BYTES);
    else rc = pp_lm_config_parse(buf, n, path, c, err);
    free(buf);
    return rc;
}

int pp_lm_config_max_delay(const pp_lm_config *c) {
    int m = 0;
    for (int k = 0; k < PP_LM_STREAMS; k++)
        if (c->delays[k] > m) m = c->delays[k];
    return m;
}

const char *pp_lm_config_beside(const char *weights_path, char *buf, size_t cap) {
    const char *slash = strrchr(weights_path, '/');
    int dir = slash ? (int)(slash - weights_path + 1) : 0;
    struct stat sb;
    if (!stat(weights_path, &sb) && S_ISDIR(sb.st_mode)) { /* an ONNX bundle: inside the folder */
        if ((size_t)snprintf(buf, cap, "%s/config.json", weights_path) >= cap) return NULL;
    } else if ((size_t)snprintf(buf, cap, "%.*sconfig.json", dir, weights_path) >= cap) {
        return NULL;
    }
    return access(buf, R_OK) == 0 ? buf : NULL;
}
