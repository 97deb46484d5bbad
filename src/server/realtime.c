/* realtime: the client events of /v1/realtime (docs/protocol.md §4), a subset of the OpenAI
 * Realtime API in its current (GA) names, with the beta names where they differ.
 *
 * The model is full duplex and takes its persona once, at the start: session.update sets the
 * voice, the instructions (the text prompt), the sampling temperature and the audio formats;
 * the audio buffer events are accepted as no-ops (there is no turn to commit), and a created
 * item of user audio is heard as appended audio; response.cancel restarts the conversation
 * from its prompts while a response is open (else it is refused); events that would hand the
 * model text or tool results are refused with an `error` saying why. Server events of the
 * model's output are the wire's (wire.h). */
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
    int ga = f != NULL; /* the error names the key the client used */
    if (!f) f = pp_json_get(session, beta_key);
    if (!f || f->type == PP_JSON_NULL) return;
    const char *why;
    int v = parse_format(f, &why);
    if (v < 0) {
        if (ga)
            json_socket_reject(js, "invalid_value", "session.audio.%s.format: %s", dir, why);
        else
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
    /* Instructions the model cannot take (over its prompt's size: agent frameworks' prompts run to
     * kilobytes) leave the session's, as an unknown voice does: refusing the whole update would
     * also drop its audio formats, and the client's audio would be read in the wrong one. */
    const char *instructions = json_socket_string(s, "instructions");
    if (instructions) {
        int rc = pp_params_set(&p, "text_prompt", instructions, err);
        /* Tokenized now, as the conversation will be: over the token limit, or an "@NAME" the
         * model lacks, would be taken here and fail the conversation at its first audio. */
        if (rc == PP_OK && js->model)
            rc = pp_model_check_text_prompt(js->model, p.text_prompt, js->max_prompt_tokens, err);
        if (rc != PP_OK) {
            snprintf(p.text_prompt, sizeof p.text_prompt, "%s", js->params.text_prompt);
            todo |= json_socket_reject(js, "invalid_value",
                                       "session.instructions: %s; the session keeps its instructions and the rest "
                                       "of the update applies",
                                       err);
        }
    }
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

/* The longest client item id repeated back; a longer one is replaced by the server's own. */
#define ITEM_ID_MAX 64
/* Audio parts one created item may have (clients send one); the item's events list them all. */
#define ITEM_PARTS_MAX 64

/* conversation.item.create of a user message made of audio (a push-to-talk clip, as clients send
 * it): the model hears it as if appended, and the item is added to the conversation. Items the
 * model cannot take (text, tool calls and results) are refused. */
static int create_item(json_socket *js, const pp_json *ev) {
    const pp_json *item = pp_json_get(ev, "item"), *content = pp_json_get(item, "content");
    const char *kind = json_socket_string(item, "type"), *role = json_socket_string(item, "role");
    int audio_only = kind && !strcmp(kind, "message") && role && !strcmp(role, "user") && content &&
                     content->type == PP_JSON_ARRAY && content->count > 0;
    for (size_t i = 0; audio_only && i < content->count; i++) {
        const char *part = json_socket_string(content->items[i], "type");
        audio_only = part && !strcmp(part, "input_audio");
    }
    if (!audio_only)
        return json_socket_reject(js, "unsupported_event",
                                  "conversation.item.create: this model takes user audio only (a message of "
                                  "input_audio): give the persona as session.update instructions and speak to it");
    if (content->count > ITEM_PARTS_MAX)
        return json_socket_reject(js, "invalid_value", "conversation.item.create: %zu content parts (at most %d)",
                                  content->count, ITEM_PARTS_MAX);
    int todo = admit(js), bad = js->in->bad;
    for (size_t i = 0; i < content->count; i++) {
        todo |= json_socket_audio(js, pp_json_get(content->items[i], "audio"), js->in_format);
        if (js->in->bad != bad || js->in->closing) return todo; /* refused: the error says why */
    }
    char id[ITEM_ID_MAX + 1];
    const char *asked = json_socket_string(item, "id");
    if (asked && *asked && strlen(asked) <= ITEM_ID_MAX)
        snprintf(id, sizeof id, "%s", asked);
    else
        snprintf(id, sizeof id, "in_%llu_%u", (unsigned long long)conn_id(js->in->c), ++js->items);
    static const char *const stages[] = {"conversation.item.added", "conversation.item.done"};
    for (int s = 0; s < 2; s++) {
        char json[256 + ITEM_PARTS_MAX * 48 + 6 * ITEM_ID_MAX], eid[32];
        conn_event_id(js->in->c, eid);
        pp_jw w;
        pp_jw_init(&w, json, sizeof json);
        pp_jw_raw(&w, "{\"type\":\"%s\",\"event_id\":\"%s\",\"previous_item_id\":null,\"item\":{\"id\":", stages[s],
                  eid);
        pp_jw_str(&w, id, strlen(id));
        pp_jw_raw(&w, ",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"user\",\"status\":\"completed\","
                      "\"content\":[");
        for (size_t i = 0; i < content->count; i++)
            pp_jw_raw(&w, "%s{\"type\":\"input_audio\",\"transcript\":null}", i ? "," : "");
        pp_jw_raw(&w, "]}}");
        long n = pp_jw_end(&w);
        if (n > 0) conn_queue_json(js->in->c, json, (size_t)n);
    }
    return todo | WS_INPUT_WRITE;
}

/* conversation.item.truncate, which clients send when their user talks over the model's audio:
 * OpenAI cuts the item to what was played. This model heard the interruption in its own input
 * and its audio state holds what it said, so nothing is cut; the event is acknowledged, as
 * clients expect (Pipecat ends its session on an error answering it). */
static int truncate_item(json_socket *js, const pp_json *ev) {
    const char *item_id = json_socket_string(ev, "item_id");
    const pp_json *end = pp_json_get(ev, "audio_end_ms"), *index = pp_json_get(ev, "content_index");
    if (!item_id || !*item_id || strlen(item_id) > ITEM_ID_MAX || !end || end->type != PP_JSON_NUMBER ||
        !(end->number >= 0 && end->number < 1e12) || (index && index->type != PP_JSON_NUMBER))
        return json_socket_reject(js, "invalid_event",
                                  "conversation.item.truncate needs an item_id (up to %d bytes) and an audio_end_ms "
                                  "of at least 0",
                                  ITEM_ID_MAX);
    char json[256 + 6 * ITEM_ID_MAX], eid[32];
    conn_event_id(js->in->c, eid);
    pp_jw w;
    pp_jw_init(&w, json, sizeof json);
    pp_jw_raw(&w, "{\"type\":\"conversation.item.truncated\",\"event_id\":\"%s\",\"item_id\":", eid);
    pp_jw_str(&w, item_id, strlen(item_id));
    pp_jw_raw(&w, ",\"content_index\":%d,\"audio_end_ms\":%lld}",
              index && index->number >= 0 && index->number < 1e6 ? (int)index->number : 0, (long long)end->number);
    long n = pp_jw_end(&w);
    if (n > 0) conn_queue_json(js->in->c, json, (size_t)n);
    return WS_INPUT_WRITE;
}

/* Client events this model cannot take, and why. */
static const struct {
    const char *type, *why;
} REFUSED[] = {
    {"conversation.item.delete", "the conversation is the model's audio state; items cannot be removed from it"},
    {"conversation.item.retrieve", "the conversation is the model's audio state; it keeps no items"},
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
    if (!strcmp(type, "input_audio_buffer.clear")) {
        js->pcm_carry = -1; /* what is buffered here: half a sample */
        return ack(js, "input_audio_buffer.cleared", "");
    }
    if (!strcmp(type, "response.create")) return admit(js); /* the model answers when it has something to say */
    if (!strcmp(type, "conversation.item.create")) return create_item(js, ev);
    if (!strcmp(type, "conversation.item.truncate")) return truncate_item(js, ev);
    if (!strcmp(type, "response.cancel")) {
        /* Only an open response is cancelled: a restart would also wipe the conversation the
         * model has heard so far, which a cancel that lost a race with response.done (or one
         * sent on every barge-in) must not. OpenAI answers such a cancel with this code. */
        if (!js->admit_asked || !conn_responding(js->in->c))
            return json_socket_decline(js, "response_cancel_not_active",
                                       "response.cancel: no response is in progress; the conversation goes on");
        conn_request_restart(js->in->c, &js->params);
        return WS_INPUT_WAKE;
    }
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
        if (!strcmp(type, REFUSED[i].type))
            return json_socket_reject(js, "unsupported_event", "%s: %s", type, REFUSED[i].why);
    return json_socket_reject(js, "unknown_event", "unknown event type \"%.64s\"", type);
}
