// web/resample.js: gain, frequency, aliasing rejection and chunk-size independence.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Resampler } from '../../web/resample.js';

const sine = (n, f, rate, amp = 0.5) => Float32Array.from({ length: n }, (_, i) => amp * Math.sin((2 * Math.PI * f * i) / rate));

// Amplitude of frequency f in x (a single-bin DFT), skipping the filter's settling at both ends.
function amplitude(x, f, rate, skip) {
  let re = 0;
  let im = 0;
  const n = x.length - 2 * skip;
  for (let i = skip; i < x.length - skip; i++) {
    re += x[i] * Math.cos((2 * Math.PI * f * i) / rate);
    im += x[i] * Math.sin((2 * Math.PI * f * i) / rate);
  }
  return (2 * Math.hypot(re, im)) / n;
}

for (const [from, to] of [[48000, 24000], [44100, 24000], [24000, 48000], [24000, 44100]]) {
  test(`${from} -> ${to}: a 1 kHz tone keeps its level and frequency`, () => {
    const r = new Resampler(from, to);
    const out = r.process(sine(from, 1000, from));
    // Output count follows the ratio, less the filter delay still held back.
    assert.ok(Math.abs(out.length - to) <= r.half * (to / from) + 2, `got ${out.length} samples`);
    // 0.5 in; a Blackman-windowed sinc is flat to well under 0.1 dB at 1 kHz.
    assert.ok(Math.abs(amplitude(out, 1000, to, 200) - 0.5) < 0.005);
    assert.ok(amplitude(out, 1100, to, 200) < 0.02); // the energy sits at 1 kHz, not beside it
  });
}

test('48 kHz -> 24 kHz rejects a 16 kHz tone (it would alias to 8 kHz)', () => {
  const out = new Resampler(48000, 24000).process(sine(48000, 16000, 48000));
  // Blackman stop band is about -74 dB; demand -60 dB relative to the 0.5 input.
  assert.ok(amplitude(out, 8000, 24000, 200) < 0.5e-3);
});

test('output does not depend on how the input is chunked', () => {
  const input = sine(20000, 440, 44100);
  const whole = new Resampler(44100, 24000).process(input);
  const r = new Resampler(44100, 24000);
  const parts = [];
  for (let off = 0, k = 0; off < input.length; k++) {
    const n = [128, 1, 333, 4096, 7][k % 5];
    parts.push(...r.process(input.subarray(off, off + n)));
    off += n;
  }
  assert.equal(parts.length, whole.length);
  for (let i = 0; i < whole.length; i++) assert.ok(Math.abs(parts[i] - whole[i]) < 1e-6, `sample ${i}`);
});

test('rejects non-positive rates', () => {
  assert.throws(() => new Resampler(0, 24000), RangeError);
});
