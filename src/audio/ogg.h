/* ogg: a streaming Ogg demultiplexer for the uplink and a one-packet-per-page writer for
 * the downlink (RFC 3533).
 *
 * The reader takes byte chunks of any size (pages split or merged across WebSocket
 * messages) and hands out complete packets through a callback. It verifies every page's
 * CRC, requires a BOS page before any other page of a serial, and resynchronises on the next
 * "OggS" after garbage or a bad page. A BOS page starts a new stream (a new serial, or the same
 * one after its EOS); a second BOS on the current serial is held until the next page: if that
 * continues from it (an encoder restarted with a fixed serial), the stream starts anew, else
 * the BOS page was a duplicate and is dropped. Memory: one page buffer (PP_OGG_MAX_PAGE) plus
 * one packet buffer (max_packet) from open, and a second page buffer once a second BOS on a
 * serial needs holding. Recoverable faults are counted and limited as a rate (base/fault_budget.h,
 * clocked by good pages, or by progress the owner reports, such as decoded audio): more than
 * max_errors of them with too little progress between them, or a run of more than max_skip
 * garbage bytes, and the reader fails for good, so a garbage stream cannot keep it busy while
 * faults scattered over a long stream are forgiven. */
#ifndef PP_AUDIO_OGG_H
#define PP_AUDIO_OGG_H

#include <stddef.h>
#include <stdint.h>

#define PP_OGG_MAX_PAGE 65307          /* 27 + 255 lacing values + 255 * 255 bytes */
#define PP_OGG_MAX_SEGMENT_DATA 65025  /* 255 * 255: the largest body of one page */
#define PP_OGG_NO_GRANULE (-1)         /* granule of a packet that does not end its page */

enum { PP_OGG_FLAG_CONTINUED = 0x01, PP_OGG_FLAG_BOS = 0x02, PP_OGG_FLAG_EOS = 0x04 };

typedef struct pp_ogg_limits {
    size_t max_packet; /* longest packet accepted (bytes); longer ones are dropped as errors */
    int max_errors;    /* recoverable errors tolerated back to back; one more fails the reader
                          (0: strict) */
    uint64_t error_forgive_pages; /* good pages that forgive one counted error (0: none, so
                                     max_errors is a lifetime total) */
    uint64_t error_forgive_progress; /* when > 0, replaces error_forgive_pages: units of progress
                                        reported with pp_ogg_reader_add_progress that forgive one
                                        counted error. Pages are no clock of time (an encoder may
                                        write 20 ms or 1 s pages); the uplink reports decoded
                                        samples, so forgiving takes the same audio time for
                                        every encoder */
    size_t max_skip;   /* garbage bytes skipped in one run (between good pages) before the
                          reader fails */
    uint64_t header_packets; /* the first packets of each logical stream that are headers: one
                                longer than max_packet is delivered cut to max_packet bytes
                                (truncated set), not dropped as an error (0: none) */
} pp_ogg_limits;

/* 64 KiB packets; 16 errors back to back, one of them forgiven per 128 good pages (no progress
 * clock); 256 KiB of garbage in a row; no header packets. */
pp_ogg_limits pp_ogg_limits_default(void);

typedef struct pp_ogg_packet {
    const uint8_t *data; /* valid only during the callback */
    size_t len;
    uint32_t serial;
    int64_t granule; /* the page's granule if this packet is the last one ending on it, else -1 */
    uint64_t packetno; /* counts from 0 within the logical stream (the BOS packet is 0) */
    int bos;           /* first packet of its logical stream */
    int eos;           /* last packet of an EOS page */
    int gap;           /* data was lost just before this packet (page sequence gap, bad page) */
    int truncated;     /* a header packet over max_packet: only its first max_packet bytes */
} pp_ogg_packet;

/* Returns 0 to go on or a negative PP_E* code (with err filled) to stop the feed. */
typedef int (*pp_ogg_packet_fn)(void *user, const pp_ogg_packet *pkt, char *err);

typedef struct pp_ogg_stats {
    uint64_t bytes;   /* bytes fed */
    uint64_t pages;   /* pages accepted */
    uint64_t packets; /* packets delivered */
    uint64_t skipped; /* garbage bytes skipped while resynchronising */
    int errors;       /* recoverable errors so far (all of them, forgiven or not) */
} pp_ogg_stats;

typedef struct pp_ogg_reader pp_ogg_reader;

/* limits NULL: pp_ogg_limits_default(). */
int pp_ogg_reader_open(pp_ogg_reader **out, const pp_ogg_limits *limits, char *err);
void pp_ogg_reader_close(pp_ogg_reader *r);
/* Consumes all len bytes, calling fn for every packet completed. Recoverable faults (bad CRC,
 * garbage, missing or duplicate BOS, sequence gap, oversize packet) are logged, counted and
 * kept in pp_ogg_reader_last_error; the call still returns 0. Returns PP_EFORMAT once the
 * limits are passed (and on every later call), or the callback's code. */
int pp_ogg_reader_feed(pp_ogg_reader *r, const uint8_t *data, size_t len, pp_ogg_packet_fn fn,
                       void *user, char *err);
pp_ogg_stats pp_ogg_reader_stats(const pp_ogg_reader *r);
/* Advances the progress clock of error_forgive_progress by units (a packet callback may call it:
 * the packets it was handed count before the next fault). */
void pp_ogg_reader_add_progress(pp_ogg_reader *r, uint64_t units);
/* The latest recoverable or fatal error message ("" if none). */
const char *pp_ogg_reader_last_error(const pp_ogg_reader *r);

/* Page writer: one packet per page, constant serial, sequence 0,1,2,...; BOS on page 0. */
typedef struct pp_ogg_writer {
    uint32_t serial;
    uint32_t sequence; /* of the next page */
} pp_ogg_writer;

void pp_ogg_writer_init(pp_ogg_writer *w, uint32_t serial);
/* Writes one page holding packet (len <= PP_OGG_MAX_SEGMENT_DATA - 1) with the given granule
 * into out (cap bytes; a page is 27 + len/255 + 1 + len bytes). eos sets the EOS flag.
 * Sets *out_len. PP_EINVAL if the packet is too long, PP_EFULL if out is too small. */
int pp_ogg_writer_page(pp_ogg_writer *w, const uint8_t *packet, size_t len, int64_t granule,
                       int eos, uint8_t *out, size_t cap, size_t *out_len, char *err);

/* The Ogg CRC-32 (polynomial 0x04c11db7, no reflection, initial value 0) of n bytes. */
uint32_t pp_ogg_crc(const uint8_t *data, size_t n);

#endif
