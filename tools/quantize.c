/* personaplex-quantize: converts a BF16/F16/F32 safetensors checkpoint into the NF2+WHT, INT4,
 * bitsandbytes NF4 or INT8 layout (docs/formats.md), tensor by tensor with bounded memory. A
 * progress bar goes to stderr; stdout gets one line per quantized tensor with the cosine of
 * its decode against the source, then the worst and mean cosine. --format bf16 goes the other
 * way: any LM checkpoint the server reads (every layout, GGUF included) is decoded, tensor by
 * tensor along the model's catalogue, into a plain BF16 safetensors file with the release's names.
 * A quantized or GGUF input to the other formats is first decoded that way into a staging file
 * beside the output (beside the input for --report; as large as the BF16 model), which is
 * removed afterwards.
 *   personaplex-quantize IN OUT.safetensors --format nf2|int4|nf4|int8|bf16 [--group N|row] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/number.h"
#include "base/log.h"
#include "io/file.h"
#include "io/quant_file.h"
#include "io/safetensors.h"
#include "model/lm_export.h"

typedef struct {
    int tty, last_pct, last_decile, count;
    double worst, sum;
} ui;

static void on_progress(void *user, uint64_t done, uint64_t total) {
    ui *u = user;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == u->last_pct) return;
    u->last_pct = pct;
    if (u->tty) {
        char bar[41];
        memset(bar, '#', (size_t)(pct * 40 / 100));
        memset(bar + pct * 40 / 100, '.', (size_t)(40 - pct * 40 / 100));
        bar[40] = 0;
        fprintf(stderr, "\r[%s] %3d%%", bar, pct);
    } else if (pct / 10 != u->last_decile) {
        u->last_decile = pct / 10;
        fprintf(stderr, "%d%%\n", pct); /* a log file gets a line every 10% */
    }
}

static void on_report(void *user, const char *name, int64_t rows, int64_t cols, double cosine) {
    ui *u = user;
    if (u->tty) fprintf(stderr, "\r%50s\r", "");
    printf("%-60s [%lld, %lld] cos %.5f\n", name, (long long)rows, (long long)cols, cosine);
    fflush(stdout);
    if (u->count++ == 0 || cosine < u->worst) u->worst = cosine;
    u->sum += cosine;
    u->last_pct = -1; /* redraw the bar under the line */
}

/* What a stopped run leaves: the output's ".tmp" (beside its target when OUT is a symbolic link),
 * the staging file and its ".tmp" (the writer renames a file into place only when whole). Ctrl-C
 * during a 7B run would otherwise leave up to 16.7 GB of staging beside the input. Set before the
 * signals are taken. */
static char g_leftovers[3][4200];

static void remove_leftovers(int sig) {
    for (int i = 0; i < 3; i++)
        if (g_leftovers[i][0]) unlink(g_leftovers[i]); /* async-signal-safe */
    raise(sig);                                       /* the default action again (SA_RESETHAND) */
}

/* out: the output (NULL under --report); staged: the staging file ("" when none). */
static void clean_up_on_signals(const char *out, const char *staged) {
    /* a path too long for them fails the writer's own pp_file_create, with the reason */
    if (out) pp_file_tmp_path(out, g_leftovers[0], sizeof g_leftovers[0], NULL);
    if (staged[0]) {
        snprintf(g_leftovers[1], sizeof g_leftovers[1], "%s", staged);
        pp_file_tmp_path(staged, g_leftovers[2], sizeof g_leftovers[2], NULL);
    }
    struct sigaction sa = {.sa_handler = remove_leftovers, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    const int stops[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) sigaction(stops[i], &sa, NULL);
}

/* True when every tensor of the file is stored dense (F32, F16, BF16) or as integer metadata
 * (a step counter, I16 to U64, copied as stored), i.e. the file is not already in a quantized
 * layout: those keep their codes as U8 or I8 (NF2, INT4, NF4, INT8, the ONNX bundles' blocks)
 * or as a GGUF block type. */
static int is_dense(const char *path, char *err) {
    st_file *f;
    if (pp_st_open(path, &f, err)) return -1;
    int dense = 1;
    for (size_t i = 0; i < pp_st_count(f) && dense; i++) {
        st_dtype dt = pp_st_at(f, i)->dtype;
        dense = dt == ST_F32 || dt == ST_F16 || dt == ST_BF16 || dt == ST_I16 || dt == ST_U16 || dt == ST_I32 ||
                dt == ST_U32 || dt == ST_I64 || dt == ST_U64;
    }
    pp_st_close(f);
    return dense;
}

/* To stdout with status 0 when asked for (-h, --help), else to stderr with 2. */
static int usage(FILE *to) {
    fprintf(to, "usage: personaplex-quantize IN OUT.safetensors --format nf2|int4|nf4|int8|bf16 [--group N|row]\n"
                    "       personaplex-quantize IN --format nf2|int4|nf4|int8 [--group N|row] --report\n"
                    "  (--report: each tensor's and the model's cosine to the source, no OUT written; a\n"
                    "   quantized or GGUF IN is still staged as BF16 beside IN, and removed)\n"
                    "  nf2   NF2+WHT 2-bit (turbo2bit layout), every 2-D weight, group 128\n"
                    "  int4  symmetric INT4 (personaplex-7b-nf4 layout), every 2-D weight, group 64\n"
                    "  nf4   bitsandbytes NF4 with double quantization, temporal transformer linears, block 64\n"
                    "  int8  bitsandbytes Linear8bitLt layout, every 2-D weight, one absmax per block of 128\n"
                    "        inputs (--group N), or per row as bitsandbytes stores it (--group row)\n"
                    "  bf16  any checkpoint the server reads (a quantized layout, GGUF) decoded to dense BF16\n"
                    "        with the release's tensor names (a config.json beside IN sets the shapes)\n");
    return to == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *format = NULL;
    int report_only = 0;
    pp_quantize_opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return usage(stdout);
        if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            format = argv[++i];
        } else if (strcmp(argv[i], "--report") == 0) {
            report_only = 1;
        } else if (strcmp(argv[i], "--group") == 0 && i + 1 < argc && strcmp(argv[i + 1], "row") == 0) {
            o.group = PP_QUANTIZE_ROW;
            i++;
        } else if (strcmp(argv[i], "--group") == 0 && i + 1 < argc) {
            long long g;
            if (!pp_parse_integer(argv[++i], &g) || g <= 0 || g > 1 << 16) {
                fprintf(stderr, "personaplex-quantize: --group takes a size in [1, 65536] or 'row', not '%s'\n",
                        argv[i]);
                return 2;
            }
            o.group = (int)g;
        } else if (argv[i][0] == '-') {
            return usage(stderr);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return usage(stderr);
        }
    }
    if (!in || !format || (!out && !report_only) || (out && report_only)) return usage(stderr);
    if (report_only && strcmp(format, "bf16") == 0) {
        fprintf(stderr, "personaplex-quantize: --report measures nf2, int4, nf4 or int8; --format bf16 needs OUT\n");
        return 2;
    }
    if (strcmp(format, "nf2") == 0)
        o.fmt = PP_WF_NF2;
    else if (strcmp(format, "int4") == 0)
        o.fmt = PP_WF_INT4;
    else if (strcmp(format, "nf4") == 0)
        o.fmt = PP_WF_NF4;
    else if (strcmp(format, "int8") == 0)
        o.fmt = PP_WF_INT8;
    else if (strcmp(format, "bf16") != 0) {
        fprintf(stderr, "personaplex-quantize: --format is nf2, int4, nf4, int8 or bf16, not '%s'\n", format);
        return 2;
    }
    char err[PP_ERR_LEN];
    /* Past a file-size limit (ulimit -f) a write then fails with EFBIG, reported and cleaned up
     * like a full disk, instead of SIGXFSZ killing the run with its .tmp files left behind. */
    signal(SIGXFSZ, SIG_IGN);
    clean_up_on_signals(out, "");
    if (strcmp(format, "bf16") == 0) {
        pp_log_set_level(PP_LOG_WARN);
        int layers = 0;
        if (!pp_lm_export_bf16(in, out, &layers, err)) {
            printf("%s: %d temporal layers decoded to BF16 in %s\n", in, layers, out);
            return 0;
        }
        fprintf(stderr, "personaplex-quantize: %s\n", err);
        return 1;
    }
    /* A checkpoint in another layout is decoded to BF16 beside the output first (as --format bf16):
     * an OUT that cannot be written as a file would only fail after that (minutes, and the BF16
     * model's size on disk for a 7B), so a folder is refused now. */
    struct stat out_stat;
    if (out && stat(out, &out_stat) == 0 && S_ISDIR(out_stat.st_mode)) {
        fprintf(stderr, "personaplex-quantize: %s is a folder; OUT names the file to write\n", out);
        return 1;
    }
    char staged[4200] = "";
    int dense = is_dense(in, err), layers;
    if (dense < 0) {
        fprintf(stderr, "personaplex-quantize: %s\n", err);
        return 1;
    }
    if (!dense) {
        snprintf(staged, sizeof staged, "%s.bf16-staging", out ? out : in);
        clean_up_on_signals(out, staged);
        fprintf(stderr, "personaplex-quantize: %s is not dense; decoding it to BF16 in %s first\n", in, staged);
        if (pp_lm_export_bf16(in, staged, &layers, err)) {
            fprintf(stderr, "personaplex-quantize: %s\n", err);
            return 1;
        }
        in = staged;
    }
    ui u = {.tty = isatty(2), .last_pct = -1, .last_decile = -1};
    o.progress = on_progress;
    o.report = on_report;
    o.user = &u;
    int rc = report_only ? pp_quantize_report(in, &o, err) : pp_quantize_file(in, out, &o, err);
    if (staged[0]) unlink(staged);
    if (u.tty) fprintf(stderr, "\n");
    if (rc) {
        fprintf(stderr, "personaplex-quantize: %s\n", err);
        return 1;
    }
    if (u.count)
        printf("%d tensors %s: worst cos %.5f, mean %.5f\n", u.count, report_only ? "measured" : "quantized", u.worst,
               u.sum / u.count);
    return 0;
}
