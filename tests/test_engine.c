/* test_engine: the engine after a failed tick, on the demo model through a backend whose
 * recorded frames can be made to fail (as a device that lost its context fails every frame).
 *
 * A conversation runs (its handshake and audio pages come); then every frame fails: the
 * conversation is closed, and engine_failing reports the failure with the backend's message
 * (what /health turns into "failing", 503 on /health and /health/live). Once frames run
 * again, a new conversation's tick clears it.
 *
 * Then one conversation's frame is made to fail whenever it is in a codec call (its audio
 * carries a marker value the backend refuses) while another conversation's frames share its
 * ticks: the one at fault is closed, the other carries on (a failed batched call is retried a
 * conversation at a time), and the engine does not report itself failing.
 *
 * Last, client audio the model did not hear as it was sent is counted in /metrics: the silent
 * frames it heard between a client's frames (they came late), samples a full uplink dropped. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "server/engine.h"
#include "server/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_fail;
/* The last upload of whole audio frames held POISON: the next recorded run (the codec call that
 * uploaded them) fails. */
static atomic_int g_poisoned;
#define POISON 0.4375f

static pp_backend_ops g_cpu_ops; /* the CPU backend's own */

/* A codec call uploads its rows' frames in one piece: one holding POISON poisons the call. */
static void marking_upload(pp_backend *be, void *dst, const void *host_src, size_t bytes) {
    if (bytes && bytes % (PP_FRAME_SAMPLES * sizeof(float)) == 0) {
        const float *x = host_src;
        int found = 0;
        for (size_t i = 0; i < bytes / sizeof(float) && !found; i++) found = x[i] == POISON;
        atomic_store(&g_poisoned, found);
    }
    g_cpu_ops.upload(be, dst, host_src, bytes);
}

static int failing_run(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err) {
    (void)be, (void)key;
    if (atomic_load(&g_fail)) return pp_fail(err, PP_EDEVICE, "test: the device is lost");
    if (atomic_exchange(&g_poisoned, 0)) return pp_fail(err, PP_EINVAL, "test: this conversation's frame is refused");
    issue(arg);
    return PP_OK;
}

static void forget_key(pp_backend *be, uint64_t key) { (void)be, (void)key; }

static void notify(void *arg) { (void)arg; }

/* Queues 1 s of silence on good (a backlog the engine takes a frame a pass), then feeds bad frames
 * of POISON every 20 ms, taking what both are sent, until bad is closing. Returns 1 when it is. */
static int poison_beside(conn *bad, conn *good) {
    static float silence[PP_FRAME_SAMPLES], poison[PP_FRAME_SAMPLES];
    static uint8_t msg[CONN_MSG_MAX];
    size_t len;
    int text;
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) poison[i] = POISON;
    for (int f = 0; f < 12; f++) conn_push_pcm(good, silence, PP_FRAME_SAMPLES);
    for (int i = 0; i < 500; i++) {
        conn_push_pcm(bad, poison, PP_FRAME_SAMPLES);
        while (conn_dequeue(bad, msg, sizeof msg, &len, &text)) {}
        while (conn_dequeue(good, msg, sizeof msg, &len, &text)) {}
        if (conn_closing(bad)) return 1;
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    return 0;
}

/* Feeds c 80 ms of silence every 20 ms (4x real time, within the uplink's 10 s) for up to
 * 10 s, taking what it is sent, until it is closing (close) or has had audio pages past the
 * stream's two header pages (a tick ran). Returns 1 when that came. */
static int feed_until(conn *c, int close) {
    static float pcm[PP_FRAME_SAMPLES];
    static uint8_t msg[CONN_MSG_MAX];
    size_t len;
    int text, pages = 0;
    for (int i = 0; i < 500; i++) {
        conn_push_pcm(c, pcm, PP_FRAME_SAMPLES);
        while (conn_dequeue(c, msg, sizeof msg, &len, &text)) pages += len && msg[0] == 0x01;
        if (close ? conn_closing(c) : pages > 2) return 1;
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    return 0;
}

/* A counter from the metrics' exposition, or -1 when it is not there. */
static double metric(metrics *mx, const char *name) {
    static char body[1 << 16];
    metrics_render(mx, body, sizeof body, 2);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(body, key);
    return at ? strtod(at + strlen(key), NULL) : -1;
}

/* Takes what c is sent every 20 ms, for up to 10 s, until counter `name` reaches at least min.
 * Returns its value then (or at the end). */
static double wait_metric(conn *c, metrics *mx, const char *name, double min) {
    static uint8_t msg[CONN_MSG_MAX];
    size_t len;
    int text;
    double v = -1;
    for (int i = 0; i < 500 && (v = metric(mx, name)) < min; i++) {
        while (conn_dequeue(c, msg, sizeof msg, &len, &text)) {}
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    return v;
}

/* Takes what c is sent until it has had more audio pages than the `frames` of audio it was given
 * (the rest answer frames of silence the model heard instead), for up to 10 s. Returns 1 then. */
static int wait_silence(conn *c, int frames) {
    static uint8_t msg[CONN_MSG_MAX];
    size_t len;
    int text, pages = 0;
    for (int i = 0; i < 500; i++) {
        while (conn_dequeue(c, msg, sizeof msg, &len, &text)) pages += len && msg[0] == 0x01;
        if (pages - 2 > frames) return 1; /* the two header pages come first */
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    return 0;
}

int main(void) {
    char err[PP_ERR_LEN], why[PP_ERR_LEN], dir[64] = "/tmp/pp-engine-XXXXXX";
    pp_log_set_level(PP_LOG_ERROR);
    if (!mkdtemp(dir)) TEST_SKIP("no temporary directory");
    pp_demo_files files;
    pp_backend *cpu = NULL;
    pp_model *m = NULL;
    metrics *mx = NULL;
    engine *e = NULL;
    TEST_COND("demo model written", pp_demo_write(dir, &files, err) == PP_OK);
    TEST_COND("cpu backend", pp_backend_cpu_create(1, &cpu, err) == PP_OK);
    if (test_failed) return test_report();
    g_cpu_ops = *cpu->ops;
    pp_backend_ops ops = *cpu->ops;
    ops.run_recorded = failing_run;
    ops.upload = marking_upload;
    ops.forget_recorded = forget_key;
    pp_backend be = {&ops, cpu->impl};
    pp_model_paths paths = pp_demo_paths(&files);
    int rc = pp_model_open(&be, &paths, &m, err);
    if (!rc) rc = metrics_create(&mx, err);
    engine_config cfg = {.model = m, .metrics = mx, .max_sessions = 2, .max_prompt_tokens = 512, .notify = notify,
                         .trim_after_ms = -1, .echo_cancel = ECHO_CANCEL_OFF, .host_threads = 1};
    if (!rc) rc = engine_create(&cfg, &e, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("engine on the demo model", rc == PP_OK);
    if (rc) return test_report();

    pp_session_params params;
    pp_params_defaults(&params);
    conn *a = NULL, *b = NULL;
    TEST_COND("a conversation", conn_create(1, CONN_CHAT, &a, err) == PP_OK && engine_admit(e, a, &params, err) == 0);
    TEST_COND("... runs", feed_until(a, 0));
    TEST_COND("... and nothing is failing", engine_failing(e, why, sizeof why) == 0);

    atomic_store(&g_fail, 1);
    TEST_COND("its frames fail: it is closed", feed_until(a, 1));
    int n = engine_failing(e, why, sizeof why);
    printf("after the failure: %d failed tick%s (%s)\n", n, n == 1 ? "" : "s", why);
    TEST_COND("the engine says it is failing, and why", n >= 1 && strstr(why, "the device is lost"));
    engine_release(e, a);

    atomic_store(&g_fail, 0);
    TEST_COND("a new conversation", conn_create(2, CONN_CHAT, &b, err) == PP_OK && engine_admit(e, b, &params, err) == 0);
    TEST_COND("... runs once the frames do", feed_until(b, 0));
    TEST_COND("... and its tick clears the failure", engine_failing(e, why, sizeof why) == 0);
    engine_release(e, b);

    conn *bad = NULL, *good = NULL;
    TEST_COND("two conversations", conn_create(3, CONN_CHAT, &bad, err) == PP_OK &&
                                       engine_admit(e, bad, &params, err) == 0 &&
                                       conn_create(4, CONN_CHAT, &good, err) == PP_OK &&
                                       engine_admit(e, good, &params, err) == 0);
    TEST_COND("... both run", feed_until(bad, 0) && feed_until(good, 0));
    TEST_COND("one whose frames fail, beside the other: it is closed", poison_beside(bad, good));
    TEST_COND("... the other is not", !conn_closing(good));
    TEST_COND("... and goes on", feed_until(good, 0) && !conn_closing(good));
    TEST_COND("... and the engine is not failing", engine_failing(e, why, sizeof why) == 0);
    engine_release(e, bad);
    engine_release(e, good);

    /* Client audio the model did not hear as sent is counted where a load test reads it: before,
     * /metrics had no such counters, and a conversation whose audio came late (the model heard
     * silence meanwhile) or overflowed its uplink passed for a whole one. */
    conn *late = NULL;
    static float frame[PP_FRAME_SAMPLES], burst[12 * PP_SAMPLE_RATE];
    TEST_COND("a conversation whose client pauses", conn_create(5, CONN_CHAT, &late, err) == PP_OK &&
                                                        engine_admit(e, late, &params, err) == 0);
    conn_push_pcm(late, frame, PP_FRAME_SAMPLES);
    TEST_COND("... past the grace: the model hears silence", wait_silence(late, 1));
    conn_push_pcm(late, frame, PP_FRAME_SAMPLES);
    double silent = wait_metric(late, mx, "personaplex_uplink_silent_frames_total", 1);
    printf("silent frames between the client's audio: %.0f\n", silent);
    TEST_COND("... then its audio: the silent frames between are counted", silent >= 1);
    conn_push_pcm(late, burst, sizeof burst / sizeof *burst); /* 12 s at once into a 10 s uplink */
    double dropped = wait_metric(late, mx, "personaplex_uplink_dropped_samples_total", 2 * PP_SAMPLE_RATE);
    printf("samples dropped from a full uplink: %.0f\n", dropped);
    TEST_COND("... audio past the uplink's 10 s is dropped and counted", dropped >= 2 * PP_SAMPLE_RATE);
    TEST_COND("... nothing concealed (no Ogg here)", metric(mx, "personaplex_uplink_concealed_packets_total") == 0);
    engine_release(e, late);

    engine_destroy(e);
    metrics_destroy(mx);
    pp_model_close(m);
    pp_backend_destroy(cpu);
    test_remove_dir(dir);
    return test_report();
}
