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
