/* fuzz_config: the server's configuration file (server/config_file.c) and command line
 * (server/options.c), the two doors into one option table. The input is a whole file, loaded
 * onto fresh options: an error must name the file. Its first line is also tried both ways, as
 * the file line "key = value" and as the argument "--key=value": where the line is plain (no
 * quotes, no surrounding blanks, no '#', not a command-line-only key), the file and the command
 * line must agree on taking it or refusing it, as config_file.h promises ("a config key is just
 * the long name without its dashes"). */
#include "base/err.h"
#include "base/log.h"
#include "server/config_file.h"
#include "server/options.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *scratch_path(void) {
    static char path[] = "/tmp/fuzz_config_XXXXXX";
    static int made;
    if (!made) {
        int fd = mkstemp(path);
        if (fd < 0) abort();
        close(fd);
        made = 1;
    }
    return path;
}

static int load_text(const char *text, size_t len, char *err) {
    const char *path = scratch_path();
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f)) abort();
    server_options o;
    if (server_options_init(&o, err)) abort();
    int rc = config_file_load(&o, path, err);
    server_options_free(&o);
    if (rc && strncmp(err, path, strlen(path)) != 0) {
        fprintf(stderr, "a configuration error does not name the file: %s\n", err);
        abort();
    }
    return rc;
}

/* A line both doors read the same way: no quote, comment, blank at either end of key or value,
 * control character or NUL, and a key that is not the command line's alone. */
static int plain_line(const char *line) {
    if (!*line || strpbrk(line, "\"#\\")) return 0;
    for (const char *p = line; *p; p++)
        if (iscntrl((unsigned char)*p) || *p == ' ') return 0;
    if (line[0] == '-' || line[0] == '=') return 0;
    static const char *const cli_only[] = {"config", "help", "version"};
    size_t key_len = strcspn(line, "=");
    for (size_t i = 0; i < sizeof cli_only / sizeof *cli_only; i++)
        if (strlen(cli_only[i]) == key_len && !strncmp(line, cli_only[i], key_len)) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    char err[PP_ERR_LEN];
    load_text((const char *)data, size, err);

    size_t line_len = 0;
    while (line_len < size && data[line_len] != '\n' && data[line_len] != '\0') line_len++;
    char *line = malloc(line_len + 3);
    memcpy(line, data, line_len);
    line[line_len] = '\0';
    if (plain_line(line)) {
        int file_rc = load_text(line, line_len, err);
        char *arg = malloc(line_len + 3);
        snprintf(arg, line_len + 3, "--%s", line);
        char prog[] = "personaplex-server", *argv[] = {prog, arg, NULL};
        server_options o;
        if (server_options_init(&o, err)) abort();
        /* a bare non-flag key takes the next argument on the command line: there is none */
        int cli_rc = server_options_parse(&o, 2, argv, err);
        server_options_free(&o);
        if (!file_rc != !cli_rc) {
            fprintf(stderr, "'%s': the file %s it, the command line %s it\n", line, file_rc ? "refuses" : "takes",
                    cli_rc ? "refuses" : "takes");
            abort();
        }
        free(arg);
    }
    free(line);
    return 0;
}
