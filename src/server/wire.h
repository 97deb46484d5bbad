/* wire: how one conversation's output looks on its socket (engine thread). The engine hands it
 * the model's frames; the wire formats them for the conn's protocol and queues them.
 *
 * chat (/api/chat, docs/protocol.md §2): when the prompts are done, the handshake and the two
 * Ogg Opus header pages; then per 80 ms frame the text piece (0x02) and one Ogg page (0x01).
 *
 * realtime (/v1/realtime, docs/protocol.md §4): OpenAI Realtime server events. The model talks
 * in turns inside a continuous stream. A turn opens when an output frame carries speech (RMS
 * over SPEECH_RMS, or a text piece) and closes after TURN_END_FRAMES frames without: at the
 * open, response.created, response.output_item.added, conversation.item.added (after the
 * previous turn's item) and response.content_part.added; per frame of the turn,
 * response.output_audio.delta (the session's output format) and
 * response.output_audio_transcript.delta (valid UTF-8: a piece that ends inside a character
 * waits for the rest); at the close, the .done events (conversation.item.done among them) and
 * response.done. Outside turns nothing is sent. (No output_audio_buffer.* events: OpenAI sends
 * those over WebRTC and SIP only, and clients that parse events strictly, Pipecat's, end their
 * receive loop on a type they lack.)
 *
 * twilio (/v1/twilio, docs/protocol.md §5): every frame as a `media` message (μ-law, 8 kHz), a
 * `mark` named "turn-N" when a turn ends, and `clear` when the caller talks over a turn
 * (CALLER_RMS in BARGE_IN_FRAMES uplink frames in a row), so that Twilio drops the audio it
 * still buffers. */
#ifndef PP_SERVER_WIRE_H
#define PP_SERVER_WIRE_H

#include "server/conn.h"

typedef struct wire wire;

/* params: the conversation's settings (the realtime response objects name the voice). */
int wire_open(conn *c, const pp_session_params *params, wire **out, char *err);
void wire_close(wire *w);
/* The prompts are done. Returns the bytes queued, or < 0 with err set. */
long wire_ready(wire *w, char *err);
/* One 80 ms frame out: pcm_out and its text piece ("" for none); pcm_in is the uplink frame of
 * the same tick (from_client 0: silence the server filled in). Returns the bytes queued, or
 * < 0 with err set. */
long wire_frame(wire *w, const float *pcm_in, int from_client, const float *pcm_out, const char *piece, char *err);
/* The conversation restarts from its prompts with params: an open turn ends as cancelled.
 * Returns the bytes queued. */
long wire_restart(wire *w, const pp_session_params *params);
/* What one conversation's frame costs the host in its wire, measured on this thread: the chat
 * protocol's Opus encoding of a voiced, noisy frame (the dearest of the formats; μ-law and PCM
 * cost a fraction of it). *ms gets the mean of a few frames after two seconds of them: what a
 * running conversation's frame costs. */
int wire_frame_cost(double *ms, char *err);
/* A realtime session's audio format object ({"type":"audio/pcm","rate":24000}, ...). */
const char *wire_format_json(audio_format f);

#endif
