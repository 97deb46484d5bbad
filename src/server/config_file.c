/* config_file: reads "key = value" lines and hands each to server_options_set. */
#include "server/config_file.h"

#include "base/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Keys that make no sense inside a file: they act on the command line only. */
static const char *const g_cli_only[] = {"config", "help", "version"};

const char *config_file_find_arg(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0) path = argv[i] + 9;
    }
    return path;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Undoes the quoting of a value in place. 0, or -1 when the quotes are unbalanced. */
static int unquote(char *v) {
    size_t n = strlen(v);
    if (!n || v[0] != '"') return strchr(v, '"') ? -1 : 0;
    if (n < 2 || v[n - 1] != '"') return -1;
    char *out = v;
    for (size_t i = 1; i + 1 < n; i++) {
        if (v[i] == '\\' && i + 2 < n && (v[i + 1] == '"' || v[i + 1] == '\\')) i++;
        else if (v[i] == '"') return -1;
        *out++ = v[i];
    }
    *out = '\0';
    return 0;
}

/* One non-comment line: key, optional "= value". */
static int apply_line(server_options *o, char *line, const char *path, int lineno, char *err) {
    char *eq = strchr(line, '=');
    char *value = NULL;
    if (eq) {
        *eq = '\0';
        value = trim(eq + 1);
        if (unquote(value))
            return pp_fail(err, PP_EINVAL, "%s:%d: unbalanced double quotes in the value of '%s'", path, lineno,
                           trim(line));
    }
    char *key = trim(line);
    if (!*key) return pp_fail(err, PP_EINVAL, "%s:%d: a line starts with '=' (no key)", path, lineno);
    if (strncmp(key, "--", 2) == 0)
        return pp_fail(err, PP_EINVAL, "%s:%d: key '%s': write it without the dashes ('%s')", path, lineno, key,
                       key + 2);
    for (size_t i = 0; i < sizeof g_cli_only / sizeof g_cli_only[0]; i++)
        if (strcmp(key, g_cli_only[i]) == 0)
            return pp_fail(err, PP_EINVAL, "%s:%d: key '%s' works on the command line only", path, lineno, key);
    char why[PP_ERR_LEN];
    int rc = server_options_set(o, key, value, why);
    if (rc) return pp_fail(err, rc, "%s:%d: %s", path, lineno, why);
    return PP_OK;
}

int config_file_load(server_options *o, const char *path, char *err) {
    FILE *f = fopen(path, "r");
    if (!f) return pp_fail(err, PP_EIO, "cannot read the configuration file %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    int lineno = 0, rc = PP_OK;
    ssize_t n;
    while (rc == PP_OK && (n = getline(&buf, &cap, f)) >= 0) {
        lineno++;
        if (strlen(buf) != (size_t)n) {
            rc = pp_fail(err, PP_EINVAL, "%s:%d: NUL byte in the line", path, lineno);
            break;
        }
        char *line = trim(buf);
        if (!*line || *line == '#') continue;
        rc = apply_line(o, line, path, lineno, err);
    }
    if (rc == PP_OK && ferror(f)) rc = pp_fail(err, PP_EIO, "%s: read error after line %d", path, lineno);
    free(buf);
    fclose(f);
    return rc;
}
