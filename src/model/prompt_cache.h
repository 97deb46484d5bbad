/* prompt_cache: conversation states right after their prompts, kept to start new conversations.
 *
 * Every conversation with the same model, KV format, voice prompt and text prompt runs the same
 * prompt frames (docs/model.md §6: nothing is sampled there), so the state they leave (KV slots,
 * token ring, counter: a pp_lmgen_snapshot) is the same too. The cache keeps such snapshots under
 * a key of those four things and copies one into a new conversation instead of running its
 * prompts again. Entries live in host memory; the least recently used go first when a new one
 * would pass the byte budget (budget 0: nothing is kept). The identities in the key are strings
 * the caller makes stable: the model's and the voice's files' paths, inodes, sizes, modification
 * and change times, so a replaced or rewritten file never matches an old entry. All calls are
 * thread-safe (one mutex; a restore copies under it, so an entry never goes away while it is
 * being read). */
#ifndef PP_MODEL_PROMPT_CACHE_H
#define PP_MODEL_PROMPT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/lmgen.h"

typedef struct pp_prompt_key {
    const char *model;   /* identity of the LM weights */
    const char *voice;   /* identity of the voice prompt; "" for none */
    pp_kv_format kv;     /* the conversations' KV ring format */
    const int32_t *text; /* token ids of the wrapped text prompt */
    int n_text;
} pp_prompt_key;

typedef struct pp_prompt_cache_stats {
    size_t bytes, budget;
    int entries;
    uint64_t hits, misses, evictions;
} pp_prompt_cache_stats;

typedef struct pp_prompt_cache pp_prompt_cache;

int pp_prompt_cache_create(size_t budget_bytes, pp_prompt_cache **out, char *err);
void pp_prompt_cache_destroy(pp_prompt_cache *c);

/* On a hit, restores the entry into g (pp_lmgen_snapshot_restore), makes it the most recently
 * used and returns 1; 0 on a miss; a negative code when the restore failed (g must then be
 * reset). */
int pp_prompt_cache_restore(pp_prompt_cache *c, const pp_prompt_key *key, pp_lmgen *g, char *err);
/* Whether key has an entry now (no statistics, no recency change): a scheduler's guess at what
 * a restore will find. Returns 1, 0, or PP_ENOMEM. */
int pp_prompt_cache_holds(pp_prompt_cache *c, const pp_prompt_key *key);

/* Stores snap under key and takes it, evicting least recently used entries to stay within the
 * budget. Returns 1 when stored, 0 when freed instead (larger than the whole budget, or the
 * key is already present: another conversation got there first), PP_ENOMEM (snap freed). */
int pp_prompt_cache_put(pp_prompt_cache *c, const pp_prompt_key *key, pp_lmgen_snapshot *snap);

void pp_prompt_cache_stats_get(pp_prompt_cache *c, pp_prompt_cache_stats *out);

#endif
