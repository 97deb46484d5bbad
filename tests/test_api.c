/* test_api: a program that knows only include/personaplex.h runs a whole conversation on
 * the demo model: prompts, then frames of a 300 Hz tone in, audio and text out. */
#include "personaplex.h"

#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    char err[PP_ERR_LEN] = "", dir[] = "/tmp/pp-test-api-XXXXXX";
    TEST_COND("temporary directory", mkdtemp(dir) != NULL);
    pp_demo_files files;
    pp_backend *be = NULL;
    pp_model *m = NULL;
    pp_session *s = NULL;
    int rc = pp_demo_write(dir, &files, err);
    if (!rc) rc = pp_backend_create("cpu", 2, &be, err);
    pp_model_paths paths = pp_demo_paths(&files);
    if (!rc) rc = pp_model_open(be, &paths, &m, err);
    pp_session_params p;
    pp_params_defaults(&p);
    if (!rc) rc = pp_params_parse_query(&p, "text_prompt=hello+there&voice_prompt=NATF2.pt", 45, err);
    if (!rc) rc = pp_session_create(m, &p, 256, &s, err);
    TEST_COND(err, rc == PP_OK);
    int prompt_calls = 0;
    while (!rc && (rc = pp_session_prefill(s, err)) == 0) prompt_calls++;
    TEST_COND("prefill finishes", rc == 1);
    TEST_COND("one prefill call per run of prompt frames",
              s && prompt_calls + 1 == (pp_session_prompt_frames(s) + PP_SESSION_PREFILL_ROWS - 1) /
                                           PP_SESSION_PREFILL_ROWS);
    float in[PP_FRAME_SAMPLES], out[PP_FRAME_SAMPLES];
    double energy = 0;
    int finite = 1;
    for (int f = 0; rc == 1 && f < 25; f++) {
        for (int i = 0; i < PP_FRAME_SAMPLES; i++)
            in[i] = 0.3f * sinf(2.0f * 3.14159265f * 300.0f * (float)(f * PP_FRAME_SAMPLES + i) / 24000.0f);
        char piece[PP_SESSION_PIECE_MAX];
        if (pp_session_step(s, in, out, piece, NULL, err) != PP_OK) {
            TEST_COND(err, 0);
            break;
        }
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
            finite &= isfinite(out[i]);
            energy += (double)out[i] * out[i];
        }
    }
    TEST_COND("output samples are finite", finite);
    TEST_COND("the demo model speaks (output not silent)", energy / (25.0 * PP_FRAME_SAMPLES) > 1e-6);
    pp_session_destroy(s);
    pp_model_close(m);
    pp_backend_destroy(be);
    TEST_COND("cleanup", test_remove_dir(dir) == 0);
    return test_report();
}
