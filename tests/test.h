/* test: the whole test harness. TEST_COND counts and reports a check; test_report prints
 * the "N passed, N failed" line and gives the exit status. Tensor comparisons report the
 * worst relative error the way the golden runner does: max|a-b| / max|b| over a row. */
#ifndef PP_TEST_H
#define PP_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed;

#define TEST_COND(descr, cond)                                                         \
    do {                                                                               \
        if (cond) {                                                                    \
            test_passed++;                                                             \
        } else {                                                                       \
            test_failed++;                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, descr);            \
        }                                                                              \
    } while (0)

/* Exit 77 tells ctest the test was skipped (SKIP_RETURN_CODE 77). */
#define TEST_SKIP(why)                                   \
    do {                                                 \
        printf("SKIPPED: %s\n", why);                    \
        exit(77);                                        \
    } while (0)

static inline int test_report(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* Lines of the file at path that contain text (0 when it cannot be read): a log's lines. */
static inline int test_lines_with(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, text) != NULL;
    if (f) fclose(f);
    return n;
}

/* 1 when the files at a and b hold the same bytes (0 when either cannot be read). */
static inline int test_files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

/* Removes the test's temporary directory dir and all it holds; 0 when it is gone. The name comes
 * from mkdtemp, so it needs no more quoting than this. */
static inline int test_remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir);
    if (system(cmd) == 0) return 0;
    fprintf(stderr, "could not remove %s\n", dir);
    return -1;
}

/* max|a-b| / max|b| over n values (0 when both are all-zero). */
static inline double test_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fabs((double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}

#endif
