/* test_ws_input: the audio-ahead-of-real-time check of src/server/ws_input.c counts from the
 * client's first audio, not from the socket's opening. A client that opens its socket, waits
 * 2 s and then pushes 11 s of audio at once is 11 s ahead of real time (over the 10 s allowed)
 * and is closed; counted from the opening it looked only 9 s ahead and went on. 9 s at once
 * after the same wait stays within the allowance. (The 2 s wait is the only sleep; the
 * pushes take microseconds, far inside the 1 s margin either way.) */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "server/conn.h"
#include "server/ws_input.h"

#include <stdlib.h>
#include <time.h>

#define WAIT_S 2

/* What the check answers after seconds of audio pushed in one go on a socket open WAIT_S s. */
static int burst_after_wait(int seconds, int *closing) {
    char err[PP_ERR_LEN];
    conn *c;
    if (conn_create(1, CONN_REALTIME, &c, err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    ws_input in;
    ws_input_init(&in, c, NULL);
    TEST_COND("no audio yet: not ahead", ws_input_check_pace(&in) == 0);
    nanosleep(&(struct timespec){WAIT_S, 0}, NULL);
    static float pcm[PP_SAMPLE_RATE];
    int todo = 0;
    for (int s = 0; s < seconds && !todo; s++) {
        conn_push_pcm(c, pcm, PP_SAMPLE_RATE);
        todo = ws_input_check_pace(&in);
    }
    *closing = in.closing;
    conn_destroy(c);
    return todo;
}

int main(void) {
    pp_log_set_level(PP_LOG_ERROR);
    int closing;
    int todo = burst_after_wait(WS_INPUT_MAX_AHEAD_S + 1, &closing);
    TEST_COND("11 s at once after a 2 s wait: closed as too far ahead", todo == WS_INPUT_WRITE && closing);
    todo = burst_after_wait(WS_INPUT_MAX_AHEAD_S - 1, &closing);
    TEST_COND("9 s at once: within the 10 s allowance", todo == 0 && !closing);
    return test_report();
}
