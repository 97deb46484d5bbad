/* cpu: private declarations shared by the CPU backend's files (cpu.c holds the table and
 * memory; cpu_gemv.c the matrix products per weight format; cpu_lm.c the LM operations;
 * cpu_codec.c the codec operations). Not for model code: it sees only backend.h. */
#ifndef PP_BACKEND_CPU_H
#define PP_BACKEND_CPU_H

#include "backend/backend.h"
#include "base/pool.h"

typedef struct cpu_ctx {
    pp_pool *pool;
} cpu_ctx;

static inline pp_pool *cpu_pool(pp_backend *be) { return ((cpu_ctx *)be->impl)->pool; }

/* cpu_gemv.c */
void cpu_matmul(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
void cpu_embed(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate);

#endif
