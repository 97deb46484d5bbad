/* clock: see clock.h. */
#include "base/clock.h"

#include <time.h>

int64_t pp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double pp_now_ms(void) { return (double)pp_now_ns() / 1e6; }
