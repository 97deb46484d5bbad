/* opus: uplink decoder and downlink encoder (see opus.h). */
#include "audio/opus.h"

#include <math.h>
#include <opus.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

#define MAX_DECODE 2880     /* 120 ms at 24 kHz: the longest Opus packet */
#define DEFAULT_BUFFERED (10 * PP_SAMPLE_RATE)
#define OPUS_HEAD_LEN 19
#define VENDOR "personaplex-server"

/* ---- uplink ---- */

struct pp_uplink {
    pp_ogg_reader *ogg;
    OpusDecoder *dec;
    float *fifo; /* ring of cap samples: count of them from head */
    size_t cap, head, count;
    float scratch[MAX_DECODE];
    int have_head;   /* an OpusHead was seen on the current stream */
    int preskip;     /* 24 kHz samples still to discard */
    int overflowing; /* dropping since the last frame was taken: warn once per episode */
    int last_frames; /* duration of the latest packet, used to size concealment */
    /* The timeline: the latest page granule (48 kHz, pre-skip included; -1 before a header) and
     * what was decoded or concealed since, at 24 kHz. After lost data the next granule says how
     * much was lost beyond the packet concealed at the gap. */
    int64_t granule;
    int64_t since_granule;
    int gap_open;
    pp_uplink_stats st;
};

static void fifo_push(pp_uplink *u, const float *x, size_t n) {
    if (n > u->cap) { /* keep only the newest cap samples */
        u->st.dropped += n - u->cap;
        x += n - u->cap;
        n = u->cap;
    }
    size_t room = u->cap - u->count;
    if (n > room) {
        size_t drop = n - room;
        u->head = (u->head + drop) % u->cap;
        u->count -= drop;
        u->st.dropped += drop;
        if (!u->overflowing)
            PP_WARN("opus", "uplink buffer full (%zu samples): dropping the oldest", u->cap);
        u->overflowing = 1;
    }
    size_t tail = (u->head + u->count) % u->cap, first = u->cap - tail;
    if (first > n) first = n;
    memcpy(u->fifo + tail, x, first * sizeof *x);
    memcpy(u->fifo, x + first, (n - first) * sizeof *x);
    u->count += n;
}

/* Adds n decoded samples, minus what the pre-skip still swallows. */
static void take_decoded(pp_uplink *u, const float *x, int n) {
    u->since_granule += n;
    int skip = n < u->preskip ? n : u->preskip;
    u->preskip -= skip;
    u->st.samples += (uint64_t)(n - skip);
    fifo_push(u, x + skip, (size_t)(n - skip));
}

/* Fills `samples` of lost audio (24 kHz, a multiple of 2.5 ms) with libopus's concealment, at
 * most a packet's longest duration a call. */
static void conceal(pp_uplink *u, int64_t samples) {
    while (samples > 0) {
        int len = samples < MAX_DECODE ? (int)samples : MAX_DECODE;
        int n = opus_decode_float(u->dec, NULL, 0, u->scratch, len, 0);
        if (n <= 0) break;
        take_decoded(u, u->scratch, n);
        u->st.concealed++;
        samples -= n;
    }
}

/* A page's granule ends pkt: after a gap, the time its lost pages held beyond what was concealed
 * at the gap is concealed now (a page late, but the timeline stays whole: the model hears as much
 * time as the client sent), at most GAP_MAX. The end of a stream (EOS) trims what the last
 * packet decoded past the granule (RFC 7845 §4). */
#define GAP_MAX PP_SAMPLE_RATE
static void granule_reached(pp_uplink *u, const pp_ogg_packet *pkt) {
    if (u->granule >= 0) {
        int64_t behind = pkt->granule / 2 - (u->granule / 2 + u->since_granule);
        if (u->gap_open && behind > 0) conceal(u, (behind < GAP_MAX ? behind : GAP_MAX) / 60 * 60);
        if (pkt->eos && behind < 0 && (size_t)-behind <= u->count) {
            u->count -= (size_t)-behind;
            u->st.samples -= (uint64_t)-behind;
        }
    }
    u->granule = pkt->granule;
    u->since_granule = 0;
    u->gap_open = 0;
}

static int read_opus_head(pp_uplink *u, const pp_ogg_packet *pkt, char *err) {
    const uint8_t *p = pkt->data;
    /* RFC 7845: a major version other than 0 (version >= 16) is incompatible. */
    if (pkt->len < OPUS_HEAD_LEN || p[8] >= 16 || p[9] == 0)
        return pp_fail(err, PP_EFORMAT, "opus: bad OpusHead on serial %u (%zu bytes, version %d, "
                       "%d channels)", pkt->serial, pkt->len, pkt->len > 9 ? p[8] : -1,
                       pkt->len > 9 ? p[9] : -1);
    /* The decoder is one Opus stream: mapping family 0 (mono or stereo) only. */
    if (p[18] != 0 || p[9] > 2)
        return pp_fail(err, PP_EFORMAT, "opus: serial %u has channel mapping family %d with %d channels: only mono "
                       "or stereo streams (family 0) are taken", pkt->serial, p[18], p[9]);
    int preskip48 = p[10] | p[11] << 8;
    int16_t gain = (int16_t)(p[16] | p[17] << 8);
    opus_decoder_ctl(u->dec, OPUS_RESET_STATE);
    opus_decoder_ctl(u->dec, OPUS_SET_GAIN(gain));
    u->preskip = preskip48 * PP_SAMPLE_RATE / 48000;
    u->have_head = 1;
    u->granule = 0;
    u->since_granule = 0;
    u->gap_open = 0;
    return 0;
}

static int on_packet(void *user, const pp_ogg_packet *pkt, char *err) {
    pp_uplink *u = user;
    if (pkt->len >= 8 && memcmp(pkt->data, "OpusHead", 8) == 0) return read_opus_head(u, pkt, err);
    if (pkt->bos)
        return pp_fail(err, PP_EFORMAT, "opus: serial %u does not start with OpusHead", pkt->serial);
    if (pkt->len >= 8 && memcmp(pkt->data, "OpusTags", 8) == 0) return 0;
    if (pkt->gap) {
        conceal(u, u->last_frames);
        u->gap_open = 1;
    }
    int n = pkt->len && !pkt->truncated ? opus_decode_float(u->dec, pkt->data, (opus_int32)pkt->len, u->scratch,
                                         MAX_DECODE, 0)
                     : OPUS_BAD_ARG;
    if (n < 0) {
        PP_DEBUG("opus", "undecodable packet %llu (%zu bytes): %s", (unsigned long long)pkt->packetno,
                 pkt->len, opus_strerror(n));
        conceal(u, u->last_frames);
    } else {
        u->last_frames = n;
        u->st.packets++;
        pp_ogg_reader_add_progress(u->ogg, (uint64_t)n); /* good audio forgives Ogg faults */
        take_decoded(u, u->scratch, n);
    }
    if (pkt->granule >= 0) granule_reached(u, pkt);
    return 0;
}

int pp_uplink_open(pp_uplink **out, size_t max_buffered, char *err) {
    *out = NULL;
    if (max_buffered == 0) max_buffered = DEFAULT_BUFFERED;
    if (max_buffered < PP_FRAME_SAMPLES)
        return pp_fail(err, PP_EINVAL, "opus: uplink buffer of %zu samples is under one frame",
                       max_buffered);
    pp_uplink *u = calloc(1, sizeof *u);
    if (!u) return pp_fail(err, PP_ENOMEM, "opus: out of memory for the uplink");
    pp_ogg_limits lim = pp_ogg_limits_default();
    lim.header_packets = 2; /* OpusHead, OpusTags: tags of any size are skipped without error */
    lim.error_forgive_progress = (uint64_t)PP_UPLINK_FORGIVE_S * PP_SAMPLE_RATE; /* in decoded samples */
    int rc = pp_ogg_reader_open(&u->ogg, &lim, err);
    if (rc < 0) {
        pp_uplink_close(u);
        return rc;
    }
    int oerr = 0;
    u->dec = opus_decoder_create(PP_SAMPLE_RATE, 1, &oerr);
    u->fifo = malloc(max_buffered * sizeof *u->fifo);
    if (!u->dec || !u->fifo) {
        pp_uplink_close(u);
        return pp_fail(err, PP_ENOMEM, "opus: cannot create the uplink decoder: %s",
                       oerr ? opus_strerror(oerr) : "out of memory");
    }
    u->cap = max_buffered;
    u->last_frames = PP_SAMPLE_RATE / 50; /* 20 ms, the browser's packet size */
    u->granule = -1;
    *out = u;
    return 0;
}

void pp_uplink_close(pp_uplink *u) {
    if (!u) return;
    pp_ogg_reader_close(u->ogg);
    if (u->dec) opus_decoder_destroy(u->dec);
    free(u->fifo);
    free(u);
}

int pp_uplink_push(pp_uplink *u, const uint8_t *data, size_t len, char *err) {
    return pp_ogg_reader_feed(u->ogg, data, len, on_packet, u, err);
}

void pp_uplink_push_pcm(pp_uplink *u, const float *pcm, size_t n) {
    u->st.samples += n;
    fifo_push(u, pcm, n);
}

int pp_uplink_frame(pp_uplink *u, float pcm[PP_FRAME_SAMPLES]) {
    if (u->count < PP_FRAME_SAMPLES) return 0;
    u->overflowing = 0;
    size_t first = u->cap - u->head;
    if (first > PP_FRAME_SAMPLES) first = PP_FRAME_SAMPLES;
    memcpy(pcm, u->fifo + u->head, first * sizeof *pcm);
    memcpy(pcm + first, u->fifo, (PP_FRAME_SAMPLES - first) * sizeof *pcm);
    u->head = (u->head + PP_FRAME_SAMPLES) % u->cap;
    u->count -= PP_FRAME_SAMPLES;
    return 1;
}

size_t pp_uplink_buffered(const pp_uplink *u) { return u->count; }

pp_uplink_stats pp_uplink_get_stats(const pp_uplink *u) {
    pp_uplink_stats s = u->st;
    s.ogg = pp_ogg_reader_stats(u->ogg);
    return s;
}

/* ---- downlink ---- */

struct pp_downlink {
    OpusEncoder *enc;
    pp_ogg_writer w;
    int64_t granule; /* 48 kHz samples encoded so far */
    uint8_t header[2][64];
    size_t header_len[2];
    uint8_t packet[PP_OPUS_MAX_PACKET];
    float pcm[PP_FRAME_SAMPLES];
};

static void put_le(uint8_t *p, uint32_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes the OpusHead and OpusTags pages (sequence 0 and 1, granule 0). */
static int write_headers(pp_downlink *d, char *err) {
    uint8_t head[OPUS_HEAD_LEN] = "OpusHead";
    head[8] = 1; /* version */
    head[9] = 1; /* channels */
    put_le(head + 10, PP_DOWNLINK_PRESKIP, 2);
    put_le(head + 12, PP_SAMPLE_RATE, 4);
    /* gain (16..17) and mapping family (18) stay 0 */
    uint8_t tags[8 + 4 + sizeof VENDOR - 1 + 4] = "OpusTags";
    put_le(tags + 8, sizeof VENDOR - 1, 4);
    memcpy(tags + 12, VENDOR, sizeof VENDOR - 1); /* the comment count after it stays 0 */
    int rc = pp_ogg_writer_page(&d->w, head, sizeof head, 0, 0, d->header[0],
                                sizeof d->header[0], &d->header_len[0], err);
    if (rc == 0)
        rc = pp_ogg_writer_page(&d->w, tags, sizeof tags, 0, 0, d->header[1],
                                sizeof d->header[1], &d->header_len[1], err);
    return rc;
}

int pp_downlink_open(pp_downlink **out, int bitrate, char *err) {
    *out = NULL;
    if (bitrate < 0 || (bitrate > 0 && (bitrate < 500 || bitrate > 512000)))
        return pp_fail(err, PP_EINVAL, "opus: downlink bitrate %d outside 500..512000 (0 = auto)",
                       bitrate);
    pp_downlink *d = calloc(1, sizeof *d);
    if (!d) return pp_fail(err, PP_ENOMEM, "opus: out of memory for the downlink");
    int oerr = 0;
    d->enc = opus_encoder_create(PP_SAMPLE_RATE, 1, OPUS_APPLICATION_VOIP, &oerr);
    if (!d->enc) {
        free(d);
        return pp_fail(err, PP_ENOMEM, "opus: cannot create the downlink encoder: %s",
                       opus_strerror(oerr));
    }
    if (bitrate > 0) opus_encoder_ctl(d->enc, OPUS_SET_BITRATE(bitrate));
    pp_ogg_writer_init(&d->w, PP_DOWNLINK_SERIAL);
    int rc = write_headers(d, err);
    if (rc < 0) {
        pp_downlink_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void pp_downlink_close(pp_downlink *d) {
    if (!d) return;
    opus_encoder_destroy(d->enc);
    free(d);
}

int pp_downlink_header(const pp_downlink *d, int index, uint8_t *out, size_t cap, size_t *len,
                       char *err) {
    *len = 0;
    if (index != 0 && index != 1)
        return pp_fail(err, PP_EINVAL, "opus: header page index %d (0 or 1)", index);
    if (cap < d->header_len[index])
        return pp_fail(err, PP_EFULL, "opus: header page of %zu bytes does not fit %zu bytes",
                       d->header_len[index], cap);
    memcpy(out, d->header[index], d->header_len[index]);
    *len = d->header_len[index];
    return 0;
}

int pp_downlink_encode(pp_downlink *d, const float pcm[PP_FRAME_SAMPLES], uint8_t *out, size_t cap, size_t *len,
                       char *err) {
    *len = 0;
    /* A non-finite sample from the model must not reach the encoder. */
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) d->pcm[i] = isfinite(pcm[i]) ? pcm[i] : 0.0f;
    int n = opus_encode_float(d->enc, d->pcm, PP_FRAME_SAMPLES, d->packet, sizeof d->packet);
    if (n < 0) return pp_fail(err, PP_EINVAL, "opus: encode failed: %s", opus_strerror(n));
    d->granule += PP_FRAME_SAMPLES * (48000 / PP_SAMPLE_RATE);
    return pp_ogg_writer_page(&d->w, d->packet, (size_t)n, d->granule, 0, out, cap, len, err);
}
