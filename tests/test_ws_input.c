/* test_ws_input: the audio-ahead-of-real-time check of src/server/ws_input.c counts from the
 * client's first audio, not from the socket's opening. A client that opens its socket, waits
 * 2 s and then pushes 11 s of audio at once is 11 s ahead of real time (over the 10 s allowed)
 * and is closed; counted from the opening it looked only 9 s ahead and went on. 9 s at once
 * after the same wait stays within the allowance. (The 2 s wait is the only sleep; the
 * pushes take microseconds, far inside the 1 s margin either way.)
 *
 * The bad-input limit is a rate, not a lifetime count: a long chat call (4 min of audio) with a
 * bad Ogg page and an unknown message kind every 12 s (40 bad inputs in all, a flaky client)
 * goes on, while bad inputs with no audio between them still close the socket at the 33rd. */
#include "test.h"

#include "base/err.h"
#include "audio/opus.h"
#include "base/clock.h"
#include "base/log.h"
#include "server/conn.h"
#include "server/ws_input.h"

#include <stdlib.h>
#include <string.h>
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

/* Empties the conn's output queue and uplink as the service and engine threads would. */
static void drain(conn *c) {
    static uint8_t msg[CONN_MSG_MAX];
    size_t len;
    int text;
    while (conn_dequeue(c, msg, sizeof msg, &len, &text) > 0) {}
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    while (conn_take_frame(c, frame, &ready) > 0) {}
}

/* Sends one chat message: the kind byte and payload in one frame. */
static int send_message(ws_input *in, int kind, const uint8_t *payload, size_t len) {
    static uint8_t msg[1 + PP_DOWNLINK_MAX_PAGE];
    msg[0] = (uint8_t)kind;
    memcpy(msg + 1, payload, len);
    int todo = ws_input_receive(in, msg, 1 + len, 1, 1);
    drain(in->c);
    return todo;
}

/* A chat call of `pages` 80 ms Opus pages, every `every`-th one sent with a bad CRC and
 * followed by a message of an unknown kind. Returns whether the socket is closing at the end;
 * *bad receives the bad inputs counted. */
static int long_call(int pages, int every, int *bad) {
    char err[PP_ERR_LEN];
    conn *c;
    pp_downlink *dl;
    if (conn_create(2, CONN_CHAT, &c, err) || pp_downlink_open(&dl, 0, err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    ws_input in;
    ws_input_init(&in, c, NULL);
    in.t_first_audio = pp_now_ns() - (int64_t)pages * 80 * 1000000; /* the call has lasted that long */
    uint8_t page[PP_DOWNLINK_MAX_PAGE];
    size_t len;
    for (int h = 0; h < 2; h++) {
        pp_downlink_header(dl, h, page, sizeof page, &len, err);
        send_message(&in, MSG_AUDIO, page, len);
    }
    static float pcm[PP_FRAME_SAMPLES];
    for (int k = 1; k <= pages && !in.closing; k++) {
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) pcm[i] = 0.1f * (float)((k * PP_FRAME_SAMPLES + i) % 50) / 50;
        pp_downlink_encode(dl, pcm, page, sizeof page, &len, err);
        if (k % every == 0) page[len - 1] ^= 0x40;
        send_message(&in, MSG_AUDIO, page, len);
        if (k % every == 0) send_message(&in, 0x7f, page, 1);
    }
    int closing = in.closing;
    *bad = in.bad;
    pp_downlink_close(dl);
    conn_destroy(c);
    return closing;
}

int main(void) {
    pp_log_set_level(PP_LOG_ERROR);
    int closing;
    int todo = burst_after_wait(WS_INPUT_MAX_AHEAD_S + 1, &closing);
    TEST_COND("11 s at once after a 2 s wait: closed as too far ahead", todo == WS_INPUT_WRITE && closing);
    todo = burst_after_wait(WS_INPUT_MAX_AHEAD_S - 1, &closing);
    TEST_COND("9 s at once: within the 10 s allowance", todo == 0 && !closing);

    int bad;
    int closed = long_call(3000, 150, &bad);
    printf("long call: %d bad inputs, %s\n", bad, closed ? "closed" : "open");
    TEST_COND("40 scattered bad inputs over 4 min of audio: the call goes on", !closed && bad == 40);
    closed = long_call(100, 1, &bad);
    TEST_COND("a bad page every 80 ms: closed", closed);
    char err[PP_ERR_LEN];
    conn *c;
    if (conn_create(3, CONN_CHAT, &c, err)) return 1;
    ws_input in;
    ws_input_init(&in, c, NULL);
    int sent = 0;
    for (; sent < 1000 && !in.closing; sent++) send_message(&in, 0x7f, (const uint8_t *)"x", 1);
    TEST_COND("bad inputs back to back: closed at the limit", in.closing && sent == WS_INPUT_MAX_BAD + 1);
    conn_destroy(c);
    return test_report();
}
