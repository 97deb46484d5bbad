/* test_pool: pp_pool_run runs every task of a job exactly once, with that job's function and
 * context, and returns only after the last one finished; across thousands of jobs of 1 to 40
 * tasks, on pools smaller and larger than the machine (where workers often arrive after their
 * job's tasks are all taken, and must not run a task of the next job), with two threads
 * sharing one pool, and with no pool. And the caller waits for tasks, not for workers: with
 * the whole process on one core and the workers in SCHED_IDLE (they run only when that core
 * has nothing else to do), the caller runs every task itself and must not sleep once; a pool
 * that waits for each worker to look at each job sleeps on every job (on a shared CPU each of
 * those waits can be a scheduler time slice, milliseconds, hundreds of times a frame). A pool
 * whose threads cannot start is refused with the reason; 0 threads follow the affinity mask. */
#define _GNU_SOURCE
#include "base/err.h"
#include "base/pool.h"
#include "test.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define JOBS 4000
#define MAX_TASKS 40

typedef struct job {
    int id, n_tasks;
    const atomic_int *current; /* the caller's job in flight: a task of a finished job sees another id */
    atomic_int runs[MAX_TASKS];
    atomic_int stray; /* tasks run while another job was in flight */
} job;

static void task(void *ctx, int t) {
    job *j = ctx;
    if (atomic_load(j->current) != j->id || t < 0 || t >= j->n_tasks) atomic_fetch_add(&j->stray, 1);
    /* Now and then a slow task: a call that returned early would find its count still 0. */
    if (t == 0 && j->id % 64 == 0) nanosleep(&(struct timespec){.tv_nsec = 300000}, NULL);
    if (t >= 0 && t < MAX_TASKS) atomic_fetch_add(&j->runs[t], 1);
}

typedef struct caller {
    pp_pool *pool;
    int first_id, bad_runs, stray;
} caller;

static void *run_jobs(void *arg) {
    caller *c = arg;
    atomic_int current;
    static job jobs[2]; /* one per caller; reused, so a late worker finds a live object */
    job *j = &jobs[c->first_id != 0];
    for (int k = 0; k < JOBS; k++) {
        int id = c->first_id + k + 1;
        j->id = id;
        j->n_tasks = 1 + (k * 7) % MAX_TASKS;
        j->current = &current;
        for (int t = 0; t < MAX_TASKS; t++) atomic_store(&j->runs[t], 0);
        atomic_store(&j->stray, 0);
        atomic_store(&current, id);
        pp_pool_run(c->pool, j->n_tasks, task, j);
        atomic_store(&current, -1);
        for (int t = 0; t < MAX_TASKS; t++) c->bad_runs += atomic_load(&j->runs[t]) != (t < j->n_tasks);
        c->stray += atomic_load(&j->stray);
    }
    return NULL;
}

static void test_pool(int threads, int callers) {
    char err[PP_ERR_LEN], what[96];
    pp_pool *pool = NULL;
    if (threads) TEST_COND("pool created", pp_pool_create(threads, &pool, err) == PP_OK);
    caller c[2] = {{pool, 0, 0, 0}, {pool, 1000000, 0, 0}};
    pthread_t second;
    int two = callers == 2 && pthread_create(&second, NULL, run_jobs, &c[1]) == 0;
    run_jobs(&c[0]);
    if (two) pthread_join(second, NULL);
    snprintf(what, sizeof what, "%d threads, %d callers: every task ran once before its call returned", threads,
             callers);
    TEST_COND(what, c[0].bad_runs == 0 && c[1].bad_runs == 0);
    snprintf(what, sizeof what, "%d threads, %d callers: no task ran outside its own job", threads, callers);
    TEST_COND(what, c[0].stray == 0 && c[1].stray == 0);
    if (callers == 2) TEST_COND("the second caller ran", two);
    pp_pool_destroy(pool);
}

static void no_op(void *ctx, int t) { (void)ctx, (void)t; }

/* Every thread of this process onto the cores in mask (the mask is per thread, so each is set),
 * and all of them but the caller into SCHED_IDLE; 0 when every thread moved. */
static int pin_and_idle_others(const cpu_set_t *mask) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    pid_t self = (pid_t)syscall(SYS_gettid);
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0) continue;
        if (sched_setaffinity(tid, sizeof *mask, mask) != 0) rc = -1;
        if (tid != self && sched_setscheduler(tid, SCHED_IDLE, &(struct sched_param){0}) != 0) rc = -1;
    }
    closedir(d);
    return rc;
}

static void test_late_workers(void) {
    enum { LATE_JOBS = 2000 };
    char err[PP_ERR_LEN];
    pp_pool *pool;
    cpu_set_t one, all;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || pp_pool_create(3, &pool, err) != PP_OK) {
        TEST_COND("the affinity mask and a pool", 0);
        return;
    }
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    if (pin_and_idle_others(&one) != 0) {
        printf("cannot pin the threads to one core or make the workers idle-class here: late-worker check skipped\n");
    } else {
        pp_pool_run(pool, 8, no_op, NULL); /* settle: the workers have seen a job */
        struct rusage before, after;
        getrusage(RUSAGE_THREAD, &before);
        for (int k = 0; k < LATE_JOBS; k++) pp_pool_run(pool, 2 + k % 6, no_op, NULL);
        getrusage(RUSAGE_THREAD, &after);
        long sleeps = after.ru_nvcsw - before.ru_nvcsw;
        printf("caller's voluntary context switches over %d jobs with idle workers: %ld\n", LATE_JOBS, sleeps);
        TEST_COND("the caller did not wait for workers that had not started", sleeps <= LATE_JOBS / 100);
    }
    pp_pool_destroy(pool);
    sched_setaffinity(0, sizeof all, &all);
}

static void count_call(void *ctx, int t) {
    (void)t;
    ++*(int *)ctx;
}

/* A worker that cannot start: the pool is not created, the threads that did start are joined
 * (ASan's leak check sees the rest), and the error says how many threads were asked for, which
 * one failed and why. Every new thread gets a stack larger than the address space here. */
static void test_no_threads(void) {
    pthread_attr_t saved, huge;
    if (pthread_getattr_default_np(&saved) != 0) return;
    pthread_attr_init(&huge);
    int set = pthread_attr_setstacksize(&huge, (size_t)1 << 60) == 0 && pthread_setattr_default_np(&huge) == 0;
    pthread_attr_destroy(&huge);
    if (!set) {
        printf("cannot make thread creation fail here: check skipped\n");
        pthread_attr_destroy(&saved);
        return;
    }
    char err[PP_ERR_LEN] = "";
    pp_pool *pool = NULL;
    int rc = pp_pool_create(3, &pool, err);
    pthread_setattr_default_np(&saved);
    pthread_attr_destroy(&saved);
    printf("a pool whose threads cannot start: %s\n", err);
    TEST_COND("a pool whose threads cannot start is refused", rc != PP_OK && pool == NULL);
    const char *why = strstr(err, "worker 1 of 2: ");
    TEST_COND("the error names the pool's size, the worker and the reason",
              strstr(err, "pool of 3 threads") && why && why[strlen("worker 1 of 2: ")]);
    if (rc == PP_OK) pp_pool_destroy(pool);
}

/* threads 0: one per CPU this process may run on, not per CPU of the machine (under taskset or a
 * container's cpuset a thread per online CPU would take turns on the few allowed). */
static void test_threads_follow_affinity(void) {
    cpu_set_t all, some;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return;
    TEST_COND("threads 0: every allowed CPU", pp_pool_threads_for(0) == CPU_COUNT(&all));
    CPU_ZERO(&some);
    for (int c = 0, kept = 0; c < CPU_SETSIZE && kept < 1; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &some);
            kept++;
        }
    if (sched_setaffinity(0, sizeof some, &some) != 0) {
        printf("cannot narrow the affinity mask here: check skipped\n");
        return;
    }
    int one = pp_pool_threads_for(0);
    sched_setaffinity(0, sizeof all, &all);
    printf("threads 0 with %d CPUs allowed: %d; with 1: %d\n", CPU_COUNT(&all), pp_pool_threads_for(0), one);
    TEST_COND("threads 0 under a one-CPU affinity mask: 1", one == 1);
}

int main(void) {
    test_pool(0, 1); /* no pool: the caller runs everything */
    test_pool(1, 1);
    test_pool(2, 1);
    test_pool(3, 1);
    test_pool(8, 1); /* more threads than this machine's cores: late workers are common */
    test_pool(8, 2);
    pp_pool *pool;
    char err[PP_ERR_LEN];
    int calls = 0;
    if (pp_pool_create(2, &pool, err) == PP_OK) {
        pp_pool_run(pool, 0, count_call, &calls);
        TEST_COND("a job of no tasks calls nothing", calls == 0);
        pp_pool_destroy(pool);
    }
    test_no_threads();
    test_threads_follow_affinity();
    TEST_COND("threads N means N", pp_pool_threads_for(5) == 5);
    test_late_workers(); /* last: it pins this thread to one core */
    return test_report();
}
