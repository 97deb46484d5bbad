/* personaplex-inspect: lists a safetensors file's tensors (name, dtype, shape, bytes) in
 * header order and, with --stats, the min/max/mean/rms of every float tensor. A file the
 * reader refuses is reported in one line and gives exit status 1.
 *   personaplex-inspect [--stats] FILE.safetensors... */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "io/safetensors.h"

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

static int usage(int status) {
    fprintf(status ? stderr : stdout, "usage: personaplex-inspect [--stats] FILE.safetensors|FILE.gguf...\n");
    return status;
}

int main(int argc, char **argv) {
    int stats = 0, files = 0, status = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--stats")) stats = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(0);
        else if (argv[i][0] == '-') return usage(2);
        else files++;
    }
    if (!files) return usage(2);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') status |= inspect(argv[i], stats);
    return status;
}
