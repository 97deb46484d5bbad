/* err: see err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int(pp_fail)(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, PP_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *pp_strerror(int code) {
    switch (code) {
    case PP_OK: return "ok";
    case PP_EINVAL: return "invalid input";
    case PP_EIO: return "I/O error";
    case PP_ENOMEM: return "out of memory";
    case PP_EFORMAT: return "bad file format";
    case PP_ENOTFOUND: return "not found";
    case PP_EUNSUPPORTED: return "unsupported";
    case PP_EFULL: return "capacity reached";
    case PP_EDEVICE: return "device error";
    default: return "unknown error";
    }
}
