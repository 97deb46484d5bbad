// Ogg framing for the chat protocol's Opus streams (RFC 3533 pages, RFC 7845 Opus mapping).
// Pure functions and classes with no browser API, so node's test runner checks them directly.
//
// Uplink (browser -> server) matches what the official client sends (protocol.md §2.2): an OpusHead
// page (BOS, sequence 0), an OpusTags page (sequence 1), then pages of two 20 ms packets, granule
// positions in 48 kHz units. Downlink pages are read by OggReader, which tolerates pages split or
// merged across WebSocket messages and checks every CRC.

const CAPTURE = [0x4f, 0x67, 0x67, 0x53]; // "OggS"
const HEADER_LEN = 27;
export const FLAG_CONTINUED = 0x01;
export const FLAG_BOS = 0x02;
export const FLAG_EOS = 0x04;

// CRC-32 as Ogg defines it: polynomial 0x04c11db7, MSB first, initial value 0, no final xor.
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let b = 0; b < 8; b++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
    t[i] = r >>> 0;
  }
  return t;
})();

export function oggCrc(bytes) {
  let crc = 0;
  for (let i = 0; i < bytes.length; i++) crc = ((crc << 8) ^ CRC_TABLE[((crc >>> 24) ^ bytes[i]) & 0xff]) >>> 0;
  return crc;
}

const ascii = (s) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const startsWith = (bytes, magic) => bytes.length >= magic.length && magic.every((b, i) => bytes[i] === b);
const OPUS_HEAD = Array.from(ascii('OpusHead'));
const OPUS_TAGS = Array.from(ascii('OpusTags'));

// True for the two Opus header packets, which carry no audio.
export function isOpusHeader(packet) {
  return startsWith(packet, OPUS_HEAD) || startsWith(packet, OPUS_TAGS);
}

// The 19-byte OpusHead of a mono or stereo stream (channel mapping family 0).
// preSkip is in 48 kHz samples; inputRate is informational (the rate the audio was captured at).
export function opusHead({ channels = 1, preSkip = 312, inputRate = 24000 } = {}) {
  const b = new Uint8Array(19);
  const v = new DataView(b.buffer);
  b.set(ascii('OpusHead'), 0);
  b[8] = 1; // version
  b[9] = channels;
  v.setUint16(10, preSkip, true);
  v.setUint32(12, inputRate, true);
  v.setInt16(16, 0, true); // output gain
  b[18] = 0; // mapping family
  return b;
}

// OpusTags with a vendor string and no user comments.
export function opusTags(vendor = 'personaplex-web') {
  const vend = new TextEncoder().encode(vendor);
  const b = new Uint8Array(8 + 4 + vend.length + 4);
  const v = new DataView(b.buffer);
  b.set(ascii('OpusTags'), 0);
  v.setUint32(8, vend.length, true);
  b.set(vend, 12);
  v.setUint32(12 + vend.length, 0, true);
  return b;
}

// One page holding whole packets. granule is a safe integer (the page's end position).
export function buildPage({ serial, sequence, granule, flags = 0, packets }) {
  const lacing = [];
  for (const p of packets) {
    let n = p.length;
    while (n >= 255) { lacing.push(255); n -= 255; }
    lacing.push(n); // a packet whose length is a multiple of 255 ends with a 0 entry
  }
  if (lacing.length > 255) throw new RangeError(`ogg: ${lacing.length} lacing values do not fit one page`);
  const bodyLen = packets.reduce((s, p) => s + p.length, 0);
  const page = new Uint8Array(HEADER_LEN + lacing.length + bodyLen);
  const v = new DataView(page.buffer);
  page.set(CAPTURE, 0);
  page[4] = 0; // stream structure version
  page[5] = flags;
  v.setUint32(6, granule % 0x100000000, true);
  v.setUint32(10, Math.floor(granule / 0x100000000), true);
  v.setUint32(14, serial >>> 0, true);
  v.setUint32(18, sequence >>> 0, true);
  page[26] = lacing.length;
  page.set(lacing, HEADER_LEN);
  let off = HEADER_LEN + lacing.length;
  for (const p of packets) { page.set(p, off); off += p.length; }
  v.setUint32(22, oggCrc(page), true); // the CRC field is zero while summing
  return page;
}

// Pages an Opus stream: headers() once, then push() each encoded packet; a page is returned each
// time packetsPerPage packets are collected. Durations are in 48 kHz samples (960 per 20 ms).
export class OpusOggWriter {
  constructor({ serial, preSkip = 312, inputRate = 24000, packetsPerPage = 2, vendor } = {}) {
    this.serial = serial ?? ((Math.random() * 0x100000000) >>> 0);
    this.preSkip = preSkip;
    this.inputRate = inputRate;
    this.packetsPerPage = packetsPerPage;
    this.vendor = vendor;
    this.sequence = 0;
    this.granule = 0;
    this.pending = [];
  }

  headers() {
    const head = buildPage({ serial: this.serial, sequence: this.sequence++, granule: 0, flags: FLAG_BOS,
      packets: [opusHead({ preSkip: this.preSkip, inputRate: this.inputRate })] });
    const tags = buildPage({ serial: this.serial, sequence: this.sequence++, granule: 0,
      packets: [opusTags(this.vendor)] });
    return [head, tags];
  }

  push(packet, duration48k) {
    this.pending.push(packet);
    this.granule += duration48k;
    return this.pending.length >= this.packetsPerPage ? this.flush() : null;
  }

  // Emits what is pending (null when nothing is); eos marks the stream's last page.
  flush(eos = false) {
    if (!this.pending.length && !eos) return null;
    const page = buildPage({ serial: this.serial, sequence: this.sequence++, granule: this.granule,
      flags: eos ? FLAG_EOS : 0, packets: this.pending });
    this.pending = [];
    return page;
  }
}

// Streaming demultiplexer: push() any slice of the byte stream, get back the packets completed so
// far as { data, granule, serial, sequence, bos }. Bytes before a capture pattern and pages with a bad
// CRC are skipped (counted in .skippedBytes and .crcErrors) and the reader resynchronises.
export class OggReader {
  constructor() {
    this.buf = new Uint8Array(0);
    this.partial = null; // packet continued onto the next page
    this.sequence = null; // the last page's sequence number, to see a lost page
    this.crcErrors = 0;
    this.skippedBytes = 0;
    this.pages = 0;
  }

  push(bytes) {
    const joined = new Uint8Array(this.buf.length + bytes.length);
    joined.set(this.buf, 0);
    joined.set(bytes, this.buf.length);
    const out = [];
    let pos = 0;
    for (;;) {
      const start = findCapture(joined, pos);
      if (start < 0) {
        // keep a possible capture-pattern prefix at the tail
        const keep = Math.min(3, joined.length - pos);
        this.skippedBytes += joined.length - pos - keep;
        pos = joined.length - keep;
        break;
      }
      this.skippedBytes += start - pos;
      pos = start;
      const len = pageLength(joined, pos);
      if (len < 0 || pos + len > joined.length) break; // need more bytes
      const page = joined.subarray(pos, pos + len);
      if (!crcMatches(page)) {
        this.crcErrors++;
        this.skippedBytes++;
        pos++;
        continue;
      }
      this.readPage(page, out);
      pos += len;
    }
    this.buf = joined.slice(pos);
    return out;
  }

  readPage(page, out) {
    const v = new DataView(page.buffer, page.byteOffset, page.byteLength);
    const flags = page[5];
    const granule = v.getUint32(6, true) + v.getUint32(10, true) * 0x100000000;
    const serial = v.getUint32(14, true);
    const sequence = v.getUint32(18, true);
    const nseg = page[26];
    this.pages++;
    // A packet is only glued across pages when both halves arrived; an orphan half is dropped, also
    // when a page between them was lost (a CRC failure, a gap in the sequence numbers).
    const continued = !!(flags & FLAG_CONTINUED);
    const gap = this.sequence !== null && sequence !== ((this.sequence + 1) >>> 0);
    this.sequence = sequence;
    if (!continued || gap) this.partial = null;
    let orphan = continued && !this.partial;
    let off = HEADER_LEN + nseg;
    let chunks = this.partial ? [this.partial] : [];
    let size = this.partial ? this.partial.length : 0;
    for (let i = 0; i < nseg; i++) {
      const lace = page[HEADER_LEN + i];
      chunks.push(page.subarray(off, off + lace));
      size += lace;
      off += lace;
      if (lace < 255) {
        if (!orphan) out.push({ data: concat(chunks, size), granule, serial, sequence, bos: !!(flags & FLAG_BOS) });
        orphan = false;
        chunks = [];
        size = 0;
      }
    }
    // An orphan that runs on past this page stays an orphan: nothing of it is kept.
    this.partial = chunks.length && !orphan ? concat(chunks, size) : null;
  }
}

function findCapture(b, from) {
  for (let i = from; i + 4 <= b.length; i++) {
    if (b[i] === 0x4f && b[i + 1] === 0x67 && b[i + 2] === 0x67 && b[i + 3] === 0x53) return i;
  }
  return -1;
}

// Total page length, or -1 while the header or segment table is incomplete.
function pageLength(b, pos) {
  if (pos + HEADER_LEN > b.length) return -1;
  const nseg = b[pos + 26];
  if (pos + HEADER_LEN + nseg > b.length) return -1;
  let body = 0;
  for (let i = 0; i < nseg; i++) body += b[pos + HEADER_LEN + i];
  return HEADER_LEN + nseg + body;
}

function crcMatches(page) {
  const v = new DataView(page.buffer, page.byteOffset, page.byteLength);
  const want = v.getUint32(22, true);
  const copy = page.slice();
  copy.fill(0, 22, 26);
  return oggCrc(copy) === want;
}

function concat(chunks, size) {
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) { out.set(c, off); off += c.length; }
  return out;
}
