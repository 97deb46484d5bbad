/* twilio: the client events of /v1/twilio, Twilio Media Streams (docs/protocol.md §5).
 *
 * Twilio sends `connected`, then `start` (the streamSid, the media format, and the
 * customParameters of the TwiML <Stream>: voice, prompt, or any /api/chat query key), then
 * `media` (base64 μ-law at 8 kHz, 20 ms each), `mark` when our marks have played, `dtmf`, and
 * `stop` when the call ends. The conversation starts at `start`. A voice (customParameters or the
 * query) that is not on the server does not end the call, which a caller cannot fix: the call
 * gets the server's --voice instead, and the log says so. So does a prompt the model cannot
 * start with (over --max-prompt-tokens, an @NAME it lacks): the server's --text-prompt. */
#include "server/json_socket.h"

#include "base/log.h"
#include "io/voice.h"
#include "session/params.h"

#include <stdio.h>
#include <string.h>

/* The call's voice: asked (customParameters; NULL: the query's, already in params) when the
 * server has it, else the server's --voice, logged. */
static void settle_voice(json_socket *js, const char *asked) {
    char path[4200], err[PP_ERR_LEN];
    int rc = asked ? pp_params_set_voice(&js->params, asked, err) : PP_OK;
    if (!rc && js->voices_dir) rc = pp_voice_resolve(js->voices_dir, js->params.voice, path, sizeof path, err);
    if (!rc) return;
    PP_WARN("twilio", "session %llu: %s; the call goes on with the server's voice %s",
            (unsigned long long)conn_id(js->in->c), err, js->server_voice);
    snprintf(js->params.voice, sizeof js->params.voice, "%s", js->server_voice);
}

/* The call's text prompt: its own (customParameters or the query, in params) when the model can
 * start with it, else the server's --text-prompt, logged. */
static void settle_prompt(json_socket *js) {
    char err[PP_ERR_LEN];
    if (!js->model || !js->server_text_prompt ||
        pp_model_check_text_prompt(js->model, js->params.text_prompt, js->max_prompt_tokens, err) == PP_OK)
        return;
    PP_WARN("twilio", "session %llu: prompt: %s; the call goes on with the server's --text-prompt",
            (unsigned long long)conn_id(js->in->c), err);
    snprintf(js->params.text_prompt, sizeof js->params.text_prompt, "%s", js->server_text_prompt);
}

static int on_start(json_socket *js, const pp_json *ev) {
    char err[PP_ERR_LEN];
    if (js->admit_asked) return json_socket_reject(js, "invalid_event", "a second `start` ignored");
    const pp_json *start = pp_json_get(ev, "start");
    const char *sid = json_socket_string(start, "streamSid");
    if (!sid) sid = json_socket_string(ev, "streamSid");
    if (!sid || !*sid || strlen(sid) >= sizeof js->stream)
        return json_socket_reject(js, "invalid_event", "`start` needs a streamSid (under %zu characters)",
                                  sizeof js->stream);
    const pp_json *fmt = pp_json_get(start, "mediaFormat");
    const char *encoding = json_socket_string(fmt, "encoding");
    const pp_json *rate = pp_json_get(fmt, "sampleRate");
    if ((encoding && strcmp(encoding, "audio/x-mulaw")) ||
        (rate && !(rate->type == PP_JSON_NUMBER && rate->number == 8000)))
        return json_socket_reject(js, "unsupported_value",
                                  "media format %s at %g Hz: Twilio streams are audio/x-mulaw at 8000 Hz",
                                  encoding ? encoding : "?", rate && rate->type == PP_JSON_NUMBER ? rate->number : 0.0);
    const pp_json *custom = pp_json_get(start, "customParameters");
    const char *asked_voice = NULL;
    for (size_t i = 0; custom && custom->type == PP_JSON_OBJECT && i < custom->count; i++) {
        const char *key = custom->keys[i];
        if (custom->items[i]->type != PP_JSON_STRING) continue;
        const char *value = custom->items[i]->string;
        /* The TwiML's short names, and every /api/chat query key; the voice is settled below. */
        if (!strcmp(key, "voice") || !strcmp(key, "voice_prompt")) {
            asked_voice = value;
            continue;
        }
        int rc = !strcmp(key, "prompt") ? pp_params_set(&js->params, "text_prompt", value, err)
                                        : pp_params_set(&js->params, key, value, err);
        if (rc) return json_socket_reject(js, "invalid_value", "customParameters.%s: %s", key, err);
    }
    settle_voice(js, asked_voice);
    settle_prompt(js);
    snprintf(js->stream, sizeof js->stream, "%s", sid);
    PP_INFO("twilio", "session %llu: stream %s started (voice %s)", (unsigned long long)conn_id(js->in->c), sid,
            js->params.voice);
    js->admit_asked = 1;
    return JSON_SOCKET_ADMIT;
}

int twilio_event(json_socket *js, const pp_json *ev, const char *type) {
    if (!strcmp(type, "connected")) return 0;
    if (!strcmp(type, "start")) return on_start(js, ev);
    if (!strcmp(type, "media")) {
        if (!js->admit_asked) return json_socket_reject(js, "invalid_event", "`media` before `start` ignored");
        const pp_json *media = pp_json_get(ev, "media");
        const char *track = json_socket_string(media, "track");
        if (track && strcmp(track, "inbound")) return 0; /* only the caller's side is ours to hear */
        return json_socket_audio(js, pp_json_get(media, "payload"), AUDIO_ULAW);
    }
    if (!strcmp(type, "mark") || !strcmp(type, "dtmf")) return 0;
    if (!strcmp(type, "stop")) {
        PP_INFO("twilio", "session %llu: stream stopped", (unsigned long long)conn_id(js->in->c));
        conn_fail(js->in->c, CLOSE_NORMAL, "stream stopped");
        js->in->closing = 1;
        return WS_INPUT_WRITE;
    }
    return json_socket_reject(js, "unknown_event", "unknown Twilio event \"%.64s\"", type);
}
