// web/interruptions.js and call.js: a live call whose AudioContext stops running or whose microphone
// ends, with fake contexts, tracks and documents.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Call } from '../../web/call.js';
import { watchSound } from '../../web/interruptions.js';

// An AudioContext as far as the call uses it mid-call: state, statechange, resume(), sources.
class FakeContext extends EventTarget {
  constructor({ resumeAllowed = true } = {}) {
    super();
    this.state = 'running';
    this.sampleRate = 24000;
    this.resumeAllowed = resumeAllowed;
    this.resumes = 0;
    this.sources = [];
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

  createMediaStreamSource(stream) {
    const source = { stream, connectedTo: null, connect(node) { this.connectedTo = node; },
      disconnect() { this.connectedTo = null; } };
    this.sources.push(source);
    return source;
  }
}

class FakeTrack extends EventTarget {
  constructor() { super(); this.stopped = false; }
  stop() { this.stopped = true; }
}

function fakeStream() {
  const track = new FakeTrack();
  return { track, getTracks: () => [track], getAudioTracks: () => [track] };
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

function stubMicrophones(answer) {
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
  const requests = [];
  Object.defineProperty(globalThis, 'navigator', { configurable: true, value: { mediaDevices: {
    getUserMedia: async (constraints) => { requests.push(constraints); return answer(); },
    enumerateDevices: async () => [{ kind: 'audioinput', deviceId: 'usb', label: 'USB mic' },
      { kind: 'audiooutput', deviceId: 'spk', label: 'Speakers' }, { kind: 'audioinput', deviceId: 'bt', label: '' }],
  } } });
  return { requests, restore: () => (saved ? Object.defineProperty(globalThis, 'navigator', saved) : delete globalThis.navigator) };
}

test('a microphone that ends mid-call is reported and another one is taken without ending the call', async () => {
  const { call, seen, ctx } = liveCall();
  const first = fakeStream();
  call.useMicrophone(first);
  assert.equal(ctx.sources[0].connectedTo, call.capture);
  first.track.dispatchEvent(new Event('ended')); // headset disconnected
  assert.equal(seen.notices.length, 1);
  assert.equal(seen.notices[0].kind, 'mic');
  assert.match(seen.notices[0].message, /microphone stopped.*Choose a microphone/);
  assert.equal(call.state, 'live');

  const second = fakeStream();
  const mics = stubMicrophones(() => second);
  try {
    assert.deepEqual(await call.microphones(), [{ id: 'usb', label: 'USB mic' }, { id: 'bt', label: 'Microphone 2' }]);
    await call.switchMicrophone('usb');
    assert.deepEqual(mics.requests[0].audio.deviceId, { exact: 'usb' });
  } finally { mics.restore(); }
  assert.equal(ctx.sources[1].connectedTo, call.capture);
  assert.equal(ctx.sources[0].connectedTo, null);
  assert.equal(first.track.stopped, true);
  assert.deepEqual(seen.notices.at(-1), { kind: 'mic', message: null });
  second.track.dispatchEvent(new Event('ended'));
  assert.equal(seen.notices.length, 3, 'the new microphone is watched too');
  assert.equal(call.state, 'live');
  assert.deepEqual(seen.errors, []);
});

test('a microphone that cannot be reopened keeps the call and says why', async () => {
  const { call, seen } = liveCall();
  call.useMicrophone(fakeStream());
  const mics = stubMicrophones(() => { throw new DOMException('denied', 'NotAllowedError'); });
  try {
    await call.switchMicrophone('');
    assert.equal(mics.requests[0].audio.deviceId, undefined, 'the default microphone');
  } finally { mics.restore(); }
  assert.equal(seen.notices.at(-1).kind, 'mic');
  assert.match(seen.notices.at(-1).message, /permission was refused.*choose a microphone again\. Until then the model hears silence/);
  assert.equal(call.state, 'live');
  assert.deepEqual(seen.errors, []);
});

test('watchSound stops listening when asked', () => {
  const ctx = new FakeContext({ resumeAllowed: false });
  const reports = [];
  const stop = watchSound(ctx, null, (s) => reports.push(s));
  stop();
  ctx.become('suspended');
  assert.deepEqual(reports, []);
});
