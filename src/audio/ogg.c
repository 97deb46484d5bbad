/* ogg: streaming demultiplexer and page writer (see ogg.h). */
#include "audio/ogg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/fault_budget.h"
#include "base/log.h"

#define HEADER_LEN 27
#define CAPTURE "OggS"

/* ---- CRC ---- */

/* Nibble table of the Ogg CRC (0x04c11db7, MSB first): small enough to keep as a literal. */
static const uint32_t crc_nibble[16] = {
    0x00000000, 0x04c11db7, 0x09823b6e, 0x0d4326d9, 0x130476dc, 0x17c56b6b,
    0x1a864db2, 0x1e475005, 0x2608edb8, 0x22c9f00f, 0x2f8ad6d6, 0x2b4bcb61,
    0x350c9b64, 0x31cd86d3, 0x3c8ea00a, 0x384fbdbd,
};

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        crc = (crc << 4) ^ crc_nibble[(crc >> 28) ^ (p[i] >> 4)];
        crc = (crc << 4) ^ crc_nibble[(crc >> 28) ^ (p[i] & 15)];
    }
    return crc;
}

uint32_t pp_ogg_crc(const uint8_t *data, size_t n) { return crc_update(0, data, n); }

/* CRC of a whole page with its checksum field (bytes 22..25) read as zero. */
static uint32_t page_crc(const uint8_t *page, size_t len) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    uint32_t crc = crc_update(0, page, 22);
    crc = crc_update(crc, zero, 4);
    return crc_update(crc, page + 26, len - 26);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- reader ---- */

struct pp_ogg_reader {
    pp_ogg_limits lim;
    uint8_t *buf; /* PP_OGG_MAX_PAGE bytes: unparsed input, [pos, have) */
    size_t pos, have;
    uint8_t *pkt; /* max_packet bytes: the packet being assembled */
    size_t pkt_len;
    int pkt_open;     /* a packet continues onto the next page */
    int pkt_too_long; /* the open packet passed max_packet: its bytes are being discarded */
    int pkt_truncated; /* the open header packet passed max_packet: its tail is being discarded */
    int have_stream, ended, gap, in_garbage, failed;
    uint32_t serial, next_seq;
    /* A second BOS page on the current serial, held until the next page of the serial says
     * whether the stream restarted (it continues from the held page) or the page was a
     * duplicate (it continues the old sequence). */
    uint8_t *held; /* PP_OGG_MAX_PAGE bytes, allocated on first use */
    size_t held_len;
    uint32_t held_seq;
    uint64_t packetno;
    pp_fault_budget budget; /* recoverable errors, clocked by budget_clock() */
    uint64_t progress;      /* reported by the owner (pp_ogg_reader_add_progress) */
    uint64_t run_skipped;   /* garbage bytes skipped since the latest good page */
    pp_ogg_stats st;
    char last[PP_ERR_LEN];
};

pp_ogg_limits pp_ogg_limits_default(void) {
    pp_ogg_limits l = {.max_packet = 65536, .max_errors = 16, .error_forgive_pages = 128,
                       .max_skip = 256 * 1024};
    return l;
}

int pp_ogg_reader_open(pp_ogg_reader **out, const pp_ogg_limits *limits, char *err) {
    *out = NULL;
    pp_ogg_limits lim = limits ? *limits : pp_ogg_limits_default();
    if (lim.max_packet == 0 || lim.max_errors < 0)
        return pp_fail(err, PP_EINVAL, "ogg: max_packet must be > 0 and max_errors >= 0");
    pp_ogg_reader *r = calloc(1, sizeof *r);
    if (r) {
        r->buf = malloc(PP_OGG_MAX_PAGE);
        r->pkt = malloc(lim.max_packet);
    }
    if (!r || !r->buf || !r->pkt) {
        pp_ogg_reader_close(r);
        return pp_fail(err, PP_ENOMEM, "ogg: out of memory for the reader buffers");
    }
    r->lim = lim;
    pp_fault_budget_init(&r->budget, (uint64_t)lim.max_errors,
                         lim.error_forgive_progress ? lim.error_forgive_progress : lim.error_forgive_pages);
    *out = r;
    return 0;
}

void pp_ogg_reader_close(pp_ogg_reader *r) {
    if (!r) return;
    free(r->buf);
    free(r->pkt);
    free(r->held);
    free(r);
}

pp_ogg_stats pp_ogg_reader_stats(const pp_ogg_reader *r) { return r->st; }

void pp_ogg_reader_add_progress(pp_ogg_reader *r, uint64_t units) {
    r->progress = r->progress > UINT64_MAX - units ? UINT64_MAX : r->progress + units;
}

/* The fault budget's clock: the owner's progress when it reports one, else good pages. */
static uint64_t budget_clock(const pp_ogg_reader *r) {
    return r->lim.error_forgive_progress ? r->progress : r->st.pages;
}

const char *pp_ogg_reader_last_error(const pp_ogg_reader *r) { return r->last; }

/* Makes the reader fail for good with a message built from the current r->last. */
static int fail_hard(pp_ogg_reader *r, char *err, const char *why) {
    char msg[PP_ERR_LEN];
    snprintf(msg, sizeof msg, "ogg: %s (last error: %.300s)", why, r->last[0] ? r->last : "none");
    snprintf(r->last, sizeof r->last, "%s", msg);
    r->failed = 1;
    PP_WARN("ogg", "%s", msg);
    return pp_fail(err, PP_EFORMAT, "%s", msg);
}

/* Records a recoverable fault; returns PP_EFORMAT once the faults pass the budget. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int soft_error(pp_ogg_reader *r, char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(r->last, sizeof r->last, "ogg: ");
    vsnprintf(r->last + n, sizeof r->last - (size_t)n, fmt, ap);
    va_end(ap);
    PP_WARN("ogg", "%s", r->last);
    r->st.errors++;
    if (pp_fault_budget_add(&r->budget, budget_clock(r))) {
        char why[128];
        if (r->lim.error_forgive_progress)
            snprintf(why, sizeof why, "too many stream errors (over %d not forgiven; one is "
                     "forgiven per %llu units of progress)", r->lim.max_errors,
                     (unsigned long long)r->lim.error_forgive_progress);
        else
            snprintf(why, sizeof why, "too many stream errors (over %d not forgiven; good pages "
                     "forgive one per %llu)", r->lim.max_errors,
                     (unsigned long long)r->lim.error_forgive_pages);
        return fail_hard(r, err, why);
    }
    return 0;
}

static void drop_packet(pp_ogg_reader *r) {
    r->pkt_len = 0;
    r->pkt_open = 0;
    r->pkt_too_long = 0;
    r->pkt_truncated = 0;
}

/* Appends one lacing segment to the open packet, discarding packets past max_packet (but for
 * the head of a header packet). */
static int append_segment(pp_ogg_reader *r, const uint8_t *p, size_t n, char *err) {
    if (r->pkt_too_long) return 0;
    if (r->pkt_len + n > r->lim.max_packet && r->packetno < r->lim.header_packets) {
        /* Headers are read, not kept whole (Opus tags with cover art run to megabytes). */
        n = r->lim.max_packet - r->pkt_len;
        r->pkt_truncated = 1;
    } else if (r->pkt_len + n > r->lim.max_packet) {
        r->pkt_too_long = 1;
        r->gap = 1;
        return soft_error(r, err, "packet %llu of serial %u is longer than %zu bytes; dropped",
                          (unsigned long long)r->packetno, r->serial, r->lim.max_packet);
    }
    memcpy(r->pkt + r->pkt_len, p, n);
    r->pkt_len += n;
    return 0;
}

/* Decides whether a valid page belongs to the stream; 1 = use it, 0 = drop it, <0 = fatal. */
static int admit_page(pp_ogg_reader *r, int flags, uint32_t serial, uint32_t seq, char *err) {
    if (flags & PP_OGG_FLAG_BOS) {
        if (r->have_stream && !r->ended)
            PP_INFO("ogg", "new stream serial %u replaces serial %u", serial, r->serial);
        r->have_stream = 1;
        r->ended = 0;
        r->serial = serial;
        r->packetno = 0;
        r->gap = 0;
        drop_packet(r);
    } else if (!r->have_stream || serial != r->serial || r->ended) {
        int rc = r->have_stream && serial == r->serial
                     ? soft_error(r, err, "page (sequence %u) after EOS on serial %u; dropped", seq,
                                  serial)
                     : soft_error(r, err, "page (sequence %u) of serial %u before its BOS page; "
                                  "dropped", seq, serial);
        return rc < 0 ? rc : 0;
    } else if (seq != r->next_seq) {
        r->gap = 1;
        drop_packet(r);
        /* Right after a rejected page or garbage the gap is that fault's doing: counted once. */
        if (!r->in_garbage) {
            int rc = soft_error(r, err, "page sequence gap on serial %u: expected %u, got %u",
                                serial, r->next_seq, seq);
            if (rc < 0) return rc;
        }
    }
    r->next_seq = seq + 1;
    return 1;
}

static int deliver(pp_ogg_reader *r, int64_t granule, int eos, pp_ogg_packet_fn fn, void *user,
                   char *err) {
    pp_ogg_packet pkt = {.data = r->pkt, .len = r->pkt_len, .serial = r->serial,
                         .granule = granule, .packetno = r->packetno, .bos = r->packetno == 0,
                         .eos = eos, .gap = r->gap, .truncated = r->pkt_truncated};
    r->packetno++;
    r->gap = 0;
    r->st.packets++;
    int rc = fn ? fn(user, &pkt, err) : 0;
    if (rc < 0) {
        snprintf(r->last, sizeof r->last, "%s", err ? err : "ogg: packet callback failed");
        r->failed = 1;
    }
    return rc;
}

static int read_page(pp_ogg_reader *r, const uint8_t *page, size_t len, pp_ogg_packet_fn fn,
                     void *user, char *err);

/* Keeps a second BOS page of the current serial aside; 0, or <0 = fatal. An encoder restarted
 * with a fixed serial (sphn writes 42 every time) sends one, and so does a client repeating
 * its header page: only the page after it tells them apart. */
static int hold_bos(pp_ogg_reader *r, const uint8_t *page, size_t len, uint32_t seq, char *err) {
    if (!r->held && !(r->held = malloc(PP_OGG_MAX_PAGE))) {
        int rc = soft_error(r, err, "second BOS page (sequence %u) on serial %u; no memory to "
                            "hold it, dropped", seq, r->serial);
        return rc < 0 ? rc : 0;
    }
    memcpy(r->held, page, len);
    r->held_len = len;
    r->held_seq = seq;
    return 0;
}

/* Settles the held BOS page on the arrival of the next page (serial, seq, flags): a page of the
 * serial that continues from it makes it the start of the stream anew; anything else makes it
 * a duplicate, dropped. */
static int settle_held_bos(pp_ogg_reader *r, int flags, uint32_t serial, uint32_t seq,
                           pp_ogg_packet_fn fn, void *user, char *err) {
    size_t len = r->held_len;
    r->held_len = 0;
    if ((flags & PP_OGG_FLAG_BOS) || serial != r->serial || seq != r->held_seq + 1) {
        int rc = soft_error(r, err, "second BOS page (sequence %u) on serial %u; dropped",
                            r->held_seq, r->serial);
        return rc < 0 ? rc : 0;
    }
    PP_INFO("ogg", "stream serial %u restarts", serial);
    r->ended = 1; /* the held page now opens a new stream, as after an EOS */
    return read_page(r, r->held, len, fn, user, err);
}

/* Splits a CRC-checked page of len bytes into packets. */
static int read_page(pp_ogg_reader *r, const uint8_t *page, size_t len, pp_ogg_packet_fn fn,
                     void *user, char *err) {
    int flags = page[5];
    int64_t granule = (int64_t)((uint64_t)rd32(page + 6) | (uint64_t)rd32(page + 10) << 32);
    uint32_t serial = rd32(page + 14), seq = rd32(page + 18);
    int rc = r->held_len ? settle_held_bos(r, flags, serial, seq, fn, user, err) : 0;
    if (rc < 0) return rc;
    if ((flags & PP_OGG_FLAG_BOS) && r->have_stream && !r->ended && serial == r->serial)
        return hold_bos(r, page, len, seq, err);
    rc = admit_page(r, flags, serial, seq, err);
    if (rc <= 0) return rc;
    r->st.pages++;

    int nseg = page[26];
    const uint8_t *lacing = page + HEADER_LEN, *body = lacing + nseg;
    int last_end = -1; /* segment that ends the page's last complete packet */
    for (int i = 0; i < nseg; i++)
        if (lacing[i] < 255) last_end = i;

    int i = 0;
    if (flags & PP_OGG_FLAG_CONTINUED) {
        if (!r->pkt_open) {
            /* The head of this packet was lost: skip its tail. */
            r->gap = 1;
            for (; i < nseg && lacing[i] == 255; i++) body += 255;
            if (i < nseg) body += lacing[i++];
        }
    } else if (r->pkt_open) {
        drop_packet(r);
        r->gap = 1;
        rc = soft_error(r, err, "page (sequence %u) of serial %u does not continue the packet "
                        "left open; packet dropped", r->next_seq - 1, r->serial);
        if (rc < 0) return rc;
    }
    for (; i < nseg; i++) {
        rc = append_segment(r, body, lacing[i], err);
        if (rc < 0) return rc;
        body += lacing[i];
        r->pkt_open = 1;
        if (lacing[i] == 255) continue;
        if (!r->pkt_too_long) {
            int last = i == last_end;
            rc = deliver(r, last ? granule : PP_OGG_NO_GRANULE,
                         last && (flags & PP_OGG_FLAG_EOS), fn, user, err);
        }
        drop_packet(r);
        if (rc < 0) return rc;
    }
    if (flags & PP_OGG_FLAG_EOS) {
        r->ended = 1;
        drop_packet(r);
    }
    return 0;
}

/* Drops n unparsed bytes as garbage; one error per run of garbage between good pages. */
static int skip_garbage(pp_ogg_reader *r, size_t n, char *err) {
    r->pos += n;
    r->st.skipped += n;
    r->run_skipped += n;
    if (!r->in_garbage) {
        r->in_garbage = 1;
        int rc = soft_error(r, err, "lost sync at stream byte %llu; scanning for \"OggS\"",
                            (unsigned long long)(r->st.bytes - (r->have - r->pos) - n));
        if (rc < 0) return rc;
    }
    if (r->run_skipped > r->lim.max_skip) return fail_hard(r, err, "too much garbage skipped");
    return 0;
}

/* Rejects the capture at r->pos (bad version or CRC) and resumes the scan one byte later. */
static int reject_capture(pp_ogg_reader *r, char *err, const char *what, uint32_t a, uint32_t b) {
    int rc = soft_error(r, err, "%s (0x%08x vs 0x%08x) at stream byte %llu; resyncing", what, a, b,
                        (unsigned long long)(r->st.bytes - (r->have - r->pos)));
    if (rc < 0) return rc;
    r->in_garbage = 1; /* already counted: the bytes skipped next belong to this error */
    return skip_garbage(r, 1, err);
}

/* Parses whatever complete pages the buffer holds. Returns 0 when it needs more input. */
static int parse(pp_ogg_reader *r, pp_ogg_packet_fn fn, void *user, char *err) {
    for (;;) {
        const uint8_t *p = r->buf + r->pos;
        size_t avail = r->have - r->pos;
        /* Find the capture pattern; keep a tail that may be its start. */
        size_t at = 0;
        while (at + 4 <= avail && memcmp(p + at, CAPTURE, 4) != 0) at++;
        if (at + 4 > avail) {
            while (at < avail && memcmp(p + at, CAPTURE, avail - at) != 0) at++;
        }
        if (at > 0) {
            int rc = skip_garbage(r, at, err);
            if (rc < 0) return rc;
            continue;
        }
        if (avail < HEADER_LEN) return 0;
        if (p[4] != 0) {
            int rc = reject_capture(r, err, "unsupported Ogg version", p[4], 0);
            if (rc < 0) return rc;
            continue;
        }
        size_t nseg = p[26], len = HEADER_LEN + nseg;
        if (avail < len) return 0;
        for (size_t i = 0; i < nseg; i++) len += p[HEADER_LEN + i];
        if (avail < len) return 0;
        uint32_t stored = rd32(p + 22), computed = page_crc(p, len);
        if (stored != computed) {
            int rc = reject_capture(r, err, "page CRC mismatch", stored, computed);
            if (rc < 0) return rc;
            continue;
        }
        r->pos += len;
        int rc = read_page(r, p, len, fn, user, err);
        r->in_garbage = 0;
        r->run_skipped = 0;
        if (rc < 0) return rc;
    }
}

int pp_ogg_reader_feed(pp_ogg_reader *r, const uint8_t *data, size_t len, pp_ogg_packet_fn fn,
                       void *user, char *err) {
    if (r->failed) return pp_fail(err, PP_EFORMAT, "ogg: stream failed earlier: %.400s", r->last);
    while (len > 0) {
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->have - r->pos);
            r->have -= r->pos;
            r->pos = 0;
        }
        size_t n = PP_OGG_MAX_PAGE - r->have;
        if (n > len) n = len;
        memcpy(r->buf + r->have, data, n);
        r->have += n;
        r->st.bytes += n;
        data += n;
        len -= n;
        int rc = parse(r, fn, user, err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- writer ---- */

void pp_ogg_writer_init(pp_ogg_writer *w, uint32_t serial) {
    w->serial = serial;
    w->sequence = 0;
}

int pp_ogg_writer_page(pp_ogg_writer *w, const uint8_t *packet, size_t len, int64_t granule,
                       int eos, uint8_t *out, size_t cap, size_t *out_len, char *err) {
    *out_len = 0;
    /* One packet per page: its lacing needs len/255 + 1 values, at most 255. */
    if (len >= PP_OGG_MAX_SEGMENT_DATA)
        return pp_fail(err, PP_EINVAL, "ogg: packet of %zu bytes does not fit in one page", len);
    size_t nseg = len / 255 + 1, total = HEADER_LEN + nseg + len;
    if (total > cap)
        return pp_fail(err, PP_EFULL, "ogg: page of %zu bytes does not fit the %zu-byte buffer",
                       total, cap);
    memcpy(out, CAPTURE, 4);
    out[4] = 0;
    out[5] = (uint8_t)((w->sequence == 0 ? PP_OGG_FLAG_BOS : 0) | (eos ? PP_OGG_FLAG_EOS : 0));
    wr32(out + 6, (uint32_t)((uint64_t)granule & 0xffffffffu));
    wr32(out + 10, (uint32_t)((uint64_t)granule >> 32));
    wr32(out + 14, w->serial);
    wr32(out + 18, w->sequence);
    wr32(out + 22, 0);
    out[26] = (uint8_t)nseg;
    memset(out + HEADER_LEN, 255, nseg - 1);
    out[HEADER_LEN + nseg - 1] = (uint8_t)(len % 255);
    memcpy(out + HEADER_LEN + nseg, packet, len);
    wr32(out + 22, pp_ogg_crc(out, total));
    w->sequence++;
    *out_len = total;
    return 0;
}
