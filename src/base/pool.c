/* pool: see pool.h. A job hands out task indices through an atomic counter so uneven tasks
 * balance themselves. Between jobs a worker first polls for about SPIN_NS, yielding the core
 * at each look, watching the job generation, then sleeps on a condition variable; the caller
 * waits for the job's tasks the same way. A frame is hundreds of short jobs (the depformer's
 * products take tens of microseconds each), and a sleep and wake-up per job cost as much as
 * the job.
 *
 * The caller waits for tasks, not for workers: a worker that has not run yet when the job's
 * tasks are all taken just skips it. On a CPU shared with other busy processes a worker can
 * wait a whole scheduler time slice (milliseconds) to run; when every job waited for every
 * worker, each of a frame's hundreds of jobs could pay that, and a frame took 25 times as long
 * with three busy processes beside it on two cores instead of the 2.5 times its share of the
 * CPU allows. The task counter carries the job's generation, so a late worker's claim fails
 * once its job is over instead of taking an index of the next one. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "base/pool.h"

#include "base/clock.h"
#include "base/err.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A job, as the threads that run its tasks see it. */
typedef struct pool_job {
    uint32_t generation; /* the low 32 bits of the pool's */
    pp_pool_fn fn;
    void *ctx;
    int n_tasks;
} pool_job;

#define SPIN_NS 200000 /* long enough to span the gap between a frame's jobs, short beside a frame */

struct pp_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t lock;     /* guards the job fields below */
    pthread_cond_t wake, done;
    pthread_mutex_t run_lock; /* serialises pp_pool_run callers */
    atomic_ulong generation;  /* bumped for every job (under lock) */
    atomic_int stopping;
    pool_job job;                    /* the job in flight (under lock); its threads run a copy */
    atomic_uint_least64_t next_task; /* the job's generation (high 32 bits), its next task index */
    atomic_int tasks_done;
};

/* Waits while waiting(p, arg) holds, for SPIN_NS at most, giving the core away at every look
 * (sched_yield), so a thread with work to do runs at once: the server's other threads must not
 * wait behind an idle worker. The caller then sleeps if it must. */
static void spin(pp_pool *p, int (*waiting)(pp_pool *, unsigned long), unsigned long arg) {
    int64_t until = pp_now_ns() + SPIN_NS;
    while (waiting(p, arg) && pp_now_ns() < until) sched_yield();
}

static int no_new_job(pp_pool *p, unsigned long seen) {
    return atomic_load(&p->generation) == seen && !atomic_load(&p->stopping);
}

static int tasks_running(pp_pool *p, unsigned long n_tasks) { return atomic_load(&p->tasks_done) < (int)n_tasks; }

/* Runs tasks of job until none is left or the job is over. A claimed task keeps its job open
 * (the caller waits for it), so job's fields stay valid while it runs; the last task to finish
 * wakes a sleeping caller. */
static void run_tasks(pp_pool *p, const pool_job *job) {
    uint64_t next = atomic_load(&p->next_task);
    for (;;) {
        if ((uint32_t)(next >> 32) != job->generation || (int)(uint32_t)next >= job->n_tasks) return;
        if (!atomic_compare_exchange_weak(&p->next_task, &next, next + 1)) continue;
        job->fn(job->ctx, (int)(uint32_t)next);
        if (atomic_fetch_add(&p->tasks_done, 1) + 1 == job->n_tasks) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
        next = atomic_load(&p->next_task);
    }
}

static void *worker_main(void *arg) {
    pp_pool *p = arg;
    unsigned long seen = 0;
    for (;;) {
        spin(p, no_new_job, seen);
        pthread_mutex_lock(&p->lock);
        while (no_new_job(p, seen)) pthread_cond_wait(&p->wake, &p->lock);
        if (atomic_load(&p->stopping)) break;
        seen = atomic_load(&p->generation);
        pool_job job = p->job;
        pthread_mutex_unlock(&p->lock);
        run_tasks(p, &job);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int pp_pool_threads_for(int n_threads) {
    if (n_threads > 0) return n_threads;
#if defined(__linux__)
    /* the CPUs this process may run on (taskset, a container's cpuset, systemd's CPUAffinity), not
     * every one the machine has: a thread per online CPU on 2 allowed of 64 would take turns on them */
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int pp_pool_create(int n_threads, pp_pool **out, char *err) {
    n_threads = pp_pool_threads_for(n_threads);
    pp_pool *p = calloc(1, sizeof *p);
    if (!p) return pp_fail(err, PP_ENOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            pp_pool_destroy(p);
            return pp_fail(err, PP_ENOMEM, "thread pool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            int why = pthread_create(&p->workers[i], NULL, worker_main, p);
            if (why != 0) {
                p->n_threads = i + 1; /* destroy joins only the ones that started */
                pp_pool_destroy(p);
                /* why (EAGAIN: a limit on threads or memory) and how far it got: fewer threads may fit */
                return pp_fail(err, PP_ENOMEM, "thread pool of %d threads: cannot start worker %d of %d: %s", n_threads,
                               i + 1, n_threads - 1, strerror(why));
            }
        }
    }
    *out = p;
    return PP_OK;
}

void pp_pool_destroy(pp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stopping, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; p->workers && i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int pp_pool_threads(const pp_pool *p) { return p ? p->n_threads : 1; }

void pp_pool_run(pp_pool *p, int n_tasks, pp_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    pthread_mutex_lock(&p->lock);
    pool_job job = {(uint32_t)(atomic_load(&p->generation) + 1), fn, ctx, n_tasks};
    p->job = job;
    atomic_store(&p->tasks_done, 0);
    atomic_store(&p->next_task, (uint64_t)job.generation << 32);
    atomic_fetch_add(&p->generation, 1); /* after the job's fields: a spinning worker reads them next */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p, &job);
    spin(p, tasks_running, (unsigned long)n_tasks);
    pthread_mutex_lock(&p->lock);
    while (tasks_running(p, (unsigned long)n_tasks)) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}
