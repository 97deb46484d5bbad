/* ws_input: the client-message dispatch of a chat socket (see ws_input.h). */
#include "server/ws_input.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>

void ws_input_init(ws_input *in, conn *c, metrics *m) {
    memset(in, 0, sizeof *in);
    in->c = c;
    in->metrics = m;
    pp_fault_budget_init(&in->bad_budget, WS_INPUT_MAX_BAD, (uint64_t)WS_INPUT_FORGIVE_S * PP_SAMPLE_RATE);
}

int ws_input_count_bad(ws_input *in) {
    if (in->metrics) metrics_bad_input(in->metrics);
    in->bad++;
    return pp_fault_budget_add(&in->bad_budget, conn_uplink_stats(in->c).samples);
}

int ws_input_reject(ws_input *in, int close_code, const char *what) {
    int over_budget = ws_input_count_bad(in);
    unsigned long long id = (unsigned long long)conn_id(in->c);
    if (close_code || over_budget) {
        PP_WARN("ws", "session %llu: %s; closing", id, what);
        conn_fail(in->c, close_code ? close_code : CLOSE_POLICY, "%s", what);
        in->closing = 1;
    } else {
        PP_WARN("ws", "session %llu: %s", id, what);
        conn_fail(in->c, 0, "%s", what);
    }
    return WS_INPUT_WRITE;
}

int ws_input_check_pace(ws_input *in) {
    double sent = (double)conn_uplink_stats(in->c).samples / PP_SAMPLE_RATE;
    if (sent <= 0) return 0;
    int64_t now = pp_now_ns();
    if (!in->t_first_audio) in->t_first_audio = now;
    double elapsed = (double)(now - in->t_first_audio) / 1e9;
    if (sent - elapsed <= WS_INPUT_MAX_AHEAD_S) return 0;
    char what[128];
    snprintf(what, sizeof what, "audio arrives faster than real time (over %d s ahead)", WS_INPUT_MAX_AHEAD_S);
    return ws_input_reject(in, CLOSE_POLICY, what);
}

static int on_audio(ws_input *in, const uint8_t *data, size_t len) {
    char err[PP_ERR_LEN];
    int page_errors = 0;
    int frames = conn_push_audio(in->c, data, len, &page_errors, err);
    if (frames < 0) return ws_input_reject(in, CLOSE_BAD_DATA, err);
    int pace = ws_input_check_pace(in);
    if (pace) return pace;
    int todo = frames > 0 ? WS_INPUT_WAKE : 0;
    if (page_errors) todo |= ws_input_reject(in, 0, "malformed Ogg data skipped (bad page, CRC or stream order)");
    return todo;
}

int ws_input_receive(ws_input *in, const uint8_t *data, size_t len, int binary, int final) {
    if (in->closing) return 0;
    if (in->metrics) metrics_bytes(in->metrics, len, 0);
    int first = !in->in_message, kind_now = 0;
    if (first) {
        in->in_message = 1;
        in->message_len = 0;
        in->kind = binary ? -1 : -2;
    }
    if (in->kind == -1 && len) { /* the kind byte: a message may begin with empty fragments */
        in->kind = data[0];
        data++, len--;
        kind_now = 1;
    }
    in->message_len += len;
    if (final) in->in_message = 0;
    if (in->message_len > WS_INPUT_MAX_MESSAGE) {
        in->in_message = 0;
        return ws_input_reject(in, CLOSE_TOO_BIG, "message too large (the limit is 256 KiB)");
    }
    char what[96];
    switch (in->kind) {
    case MSG_AUDIO: return len ? on_audio(in, data, len) : 0;
    case MSG_CONTROL:
    case MSG_PING: return 0;
    case -1: return final ? ws_input_reject(in, 0, "empty message (no kind byte)") : 0;
    case -2: return first ? ws_input_reject(in, 0, "text frame ignored: the protocol uses binary messages only") : 0;
    default:
        snprintf(what, sizeof what, "unknown message kind 0x%02x ignored", in->kind);
        return kind_now ? ws_input_reject(in, 0, what) : 0;
    }
}
