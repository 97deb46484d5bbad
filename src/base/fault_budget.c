/* fault_budget: leaky bucket of recoverable faults (see fault_budget.h). */
#include "base/fault_budget.h"

void pp_fault_budget_init(pp_fault_budget *b, uint64_t burst, uint64_t forgive_every) {
    b->burst = burst;
    b->forgive_every = forgive_every;
    b->debt = 0;
    b->last = 0;
}

int pp_fault_budget_add(pp_fault_budget *b, uint64_t now) {
    /* The debt is kept in clock units so that partial progress between faults still counts. */
    uint64_t cost = b->forgive_every ? b->forgive_every : 1;
    if (b->forgive_every) {
        uint64_t paid = now > b->last ? now - b->last : 0;
        b->debt = b->debt > paid ? b->debt - paid : 0;
    }
    b->last = now > b->last ? now : b->last;
    b->debt = b->debt > UINT64_MAX - cost ? UINT64_MAX : b->debt + cost;
    return (b->debt - 1) / cost >= b->burst; /* debt > burst * cost, without the product */
}
