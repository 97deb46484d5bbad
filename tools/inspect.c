/* personaplex-inspect: lists a safetensors or GGUF file's tensors (name, dtype, shape, bytes)
 * in header order and, with --stats, the min/max/mean/rms of every float tensor. With --lm it
 * checks the file as an LM checkpoint instead: every tensor of the catalogue (model/lm_catalog.h)
 * under the configuration the server would use (the config.json beside the file, or --config,
 * or the defaults fitted to the file) is looked up and its layout checked, as loading would,
 * and a table per part says which formats the file stores. A file the reader refuses, or an
 * LM checkpoint that would not load, is reported and gives exit status 1.
 *   personaplex-inspect [--stats] FILE...
 *   personaplex-inspect --lm [--config config.json] FILE... */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "io/weight.h"
#include "model/lm.h"
#include "model/lm_catalog.h"

/* Streams the tensor through a fixed buffer so huge tensors need no big allocation. */
static int print_stats(const st_file *f, const st_tensor *t, char *err) {
    enum { CHUNK = 4096 };
    static float buf[CHUNK];
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    int64_t nonfinite = 0;
    for (int64_t at = 0; at < t->numel; at += CHUNK) {
        int64_t n = t->numel - at < CHUNK ? t->numel - at : CHUNK;
        int rc = pp_st_load_f32(f, t, at, n, buf, err);
        if (rc) return rc;
        for (int64_t i = 0; i < n; i++) {
            double v = buf[i];
            if (!isfinite(v)) {
                nonfinite++;
                continue;
            }
            sum += v;
            sq += v * v;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    }
    int64_t n = t->numel - nonfinite;
    if (n > 0)
        printf("    min %.6g  max %.6g  mean %.6g  rms %.6g", lo, hi, sum / (double)n, sqrt(sq / (double)n));
    else
        printf("    (no finite values)");
    if (nonfinite) printf("  non-finite %lld", (long long)nonfinite);
    printf("\n");
    return 0;
}

static int is_float(st_dtype dt) { return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16; }

static int inspect(const char *path, int stats) {
    char err[PP_ERR_LEN];
    st_file *f;
    if (pp_st_open(path, &f, err)) {
        fprintf(stderr, "personaplex-inspect: %s\n", err);
        return 1;
    }
    size_t total = 0;
    printf("%s: %zu tensors\n", path, pp_st_count(f));
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        char shape[160] = "[";
        size_t len = 1;
        for (int d = 0; d < t->ndim && len < sizeof(shape); d++)
            len += (size_t)snprintf(shape + len, sizeof(shape) - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (len < sizeof(shape)) snprintf(shape + len, sizeof(shape) - len, "]");
        printf("  %-60s %-6s %-24s %12zu\n", t->name, pp_st_dtype_name(t->dtype), shape, t->nbytes);
        total += t->nbytes;
        if (stats && is_float(t->dtype) && print_stats(f, t, err)) {
            fprintf(stderr, "personaplex-inspect: %s\n", err);
            pp_st_close(f);
            return 1;
        }
    }
    printf("  total %zu bytes of tensor data\n", total);
    pp_st_close(f);
    return 0;
}

/* ---- --lm: the file against the LM tensor catalogue ---- */

typedef struct lm_tally {
    const st_file *f;
    int steps;                                     /* depformer steps */
    int tensors[PP_LM_PART_COUNT][2][PP_WF_COUNT]; /* [part][depformer][format] */
    uint64_t bytes;
    int found, missing, refused;
} lm_tally;

#define MISSING_LISTED 8 /* names listed; the rest are counted */

static void note_missing(lm_tally *y, const char *name) {
    if (++y->missing <= MISSING_LISTED)
        printf("  missing: %s\n", name);
    else if (y->missing == MISSING_LISTED + 1)
        printf("  missing: ... (the count below has them all)\n");
}

static pp_wformat scale_format(st_dtype dt) {
    return dt == ST_BF16 ? PP_WF_BF16 : dt == ST_F16 ? PP_WF_F16 : PP_WF_F32;
}

/* A catalogued tensor as loading finds it: a norm scale with its length, a matrix in any
 * layout with its shape (moshi.cpp's per-step projections stand for the stacked one). */
static int check_tensor(void *ctx, const pp_lm_tensor *t) {
    lm_tally *y = ctx;
    char err[PP_ERR_LEN] = "", name[256];
    if (t->ndim == 3) {
        const st_tensor *a = pp_st_find(y->f, t->name);
        if (!a)
            note_missing(y, t->name);
        else if (a->numel != t->cols)
            y->refused++, printf("  refused: %s has %lld values, expected %lld\n", t->name, (long long)a->numel,
                                 (long long)t->cols);
        else
            y->found++, y->tensors[t->part][t->depformer][scale_format(a->dtype)]++, y->bytes += a->nbytes;
        return 0;
    }
    pp_weight w;
    int64_t rows = t->rows;
    const char *load = t->name;
    if ((t->part == PP_LM_ATTN_IN || t->part == PP_LM_ATTN_OUT) && !pp_weight_exists(y->f, t->name)) {
        pp_lm_step_projection_name(t, 0, name, sizeof name);
        if (pp_weight_exists(y->f, name)) /* step 0's stands for all */
            load = name, rows = t->depformer ? t->rows / y->steps : t->rows;
    }
    int rc = pp_weight_load(y->f, load, rows, t->cols, &w, err);
    if (rc == PP_ENOTFOUND)
        note_missing(y, t->name);
    else if (rc)
        y->refused++, printf("  refused: %s\n", err);
    else
        y->found++, y->tensors[t->part][t->depformer][w.fmt]++, y->bytes += pp_weight_bytes(&w);
    return 0;
}

static int inspect_lm(const char *path, const char *config) {
    char err[PP_ERR_LEN], beside[4200];
    st_file *f;
    pp_lm_config c;
    if (!config) config = pp_lm_config_beside(path, beside, sizeof beside);
    if (pp_st_open(path, &f, err) || pp_lm_config_for(config, f, &c, err)) {
        fprintf(stderr, "personaplex-inspect: %s\n", err);
        pp_st_close(f); /* opened when the config was what failed */
        return 1;
    }
    lm_tally y = {.f = f, .steps = c.dep_q};
    printf("%s: LM checkpoint, config %s: %d temporal layers, %d depformer layers, %d depformer steps\n", path,
           config ? config : "defaults fitted to the file", c.num_layers, c.dep_num_layers, c.dep_q);
    pp_lm_catalog(&c, check_tensor, &y);
    if (pp_lm_check_extra(&c, f, err)) y.refused++, printf("  refused: %s\n", err); /* as loading would */
    printf("  %-14s %-10s %s\n", "part", "stack", "tensors by format");
    for (int p = 0; p < PP_LM_PART_COUNT; p++)
        for (int dep = 0; dep < 2; dep++) {
            char line[256] = "";
            size_t len = 0;
            for (int fmt = 0; fmt < PP_WF_COUNT; fmt++)
                if (y.tensors[p][dep][fmt] && len < sizeof line)
                    len += (size_t)snprintf(line + len, sizeof line - len, "%s %d  ", pp_wformat_name((pp_wformat)fmt),
                                            y.tensors[p][dep][fmt]);
            if (len)
                printf("  %-14s %-10s %s\n", pp_lm_part_name((pp_lm_part)p),
                       pp_lm_part_in_layer((pp_lm_part)p) ? (dep ? "depformer" : "temporal") : "", line);
        }
    printf("  %d catalogued tensors load (%.2f GiB); %d missing; %d refused\n", y.found, (double)y.bytes / (1 << 30),
           y.missing, y.refused);
    pp_st_close(f);
    return y.missing || y.refused ? 1 : 0;
}

static int usage(int status) {
    fprintf(status ? stderr : stdout, "usage: personaplex-inspect [--stats] FILE.safetensors|FILE.gguf...\n"
                                      "       personaplex-inspect --lm [--config config.json] FILE...\n");
    return status;
}

int main(int argc, char **argv) {
    int stats = 0, lm = 0, files = 0, status = 0;
    const char *config = NULL;
    pp_log_set_level(PP_LOG_WARN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--stats")) stats = 1;
        else if (!strcmp(argv[i], "--lm"))
            lm = 1;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(0);
        else if (argv[i][0] == '-') return usage(2);
        else files++;
    }
    if (!files || (config && !lm)) return usage(2);
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            i += !strcmp(argv[i], "--config");
            continue;
        }
        status |= lm ? inspect_lm(argv[i], config) : inspect(argv[i], stats);
    }
    return status;
}
