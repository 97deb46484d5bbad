// web/interruptions.js and call.js: a live call whose AudioContext stops running, with fake contexts
// and documents.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Call } from '../../web/call.js';
import { watchSound } from '../../web/interruptions.js';

// An AudioContext as far as the call uses it mid-call: state, statechange, resume().
class FakeContext extends EventTarget {
  constructor({ resumeAllowed = true } = {}) {
    super();
    this.state = 'running';
    this.sampleRate = 24000;
    this.resumeAllowed = resumeAllowed;
    this.resumes = 0;
  }

  become(state) {
    this.state = state;
    this.dispatchEvent(new Event('statechange'));
  }

  async resume() {
    this.resumes++;
    if (!this.resumeAllowed) throw new DOMException('not allowed', 'NotAllowedError');
    this.become('running');
  }

  close() { this.become('closed'); }
}

const tick = () => new Promise((r) => setTimeout(r, 0));

// A live call over a fake context, with what it reported and what it gave the playback worklet.
function liveCall(ctxOptions) {
  const seen = { errors: [], states: [], notices: [], played: [], flushes: 0 };
  const call = new Call({}, { error: (e) => seen.errors.push(e), state: (name) => seen.states.push(name),
    notice: (n) => seen.notices.push(n) });
  call.state = 'live';
  call.ctx = new FakeContext(ctxOptions);
  call.capture = { name: 'capture' };
  call.playback = { port: { postMessage: (m) => { if (m.flush) seen.flushes++; else seen.played.push(m.samples.length); } } };
  call.upsampleFrom = 24000;
  const page = new EventTarget();
  call.superviseSound(page);
  return { call, seen, ctx: call.ctx, page };
}

test('an interrupted AudioContext is reported, its audio not queued, and playback restarts when it runs', async () => {
  const { call, seen, ctx } = liveCall({ resumeAllowed: false });
  call.sentSamples = 4800; // 200 ms sent, 100 ms answered when the interruption comes
  call.receivedSamples = 2400;
  ctx.become('interrupted');
  assert.equal(seen.notices.length, 1);
  assert.equal(seen.notices[0].kind, 'sound');
  assert.match(seen.notices[0].message, /interrupted by another app or a phone call/);
  assert.equal(ctx.resumes, 1, 'resume() is tried at once');
  await tick();

  // 1 s of model audio arrives meanwhile: 100 ms still answers audio sent before, the rest the
  // server's silence frames. None of it is queued for playback.
  for (let i = 0; i < 25; i++) call.onDecoded(new Float32Array(960), 24000);
  assert.deepEqual(seen.played, []);
  assert.equal(call.receivedSamples, 4800);
  assert.equal(call.unplayedSamples, 24000 - 2400);
  assert.equal(call.state, 'live');

  ctx.become('running'); // Safari resumes by itself once the phone call ends
  assert.deepEqual(seen.notices.at(-1), { kind: 'sound', message: null });
  assert.equal(seen.flushes, 1, 'the audio queued before the stop is dropped');
  call.onDecoded(new Float32Array(1920), 24000);
  assert.deepEqual(seen.played, [1920]);
  assert.deepEqual(seen.errors, []);
});

test('a suspended AudioContext resumes at the next user gesture, not before', async () => {
  const { seen, ctx, page } = liveCall({ resumeAllowed: false });
  ctx.become('suspended');
  await tick();
  assert.match(seen.notices[0].message, /paused the sound.*Tap or click this page/);
  assert.equal(ctx.state, 'suspended');
  page.dispatchEvent(new Event('pointerdown'));
  assert.equal(ctx.resumes, 2);
  await tick();
  ctx.resumeAllowed = true;
  page.dispatchEvent(new Event('keydown'));
  await tick();
  assert.equal(ctx.state, 'running');
  assert.deepEqual(seen.notices.at(-1), { kind: 'sound', message: null });
  page.dispatchEvent(new Event('pointerdown'));
  assert.equal(ctx.resumes, 3, 'the gesture listeners are gone once the sound runs');
});

test('a suspension the browser lets the page undo is resumed at once', async () => {
  const { seen, ctx } = liveCall();
  ctx.become('suspended');
  await tick();
  assert.equal(ctx.state, 'running');
  assert.deepEqual(seen.notices.map((n) => n.message === null), [false, true]);
});

test('the server ending an interrupted call says the sound had stopped; a closed context ends the call', () => {
  const idle = liveCall({ resumeAllowed: false });
  idle.ctx.become('interrupted');
  idle.call.onMessage(new Uint8Array([0x05, ...new TextEncoder().encode('no audio from the client for 60 s')]).buffer);
  assert.match(idle.seen.errors[0].message, /no audio from the client for 60 s\. This device's sound had stopped \(interrupted\)/);
  assert.equal(idle.call.state, 'ended');

  const closed = liveCall();
  closed.ctx.become('closed');
  assert.equal(closed.seen.errors[0].code, 'audio');
  assert.equal(closed.call.state, 'ended');
});

test('hanging up closes the context without calling it a failure', () => {
  const { call, seen } = liveCall();
  call.hangUp();
  assert.deepEqual(seen.errors, []);
  assert.deepEqual(seen.states, ['ended']);
});

test('watchSound stops listening when asked', () => {
  const ctx = new FakeContext({ resumeAllowed: false });
  const reports = [];
  const stop = watchSound(ctx, null, (s) => reports.push(s));
  stop();
  ctx.become('suspended');
  assert.deepEqual(reports, []);
});
