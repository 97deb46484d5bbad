/* err: error codes and the caller-owned message buffer every fallible function fills.
 *
 * Convention: a function returns 0 on success or a negative PP_E* code, and on failure
 * writes one line into `char err[PP_ERR_LEN]` naming the file, tensor, key or parameter
 * at fault. Library code never exits or aborts on bad input. */
#ifndef PP_BASE_ERR_H
#define PP_BASE_ERR_H

#include "personaplex.h" /* PP_ERR_LEN, the PP_E* codes, pp_strerror */

/* Writes the printf-style message into err (if err is not NULL) and returns code. */
int pp_fail(char *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __clang_analyzer__
/* err.c is out of the static analyzer's sight: this tells it that pp_fail returns its code, so it
 * does not follow an error path as if the call had succeeded. */
#define pp_fail(err, code, ...) (pp_fail((err), (code), __VA_ARGS__), (code))
#endif

#endif
