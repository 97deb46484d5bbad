/* pool: a fixed set of worker threads that run one parallel-for at a time.
 *
 * The CPU backend splits every large operation (a GEMV's rows, attention's heads) into
 * n_tasks pieces; pp_pool_run calls fn(ctx, task) once for each task index across the
 * workers and the calling thread, and returns when all are done. Calls from several threads
 * are serialised. A NULL pool runs everything on the caller. */
#ifndef PP_BASE_POOL_H
#define PP_BASE_POOL_H

typedef struct pp_pool pp_pool;
typedef void (*pp_pool_fn)(void *ctx, int task);

/* n_threads counts the caller: 1 means no worker threads. 0 picks the number of CPUs this process
 * may run on (its affinity mask; the online CPUs where there is none). */
int pp_pool_create(int n_threads, pp_pool **out, char *err);
/* The threads pp_pool_create(n_threads, ...) runs with, for callers that size work by them first. */
int pp_pool_threads_for(int n_threads);
void pp_pool_destroy(pp_pool *pool);
int pp_pool_threads(const pp_pool *pool);
void pp_pool_run(pp_pool *pool, int n_tasks, pp_pool_fn fn, void *ctx);

#endif
