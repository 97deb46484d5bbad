/* test_session_batch: sessions ticked together, and sessions started from the prompt cache, on
 * the built-in demo model (CPU backend).
 *
 * - Three sessions with different voices, prompts, seeds and sampling settings, each stepped
 *   alone with pp_session_step, are the reference. The same sessions then run as a server runs
 *   them: every tick encodes the active sessions in one pp_session_batch_encode, runs one
 *   pp_session_batch_step over them and decodes them in one pp_session_batch_decode; they join
 *   (after their prompts) and leave at different ticks. Their
 *   audio and text must equal the lone runs bit for bit (rows of a CPU tick are independent).
 * - With a prompt cache, a second session with the same voice and prompt starts in one prefill
 *   call and gives exactly the frames of the first, which ran its prompts; so does one with
 *   another seed (against a lone uncached run with that seed). Another prompt, voice or KV
 *   format misses the cache, and so does a voice file rewritten with its size and mtime kept,
 *   or a pair voice's .cache.json rewritten alone. The counters say so.
 * - The stages refuse to run out of order; a batch refuses a session twice or too many.
 * - The start-up capacity plan counts the caller's per-conversation work outside the batch (a
 *   server's downlink encoding): at host_ms each, no more than 64 ms / host_ms conversations
 *   (the 80 ms frame at 80 % headroom) are admitted, a host_ms past the budget leaves one
 *   conversation that cannot run in real time, and the plan says what it added.
 * - The plan's memory per conversation counts its row of the server's tick batch (LM scratch and
 *   codec buffers for max_sessions rows, allocated once the plan is made): a batch's byte count
 *   covers what it takes from the backend, and each conversation's share is in the plan.
 * - On a backend that records frames as a device does (a key's second run is the costly
 *   recording, here 250 ms longer), the plan's LM tick and codec times are the steady ones:
 *   the recording is one of the timed ticks and frames, and a mean counted it. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "io/voice.h"
#include "session/demo.h"
#include "session/model_internal.h"
#include "session/plan.h"
#include "session/session.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FRAMES 10
#define N_SESSIONS 3

typedef struct run {
    float pcm[FRAMES][PP_FRAME_SAMPLES];
    char text[FRAMES][PP_SESSION_PIECE_MAX];
} run;

/* Deterministic input: a chirp with noise; `which` shifts it so every session hears another. */
static void input_frame(int which, int f, float *pcm) {
    uint32_t s = 777u * (uint32_t)which + (uint32_t)f;
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
        double t = (f * PP_FRAME_SAMPLES + i) / 24000.0;
        s = s * 1664525u + 1013904223u;
        pcm[i] = (float)(0.3 * sin(6.2832 * (150 + 100 * which + 300 * t) * t) + 0.02 * ((s >> 8) / 16777216.0 - 0.5));
    }
}

static void params_of(int which, pp_session_params *p) {
    static const char *voices[N_SESSIONS] = {"NATF2", "NATM1", "VARF0"};
    static const char *prompts[N_SESSIONS] = {"You are a wise and friendly teacher.", "Be brief.", ""};
    pp_params_defaults(p);
    strcpy(p->voice, voices[which]);
    strcpy(p->text_prompt, prompts[which]);
    p->text_seed = p->audio_seed = 1000u + (uint64_t)which;
    if (which == 1) p->text_temperature = 0; /* greedy text beside sampled ones */
}

/* Creates a session and runs its prompts; *calls gets the prefill calls it took. */
static pp_session *start(pp_model *m, const pp_session_params *p, int *calls) {
    char err[PP_ERR_LEN];
    pp_session *s = NULL;
    int rc = pp_session_create(m, p, 512, &s, err);
    *calls = 0;
    while (!rc && ++*calls && (rc = pp_session_prefill(s, err)) == 0) {}
    if (rc < 0) {
        fprintf(stderr, "session: %s\n", err);
        pp_session_destroy(s);
        return NULL;
    }
    return s;
}

/* A session alone: FRAMES frames of pp_session_step on input `which`. */
static int run_alone(pp_session *s, int which, run *out) {
    char err[PP_ERR_LEN];
    for (int f = 0; f < FRAMES; f++) {
        float in[PP_FRAME_SAMPLES];
        input_frame(which, f, in);
        if (pp_session_step(s, in, out->pcm[f], out->text[f], NULL, err)) {
            fprintf(stderr, "step: %s\n", err);
            return 0;
        }
    }
    return 1;
}

static int same_run(const run *a, const run *b) { return memcmp(a, b, sizeof *a) == 0; }

/* The server's schedule: session i is active for ticks join[i] .. join[i] + FRAMES - 1. */
static int run_batched(pp_model *m, pp_session *const *ss, const int *join, run *out) {
    char err[PP_ERR_LEN];
    pp_session_batch *b = NULL;
    int ok = pp_session_batch_create(m, N_SESSIONS, &b, err) == PP_OK, max_batch = 0;
    int last = 0;
    for (int i = 0; i < N_SESSIONS; i++)
        if (join[i] + FRAMES > last) last = join[i] + FRAMES;
    for (int t = 0; ok && t < last; t++) {
        pp_session *tick[N_SESSIONS];
        float in[N_SESSIONS][PP_FRAME_SAMPLES], *pcm[N_SESSIONS];
        const float *ins[N_SESSIONS];
        char pieces[N_SESSIONS][PP_SESSION_PIECE_MAX] = {{0}}; /* compared whole, past the NUL */
        int who[N_SESSIONS], n = 0;
        for (int i = 0; i < N_SESSIONS; i++) {
            int f = t - join[i];
            if (f < 0 || f >= FRAMES) continue;
            input_frame(i, f, in[n]);
            ins[n] = in[n];
            pcm[n] = out[i].pcm[f];
            tick[n] = ss[i];
            who[n++] = i;
        }
        if (n > max_batch) max_batch = n;
        if (n) ok = pp_session_batch_encode(b, tick, n, ins, err) == PP_OK;
        if (ok && n) ok = pp_session_batch_step(b, tick, n, err) == PP_OK;
        if (ok && n) ok = pp_session_batch_decode(b, tick, n, pcm, pieces, err) == PP_OK;
        for (int k = 0; ok && k < n; k++) memcpy(out[who[k]].text[t - join[who[k]]], pieces[k], sizeof pieces[k]);
    }
    if (!ok) fprintf(stderr, "batched run: %s\n", err);
    TEST_COND("batches of up to 3 sessions formed", max_batch == N_SESSIONS);
    pp_session_batch_destroy(b);
    return ok;
}

static void test_batching(pp_model *m) {
    static run alone[N_SESSIONS], together[N_SESSIONS];
    pp_session *ss[N_SESSIONS] = {0};
    int calls, ok = 1;
    for (int i = 0; i < N_SESSIONS; i++) {
        pp_session_params p;
        params_of(i, &p);
        pp_session *s = start(m, &p, &calls);
        ok &= s && run_alone(s, i, &alone[i]);
        pp_session_destroy(s);
        ok &= (ss[i] = start(m, &p, &calls)) != NULL;
    }
    TEST_COND("lone runs", ok);
    int texts = 0;
    for (int i = 0; i < N_SESSIONS; i++)
        for (int f = 0; f < FRAMES; f++) texts += alone[i].text[f][0] != '\0';
    TEST_COND("the lone runs produce text", texts > 0);
    TEST_COND("the three sessions differ", !same_run(&alone[0], &alone[1]) && !same_run(&alone[1], &alone[2]));
    /* Session 1 joins at tick 3 and session 2 at tick 5; session 0 leaves at tick 10. */
    static const int join[N_SESSIONS] = {0, 3, 5};
    ok = ok && run_batched(m, ss, join, together);
    TEST_COND("batched ticks run", ok);
    for (int i = 0; i < N_SESSIONS; i++) {
        char what[96];
        snprintf(what, sizeof what, "session %d ticked with the others equals session %d alone (audio and text)", i, i);
        TEST_COND(what, ok && same_run(&together[i], &alone[i]));
    }
    for (int i = 0; i < N_SESSIONS; i++) pp_session_destroy(ss[i]);
}

static void test_stage_order(pp_model *m) {
    char err[PP_ERR_LEN], piece[PP_SESSION_PIECE_MAX];
    float in[PP_FRAME_SAMPLES], out[PP_FRAME_SAMPLES];
    pp_session_params p;
    params_of(0, &p);
    int calls;
    pp_session *a = start(m, &p, &calls), *b = start(m, &p, &calls);
    pp_session_batch *batch = NULL;
    TEST_COND("sessions and a batch of 1", a && b && pp_session_batch_create(m, 1, &batch, err) == PP_OK);
    if (!a || !b || !batch) goto done;
    input_frame(0, 0, in);
    TEST_COND("decode before the tick is refused", pp_session_decode(a, out, piece, err) == PP_EINVAL);
    TEST_COND("a tick before the encode is refused", pp_session_batch_step(batch, &a, 1, err) == PP_EINVAL);
    pp_session *two[2] = {a, b};
    TEST_COND("encodes run", pp_session_encode(a, in, err) == PP_OK && pp_session_encode(b, in, err) == PP_OK);
    TEST_COND("more sessions than the capacity are refused", pp_session_batch_step(batch, two, 2, err) == PP_EINVAL);
    pp_session_batch_destroy(batch);
    batch = NULL;
    pp_session *twice[2] = {a, a};
    TEST_COND("a session listed twice is refused", pp_session_batch_create(m, 2, &batch, err) == PP_OK &&
                                                       pp_session_batch_step(batch, twice, 2, err) == PP_EINVAL);
    TEST_COND("the tick then runs", pp_session_batch_step(batch, two, 2, err) == PP_OK &&
                                        pp_session_decode(a, out, piece, err) == PP_OK &&
                                        pp_session_decode(b, out, piece, err) == PP_OK);
    TEST_COND("a second decode is refused", pp_session_decode(a, out, piece, err) == PP_EINVAL);
    /* The batched codec stages check the same order, for the whole batch before any change. */
    const float *ins[2] = {in, in};
    float out_b[PP_FRAME_SAMPLES], *outs[2] = {out, out_b};
    char pieces[2][PP_SESSION_PIECE_MAX];
    TEST_COND("a batched decode before the tick is refused",
              pp_session_batch_decode(batch, two, 2, outs, pieces, err) == PP_EINVAL);
    TEST_COND("a session listed twice in a batched encode is refused",
              pp_session_batch_encode(batch, twice, 2, ins, err) == PP_EINVAL);
    TEST_COND("the batched stages then run", pp_session_batch_encode(batch, two, 2, ins, err) == PP_OK &&
                                                 pp_session_batch_step(batch, two, 2, err) == PP_OK &&
                                                 pp_session_batch_decode(batch, two, 2, outs, pieces, err) == PP_OK);
    TEST_COND("a second batched decode is refused",
              pp_session_batch_decode(batch, two, 2, outs, pieces, err) == PP_EINVAL);
done:
    pp_session_batch_destroy(batch);
    pp_session_destroy(a);
    pp_session_destroy(b);
}

/* Starts a session with p on m, checks how its prompts ran, runs it alone into out. */
static void cached_run(pp_model *m, const pp_session_params *p, int want_cached, const char *what, run *out) {
    char err[PP_ERR_LEN];
    pp_session *probe = NULL; /* what a scheduler asks before the first prefill call */
    int restorable = pp_session_create(m, p, 512, &probe, err) == PP_OK && pp_session_prompt_restorable(probe);
    pp_session_destroy(probe);
    TEST_COND("restorable before its prompts exactly when the cache will answer", restorable == want_cached);
    int calls;
    pp_session *s = start(m, p, &calls);
    int cached = s && pp_session_prompt_cached(s);
    char line[160];
    snprintf(line, sizeof line, "%s: %s (%d prefill calls)", what, want_cached ? "cache hit" : "cache miss", calls);
    TEST_COND(line, s && cached == want_cached && (!want_cached || calls == 1) &&
                        pp_session_prompt_done(s) == pp_session_prompt_frames(s));
    TEST_COND("no longer restorable once its prompts have run", s && !pp_session_prompt_restorable(s));
    TEST_COND("it runs", s && run_alone(s, 0, out));
    pp_session_destroy(s);
}

/* Writes voice `from`'s bytes over voice `to` of the demo and sets `to`'s mtime back. */
static int replace_keeping_mtime(const pp_demo_files *files, const char *to, const char *from) {
    char dst[PP_DEMO_PATH_MAX + 16], src[PP_DEMO_PATH_MAX + 16], buf[1 << 16];
    snprintf(dst, sizeof dst, "%s/%s.pt", files->voices_dir, to);
    snprintf(src, sizeof src, "%s/%s.pt", files->voices_dir, from);
    struct stat before, after;
    if (stat(dst, &before) != 0) return 0;
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    int ok = in && out && n > 0 && n < sizeof buf && fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    ok = ok && utimensat(AT_FDCWD, dst, times, 0) == 0 && stat(dst, &after) == 0;
    return ok && after.st_size == before.st_size && after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
           after.st_mtim.tv_nsec == before.st_mtim.tv_nsec && test_files_equal(dst, src);
}

/* The demo model with a 64 MiB prompt cache; NULL (a failed check) when it does not open. */
static pp_model *open_cached(const pp_demo_files *files, pp_backend *be) {
    char err[PP_ERR_LEN];
    pp_model *m = NULL;
    pp_model_paths paths = pp_demo_paths(files);
    int rc = pp_model_open(be, &paths, &m, err);
    if (!rc) rc = pp_model_set_prompt_cache(m, 64u << 20, err);
    TEST_COND("model with a prompt cache", rc == PP_OK);
    if (rc && m) pp_model_close(m);
    return rc ? NULL : m;
}

static void test_prompt_cache(const pp_demo_files *files, pp_backend *be, pp_model *plain) {
    char err[PP_ERR_LEN];
    pp_model *m = open_cached(files, be);
    if (!m) return;
    static run ref, ref_seed, first, hit, hit_seed, other;
    pp_session_params p, q;
    params_of(0, &p);
    q = p;
    q.text_seed = q.audio_seed = 99;
    int calls;
    pp_session *s = start(plain, &p, &calls);
    TEST_COND("uncached reference", s && run_alone(s, 0, &ref));
    pp_session_destroy(s);
    s = start(plain, &q, &calls);
    TEST_COND("uncached reference with another seed", s && run_alone(s, 0, &ref_seed));
    pp_session_destroy(s);

    cached_run(m, &p, 0, "first session", &first);
    cached_run(m, &p, 1, "second session, same voice and prompt", &hit);
    cached_run(m, &q, 1, "third session, another seed", &hit_seed);
    TEST_COND("the session that ran its prompts equals the uncached model's", same_run(&first, &ref));
    TEST_COND("the session from the cache equals the one that ran its prompts", same_run(&hit, &ref));
    TEST_COND("the cached start keeps the session's own seed", same_run(&hit_seed, &ref_seed) &&
                                                                 !same_run(&hit_seed, &ref));
    q = p;
    strcpy(q.text_prompt, "You are a wise and friendly teacher!");
    cached_run(m, &q, 0, "another prompt", &other);
    q = p;
    strcpy(q.voice, "NATM1");
    cached_run(m, &q, 0, "another voice", &other);
    TEST_COND("int8 KV caches on the CPU", pp_model_set_kv_cache(m, PP_KV_INT8, err) == PP_OK);
    cached_run(m, &p, 0, "another KV format", &other);
    cached_run(m, &p, 1, "the same KV format again", &other);
    /* Another voice's bytes under the same name, size (demo voices are alike) and mtime, as
     * cp -p, rsync -a or tar leave them: the file is not the one the cached state was made of. */
    TEST_COND("NATF2.pt replaced, its size and mtime kept", replace_keeping_mtime(files, "NATF2", "NATM1"));
    cached_run(m, &p, 0, "the voice file replaced", &other);
    pp_prompt_cache_counts c;
    pp_model_prompt_cache_counts(m, &c);
    printf("prompt cache: %llu hits, %llu misses, %d entries, %zu of %zu bytes\n", (unsigned long long)c.hits,
           (unsigned long long)c.misses, c.entries, c.bytes, c.budget);
    TEST_COND("counters: 3 hits, 5 misses, 5 entries", c.hits == 3 && c.misses == 5 && c.entries == 5 &&
                                                          c.bytes > 0 && c.bytes <= c.budget);
    pp_model_close(m);
}

/* Writes demo voice `from` as the pair NAME.embeddings.bin + NAME.cache.json; only the .cache.json
 * when json_only. */
static int write_pair(const pp_demo_files *files, const char *name, const char *from, int json_only) {
    char err[PP_ERR_LEN], path[PP_DEMO_PATH_MAX + 32];
    pp_voice v;
    snprintf(path, sizeof path, "%s/%s.pt", files->voices_dir, from);
    if (pp_voice_load(path, 0, &v, err)) return 0;
    snprintf(path, sizeof path, "%s/%s.embeddings.bin", files->voices_dir, name);
    FILE *f = json_only ? NULL : fopen(path, "wb");
    int ok = json_only || (f && fwrite(v.embeddings, sizeof(float), (size_t)(v.frames * v.dim), f) ==
                                    (size_t)(v.frames * v.dim));
    if (f && fclose(f) != 0) ok = 0;
    snprintf(path, sizeof path, "%s/%s.cache.json", files->voices_dir, name);
    f = fopen(path, "wb");
    ok = ok && f && fputc('[', f) != EOF;
    for (int k = 0; ok && k < PP_VOICE_STREAMS; k++)
        for (int c = 0; ok && c < PP_VOICE_RING; c++)
            ok = fprintf(f, "%s%lld%s", c ? "," : k ? ",[" : "[", (long long)v.cache[k][c],
                         c == PP_VOICE_RING - 1 ? "]" : "") > 0;
    ok = ok && fputc(']', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    pp_voice_free(&v);
    return ok;
}

/* A pair voice's token ring lives in its .cache.json: rewriting that file alone is another voice
 * for the prompt cache. */
static void test_prompt_cache_pair(const pp_demo_files *files, pp_backend *be) {
    pp_model *m = open_cached(files, be);
    if (!m) return;
    static run out;
    pp_session_params p;
    params_of(0, &p);
    strcpy(p.voice, "Pair");
    TEST_COND("pair voice written", write_pair(files, "Pair", "NATF2", 0));
    cached_run(m, &p, 0, "a pair voice", &out);
    cached_run(m, &p, 1, "the pair voice again", &out);
    TEST_COND("the pair's .cache.json rewritten alone", write_pair(files, "Pair", "NATM1", 1));
    cached_run(m, &p, 0, "the pair voice with another .cache.json", &out);
    pp_model_close(m);
}

static pp_plan plan_with(pp_model *m, double host_ms) {
    char err[PP_ERR_LEN];
    pp_plan p;
    int rc = pp_plan_capacity(m, 0, 0, host_ms, &p, err);
    if (rc) fprintf(stderr, "plan: %s\n", err);
    TEST_COND("the plan is made", rc == PP_OK);
    printf("host %.0f ms a conversation: %d conversations (time alone %d, memory %d): %s\n", host_ms, p.sessions,
           p.by_time, p.by_memory, p.why);
    return p;
}

static void test_capacity_plan(pp_model *m) {
    pp_plan none = plan_with(m, 0), some = plan_with(m, 10), too_much = plan_with(m, 100);
    TEST_COND("the plan keeps the host work it was given", some.host_ms == 10 && none.host_ms == 0);
    TEST_COND("10 ms a conversation: at most 6 fit 64 ms", some.by_time <= 6);
    TEST_COND("host work never raises the limit", some.by_time <= none.by_time);
    TEST_COND("the plan says what it added", strstr(some.why, "10.00 ms of host work added per conversation") != NULL);
    TEST_COND("100 ms a conversation: not even one in real time",
              too_much.by_time == 0 && too_much.sessions == 1 &&
                  strstr(too_much.why, "not even one runs in real time"));
    TEST_COND("it names the budget the frame allows, not the whole frame",
              strstr(too_much.why, "of the 64.0 ms a frame allows") != NULL);
    TEST_COND("its predicted frame counts the host work", too_much.frame_ms >= 100);
    char err[PP_ERR_LEN];
    pp_plan cached;
    TEST_COND("a prompt cache larger than the memory (CPU: host memory is the conversations')",
              pp_plan_capacity(m, 0, (size_t)1 << 50, 0, &cached, err) == PP_OK && cached.by_memory == 0 &&
                  cached.sessions == 1);
    TEST_COND("... says that the prompt cache took it", strstr(cached.why, "memory holds none") &&
                                                            strstr(cached.why, "set aside for the prompt cache"));
}

/* Backend bytes allocated while g_counting (nothing is released in between). */
static int g_counting;
static size_t g_allocated;
static pp_backend_ops g_cpu_ops;

static void *counting_alloc(pp_backend *be, size_t bytes) {
    if (g_counting) g_allocated += bytes;
    return g_cpu_ops.alloc(be, bytes);
}

static void test_plan_batch_memory(const pp_demo_files *files, pp_backend *cpu) {
    char err[PP_ERR_LEN];
    g_cpu_ops = *cpu->ops;
    pp_backend_ops ops = *cpu->ops;
    ops.alloc = counting_alloc;
    pp_backend be = {&ops, cpu->impl};
    pp_model_paths paths = pp_demo_paths(files);
    pp_model *m = NULL;
    pp_session_batch *one = NULL, *four = NULL;
    int rc = pp_model_open(&be, &paths, &m, err);
    if (!rc) rc = pp_session_batch_create(m, 1, &one, err);
    g_counting = 1;
    if (!rc) rc = pp_session_batch_create(m, 4, &four, err);
    g_counting = 0;
    pp_plan p;
    if (!rc) rc = pp_plan_capacity(m, 2, 0, 0, &p, err);
    if (rc) fprintf(stderr, "batch memory: %s\n", err);
    TEST_COND("batches and a plan on a counting backend", rc == PP_OK);
    if (!rc) {
        size_t row = pp_session_batch_bytes(one);
        size_t kv = pp_lm_ctx_bytes(pp_lm_get_config(pp_model_lm(m)), pp_model_kv_cache(m));
        printf("tick batch: %zu bytes for 1 row, %zu for 4 (%zu from the backend); plan: %zu bytes a conversation "
               "(KV %zu)\n", row, pp_session_batch_bytes(four), g_allocated, p.per_session_bytes, kv);
        TEST_COND("a batch counts what it takes from the backend", pp_session_batch_bytes(four) >= g_allocated);
        TEST_COND("its rows make its size", pp_session_batch_bytes(four) <= 4 * row);
        mimi_state *st = NULL;
        size_t codec = pp_mimi_state_create(pp_model_mimi(m), &st, err) == PP_OK ? pp_mimi_state_bytes(st) : 0;
        pp_mimi_state_destroy(st);
        TEST_COND("the plan counts a batch row per conversation",
                  p.per_session_bytes == kv + codec + PP_PLAN_SESSION_SCRATCH + row);
    }
    pp_session_batch_destroy(one);
    pp_session_batch_destroy(four);
    pp_model_close(m);
}

/* run_recorded with a device's schedule: a key's first run is plain, its second the recording
 * (RECORD_NS more here), later ones replays. */
#define RECORD_NS 250000000L
#define RECORD_KEYS 64
static uint64_t g_keys[RECORD_KEYS];
static int g_runs[RECORD_KEYS], g_n_keys;

static int slow_record(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err) {
    (void)be, (void)err;
    int i = 0;
    while (i < g_n_keys && g_keys[i] != key) i++;
    if (i == g_n_keys && g_n_keys < RECORD_KEYS) g_keys[g_n_keys++] = key;
    if (i < RECORD_KEYS && ++g_runs[i] == 2) nanosleep(&(struct timespec){0, RECORD_NS}, NULL);
    issue(arg);
    return PP_OK;
}

static void forget_key(pp_backend *be, uint64_t key) { (void)be, (void)key; }

static void test_plan_recorded(const pp_demo_files *files, pp_backend *cpu) {
    char err[PP_ERR_LEN];
    pp_backend_ops ops = *cpu->ops;
    ops.run_recorded = slow_record;
    ops.forget_recorded = forget_key;
    pp_backend be = {&ops, cpu->impl};
    pp_model_paths paths = pp_demo_paths(files);
    pp_model *m = NULL;
    pp_plan p;
    int rc = pp_model_open(&be, &paths, &m, err);
    if (!rc) rc = pp_plan_capacity(m, 2, 0, 0, &p, err);
    if (rc) fprintf(stderr, "plan on a recording backend: %s\n", err);
    TEST_COND("plan on a recording backend", rc == PP_OK && g_n_keys > 0);
    if (!rc) {
        printf("recording backend (%d keys): LM tick %.2f ms, codec %.2f ms\n", g_n_keys, p.tick1_ms, p.codec_ms);
        TEST_COND("the recording is not the LM tick", p.tick1_ms < RECORD_NS / 1e6 / 5);
        TEST_COND("the recording is not the codec frame", p.codec_ms < RECORD_NS / 1e6 / 5);
    }
    pp_model_close(m);
}

int main(void) {
    char err[PP_ERR_LEN], dir[64] = "/tmp/pp-session-batch-XXXXXX";
    pp_log_set_level(PP_LOG_WARN);
    if (!mkdtemp(dir)) TEST_SKIP("no temporary directory");
    pp_demo_files files;
    pp_backend *be = NULL;
    pp_model *m = NULL;
    TEST_COND("demo model written", pp_demo_write(dir, &files, err) == PP_OK);
    TEST_COND("cpu backend", pp_backend_cpu_create(2, &be, err) == PP_OK);
    pp_model_paths paths = pp_demo_paths(&files);
    int rc = pp_model_open(be, &paths, &m, err);
    if (rc) fprintf(stderr, "model: %s\n", err);
    TEST_COND("demo model opens", rc == PP_OK);
    if (rc) return test_report();
    test_batching(m);
    test_stage_order(m);
    test_prompt_cache(&files, be, m);
    test_prompt_cache_pair(&files, be);
    test_capacity_plan(m);
    test_plan_recorded(&files, be);
    test_plan_batch_memory(&files, be);
    pp_model_close(m);
    pp_backend_destroy(be);
    test_remove_dir(dir);
    return test_report();
}
