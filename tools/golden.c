/* personaplex-golden: replays the reference's golden cases on an engine backend and checks
 * every output against them.
 *
 *   personaplex-golden CASE_DIR... [--device cpu|cuda] [--voice FILE] [--threads N] [--prompt-cache]
 *
 * A case directory named lm-* runs the language model (golden_lm.c), mimi-* the codec
 * (golden_mimi.c). One summary line per case; the exit status is 0 only when every case is
 * within tolerance, 1 when a comparison failed, 2 when a case could not run. */
#include "golden.h"

#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int golden_backend(const golden_opts *o, pp_backend **out, char *err) {
    return pp_backend_create(o->device ? o->device : "cpu", o->threads, out, err);
}

int golden_exists(const char *dir, const char *name) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

int golden_open(const char *dir, const char *name, st_file **out, char *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return pp_fail(err, PP_EINVAL, "%s: path too long", dir);
    return pp_st_open(path, out, err);
}

static int find_sized(const st_file *f, const char *name, int64_t want, const st_tensor **out, char *err) {
    const st_tensor *t = pp_st_find(f, name);
    if (!t) return pp_fail(err, PP_ENOTFOUND, "%s: tensor '%s' is missing", pp_st_path(f), name);
    if (want >= 0 && t->numel != want)
        return pp_fail(err, PP_EFORMAT, "%s: tensor '%s' has %lld values, expected %lld", pp_st_path(f), name,
                       (long long)t->numel, (long long)want);
    *out = t;
    return PP_OK;
}

/* Reads tensor name through load (pp_st_load_f32 or pp_st_load_i64) into a new buffer of esize-byte items. */
typedef int (*load_fn)(const st_file *, const st_tensor *, int64_t, int64_t, void *, char *);

static int load_all(const st_file *f, const char *name, int64_t want, size_t esize, load_fn load, void **out,
                    int64_t *numel, char *err) {
    const st_tensor *t = NULL;
    *out = NULL;
    int rc = find_sized(f, name, want, &t, err);
    if (rc) return rc;
    void *buf = malloc((size_t)(t->numel ? t->numel : 1) * esize);
    if (!buf) return pp_fail(err, PP_ENOMEM, "%s: out of memory", name);
    if ((rc = load(f, t, 0, t->numel, buf, err))) {
        free(buf);
        return rc;
    }
    *out = buf;
    if (numel) *numel = t->numel;
    return PP_OK;
}

static int load_f32(const st_file *f, const st_tensor *t, int64_t first, int64_t n, void *dst, char *err) {
    return pp_st_load_f32(f, t, first, n, dst, err);
}

static int load_i64(const st_file *f, const st_tensor *t, int64_t first, int64_t n, void *dst, char *err) {
    return pp_st_load_i64(f, t, first, n, dst, err);
}

int golden_load_f32(const st_file *f, const char *name, int64_t want, float **out, int64_t *numel, char *err) {
    return load_all(f, name, want, sizeof(float), load_f32, (void **)out, numel, err);
}

int golden_load_i64(const st_file *f, const char *name, int64_t want, int64_t **out, int64_t *numel, char *err) {
    return load_all(f, name, want, sizeof(int64_t), load_i64, (void **)out, numel, err);
}

double golden_rel_err(const float *a, const float *b, size_t rows, size_t cols) {
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (size_t i = 0; i < cols; i++) {
            double x = a[r * cols + i], y = b[r * cols + i];
            double d = fabs(x - y);
            if (d != d) d = INFINITY;
            if (d > num) num = d;
            if (fabs(y) > den) den = fabs(y);
        }
        double e = den > 0 ? num / den : num;
        if (e > worst) worst = e;
    }
    return worst;
}

static const char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *p = path + n;
    while (p > path && p[-1] != '/') p--;
    return p;
}

static int run_case(const char *dir, const golden_opts *o) {
    char err[PP_ERR_LEN] = "";
    const char *name = base_name(dir);
    int rc;
    if (strncmp(name, "lm-", 3) == 0) {
        rc = golden_lm_run(dir, o, err);
    } else if (strncmp(name, "mimi-", 5) == 0) {
#ifdef PP_GOLDEN_MIMI
        rc = golden_mimi_run(dir, o, err);
#else
        rc = pp_fail(err, PP_EUNSUPPORTED, "this build has no codec golden runner (tools/golden_mimi.c)");
#endif
    } else {
        rc = pp_fail(err, PP_EINVAL, "case directory name must start with lm- or mimi-");
    }
    if (rc < 0) {
        printf("%s: ERROR %s\n", dir, err);
        return 2;
    }
    return rc ? 1 : 0;
}

static void usage(FILE *to) {
    fprintf(to,
            "usage: personaplex-golden CASE_DIR... [--device cpu|cuda] [--voice FILE] [--threads N] [--prompt-cache]\n"
            "                          [--log-level debug|info|warn|error]   (default warn)\n");
}

int main(int argc, char **argv) {
    golden_opts o = {.device = "cpu", .voice = NULL, .threads = 0};
    const char **cases = calloc((size_t)argc, sizeof *cases);
    int n = 0, log_level = PP_LOG_WARN;
    if (!cases) return 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            o.device = argv[++i];
        } else if (strcmp(argv[i], "--voice") == 0 && i + 1 < argc) {
            o.voice = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            o.threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--prompt-cache") == 0) {
            o.prompt_cache = 1;
        } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc && pp_log_parse_level(argv[i + 1]) >= 0) {
            log_level = pp_log_parse_level(argv[++i]);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout); /* asked for: a request, not an error */
            free(cases);
            return 0;
        } else if (argv[i][0] == '-') {
            usage(stderr);
            free(cases);
            return 2;
        } else {
            cases[n++] = argv[i];
        }
    }
    if (n == 0) {
        usage(stderr);
        free(cases);
        return 2;
    }
    pp_log_set_level((pp_log_level)log_level);
    int worst = 0;
    for (int i = 0; i < n; i++) {
        int r = run_case(cases[i], &o);
        if (r > worst) worst = r;
    }
    free(cases);
    return worst;
}
