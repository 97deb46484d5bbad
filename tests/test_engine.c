/* test_engine: the engine after a failed tick, on the demo model through a backend whose
 * recorded frames can be made to fail (as a device that lost its context fails every frame).
 *
 * A conversation runs (its handshake and audio pages come); then every frame fails: the
 * conversation is closed, and engine_failing reports the failure with the backend's message
 * (what /health turns into "failing", 503 on /health and /health/live). Once frames run
 * again, a new conversation's tick clears it. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "server/engine.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_fail;

static int failing_run(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err) {
    (void)be, (void)key;
    if (atomic_load(&g_fail)) return pp_fail(err, PP_EDEVICE, "test: the device is lost");
    issue(arg);
    return PP_OK;
}

static void forget_key(pp_backend *be, uint64_t key) { (void)be, (void)key; }

static void notify(void *arg) { (void)arg; }

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
    pp_backend_ops ops = *cpu->ops;
    ops.run_recorded = failing_run;
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

    engine_destroy(e);
    metrics_destroy(mx);
    pp_model_close(m);
    pp_backend_destroy(cpu);
    test_remove_dir(dir);
    return test_report();
}
