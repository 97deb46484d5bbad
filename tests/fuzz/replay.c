/* replay: a main() for a libFuzzer target, so that any compiler can build it and ctest can run
 * it over saved inputs without libFuzzer: every file named on the command line, and every file
 * in every directory named there (a missing directory is empty), goes once through
 * LLVMFuzzerTestOneInput. A crash, a sanitizer report or a leak fails the test like it failed
 * the fuzzer; the target's own checks call abort(). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)n) {
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* no regressions saved for this target yet */
        if (!S_ISDIR(st.st_mode)) {
            bad += replay_file(argv[i]) != 0;
            files++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, NULL, by_name);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], list[k]->d_name);
            if (list[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad += replay_file(path) != 0;
                files++;
            }
            free(list[k]);
        }
        if (n >= 0) free(list);
    }
    printf("%d inputs replayed\n", files);
    printf("%d passed, %d failed\n", files - bad, bad);
    return bad ? 1 : 0;
}
