// A stand-in for personaplex-server's /api/chat that answers every uplink audio page with COPIES
// (default 1) well-formed downlink Ogg pages, written together, at most one answer every PERIOD
// ms: with PERIOD over 80 it is a server slower than real time, whose replies stay evenly spaced
// while each one comes later than the last; with COPIES over 1, one that sends more pages than
// it was sent frames. personaplex-loadtest must see the first fall behind and report the second
// as broken (tests/CMakeLists.txt, loadtest_slow_server, loadtest_extra_pages). With SILENT, a
// server that fed its model silence in place of the first SILENT audio frames of each
// conversation (as one does whose uplink overflowed): its streams stay continuous, one page per
// frame, and only its /metrics says so (loadtest_input_loss).
//
//   node slow_server.mjs PERIOD_MS [COPIES [SILENT]] -- LOADTEST_BINARY [loadtest options]
//
// Listens on a free loopback port, runs the load test against it (--port added) and exits with
// the load test's status (128 + the signal's number when one ended it), its output passed
// through. /metrics: 404 without SILENT, else the uplink counters alone; anything else: 404.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { constants } from 'node:os';

const period = Number(process.argv[2]);
const dashes = process.argv.indexOf('--');
const copies = dashes >= 4 ? Number(process.argv[3]) : 1;
const silent = dashes === 5 ? Number(process.argv[4]) : 0;
const loadtest = process.argv.slice(dashes + 1);
let silentTotal = 0; // over all conversations, as the server's counter
if (!(period > 0) || dashes < 3 || dashes > 5 || !(copies >= 1) || !(silent >= 0) || !loadtest.length) {
  console.error('usage: node slow_server.mjs PERIOD_MS [COPIES [SILENT]] -- LOADTEST_BINARY [options]');
  process.exit(2);
}

// Ogg's CRC-32 (polynomial 0x04c11db7, not reflected).
const crcTable = new Uint32Array(256).map((_, i) => {
  let r = i << 24;
  for (let k = 0; k < 8; k++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
  return r >>> 0;
});
function oggPage(serial, seq, granule, flags, body) {
  const segs = [];
  for (let left = body.length; ; left -= 255) {
    segs.push(Math.min(left, 255));
    if (left < 255) break;
  }
  const p = Buffer.alloc(27 + segs.length + body.length);
  p.write('OggS', 0);
  p[5] = flags;
  p.writeBigUInt64LE(BigInt(granule), 6);
  p.writeUInt32LE(serial, 14);
  p.writeUInt32LE(seq, 18);
  p[26] = segs.length;
  Buffer.from(segs).copy(p, 27);
  body.copy(p, 27 + segs.length);
  let crc = 0;
  for (const b of p) crc = ((crc << 8) ^ crcTable[((crc >>> 24) ^ b) & 0xff]) >>> 0;
  p.writeUInt32LE(crc, 22);
  return p;
}

function wsFrame(opcode, payload) {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x80 | opcode, n]) : Buffer.from([0x80 | opcode, 126, n >> 8, n & 0xff]);
  return Buffer.concat([head, payload]);
}

function conversation(socket) {
  socket.setNoDelay(true);
  const serial = 0x5eed;
  let seq = 0, uplink = 0, nextAt = 0, buf = Buffer.alloc(0);
  const page = (flags, body, granule) => wsFrame(2, Buffer.concat([Buffer.from([1]), oggPage(serial, seq++, granule, flags, body)]));
  const opusHead = Buffer.from([...Buffer.from('OpusHead'), 1, 1, 0x38, 0x01, 0x80, 0xbb, 0, 0, 0, 0, 0]);
  const opusTags = Buffer.concat([Buffer.from('OpusTags'), Buffer.from([0, 0, 0, 0, 0, 0, 0, 0])]);
  socket.write(wsFrame(2, Buffer.from([0])));
  socket.write(page(2, opusHead, 0));
  socket.write(page(0, opusTags, 0));
  socket.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) { // client frames: masked, payloads under 64 KiB
      if (buf.length < 2) return;
      const op = buf[0] & 15;
      let len = buf[1] & 127, at = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        at = 4;
      }
      if (buf.length < at + 4 + len) return;
      const mask = buf.subarray(at, at + 4), data = Buffer.from(buf.subarray(at + 4, at + 4 + len));
      for (let i = 0; i < len; i++) data[i] ^= mask[i & 3];
      buf = buf.subarray(at + 4 + len);
      if (op === 8) {
        socket.end(wsFrame(8, data.subarray(0, 2)));
        return;
      }
      // the two header pages, then audio: the first audio page is the Opus pre-skip, as the
      // real server drops it; each later one gets a reply, one per period at most
      if (op !== 2 || ++uplink <= 3) continue;
      if (uplink - 3 <= silent) silentTotal++; // heard as silence, answered all the same
      const now = Date.now();
      nextAt = Math.max(now, nextAt + period);
      const granule = 1920 * 2 * (uplink - 3);
      setTimeout(() => {
        const answer = Array.from({ length: copies }, () => page(0, Buffer.from([0xfc, 0xff, 0xfe]), granule));
        if (socket.writable) socket.write(Buffer.concat(answer));
      }, nextAt - now);
    }
  });
  socket.on('error', () => {});
}

const server = createServer((req, res) => {
  if (req.url !== '/metrics' || !silent) return res.writeHead(404, { Connection: 'close' }).end();
  res.writeHead(200, { 'Content-Type': 'text/plain', Connection: 'close' });
  res.end(`personaplex_uplink_silent_frames_total ${silentTotal}\npersonaplex_uplink_dropped_samples_total 0\n` +
          'personaplex_uplink_concealed_packets_total 0\n');
});
server.on('upgrade', (req, socket) => {
  const accept = createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  conversation(socket);
});
server.listen(0, '127.0.0.1', () => {
  const child = spawn(loadtest[0], [...loadtest.slice(1), '--port', String(server.address().port)], { stdio: 'inherit' });
  child.on('exit', (code, signal) => {
    server.close();
    process.exit(signal ? 128 + constants.signals[signal] : code);
  });
});
