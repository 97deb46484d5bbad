/* test_prompt_cache: the LRU of prompt states (model/prompt_cache.h) and the lmgen snapshots it
 * holds, on the golden lm-bf16 model (CPU).
 *
 * Snapshots: one taken after a prefill and restored into a conversation in any state continues
 * exactly as the original (same outputs, greedy); only the written KV slots are kept (a longer
 * prompt, a bigger snapshot); a conversation that has sampled, or another KV format, is refused.
 * Cache: the byte budget holds (the least recently used entry goes first, and a hit makes an
 * entry recent), an entry larger than the budget or a key already present is not stored, budget
 * 0 stores nothing, keys are told apart by model, voice, KV format and every prompt token, and
 * concurrent threads keep the counters consistent. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "model/prompt_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CASE PP_TEST_DATA "/golden/lm-bf16"
#define MAX_TEXT 64

static const pp_lm *g_lm;

static pp_lmgen *fresh(pp_kv_format kv) {
    char err[PP_ERR_LEN];
    pp_lmgen_params p;
    pp_lmgen_params_default(&p);
    p.greedy = 1;
    p.kv_cache = kv;
    pp_lmgen *g = NULL;
    if (pp_lmgen_create(g_lm, &p, &g, err)) fprintf(stderr, "lmgen: %s\n", err);
    return g;
}

/* A prompt of 2 silence frames each side of n_text text ids starting at id `first`. */
static pp_lmgen_prompt prompt_of(int32_t *ids, int n_text, int first) {
    for (int i = 0; i < n_text; i++) ids[i] = (first + 7 * i) % 100;
    return (pp_lmgen_prompt){NULL, NULL, 0, 2, ids, n_text};
}

/* The state after that prompt, as a snapshot (NULL on failure). */
static pp_lmgen_snapshot *snap_of(int n_text, int first) {
    char err[PP_ERR_LEN];
    int32_t ids[MAX_TEXT];
    pp_lmgen_prompt p = prompt_of(ids, n_text, first);
    pp_lmgen *g = fresh(PP_KV_F32);
    pp_lmbatch *b = NULL;
    pp_lmgen_snapshot *s = NULL;
    int rc = g ? pp_lmbatch_create(g_lm, 4, &b, err) : PP_ENOMEM;
    if (!rc) rc = pp_lmgen_prefill(g, b, &p, 0, pp_lmgen_prompt_length(&p), err);
    if (!rc) rc = pp_lmgen_snapshot_take(g, &s, err);
    if (rc) fprintf(stderr, "snapshot: %s\n", err);
    pp_lmbatch_destroy(b);
    pp_lmgen_destroy(g);
    return s;
}

/* Steps a and b with the same user codes; 1 when every output matches. */
static int same_steps(pp_lmgen *a, pp_lmgen *b, int steps) {
    char err[PP_ERR_LEN];
    int same = 1;
    for (int t = 0; t < steps && same; t++) {
        int32_t user[PP_LM_AUDIO_CODEBOOKS];
        for (int k = 0; k < PP_LM_AUDIO_CODEBOOKS; k++) user[k] = (t * 31 + k * 5) % 2048;
        pp_lmgen_out oa, ob;
        same = pp_lmgen_step(a, user, &oa, err) == PP_OK && pp_lmgen_step(b, user, &ob, err) == PP_OK &&
               memcmp(&oa, &ob, sizeof oa) == 0;
    }
    return same;
}

static void test_snapshots(void) {
    char err[PP_ERR_LEN];
    int32_t ids[MAX_TEXT];
    pp_lmgen_prompt p = prompt_of(ids, 9, 5);
    pp_lmgen *orig = fresh(PP_KV_F32), *copy = fresh(PP_KV_F32), *other = fresh(PP_KV_INT8);
    pp_lmbatch *b = NULL;
    pp_lmgen_snapshot *s = NULL;
    int rc = pp_lmbatch_create(g_lm, 3, &b, err);
    if (!rc) rc = pp_lmgen_prefill(orig, b, &p, 0, pp_lmgen_prompt_length(&p), err);
    if (!rc) rc = pp_lmgen_snapshot_take(orig, &s, err);
    TEST_COND("prefill and snapshot", rc == PP_OK);
    if (rc) goto done;
    /* The copy first wanders off: its stale state must not matter. */
    TEST_COND("stale conversation", same_steps(copy, other, 3));
    TEST_COND("restore into a used conversation", pp_lmgen_snapshot_restore(copy, s, err) == PP_OK &&
                                                       pp_lmgen_offset(copy) == pp_lmgen_offset(orig));
    TEST_COND("the restored conversation continues as the original", same_steps(orig, copy, 12));
    TEST_COND("another KV format is refused", pp_lmgen_snapshot_restore(other, s, err) == PP_EINVAL);
    pp_lmgen_snapshot *again = NULL;
    TEST_COND("a conversation that sampled is refused",
              pp_lmgen_snapshot_take(orig, &again, err) == PP_EUNSUPPORTED && !again);
    /* The case's context is 6 slots: 0 and 1 text ids write 3 and 4 (the first call computes
     * nothing), 9 and 40 ids wrap around the whole ring. */
    pp_lmgen_snapshot *s0 = snap_of(0, 5), *s1 = snap_of(1, 5), *s40 = snap_of(40, 5);
    TEST_COND("only written slots are kept, at most the context",
              s0 && s1 && s40 && pp_lmgen_snapshot_bytes(s0) < pp_lmgen_snapshot_bytes(s1) &&
                  pp_lmgen_snapshot_bytes(s1) < pp_lmgen_snapshot_bytes(s) &&
                  pp_lmgen_snapshot_bytes(s) == pp_lmgen_snapshot_bytes(s40));
    pp_lmgen_snapshot_free(s0);
    pp_lmgen_snapshot_free(s1);
    pp_lmgen_snapshot_free(s40);
done:
    pp_lmgen_snapshot_free(s);
    pp_lmbatch_destroy(b);
    pp_lmgen_destroy(orig);
    pp_lmgen_destroy(copy);
    pp_lmgen_destroy(other);
}

/* Restores key into a scratch conversation: 1 hit, 0 miss. */
static int lookup(pp_prompt_cache *c, const pp_prompt_key *k) {
    char err[PP_ERR_LEN];
    pp_lmgen *g = fresh(k->kv);
    int rc = g ? pp_prompt_cache_restore(c, k, g, err) : -1;
    pp_lmgen_destroy(g);
    return rc;
}

static void test_lru(void) {
    char err[PP_ERR_LEN];
    int32_t ta[MAX_TEXT], tb[MAX_TEXT], tc[MAX_TEXT];
    prompt_of(ta, 10, 1);
    prompt_of(tb, 10, 2);
    prompt_of(tc, 10, 3);
    pp_prompt_key ka = {"model-1", "voice-A", PP_KV_F32, ta, 10}, kb = ka, kc = ka;
    kb.text = tb;
    kc.text = tc;
    pp_lmgen_snapshot *sa = snap_of(10, 1);
    size_t one = pp_lmgen_snapshot_bytes(sa);
    pp_lmgen_snapshot_free(sa);
    /* Room for two entries of this size (with their keys and bookkeeping), not three. */
    pp_prompt_cache *c = NULL;
    TEST_COND("cache created", pp_prompt_cache_create(2 * one + one / 2, &c, err) == PP_OK);
    if (!c) return;
    TEST_COND("a miss on an empty cache", lookup(c, &ka) == 0);
    TEST_COND("an empty cache holds nothing", pp_prompt_cache_holds(c, &ka) == 0);
    TEST_COND("A stored", pp_prompt_cache_put(c, &ka, snap_of(10, 1)) == 1);
    TEST_COND("the cache holds A, not B", pp_prompt_cache_holds(c, &ka) == 1 && pp_prompt_cache_holds(c, &kb) == 0);
    TEST_COND("B stored", pp_prompt_cache_put(c, &kb, snap_of(10, 2)) == 1);
    TEST_COND("A again is not stored twice", pp_prompt_cache_put(c, &ka, snap_of(10, 1)) == 0);
    TEST_COND("A hits (and becomes the most recent)", lookup(c, &ka) == 1);
    TEST_COND("C stored", pp_prompt_cache_put(c, &kc, snap_of(10, 3)) == 1);
    TEST_COND("B, the least recently used, was evicted", lookup(c, &kb) == 0);
    TEST_COND("A and C remain", lookup(c, &ka) == 1 && lookup(c, &kc) == 1);
    pp_prompt_cache_stats st;
    pp_prompt_cache_stats_get(c, &st);
    TEST_COND("within the budget, one eviction", st.entries == 2 && st.bytes <= st.budget && st.evictions == 1 &&
                                                     st.hits == 3 && st.misses == 2);

    pp_prompt_key k = ka;
    k.voice = "voice-B";
    TEST_COND("another voice misses", lookup(c, &k) == 0);
    k = ka;
    k.model = "model-2";
    TEST_COND("another model misses", lookup(c, &k) == 0);
    k = ka;
    k.kv = PP_KV_BF16;
    TEST_COND("another KV format misses", lookup(c, &k) == 0);
    int32_t t2[MAX_TEXT];
    memcpy(t2, ta, sizeof t2);
    t2[9]++;
    k = ka;
    k.text = t2;
    TEST_COND("another last prompt token misses", lookup(c, &k) == 0);
    k = ka;
    k.n_text = 9;
    TEST_COND("a prefix of the prompt misses", lookup(c, &k) == 0);
    k = ka;
    k.model = "model-1voice-A"; /* the fields must not run together */
    k.voice = "";
    TEST_COND("fields do not run together", lookup(c, &k) == 0);
    pp_prompt_cache_destroy(c);

    TEST_COND("an entry over the whole budget is not stored", pp_prompt_cache_create(one / 2, &c, err) == PP_OK &&
                                                                 pp_prompt_cache_put(c, &ka, snap_of(10, 1)) == 0 &&
                                                                 lookup(c, &ka) == 0);
    pp_prompt_cache_destroy(c);

    TEST_COND("budget 0 stores nothing", pp_prompt_cache_create(0, &c, err) == PP_OK &&
                                             pp_prompt_cache_put(c, &ka, snap_of(10, 1)) == 0 && lookup(c, &ka) == 0);
    pp_prompt_cache_destroy(c);
}

typedef struct worker {
    pp_prompt_cache *c;
    int id, hits, misses, fails;
} worker;

/* Looks up and stores four keys in turn; two of them fit at a time. */
static void *work(void *arg) {
    worker *w = arg;
    char err[PP_ERR_LEN];
    int32_t ids[4][MAX_TEXT];
    pp_lmgen *g = fresh(PP_KV_F32);
    for (int i = 0; i < 40 && g; i++) {
        int which = (i + w->id) % 4;
        prompt_of(ids[which], 6, which);
        pp_prompt_key k = {"model", "voice", PP_KV_F32, ids[which], 6};
        int rc = pp_prompt_cache_restore(w->c, &k, g, err);
        if (rc == 1) w->hits++;
        else if (rc == 0) w->misses++, pp_prompt_cache_put(w->c, &k, snap_of(6, which));
        else w->fails++;
    }
    pp_lmgen_destroy(g);
    return NULL;
}

static void test_threads(void) {
    char err[PP_ERR_LEN];
    pp_lmgen_snapshot *s = snap_of(6, 0);
    size_t one = s ? pp_lmgen_snapshot_bytes(s) : 0;
    pp_lmgen_snapshot_free(s);
    pp_prompt_cache *c = NULL;
    if (pp_prompt_cache_create(2 * one + one, &c, err)) return;
    worker w[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (worker){c, i, 0, 0, 0};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    int hits = 0, misses = 0, fails = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        hits += w[i].hits, misses += w[i].misses, fails += w[i].fails;
    }
    pp_prompt_cache_stats st;
    pp_prompt_cache_stats_get(c, &st);
    printf("threads: %d hits, %d misses, %llu evictions, %d entries\n", hits, misses,
           (unsigned long long)st.evictions, st.entries);
    TEST_COND("concurrent use: counters agree, budget holds",
              fails == 0 && hits + misses == 120 && st.hits == (uint64_t)hits && st.misses == (uint64_t)misses &&
                  st.bytes <= st.budget && st.entries <= 2);
    pp_prompt_cache_destroy(c);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_log_set_level(PP_LOG_WARN);
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    if (pp_backend_cpu_create(1, &be, err)) TEST_SKIP("no CPU backend");
    if (pp_lm_open(be, CASE "/model.safetensors", CASE "/config.json", &lm, err)) {
        fprintf(stderr, "%s\n", err);
        pp_backend_destroy(be);
        TEST_SKIP("golden lm-bf16 model missing");
    }
    g_lm = lm;
    test_snapshots();
    test_lru();
    test_threads();
    pp_lm_close(lm);
    pp_backend_destroy(be);
    return test_report();
}
