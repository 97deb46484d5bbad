// Ogg writer/reader of web/ogg.js against the bytes the official web client really sent
// (tests/data/captures/official-client-uplink.opus, opus-recorder 8.0.5 in Chromium).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { OggReader, OpusOggWriter, buildPage, isOpusHeader, oggCrc, FLAG_CONTINUED } from '../../web/ogg.js';

const capture = new Uint8Array(readFileSync(new URL('../data/captures/official-client-uplink.opus', import.meta.url)));

// Small deterministic PRNG so chunkings are reproducible.
function lcg(seed) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 0x100000000);
}

// Splits the file into pages by walking the header fields (independent of OggReader).
function pagesOf(bytes) {
  const pages = [];
  let off = 0;
  while (off < bytes.length) {
    const nseg = bytes[off + 26];
    let len = 27 + nseg;
    for (let i = 0; i < nseg; i++) len += bytes[off + 27 + i];
    pages.push(bytes.subarray(off, off + len));
    off += len;
  }
  return pages;
}

test('CRC matches the check value of the Ogg polynomial', () => {
  // CRC-32/MPEG-2 without init/xorout ("CRC-32/OGG"): check value over "123456789".
  assert.equal(oggCrc(new TextEncoder().encode('123456789')), 0x89a1897f);
});

test('reader takes every page of the official capture with no CRC error', () => {
  const r = new OggReader();
  const packets = r.push(capture);
  assert.equal(r.pages, 157);
  assert.equal(r.crcErrors, 0);
  assert.equal(r.skippedBytes, 0);
  assert.equal(packets.length, 2 + 155 * 2);
  assert.ok(isOpusHeader(packets[0].data) && isOpusHeader(packets[1].data));
  assert.ok(packets[0].bos && !packets[2].bos);
  assert.ok(!packets.slice(2).some((p) => isOpusHeader(p.data)));
  assert.equal(packets.at(-1).granule, 155 * 1920); // 48 kHz units, 2 x 960 per page
});

test('writer reproduces the official client stream byte for byte', () => {
  const packets = new OggReader().push(capture);
  const view = new DataView(capture.buffer, capture.byteOffset);
  const w = new OpusOggWriter({ serial: view.getUint32(14, true), preSkip: 3840, inputRate: 44100, vendor: 'RecorderJS' });
  const pages = [...w.headers()];
  for (const p of packets.slice(2)) {
    const page = w.push(p.data, 960);
    if (page) pages.push(page);
  }
  assert.equal(w.flush(), null);
  const want = pagesOf(capture);
  assert.equal(pages.length, want.length);
  pages.forEach((p, i) => assert.deepEqual(p, want[i], `page ${i}`));
});

test('reader gives the same packets however the bytes are split', () => {
  const whole = new OggReader().push(capture).map((p) => p.data);
  const rnd = lcg(7);
  for (let trial = 0; trial < 5; trial++) {
    const r = new OggReader();
    const got = [];
    for (let off = 0; off < capture.length;) {
      const n = 1 + Math.floor(rnd() * 700);
      got.push(...r.push(capture.subarray(off, off + n)).map((p) => p.data));
      off += n;
    }
    assert.deepEqual(got, whole);
  }
});

test('reader skips garbage and a corrupted page, then resynchronises', () => {
  const pages = pagesOf(capture);
  const bad = pages[5].slice();
  bad[bad.length - 1] ^= 0x40;
  const junk = new Uint8Array([1, 2, 3, 0x4f, 0x67, 9]);
  const stream = [junk, ...pages.slice(0, 5), bad, ...pages.slice(6)];
  const r = new OggReader();
  let count = 0;
  for (const part of stream) count += r.push(part).length;
  assert.equal(r.crcErrors, 1);
  assert.equal(count, 2 + 154 * 2);
});

test('lacing: packets of 254, 255, 510 and 600 bytes round-trip', () => {
  const sizes = [254, 255, 510, 600];
  const packets = sizes.map((n, k) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + k) & 0xff));
  const page = buildPage({ serial: 1, sequence: 2, granule: 1234, packets });
  assert.deepEqual(Array.from(page.subarray(27, 27 + page[26])), [254, 255, 0, 255, 255, 0, 255, 255, 90]);
  const got = new OggReader().push(page);
  assert.deepEqual(got.map((p) => p.data), packets);
  assert.equal(got[0].granule, 1234);
});

test('a packet continued across two pages is joined; an orphan continuation is dropped', () => {
  const big = Uint8Array.from({ length: 300 }, (_, i) => i & 0xff);
  const tail = Uint8Array.from({ length: 20 }, (_, i) => 200 + i);
  // Page A ends inside the packet (last lacing 255); page B continues it.
  const pageA = buildPage({ serial: 9, sequence: 0, granule: 0, packets: [] }); // header template
  const a = new Uint8Array(27 + 1 + 255);
  a.set(pageA.subarray(0, 27));
  a[26] = 1; a[27] = 255; a.set(big.subarray(0, 255), 28);
  fixCrc(a);
  const b = new Uint8Array(27 + 2 + 45 + 20);
  b.set(pageA.subarray(0, 27));
  b[5] = FLAG_CONTINUED; b[18] = 1; b[26] = 2; b[27] = 45; b[28] = 20;
  b.set(big.subarray(255), 29); b.set(tail, 74);
  fixCrc(b);
  assert.deepEqual(new OggReader().push(new Uint8Array([...a, ...b])).map((p) => p.data), [big, tail]);
  assert.deepEqual(new OggReader().push(b).map((p) => p.data), [tail]);
});

// A page with the given lacing values (a last 255 leaves its packet open for the next page).
function rawPage(sequence, continued, lacing, body) {
  const page = new Uint8Array(27 + lacing.length + body.length);
  page.set(buildPage({ serial: 7, sequence, granule: 0, packets: [] }).subarray(0, 27));
  page[5] = continued ? FLAG_CONTINUED : 0;
  page[26] = lacing.length;
  page.set(lacing, 27);
  page.set(body, 27 + lacing.length);
  fixCrc(page);
  return page;
}

test('the rest of a packet whose first page was lost is dropped, not glued onto the next packet', () => {
  const big = Uint8Array.from({ length: 600 }, (_, i) => (i * 3) & 0xff);
  const next = Uint8Array.from({ length: 30 }, (_, i) => 100 + i);
  const p1 = rawPage(2, false, [255], big.subarray(0, 255));
  p1[40] ^= 1; // corrupted in transit
  const p2 = rawPage(3, true, [255], big.subarray(255, 510));
  const p3 = rawPage(4, true, [90, 30], new Uint8Array([...big.subarray(510), ...next]));
  const r = new OggReader();
  assert.deepEqual(r.push(new Uint8Array([...p1, ...p2, ...p3])).map((p) => p.data), [next]);
  assert.equal(r.crcErrors, 1);
});

test('a gap in the page sequence drops the packet left open before it', () => {
  const big = Uint8Array.from({ length: 300 }, (_, i) => i & 0xff);
  const other = Uint8Array.from({ length: 40 }, (_, i) => 50 + i);
  const a = rawPage(0, false, [255], big.subarray(0, 255)); // page 1, which ended the packet, was lost
  const c = rawPage(2, true, [40], other);
  assert.deepEqual(new OggReader().push(new Uint8Array([...a, ...c])).map((p) => p.data), []);
  const b = rawPage(1, true, [45], big.subarray(255));
  assert.deepEqual(new OggReader().push(new Uint8Array([...a, ...b])).map((p) => p.data), [big]);
});

function fixCrc(page) {
  page.fill(0, 22, 26);
  new DataView(page.buffer).setUint32(22, oggCrc(page), true);
}
