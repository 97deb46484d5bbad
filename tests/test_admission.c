/* test_admission: the capacity rule on hand-worked tick times (and the median the calibration
 * takes of them), and a calibration on the lm-bf16 golden model, fresh and at its full context
 * (only that it measures every size; speed is never asserted), with the skip it ages
 * conversations by; the calibration's ticks sample as a server's conversations do. */
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "model/admission.h"

static void test_rule(void) {
    /* 20 ms for 1 conversation, 24 for 2, 40 for 8; 2 ms of codec each; 64 ms of an 80 ms frame.
     * n = 9: 40 + 16/6 + 18 = 60.7 fits; n = 10: 40 + 32/6 + 20 = 65.3 does not. */
    pp_admission_calib c = {.n = 3, .batch = {1, 2, 8}, .tick_ms = {20, 24, 40}};
    pp_admission_limits l;
    pp_admission_limits_default(&l);
    l.per_session_ms = 2;
    pp_admission_report rep;
    TEST_COND("between points: linear", fabs(pp_admission_predict(&c, &l, 5) - (24 + 8 + 10)) < 1e-9);
    TEST_COND("below the first point: the first point", fabs(pp_admission_predict(&c, &l, 0) - 20) < 1e-9);
    TEST_COND("frame time limit: 9", pp_admission_capacity(&c, &l, &rep) == 9 && rep.by_time == 9);
    TEST_COND("memory not limiting", rep.by_memory == -1);
    l.mem_free = 5 * 1000 + 999;
    l.per_session_bytes = 1000;
    TEST_COND("memory limit: 5", pp_admission_capacity(&c, &l, &rep) == 5 && rep.by_memory == 5);
    l.hard_max = 3;
    TEST_COND("configured maximum: 3", pp_admission_capacity(&c, &l, &rep) == 3);
    l.hard_max = 0;
    l.mem_free = 0;
    l.per_session_ms = 50;
    TEST_COND("too slow for one: 0", pp_admission_capacity(&c, &l, &rep) == 0);
    double odd[] = {3, 250, 2}, even[] = {4, 1, 300, 2};
    TEST_COND("median: one slow tick does not move it",
              pp_admission_median(odd, 3) == 3 && pp_admission_median(even, 4) == 3 && odd[0] == 2);
    pp_admission_calib falling = {.n = 2, .batch = {1, 4}, .tick_ms = {30, 20}};
    l.per_session_ms = 0;
    TEST_COND("a falling measurement never makes a tick cheaper",
              fabs(pp_admission_predict(&falling, &l, 4) - 30) < 1e-9 &&
                  fabs(pp_admission_predict(&falling, &l, 100) - 30) < 1e-9);
}

/* pp_lmgen_skip: only after the first call, never backwards; the clock moves and calls go on. */
static void test_skip(const pp_lm *lm, int context) {
    char err[PP_ERR_LEN] = "";
    pp_lmgen *g = NULL;
    pp_lmgen_out out;
    TEST_COND("lmgen", pp_lmgen_create(lm, NULL, &g, err) == 0);
    if (!g) return;
    TEST_COND("no skip before the first call", pp_lmgen_skip(g, 10, err) == PP_EINVAL);
    int rc = pp_lmgen_step(g, pp_lmgen_silence_codes, &out, err);
    TEST_COND("first call", rc == 0 && pp_lmgen_offset(g) == 1);
    TEST_COND("no skip backwards", pp_lmgen_skip(g, -1, err) == PP_EINVAL);
    TEST_COND("skip", pp_lmgen_skip(g, context + 5, err) == 0 && pp_lmgen_offset(g) == context + 6);
    for (int t = 0; t < 3 && !rc; t++) rc = pp_lmgen_step(g, pp_lmgen_silence_codes, &out, err);
    TEST_COND("calls go on past the ring's end", rc == 0 && pp_lmgen_offset(g) == context + 9);
    if (rc) fprintf(stderr, "%s\n", err);
    pp_lmgen_destroy(g);
}

static void test_calibrate(void) {
    char err[PP_ERR_LEN] = "";
    pp_backend *be = NULL;
    pp_lm *lm = NULL;
    int rc = pp_backend_cpu_create(1, &be, err);
    if (!rc)
        rc = pp_lm_open(be, PP_TEST_DATA "/golden/lm-bf16/model.safetensors",
                        PP_TEST_DATA "/golden/lm-bf16/config.json", &lm, err);
    TEST_COND("open lm-bf16", rc == 0);
    if (!rc) {
        static const int sizes[] = {1, 2, 3};
        pp_admission_calib c;
        int context = pp_lm_get_config(lm)->context;
        for (int full = 0; full < 2; full++) {
            rc = pp_admission_calibrate(lm, sizes, 3, 2, PP_KV_INT8, full ? context : 0, &c, err);
            TEST_COND(full ? "calibrate at the full context" : "calibrate fresh",
                      rc == 0 && c.n == 3 && c.batch[2] == 3);
            TEST_COND("times measured", c.tick_ms[0] > 0 && c.tick_ms[1] > 0 && c.tick_ms[2] > 0);
        }
        static const int bad[] = {2, 2};
        TEST_COND("sizes must ascend", pp_admission_calibrate(lm, bad, 2, 1, PP_KV_F32, 0, &c, err) == PP_EINVAL);
        test_skip(lm, context);
        TEST_COND("free memory is known", pp_admission_free_memory(be) > 0);
    }
    pp_lm_close(lm);
    if (be) pp_backend_destroy(be);
}

/* The CPU backend's sampler, noting the highest temperature it drew with. */
static pp_backend_ops g_plain;
static float g_temp_seen;

static void noting_sample(pp_backend *be, const float *logits, int rows, int n, const pp_sample_param *params,
                          int stream, const int32_t *forced, int32_t *tokens) {
    for (int r = 0; r < rows; r++)
        if (params[r].temp > g_temp_seen) g_temp_seen = params[r].temp;
    g_plain.sample(be, logits, rows, n, params, stream, forced, tokens);
}

/* The calibration's ticks sample as a server's conversations do (default temperatures), not
 * greedily: the server's tick pays for the sampler. */
static void test_calibration_samples(void) {
    char err[PP_ERR_LEN] = "";
    pp_backend *cpu = NULL;
    pp_lm *lm = NULL;
    int rc = pp_backend_cpu_create(1, &cpu, err);
    if (rc) return;
    g_plain = *cpu->ops;
    pp_backend_ops ops = g_plain;
    ops.sample = noting_sample;
    pp_backend be = {&ops, cpu->impl};
    rc = pp_lm_open(&be, PP_TEST_DATA "/golden/lm-bf16/model.safetensors", PP_TEST_DATA "/golden/lm-bf16/config.json",
                    &lm, err);
    static const int one[] = {1};
    pp_admission_calib c;
    if (!rc) rc = pp_admission_calibrate(lm, one, 1, 2, PP_KV_INT8, 0, &c, err);
    TEST_COND("calibrate on a noting backend", rc == 0);
    pp_lmgen_params def;
    pp_lmgen_params_default(&def);
    printf("calibration drew with temperatures up to %.2f\n", g_temp_seen);
    TEST_COND("its ticks sample at the default temperatures", g_temp_seen == def.audio_temp && def.audio_temp > 0);
    pp_lm_close(lm);
    pp_backend_destroy(cpu);
}

int main(void) {
    pp_log_set_level(PP_LOG_WARN);
    test_rule();
    test_calibrate();
    test_calibration_samples();
    return test_report();
}
