/* clock: the monotonic clock every timing in the process reads (never the wall clock, which
 * can jump). */
#ifndef PP_BASE_CLOCK_H
#define PP_BASE_CLOCK_H

#include <stdint.h>

int64_t pp_now_ns(void);
double pp_now_ms(void);

#endif
