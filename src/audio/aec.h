/* aec: acoustic echo cancellation of the uplink against the downlink, a C API over WebRTC's
 * audio processing module (Debian's libwebrtc-audio-processing, the project's second C++).
 *
 * A listener on speakers sends the model's own voice back through the microphone, delayed by
 * the network, the client's jitter buffer and the room. The server knows exactly what it sent:
 * pp_aec_far takes each downlink frame as it goes out, pp_aec_near removes its echo from each
 * uplink frame in place. Both are 24 kHz mono; the module works in 10 ms chunks, and every
 * near chunk is preceded by one far chunk (or silence when none is queued), which keeps the two
 * streams in step at real-time pace. The echo's delay is found in two steps: a coarse search
 * here (the uplink's level envelope against the downlink's at lags up to PP_AEC_MAX_DELAY_MS,
 * in 10 ms steps) takes the reference back by all but a few chunks of it, and the module's
 * delay-agnostic estimator and extended filter find the rest and the room's response.
 *
 * Built without the library, pp_aec_available is 0 and pp_aec_create fails with
 * PP_EUNSUPPORTED. Every entry point catches C++ exceptions. One pp_aec per conversation;
 * not shared between threads. */
#ifndef PP_AUDIO_AEC_H
#define PP_AUDIO_AEC_H

#include <stddef.h>

#include "base/frame.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Downlink queued ahead of the uplink before the oldest is dropped (a client that stops
 * sending while the model talks). */
#define PP_AEC_FAR_MAX_MS 1000
/* The longest echo delay (network, jitter buffer, room) the coarse delay search covers. */
#define PP_AEC_MAX_DELAY_MS 600

typedef struct pp_aec pp_aec;

int pp_aec_available(void);
int pp_aec_create(pp_aec **out, char *err);
void pp_aec_destroy(pp_aec *a);
/* Downlink audio as sent; n samples, any n. */
int pp_aec_far(pp_aec *a, const float *pcm, size_t n, char *err);
/* Uplink audio in place; n a multiple of 240 (10 ms). */
int pp_aec_near(pp_aec *a, float *pcm, size_t n, char *err);

#ifdef __cplusplus
}
#endif

#endif
