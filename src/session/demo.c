/* demo: generation of the built-in model (see demo.h).
 *
 * Every tensor gets values from its own stream (splitmix64 seeded by a hash of its name), so
 * the files are the same bytes on every run and machine. Initialisation follows what the
 * tensor is, by its name: biases 0; norm scales 1; Mimi's LayerScale 0.01 (its config);
 * codebook usage counts 1 (so codebook rows are the stored sums); embeddings and codebooks
 * N(0, 1); every other matrix N(0, gain / sqrt(fan_in)). An LM matrix in NF2 gets random codes
 * whose decode has that RMS instead (pp_qtensor_random_nf2). The Mimi decoder's last convolution,
 * whose output is the waveform, is then scaled once so that decoding random codes gives an
 * RMS of DEMO_TARGET_RMS: audible, far from clipping. */
#include "session/demo.h"

#include "backend/backend.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/frame.h"
#include "base/log.h"
#include "base/rng.h"
#include "io/file.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "io/tensor_list.h"
#include "io/voice.h"
#include "model/lm_catalog.h"
#include "model/lm_config.h"
#include "model/mimi.h"
#include "text/spm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEMO_VOCAB 200          /* tokenizer pieces: the tiny LM's text_card */
#define DEMO_TARGET_RMS 0.08f
#define DEMO_VOICE_FRAMES 8
#define DEMO_CONTEXT 3000       /* the released model's */
#define DEMO_NF2_GROUP 128      /* the released NF2 file's; halved until it divides a row */

/* dim 64, 2 layers, a 1-layer depformer of width 32: about 3 M parameters. %d: the context. */
static const char g_lm_config[] =
    "{\"dim\": 64, \"text_card\": 200, \"existing_text_padding_id\": 3, \"n_q\": 16, \"dep_q\": 16,\n"
    " \"card\": 2048, \"num_heads\": 4, \"num_layers\": 2, \"hidden_scale\": 4.5, \"causal\": true,\n"
    " \"layer_scale\": null, \"context\": %d, \"max_period\": 10000, \"gating\": \"silu\",\n"
    " \"norm\": \"rms_norm_f32\", \"positional_embedding\": \"rope\", \"depformer_dim\": 32,\n"
    " \"depformer_dim_feedforward\": 96, \"depformer_num_heads\": 2, \"depformer_num_layers\": 1,\n"
    " \"depformer_causal\": true, \"depformer_layer_scale\": null, \"depformer_multi_linear\": true,\n"
    " \"depformer_context\": 16, \"depformer_max_period\": 10000, \"depformer_gating\": \"silu\",\n"
    " \"depformer_pos_emb\": \"none\", \"depformer_weights_per_step\": true,\n"
    " \"delays\": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]}\n";

/* The released size: the loader's default architecture with the context. */
static const char g_released_lm_config[] = "{\"context\": %d}\n";

/* The sizes of tests/data/golden/mimi-synth with the released codec's 250-frame context. */
#define STR_(x) #x
#define STR(x) STR_(x)
static const char g_mimi_config[] =
    "{\"seanet\": {\"channels\": 1, \"dimension\": 32, \"causal\": true, \"n_filters\": 4,\n"
    "  \"n_residual_layers\": 1, \"activation\": \"ELU\", \"compress\": 2, \"dilation_base\": 2,\n"
    "  \"disable_norm_outer_blocks\": 0, \"kernel_size\": 7, \"residual_kernel_size\": 3,\n"
    "  \"last_kernel_size\": 3, \"norm\": \"none\", \"pad_mode\": \"constant\", \"ratios\": [8, 6, 5, 4],\n"
    "  \"true_skip\": true},\n"
    " \"quantizer\": {\"dimension\": 16, \"n_q\": 16, \"bins\": 2048, \"input_dimension\": 32,\n"
    "  \"output_dimension\": 32},\n"
    " \"transformer\": {\"d_model\": 32, \"num_heads\": 2, \"num_layers\": 2, \"causal\": true,\n"
    "  \"layer_scale\": 0.01, \"context\": 250, \"conv_layout\": true, \"max_period\": 10000,\n"
    "  \"gating\": \"none\", \"norm\": \"layer_norm\", \"positional_embedding\": \"rope\",\n"
    "  \"dim_feedforward\": 64, \"input_dimension\": 32, \"output_dimensions\": [32]},\n"
    " \"num_codebooks\": 8, \"sample_rate\": " STR(PP_SAMPLE_RATE) ", \"frame_size\": " STR(PP_FRAME_SAMPLES) "}\n";

static int add_lm_tensor(void *ctx, const pp_lm_tensor *t) {
    int64_t shape[3];
    int ndim = pp_lm_tensor_shape(t, shape);
    pp_tensor_list_add(ctx, t->name, ndim, shape);
    return 0;
}

/* ---- values ------------------------------------------------------------------------------------ */

static double gaussian(uint64_t *s) {
    double u = ((double)(pp_splitmix64(s) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
    double v = pp_splitmix64_unit(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int has(const char *name, const char *part) { return strstr(name, part) != NULL; }

static int ends_with(const char *name, const char *tail) {
    size_t n = strlen(name), t = strlen(tail);
    return n >= t && strcmp(name + n - t, tail) == 0;
}

/* How a tensor starts: a constant (sigma 0) or N(0, sigma^2). */
static void init_rule(const pp_tensor_spec *t, float *value, double *sigma) {
    const char *n = t->name;
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) numel *= t->shape[i];
    *value = 0.0f;
    *sigma = 0.0;
    if (ends_with(n, ".bias")) return;
    if (ends_with(n, "alpha") || (has(n, "norm") && ends_with(n, ".weight")) || has(n, "_initialized") ||
        has(n, "cluster_usage")) {
        *value = 1.0f;
    } else if (has(n, "layer_scale")) {
        *value = 0.01f;
    } else if (has(n, "embedding_sum") || has(n, "emb.") || has(n, "text_emb")) {
        *sigma = 1.0;
    } else {
        /* The heads get a larger gain so sampling has peaked but varied logits. */
        double gain = has(n, "linears.") || has(n, "text_linear") ? 2.0 : 1.0;
        *sigma = gain / sqrt((double)(numel / t->shape[0]));
    }
}

static int is_waveform_conv(const pp_tensor_spec *t) {
    return strncmp(t->name, "decoder.model.", 14) == 0 && t->ndim == 3 && t->shape[0] == 1;
}

/* The NF2 group of an LM tensor written in NF2, or 0 when it stays dense. */
static int nf2_group(const pp_tensor_spec *t, int nf2) {
    if (!nf2 || !pp_quantize_selects(PP_WF_NF2, t->name, t->ndim)) return 0;
    int group = DEMO_NF2_GROUP;
    while (group > 4 && t->shape[1] % group) group /= 2;
    return group;
}

static uint64_t name_seed(const char *name) {
    uint64_t state = 0xcbf29ce484222325ull;
    for (const char *c = name; *c; c++) state = (state ^ (uint8_t)*c) * 0x100000001b3ull;
    return state;
}

static int write_dense(st_writer *w, const pp_tensor_spec *t, st_dtype dtype, float scale, char *err) {
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
    float value;
    double sigma;
    init_rule(t, &value, &sigma);
    uint64_t state = name_seed(t->name);
    float buf[1024];
    uint16_t half[1024];
    int rc = PP_OK;
    for (int64_t o = 0; o < numel && !rc; o += 1024) {
        int n = numel - o < 1024 ? (int)(numel - o) : 1024;
        for (int k = 0; k < n; k++) buf[k] = scale * (sigma > 0 ? (float)(sigma * gaussian(&state)) : value);
        if (dtype == ST_BF16) {
            for (int k = 0; k < n; k++) half[k] = pp_f32_to_bf16(buf[k]);
            rc = pp_st_writer_write(w, half, (size_t)n * sizeof *half, err);
        } else {
            rc = pp_st_writer_write(w, buf, (size_t)n * sizeof *buf, err);
        }
    }
    return rc;
}

static int write_nf2(st_writer *w, const pp_tensor_spec *t, st_dtype dtype, int group, char *err) {
    float value;
    double sigma;
    init_rule(t, &value, &sigma);
    pp_qtensor q;
    int rc = pp_qtensor_random_nf2(t->shape[0], t->shape[1], group, (float)sigma, name_seed(t->name), &q, err);
    if (!rc) rc = pp_quantize_write(w, t->name, dtype, &q, err);
    pp_qtensor_free(&q);
    return rc;
}

/* Writes every tensor of l to path in dtype (F32 or BF16), the LM's matrices in NF2 when nf2 is
 * set; the waveform conv is scaled by out_scale. */
static int write_tensors(const char *path, const pp_tensor_list *l, st_dtype dtype, int nf2, float out_scale,
                         char *err) {
    st_writer *w;
    int rc = pp_st_writer_create(path, &w, err);
    if (rc) return rc;
    for (size_t i = 0; i < l->n && !rc; i++) {
        const pp_tensor_spec *t = &l->v[i];
        int group = nf2_group(t, nf2);
        rc = group ? pp_quantize_declare(w, t->name, dtype, t->shape[0], t->shape[1], PP_WF_NF2, group, err)
                   : pp_st_writer_declare(w, t->name, dtype, t->ndim, t->shape, err);
    }
    if (!rc) rc = pp_st_writer_metadata(w, "personaplex", "demo model: random weights, speaks nonsense", err);
    if (!rc) rc = pp_st_writer_begin(w, err);
    for (size_t i = 0; i < l->n && !rc; i++) {
        const pp_tensor_spec *t = &l->v[i];
        int group = nf2_group(t, nf2);
        rc = group ? write_nf2(w, t, dtype, group, err)
                   : write_dense(w, t, dtype, is_waveform_conv(t) ? out_scale : 1.0f, err);
    }
    if (rc) {
        pp_st_writer_abort(w);
        return rc;
    }
    return pp_st_writer_finish(w, err);
}

/* Replaced whole like the tensor files (pp_file_create): a reader never sees half a file, and
 * an old file's other hard links keep their contents. */
static int write_text(const char *path, const void *data, size_t len, char *err) {
    FILE *f;
    int rc = pp_file_create(path, &f, err);
    if (rc) return rc;
    if (fwrite(data, 1, len, f) != len) {
        pp_file_discard(path, f);
        return pp_fail(err, PP_EIO, "%s: cannot write %zu bytes", path, len);
    }
    return pp_file_commit(path, f, err);
}

static int make_dir(const char *path, char *err) {
    if (mkdir(path, 0755) != 0 && access(path, W_OK) != 0) return pp_fail(err, PP_EIO, "cannot create %s", path);
    return PP_OK;
}

/* RMS of the waveform decoded from random codes (after a few frames of start-up). */
static int measure_rms(const char *mimi_path, float *rms, char *err) {
    pp_backend *be = NULL;
    mimi_model *m = NULL;
    mimi_state *s = NULL;
    int rc = pp_backend_cpu_create(1, &be, err);
    if (!rc) rc = pp_mimi_open(be, mimi_path, NULL, &m, err);
    if (!rc) rc = pp_mimi_state_create(m, &s, err);
    double sum = 0;
    int count = 0;
    uint64_t state = 7;
    float pcm[PP_FRAME_SAMPLES];
    for (int f = 0; f < 12 && !rc; f++) {
        int32_t codes[PP_LM_AUDIO_CODEBOOKS];
        for (int k = 0; k < PP_LM_AUDIO_CODEBOOKS; k++) codes[k] = (int32_t)(pp_splitmix64(&state) % 2048);
        rc = pp_mimi_decode_frame(s, codes, pcm, err);
        for (int i = 0; f >= 4 && !rc && i < PP_FRAME_SAMPLES; i++, count++) sum += (double)pcm[i] * pcm[i];
    }
    pp_mimi_state_destroy(s);
    pp_mimi_close(m);
    pp_backend_destroy(be);
    *rms = count ? (float)sqrt(sum / count) : 0.0f;
    return rc;
}

/* Every preset of the official client's voice menu (docs/protocol.md §3), so any choice there
 * starts a conversation; NATF2 and NATM1 keep seeds 1 and 2 so their prompts stay as before. */
static const char *const g_demo_voices[] = {"NATF2", "NATM1", "NATF0", "NATF1", "NATF3", "NATM0",
                                            "NATM2", "NATM3", "VARF0", "VARF1", "VARF2", "VARF3",
                                            "VARF4", "VARM0", "VARM1", "VARM2", "VARM3", "VARM4"};
#define DEMO_VOICE_COUNT (sizeof g_demo_voices / sizeof g_demo_voices[0])

int pp_demo_voice_known(const char *name) {
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".pt") == 0) n -= 3; /* the voice files' suffix, as --voice allows */
    for (size_t i = 0; i < DEMO_VOICE_COUNT; i++)
        if (strlen(g_demo_voices[i]) == n && strncmp(g_demo_voices[i], name, n) == 0) return 1;
    return 0;
}

static int write_voice(const char *path, const pp_lm_config *c, uint64_t seed, char *err) {
    pp_voice v = {.frames = DEMO_VOICE_FRAMES, .dim = c->dim};
    v.embeddings = malloc((size_t)DEMO_VOICE_FRAMES * (size_t)c->dim * sizeof(float));
    if (!v.embeddings) return pp_fail(err, PP_ENOMEM, "demo voice: out of memory");
    for (int64_t i = 0; i < v.frames * v.dim; i++) v.embeddings[i] = (float)gaussian(&seed);
    /* The ring after a voice phase: text PAD, audio codes of the clip (any valid code here). */
    for (int k = 0; k < PP_VOICE_STREAMS; k++)
        for (int j = 0; j < PP_VOICE_RING; j++) v.cache[k][j] = k == 0 ? 3 : (int64_t)(pp_splitmix64(&seed) % 2048);
    int rc = pp_voice_save_pt(path, &v, err);
    free(v.embeddings);
    return rc;
}

int pp_demo_size_parse(const char *name, pp_demo_size *out) {
    int tiny = strcmp(name, "tiny") == 0, released = strcmp(name, "released") == 0;
    if (!tiny && !released) return -1;
    *out = tiny ? PP_DEMO_TINY : PP_DEMO_RELEASED;
    return 0;
}

pp_model_paths pp_demo_paths(const pp_demo_files *files) {
    return (pp_model_paths){.weights = files->weights,
                            .mimi = files->mimi,
                            .tokenizer = files->tokenizer,
                            .voices_dir = files->voices_dir,
                            .name = "demo"};
}

int pp_demo_write(const char *dir, pp_demo_files *out, char *err) {
    return pp_demo_write_opts(dir, &(pp_demo_opts){.size = PP_DEMO_TINY}, out, err);
}

int pp_demo_write_opts(const char *dir, const pp_demo_opts *opts, pp_demo_files *out, char *err) {
    char path[PP_DEMO_PATH_MAX + 64], config[sizeof g_lm_config + 16];
    pp_tensor_list lm = {0}, codec = {0};
    pp_lm_config lc;
    mimi_config mc;
    void *spm = NULL;
    size_t spm_len = 0;
    const int released = opts->size == PP_DEMO_RELEASED, nf2 = released || opts->lm_nf2;
    const double t0 = pp_now_ms();
    int rc = make_dir(dir, err);
    snprintf(out->weights, sizeof out->weights, "%s/lm.safetensors", dir);
    snprintf(out->mimi, sizeof out->mimi, "%s/mimi/mimi.safetensors", dir);
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s/tokenizer.model", dir);
    snprintf(out->voices_dir, sizeof out->voices_dir, "%s/voices", dir);
    /* The LM: the released size is the loader's default architecture, so its config.json only
     * states the context. */
    int context = opts->lm_context ? opts->lm_context : DEMO_CONTEXT,
        config_len = snprintf(config, sizeof config, released ? g_released_lm_config : g_lm_config, context);
    if (!rc) rc = pp_lm_config_parse(config, (size_t)config_len, "demo LM config", &lc, err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!rc) rc = write_text(path, config, (size_t)config_len, err);
    if (!rc) pp_lm_catalog(&lc, add_lm_tensor, &lm);
    if (!rc && lm.failed) rc = pp_fail(err, PP_ENOMEM, "demo: out of memory");
    if (!rc) rc = write_tensors(out->weights, &lm, ST_BF16, nf2, 1.0f, err);
    /* The codec, written twice: the second time with the waveform calibrated. The released one
     * takes the loader's defaults, which a config.json left by a tiny one would override. */
    snprintf(path, sizeof path, "%s/mimi", dir);
    if (!rc) rc = make_dir(path, err);
    snprintf(path, sizeof path, "%s/mimi/config.json", dir);
    if (released) {
        pp_mimi_config_default(&mc);
        if (!rc && unlink(path) != 0 && errno != ENOENT) rc = pp_fail(err, PP_EIO, "cannot remove %s", path);
    } else {
        if (!rc) rc = write_text(path, g_mimi_config, sizeof g_mimi_config - 1, err);
        if (!rc) rc = pp_mimi_config_load(path, &mc, err);
    }
    if (!rc) rc = pp_mimi_catalog_list(&mc, &codec, err);
    if (!rc) rc = write_tensors(out->mimi, &codec, ST_F32, 0, 1.0f, err);
    float rms = 0.0f;
    if (!rc) rc = measure_rms(out->mimi, &rms, err);
    if (!rc && rms > 0.0f) rc = write_tensors(out->mimi, &codec, ST_F32, 0, DEMO_TARGET_RMS / rms, err);
    /* Tokenizer and voices. */
    if (!rc) rc = pp_spm_make_demo(DEMO_VOCAB, &spm, &spm_len, err);
    if (!rc) rc = write_text(out->tokenizer, spm, spm_len, err);
    if (!rc) rc = make_dir(out->voices_dir, err);
    for (size_t i = 0; !rc && i < DEMO_VOICE_COUNT; i++) {
        snprintf(path, sizeof path, "%s/%s.pt", out->voices_dir, g_demo_voices[i]);
        rc = write_voice(path, &lc, i + 1, err);
    }
    free(spm);
    if (!rc)
        PP_INFO("demo",
                "%s demo model written to %s in %.1f s (%zu + %zu tensors, LM in %s; codec RMS %.3f calibrated "
                "to %.2f)",
                released ? "released-size" : "tiny", dir, (pp_now_ms() - t0) / 1e3, lm.n, codec.n, nf2 ? "NF2" : "BF16",
                rms, DEMO_TARGET_RMS);
    pp_tensor_list_free(&lm);
    pp_tensor_list_free(&codec);
    return rc;
}
