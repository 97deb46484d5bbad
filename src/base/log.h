/* log: leveled log lines to stderr (or a file reopened on SIGHUP).
 *
 * One line per call: "2026-11-21T16:40:00.123Z level module: message". The level and the
 * sink are the only process-wide state besides the server's stop flag. Thread-safe. */
#ifndef PP_BASE_LOG_H
#define PP_BASE_LOG_H

typedef enum { PP_LOG_DEBUG = 0, PP_LOG_INFO, PP_LOG_WARN, PP_LOG_ERROR } pp_log_level;

void pp_log_set_level(pp_log_level level);
pp_log_level pp_log_get_level(void);
/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int pp_log_parse_level(const char *name);
/* Sends output to path (appending), or back to stderr when path is NULL. 0 or PP_EIO. */
int pp_log_open(const char *path);

void pp_log(pp_log_level level, const char *module, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#define PP_DEBUG(mod, ...) pp_log(PP_LOG_DEBUG, mod, __VA_ARGS__)
#define PP_INFO(mod, ...) pp_log(PP_LOG_INFO, mod, __VA_ARGS__)
#define PP_WARN(mod, ...) pp_log(PP_LOG_WARN, mod, __VA_ARGS__)
#define PP_ERROR(mod, ...) pp_log(PP_LOG_ERROR, mod, __VA_ARGS__)

#endif
