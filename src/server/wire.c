/* wire: the per-protocol downlink (see wire.h). */
#include "server/wire.h"

#include "audio/g711.h"
#include "audio/resample.h"
#include "audio/wav.h"
#include "base/base64.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/frame.h"
#include "base/json.h"
#include "base/rng.h"
#include "session/params.h"
#include "text/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEECH_RMS 0.01f  /* about -40 dBFS: the model's pauses stay well below */
#define TURN_END_FRAMES 8 /* 640 ms without speech ends a turn */
#define CALLER_RMS 0.02f  /* the caller's level that counts as talking over a turn */
#define BARGE_IN_FRAMES 2
#define TRANSCRIPT_MAX 2048                          /* bytes of a turn's transcript repeated in its .done events */
#define TELEPHONE_SAMPLES (PP_FRAME_SAMPLES / 3 + 8) /* 8 kHz samples of one frame, and slack */
/* wire_frame_cost times COST_FRAMES frames after WARM_FRAMES: a fresh Opus encoder spends
 * about four times its steady cost on its first 1.5 s or so (measured 1.2 against 0.3 ms). */
#define WARM_FRAMES 25
#define COST_FRAMES 10

struct wire {
    conn *c;
    conn_protocol protocol;
    audio_format format;
    pp_downlink *down;   /* chat */
    pp_resampler *to_8k; /* G.711 output */
    char voice[PP_PARAMS_MAX_VOICE];
    /* the current turn */
    int speaking, quiet_frames, loud_caller_frames, cleared;
    unsigned turn_frames, turn_heard; /* frames of the turn sent, and of them those with the client's audio */
    unsigned turns;
    char response_id[48], item_id[48];
    char previous_item_id[48]; /* the item of the turn before ("" before the second turn) */
    char transcript[TRANSCRIPT_MAX];
    size_t transcript_len;
    int transcript_cut; /* a piece did not fit: the rest of the turn's text stays out */
    pp_utf8_carry carry; /* the start of a character split across pieces */
    char json[CONN_JSON_MAX];
    uint8_t bytes[PP_DOWNLINK_MAX_PAGE];
};

int wire_open(conn *c, const pp_session_params *params, wire **out, char *err) {
    *out = NULL;
    wire *w = calloc(1, sizeof *w);
    if (!w) return pp_fail(err, PP_ENOMEM, "out of memory for the downlink");
    w->c = c;
    w->protocol = conn_get_protocol(c);
    w->format = w->protocol == CONN_TWILIO ? AUDIO_ULAW : conn_output_format(c);
    snprintf(w->voice, sizeof w->voice, "%s", params->voice);
    int rc = 0;
    if (w->protocol == CONN_CHAT)
        rc = pp_downlink_open(&w->down, 0, err);
    else if (w->format != AUDIO_PCM16)
        rc = pp_resampler_open(&w->to_8k, PP_SAMPLE_RATE, 8000, PP_FRAME_SAMPLES, err);
    if (rc) {
        wire_close(w);
        return rc;
    }
    *out = w;
    return PP_OK;
}

void wire_close(wire *w) {
    if (!w) return;
    pp_downlink_close(w->down);
    pp_resampler_close(w->to_8k);
    free(w);
}

static long send_chat(wire *w, int kind, const void *payload, size_t len) {
    return conn_queue(w->c, kind, payload, len) == PP_OK ? (long)len + 1 : 0;
}

/* Starts a JSON message: a realtime event with its type and id, or a Twilio event. */
static void begin(wire *w, pp_jw *jw, const char *type) {
    pp_jw_init(jw, w->json, sizeof w->json);
    if (w->protocol == CONN_TWILIO) {
        pp_jw_raw(jw, "{\"event\":\"%s\",\"streamSid\":", type);
        pp_jw_str(jw, conn_stream(w->c), strlen(conn_stream(w->c)));
        return;
    }
    char id[32];
    conn_event_id(w->c, id);
    pp_jw_raw(jw, "{\"type\":\"%s\",\"event_id\":\"%s\"", type, id);
}

/* The fields that place a realtime event in the current turn. */
static void turn_fields(wire *w, pp_jw *jw, int content) {
    pp_jw_raw(jw, ",\"response_id\":\"%s\",\"item_id\":\"%s\",\"output_index\":0", w->response_id, w->item_id);
    if (content) pp_jw_raw(jw, ",\"content_index\":0");
}

static long finish(wire *w, pp_jw *jw) {
    pp_jw_raw(jw, "}");
    long n = pp_jw_end(jw);
    return n > 0 && conn_queue_json(w->c, w->json, (size_t)n) == PP_OK ? n : 0;
}

const char *wire_format_json(audio_format f) {
    return f == AUDIO_ULAW   ? "{\"type\":\"audio/pcmu\"}"
           : f == AUDIO_ALAW ? "{\"type\":\"audio/pcma\"}"
                             : "{\"type\":\"audio/pcm\",\"rate\":24000}";
}

/* response.done's usage, which clients read unguarded (Pipecat takes usage.input_tokens of every
 * response.done). The model has no tokenizer's tokens to bill: it counts the turn's 80 ms frames,
 * output those it spoke, input those of the client's audio it heard meanwhile. */
static void usage(wire *w, pp_jw *jw) {
    pp_jw_raw(jw,
              ",\"usage\":{\"total_tokens\":%u,\"input_tokens\":%u,\"output_tokens\":%u,"
              "\"input_token_details\":{\"text_tokens\":0,\"audio_tokens\":%u,\"cached_tokens\":0},"
              "\"output_token_details\":{\"text_tokens\":0,\"audio_tokens\":%u}}",
              w->turn_heard + w->turn_frames, w->turn_heard, w->turn_frames, w->turn_heard, w->turn_frames);
}

/* The response object of the current turn. status_details is always there, null but for a
 * cancelled turn (which only the client's response.cancel or session.update causes): clients
 * that validate the object strictly (Pipecat's) require the key and drop an event without it. */
static void response_object(wire *w, pp_jw *jw, const char *status, int with_item) {
    const char *details =
        strcmp(status, "cancelled") ? "null" : "{\"type\":\"cancelled\",\"reason\":\"client_cancelled\"}";
    pp_jw_raw(jw,
              ",\"response\":{\"object\":\"realtime.response\",\"id\":\"%s\",\"status\":\"%s\","
              "\"status_details\":%s,\"output_modalities\":[\"audio\"],\"audio\":{\"output\":{\"format\":%s,"
              "\"voice\":",
              w->response_id, status, details, wire_format_json(w->format));
    pp_jw_str(jw, w->voice, strlen(w->voice));
    pp_jw_raw(jw, "}}");
    if (with_item) usage(w, jw); /* response.done */
    pp_jw_raw(jw, ",\"output\":[");
    if (with_item) {
        pp_jw_raw(jw,
                  "{\"id\":\"%s\",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"assistant\","
                  "\"status\":\"%s\",\"content\":[{\"type\":\"output_audio\",\"transcript\":",
                  w->item_id, strcmp(status, "completed") ? "incomplete" : "completed");
        pp_jw_str(jw, w->transcript, w->transcript_len);
        pp_jw_raw(jw, "}]}");
    }
    pp_jw_raw(jw, "]}");
}

/* The message item of the current turn: in progress (ended NULL, no content yet) or ended
 * ("completed", "incomplete") with its transcript. */
static void item_object(wire *w, pp_jw *jw, const char *ended) {
    pp_jw_raw(jw,
              ",\"item\":{\"id\":\"%s\",\"object\":\"realtime.item\",\"type\":\"message\",\"role\":\"assistant\","
              "\"status\":\"%s\",\"content\":[",
              w->item_id, ended ? ended : "in_progress");
    if (ended) {
        pp_jw_raw(jw, "{\"type\":\"output_audio\",\"transcript\":");
        pp_jw_str(jw, w->transcript, w->transcript_len);
        pp_jw_raw(jw, "}");
    }
    pp_jw_raw(jw, "]}");
}

/* conversation.item.added / .done: the turn's item joins the conversation after the previous
 * turn's (clients build their history and bracket a response from it: Pipecat starts an
 * assistant response at its conversation.item.added). */
static long conversation_item(wire *w, const char *type, const char *ended) {
    pp_jw jw;
    begin(w, &jw, type);
    if (w->previous_item_id[0])
        pp_jw_raw(&jw, ",\"previous_item_id\":\"%s\"", w->previous_item_id);
    else
        pp_jw_raw(&jw, ",\"previous_item_id\":null");
    item_object(w, &jw, ended);
    return finish(w, &jw);
}

static long turn_open(wire *w) {
    pp_jw jw;
    long n = 0;
    w->turns++;
    w->speaking = 1;
    w->quiet_frames = w->loud_caller_frames = w->cleared = 0;
    w->turn_frames = w->turn_heard = 0;
    w->transcript_len = 0;
    w->transcript_cut = 0;
    if (w->protocol != CONN_REALTIME) return 0;
    conn_set_responding(w->c, 1);
    snprintf(w->previous_item_id, sizeof w->previous_item_id, "%s", w->item_id);
    snprintf(w->response_id, sizeof w->response_id, "resp_%llu_%u", (unsigned long long)conn_id(w->c), w->turns);
    snprintf(w->item_id, sizeof w->item_id, "item_%llu_%u", (unsigned long long)conn_id(w->c), w->turns);
    begin(w, &jw, "response.created");
    response_object(w, &jw, "in_progress", 0);
    n += finish(w, &jw);
    begin(w, &jw, "response.output_item.added");
    pp_jw_raw(&jw, ",\"response_id\":\"%s\",\"output_index\":0", w->response_id);
    item_object(w, &jw, NULL);
    n += finish(w, &jw);
    n += conversation_item(w, "conversation.item.added", NULL);
    begin(w, &jw, "response.content_part.added");
    turn_fields(w, &jw, 1);
    pp_jw_raw(&jw, ",\"part\":{\"type\":\"audio\",\"transcript\":\"\"}");
    return n + finish(w, &jw);
}

/* Ends the open turn: "completed", or "cancelled" when the conversation restarts. */
static long turn_close(wire *w, const char *status) {
    pp_jw jw;
    long n = 0;
    w->speaking = 0;
    if (w->protocol == CONN_TWILIO) {
        begin(w, &jw, "mark");
        pp_jw_raw(&jw, ",\"mark\":{\"name\":\"turn-%u\"}", w->turns);
        return finish(w, &jw);
    }
    if (w->protocol != CONN_REALTIME) return 0;
    conn_set_responding(w->c, 0);
    begin(w, &jw, "response.output_audio.done");
    turn_fields(w, &jw, 1);
    n += finish(w, &jw);
    begin(w, &jw, "response.output_audio_transcript.done");
    turn_fields(w, &jw, 1);
    pp_jw_raw(&jw, ",\"transcript\":");
    pp_jw_str(&jw, w->transcript, w->transcript_len);
    n += finish(w, &jw);
    begin(w, &jw, "response.content_part.done");
    turn_fields(w, &jw, 1);
    pp_jw_raw(&jw, ",\"part\":{\"type\":\"audio\",\"transcript\":");
    pp_jw_str(&jw, w->transcript, w->transcript_len);
    pp_jw_raw(&jw, "}");
    n += finish(w, &jw);
    begin(w, &jw, "response.output_item.done");
    pp_jw_raw(&jw, ",\"response_id\":\"%s\",\"output_index\":0", w->response_id);
    const char *ended = strcmp(status, "completed") ? "incomplete" : "completed";
    item_object(w, &jw, ended);
    n += finish(w, &jw);
    n += conversation_item(w, "conversation.item.done", ended);
    begin(w, &jw, "response.done");
    response_object(w, &jw, status, 1);
    return n + finish(w, &jw);
}

static long transcript_delta(wire *w, const char *piece) {
    char text[PP_UTF8_JOIN_MAX(PP_SESSION_PIECE_MAX)];
    size_t len = pp_utf8_join(&w->carry, piece, strnlen(piece, PP_SESSION_PIECE_MAX), text);
    if (!len) return 0;
    /* The .done events repeat a prefix of the turn's text: a later, shorter piece that would
     * still fit is not appended after one that did not, which would leave a hole. */
    w->transcript_cut |= w->transcript_len + len > sizeof w->transcript;
    if (!w->transcript_cut) {
        memcpy(w->transcript + w->transcript_len, text, len);
        w->transcript_len += len;
    }
    pp_jw jw;
    begin(w, &jw, "response.output_audio_transcript.delta");
    turn_fields(w, &jw, 1);
    pp_jw_raw(&jw, ",\"delta\":");
    pp_jw_str(&jw, text, len);
    return finish(w, &jw);
}

/* The frame in the output format as base64 into b64 (cap bytes). */
static int encode_audio(wire *w, const float *pcm, char *b64, size_t cap) {
    size_t n = 0;
    if (w->format == AUDIO_PCM16) {
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
            int16_t s = pp_pcm16_sample(pcm[i]);
            ((uint8_t *)w->json)[n++] = (uint8_t)(s & 0xFF); /* little-endian, staged in json */
            ((uint8_t *)w->json)[n++] = (uint8_t)((uint16_t)s >> 8);
        }
    } else {
        float tel[TELEPHONE_SAMPLES];
        int m = pp_resampler_process(w->to_8k, pcm, PP_FRAME_SAMPLES, tel, TELEPHONE_SAMPLES);
        for (int i = 0; i < m; i++) {
            int16_t s = pp_pcm16_sample(tel[i]);
            ((uint8_t *)w->json)[n++] = w->format == AUDIO_ULAW ? pp_ulaw_encode(s) : pp_alaw_encode(s);
        }
    }
    return pp_base64_encode((const uint8_t *)w->json, n, b64, cap) < 0 ? -1 : 0;
}

static float rms(const float *pcm) { return (float)sqrt(pp_frame_energy(pcm) / PP_FRAME_SAMPLES); }

static long json_frame(wire *w, const float *pcm_in, int from_client, const float *pcm_out, const char *piece,
                       char *err) {
    long n = 0;
    int speech = piece[0] || rms(pcm_out) > SPEECH_RMS;
    if (speech && !w->speaking) n += turn_open(w);
    char b64[PP_BASE64_LEN(2 * PP_FRAME_SAMPLES) + 1];
    if ((w->speaking || w->protocol == CONN_TWILIO) && encode_audio(w, pcm_out, b64, sizeof b64))
        return pp_fail(err, PP_EFULL, "audio frame does not fit its message");
    pp_jw jw;
    if (w->protocol == CONN_TWILIO) {
        begin(w, &jw, "media");
        pp_jw_raw(&jw, ",\"media\":{\"payload\":\"%s\"}", b64);
        n += finish(w, &jw);
        /* The caller talks over the turn: Twilio should drop what it still plays of it. */
        w->loud_caller_frames = from_client && rms(pcm_in) > CALLER_RMS ? w->loud_caller_frames + 1 : 0;
        if (w->speaking && !w->cleared && w->loud_caller_frames >= BARGE_IN_FRAMES) {
            begin(w, &jw, "clear");
            n += finish(w, &jw);
            w->cleared = 1;
        }
    } else if (w->speaking) {
        if (piece[0]) n += transcript_delta(w, piece);
        begin(w, &jw, "response.output_audio.delta");
        turn_fields(w, &jw, 1);
        pp_jw_raw(&jw, ",\"delta\":\"%s\"", b64);
        n += finish(w, &jw);
        w->turn_frames++;
        w->turn_heard += from_client != 0;
    }
    if (w->speaking) {
        w->quiet_frames = speech ? 0 : w->quiet_frames + 1;
        if (w->quiet_frames >= TURN_END_FRAMES) n += turn_close(w, "completed");
    }
    return n;
}

long wire_ready(wire *w, char *err) {
    if (w->protocol != CONN_CHAT) return 0;
    long n = send_chat(w, MSG_HANDSHAKE, NULL, 0);
    for (int i = 0; i < 2; i++) {
        size_t len;
        int rc = pp_downlink_header(w->down, i, w->bytes, sizeof w->bytes, &len, err);
        if (rc) return rc;
        n += send_chat(w, MSG_AUDIO, w->bytes, len);
    }
    return n;
}

long wire_frame(wire *w, const float *pcm_in, int from_client, const float *pcm_out, const char *piece, char *err) {
    if (w->protocol != CONN_CHAT) return json_frame(w, pcm_in, from_client, pcm_out, piece, err);
    size_t len;
    int rc = pp_downlink_encode(w->down, pcm_out, w->bytes, sizeof w->bytes, &len, err);
    if (rc) return rc;
    /* Text first: the reference sends a frame's piece just before its audio page. */
    long n = piece[0] ? send_chat(w, MSG_TEXT, piece, strlen(piece)) : 0;
    return n + send_chat(w, MSG_AUDIO, w->bytes, len);
}

long wire_restart(wire *w, const pp_session_params *params) {
    long n = w->speaking ? turn_close(w, "cancelled") : 0;
    w->carry.len = 0;
    snprintf(w->voice, sizeof w->voice, "%s", params->voice);
    return n;
}

int wire_frame_cost(double *ms, char *err) {
    enum { FRAMES = WARM_FRAMES + COST_FRAMES };
    *ms = 0;
    float *pcm = malloc(FRAMES * PP_FRAME_SAMPLES * sizeof *pcm);
    if (!pcm) return pp_fail(err, PP_ENOMEM, "wire: out of memory for the encoding cost's frames");
    /* A 140 Hz voice with harmonics, its level swinging, over noise: Opus spends on it what it
     * spends on speech (silence would cost it less). */
    const double w = 2 * 3.14159265358979 / PP_SAMPLE_RATE; /* radians per sample at 1 Hz */
    uint64_t seed = 1;
    for (int i = 0; i < FRAMES * PP_FRAME_SAMPLES; i++) {
        double noise = pp_splitmix64_unit(&seed) - 0.5;
        double voice = sin(140 * w * i) + 0.5 * sin(280 * w * i) + 0.25 * sin(420 * w * i);
        pcm[i] = (float)(0.2 * (0.6 + 0.4 * sin(3 * w * i)) * voice + 0.02 * noise);
    }
    pp_downlink *d;
    int rc = pp_downlink_open(&d, 0, err);
    uint8_t page[PP_DOWNLINK_MAX_PAGE];
    double t0 = 0;
    for (int f = 0; f < FRAMES && !rc; f++) {
        if (f == WARM_FRAMES) t0 = pp_now_ms();
        size_t len;
        rc = pp_downlink_encode(d, pcm + (size_t)f * PP_FRAME_SAMPLES, page, sizeof page, &len, err);
    }
    if (!rc) *ms = (pp_now_ms() - t0) / COST_FRAMES;
    if (d) pp_downlink_close(d);
    free(pcm);
    return rc;
}
