/* test_json_socket: the JSON endpoints without a socket. The client side (json_socket.c,
 * realtime.c, twilio.c): events in, what lands in the conn (frames of the right samples,
 * restarts, settings) and every answer out, each a JSON event of the expected type and error
 * code. The server side (wire.c): frames of speech and quiet in, the realtime turn's events,
 * transcript deltas whole in UTF-8, Twilio media, marks and barge-in `clear` out; and its
 * start-up measure of what a frame's encoding costs. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/g711.h"
#include "base/base64.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "server/json_socket.h"
#include "session/params.h"
#include "server/wire.h"
#include "text/utf8.h"

static uint8_t g_msg[CONN_JSON_MAX];
static char g_error_message[512]; /* the message of the last `error` drain took ("" for none) */

/* Takes every queued message: each must be JSON text; copies the types (or Twilio events) and
 * error codes, space-separated, into out, and the last error's message into g_error_message.
 * Returns how many. */
static int drain(conn *c, char *out, size_t cap) {
    size_t len, used = 0;
    int text, n = 0;
    out[0] = '\0';
    g_error_message[0] = '\0';
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        char err[PP_ERR_LEN];
        int ok = text && len <= sizeof g_msg && !pp_json_parse((const char *)g_msg, len, &doc, err);
        TEST_COND("every message is JSON text", ok);
        if (!ok) continue;
        const pp_json *root = pp_json_root(doc);
        const char *type = json_socket_string(root, conn_get_protocol(c) == CONN_TWILIO ? "event" : "type");
        const char *code = json_socket_string(pp_json_get(root, "error"), "code");
        const char *message = json_socket_string(pp_json_get(root, "error"), "message");
        if (message) snprintf(g_error_message, sizeof g_error_message, "%s", message);
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%s%s%s%s", n ? " " : "", type ? type : "?",
                                 code ? ":" : "", code ? code : "");
        if (conn_get_protocol(c) == CONN_REALTIME)
            TEST_COND("every realtime event has an id", json_socket_string(root, "event_id"));
        pp_json_free(doc);
        n++;
    }
    return n;
}

/* A JSON socket on a fresh conn with the default settings (realtime queues session.created);
 * voices are looked up in voices_dir unless it is NULL. */
static conn *open_socket(conn_protocol protocol, uint64_t id, metrics *m, ws_input *in, json_socket *js,
                         const char *voices_dir) {
    char err[PP_ERR_LEN];
    conn *c;
    if (conn_create(id, protocol, &c, err)) abort();
    ws_input_init(in, c, m);
    pp_session_params p;
    pp_params_defaults(&p);
    json_socket_init(js, in, protocol, &p, voices_dir, NULL);
    return c;
}

static int send_text(json_socket *js, const char *text) {
    return json_socket_receive(js, (const uint8_t *)text, strlen(text), 0, 1);
}

/* Sends before + the base64 of n bytes + after as one message. */
static int send_audio(json_socket *js, const char *before, const uint8_t *bytes, size_t n, const char *after) {
    static char json[PP_BASE64_LEN(2 * 4800) + 128];
    int at = snprintf(json, sizeof json, "%s", before);
    at += (int)pp_base64_encode(bytes, n, json + at, sizeof json - (size_t)at);
    snprintf(json + at, sizeof json - (size_t)at, "%s", after);
    return send_text(js, json);
}

/* An input_audio_buffer.append of n samples of value v as 16-bit PCM. */
static int append_pcm(json_socket *js, int n, int16_t v) {
    static uint8_t pcm[2 * 4800];
    for (int i = 0; i < n; i++) {
        pcm[2 * i] = (uint8_t)(v & 0xFF);
        pcm[2 * i + 1] = (uint8_t)((uint16_t)v >> 8);
    }
    return send_audio(js, "{\"type\":\"input_audio_buffer.append\",\"audio\":\"", pcm, (size_t)(2 * n), "\"}");
}

static void check_realtime_input(metrics *m) {
    char seen[4096];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 7, m, &in, &js, NULL);
    drain(c, seen, sizeof seen);
    TEST_COND("session.created on open", !strcmp(seen, "session.created"));

    int todo =
        send_text(&js, "{\"type\":\"session.update\",\"session\":{\"type\":\"realtime\",\"instructions\":\"Be kind.\","
                       "\"audio\":{\"output\":{\"voice\":\"NATM1\"}},\"temperature\":0.6}}");
    drain(c, seen, sizeof seen);
    TEST_COND("session.update answered by session.updated",
              !strcmp(seen, "session.updated") && (todo & WS_INPUT_WRITE));
    TEST_COND("instructions, voice and temperature taken", !strcmp(js.params.text_prompt, "Be kind.") &&
                                                               !strcmp(js.params.voice, "NATM1") &&
                                                               fabsf(js.params.audio_temperature - 0.6f) < 1e-6f);
    TEST_COND("no admission before audio", !(todo & JSON_SOCKET_ADMIT));

    todo = append_pcm(&js, 1000, 16384);
    TEST_COND("the first audio asks for admission", (todo & JSON_SOCKET_ADMIT) && !(todo & WS_INPUT_WAKE));
    todo = append_pcm(&js, 920, 16384);
    TEST_COND("a whole frame wakes the engine", (todo & WS_INPUT_WAKE) && !(todo & JSON_SOCKET_ADMIT));
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    TEST_COND("the frame is there, 16384 / 32768",
              conn_take_frame(c, frame, &ready) && frame[0] == 0.5f && frame[1919] == 0.5f);

    /* the beta names and G.711: the format is fixed once audio flows */
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"input_audio_format\":\"g711_ulaw\"}}");
    drain(c, seen, sizeof seen);
    TEST_COND("a format change once audio flows is refused", !strcmp(seen, "error:invalid_value"));
    TEST_COND("and the format stays", js.in_format == AUDIO_PCM16);

    pp_session_params restart;
    TEST_COND("no restart yet", !conn_take_restart(c, &restart));
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"voice\":\"NATF0\"}}");
    drain(c, seen, sizeof seen);
    TEST_COND("a new voice restarts the conversation", conn_take_restart(c, &restart) &&
                                                           !strcmp(restart.voice, "NATF0") &&
                                                           !strcmp(restart.text_prompt, "Be kind."));
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"voice\":\"NATF0\"}}");
    TEST_COND("the same settings again do not", !conn_take_restart(c, &restart));
    conn_set_responding(c, 1); /* as the engine's wire does when the model's turn opens */
    send_text(&js, "{\"type\":\"response.cancel\"}");
    TEST_COND("response.cancel of an open response restarts",
              conn_take_restart(c, &restart) && !strcmp(restart.voice, "NATF0"));
    conn_set_responding(c, 0);
    drain(c, seen, sizeof seen);

    send_text(&js, "{\"type\":\"input_audio_buffer.commit\"}");
    send_text(&js, "{\"type\":\"input_audio_buffer.clear\"}");
    send_text(&js, "{\"type\":\"response.create\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("commit and clear acknowledged, response.create accepted",
              !strcmp(seen, "input_audio_buffer.committed input_audio_buffer.cleared"));

    const char *bad[][2] = {
        {"{\"type\":", "error:invalid_json"},
        {"", "error:invalid_json"},
        {"[1,2]", "error:invalid_event"},
        {"{\"event\":\"x\"}", "error:invalid_event"},
        {"{\"type\":\"no.such\"}", "error:unknown_event"},
        {"{\"type\":\"conversation.item.create\",\"item\":{}}", "error:unsupported_event"},
        {"{\"type\":\"input_audio_buffer.append\",\"audio\":\"%%%%\"}", "error:invalid_audio"},
        {"{\"type\":\"input_audio_buffer.append\"}", "error:invalid_audio"},
        {"{\"type\":\"session.update\",\"session\":{\"output_audio_format\":\"mp3\"}}", "error:invalid_value"},
        {"{\"type\":\"session.update\",\"session\":{\"type\":\"transcription\"}}", "error:unsupported_value"},
        {"{\"type\":\"session.update\",\"session\":{\"instructions\":\"\xff\"}}", "error:invalid_json"},
        {"{\"type\":\"session.update\",\"session\":{\"tools\":[{\"type\":\"function\"}]}}",
         "error:unsupported_value session.updated"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        send_text(&js, bad[i][0]);
        drain(c, seen, sizeof seen);
        if (strcmp(seen, bad[i][1])) fprintf(stderr, "  %s -> %s (expected %s)\n", bad[i][0], seen, bad[i][1]);
        TEST_COND("each bad event gets its error", !strcmp(seen, bad[i][1]));
    }
    /* the longest prompt of two-byte escapes still comes back in session.updated (one of six-byte
     * escapes once overflowed it: no reply, the settings applied all the same) */
    static char tabs[64 + 2 * PP_PARAMS_MAX_PROMPT];
    int at = snprintf(tabs, sizeof tabs, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"");
    for (int i = 0; i < PP_PARAMS_MAX_PROMPT; i++) at += snprintf(tabs + at, sizeof tabs - (size_t)at, "\\t");
    snprintf(tabs + at, sizeof tabs - (size_t)at, "\"}}");
    send_text(&js, tabs);
    drain(c, seen, sizeof seen);
    TEST_COND("a prompt of escapes is described back", !strcmp(seen, "session.updated"));
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"a\\u0001\"}}");
    drain(c, seen, sizeof seen);
    TEST_COND("a prompt of other controls is refused, the rest of the update applies",
              !strcmp(seen, "error:invalid_value session.updated"));
    /* an event of more values than JSON_SOCKET_MAX_VALUES, within the size limit */
    static char many[64 + 2 * (JSON_SOCKET_MAX_VALUES + 1)];
    at = snprintf(many, sizeof many, "{\"type\":\"input_audio_buffer.clear\",\"pad\":[");
    for (int i = 0; i <= JSON_SOCKET_MAX_VALUES; i++) at += snprintf(many + at, sizeof many - (size_t)at, "%s1", i ? "," : "");
    snprintf(many + at, sizeof many - (size_t)at, "]}");
    send_text(&js, many);
    drain(c, seen, sizeof seen);
    TEST_COND("an event of too many values is refused", !strcmp(seen, "error:invalid_json"));
    static char padded[JSON_SOCKET_KEPT_BUFFER + 64];
    at = snprintf(padded, sizeof padded, "{\"type\":\"input_audio_buffer.clear\"}");
    memset(padded + at, ' ', sizeof padded - 1 - (size_t)at);
    send_text(&js, padded);
    drain(c, seen, sizeof seen);
    TEST_COND("a large message is taken, and its buffer not kept",
              !strcmp(seen, "input_audio_buffer.cleared") && js.msg_cap == 0);
    int before = in.bad;
    TEST_COND("a binary message is refused",
              json_socket_receive(&js, (const uint8_t *)"\x01", 1, 1, 1) & WS_INPUT_WRITE);
    /* a message over the limit, in fragments */
    static char big[64 * 1024];
    memset(big, ' ', sizeof big);
    for (int k = 0; k < 5; k++) json_socket_receive(&js, (const uint8_t *)big, sizeof big, 0, k == 4);
    drain(c, seen, sizeof seen);
    TEST_COND("binary and oversized messages refused",
              !strcmp(seen, "error:invalid_event error:message_too_large") && in.bad == before + 2);
    TEST_COND("the socket still listens", !in.closing);
    send_text(&js, "{\"type\":\"input_audio_buffer.commit\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("and answers after bad input", !strcmp(seen, "input_audio_buffer.committed"));
    while (!in.closing) send_text(&js, "{\"type\":\"no.such\"}");
    TEST_COND("past the limit the socket closes", in.bad == WS_INPUT_MAX_BAD + 1 && conn_closing(c));
    TEST_COND("and ignores what follows", send_text(&js, "{\"type\":\"response.create\"}") == 0);
    json_socket_free(&js);
    conn_destroy(c);
}

static void check_realtime_g711(metrics *m) {
    char seen[1024];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 8, m, &in, &js, NULL);
    send_text(&js,
              "{\"type\":\"session.update\",\"session\":{\"audio\":{\"input\":{\"format\":{\"type\":\"audio/pcma\"}},"
              "\"output\":{\"format\":{\"type\":\"audio/pcmu\"}}}}}");
    TEST_COND("GA format objects taken", js.in_format == AUDIO_ALAW && js.out_format == AUDIO_ULAW);
    uint8_t alaw[800];
    for (int i = 0; i < 800; i++) alaw[i] = pp_alaw_encode(8192);
    int todo = send_audio(&js, "{\"type\":\"input_audio_buffer.append\",\"audio\":\"", alaw, sizeof alaw, "\"}");
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    TEST_COND("100 ms of A-law at 8 kHz is a whole frame at 24 kHz",
              (todo & WS_INPUT_WAKE) && conn_take_frame(c, frame, &ready));
    /* after the resampler's start-up, the constant comes through at its level */
    TEST_COND("at the level it was sent", fabsf(frame[1500] - pp_alaw_decode(pp_alaw_encode(8192)) / 32768.0f) < 2e-3f);
    drain(c, seen, sizeof seen);
    json_socket_free(&js);
    conn_destroy(c);
}

/* A voices directory (the template dir, filled in) holding empty NATF2.pt and NATM1.pt: enough
 * for a voice name to be known. Returns nonzero (and fails the test) when it cannot be made. */
static const char *const fixture_voices[] = {"NATF2.pt", "NATM1.pt"};

static int voices_dir_make(char *dir) {
    if (!mkdtemp(dir)) {
        TEST_COND("temp dir", 0);
        return -1;
    }
    char path[64];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, fixture_voices[i]);
        FILE *f = fopen(path, "wb");
        if (f) fclose(f);
    }
    return 0;
}

static void voices_dir_remove(const char *dir) {
    char path[64];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, fixture_voices[i]);
        remove(path);
    }
    rmdir(dir);
}

/* OpenAI's voice names ("alloy"), which client libraries send by default, are not voices here: the
 * update applies without it and says so, and the conversation keeps a voice it can start with. */
static void check_realtime_unknown_voice(metrics *m) {
    char dir[] = "/tmp/pp_test_json_socket_XXXXXX", seen[1024];
    if (voices_dir_make(dir)) return;
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 10, m, &in, &js, dir);
    drain(c, seen, sizeof seen);
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"Be kind.\","
                   "\"audio\":{\"output\":{\"voice\":\"alloy\"}}}}");
    drain(c, seen, sizeof seen);
    TEST_COND("an unknown voice: an error, then the update", !strcmp(seen, "error:invalid_value session.updated"));
    TEST_COND("... which keeps the voice and takes the instructions",
              !strcmp(js.params.voice, "NATF2") && !strcmp(js.params.text_prompt, "Be kind."));
    /* A name no voice file can have (a path, other characters) is no voice either: before, it was
     * taken and the conversation failed at its first audio ('bad voice name'). */
    static const char *const not_names[] = {"../NATM1", "NATM1.pt/..", "Alloy (US)", "\u00c9lodie"};
    for (size_t i = 0; i < sizeof not_names / sizeof *not_names; i++) {
        char update[256];
        snprintf(update, sizeof update, "{\"type\":\"session.update\",\"session\":{\"voice\":\"%s\"}}", not_names[i]);
        send_text(&js, update);
        drain(c, seen, sizeof seen);
        TEST_COND("a name that is not a voice name: an error, the voice kept",
                  !strcmp(seen, "error:invalid_value session.updated") && !strcmp(js.params.voice, "NATF2"));
    }
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"voice\":\"NATM1\"}}");
    drain(c, seen, sizeof seen);
    TEST_COND("a voice of the directory is taken", !strcmp(seen, "session.updated") && !strcmp(js.params.voice, "NATM1"));
    json_socket_free(&js);
    conn_destroy(c);
    voices_dir_remove(dir);
}

/* An unusable audio format is named by the key the client sent it in: before, a GA
 * audio.input.format was reported as session.input_audio_format, a key the client never used. */
static void check_realtime_format_key(metrics *m) {
    char seen[1024];
    const char *message = g_error_message;
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 20, m, &in, &js, NULL);
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"audio\":{\"input\":{\"format\":{\"type\":\"audio/mp3\"}}}}}");
    drain(c, seen, sizeof seen);
    printf("a GA format refused: %s\n", message);
    TEST_COND("a GA format's error names audio.input.format", !strncmp(message, "session.audio.input.format: ", 28));
    send_text(&js, "{\"type\":\"session.update\",\"session\":{\"output_audio_format\":\"mp3\"}}");
    drain(c, seen, sizeof seen);
    TEST_COND("a beta format's error names output_audio_format", !strncmp(message, "session.output_audio_format: ", 29));
    json_socket_free(&js);
    conn_destroy(c);
}

/* Instructions over the prompt's size (an agent framework's system prompt) are refused, and the
 * rest of the update applies: before, the whole update was refused, so a G.711 client that also
 * sent a long prompt had its audio read as 16-bit PCM. */
static void check_realtime_long_instructions(metrics *m) {
    char seen[1024];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 17, m, &in, &js, NULL);
    drain(c, seen, sizeof seen);
    static char update[PP_PARAMS_MAX_PROMPT + 512];
    int at = snprintf(update, sizeof update, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"");
    memset(update + at, 'a', PP_PARAMS_MAX_PROMPT + 1);
    at += PP_PARAMS_MAX_PROMPT + 1;
    snprintf(update + at, sizeof update - (size_t)at,
             "\",\"audio\":{\"input\":{\"format\":{\"type\":\"audio/pcmu\"}},"
             "\"output\":{\"format\":{\"type\":\"audio/pcmu\"},\"voice\":\"NATM1\"}}}}");
    send_text(&js, update);
    drain(c, seen, sizeof seen);
    printf("instructions of %d bytes with μ-law and a voice: %s; input %s\n", PP_PARAMS_MAX_PROMPT + 1, seen,
           js.in_format == AUDIO_ULAW ? "μ-law" : "not μ-law");
    TEST_COND("too long instructions: an error, then the update",
              !strcmp(seen, "error:invalid_value session.updated"));
    TEST_COND("... which takes the formats and the voice and keeps the instructions",
              js.in_format == AUDIO_ULAW && js.out_format == AUDIO_ULAW && !strcmp(js.params.voice, "NATM1") &&
                  js.params.text_prompt[0] == '\0');
    json_socket_free(&js);
    conn_destroy(c);
}

/* Instructions the conversation could not start with (over --max-prompt-tokens, a named prompt
 * the model lacks) are refused in session.update, the session keeping its own; they used to be
 * taken (session.updated) and the conversation then failed at its first audio (1008). */
static void check_realtime_instructions(metrics *m) {
    char dir[] = "/tmp/pp_test_json_socket_XXXXXX", seen[1024], err[PP_ERR_LEN];
    pp_demo_files files;
    pp_backend *be = NULL;
    pp_model *model = NULL;
    int rc = mkdtemp(dir) ? pp_demo_write(dir, &files, err) : PP_EIO;
    if (!rc) rc = pp_backend_cpu_create(1, &be, err);
    pp_model_paths paths = pp_demo_paths(&files);
    if (!rc) rc = pp_model_open(be, &paths, &model, err);
    TEST_COND("demo model opens", rc == PP_OK);
    if (!rc) {
        ws_input in;
        json_socket js;
        conn *c = open_socket(CONN_REALTIME, 11, m, &in, &js, NULL);
        json_socket_set_model(&js, model, 16, "Be brief.");
        drain(c, seen, sizeof seen);
        send_text(&js, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"Be kind.\"}}");
        drain(c, seen, sizeof seen);
        TEST_COND("instructions within the limit are taken",
                  !strcmp(seen, "session.updated") && !strcmp(js.params.text_prompt, "Be kind."));
        static const char *const refused[] = {
            "Be kind, be brief, be patient, be clear, be honest, be warm, be quick and be precise.", "@helpful"};
        for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
            char update[512];
            snprintf(update, sizeof update, "{\"type\":\"session.update\",\"session\":{\"instructions\":\"%s\"}}",
                     refused[i]);
            send_text(&js, update);
            drain(c, seen, sizeof seen);
            TEST_COND("instructions the conversation could not start with: an error, the old ones kept",
                      !strcmp(seen, "error:invalid_value session.updated") &&
                          !strcmp(js.params.text_prompt, "Be kind."));
        }
        json_socket_free(&js);
        conn_destroy(c);
        /* A Twilio call is not ended for it (a caller cannot fix the TwiML): the server's prompt. */
        static const char *const starts[3] = {
            "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ5\",\"customParameters\":{\"prompt\":\"@helpful\"}}}",
            ("{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ6\",\"customParameters\":{\"prompt\":\"Be kind, be "
             "brief, be patient, be clear, be honest, be warm, be quick and be precise.\"}}}"), /* one string */
            "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ7\",\"customParameters\":{\"prompt\":\"Be kind.\"}}}"};
        static const char *const expect[3] = {"Be brief.", "Be brief.", "Be kind."};
        for (int k = 0; k < 3; k++) {
            c = open_socket(CONN_TWILIO, 30 + (uint64_t)k, m, &in, &js, NULL);
            json_socket_set_model(&js, model, 16, "Be brief.");
            int todo = send_text(&js, starts[k]);
            TEST_COND(k < 2 ? "a Twilio prompt the model cannot start with: the server's, the call goes on"
                            : "a Twilio prompt the model can start with is kept",
                      (todo & JSON_SOCKET_ADMIT) && !in.closing && !strcmp(js.params.text_prompt, expect[k]));
            json_socket_free(&js);
            conn_destroy(c);
        }
    }
    pp_model_close(model);
    pp_backend_destroy(be);
    test_remove_dir(dir);
}

/* A Twilio call whose voice (customParameters or the query) the server lacks is not ended, which
 * a caller could not fix: it starts with the server's --voice. A voice the server has is kept. */
static void check_twilio_unknown_voice(metrics *m) {
    char dir[] = "/tmp/pp_test_json_socket_XXXXXX";
    if (voices_dir_make(dir)) return;
    static const char *const starts[3] = {
        "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ2\",\"customParameters\":{\"voice\":\"alloy\"}}}",
        "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ3\"}}",
        "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ4\",\"customParameters\":{\"voice\":\"NATM1\"}}}"};
    /* the query's voice: the server's for the first and last, one it lacks for the second */
    static const char *const query_voice[3] = {"NATF2", "VARX9", "NATF2"};
    static const char *const expect[3] = {"NATF2", "NATF2", "NATM1"};
    static const char *const what[3] = {"customParameters.voice unknown: the server's voice, the call goes on",
                                        "the query's voice unknown: the server's voice, the call goes on",
                                        "a customParameters.voice the server has is kept"};
    for (int k = 0; k < 3; k++) {
        char err[PP_ERR_LEN];
        conn *c;
        if (conn_create(20 + (uint64_t)k, CONN_TWILIO, &c, err)) abort();
        ws_input in;
        ws_input_init(&in, c, m);
        pp_session_params p;
        pp_params_defaults(&p);
        snprintf(p.voice, sizeof p.voice, "%s", query_voice[k]);
        json_socket js;
        json_socket_init(&js, &in, CONN_TWILIO, &p, dir, "NATF2");
        int todo = send_text(&js, starts[k]);
        TEST_COND(what[k], (todo & JSON_SOCKET_ADMIT) && !in.closing && in.bad == 0 && !conn_closing(c) &&
                               !strcmp(js.params.voice, expect[k]));
        json_socket_free(&js);
        conn_destroy(c);
    }
    voices_dir_remove(dir);
}

static void check_twilio_input(metrics *m) {
    char seen[1024];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_TWILIO, 9, m, &in, &js, NULL);
    TEST_COND("connected is quiet",
              send_text(&js, "{\"event\":\"connected\",\"protocol\":\"Call\",\"version\":\"1.0.0\"}") == 0);
    TEST_COND("media before start refused",
              send_text(&js, "{\"event\":\"media\",\"media\":{\"payload\":\"//8=\"}}") == WS_INPUT_WRITE &&
                  in.bad == 1);
    TEST_COND("a start without streamSid refused",
              send_text(&js, "{\"event\":\"start\",\"start\":{}}") == WS_INPUT_WRITE);
    TEST_COND(
        "a start in another format refused",
        send_text(&js,
                  "{\"event\":\"start\",\"start\":{\"streamSid\":\"MZ1\",\"mediaFormat\":{\"encoding\":\"audio/x-l16\","
                  "\"sampleRate\":16000}}}") == WS_INPUT_WRITE);
    int todo =
        send_text(&js, "{\"event\":\"start\",\"streamSid\":\"MZ1\",\"start\":{\"streamSid\":\"MZ1\",\"mediaFormat\":"
                       "{\"encoding\":\"audio/x-mulaw\",\"sampleRate\":8000,\"channels\":1},\"customParameters\":"
                       "{\"voice\":\"NATM2\",\"prompt\":\"You answer the phone.\",\"text_topk\":\"50\"}}}");
    TEST_COND("start admits with the custom parameters",
              (todo & JSON_SOCKET_ADMIT) && !strcmp(js.stream, "MZ1") && !strcmp(js.params.voice, "NATM2") &&
                  !strcmp(js.params.text_prompt, "You answer the phone.") && js.params.text_topk == 50);
    uint8_t ulaw[160];
    memset(ulaw, 0xFF, sizeof ulaw);
    const char *media = "{\"event\":\"media\",\"media\":{\"track\":\"inbound\",\"payload\":\"";
    int wakes = 0;
    for (int k = 0; k < 4; k++) wakes += (send_audio(&js, media, ulaw, sizeof ulaw, "\"}}") & WS_INPUT_WAKE) != 0;
    TEST_COND("four 20 ms media messages make one frame", wakes == 1 && conn_uplink_stats(c).samples == 4 * 480);
    TEST_COND("marks and dtmf are quiet", send_text(&js, "{\"event\":\"mark\",\"mark\":{\"name\":\"turn-1\"}}") == 0 &&
                                              send_text(&js, "{\"event\":\"dtmf\",\"dtmf\":{\"digit\":\"1\"}}") == 0);
    TEST_COND("an unknown event is counted", send_text(&js, "{\"event\":\"bogus\"}") == WS_INPUT_WRITE);
    send_text(&js, "{\"event\":\"stop\",\"streamSid\":\"MZ1\"}");
    TEST_COND("stop closes the stream normally", in.closing && conn_closing(c));
    TEST_COND("Twilio gets no error messages (it has none)", drain(c, seen, sizeof seen) == 0);
    json_socket_free(&js);
    conn_destroy(c);
}

static float g_quiet[PP_FRAME_SAMPLES], g_loud[PP_FRAME_SAMPLES];

/* A wire on a fresh conn, after the stream's settings; fills the test frames. */
static wire *open_wire(conn_protocol protocol, audio_format format, const char *stream, uint64_t id, conn **c) {
    char err[PP_ERR_LEN];
    if (conn_create(id, protocol, c, err)) abort();
    conn_set_output(*c, format, stream);
    pp_session_params p;
    pp_params_defaults(&p);
    wire *w;
    if (wire_open(*c, &p, &w, err)) abort();
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) g_loud[i] = 0.3f * (float)sin(0.2 * i);
    return w;
}

/* Takes every queued message; appends the transcript deltas' text to out (cap bytes). When
 * pcm_check is set, checks each audio delta is that frame as 16-bit PCM. */
static void take_transcript(conn *c, char *out, size_t cap, const float *pcm_check) {
    size_t len;
    int text;
    char err[PP_ERR_LEN];
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *r = pp_json_root(doc);
        const char *type = json_socket_string(r, "type"), *delta = json_socket_string(r, "delta");
        if (!strcmp(type, "response.output_audio_transcript.delta")) strncat(out, delta, cap - strlen(out) - 1);
        if (!strcmp(type, "response.output_audio.delta") && pcm_check) {
            uint8_t pcm[2 * PP_FRAME_SAMPLES + 3];
            long b = pp_base64_decode(delta, strlen(delta), pcm, sizeof pcm);
            int16_t s100 = (int16_t)(pcm[200] | pcm[201] << 8);
            TEST_COND("an audio delta is one frame of 16-bit PCM",
                      b == 2 * PP_FRAME_SAMPLES && abs(s100 - (int)lrintf(pcm_check[100] * 32768)) <= 1);
        }
        pp_json_free(doc);
    }
}

/* The realtime wire over a turn: speech frames, a piece split inside a character, quiet. */
static void check_realtime_wire(void) {
    char err[PP_ERR_LEN], seen[4096], transcript[64] = "";
    conn *c;
    wire *w = open_wire(CONN_REALTIME, AUDIO_PCM16, "", 10, &c);
    const float *quiet = g_quiet, *loud = g_loud;
    TEST_COND("nothing before the prompts are done", wire_ready(w, err) == 0 && drain(c, seen, sizeof seen) == 0);
    wire_frame(w, quiet, 1, quiet, "", err);
    TEST_COND("quiet frames send nothing", drain(c, seen, sizeof seen) == 0);
    long n = wire_frame(w, quiet, 1, loud, "", err);
    drain(c, seen, sizeof seen);
    /* no output_audio_buffer.started: a WebRTC event, which a WebSocket client may not know */
    TEST_COND("speech opens a turn", n > 0 && !strcmp(seen, "response.created response.output_item.added "
                                                            "conversation.item.added response.content_part.added "
                                                            "response.output_audio.delta"));
    wire_frame(w, quiet, 1, loud, "caf\xc3", err); /* "café" cut inside the é */
    take_transcript(c, transcript, sizeof transcript, loud);
    TEST_COND("the cut character waits", !strcmp(transcript, "caf"));
    wire_frame(w, quiet, 1, loud, "\xa9 \xff!", err);
    transcript[0] = '\0';
    take_transcript(c, transcript, sizeof transcript, NULL);
    TEST_COND("then comes whole; a bad byte becomes U+FFFD", !strcmp(transcript, "\xc3\xa9 \xef\xbf\xbd!"));
    for (int k = 0; k < 7; k++) wire_frame(w, quiet, 1, quiet, "", err);
    drain(c, seen, sizeof seen);
    TEST_COND("the turn's tail is still sent",
              !strncmp(seen, "response.output_audio.delta", 27) && !strstr(seen, "done"));
    wire_frame(w, quiet, 1, quiet, "", err);
    drain(c, seen, sizeof seen);
    TEST_COND("8 quiet frames end the turn",
              !strcmp(seen,
                      "response.output_audio.delta response.output_audio.done response.output_audio_transcript.done "
                      "response.content_part.done response.output_item.done conversation.item.done "
                      "response.done"));
    wire_frame(w, quiet, 1, loud, "", err);
    drain(c, seen, sizeof seen);
    pp_session_params p;
    pp_params_defaults(&p);
    wire_restart(w, &p);
    size_t len;
    int text, cancelled = 0;
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text))
        cancelled |= strstr((char *)g_msg, "\"cancelled\"") != NULL;
    TEST_COND("a restart ends the open turn as cancelled", cancelled);
    wire_close(w);
    conn_destroy(c);
}

/* Takes every queued message; for each response.created and response.done appends
 * "<type> <status>/<details>" to out, details being "null", the reason of a status_details
 * object, or "missing" when the response has no status_details key; response.done adds
 * " usage <output_tokens>/<input_tokens>" ("usage missing" without a whole usage object). */
static void take_response_statuses(conn *c, char *out, size_t cap) {
    size_t len;
    int text;
    char err[PP_ERR_LEN];
    out[0] = '\0';
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *r = pp_json_root(doc), *response = pp_json_get(r, "response");
        const char *type = json_socket_string(r, "type");
        if (response && (!strcmp(type, "response.created") || !strcmp(type, "response.done"))) {
            const pp_json *details = pp_json_get(response, "status_details");
            const char *reason = !details                          ? "missing"
                                 : details->type == PP_JSON_NULL ? "null"
                                                                 : json_socket_string(details, "reason");
            size_t used = strlen(out);
            used += (size_t)snprintf(out + used, cap - used, "%s%s %s/%s", used ? " " : "", type,
                                     json_socket_string(response, "status"), reason ? reason : "?");
            const pp_json *u = pp_json_get(response, "usage"), *in = pp_json_get(u, "input_tokens"),
                          *outn = pp_json_get(u, "output_tokens"), *total = pp_json_get(u, "total_tokens");
            int whole = in && outn && total && pp_json_get(u, "input_token_details") &&
                        pp_json_get(u, "output_token_details") && total->number == in->number + outn->number;
            if (!strcmp(type, "response.done") && used < cap) {
                if (whole)
                    snprintf(out + used, cap - used, " usage %g/%g", outn->number, in->number);
                else
                    snprintf(out + used, cap - used, " usage missing");
            }
        }
        pp_json_free(doc);
    }
}

/* Every response object has status_details (Pipecat's parser requires the key: before, it
 * dropped every response.created and response.done of this server), and response.done a usage
 * (Pipecat reads response.usage.input_tokens of each, unguarded). */
static void check_realtime_response_status(void) {
    char err[PP_ERR_LEN], seen[4096];
    conn *c;
    wire *w = open_wire(CONN_REALTIME, AUDIO_PCM16, "", 13, &c);
    wire_ready(w, err);
    wire_frame(w, g_quiet, 1, g_loud, "", err);
    for (int k = 0; k < 8; k++) wire_frame(w, g_quiet, 1, g_quiet, "", err);
    take_response_statuses(c, seen, sizeof seen);
    printf("a completed turn: %s\n", seen);
    TEST_COND("a completed turn: status_details null in both, usage of its 9 frames, all heard",
              !strcmp(seen, "response.created in_progress/null response.done completed/null usage 9/9"));
    wire_frame(w, g_quiet, 1, g_loud, "", err);
    wire_frame(w, g_quiet, 0, g_loud, "", err); /* silence the server filled in: not heard */
    pp_session_params p;
    pp_params_defaults(&p);
    wire_restart(w, &p);
    take_response_statuses(c, seen, sizeof seen);
    printf("a cancelled turn: %s\n", seen);
    TEST_COND("a cancelled turn says the client cancelled it, and counts what it sent",
              !strcmp(seen, "response.created in_progress/null response.done cancelled/client_cancelled usage 2/1"));
    wire_close(w);
    conn_destroy(c);
}

/* Takes every queued message; appends "<type>:<previous_item_id>" ("null" for a JSON null) of
 * each conversation.item.added and .done to out. */
static void take_item_chain(conn *c, char *out, size_t cap) {
    size_t len;
    int text;
    char err[PP_ERR_LEN];
    out[0] = '\0';
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *r = pp_json_root(doc);
        const char *type = json_socket_string(r, "type"), *previous = json_socket_string(r, "previous_item_id");
        const char *id = json_socket_string(pp_json_get(r, "item"), "id");
        if (!strncmp(type, "conversation.item.", 18)) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s%s %s after %s", used ? " " : "", type + 18, id ? id : "?",
                     previous ? previous : "null");
        }
        pp_json_free(doc);
    }
}

/* Each turn's item joins the conversation (conversation.item.added / .done) after the previous
 * turn's: before, no conversation.item event came at all, so a client that builds its history or
 * starts an assistant response from them (Pipecat) saw none. */
static void check_realtime_conversation_items(void) {
    char err[PP_ERR_LEN], seen[1024];
    conn *c;
    wire *w = open_wire(CONN_REALTIME, AUDIO_PCM16, "", 18, &c);
    wire_ready(w, err);
    for (int turn = 0; turn < 2; turn++) {
        wire_frame(w, g_quiet, 1, g_loud, "", err);
        for (int k = 0; k < 8; k++) wire_frame(w, g_quiet, 1, g_quiet, "", err);
    }
    take_item_chain(c, seen, sizeof seen);
    printf("two turns' items: %s\n", seen);
    TEST_COND("two turns: each item added and done, the second after the first",
              !strcmp(seen, "added item_18_1 after null done item_18_1 after null "
                            "added item_18_2 after item_18_1 done item_18_2 after item_18_1"));
    wire_close(w);
    conn_destroy(c);
}

/* A turn's text past the .done events' 2048 bytes: they repeat a prefix of the deltas' text.
 * Before, a piece that did not fit was skipped and a shorter one after it still went in ("...ab"
 * + "k": a hole where "mber" was). */
static void check_realtime_transcript_cap(void) {
    char err[PP_ERR_LEN], done[4096] = "";
    static char joined[8192];
    joined[0] = '\0';
    conn *c;
    wire *w = open_wire(CONN_REALTIME, AUDIO_PCM16, "", 12, &c);
    const float *quiet = g_quiet, *loud = g_loud;
    wire_ready(w, err);
    const char *tail[] = {"mber", "k"};
    for (int k = 0; k < 1023 + 2; k++) {
        wire_frame(w, quiet, 1, loud, k < 1023 ? "ab" : tail[k - 1023], err);
        take_transcript(c, joined, sizeof joined, NULL);
    }
    for (int k = 0; k < 8; k++) wire_frame(w, quiet, 1, quiet, "", err);
    size_t len;
    int text;
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *r = pp_json_root(doc);
        if (!strcmp(json_socket_string(r, "type"), "response.output_audio_transcript.done"))
            snprintf(done, sizeof done, "%s", json_socket_string(r, "transcript"));
        pp_json_free(doc);
    }
    printf("transcript: deltas %zu bytes, .done %zu bytes, ends \"%s\"\n", strlen(joined), strlen(done),
           done + (strlen(done) > 6 ? strlen(done) - 6 : 0));
    TEST_COND("the deltas carry the whole turn", strlen(joined) == 2046 + 5);
    TEST_COND(".done repeats a prefix of the deltas' text",
              strlen(done) == 2046 && !strncmp(done, joined, strlen(done)));
    wire_close(w);
    conn_destroy(c);
}

static void check_twilio_wire(void) {
    char err[PP_ERR_LEN], seen[4096];
    conn *c;
    wire *w = open_wire(CONN_TWILIO, AUDIO_ULAW, "MZ9", 11, &c);
    const float *quiet = g_quiet, *loud = g_loud;
    wire_frame(w, quiet, 1, quiet, "", err);
    size_t len;
    int text;
    TEST_COND("every frame is a media message", conn_dequeue(c, g_msg, sizeof g_msg, &len, &text));
    pp_json_doc *doc;
    TEST_COND("JSON", !pp_json_parse((const char *)g_msg, len, &doc, err));
    const pp_json *r = pp_json_root(doc);
    const char *payload = json_socket_string(pp_json_get(r, "media"), "payload");
    uint8_t ulaw[700];
    TEST_COND("naming the stream", !strcmp(json_socket_string(r, "streamSid"), "MZ9"));
    TEST_COND("with 640 μ-law bytes of silence",
              payload && pp_base64_decode(payload, strlen(payload), ulaw, sizeof ulaw) == 640 && ulaw[639] == 0xFF);
    pp_json_free(doc);
    wire_frame(w, quiet, 1, loud, "", err);
    wire_frame(w, loud, 1, loud, "", err);
    drain(c, seen, sizeof seen);
    TEST_COND("one loud caller frame is not a barge-in", !strcmp(seen, "media media"));
    wire_frame(w, loud, 1, loud, "", err);
    wire_frame(w, loud, 1, loud, "", err);
    drain(c, seen, sizeof seen);
    TEST_COND("two in a row over a turn send one clear", !strcmp(seen, "media clear media"));
    for (int k = 0; k < 8; k++) wire_frame(w, quiet, 1, quiet, "", err);
    drain(c, seen, sizeof seen);
    TEST_COND("the turn's end is marked", strstr(seen, "mark") != NULL);
    wire_close(w);
    conn_destroy(c);
}

/* The start-up measure of a frame's downlink encoding: a time, not an error or a zero. */
static void check_frame_cost(void) {
    char err[PP_ERR_LEN];
    double ms = -1;
    TEST_COND("wire_frame_cost measures", wire_frame_cost(&ms, err) == PP_OK);
    printf("one frame's Opus encoding: %.3f ms\n", ms);
    TEST_COND("a frame's encoding takes some time", ms > 0 && isfinite(ms));
}

/* The chat socket's binary messages may come in fragments, the first of them empty: the kind
 * byte is the message's first byte, whichever fragment holds it (such a message was once
 * refused as empty). A message of no byte at all is still refused. */
static void check_chat_fragments(metrics *m) {
    char err[PP_ERR_LEN];
    conn *c;
    if (conn_create(9, CONN_CHAT, &c, err)) abort();
    ws_input in;
    ws_input_init(&in, c, m);
    static const uint8_t control[2] = {MSG_CONTROL, 0x00};
    ws_input_receive(&in, NULL, 0, 1, 0);
    ws_input_receive(&in, control, 1, 1, 0);
    ws_input_receive(&in, control + 1, 1, 1, 1);
    TEST_COND("chat: a control message after an empty fragment is taken", in.bad == 0);
    ws_input_receive(&in, NULL, 0, 1, 0);
    ws_input_receive(&in, NULL, 0, 1, 1);
    TEST_COND("chat: a message of empty fragments is refused", in.bad == 1);
    static const uint8_t unknown[2] = {0x7e, 0x00};
    ws_input_receive(&in, NULL, 0, 1, 0);
    ws_input_receive(&in, unknown, 2, 1, 1);
    TEST_COND("chat: an unknown kind in a later fragment is refused once", in.bad == 2);
    static char quote[601]; /* 300 two-byte characters: the 512-byte message cuts one */
    for (int i = 0; i < 300; i++) quote[2 * i] = (char)0xc3, quote[2 * i + 1] = (char)0xa9;
    conn_fail(c, 0, "%s", quote);
    size_t len = 0, last = 0;
    int text;
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) last = len;
    TEST_COND("chat: a truncated error message is whole UTF-8",
              last > 1 && g_msg[0] == MSG_ERROR && pp_utf8_valid((const char *)g_msg + 1, last - 1));
    conn_destroy(c);
}

/* 16-bit PCM is a byte stream: a message that ends inside a sample carries its byte to the next
 * (before, such a message was refused whole as "an odd count" and its audio lost: a client
 * cutting a pipe's output anywhere lost about half its chunks); input_audio_buffer.clear drops
 * the carried byte. */
static void check_realtime_odd_pcm(metrics *m) {
    char seen[4096];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 16, m, &in, &js, NULL);
    static uint8_t pcm[2 * PP_FRAME_SAMPLES];
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) { /* sample i is 16 * i: both bytes vary */
        pcm[2 * i] = (uint8_t)((16 * i) & 0xFF);
        pcm[2 * i + 1] = (uint8_t)((16 * i) >> 8);
    }
    const char *append = "{\"type\":\"input_audio_buffer.append\",\"audio\":\"";
    send_audio(&js, append, pcm, 1001, "\"}"); /* 500 samples and half of one */
    send_audio(&js, append, pcm + 1001, 2, "\"}");
    send_audio(&js, append, pcm + 1003, sizeof pcm - 1003, "\"}");
    drain(c, seen, sizeof seen);
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    int whole = conn_take_frame(c, frame, &ready), exact = whole;
    for (int i = 0; whole && i < PP_FRAME_SAMPLES; i++) exact &= frame[i] == (float)(16 * i) / 32768.0f;
    printf("1001 + 2 + %zu PCM bytes: %s, %s\n", sizeof pcm - 1003, seen, exact ? "one exact frame" : "not one exact frame");
    TEST_COND("a frame cut at odd bytes: no error, every sample whole", !strcmp(seen, "session.created") && exact);
    send_audio(&js, append, pcm, 3, "\"}");
    send_text(&js, "{\"type\":\"input_audio_buffer.clear\"}");
    send_audio(&js, append, pcm, 2, "\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("clear drops the carried byte",
              conn_uplink_stats(c).samples == PP_FRAME_SAMPLES + 2 && !strcmp(seen, "input_audio_buffer.cleared"));
    json_socket_free(&js);
    conn_destroy(c);
}

/* conversation.item.create of a user message of audio (a push-to-talk clip) is heard as appended
 * audio and the item is added (before, every item was refused and the clip lost); items of text
 * stay refused. */
static void check_realtime_item_audio(metrics *m) {
    char seen[4096];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 19, m, &in, &js, NULL);
    drain(c, seen, sizeof seen);
    static uint8_t pcm[2 * PP_FRAME_SAMPLES];
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) pcm[2 * i + 1] = 0x20; /* 0x2000: 0.25 */
    int todo = send_audio(&js,
                          "{\"type\":\"conversation.item.create\",\"item\":{\"id\":\"clip_1\",\"type\":\"message\","
                          "\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"audio\":\"",
                          pcm, sizeof pcm, "\"}]}}");
    drain(c, seen, sizeof seen);
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    int heard = conn_take_frame(c, frame, &ready) && frame[0] == 0.25f && frame[PP_FRAME_SAMPLES - 1] == 0.25f;
    printf("an item of one frame of audio: %s; %s\n", seen, heard ? "heard" : "not heard");
    TEST_COND("an audio item is heard, admits the conversation and is added",
              heard && (todo & JSON_SOCKET_ADMIT) && !strcmp(seen, "conversation.item.added conversation.item.done"));
    send_text(&js, "{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\","
                   "\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]}}");
    send_text(&js, "{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\","
                   "\"content\":[{\"type\":\"input_audio\",\"audio\":\"***\"}]}}");
    drain(c, seen, sizeof seen);
    TEST_COND("text is refused; bad audio draws its error and no item",
              !strcmp(seen, "error:unsupported_event error:invalid_audio"));
    json_socket_free(&js);
    conn_destroy(c);
}

/* conversation.item.truncate (a client's barge-in) is acknowledged with conversation.item.truncated
 * echoing its item, index and time: before, it was refused with an error, which ends a Pipecat
 * session. One without an item_id or audio_end_ms is still an error. */
static void check_realtime_truncate(metrics *m) {
    char seen[1024], err[PP_ERR_LEN];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 21, m, &in, &js, NULL);
    drain(c, seen, sizeof seen);
    send_text(&js, "{\"type\":\"conversation.item.truncate\",\"item_id\":\"item_21_3\",\"content_index\":0,"
                   "\"audio_end_ms\":1520}");
    size_t len;
    int text, echoed = 0;
    char type[64] = "";
    while (conn_dequeue(c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *r = pp_json_root(doc), *end = pp_json_get(r, "audio_end_ms"), *index = pp_json_get(r, "content_index");
        snprintf(type, sizeof type, "%s", json_socket_string(r, "type"));
        const char *item = json_socket_string(r, "item_id");
        echoed = item && !strcmp(item, "item_21_3") && end && end->number == 1520 && index && index->number == 0;
        pp_json_free(doc);
    }
    printf("conversation.item.truncate answered by: %s\n", type);
    TEST_COND("a truncate is acknowledged with its item, index and time",
              !strcmp(type, "conversation.item.truncated") && echoed && in.bad == 0);
    send_text(&js, "{\"type\":\"conversation.item.truncate\",\"item_id\":\"item_21_3\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("a truncate without audio_end_ms is an error", !strcmp(seen, "error:invalid_event"));
    json_socket_free(&js);
    conn_destroy(c);
}

/* response.cancel restarts the conversation only while a response is open. Before, a cancel
 * with none (one that lost a race with response.done, or a client's on every barge-in) restarted
 * it too, and the model lost everything it had heard. The wire shares the socket's conn, as in
 * the server: its turns are what response.cancel sees. */
static void check_realtime_cancel(metrics *m) {
    char err[PP_ERR_LEN], seen[4096];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 15, m, &in, &js, NULL);
    pp_session_params restart;
    send_text(&js, "{\"type\":\"response.cancel\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("a cancel before the conversation: refused", !strcmp(seen, "session.created error:response_cancel_not_active"));
    append_pcm(&js, 1920, 0);
    conn_set_output(c, AUDIO_PCM16, "");
    wire *w;
    if (wire_open(c, &js.params, &w, err)) abort();
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) g_loud[i] = 0.3f * (float)sin(0.2 * i);
    wire_frame(w, g_quiet, 1, g_quiet, "", err);
    send_text(&js, "{\"type\":\"response.cancel\"}");
    drain(c, seen, sizeof seen);
    int restarted = conn_take_restart(c, &restart);
    printf("response.cancel while the model is quiet: %s, %s\n", seen, restarted ? "restarted" : "no restart");
    TEST_COND("a cancel with no response open: refused, no restart",
              !strcmp(seen, "error:response_cancel_not_active") && !restarted);
    wire_frame(w, g_quiet, 1, g_loud, "", err);
    drain(c, seen, sizeof seen);
    send_text(&js, "{\"type\":\"response.cancel\"}");
    TEST_COND("a cancel in a turn restarts", conn_take_restart(c, &restart));
    wire_restart(w, &restart); /* the engine's restart: the turn ends as cancelled */
    drain(c, seen, sizeof seen);
    send_text(&js, "{\"type\":\"response.cancel\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("after the cancelled turn a second cancel is refused",
              !strcmp(seen, "error:response_cancel_not_active") && !conn_take_restart(c, &restart));
    /* a race, not bad input: a client cancelling at each barge-in is never closed for it */
    for (int k = 0; k < 2 * WS_INPUT_MAX_BAD; k++) send_text(&js, "{\"type\":\"response.cancel\"}");
    drain(c, seen, sizeof seen);
    TEST_COND("cancels with none open are not counted as bad input", in.bad == 0 && !in.closing);
    wire_close(w);
    json_socket_free(&js);
    conn_destroy(c);
}

/* Sends one event; returns the error.event_id of the `error` it draws, "null" for a JSON null,
 * "none" when no error came. */
static const char *error_event_id_of(json_socket *js, const char *event) {
    static char id[CONN_EVENT_ID_MAX + 1];
    char err[PP_ERR_LEN];
    size_t len;
    int text;
    snprintf(id, sizeof id, "none");
    send_text(js, event);
    while (conn_dequeue(js->in->c, g_msg, sizeof g_msg, &len, &text)) {
        pp_json_doc *doc;
        if (pp_json_parse((const char *)g_msg, len, &doc, err)) continue;
        const pp_json *e = pp_json_get(pp_json_root(doc), "error"), *v = pp_json_get(e, "event_id");
        if (e) snprintf(id, sizeof id, "%s", v && v->type == PP_JSON_STRING ? v->string : "null");
        pp_json_free(doc);
    }
    return id;
}

/* An error repeats the event_id of the client event that caused it, as OpenAI's do (before: always
 * null, so a client could not tell which of its events was refused). */
static void check_realtime_error_event_id(metrics *m) {
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 14, m, &in, &js, NULL);
    char seen[512];
    drain(c, seen, sizeof seen);
    const char *id = error_event_id_of(&js, "{\"type\":\"no.such\",\"event_id\":\"evt_client_7\"}");
    printf("error.event_id of an unknown event with its event_id: %s\n", id);
    TEST_COND("an error repeats its event's event_id", !strcmp(id, "evt_client_7"));
    id = error_event_id_of(&js, "{\"event_id\":\"evt_client_8\",\"type\":\"input_audio_buffer.append\",\"audio\":\"*\"}");
    TEST_COND("whichever handler refuses it", !strcmp(id, "evt_client_8"));
    TEST_COND("an event without one: null", !strcmp(error_event_id_of(&js, "{\"type\":\"no.such\"}"), "null"));
    char long_id[CONN_EVENT_ID_MAX + 64];
    int n = snprintf(long_id, sizeof long_id, "{\"type\":\"no.such\",\"event_id\":\"");
    memset(long_id + n, 'x', CONN_EVENT_ID_MAX + 1);
    snprintf(long_id + n + CONN_EVENT_ID_MAX + 1, sizeof long_id - (size_t)(n + CONN_EVENT_ID_MAX + 1), "\"}");
    TEST_COND("an id too long to repeat: null, the error still sent", !strcmp(error_event_id_of(&js, long_id), "null"));
    TEST_COND("an event that succeeds draws no error",
              !strcmp(error_event_id_of(&js, "{\"type\":\"input_audio_buffer.clear\",\"event_id\":\"e9\"}"), "none"));
    json_socket_free(&js);
    conn_destroy(c);
}

/* The bad-event limit is a rate: 40 unknown events, one per 6 s of audio over a 4-min call, are
 * each answered and the call goes on (before, the 33rd closed it); with no audio between them
 * the 33rd still closes the socket (check_realtime_input). */
static void check_realtime_scattered_errors(metrics *m) {
    char seen[4096];
    ws_input in;
    json_socket js;
    conn *c = open_socket(CONN_REALTIME, 9, m, &in, &js, NULL);
    static float pcm[6 * PP_SAMPLE_RATE];
    float frame[PP_FRAME_SAMPLES];
    int64_t ready;
    int answered = 0;
    for (int k = 0; k < 40 && !in.closing; k++) {
        conn_push_pcm(c, pcm, sizeof pcm / sizeof *pcm);
        while (conn_take_frame(c, frame, &ready)) {}
        send_text(&js, "{\"type\":\"no.such\"}");
        drain(c, seen, sizeof seen);
        answered += strstr(seen, "error:unknown_event") != NULL;
    }
    TEST_COND("40 bad events over 4 min of audio: each answered, the call goes on",
              answered == 40 && in.bad == 40 && !in.closing && !conn_closing(c));
    json_socket_free(&js);
    conn_destroy(c);
}

int main(void) {
    pp_log_set_level(PP_LOG_ERROR);
    char err[PP_ERR_LEN];
    metrics *m;
    if (metrics_create(&m, err)) return 1;
    check_realtime_input(m);
    check_realtime_g711(m);
    check_realtime_unknown_voice(m);
    check_realtime_long_instructions(m);
    check_realtime_format_key(m);
    check_realtime_instructions(m);
    check_twilio_input(m);
    check_twilio_unknown_voice(m);
    check_chat_fragments(m);
    check_realtime_scattered_errors(m);
    check_realtime_error_event_id(m);
    check_realtime_cancel(m);
    check_realtime_odd_pcm(m);
    check_realtime_item_audio(m);
    check_realtime_truncate(m);
    check_realtime_wire();
    check_realtime_transcript_cap();
    check_realtime_response_status();
    check_realtime_conversation_items();
    check_twilio_wire();
    check_frame_cost();
    char small[1000]; /* far less than the exposition: it must still end in a whole line */
    size_t n = metrics_render(m, small, sizeof small, 8);
    TEST_COND("/metrics in too small a buffer: whole lines only", n > 0 && n < sizeof small && small[n - 1] == '\n');
    metrics_destroy(m);
    return test_report();
}
