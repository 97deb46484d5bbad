/* fault_budget: the rate limit on recoverable faults of a client's stream (docs/protocol.md
 * §2.1): a leaky bucket of `burst` faults that forgives one fault per `forgive_every` units of
 * progress on a clock the owner chooses (good Ogg pages, samples of audio). Faults scattered over
 * a long call drain away; a stream of nothing but faults, or of faults faster than the clock
 * forgives them, passes the burst quickly and is cut. With forgive_every 0 nothing is forgiven:
 * more than `burst` faults in all trip it. */
#ifndef PP_BASE_FAULT_BUDGET_H
#define PP_BASE_FAULT_BUDGET_H

#include <stdint.h>

typedef struct pp_fault_budget {
    uint64_t burst;         /* faults tolerated with no progress in between */
    uint64_t forgive_every; /* clock units that forgive one fault (0: never) */
    uint64_t debt;          /* owed clock units: each fault adds forgive_every (or 1) */
    uint64_t last;          /* clock reading at the latest fault */
} pp_fault_budget;

void pp_fault_budget_init(pp_fault_budget *b, uint64_t burst, uint64_t forgive_every);
/* Records one fault at clock reading now (non-decreasing); returns 1 if it passes the budget. */
int pp_fault_budget_add(pp_fault_budget *b, uint64_t now);

#endif
