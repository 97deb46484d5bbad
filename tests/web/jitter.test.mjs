// web/jitter.js: start threshold, in-order playback, underrun handling and the delay cap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { JitterBuffer } from '../../web/jitter.js';

const RATE = 1000; // 1 sample per ms keeps the numbers readable
const ramp = (start, n) => Float32Array.from({ length: n }, (_, i) => (start + i) / 10000);

function pullN(jb, n) {
  const out = new Float32Array(n);
  jb.pull(out);
  return out;
}

test('stays silent until the target is queued, then plays every sample in order', () => {
  const jb = new JitterBuffer(RATE, { targetMs: 100 });
  jb.push(ramp(0, 60));
  assert.deepEqual(pullN(jb, 20), new Float32Array(20));
  jb.push(ramp(60, 60));
  const played = [...pullN(jb, 40), ...pullN(jb, 40)];
  // Past the fade-in the samples are exactly those pushed, in order, with nothing skipped.
  for (let i = jb.fade; i < 80; i++) assert.equal(played[i], Math.fround(i / 10000));
  assert.ok(played[1] < Math.fround(1 / 10000)); // faded in, not started at full level
  assert.equal(jb.stats().played, 80);
});

test('an underrun is counted, raises the target and waits again', () => {
  const jb = new JitterBuffer(RATE, { targetMs: 100, stepMs: 20 });
  jb.push(ramp(0, 100));
  pullN(jb, 64);
  const out = pullN(jb, 64); // only 36 left
  assert.deepEqual(out.subarray(36), new Float32Array(28));
  const s = jb.stats();
  assert.equal(s.underruns, 1);
  assert.equal(s.missed, 28);
  assert.equal(s.target, 120);
  assert.equal(s.playing, false);
  jb.push(ramp(0, 110));
  assert.deepEqual(pullN(jb, 10), new Float32Array(10)); // below the new target: still waiting
});

test('missed counts every silent sample from the underrun until playback resumes', () => {
  const jb = new JitterBuffer(RATE, { targetMs: 100, stepMs: 20 });
  pullN(jb, 50); // before the stream starts: waiting, not missing
  jb.push(ramp(0, 100));
  pullN(jb, 64);
  pullN(jb, 64); // runs dry after 36: 28 missed
  pullN(jb, 64);
  pullN(jb, 64); // refilling to the new target (120)
  jb.push(ramp(0, 200));
  pullN(jb, 64); // playing again
  assert.equal(jb.stats().missed, 28 + 2 * 64);
});

test('a burst above target + slack is cut back to the target', () => {
  const jb = new JitterBuffer(RATE, { targetMs: 100, slackMs: 200 });
  jb.push(ramp(0, 100));
  pullN(jb, 10);
  jb.push(ramp(100, 300)); // 390 queued > 100 + 200
  const s = jb.stats();
  assert.equal(s.fill, 100);
  assert.equal(s.dropped, 290);
  // What is left is the newest audio.
  const out = pullN(jb, 100);
  assert.equal(out[50], Math.fround(350 / 10000));
});

test('pushing more than the ring holds keeps the newest samples', () => {
  const jb = new JitterBuffer(RATE, { capacityMs: 50, targetMs: 10, slackMs: 1000 });
  jb.push(ramp(0, 80));
  assert.equal(jb.stats().fill, 50);
  const out = pullN(jb, 50);
  assert.equal(out[25], Math.fround(55 / 10000)); // samples 30..79 kept
});
