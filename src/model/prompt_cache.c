/* prompt_cache: see prompt_cache.h. A doubly linked list in recency order (head: most
 * recent); lookups compare a 64-bit hash, then the serialized key. A handful of entries is
 * the expected size (one per voice and persona in use), so a list is enough. */
#include "model/prompt_cache.h"

#include "base/err.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;
    uint64_t hash;
    size_t key_len, bytes; /* bytes: snapshot + key, what the budget counts */
    uint8_t *key;
    pp_lmgen_snapshot *snap;
} entry;

struct pp_prompt_cache {
    pthread_mutex_t lock;
    entry *head, *tail;
    pp_prompt_cache_stats st;
};

/* The key as bytes: model NUL voice NUL kv n_text ids. NULL when out of memory. */
static uint8_t *serialize(const pp_prompt_key *k, size_t *len) {
    size_t lm = strlen(k->model) + 1, lv = strlen(k->voice) + 1, lt = (size_t)k->n_text * sizeof(int32_t);
    int32_t head[2] = {(int32_t)k->kv, k->n_text};
    *len = lm + lv + sizeof head + lt;
    uint8_t *b = malloc(*len);
    if (!b) return NULL;
    memcpy(b, k->model, lm);
    memcpy(b + lm, k->voice, lv);
    memcpy(b + lm + lv, head, sizeof head);
    if (lt) memcpy(b + lm + lv + sizeof head, k->text, lt);
    return b;
}

static uint64_t fnv1a(const uint8_t *b, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void unlink_entry(pp_prompt_cache *c, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(pp_prompt_cache *c, entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void free_entry(entry *e) {
    pp_lmgen_snapshot_free(e->snap);
    free(e->key);
    free(e);
}

static entry *find(pp_prompt_cache *c, const uint8_t *key, size_t len, uint64_t hash) {
    for (entry *e = c->head; e; e = e->next)
        if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0) return e;
    return NULL;
}

int pp_prompt_cache_create(size_t budget_bytes, pp_prompt_cache **out, char *err) {
    pp_prompt_cache *c = calloc(1, sizeof *c);
    if (!c) return pp_fail(err, PP_ENOMEM, "prompt cache: out of memory");
    pthread_mutex_init(&c->lock, NULL);
    c->st.budget = budget_bytes;
    *out = c;
    return PP_OK;
}

void pp_prompt_cache_destroy(pp_prompt_cache *c) {
    if (!c) return;
    for (entry *e = c->head, *next; e; e = next) {
        next = e->next;
        free_entry(e);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int pp_prompt_cache_restore(pp_prompt_cache *c, const pp_prompt_key *key, pp_lmgen *g, char *err) {
    size_t len;
    uint8_t *k = serialize(key, &len);
    if (!k) return pp_fail(err, PP_ENOMEM, "prompt cache: out of memory");
    uint64_t h = fnv1a(k, len);
    pthread_mutex_lock(&c->lock);
    entry *e = find(c, k, len, h);
    int rc = 0;
    if (e) {
        unlink_entry(c, e);
        push_front(c, e);
        c->st.hits++;
        rc = pp_lmgen_snapshot_restore(g, e->snap, err);
        if (!rc) rc = 1;
    } else {
        c->st.misses++;
    }
    pthread_mutex_unlock(&c->lock);
    free(k);
    return rc;
}

int pp_prompt_cache_holds(pp_prompt_cache *c, const pp_prompt_key *key) {
    size_t len;
    uint8_t *k = serialize(key, &len);
    if (!k) return PP_ENOMEM;
    pthread_mutex_lock(&c->lock);
    int held = find(c, k, len, fnv1a(k, len)) != NULL;
    pthread_mutex_unlock(&c->lock);
    free(k);
    return held;
}

int pp_prompt_cache_put(pp_prompt_cache *c, const pp_prompt_key *key, pp_lmgen_snapshot *snap) {
    entry *e = calloc(1, sizeof *e);
    if (e) e->key = serialize(key, &e->key_len);
    if (!e || !e->key) {
        free(e);
        pp_lmgen_snapshot_free(snap);
        return PP_ENOMEM;
    }
    e->hash = fnv1a(e->key, e->key_len);
    e->snap = snap;
    e->bytes = pp_lmgen_snapshot_bytes(snap) + e->key_len + sizeof *e;
    pthread_mutex_lock(&c->lock);
    int stored = e->bytes <= c->st.budget && !find(c, e->key, e->key_len, e->hash);
    while (stored && c->st.bytes + e->bytes > c->st.budget) {
        entry *old = c->tail;
        unlink_entry(c, old);
        c->st.bytes -= old->bytes;
        c->st.entries--;
        c->st.evictions++;
        free_entry(old);
    }
    if (stored) {
        push_front(c, e);
        c->st.bytes += e->bytes;
        c->st.entries++;
    }
    pthread_mutex_unlock(&c->lock);
    if (!stored) free_entry(e);
    return stored;
}

void pp_prompt_cache_stats_get(pp_prompt_cache *c, pp_prompt_cache_stats *out) {
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
}
