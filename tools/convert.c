/* personaplex-convert: writes an ONNX bundle (io/onnx_bundle.h) out as the files the server reads
 * beside a safetensors checkpoint, once, for users who would rather keep those:
 *   OUT/model.safetensors     the LM with the released key names, every weight in the format the
 *                             bundle stores it (dense, or INT8 with its scales and zero points)
 *   OUT/tokenizer-e351c8d8-checkpoint125.safetensors   the codec, from mimi_encoder.onnx and
 *                             mimi_decoder.onnx when the bundle has them (io/onnx_mimi.h)
 *   OUT/voices/NAME.pt        each voices/NAME.bin in the released .pt form (BF16 embeddings)
 *   OUT/system_prompts.bin, OUT/tokenizer_spm_32k_3.model, OUT/config.json   copied when present
 * Then `personaplex-server --weights OUT/model.safetensors` runs as with the bundle.
 *   personaplex-convert BUNDLE_DIR OUT_DIR */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "io/file.h"
#include "io/onnx_bundle.h"
#include "io/onnx_mimi.h"
#include "io/safetensors.h"
#include "io/voice.h"
#include "model/mimi.h"

#define MAX_COPY (1u << 30)

/* The temporary file of the output being written ("" between files): a run stopped by SIGINT,
 * SIGTERM or SIGHUP removes it, as the writers' own failures do, instead of leaving up to a
 * model's size of ".tmp" in OUT_DIR. Changed with the signals blocked, so the handler never
 * reads half a path. */
static char g_writing[4200];

static void remove_partial(int sig) {
    if (g_writing[0]) unlink(g_writing); /* async-signal-safe */
    raise(sig);                          /* the default action again (SA_RESETHAND) */
}

static const int g_stops[] = {SIGINT, SIGTERM, SIGHUP};

static void clean_up_on_signals(void) {
    struct sigaction sa = {.sa_handler = remove_partial, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof g_stops / sizeof *g_stops; i++) sigaction(g_stops[i], &sa, NULL);
}

/* path: the output about to be written, or NULL once it is whole or removed. */
static void writing(const char *path) {
    sigset_t stops, was;
    sigemptyset(&stops);
    for (size_t i = 0; i < sizeof g_stops / sizeof *g_stops; i++) sigaddset(&stops, g_stops[i]);
    sigprocmask(SIG_BLOCK, &stops, &was);
    if (!path || pp_file_tmp_path(path, g_writing, sizeof g_writing, NULL)) g_writing[0] = 0;
    sigprocmask(SIG_SETMASK, &was, NULL);
}

static int make_dir(const char *path, char *err) {
    if (mkdir(path, 0755) && errno != EEXIST)
        return pp_fail(err, PP_EIO, "%s: cannot create: %s", path, strerror(errno));
    return 0;
}

static int write_weights(const st_file *f, const char *path, char *err) {
    st_writer *w;
    writing(path);
    int rc = pp_st_writer_create(path, &w, err);
    for (size_t i = 0; !rc && i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        rc = pp_st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape, err);
    }
    if (!rc) rc = pp_st_writer_metadata(w, "converted_from", pp_st_path(f), err);
    if (!rc) rc = pp_st_writer_begin(w, err);
    for (size_t i = 0; !rc && i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        rc = pp_st_writer_write(w, t->data, t->nbytes, err);
    }
    if (rc) {
        if (w) pp_st_writer_abort(w);
    } else {
        rc = pp_st_writer_finish(w, err);
    }
    writing(NULL);
    return rc;
}

static int write_voices(const char *bundle, const char *out, int *written, char *err) {
    char dir[4200], to[4200], path[4400];
    snprintf(dir, sizeof dir, "%s/voices", bundle);
    char **names;
    size_t count;
    *written = 0;
    struct stat sb;
    if (stat(dir, &sb)) return 0; /* a bundle without voices */
    int rc = pp_voice_list(dir, &names, &count, err);
    snprintf(to, sizeof to, "%s/voices", out);
    if (!rc && count) rc = make_dir(to, err);
    for (size_t i = 0; !rc && i < count; i++) {
        pp_voice v;
        rc = pp_voice_resolve(dir, names[i], path, sizeof path, err);
        if (!rc) rc = pp_voice_load(path, 0, &v, err);
        if (rc) break;
        snprintf(path, sizeof path, "%s/%s.pt", to, names[i]);
        writing(path);
        rc = pp_voice_save_pt(path, &v, err);
        writing(NULL);
        pp_voice_free(&v);
        *written += !rc;
    }
    free(names); /* one allocation, NULL when the listing failed */
    return rc;
}

/* The codec from the bundle's graphs, when it has them (config.json there when it describes one). */
static int write_codec(const char *bundle, const char *out, int *written, char *err) {
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/%s", bundle, PP_ONNX_MIMI_ENCODER);
    snprintf(to, sizeof to, "%s/%s", out, PP_MIMI_FILE);
    *written = 0;
    struct stat sb;
    if (stat(from, &sb)) return 0;
    st_file *f;
    int rc = pp_mimi_weights_open(from, NULL, &f, err);
    if (rc) return rc;
    rc = write_weights(f, to, err);
    *written = !rc;
    pp_st_close(f);
    return rc;
}

/* Copies NAME from the bundle when it is there. */
static int copy_if_present(const char *bundle, const char *out, const char *name, char *err) {
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/%s", bundle, name);
    snprintf(to, sizeof to, "%s/%s", out, name);
    struct stat sb;
    if (stat(from, &sb)) return 0;
    unsigned char *buf;
    size_t len;
    FILE *f;
    int rc = pp_file_read_all(from, MAX_COPY, &buf, &len, err);
    if (rc) return rc;
    writing(to);
    rc = pp_file_create(to, &f, err);
    if (!rc && fwrite(buf, 1, len, f) != len) {
        pp_file_discard(to, f);
        rc = pp_fail(err, PP_EIO, "%s: write failed", to);
    } else if (!rc) {
        rc = pp_file_commit(to, f, err);
    }
    writing(NULL);
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    int help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
    if (argc != 3 || help) {
        fprintf(help ? stdout : stderr, "usage: personaplex-convert BUNDLE_DIR OUT_DIR\n");
        return help ? 0 : 2;
    }
    pp_log_set_level(PP_LOG_WARN);
    /* Past a file-size limit (ulimit -f) a write then fails with EFBIG and the partial .tmp is
     * removed, as on a full disk, instead of SIGXFSZ killing the run and leaving it. */
    signal(SIGXFSZ, SIG_IGN);
    clean_up_on_signals();
    const char *bundle = argv[1], *out = argv[2];
    char err[PP_ERR_LEN], path[4200];
    if (!pp_onnx_bundle_is(bundle)) {
        fprintf(stderr, "personaplex-convert: %s is not an ONNX bundle folder (no %s in it)\n", bundle,
                PP_ONNX_TEMPORAL);
        return 1;
    }
    st_file *f = NULL;
    int voices = 0, codec = 0;
    int rc = make_dir(out, err);
    if (!rc) rc = pp_st_open(bundle, &f, err);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (!rc) rc = write_weights(f, path, err);
    if (!rc) rc = write_voices(bundle, out, &voices, err);
    if (!rc) rc = write_codec(bundle, out, &codec, err);
    static const char *const copied[] = {PP_ONNX_PROMPTS, "tokenizer_spm_32k_3.model", "config.json"};
    for (size_t i = 0; !rc && i < sizeof copied / sizeof *copied; i++)
        rc = copy_if_present(bundle, out, copied[i], err);
    if (rc) {
        fprintf(stderr, "personaplex-convert: %s\n", err);
        pp_st_close(f);
        return 1;
    }
    printf("%s: %zu tensors (%.1f MiB), %d voices%s\n", path, pp_st_count(f), (double)pp_st_size(f) / (1 << 20), voices,
           codec ? ", the codec from its graphs" : "");
    pp_st_close(f);
    return 0;
}
