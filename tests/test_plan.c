/* test_plan: the start-up capacity plan on the built-in demo model (CPU backend). The caller's
 * per-conversation work outside the batch (a server's downlink encoding) must count against
 * the frame: n conversations at host_ms each can never be admitted past 64 ms / host_ms (the
 * 80 ms frame at 80 % headroom), a host_ms past the budget leaves one conversation that cannot
 * run in real time, and the plan says what it added. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "session/demo.h"
#include "session/plan.h"

#include <stdlib.h>
#include <string.h>

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

int main(void) {
    char err[PP_ERR_LEN], dir[64] = "/tmp/pp-plan-XXXXXX";
    pp_log_set_level(PP_LOG_WARN);
    if (!mkdtemp(dir)) TEST_SKIP("no temporary directory");
    pp_demo_files files;
    pp_backend *be = NULL;
    pp_model *m = NULL;
    TEST_COND("demo model written", pp_demo_write(dir, &files, err) == PP_OK);
    TEST_COND("cpu backend", pp_backend_cpu_create(2, &be, err) == PP_OK);
    pp_model_paths paths = {.weights = files.weights,
                            .mimi = files.mimi,
                            .tokenizer = files.tokenizer,
                            .voices_dir = files.voices_dir,
                            .name = "demo"};
    int rc = test_failed ? PP_EINVAL : pp_model_open(be, &paths, &m, err);
    if (rc) fprintf(stderr, "model: %s\n", err);
    TEST_COND("demo model opens", rc == PP_OK);
    if (rc) return test_report();

    pp_plan none = plan_with(m, 0), some = plan_with(m, 10), too_much = plan_with(m, 100);
    TEST_COND("the plan keeps the host work it was given", some.host_ms == 10 && none.host_ms == 0);
    TEST_COND("10 ms a conversation: at most 6 fit 64 ms", some.by_time <= 6);
    TEST_COND("host work never raises the limit", some.by_time <= none.by_time);
    TEST_COND("the plan says what it added", strstr(some.why, "10.00 ms of host work added per conversation") != NULL);
    TEST_COND("100 ms a conversation: not even one in real time",
              too_much.by_time == 0 && too_much.sessions == 1 && strstr(too_much.why, "not even one runs in real time"));
    TEST_COND("its predicted frame counts the host work", too_much.frame_ms >= 100);

    pp_model_close(m);
    pp_backend_destroy(be);
    return test_report();
}
