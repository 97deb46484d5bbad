/* personaplex-voice: clones a voice from a speech clip into a voices/NAME.pt file (the layout
 * of the released voices, so the server and the reference both load it) — docs/model.md §6.1.
 *   personaplex-voice IN.wav OUT.pt --weights LM.safetensors --mimi MIMI.safetensors
 *                     [--config LM_CONFIG.json] [--mimi-config MIMI_CONFIG.json]
 *                     [--device cpu|cuda|auto] [--threads N]
 * The clip's channel 0 is used (as the reference does), resampled to 24 kHz and normalised to
 * -24 LUFS; 10-30 s of clean speech makes a good voice. OUT.pt's file name must be a voice name
 * (io/voice.h) or the server could not select it. Without --config, the config.json beside
 * the weights is used when there is one, as the server does. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/loudness.h"
#include "audio/wav.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/number.h"
#include "io/voice.h"
#include "model/lm.h"
#include "model/mimi.h"
#include "session/voice_clone.h"

typedef struct opts {
    const char *in, *out, *weights, *config, *mimi, *mimi_config, *device;
    int threads;
} opts;

static void usage(FILE *to) {
    fprintf(to, "usage: personaplex-voice IN.wav OUT.pt --weights LM.safetensors --mimi MIMI.safetensors\n"
                    "                         [--config LM_CONFIG.json] [--mimi-config MIMI_CONFIG.json]\n"
                    "                         [--device cpu|cuda|auto] [--threads N]\n");
}

/* Whether w (channel 0 of path) is silent while the file's other channels are not: the clone
 * reads channel 0 alone, as the reference does, and "the clip is silent" would then mislead. */
static int only_channel0_silent(const char *path, const pp_wav *w) {
    if (w->channels < 2) return 0;
    char err[PP_ERR_LEN];
    double channel0, mix;
    pp_wav all = {0};
    int only = pp_loudness_lufs(w->pcm, w->frames, w->rate, &channel0, err) == PP_OK && !isfinite(channel0) &&
               pp_wav_read(path, PP_WAV_MIX, &all, err) == PP_OK &&
               pp_loudness_lufs(all.pcm, all.frames, all.rate, &mix, err) == PP_OK && isfinite(mix);
    pp_wav_free(&all);
    return only;
}

/* 0, or 1 for -h/--help, or -1 for a usage error. */
static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.device = "auto"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **dst = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--weights")) dst = &o->weights;
        else if (!strcmp(a, "--config")) dst = &o->config;
        else if (!strcmp(a, "--mimi")) dst = &o->mimi;
        else if (!strcmp(a, "--mimi-config")) dst = &o->mimi_config;
        else if (!strcmp(a, "--device")) dst = &o->device;
        if (dst || !strcmp(a, "--threads")) {
            if (++i >= argc) return -1;
            if (dst) {
                *dst = argv[i];
                continue;
            }
            long long n;
            if (!pp_parse_integer(argv[i], &n) || n < 0 || n > 1024) {
                fprintf(stderr, "personaplex-voice: --threads takes a count in [0, 1024], not '%s'\n", argv[i]);
                return -1;
            }
            o->threads = (int)n;
        } else if (a[0] == '-' && a[1] == '-') {
            return -1;
        } else if (!o->in) {
            o->in = a;
        } else if (!o->out) {
            o->out = a;
        } else {
            return -1;
        }
    }
    return o->in && o->out && o->weights && o->mimi ? 0 : -1;
}

int main(int argc, char **argv) {
    opts o;
    int help = parse(argc, argv, &o);
    if (help) {
        usage(help > 0 ? stdout : stderr);
        return help > 0 ? 0 : 2;
    }
    size_t n = strlen(o.out);
    if (n < 3 || strcmp(o.out + n - 3, ".pt") != 0) {
        fprintf(stderr, "personaplex-voice: the output name must end in .pt\n");
        return 2;
    }
    /* The server selects a voice by its file name: refuse one it would neither list nor take,
     * before minutes of cloning, rather than leave a voice no conversation can use. */
    const char *slash = strrchr(o.out, '/'), *file = slash ? slash + 1 : o.out;
    if (!pp_voice_stem_valid(file, strlen(file) - 3)) {
        fprintf(stderr,
                "personaplex-voice: '%s' is no voice name the server takes (letters, digits, '_', '-', '.'; at "
                "most %d bytes; not starting with '.' nor ending in .pt or .bin)\n",
                file, PP_VOICE_NAME_MAX);
        return 2;
    }
    /* Past a file-size limit (ulimit -f, systemd's LimitFSIZE) a write fails with EFBIG and is
     * reported, the .tmp removed, instead of SIGXFSZ killing the run and leaving it behind. */
    signal(SIGXFSZ, SIG_IGN);
    char err[PP_ERR_LEN];
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    mimi_model *mimi = NULL;
    pp_wav w = {0};
    pp_voice v = {0};
    double gain = 0;
    int64_t frames = 0;
    int rc = pp_wav_read(o.in, PP_WAV_CHANNEL0, &w, err);
    if (!rc && w.channels > 1) fprintf(stderr, "personaplex-voice: %s has %d channels; using channel 0\n", o.in, w.channels);
    if (!rc) rc = pp_backend_create(o.device, o.threads, &be, err);
    char beside[4200];
    const char *config = o.config ? o.config : pp_lm_config_beside(o.weights, beside, sizeof beside);
    if (!rc) rc = pp_lm_open(be, o.weights, config, &lm, err);
    if (!rc) rc = pp_mimi_open(be, o.mimi, o.mimi_config, &mimi, err);
    if (!rc) rc = pp_voice_clone_audio(lm, mimi, w.pcm, w.frames, w.rate, &v, &gain, &frames, err);
    if (rc == PP_EINVAL && only_channel0_silent(o.in, &w))
        snprintf(err, sizeof err,
                 "%s: channel 0 is silent, another of its %d channels is not: a voice is cloned from channel 0 "
                 "alone (as the reference reads a clip), so put the speech there", o.in, w.channels);
    if (!rc) rc = pp_voice_save_pt(o.out, &v, err);
    if (!rc)
        printf("%s: %.2f s at %d Hz, gain %+.2f dB to -24 LUFS, %lld codec frames -> %s (%lld embeddings of %lld)\n", o.in,
               (double)w.frames / w.rate, w.rate, gain, (long long)frames, o.out, (long long)v.frames, (long long)v.dim);
    else
        fprintf(stderr, "personaplex-voice: %s\n", err);
    pp_voice_free(&v);
    pp_wav_free(&w);
    pp_mimi_close(mimi);
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return rc ? 1 : 0;
}
