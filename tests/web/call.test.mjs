// web/call.js: how a live call's failures reach the page (the audio and socket parts need a browser).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Call, errorTitle } from '../../web/call.js';

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
