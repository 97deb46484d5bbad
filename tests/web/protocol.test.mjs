// web/protocol.js: the query string the official client sends, and message framing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chatUrl, decodeMessage, audioMessage, KIND } from '../../web/protocol.js';

test('chat URL: scheme follows the page, parameters in the official order, spaces as +', () => {
  const url = chatUrl('https://host.example:8998/?x=1', { voice: 'NATF2', prompt: 'You are nice & kind.', text_topk: 30 }, () => 0.5);
  assert.equal(url, 'wss://host.example:8998/api/chat?text_temperature=0.7&text_topk=30&audio_temperature=0.8' +
    '&audio_topk=250&pad_mult=0&text_seed=500000&audio_seed=500000&repetition_penalty_context=64' +
    '&repetition_penalty=1&text_prompt=You+are+nice+%26+kind.&voice_prompt=NATF2');
  assert.ok(chatUrl('http://127.0.0.1:1/', {}).startsWith('ws://127.0.0.1:1/api/chat?'));
});

test('line breaks in the persona travel as one space each run (libwebsockets refuses a decoded CR or LF)', () => {
  const prompt = (p) => new URL(chatUrl('http://h/', { prompt: p })).searchParams.get('text_prompt');
  assert.equal(prompt('You are Alex.\nYou fix reactors.'), 'You are Alex. You fix reactors.');
  assert.equal(prompt('A.\r\n\r\nB.\rC.\tD'), 'A. B. C.\tD');
  assert.doesNotMatch(chatUrl('http://h/', { prompt: 'a\r\nb' }), /%0[AD]/i);
});

test('no voice chosen yet: voice_prompt is left out (the server refuses an empty one)', () => {
  for (const voice of [undefined, null, '']) {
    assert.equal(new URL(chatUrl('http://h/', { voice })).searchParams.has('voice_prompt'), false);
  }
});

test('a fixed seed is sent as text_seed, audio_seed and seed', () => {
  const q = new URL(chatUrl('http://h/', { seed: 42 }, () => 0.9)).searchParams;
  assert.equal(q.get('text_seed'), '42');
  assert.equal(q.get('audio_seed'), '42');
  assert.equal(q.get('seed'), '42');
  assert.equal(new URL(chatUrl('http://h/', { seed: null }, () => 0.9)).searchParams.get('seed'), null);
});

test('messages: kind byte, UTF-8 text per message', () => {
  const text = decodeMessage(new Uint8Array([KIND.TEXT, ...new TextEncoder().encode(' héllo')]).buffer);
  assert.equal(text.kind, KIND.TEXT);
  assert.equal(text.text, ' héllo');
  const err = decodeMessage(new Uint8Array([KIND.ERROR, ...new TextEncoder().encode('server full')]));
  assert.equal(err.text, 'server full');
  assert.deepEqual(decodeMessage(new Uint8Array([0])).bytes, new Uint8Array(0));
  assert.equal(decodeMessage(new Uint8Array(0)).kind, -1);
  assert.deepEqual(audioMessage(new Uint8Array([7, 8])), new Uint8Array([1, 7, 8]));
});
