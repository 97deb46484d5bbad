/* number: see number.h. */
#include "base/number.h"

#include <errno.h>
#include <stdlib.h>

int pp_parse_integer(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) return 0;
    *out = v;
    return 1;
}
