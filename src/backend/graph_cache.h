/* graph_cache: recorded frames kept under their caller's key, over a device backend's
 * numbered graph slots (pp_backend_ops.graph_begin / graph_end / graph_replay).
 *
 * A device backend owns one and answers run_recorded / forget_recorded with it, so the model
 * only names its frames: a key's first run is plain (a device's workspace takes its size
 * outside any recording), its second is recorded into a slot, later ones replay the slot.
 * With more keys than slots the least recently used slot changes hands only after it has been
 * idle for a while; until then the newcomer runs plainly instead of every key taking a slot
 * from the next and recording every frame. Not thread-safe: a backend runs one stream. */
#ifndef PP_BACKEND_GRAPH_CACHE_H
#define PP_BACKEND_GRAPH_CACHE_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct pp_graph_cache pp_graph_cache;

/* A cache over `slots` graph slots (slot numbers 0..slots-1 of the backend). NULL: no memory. */
pp_graph_cache *pp_graph_cache_create(int slots);
void pp_graph_cache_destroy(pp_graph_cache *gc);
/* Runs issue(arg)'s operations on be as the frame `key` (nonzero): plainly, recorded, or by
 * replaying the recording, as the header comment says. */
int pp_graph_cache_run(pp_graph_cache *gc, pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg,
                       char *err);
/* The key will not run again: its slot is free for others. Unknown keys are ignored. */
void pp_graph_cache_forget(pp_graph_cache *gc, uint64_t key);

#endif
