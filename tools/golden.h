/* golden: the contract between the golden runner's driver (golden.c) and its per-model case
 * runners (golden_lm.c for lm-* case dirs, golden_mimi.c for mimi-* case dirs).
 *
 * A case runner loads CASE_DIR/config.json + model.safetensors, replays the inputs stored in
 * CASE_DIR/golden.safetensors on the chosen backend, compares every expected output, prints ONE
 * summary line ("<case>: <worst errors> PASS|FAIL") on stdout and returns:
 *    0  every comparison within tolerance,
 *    1  the case ran but some output is out of tolerance (details on stderr),
 *   <0  a PP_E* code when the case could not run (the message is in err).
 * Shared helpers for loading golden tensors and measuring errors live in golden.c. */
#ifndef PP_TOOLS_GOLDEN_H
#define PP_TOOLS_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/err.h"
#include "io/safetensors.h"

typedef struct golden_opts {
    const char *device; /* "cpu" (default) or "cuda" */
    const char *voice;  /* lm cases: a voices/NAME.pt file replacing golden's voice prompt, or NULL */
    int threads;        /* CPU threads, 0 = one per online CPU */
    int prompt_cache;   /* lm cases: batched prefill, snapshot, conversation on a restored copy */
} golden_opts;

int golden_lm_run(const char *dir, const golden_opts *o, char *err);
int golden_mimi_run(const char *dir, const golden_opts *o, char *err);

/* ---- helpers (golden.c) ---- */

/* Creates the backend o->device names. */
int golden_backend(const golden_opts *o, pp_backend **out, char *err);
/* True when dir/name exists. */
int golden_exists(const char *dir, const char *name);
/* Opens dir/name (e.g. "golden.safetensors"). */
int golden_open(const char *dir, const char *name, st_file **out, char *err);
/* Reads a whole F32/F16/BF16 tensor into a new malloc'd float array; *numel gets its size.
 * When want >= 0 the tensor must hold exactly `want` elements. */
int golden_load_f32(const st_file *f, const char *name, int64_t want, float **out, int64_t *numel, char *err);
/* Same for an integer tensor into int64. */
int golden_load_i64(const st_file *f, const char *name, int64_t want, int64_t **out, int64_t *numel, char *err);
/* Worst row-relative error max|a-b| / max|b| over `rows` rows of `cols` values
 * (a row whose reference is all zero uses max|a-b|; NaN counts as infinity). */
double golden_rel_err(const float *a, const float *b, size_t rows, size_t cols);

#endif
