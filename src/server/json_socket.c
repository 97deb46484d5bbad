/* json_socket: message joining, parsing, audio and errors of the JSON protocols (see json_socket.h). */
#include "server/json_socket.h"

#include "audio/g711.h"
#include "base/base64.h"
#include "base/err.h"
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decoded audio bytes one message may carry (its base64 is at most the message). */
#define MAX_AUDIO_BYTES (JSON_SOCKET_MAX_MESSAGE / 4 * 3)
/* 8 kHz samples resampled per call (the resampler's chunk). */
#define TELEPHONE_CHUNK 1024

void json_socket_init(json_socket *js, ws_input *in, conn_protocol protocol, const pp_session_params *params,
                      const char *voices_dir, const char *server_voice) {
    memset(js, 0, sizeof *js);
    js->in = in;
    js->protocol = protocol;
    js->params = *params;
    snprintf(js->server_voice, sizeof js->server_voice, "%s", server_voice ? server_voice : params->voice);
    if (voices_dir && voices_dir[0]) js->voices_dir = strdup(voices_dir); /* unchecked when out of memory */
    js->in_format = js->out_format = protocol == CONN_TWILIO ? AUDIO_ULAW : AUDIO_PCM16;
    js->from_8k_format = -1;
    js->pcm_carry = -1;
    if (protocol == CONN_REALTIME) realtime_open(js);
}

void json_socket_set_model(json_socket *js, const pp_model *model, int max_prompt_tokens,
                           const char *server_text_prompt) {
    js->model = model;
    js->max_prompt_tokens = max_prompt_tokens;
    js->server_text_prompt = server_text_prompt;
}

void json_socket_free(json_socket *js) {
    pp_resampler_close(js->from_8k);
    free(js->msg);
    free(js->voices_dir);
    js->from_8k = NULL;
    js->msg = NULL;
    js->voices_dir = NULL;
}

const char *json_socket_string(const pp_json *obj, const char *key) {
    const pp_json *v = pp_json_get(obj, key);
    return v && v->type == PP_JSON_STRING ? v->string : NULL;
}

int json_socket_reject(json_socket *js, const char *code, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ws_input *in = js->in;
    if (js->protocol == CONN_TWILIO) return ws_input_reject(in, 0, what); /* logged; closes past the limit */
    unsigned long long id = (unsigned long long)conn_id(in->c);
    if (ws_input_count_bad(in)) {
        PP_WARN("realtime", "session %llu: %s; closing", id, what);
        conn_fail(in->c, CLOSE_POLICY, "too many bad events (over %d, one forgiven per %d s of audio); the last: %s",
                  WS_INPUT_MAX_BAD, WS_INPUT_FORGIVE_S, what);
        in->closing = 1;
        return WS_INPUT_WRITE;
    }
    PP_WARN("realtime", "session %llu: %s", id, what);
    conn_queue_error(in->c, "invalid_request_error", code, what, js->client_event_id);
    return WS_INPUT_WRITE;
}

int json_socket_decline(json_socket *js, const char *code, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    PP_DEBUG("realtime", "session %llu: %s", (unsigned long long)conn_id(js->in->c), what);
    conn_queue_error(js->in->c, "invalid_request_error", code, what, js->client_event_id);
    return WS_INPUT_WRITE;
}

/* G.711 at 8 kHz to 24 kHz floats, pushed in chunks. */
static int push_telephone(json_socket *js, const uint8_t *bytes, size_t n, audio_format format, int *frames) {
    char err[PP_ERR_LEN];
    if (js->from_8k_format != (int)format) { /* a new stream: the filter starts on silence */
        pp_resampler_close(js->from_8k);
        js->from_8k = NULL;
        if (pp_resampler_open(&js->from_8k, 8000, PP_SAMPLE_RATE, TELEPHONE_CHUNK, err)) return -1;
        js->from_8k_format = (int)format;
    }
    float x[TELEPHONE_CHUNK], y[3 * TELEPHONE_CHUNK + 3];
    for (size_t i = 0; i < n; i += TELEPHONE_CHUNK) {
        int m = n - i < TELEPHONE_CHUNK ? (int)(n - i) : TELEPHONE_CHUNK;
        for (int k = 0; k < m; k++)
            x[k] = (format == AUDIO_ULAW ? pp_ulaw_decode(bytes[i + k]) : pp_alaw_decode(bytes[i + k])) / 32768.0f;
        int out = pp_resampler_process(js->from_8k, x, m, y, (int)(sizeof y / sizeof y[0]));
        *frames = conn_push_pcm(js->in->c, y, (size_t)out);
    }
    return 0;
}

int json_socket_audio(json_socket *js, const pp_json *b64, audio_format format) {
    if (!b64 || b64->type != PP_JSON_STRING)
        return json_socket_reject(js, "invalid_audio", "audio is missing (a base64 string)");
    /* One service thread: one message decoded at a time. bytes[0] takes the PCM byte carried over. */
    static uint8_t bytes[1 + MAX_AUDIO_BYTES];
    long n = pp_base64_decode(b64->string, b64->string_len, bytes + 1, sizeof bytes - 1);
    if (n < 0) return json_socket_reject(js, "invalid_audio", "audio is not valid base64");
    const uint8_t *data = bytes + 1;
    int frames = 0;
    if (format == AUDIO_PCM16) {
        /* The buffer is a byte stream: a client that cuts it anywhere (a pipe's
         * reads) may end a message inside a sample, whose other byte starts the next one. */
        if (js->pcm_carry >= 0) {
            bytes[0] = (uint8_t)js->pcm_carry;
            data = bytes;
            n++;
            js->pcm_carry = -1;
        }
        if (n % 2) js->pcm_carry = data[--n];
        float pcm[1024];
        for (long i = 0; i < n / 2; i += 1024) {
            int m = n / 2 - i < 1024 ? (int)(n / 2 - i) : 1024;
            for (int k = 0; k < m; k++) pcm[k] = (int16_t)(data[2 * (i + k)] | data[2 * (i + k) + 1] << 8) / 32768.0f;
            frames = conn_push_pcm(js->in->c, pcm, (size_t)m);
        }
    } else if (push_telephone(js, data, (size_t)n, format, &frames)) {
        return json_socket_reject(js, "server_error", "cannot open the 8 kHz resampler");
    }
    int pace = ws_input_check_pace(js->in);
    if (pace) return pace;
    return frames > 0 ? WS_INPUT_WAKE : 0;
}

/* One whole message. */
static int on_message(json_socket *js) {
    char err[PP_ERR_LEN];
    pp_json_doc *doc;
    if (!js->msg_len) return json_socket_reject(js, "invalid_json", "empty message");
    if (pp_json_parse_bounded(js->msg, js->msg_len, JSON_SOCKET_MAX_VALUES, &doc, err))
        return json_socket_reject(js, "invalid_json", "the message is not JSON: %s", err);
    const pp_json *ev = pp_json_root(doc);
    const char *type = json_socket_string(ev, js->protocol == CONN_TWILIO ? "event" : "type");
    int todo;
    /* lives in doc, until its free below; a longer id than an error can repeat is not repeated */
    const pp_json *event_id = pp_json_get(ev, "event_id");
    js->client_event_id = event_id && event_id->type == PP_JSON_STRING && event_id->string_len <= CONN_EVENT_ID_MAX
                              ? event_id->string
                              : NULL;
    if (ev->type != PP_JSON_OBJECT)
        todo = json_socket_reject(js, "invalid_event", "an event must be a JSON object");
    else if (!type)
        todo = json_socket_reject(js, "invalid_event", "the event has no \"%s\" string",
                                  js->protocol == CONN_TWILIO ? "event" : "type");
    else
        todo = js->protocol == CONN_TWILIO ? twilio_event(js, ev, type) : realtime_event(js, ev, type);
    js->client_event_id = NULL;
    pp_json_free(doc);
    return todo;
}

/* Why a message is being dropped to its end. */
enum { KEEP, SKIP_BINARY, SKIP_TOO_LARGE };

int json_socket_receive(json_socket *js, const uint8_t *data, size_t len, int binary, int final) {
    ws_input *in = js->in;
    if (in->closing) return 0;
    if (in->metrics) metrics_bytes(in->metrics, len, 0);
    if (!in->in_message) { /* a new message */
        js->msg_len = 0;
        js->skipping = binary ? SKIP_BINARY : KEEP;
    }
    in->in_message = !final;
    if (js->skipping == KEEP && js->msg_len + len > JSON_SOCKET_MAX_MESSAGE) js->skipping = SKIP_TOO_LARGE;
    if (js->skipping == KEEP && js->msg_len + len > js->msg_cap) {
        size_t cap = js->msg_cap ? js->msg_cap : 4096;
        while (cap < js->msg_len + len) cap *= 2;
        char *grown = realloc(js->msg, cap);
        if (grown) {
            js->msg = grown;
            js->msg_cap = cap;
        } else {
            js->skipping = SKIP_TOO_LARGE;
        }
    }
    if (js->skipping == KEEP && len) {
        memcpy(js->msg + js->msg_len, data, len);
        js->msg_len += len;
    }
    if (!final) return 0;
    switch (js->skipping) {
    case SKIP_BINARY: return json_socket_reject(js, "invalid_event", "binary message ignored: events are JSON text");
    case SKIP_TOO_LARGE:
        return json_socket_reject(js, "message_too_large", "message over %d KiB ignored",
                                  JSON_SOCKET_MAX_MESSAGE / 1024);
    default: break;
    }
    int todo = on_message(js);
    if (js->msg_cap > JSON_SOCKET_KEPT_BUFFER) { /* one large message need not cost an idle socket its size */
        free(js->msg);
        js->msg = NULL;
        js->msg_cap = 0;
    }
    return todo;
}
