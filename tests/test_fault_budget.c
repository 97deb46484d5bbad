/* test_fault_budget: the leaky bucket behind the uplink's error limits (base/fault_budget.h).
 * A burst of `burst` faults with no progress passes and the next one trips; progress on the
 * owner's clock forgives one fault per forgive_every units, partial progress included; a clock
 * that goes back is not a refund; with forgive_every 0 the budget is a lifetime count; and
 * clocks and debts near 2^64 saturate instead of wrapping into a fresh budget. */
#include "base/fault_budget.h"
#include "test.h"

/* Faults at clock `now` until one trips: how many were taken before it (at most limit). */
static int faults_taken(pp_fault_budget *b, uint64_t now, int limit) {
    for (int i = 0; i < limit; i++)
        if (pp_fault_budget_add(b, now)) return i;
    return limit;
}

int main(void) {
    pp_fault_budget b;
    pp_fault_budget_init(&b, 16, 128);
    TEST_COND("16 faults back to back pass, the 17th trips", faults_taken(&b, 0, 100) == 16);

    pp_fault_budget_init(&b, 16, 128);
    int tripped = 0;
    for (uint64_t k = 0; k < 10000; k++) tripped |= pp_fault_budget_add(&b, k * 128);
    TEST_COND("one fault per forgiving period never trips (10000 of them)", !tripped);

    pp_fault_budget_init(&b, 16, 128);
    uint64_t passed = 0;
    while (passed < 5000 && !pp_fault_budget_add(&b, passed * 127)) passed++;
    /* each fault after the first leaves one unit of its 128 unpaid: the 15 faults of allowance
     * left after the first last 15 * 128 faults, and the next one trips */
    TEST_COND("faults slightly faster than the clock forgives them trip in the end", passed == 1 + 15 * 128);

    pp_fault_budget_init(&b, 4, 10);
    TEST_COND("a burst of 4 at clock 0", faults_taken(&b, 0, 4) == 4);
    TEST_COND("5 units: half a fault forgiven, not a whole one", pp_fault_budget_add(&b, 5));
    pp_fault_budget_init(&b, 4, 10);
    (void)faults_taken(&b, 0, 4);
    TEST_COND("a whole period forgives exactly one fault",
              !pp_fault_budget_add(&b, 10) && faults_taken(&b, 10, 10) == 0);

    pp_fault_budget_init(&b, 4, 10);
    (void)faults_taken(&b, 1000, 3);
    TEST_COND("a clock that goes back forgives nothing", faults_taken(&b, 500, 10) == 1);

    pp_fault_budget_init(&b, 3, 0);
    int taken = 0;
    for (uint64_t k = 0; k < 10; k++) taken += !pp_fault_budget_add(&b, k * 1000000);
    TEST_COND("forgive_every 0: three faults in a lifetime, however far apart", taken == 3);

    pp_fault_budget_init(&b, 2, UINT64_MAX / 2);
    TEST_COND("a huge period: two faults pass, the debt saturates and the third trips",
              faults_taken(&b, 0, 10) == 2);
    pp_fault_budget_init(&b, 2, 100);
    (void)faults_taken(&b, UINT64_MAX - 50, 2);
    TEST_COND("at the end of the clock the budget still trips", pp_fault_budget_add(&b, UINT64_MAX));
    return test_report();
}
