/* log: see log.h. */
#define _POSIX_C_SOURCE 200809L
#include "base/log.h"

#include "base/err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pp_log_level g_level = PP_LOG_INFO;
static FILE *g_sink; /* NULL means stderr */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void pp_log_set_level(pp_log_level level) { g_level = level; }
pp_log_level pp_log_get_level(void) { return g_level; }

int pp_log_parse_level(const char *name) {
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, level_names[i]) == 0) return i;
    return -1;
}

int pp_log_open(const char *path) {
    FILE *f = NULL;
    if (path && !(f = fopen(path, "a"))) return PP_EIO;
    pthread_mutex_lock(&g_lock);
    if (g_sink) fclose(g_sink);
    g_sink = f;
    pthread_mutex_unlock(&g_lock);
    return PP_OK;
}

/* msg with its control characters as \xNN (into out, 4 x msg's room): messages quote what
 * clients send (an event type, a query value), and a newline or a terminal escape in one must
 * not make a line of its own or rewrite the operator's screen. */
static const char *escape_controls(const char *msg, char *out) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) n += (size_t)sprintf(out + n, "\\x%02x", *p);
        else out[n++] = (char)*p;
    out[n] = '\0';
    return out;
}

void pp_log(pp_log_level level, const char *module, const char *fmt, ...) {
    if (level < g_level) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char line[4 * sizeof msg];
    const char *text = escape_controls(msg, line);
    pthread_mutex_lock(&g_lock);
    FILE *out = g_sink ? g_sink : stderr;
    fprintf(out, "%s.%03ldZ %s %s: %s\n", stamp, ts.tv_nsec / 1000000L, level_names[level], module, text);
    fflush(out);
    pthread_mutex_unlock(&g_lock);
}
