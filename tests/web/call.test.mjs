// web/call.js: how a live call's failures reach the page (the audio and socket parts need a browser).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Call, errorTitle, whyNotConnected } from '../../web/call.js';

function liveCall() {
  const seen = { errors: [], states: [] };
  const call = new Call({}, { error: (e) => seen.errors.push(e), state: (name, detail) => seen.states.push([name, detail]) });
  call.state = 'live';
  return { call, seen };
}

test('an unclean close during a live call is a failure, a clean one a hang-up', () => {
  const lost = liveCall();
  lost.call.onClose({ wasClean: false, code: 1006, reason: '' });
  assert.equal(lost.seen.errors.length, 1);
  assert.equal(lost.seen.errors[0].code, 'disconnected');
  assert.equal(lost.seen.errors[0].live, true);
  assert.equal(lost.call.state, 'ended');

  const ended = liveCall();
  ended.call.onClose({ wasClean: true, code: 1000, reason: '' });
  assert.deepEqual(ended.seen.errors, []);
  assert.deepEqual(ended.seen.states, [['ended', 'The server ended the call.']]);
});

test('an error message mid-call is titled an interruption, before the call a refusal', () => {
  const { call, seen } = liveCall();
  call.onMessage(new Uint8Array([0x05, ...new TextEncoder().encode('server shutting down')]).buffer);
  assert.equal(errorTitle(seen.errors[0]), 'The call was interrupted');
  assert.equal(errorTitle({ code: 'server', live: false }), 'The server refused the call');
  assert.equal(errorTitle({ code: 'nonsense', live: false }), 'Error');
});

// A fetch stub answering each path with { status, body } (body: JSON, or a string: not JSON), or
// throwing for 'down'.
function stubFetch(routes) {
  globalThis.fetch = async (path) => {
    const r = routes[path];
    if (r === 'down') throw new TypeError('Failed to fetch');
    return { status: r.status, ok: r.status === 200,
      json: async () => { if (typeof r.body === 'string') throw new SyntaxError('not JSON'); return r.body; } };
  };
}

test('a connection that never opened (1006) is explained from /health and /api/voices', async () => {
  const health = (status, extra = {}) => ({ status: status === 'ok' ? 200 : 503,
    body: { status, ready: status !== 'loading', sessions: { active: 2, max: 2 }, ...extra } });
  const voices = { status: 200, body: { voices: [], default: 'NATF2' } };
  const cases = [
    [{ '/health': health('full'), '/api/voices': voices }, /full: 2 of 2/],
    [{ '/health': health('loading'), '/api/voices': voices }, /still loading/],
    [{ '/health': health('draining'), '/api/voices': voices }, /shutting down/],
    [{ '/health': health('failing', { error: 'cuda: device lost' }), '/api/voices': voices }, /cuda: device lost/],
    [{ '/health': health('ok'), '/api/voices': { status: 401, body: {} } }, /API key.*\?token=/],
    [{ '/health': health('ok'), '/api/voices': voices }, /code 1006.*instance you reached may have been full.*proxy/],
    [{ '/health': 'down', '/api/voices': 'down' }, /Could not reach the server \(Failed to fetch\)/],
    [{ '/health': { status: 502, body: '<html>502 Bad Gateway</html>' } }, /HTTP 502 and no server status.*proxy/],
  ];
  for (const [routes, expected] of cases) {
    stubFetch(routes);
    assert.match(await whyNotConnected(1006), expected);
  }
});

test('a refused upgrade ends the call with the reason, titled as a failure to start', async () => {
  stubFetch({ '/health': { status: 503, body: { status: 'full', sessions: { active: 1, max: 1 } } } });
  const seen = { errors: [], states: [] };
  const call = new Call({}, { error: (e) => seen.errors.push(e), state: (name) => seen.states.push(name) });
  call.state = 'starting';
  call.onClose({ wasClean: false, code: 1006, reason: '' });
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(seen.errors.length, 1);
  assert.match(seen.errors[0].message, /server is full/);
  assert.equal(errorTitle(seen.errors[0]), 'Could not start the call');
  assert.deepEqual(seen.states, ['ended']);
});

test('a call lost while the device is offline says so instead of blaming the server', () => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
  Object.defineProperty(globalThis, 'navigator', { value: { onLine: false }, configurable: true });
  try {
    const { call, seen } = liveCall();
    call.onClose({ wasClean: false, code: 1006, reason: '' });
    assert.match(seen.errors[0].message, /code 1006.*this device is offline/);
  } finally {
    if (saved) Object.defineProperty(globalThis, 'navigator', saved);
    else delete globalThis.navigator;
  }
  const online = liveCall();
  online.call.onClose({ wasClean: false, code: 1006, reason: '' });
  assert.equal(online.seen.errors[0].message, 'The connection to the server was lost (code 1006).');
});
