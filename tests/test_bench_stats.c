/* test_bench_stats: the benchmarks' percentiles on known samples (tools/bench.h). Nearest rank:
 * p90 of 1..10 is 9 (personaplex-bench codec printed the largest, 10, as its p90), p99 of 1..100
 * is 99, p99 of fewer than 100 samples is the largest. */
#include "test.h"

#include "bench.h"

int main(void) {
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = i + 1;
    TEST_COND("p0.9 of 1..10 is 9", bench_nearest_rank(v, 10, 0.9) == 9);
    TEST_COND("p0.5 of 1..10 is 5", bench_nearest_rank(v, 10, 0.5) == 5);
    TEST_COND("p0.99 of 1..10 is 10", bench_nearest_rank(v, 10, 0.99) == 10);
    TEST_COND("p0.9 of 1..50 is 45", bench_nearest_rank(v, 50, 0.9) == 45);
    TEST_COND("p0.99 of 1..100 is 99", bench_nearest_rank(v, 100, 0.99) == 99);
    TEST_COND("p0.9 of 1..100 is 90", bench_nearest_rank(v, 100, 0.9) == 90);
    TEST_COND("p1.0 of 1..100 is 100", bench_nearest_rank(v, 100, 1.0) == 100);
    TEST_COND("p0.99 of 1..1 is 1", bench_nearest_rank(v, 1, 0.99) == 1);
    TEST_COND("p0.5 of 1..3 is 2", bench_nearest_rank(v, 3, 0.5) == 2);
    return test_report();
}
