/* err: error codes and the caller-owned message buffer every fallible function fills.
 *
 * Convention: a function returns 0 on success or a negative PP_E* code, and on failure
 * writes one line into `char err[PP_ERR_LEN]` naming the file, tensor, key or parameter
 * at fault. Library code never exits or aborts on bad input. */
#ifndef PP_BASE_ERR_H
#define PP_BASE_ERR_H

#define PP_ERR_LEN 512

enum {
    PP_OK = 0,
    PP_EINVAL = -1,       /* bad argument or malformed input */
    PP_EIO = -2,          /* open/read/write/mmap failed */
    PP_ENOMEM = -3,       /* allocation failed */
    PP_EFORMAT = -4,      /* file content does not follow its format */
    PP_ENOTFOUND = -5,    /* a named tensor, key, voice or file is missing */
    PP_EUNSUPPORTED = -6, /* valid input we do not handle (dtype, option) */
    PP_EFULL = -7,        /* capacity reached (sessions, queue, prompt length) */
    PP_EDEVICE = -8,      /* accelerator error */
};

/* Writes the printf-style message into err (if err is not NULL) and returns code. */
int pp_fail(char *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A short name for a code: "invalid input", "I/O error", ... */
const char *pp_strerror(int code);

#endif
