/* fuzz_opus: arbitrary Opus packets behind a valid Ogg layer. fuzz_uplink's byte streams
 * rarely get a page CRC right, so libopus and the uplink's packet handling (pre-skip, a new
 * OpusHead mid-stream, loss concealment of undecodable packets, the buffer cap) are reached
 * here: the input is a list of packets, each a length byte and that many bytes, and every
 * packet goes out as one correct Ogg page. Byte 0 picks whether the fuzzer's first packet
 * replaces the standard OpusHead and whether frames are taken as they come. Only whole
 * frames of finite samples may come out, never more buffered audio than the cap. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "audio/ogg.h"
#include "audio/opus.h"
#include "base/err.h"
#include "base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP (4 * PP_FRAME_SAMPLES)

static const uint8_t g_head[19] = {'O', 'p', 'u', 's', 'H', 'e', 'a', 'd', 1, 1, 0x00, 0x0f, 0xc0, 0x5d, 0, 0, 0, 0, 0};

/* Writes packet as the next page and pushes it; nonzero once the uplink refuses for good. */
static int push_packet(pp_uplink *u, pp_ogg_writer *w, const uint8_t *pkt, size_t len, int64_t granule) {
    static uint8_t page[27 + 2 + 512];
    size_t page_len;
    char err[PP_ERR_LEN];
    if (pp_ogg_writer_page(w, pkt, len, granule, 0, page, sizeof page, &page_len, err)) abort();
    return pp_uplink_push(u, page, page_len, err);
}

static void drain(pp_uplink *u) {
    static float frame[PP_FRAME_SAMPLES];
    while (pp_uplink_frame(u, frame))
        for (int i = 0; i < PP_FRAME_SAMPLES; i++)
            if (!isfinite(frame[i])) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    if (size < 1) return 0;
    int own_head = data[0] & 1, keep = data[0] & 2;
    char err[PP_ERR_LEN];
    pp_uplink *u;
    if (pp_uplink_open(&u, CAP, err)) abort();
    pp_ogg_writer w;
    pp_ogg_writer_init(&w, 7);
    static const uint8_t tags[16] = {'O', 'p', 'u', 's', 'T', 'a', 'g', 's', 0, 0, 0, 0, 0, 0, 0, 0};
    int rc = own_head ? 0 : push_packet(u, &w, g_head, sizeof g_head, 0);
    if (!rc && !own_head) rc = push_packet(u, &w, tags, sizeof tags, 0);
    int64_t granule = 0;
    for (size_t at = 1; !rc && at < size;) {
        size_t len = data[at++];
        if (len > size - at) len = size - at;
        granule += 3840;
        rc = push_packet(u, &w, data + at, len, granule);
        at += len;
        if (pp_uplink_buffered(u) > CAP) abort();
        if (!keep) drain(u);
    }
    drain(u);
    pp_uplink_close(u);
    return 0;
}
