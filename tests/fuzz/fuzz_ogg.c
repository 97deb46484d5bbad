/* fuzz_ogg: the Ogg reader is split-invariant and bounded. Byte 0 picks a chunk size; the
 * rest is fed once whole and once in chunks, and both runs must deliver the same packets
 * (hashed), the same error count and the same final state, with every packet within the
 * packet limit, the errors within the budget (the burst plus one per error_forgive_pages good
 * pages) and each run of skipped garbage (one error each) within the skip limit plus one buffer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "audio/ogg.h"
#include "base/err.h"
#include "base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    uint64_t hash, count;
    size_t max_packet;
} digest;

static int on_packet(void *user, const pp_ogg_packet *pkt, char *err) {
    (void)err;
    digest *d = user;
    if (pkt->len > d->max_packet || (pkt->len && !pkt->data) ||
        (pkt->truncated && (pkt->len != d->max_packet || pkt->packetno >= 2)))
        abort();
    uint64_t h = d->hash ^ (pkt->len * 0x9e3779b97f4a7c15ull) ^ (uint64_t)pkt->granule ^
                 ((uint64_t)pkt->bos << 1) ^ ((uint64_t)pkt->eos << 2) ^ ((uint64_t)pkt->gap << 3) ^
                 ((uint64_t)pkt->truncated << 4);
    for (size_t i = 0; i < pkt->len; i++) h = (h ^ pkt->data[i]) * 0x100000001b3ull;
    d->hash = h;
    d->count++;
    return 0;
}

static int run(const uint8_t *data, size_t size, size_t chunk, const pp_ogg_limits *lim,
               digest *d, pp_ogg_stats *st) {
    char err[PP_ERR_LEN];
    pp_ogg_reader *r;
    if (pp_ogg_reader_open(&r, lim, err)) abort();
    int rc = 0;
    for (size_t at = 0; at < size && rc == 0; at += chunk) {
        size_t n = size - at < chunk ? size - at : chunk;
        rc = pp_ogg_reader_feed(r, data + at, n, on_packet, d, err);
    }
    *st = pp_ogg_reader_stats(r);
    if (rc && pp_ogg_reader_feed(r, data, size, on_packet, d, err) != PP_EFORMAT) abort();
    pp_ogg_reader_close(r);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    pp_log_set_level(PP_LOG_ERROR);
    size_t chunk = 1 + data[0] % 64 * 7;
    pp_ogg_limits lim = {.max_packet = 4096, .max_errors = 8, .error_forgive_pages = 4, .max_skip = 8192,
                         .header_packets = 2};
    digest a = {.max_packet = lim.max_packet}, b = a;
    pp_ogg_stats sa, sb;
    int ra = run(data + 1, size - 1, size, &lim, &a, &sa);
    int rb = run(data + 1, size - 1, chunk, &lim, &b, &sb);
    if (ra != rb || a.hash != b.hash || a.count != b.count || sa.errors != sb.errors ||
        sa.pages != sb.pages)
        abort();
    uint64_t errors_allowed = (uint64_t)lim.max_errors + 1 + sa.pages / lim.error_forgive_pages;
    if ((uint64_t)sa.errors > errors_allowed ||
        sa.skipped > (uint64_t)sa.errors * (lim.max_skip + PP_OGG_MAX_PAGE))
        abort();
    return 0;
}
