/* json_socket: the client side of the JSON protocols, /v1/realtime (OpenAI Realtime events,
 * docs/protocol.md §4) and /v1/twilio (Twilio Media Streams, §5), kept apart from lws so that
 * tests and tests/fuzz/fuzz_json_socket.c drive it without a socket. Service thread only.
 *
 * Each message is one JSON object in a text frame (fragments are joined, up to
 * JSON_SOCKET_MAX_MESSAGE). Audio in it is base64: 16-bit little-endian PCM at 24 kHz (a byte
 * stream: a message may end inside a sample, the next completes it), or
 * G.711 at 8 kHz, which a windowed-sinc resampler brings to 24 kHz; the samples go to the
 * conn's uplink. The conversation is not admitted when the socket opens: the client first says
 * how it wants it (realtime: session.update; Twilio: the `start` event's customParameters),
 * and its first audio (or response.create, or `start`) asks the caller to admit it
 * (JSON_SOCKET_ADMIT). Later settings that change the voice, prompt or sampling restart the
 * conversation from its prompts (conn_request_restart), as response.cancel does.
 *
 * Bad input (malformed JSON, an unknown or unsupported event, base64 that does not decode,
 * audio over the size limit, a format change once audio flows, events out of order) gets a
 * realtime `error` event naming the problem (Twilio's stream has none: it is logged), is
 * counted in /metrics, and the conversation goes on; past ws_input's rate limit on them
 * (WS_INPUT_MAX_BAD back to back, one forgiven per WS_INPUT_FORGIVE_S s of audio) the socket
 * closes (1008). */
#ifndef PP_SERVER_JSON_SOCKET_H
#define PP_SERVER_JSON_SOCKET_H

#include "audio/resample.h"
#include "base/json.h"
#include "server/ws_input.h"

/* The largest message: 2 s of 24 kHz PCM in base64 is 128 KiB; OpenAI clients send 20-100 ms. */
#define JSON_SOCKET_MAX_MESSAGE (256 * 1024)
/* Values one event may hold: a session.update with its tools and settings has a few hundred.
 * Parsing runs on the thread that serves every socket; 256 KiB of `[1,1,...` took it 54 ms a
 * message and made other conversations' audio late. */
#define JSON_SOCKET_MAX_VALUES 4096
/* A message buffer grown past this is freed after its message (OpenAI clients send 20-100 ms of
 * audio, 2-9 KiB of base64, so the usual buffer stays). */
#define JSON_SOCKET_KEPT_BUFFER (16 * 1024)

typedef struct json_socket {
    ws_input *in; /* the socket's counters, closing flag and pace check */
    conn_protocol protocol;
    pp_session_params params; /* what the conversation starts (or restarts) with */
    char *voices_dir;         /* the model's, where session.update's voice is looked up; NULL: not checked */
    const pp_model *model;    /* what text prompts are tokenized with before the start; NULL: not checked */
    int max_prompt_tokens;    /* --max-prompt-tokens, with model */
    const char *server_text_prompt; /* --text-prompt, with model: what a Twilio call falls back to */
    char server_voice[PP_PARAMS_MAX_VOICE]; /* --voice: what a Twilio call falls back to */
    int admit_asked;          /* JSON_SOCKET_ADMIT was returned */
    audio_format in_format, out_format;
    int pcm_carry;         /* 16-bit PCM: the first byte of a sample the last message cut; -1 none */
    pp_resampler *from_8k; /* G.711 input */
    int from_8k_format;    /* the format from_8k was opened for; -1 none */
    char *msg;             /* the message being joined */
    size_t msg_len, msg_cap;
    int skipping;    /* the message grew past the limit: drop to its end */
    char stream[64]; /* Twilio's streamSid */
    unsigned items;  /* input item ids handed out (realtime) */
    const char *client_event_id; /* the event_id of the event being handled, for its errors; NULL: none */
} json_socket;

/* What the caller must do after a call, beyond ws_input's bits. */
enum { JSON_SOCKET_ADMIT = 4 /* admit the conversation with js->params now */ };

/* params: the server's defaults and the query's settings; voices_dir: the model's (NULL or "": voices
 * are not looked up before the conversation starts); server_voice: the server's --voice, which a
 * Twilio call whose voice is not there gets instead. Queues realtime's session.created. */
void json_socket_init(json_socket *js, ws_input *in, conn_protocol protocol, const pp_session_params *params,
                      const char *voices_dir, const char *server_voice);
/* The model a text prompt must suit (pp_model_check_text_prompt: at most max_prompt_tokens
 * tokens, a named prompt the model has), checked before the conversation starts rather than
 * failing it: realtime's session.update instructions that do not are refused; a Twilio call's
 * prompt that does not gives way to server_text_prompt (the server's --text-prompt, which must
 * outlive js), as its voice does. Without a model, prompts are checked only at the start. */
void json_socket_set_model(json_socket *js, const pp_model *model, int max_prompt_tokens,
                           const char *server_text_prompt);
void json_socket_free(json_socket *js);
/* One received piece of a message. Returns WS_INPUT_* and JSON_SOCKET_* bits. */
int json_socket_receive(json_socket *js, const uint8_t *data, size_t len, int binary, int final);

/* ---- the protocols' event handlers (realtime.c, twilio.c), for json_socket.c ---- */

void realtime_open(json_socket *js);
int realtime_event(json_socket *js, const pp_json *ev, const char *type);
int twilio_event(json_socket *js, const pp_json *ev, const char *type);

/* ---- shared by the handlers ---- */

/* Reports one bad input (realtime: an `error` event with code and the formatted text). */
int json_socket_reject(json_socket *js, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Answers a well-formed realtime event that has nothing to act on now (a response.cancel that
 * lost a race with response.done) with an `error` of code and the formatted text, as OpenAI
 * does; not counted as bad input, so a client that sends it often is not closed for it. */
int json_socket_decline(json_socket *js, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Decodes base64 audio in `format` and pushes it to the uplink. Returns ws_input bits. */
int json_socket_audio(json_socket *js, const pp_json *b64, audio_format format);
/* A string member, or NULL. */
const char *json_socket_string(const pp_json *obj, const char *key);

#endif
