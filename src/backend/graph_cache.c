/* graph_cache: see graph_cache.h. */
#include "backend/graph_cache.h"

#include "base/err.h"

#include <stdlib.h>

/* A key the cache has seen run: the slot it last recorded into (-1: none) and whether that
 * recording is usable (the slot may since have changed hands: owner says). */
typedef struct entry {
    uint64_t key;
    int slot;
    int recorded;
} entry;

struct pp_graph_cache {
    int slots;
    uint64_t *owner; /* [slots]: key whose recording the slot holds; 0: free */
    uint64_t *used;  /* [slots]: clock of the slot's last use */
    uint64_t clock;
    entry *entries;
    size_t n, cap;
};

pp_graph_cache *pp_graph_cache_create(int slots) {
    pp_graph_cache *gc = calloc(1, sizeof *gc);
    if (!gc) return NULL;
    gc->slots = slots;
    gc->owner = calloc((size_t)slots, sizeof *gc->owner);
    gc->used = calloc((size_t)slots, sizeof *gc->used);
    if (!gc->owner || !gc->used) {
        pp_graph_cache_destroy(gc);
        return NULL;
    }
    return gc;
}

void pp_graph_cache_destroy(pp_graph_cache *gc) {
    if (!gc) return;
    free(gc->owner);
    free(gc->used);
    free(gc->entries);
    free(gc);
}

static entry *find(pp_graph_cache *gc, uint64_t key) {
    for (size_t i = 0; i < gc->n; i++)
        if (gc->entries[i].key == key) return &gc->entries[i];
    return NULL;
}

/* NULL when out of memory: the key then runs plainly every time, which is still right. */
static entry *add(pp_graph_cache *gc, uint64_t key) {
    if (gc->n == gc->cap) {
        size_t cap = gc->cap ? 2 * gc->cap : 16;
        entry *e = realloc(gc->entries, cap * sizeof *e);
        if (!e) return NULL;
        gc->entries = e;
        gc->cap = cap;
    }
    entry *e = &gc->entries[gc->n++];
    *e = (entry){.key = key, .slot = -1};
    return e;
}

/* Slot i rather than j: a free one first, then the one used longer ago. */
static int takes_before(const pp_graph_cache *gc, int i, int j) {
    if (!gc->owner[i] != !gc->owner[j]) return !gc->owner[i];
    return gc->used[i] < gc->used[j];
}

/* The entry's slot if it still holds it, else the least recently used one, but only if free or
 * idle for two rounds of every slot's use. -1: none to take. */
static int claim_slot(pp_graph_cache *gc, entry *e) {
    if (e->slot < 0 || gc->owner[e->slot] != e->key) {
        int lru = 0;
        for (int i = 1; i < gc->slots; i++)
            if (takes_before(gc, i, lru)) lru = i;
        if (gc->owner[lru] && gc->used[lru] + 2 * (uint64_t)gc->slots > gc->clock) return -1;
        e->slot = lru;
        e->recorded = 0;
        gc->owner[lru] = e->key;
    }
    gc->used[e->slot] = ++gc->clock;
    return e->slot;
}

int pp_graph_cache_run(pp_graph_cache *gc, pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg,
                       char *err) {
    entry *e = find(gc, key);
    if (!e) {
        add(gc, key);
        issue(arg);
        return PP_OK;
    }
    if (e->recorded && e->slot >= 0 && gc->owner[e->slot] == key) {
        gc->used[e->slot] = ++gc->clock;
        int rc = be->ops->graph_replay(be, e->slot, err);
        if (rc != PP_ENOTFOUND) return rc;
        /* the backend dropped the recording (its workspace moved): record again below */
    }
    int slot = claim_slot(gc, e);
    if (slot < 0) {
        issue(arg);
        return PP_OK;
    }
    int rc = be->ops->graph_begin(be, slot, err);
    if (rc) return rc;
    issue(arg);
    rc = be->ops->graph_end(be, slot, err);
    e->recorded = rc == PP_OK;
    return rc;
}

void pp_graph_cache_forget(pp_graph_cache *gc, uint64_t key) {
    entry *e = find(gc, key);
    if (!e) return;
    if (e->slot >= 0 && gc->owner[e->slot] == key) gc->owner[e->slot] = 0;
    *e = gc->entries[--gc->n];
}
