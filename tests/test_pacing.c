/* test_pacing: the silence-frame and idle-timeout rules of src/server/pacing.c on a made-up
 * clock: no silence while audio flows (even with jitter under the grace), silence frames on an
 * 80 ms grid once the client has been quiet for the grace, real audio taking over again, the
 * idle timeout counted from the later of the last audio and the handshake, and 0 = never. */
#include "test.h"

#include "server/pacing.h"

#define MS 1000000LL
#define S 1000000000LL

/* Silence frames pacing_check asks for between t0 and t1, polled every step_ns. */
static int silences(pacing *p, int64_t t0, int64_t t1, int64_t step_ns, int64_t last_input, int idle_s) {
    int n = 0;
    for (int64_t t = t0; t < t1; t += step_ns) {
        pacing_action a = pacing_check(p, t, last_input, idle_s);
        if (a == PACING_IDLE) return -1;
        n += a == PACING_SILENCE;
    }
    return n;
}

int main(void) {
    pacing p;
    int64_t t0 = 1000 * S;
    pacing_start(&p, t0);
    /* Audio every 80 ms with up to 400 ms of jitter: never a silent frame. */
    int n = 0;
    for (int i = 0; i < 100; i++) {
        int64_t t = t0 + i * 80 * MS + (i % 7 == 0 ? 400 * MS : 0);
        n += silences(&p, t - 79 * MS, t, 10 * MS, t - 80 * MS, 60) > 0;
        pacing_frame(&p, t);
    }
    TEST_COND("no silence while audio flows with jitter under the grace", n == 0);

    /* Then the client goes quiet: the first silent frame after the grace, then one per 80 ms. */
    int64_t last = t0 + 99 * 80 * MS;
    pacing_start(&p, t0);
    pacing_frame(&p, last);
    TEST_COND("nothing before the grace", silences(&p, last, last + PACING_GRACE_NS - MS, MS, last, 60) == 0);
    int k = silences(&p, last + PACING_GRACE_NS - MS, last + PACING_GRACE_NS + 800 * MS, MS, last, 60);
    TEST_COND("silence every 80 ms after the grace (10 in 800 ms)", k == 10);
    TEST_COND("silent frames counted", p.silent_frames == 10);
    /* A late engine (polled every 500 ms) gets one frame per poll, not a burst. */
    int64_t at = last + PACING_GRACE_NS + 800 * MS;
    TEST_COND("a late engine gets no burst", silences(&p, at, at + 2 * S, 500 * MS, last, 60) == 4);
    /* Real audio takes over: grace again before the next silent frame. It says how many silent
     * frames came between the client's two frames (its audio was that late): 10 + 4. */
    at += 2 * S;
    TEST_COND("the silent frames between the client's frames are returned", pacing_frame(&p, at) == 14);
    TEST_COND("... once", pacing_frame(&p, at) == 0);
    TEST_COND("after real audio, grace again", silences(&p, at, at + PACING_GRACE_NS - MS, MS, at, 60) == 0);

    /* Silence before the client's first frame is no lateness: it had not begun to talk. */
    pacing_start(&p, t0);
    silences(&p, t0, t0 + 2 * S, 10 * MS, t0, 60);
    TEST_COND("silence before the first frame is not returned", p.silent_frames > 0 && pacing_frame(&p, t0 + 2 * S) == 0);

    /* Idle timeout: counted from the last audio, or the handshake when that is later. */
    pacing_start(&p, t0);
    TEST_COND("not idle before the timeout", pacing_check(&p, t0 + 59 * S, t0 - 100 * S, 60) != PACING_IDLE);
    TEST_COND("idle after 60 s from the handshake", pacing_check(&p, t0 + 60 * S, t0 - 100 * S, 60) == PACING_IDLE);
    TEST_COND("audio resets the idle clock", pacing_check(&p, t0 + 60 * S, t0 + 30 * S, 60) != PACING_IDLE);
    TEST_COND("idle 60 s after the last audio", pacing_check(&p, t0 + 90 * S, t0 + 30 * S, 60) == PACING_IDLE);
    TEST_COND("0 never times out", pacing_check(&p, t0 + 100000 * S, t0, 0) != PACING_IDLE);
    return test_report();
}
