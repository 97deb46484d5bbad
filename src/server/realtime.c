/* realtime: the client events of /v1/realtime (docs/protocol.md §4), a subset of the OpenAI
 * Realtime API in its current (GA) names, with the beta names where they differ.
 *
 * The model is full duplex and takes its persona once, at the start: session.update sets the
 * voice, the instructions (the text prompt), the sampling temperature and the audio formats;
 * the audio buffer events are accepted as no-ops (there is no turn to commit); response.cancel
 * restarts the conversation from its prompts; events that would hand the model text or tool
 * results are refused with an `error` saying why. Server events of the model's output are the
 * wire's (wire.h). */
#include "server/json_socket.h"

#include "base/log.h"
#include "io/voice.h"
#include "server/wire.h"
#include "session/params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A format's beta name. */
static const char *beta_format(audio_format f) {
    return f == AUDIO_ULAW ? "g711_ulaw" : f == AUDIO_ALAW ? "g711_alaw" : "pcm16";
}

/* The session as session.created / session.updated describe it (both namings). The prompt
 * takes at most two bytes a byte in JSON (pp_params_set refuses the six-byte controls). */
_Static_assert(CONN_JSON_MAX >= 2 * PP_PARAMS_MAX_PROMPT + 2048, "a session event fits a message");
static void session_event(json_socket *js, const char *type) {
    static char json[CONN_JSON_MAX];
    char eid[32];
    conn *c = js->in->c;
    const pp_session_params *p = &js->params;
    conn_event_id(c, eid);
    pp_jw w;
    pp_jw_init(&w, json, sizeof json);
    pp_jw_raw(
        &w,
        "{\"type\":\"%s\",\"event_id\":\"%s\",\"session\":{\"object\":\"realtime.session\",\"type\":\"realtime\","
        "\"id\":\"sess_%llu\",\"model\":\"personaplex-7b\",\"output_modalities\":[\"audio\"],\"modalities\":[\"audio\","
        "\"text\"],\"instructions\":",
        type, eid, (unsigned long long)conn_id(c));
    pp_jw_str(&w, p->text_prompt, strlen(p->text_prompt));
    pp_jw_raw(&w,
              ",\"audio\":{\"input\":{\"format\":%s,\"turn_detection\":null,\"transcription\":null},"
              "\"output\":{\"format\":%s,\"voice\":",
              wire_format_json(js->in_format), wire_format_json(js->out_format));
    pp_jw_str(&w, p->voice, strlen(p->voice));
    pp_jw_raw(&w, ",\"speed\":1}},\"voice\":");
    pp_jw_str(&w, p->voice, strlen(p->voice));
    pp_jw_raw(&w,
              ",\"input_audio_format\":\"%s\",\"output_audio_format\":\"%s\",\"temperature\":%.3g,"
              "\"tools\":[],\"tool_choice\":\"none\",\"max_output_tokens\":\"inf\",\"turn_detection\":null}}",
              beta_format(js->in_format), beta_format(js->out_format), p->audio_temperature);
    long n = pp_jw_end(&w);
    if (n > 0) conn_queue_json(c, json, (size_t)n);
}

void realtime_open(json_socket *js) { session_event(js, "session.created"); }

/* A format as either naming gives it: {"type":"audio/pcm","rate":24000} or "pcm16". Returns
 * the format, or -1 with *why set. */
static int parse_format(const pp_json *f, const char **why) {
    const char *t = f->type == PP_JSON_STRING ? f->string : json_socket_string(f, "type");
    *why = "an audio format is \"audio/pcm\" (24 kHz), \"audio/pcmu\" or \"audio/pcma\"";
    if (!t) return -1;
    if (!strcmp(t, "audio/pcmu") || !strcmp(t, "g711_ulaw")) return AUDIO_ULAW;
    if (!strcmp(t, "audio/pcma") || !strcmp(t, "g711_alaw")) return AUDIO_ALAW;
    if (strcmp(t, "audio/pcm") && strcmp(t, "pcm16")) return -1;
    const pp_json *rate = f->type == PP_JSON_OBJECT ? pp_json_get(f, "rate") : NULL;
    if (rate && !(rate->type == PP_JSON_NUMBER && rate->number == PP_SAMPLE_RATE)) {
        *why = "16-bit PCM is at 24000 Hz only (the model's own rate)";
        return -1;
    }
    return AUDIO_PCM16;
}

/* Sets *format from the GA path (audio.<dir>.format) or the beta key when either is given;
 * an unusable one is reported and sets *bad. */
static void format_from(json_socket *js, const pp_json *session, const char *dir, const char *beta_key,
                        audio_format *format, int *bad) {
    const pp_json *audio = pp_json_get(session, "audio"), *f = pp_json_get(pp_json_get(audio, dir), "format");
    if (!f) f = pp_json_get(session, beta_key);
    if (!f || f->type == PP_JSON_NULL) return;
    const char *why;
    int v = parse_format(f, &why);
    if (v < 0) {
        json_socket_reject(js, "invalid_value", "session.%s: %s", beta_key, why);
        *bad = 1;
        return;
    }
    *format = (audio_format)v;
}

static int session_update(json_socket *js, const pp_json *ev) {
    const pp_json *s = pp_json_get(ev, "session");
    char err[PP_ERR_LEN];
    if (!s || s->type != PP_JSON_OBJECT)
        return json_socket_reject(js, "invalid_event", "session.update needs a \"session\" object");
    const char *kind = json_socket_string(s, "type");
    if (kind && strcmp(kind, "realtime"))
        return json_socket_reject(js, "unsupported_value",
                                  "session type \"%s\": this server holds conversations (\"realtime\")", kind);
    pp_session_params p = js->params;
    int todo = 0, bad = 0;
    const char *instructions = json_socket_string(s, "instructions");
    if (instructions && pp_params_set(&p, "text_prompt", instructions, err))
        return json_socket_reject(js, "invalid_value", "session.instructions: %s", err);
    /* Tokenized now, as the conversation will: over the token limit, or an "@NAME" the model
     * lacks, would be taken here and fail the conversation at its first audio. */
    if (instructions && js->model &&
        pp_model_check_text_prompt(js->model, p.text_prompt, js->max_prompt_tokens, err) != PP_OK)
        return json_socket_reject(js, "invalid_value", "session.instructions: %s", err);
    const pp_json *output = pp_json_get(pp_json_get(s, "audio"), "output");
    const char *voice = json_socket_string(output, "voice");
    if (!voice) voice = json_socket_string(s, "voice");
    char path[4200];
    if (voice && pp_params_set_voice(&p, voice, err))
        return json_socket_reject(js, "invalid_value", "session.voice: %s", err);
    /* Client libraries send OpenAI's voice names ("alloy") by default: keep the session's voice and
     * say so, rather than take the name and fail the conversation at its first audio. A name no
     * voice file can have (a path, a space, non-ASCII) is no voice here either. */
    if (voice && js->voices_dir && pp_voice_resolve(js->voices_dir, voice, path, sizeof path, err) != PP_OK) {
        snprintf(p.voice, sizeof p.voice, "%s", js->params.voice);
        todo |= json_socket_reject(js, "invalid_value",
                                   "session.voice: no voice '%.80s' on this server (GET /api/voices lists them); "
                                   "the session keeps '%s' and the rest of the update applies",
                                   voice, p.voice);
    }
    const pp_json *temp = pp_json_get(s, "temperature");
    if (temp && temp->type == PP_JSON_NUMBER) {
        char v[32];
        snprintf(v, sizeof v, "%.6g", temp->number);
        pp_params_set(&p, "audio_temperature", v, err); /* clamped and logged there */
        pp_params_set(&p, "text_temperature", v, err);
    }
    const pp_json *tools = pp_json_get(s, "tools");
    if (tools && tools->type == PP_JSON_ARRAY && tools->count)
        todo |= json_socket_reject(js, "unsupported_value",
                                   "session.tools: this model cannot call tools; the rest of the update applies");
    audio_format in = js->in_format, out = js->out_format;
    format_from(js, s, "input", "input_audio_format", &in, &bad);
    format_from(js, s, "output", "output_audio_format", &out, &bad);
    if (bad) return WS_INPUT_WRITE;
    if (js->admit_asked && (in != js->in_format || out != js->out_format))
        return todo |
               json_socket_reject(js, "invalid_value",
                                  "the audio format cannot change once audio flows; the session keeps its formats");
    js->in_format = in;
    js->out_format = out;
    int changed = memcmp(&p, &js->params, sizeof p) != 0;
    js->params = p;
    if (js->admit_asked && changed) { /* the persona is set at the start: start again with it */
        conn_request_restart(js->in->c, &p);
        todo |= WS_INPUT_WAKE;
    }
    session_event(js, "session.updated");
    return todo | WS_INPUT_WRITE;
}

/* Sends a plain acknowledgement event with optional extra fields. */
static int ack(json_socket *js, const char *type, const char *fields) {
    char json[512], eid[32];
    conn_event_id(js->in->c, eid);
    int n = snprintf(json, sizeof json, "{\"type\":\"%s\",\"event_id\":\"%s\"%s}", type, eid, fields);
    if (n > 0 && (size_t)n < sizeof json) conn_queue_json(js->in->c, json, (size_t)n);
    return WS_INPUT_WRITE;
}

/* The conversation starts on its first audio or response.create. */
static int admit(json_socket *js) {
    if (js->admit_asked) return 0;
    js->admit_asked = 1;
    return JSON_SOCKET_ADMIT;
}

/* Client events this model cannot take, and why. */
static const struct {
    const char *type, *why;
} REFUSED[] = {
    {"conversation.item.create",
     "this model takes no conversation items: give the persona as session.update instructions and speak to it"},
    {"conversation.item.delete", "the conversation is the model's audio state; items cannot be removed from it"},
    {"conversation.item.retrieve", "the conversation is the model's audio state; it keeps no items"},
    {"conversation.item.truncate", "the conversation is the model's audio state; items cannot be truncated"},
    {"output_audio_buffer.clear", "output is sent as it is made (WebSocket): there is no server-side buffer to clear"},
    {"transcription_session.update", "this server holds conversations, not transcription sessions"},
};

int realtime_event(json_socket *js, const pp_json *ev, const char *type) {
    if (!strcmp(type, "session.update")) return session_update(js, ev);
    if (!strcmp(type, "input_audio_buffer.append")) {
        int todo = admit(js);
        return todo | json_socket_audio(js, pp_json_get(ev, "audio"), js->in_format);
    }
    if (!strcmp(type, "input_audio_buffer.commit")) { /* full duplex: the audio is already heard */
        char fields[96];
        snprintf(fields, sizeof fields, ",\"previous_item_id\":null,\"item_id\":\"in_%llu_%u\"",
                 (unsigned long long)conn_id(js->in->c), ++js->items);
        return ack(js, "input_audio_buffer.committed", fields);
    }
    if (!strcmp(type, "input_audio_buffer.clear")) return ack(js, "input_audio_buffer.cleared", "");
    if (!strcmp(type, "response.create")) return admit(js); /* the model answers when it has something to say */
    if (!strcmp(type, "response.cancel")) {
        if (!js->admit_asked) return 0;
        conn_request_restart(js->in->c, &js->params);
        return WS_INPUT_WAKE;
    }
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
        if (!strcmp(type, REFUSED[i].type))
            return json_socket_reject(js, "unsupported_event", "%s: %s", type, REFUSED[i].why);
    return json_socket_reject(js, "unknown_event", "unknown event type \"%.64s\"", type);
}
