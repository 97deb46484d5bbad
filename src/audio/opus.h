/* opus: the server's two audio pipes over libopus and the Ogg layer (docs/protocol.md §2).
 *
 * pp_uplink: payloads of 0x01 messages in (any split), exact 1920-sample 24 kHz mono float
 * frames out. It demultiplexes Ogg, skips OpusHead/OpusTags packets (a new OpusHead resets
 * the decoder; tags of any size, cover art included, cost no error), applies the pre-skip, conceals lost or undecodable packets with libopus's
 * packet-loss concealment, and buffers at most max_buffered samples (oldest dropped first,
 * counted). The Ogg reader's fault budget is clocked by the audio decoded: one fault forgiven per
 * PP_UPLINK_FORGIVE_S seconds, whatever the encoder's page duration.
 *
 * pp_downlink: 1920-sample frames in, one Ogg page per frame out (one 80 ms Opus packet,
 * VOIP application, mono 24 kHz). Pages 0 and 1 are OpusHead (19 bytes: version 1, 1
 * channel, pre-skip 3840, input rate 24000, gain 0, mapping 0; one lacing value, so the
 * browser finds the channel count at page offset 37) and OpusTags (vendor
 * "personaplex-server"). Granule positions are in 48 kHz units as RFC 7845 says (sphn
 * writes 24 kHz counts, but no client reads them). */
#ifndef PP_AUDIO_OPUS_H
#define PP_AUDIO_OPUS_H

#include <stddef.h>
#include <stdint.h>

#include "audio/ogg.h"
#include "base/frame.h"

#define PP_OPUS_MAX_PACKET 4000     /* the browser decoder's packet buffer */
#define PP_DOWNLINK_MAX_PAGE 4096   /* >= 27 + 16 lacing values + PP_OPUS_MAX_PACKET */
#define PP_DOWNLINK_SERIAL 42u      /* what sphn and the Rust servers use */
#define PP_DOWNLINK_PRESKIP 3840    /* 48 kHz units, as sphn writes */
/* Seconds of decoded uplink audio that forgive one Ogg fault (docs/protocol.md §2.2). */
#define PP_UPLINK_FORGIVE_S 5

/* ---- uplink ---- */

typedef struct pp_uplink pp_uplink;

typedef struct pp_uplink_stats {
    pp_ogg_stats ogg;
    uint64_t packets;   /* Opus audio packets decoded */
    uint64_t concealed; /* packets replaced by loss concealment */
    uint64_t dropped;   /* samples dropped because the buffer was full */
    uint64_t samples;   /* samples decoded (after pre-skip) */
} pp_uplink_stats;

/* max_buffered: samples held before the oldest are dropped (0: 10 s). */
int pp_uplink_open(pp_uplink **out, size_t max_buffered, char *err);
void pp_uplink_close(pp_uplink *u);
/* Feeds one 0x01 payload (or any piece of the byte stream). 0, or a negative code once the
 * Ogg stream has failed for good (err says why). */
int pp_uplink_push(pp_uplink *u, const uint8_t *data, size_t len, char *err);
/* Appends n decoded samples (24 kHz) that came some other way than Ogg Opus. */
void pp_uplink_push_pcm(pp_uplink *u, const float *pcm, size_t n);
/* Copies the next frame into pcm and returns 1, or returns 0 if fewer than
 * PP_FRAME_SAMPLES samples are buffered. */
int pp_uplink_frame(pp_uplink *u, float pcm[PP_FRAME_SAMPLES]);
size_t pp_uplink_buffered(const pp_uplink *u);
pp_uplink_stats pp_uplink_get_stats(const pp_uplink *u);

/* ---- downlink ---- */

typedef struct pp_downlink pp_downlink;

/* bitrate in bit/s, or 0 for libopus's automatic choice. */
int pp_downlink_open(pp_downlink **out, int bitrate, char *err);
void pp_downlink_close(pp_downlink *d);
/* Page `index` of the stream header: 0 = OpusHead page, 1 = OpusTags page. Send each as its
 * own 0x01 message before the first audio page. Sets *len; PP_EFULL if cap is too small. */
int pp_downlink_header(const pp_downlink *d, int index, uint8_t *out, size_t cap, size_t *len,
                       char *err);
/* Encodes one frame into one page (sequence 2, 3, ...) written to out; cap >=
 * PP_DOWNLINK_MAX_PAGE always suffices. Sets *len. */
int pp_downlink_encode(pp_downlink *d, const float pcm[PP_FRAME_SAMPLES], uint8_t *out, size_t cap, size_t *len,
                       char *err);

#endif
