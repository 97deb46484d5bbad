/* personaplex-codec: the Mimi codec on its own, for listening to what it keeps of a voice.
 *
 *   personaplex-codec --weights tokenizer.safetensors encode in.wav out.codes
 *   personaplex-codec --weights tokenizer.safetensors decode in.codes out.wav
 *   personaplex-codec --weights tokenizer.safetensors roundtrip in.wav out.wav [--codes out.codes]
 *
 * Runs the streaming encoder / decoder one 80 ms frame per call, exactly as the server does;
 * see usage() for the codes file format. */
#include "audio/resample.h"
#include "audio/wav.h"
#include "backend/backend.h"
#include "base/err.h"
#include "base/number.h"
#include "io/file.h"
#include "model/mimi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *to) {
    fprintf(to,
            "usage: personaplex-codec --weights FILE [options] COMMAND ARGS\n"
            "commands:\n"
            "  encode IN.wav OUT.codes      WAV -> codes\n"
            "  decode IN.codes OUT.wav      codes -> 24 kHz mono WAV\n"
            "  roundtrip IN.wav OUT.wav     WAV -> codes -> WAV (add --codes FILE to keep the codes)\n"
            "options:\n"
            "  --weights FILE   Mimi weights (tokenizer-e351c8d8-checkpoint125.safetensors)\n"
            "  --config FILE    codec config.json (default: config.json beside the weights when it\n"
            "                   describes a codec, else the released Mimi's values)\n"
            "  --device NAME    cpu (default), cuda or auto\n"
            "  --threads N      CPU threads, up to 1024 (default 0: one per CPU)\n"
            "  --float          write 32-bit float WAV instead of 16-bit PCM\n"
            "  --codes FILE     roundtrip: also write the codes\n"
            "input WAV: PCM 8/16/24/32-bit or float, any channel count (mixed to mono), any rate from\n"
            "1 kHz (resampled to the codec's 24 kHz); the last frame is padded with silence.\n"
            "codes file: text, one 80 ms frame per line, the frame's codes (8 for Mimi: semantic\n"
            "code first, then the acoustic ones) as decimal integers separated by spaces; lines\n"
            "starting with '#' are comments.\n");
}

typedef struct opts {
    const char *weights, *config, *device, *codes_out;
    int threads, float_out;
    const char *cmd, *in, *out;
} opts;

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    const char *pos[3];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--float") == 0) o->float_out = 1;
        else if (strcmp(a, "--weights") == 0 && v) o->weights = argv[++i];
        else if (strcmp(a, "--config") == 0 && v) o->config = argv[++i];
        else if (strcmp(a, "--device") == 0 && v) o->device = argv[++i];
        else if (strcmp(a, "--codes") == 0 && v) o->codes_out = argv[++i];
        else if (strcmp(a, "--threads") == 0 && v) {
            long long n;
            if (!pp_parse_integer(argv[++i], &n) || n < 0 || n > 1024) {
                fprintf(stderr, "personaplex-codec: --threads takes a count in [0, 1024], not '%s'\n", v);
                return -1;
            }
            o->threads = (int)n;
        } else if (a[0] != '-' && n_pos < 3) pos[n_pos++] = a;
        else return -1;
    }
    if (n_pos != 3 || !o->weights) return -1;
    o->cmd = pos[0];
    o->in = pos[1];
    o->out = pos[2];
    if (strcmp(o->cmd, "encode") && strcmp(o->cmd, "decode") && strcmp(o->cmd, "roundtrip")) {
        fprintf(stderr, "personaplex-codec: the command is encode, decode or roundtrip, not '%s'\n", o->cmd);
        return -1;
    }
    return 0;
}

/* ==== codes files ==================================================================== */

/* Through "<path>.tmp" (io/file.h): a failed write leaves no truncated codes file, which would
 * decode as a shorter clip. */
static int write_codes(const char *path, const int32_t *codes, int64_t frames, int nq, char *err) {
    FILE *f;
    int rc = pp_file_create(path, &f, err);
    if (rc) return rc;
    fprintf(f, "# mimi codes: %lld frames of %d codebooks (semantic first), 12.5 frames per second\n",
            (long long)frames, nq);
    for (int64_t fr = 0; fr < frames; fr++)
        for (int q = 0; q < nq; q++) fprintf(f, "%d%c", (int)codes[fr * nq + q], q + 1 < nq ? ' ' : '\n');
    return pp_file_commit(path, f, err);
}

static int read_codes(const char *path, int nq, int bins, int32_t **out, int64_t *frames, char *err) {
    FILE *f = fopen(path, "r");
    if (!f) return pp_fail(err, PP_EIO, "%s: cannot open", path);
    int32_t *codes = NULL;
    int64_t n = 0, cap = 0, line = 0;
    char buf[1024];
    int rc = PP_OK;
    while (!rc && fgets(buf, sizeof buf, f)) {
        line++;
        const char *p = buf + strspn(buf, " \t\r\n");
        if (*p == '#' || *p == 0) continue;
        if (n + 1 > cap) {
            cap = cap ? 2 * cap : 256;
            int32_t *grown = realloc(codes, (size_t)cap * nq * sizeof *codes);
            if (!grown) {
                rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
                break;
            }
            codes = grown;
        }
        for (int q = 0; q < nq && !rc; q++) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= bins)
                rc = pp_fail(err, PP_EFORMAT, "%s:%lld: expected %d codes in [0, %d)", path, (long long)line, nq,
                             bins);
            codes[n * nq + q] = (int32_t)v;
            p = end;
        }
        if (!rc && *(p + strspn(p, " \t\r\n")))
            rc = pp_fail(err, PP_EFORMAT, "%s:%lld: more than %d codes on the line", path, (long long)line, nq);
        n++;
    }
    fclose(f);
    if (!rc && n == 0) rc = pp_fail(err, PP_EFORMAT, "%s: no frames", path);
    if (rc) {
        free(codes);
        return rc;
    }
    *out = codes;
    *frames = n;
    return PP_OK;
}

/* ==== encode / decode ================================================================ */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* in.wav -> 24 kHz mono, zero-padded to whole frames. */
static int load_audio(const char *path, const mimi_config *c, float **pcm, int64_t *frames, int64_t *samples,
                      char *err) {
    pp_wav w;
    int rc = pp_wav_read(path, PP_WAV_MIX, &w, err);
    if (rc) return rc;
    float *res = NULL;
    int64_t n = 0;
    rc = pp_resample(w.pcm, w.frames, w.rate, c->sample_rate, &res, &n, err);
    pp_wav_free(&w);
    if (rc) return rc;
    *frames = (n + c->frame_size - 1) / c->frame_size;
    if (*frames == 0) *frames = 1;
    float *padded = calloc((size_t)(*frames * c->frame_size), sizeof(float));
    if (!padded) {
        free(res);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", path);
    }
    memcpy(padded, res, (size_t)n * sizeof(float));
    free(res);
    *pcm = padded;
    *samples = n;
    return PP_OK;
}

static int encode_all(mimi_state *s, const mimi_config *c, const float *pcm, int64_t frames, int32_t *codes,
                      char *err) {
    int nq = c->quantizer.num_codebooks, rc = PP_OK;
    double t0 = now();
    for (int64_t fr = 0; fr < frames && !rc; fr++)
        rc = pp_mimi_encode_frame(s, pcm + fr * c->frame_size, codes + fr * nq, NULL, err);
    fprintf(stderr, "encoded %lld frames in %.2f s (%.1f ms per frame)\n", (long long)frames, now() - t0,
            1e3 * (now() - t0) / (double)frames);
    return rc;
}

static int decode_all(mimi_state *s, const mimi_config *c, const int32_t *codes, int64_t frames, float *pcm,
                      char *err) {
    int nq = c->quantizer.num_codebooks, rc = PP_OK;
    double t0 = now();
    for (int64_t fr = 0; fr < frames && !rc; fr++)
        rc = pp_mimi_decode_frame(s, codes + fr * nq, pcm + fr * c->frame_size, err);
    fprintf(stderr, "decoded %lld frames in %.2f s (%.1f ms per frame)\n", (long long)frames, now() - t0,
            1e3 * (now() - t0) / (double)frames);
    return rc;
}

static int run(const opts *o, mimi_state *s, const mimi_config *c, char *err) {
    const int nq = c->quantizer.num_codebooks;
    float *pcm = NULL;
    int32_t *codes = NULL;
    int64_t frames = 0, samples = 0;
    int rc;
    if (strcmp(o->cmd, "decode") == 0) {
        rc = read_codes(o->in, nq, c->quantizer.bins, &codes, &frames, err);
        samples = frames * c->frame_size;
    } else {
        rc = load_audio(o->in, c, &pcm, &frames, &samples, err);
        if (!rc && !(codes = malloc((size_t)(frames * nq) * sizeof *codes)))
            rc = pp_fail(err, PP_ENOMEM, "out of memory");
        if (!rc) rc = encode_all(s, c, pcm, frames, codes, err);
    }
    const char *codes_path = strcmp(o->cmd, "encode") == 0 ? o->out : o->codes_out;
    if (!rc && codes_path) rc = write_codes(codes_path, codes, frames, nq, err);
    if (!rc && strcmp(o->cmd, "encode") != 0) {
        float *out = malloc((size_t)(frames * c->frame_size) * sizeof(float));
        if (!out) rc = pp_fail(err, PP_ENOMEM, "out of memory");
        if (!rc) rc = decode_all(s, c, codes, frames, out, err);
        /* A roundtrip keeps the input's length; decoded codes give whole frames. */
        if (!rc)
            rc = pp_wav_write(o->out, out, samples, 1, c->sample_rate, o->float_out ? PP_WAV_FLOAT32 : PP_WAV_PCM16,
                              err);
        free(out);
    }
    free(pcm);
    free(codes);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    /* Past a file-size limit (ulimit -f, systemd's LimitFSIZE) a write fails with EFBIG and is
     * reported, the .tmp removed, instead of SIGXFSZ killing the run and leaving it behind. */
    signal(SIGXFSZ, SIG_IGN);
    char err[PP_ERR_LEN];
    pp_backend *be = NULL;
    mimi_model *m = NULL;
    mimi_state *s = NULL;
    int rc = pp_backend_create(o.device, o.threads, &be, err);
    if (!rc) rc = pp_mimi_open(be, o.weights, o.config, &m, err);
    if (!rc) rc = pp_mimi_state_create(m, &s, err);
    if (!rc) rc = run(&o, s, pp_mimi_get_config(m), err);
    if (rc) fprintf(stderr, "personaplex-codec: %s\n", err);
    pp_mimi_state_destroy(s);
    pp_mimi_close(m);
    pp_backend_destroy(be);
    return rc ? 1 : 0;
}
