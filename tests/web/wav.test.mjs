// web/wav.js: RIFF header fields, channel order, clipping.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TwoTrackRecorder } from '../../web/wav.js';

test('two-track WAV: 24 kHz stereo 16-bit, left = model, right = mic', async () => {
  const rec = new TwoTrackRecorder(24000);
  rec.append(new Float32Array([0.5, -1.5]), new Float32Array([-0.25, 2]));
  rec.append(new Float32Array([1]), new Float32Array([0]));
  const blob = rec.toWav();
  assert.equal(blob.type, 'audio/wav');
  const wav = new Uint8Array(await blob.arrayBuffer());
  const v = new DataView(wav.buffer);
  const str = (o) => String.fromCharCode(...wav.subarray(o, o + 4));
  assert.equal(str(0), 'RIFF');
  assert.equal(v.getUint32(4, true), wav.length - 8);
  assert.equal(str(8), 'WAVE');
  assert.equal(v.getUint16(20, true), 1);
  assert.equal(v.getUint16(22, true), 2);
  assert.equal(v.getUint32(24, true), 24000);
  assert.equal(v.getUint32(28, true), 96000);
  assert.equal(v.getUint16(34, true), 16);
  assert.equal(v.getUint32(40, true), 3 * 4);
  const s = Array.from({ length: 6 }, (_, i) => v.getInt16(44 + 2 * i, true));
  assert.deepEqual(s, [16384, -8192, -32767, 32767, 32767, 0]);
  assert.equal(rec.seconds, 3 / 24000);
});

test('the WAV Blob holds the same bytes the per-sample encoder wrote', async () => {
  const rec = new TwoTrackRecorder(24000);
  rec.append(new Float32Array([0.5, -1.5, 0.001]), new Float32Array([-0.25, 2, -0.001]));
  rec.append(new Float32Array([1]), new Float32Array([0]));
  const want = '524946463400000057415645666d74201000000001000200c05d000000770100040010006461746110000000' +
    '004000e00180ff7f2100dfffff7f0000';
  assert.equal(Buffer.from(await rec.toWav().arrayBuffer()).toString('hex'), want);
});

test('a long recording is sealed into Blobs of a few seconds; the WAV holds every block in order', async () => {
  const rate = 1000;
  const rec = new TwoTrackRecorder(rate);
  const blocks = 130; // 13 s in blocks of 100 frames
  for (let b = 0; b < blocks; b++) {
    const left = new Float32Array(100).fill(((b % 200) - 100) / 128);
    const right = new Float32Array(100).fill(-((b % 200) - 100) / 128);
    rec.append(left, right);
  }
  assert.equal(rec.frames, blocks * 100);
  assert.ok(rec.sealed.length === 2 && rec.sealed.every((s) => s instanceof Blob), `${rec.sealed.length} sealed Blobs`);
  assert.equal(rec.open.length, 30, 'the last 3 s are still open typed arrays');
  const wav = new Uint8Array(await rec.toWav().arrayBuffer());
  const v = new DataView(wav.buffer);
  assert.equal(v.getUint32(40, true), blocks * 100 * 4);
  assert.equal(wav.length, 44 + blocks * 100 * 4);
  for (let b = 0; b < blocks; b++) {
    const x = ((b % 200) - 100) / 128;
    const at = 44 + b * 400;
    assert.equal(v.getInt16(at, true), Math.round(x * 32767), `block ${b} left`);
    assert.equal(v.getInt16(at + 398, true), Math.round(-x * 32767) + 0, `block ${b} right`);
  }
});
