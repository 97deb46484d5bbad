// web/jitter.js: start threshold, in-order playback, underrun handling, the delay cap, the gentle drain
// of extra delay and the target's decay.
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

test('a flush drops what is queued, keeps the counters and target, and waits for the target again', () => {
  const jb = new JitterBuffer(RATE, { targetMs: 100, stepMs: 20 });
  jb.push(ramp(0, 100));
  pullN(jb, 64);
  pullN(jb, 64); // an underrun: target 120
  jb.push(ramp(1000, 200));
  pullN(jb, 50); // playing again, 150 queued: audio from before the AudioContext stopped
  jb.flush();
  let s = jb.stats();
  assert.equal(s.fill, 0);
  assert.equal(s.dropped, 150);
  assert.equal(s.played, 150);
  assert.equal(s.target, 120);
  assert.equal(s.underruns, 1);
  const missedBefore = s.missed;
  assert.deepEqual(pullN(jb, 30), new Float32Array(30)); // waiting: silence, not an underrun's
  jb.push(ramp(5000, 120));
  const out = pullN(jb, 64);
  assert.equal(out[40], Math.fround(5040 / 10000)); // the first audio after the flush, nothing older
  s = jb.stats();
  assert.equal(s.missed, missedBefore);
  assert.equal(s.underruns, 1);
});

// A simulated call at 8 kHz: the server's 80 ms packet every 80 ms (held back during a network stall
// and delivered when it ends; `burstMs` more queued at once at the start, like the server's catch-up),
// pulled 128 frames at a time. Returns per-pull records and the whole output.
const SR = 8000;
const tone = (i) => 0.5 * Math.sin((2 * Math.PI * 200 * i) / SR);
function call(jb, { secs, burstMs = 0, stalls = [], signal = tone }) {
  const pkt = (SR * 80) / 1000;
  const arrivals = [];
  for (let k = 0; k < secs / 0.08 + 20; k++) {
    let t = Math.max(0, (k - burstMs / 80) * 0.08);
    for (const [at, dur] of stalls) if (t >= at && t < at + dur) t = at + dur;
    arrivals.push(t);
  }
  const out = new Float32Array(128);
  const all = new Float32Array(Math.ceil((secs * SR) / 128) * 128);
  const rec = [];
  let k = 0;
  for (let n = 0; n * 128 < secs * SR; n++) {
    const t = (n * 128) / SR;
    while (arrivals[k] <= t) jb.push(Float32Array.from({ length: pkt }, (_, i) => signal(k * pkt + i))), k++;
    const before = { fill: jb.fill, target: jb.target, dropped: jb.dropped };
    jb.pull(out);
    all.set(out, n * 128);
    rec.push({ t, before, fill: jb.fill, target: jb.target, dropped: jb.dropped, underruns: jb.underruns });
  }
  return { rec, all };
}
const msOf = (n) => (1000 * n) / SR;
const lowestFill = (rec, from, to) => rec.reduce((m, r) => (r.t >= from && r.t < to ? Math.min(m, r.fill) : m), Infinity);
const maxDropPerSecond = (rec) => rec.reduce((m, r, i) => Math.max(m, r.dropped - (rec[i - Math.ceil(SR / 128)] ?? rec[0]).dropped), 0);
const maxStep = (all) => all.reduce((m, v, i) => (i ? Math.max(m, Math.abs(v - all[i - 1])) : m), 0);
function assertGentle(rec, all) {
  for (const r of rec) if (r.before.fill <= r.before.target) assert.equal(r.dropped, r.before.dropped, `dropped at ${r.t}s with the fill at the target`);
  assert.ok(msOf(maxDropPerSecond(rec)) <= 50 + 8, `${msOf(maxDropPerSecond(rec))} ms dropped within 1 s`);
  assert.ok(maxStep(all) < 0.15, `a click: step ${maxStep(all)}`); // a 200 Hz tone at 0.5 steps by 0.08 at most
}

test('the catch-up burst at call start drains to the target within 10 s, gently', () => {
  const jb = new JitterBuffer(SR);
  const { rec, all } = call(jb, { secs: 15, burstMs: 200 });
  assert.equal(jb.underruns, 0);
  const low = msOf(lowestFill(rec, 10, 15));
  assert.ok(low >= 100 && low <= 120, `lowest fill over 10-15 s: ${low} ms`); // 237 ms before
  assertGentle(rec, all);
});

test('the backlog of a stall is drained gently once the stalls stop, and the target comes back down', () => {
  const jb = new JitterBuffer(SR);
  const { rec, all } = call(jb, { secs: 80, stalls: [[2, 0.3], [12, 0.2], [22, 0.2]] });
  const at = (s) => rec.find((r) => r.t >= s);
  assert.equal(at(23).underruns, 1); // the backlog of the first stall absorbed the next two...
  assert.equal(at(23).dropped, 0); // ...because it was kept while stalls recurred
  assert.equal(at(23).target, (SR * 120) / 1000);
  assert.equal(at(60).target, (SR * 100) / 1000); // 30 s after the last stall: back to the initial value
  assert.equal(jb.target, (SR * 100) / 1000); // and never below it
  const low = msOf(lowestFill(rec, 70, 80));
  assert.ok(low >= 100 && low <= 120, `lowest fill over 70-80 s: ${low} ms`);
  assertGentle(rec, all);
});

test('drain splices wait for a quiet moment that comes within patienceMs (200 ms)', () => {
  const jb = new JitterBuffer(SR);
  const speech = (i) => (i % 1600 < 960 ? tone(i) : 0); // 120 ms of tone, 80 ms of silence
  const { rec, all } = call(jb, { secs: 15, burstMs: 240, signal: speech });
  const splices = rec.map((r, n) => [r, n]).filter(([r]) => r.dropped > r.before.dropped);
  assert.ok(splices.length > 10, `${splices.length} splices`);
  for (const [, n] of splices) {
    const block = all.subarray(n * 128, n * 128 + 32); // the crossfade across the splice
    assert.ok(Math.max(...block.map(Math.abs)) < 0.05, `splice in loud audio at ${rec[n].t}s`);
  }
  assertGentle(rec, all);
});
