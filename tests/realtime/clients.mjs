// The clients of tests/realtime/run.mjs, run from the directory npm installed them into (so that
// `openai`, `@openai/agents-realtime` and `ws` resolve there), with NODE_EXTRA_CA_CERTS naming
// the server's self-signed certificate: TLS is checked, not switched off.
//
//   node clients.mjs --base https://127.0.0.1:PORT --key KEY --wav speech-24k.wav
//
// Each client speaks speech-24k.wav at real-time pace and checks what comes back. Exit 0 pass, 1 fail.

import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { RealtimeAgent, RealtimeSession, OpenAIRealtimeWebSocket } from '@openai/agents-realtime';

const log = (...m) => console.log('[realtime-test]', ...m);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const utf8 = new TextDecoder('utf-8', { fatal: true });

function parseArgs(argv) {
  const a = {};
  for (let i = 2; i < argv.length; i += 2) a[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const k of ['base', 'key', 'wav']) if (!a[k]) throw new Error(`missing --${k}`);
  a.wsBase = a.base.replace(/^http/, 'ws');
  return a;
}

// The 16-bit mono samples of a WAV file (its "data" chunk).
function wavSamples(path) {
  const b = readFileSync(path);
  for (let o = 12; o + 8 <= b.length;) {
    const id = b.toString('latin1', o, o + 4), size = b.readUInt32LE(o + 4);
    if (id === 'data') return new Int16Array(b.buffer.slice(b.byteOffset + o + 8, b.byteOffset + o + 8 + size));
    o += 8 + size + (size & 1);
  }
  throw new Error(`${path}: no data chunk`);
}

// G.711 μ-law, as a telephone network sends it (the caller's side of the Twilio replay).
function ulaw(s) {
  let sign = 0;
  if (s < 0) { s = -s; sign = 0x80; }
  s = Math.min(s, 32635) + 0x84;
  let exp = 7;
  for (let mask = 0x4000; !(s & mask) && exp > 0; mask >>= 1) exp--;
  return ~(sign | (exp << 4) | ((s >> (exp + 3)) & 0x0f)) & 0xff;
}

// 24 kHz to 8 kHz μ-law: a 3-tap average before taking every third sample (enough for a test caller).
function telephone(samples) {
  const out = Buffer.alloc(Math.floor(samples.length / 3));
  for (let i = 0; i < out.length; i++) out[i] = ulaw(Math.round((samples[3 * i] + samples[3 * i + 1] + samples[3 * i + 2]) / 3));
  return out;
}

// Calls send(chunk) with consecutive chunks of `bytesPerChunk` at one chunk per `ms`, on the wall clock.
async function stream(buf, bytesPerChunk, ms, send) {
  const t0 = Date.now();
  for (let i = 0, k = 0; i < buf.length; i += bytesPerChunk, k++) {
    send(buf.subarray(i, Math.min(buf.length, i + bytesPerChunk)));
    const wait = t0 + (k + 1) * ms - Date.now();
    if (wait > 0) await sleep(wait);
  }
}

// Audio deltas against the wall clock: for the longest response, seconds of audio received per
// second elapsed between its first and last delta.
function paceOf(deltas, bytesPerSecond) {
  const byResponse = new Map();
  for (const d of deltas) {
    const r = byResponse.get(d.response) || { first: d.t, last: d.t, bytes: 0, n: 0 };
    r.last = d.t;
    r.bytes += d.bytes;
    r.n++;
    byResponse.set(d.response, r);
  }
  const longest = [...byResponse.values()].sort((a, b) => b.n - a.n)[0];
  assert.ok(longest && longest.n >= 10, `a response of at least 10 audio deltas (got ${longest?.n ?? 0})`);
  // n deltas span n - 1 intervals: compare their audio with the time between the first and last.
  const audio = (longest.bytes * (longest.n - 1)) / longest.n / bytesPerSecond, wall = (longest.last - longest.first) / 1000;
  return { ratio: audio / wall, audio, wall, deltas: longest.n };
}

// Raw text of each message as the socket delivered it: must be UTF-8 (a transcript cut inside a
// character would not be).
function checkUtf8(raw) {
  const buf = Buffer.isBuffer(raw) ? raw : Buffer.from(raw);
  utf8.decode(buf);
  return JSON.parse(buf.toString('utf8'));
}

// 1. The openai package's OpenAIRealtimeWS, pointed at the server by base URL.
async function openaiClient(a, speech) {
  const client = new OpenAI({ apiKey: a.key, baseURL: `${a.base}/v1` });
  const rt = new OpenAIRealtimeWS({ model: 'personaplex-7b' }, client);
  const seen = {}, deltas = [], errors = [], transcript = [];
  let t0 = 0;
  rt.socket.on('message', (raw) => {
    const ev = checkUtf8(raw);
    seen[ev.type] = (seen[ev.type] || 0) + 1;
    if (ev.type === 'response.output_audio.delta')
      deltas.push({ t: Date.now() - t0, response: ev.response_id, bytes: Buffer.from(ev.delta, 'base64').length });
    if (ev.type === 'response.output_audio_transcript.delta') transcript.push(ev.delta);
    if (ev.type === 'error') errors.push({ code: ev.error.code, t: Date.now() - t0 });
  });
  rt.on('error', () => {}); // error events are counted above
  await new Promise((res, rej) => { rt.socket.once('open', res); rt.socket.once('error', rej); });
  t0 = Date.now();
  const updated = new Promise((res) => rt.once('session.updated', res));
  rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'You enjoy having a good conversation.',
    audio: { input: { format: { type: 'audio/pcm', rate: 24000 } }, output: { voice: 'NATF2', format: { type: 'audio/pcm', rate: 24000 } } } } });
  const session = (await updated).session;
  assert.equal(session.instructions, 'You enjoy having a good conversation.');
  assert.equal(session.audio.output.voice, 'NATF2');
  const pcm = Buffer.from(speech.buffer, speech.byteOffset, speech.byteLength);
  let badAt = 0;
  const bad = (async () => { // bad input in the middle of the call: each answered, the call goes on
    await sleep(2000);
    badAt = Date.now() - t0;
    rt.socket.send('{"type": "input_audio_buffer.append", "audio": ');
    rt.send({ type: 'no.such.event' });
    rt.send({ type: 'input_audio_buffer.append', audio: '***not base64***' });
    rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] } });
    rt.send({ type: 'session.update', session: { audio: { input: { format: { type: 'audio/pcmu' } } } } });
  })();
  await stream(pcm, 4800, 100, (chunk) => rt.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') }));
  await bad;
  rt.send({ type: 'input_audio_buffer.commit' });
  await sleep(500);
  rt.close();
  await sleep(200);
  const codes = errors.map((e) => e.code).sort();
  log('openai: events', JSON.stringify(seen));
  log('openai: errors', JSON.stringify(codes), 'transcript', JSON.stringify(transcript.join('').slice(0, 80)));
  assert.deepEqual(codes, ['invalid_audio', 'invalid_json', 'invalid_value', 'unknown_event', 'unsupported_event']);
  for (const t of ['session.created', 'session.updated', 'response.created', 'response.content_part.added',
    'response.output_audio_transcript.delta', 'input_audio_buffer.committed'])
    assert.ok(seen[t] > 0, `openai: a ${t} event`);
  // OpenAI sends these over WebRTC and SIP only; a strict WebSocket client stops on a type it lacks
  for (const t of ['output_audio_buffer.started', 'output_audio_buffer.stopped'])
    assert.ok(!seen[t], `openai: no ${t} over a WebSocket`);
  assert.ok(deltas.some((d) => d.t > badAt + 500), 'audio keeps coming after the bad events');
  const pace = paceOf(deltas, 48000);
  log('openai: pace', JSON.stringify(pace));
  assert.ok(pace.ratio > 0.8 && pace.ratio < 1.25, `audio deltas at real-time pace (${pace.ratio.toFixed(2)})`);
}

// 2. @openai/agents-realtime: a RealtimeSession over its WebSocket transport.
async function agentsClient(a, speech) {
  const agent = new RealtimeAgent({ name: 'persona', instructions: 'You are a wise and friendly teacher.' });
  const transport = new OpenAIRealtimeWebSocket({ url: `${a.wsBase}/v1/realtime?model=personaplex-7b` });
  const session = new RealtimeSession(agent, { transport, model: 'personaplex-7b',
    config: { audio: { output: { voice: 'NATF2' } } } });
  const seen = {}, deltas = [];
  let audioBytes = 0, t0 = Date.now(), sessionVoice = null, instructions = null;
  session.on('audio', (ev) => { audioBytes += ev.data.byteLength; });
  session.on('error', (e) => log('agents: error', JSON.stringify(e.error?.error ?? e.error ?? e)));
  session.on('transport_event', (ev) => {
    seen[ev.type] = (seen[ev.type] || 0) + 1;
    if (ev.type === 'session.updated') { sessionVoice = ev.session.audio.output.voice; instructions = ev.session.instructions; }
    if (ev.type === 'response.output_audio.delta')
      deltas.push({ t: Date.now() - t0, response: ev.response_id, bytes: Buffer.from(ev.delta, 'base64').length });
    if (ev.type === 'response.output_audio_transcript.delta') utf8.decode(Buffer.from(ev.delta, 'utf8'));
  });
  await session.connect({ apiKey: a.key });
  t0 = Date.now();
  const pcm = Buffer.from(speech.buffer, speech.byteOffset, speech.byteLength);
  await stream(pcm, 4800, 100, (chunk) => session.sendAudio(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.length)));
  await sleep(300);
  session.close();
  log('agents: events', JSON.stringify(seen), 'audio bytes', audioBytes);
  assert.equal(sessionVoice, 'NATF2', 'the session took the voice');
  assert.equal(instructions, 'You are a wise and friendly teacher.', 'the session took the agent\'s instructions');
  assert.ok(seen['response.created'] > 0 && seen['response.output_audio_transcript.delta'] > 0, 'agents: a response with a transcript');
  assert.ok(audioBytes > 48000, `agents: the session played more than 1 s of audio (${audioBytes} bytes)`);
  const pace = paceOf(deltas, 48000);
  log('agents: pace', JSON.stringify(pace));
  assert.ok(pace.ratio > 0.8 && pace.ratio < 1.25, `agents: audio at real-time pace (${pace.ratio.toFixed(2)})`);
}

// Opens a raw socket; resolves with it once open, rejects with the HTTP status when refused.
function open(url, key) {
  return new Promise((res, rej) => {
    const ws = new WebSocket(url, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
    ws.once('open', () => res(ws));
    ws.once('unexpected-response', (req, r) => rej(new Error(`HTTP ${r.statusCode}`)));
    ws.once('error', rej);
  });
}

// 3. A Twilio Media Streams replay: the documented message sequence of one call.
async function twilioReplay(a, speech) {
  const ws = await open(`${a.wsBase}/v1/twilio`, a.key);
  const sid = 'MZ18ad3ab5a668481ce02b83e7395059f0', seen = {}, media = [];
  let closed = null, t0 = Date.now();
  ws.on('message', (raw) => {
    const ev = checkUtf8(raw);
    seen[ev.event] = (seen[ev.event] || 0) + 1;
    assert.equal(ev.streamSid, sid, 'every message names the stream');
    if (ev.event === 'media') media.push({ t: Date.now() - t0, bytes: Buffer.from(ev.media.payload, 'base64').length });
    if (ev.event === 'mark') ws.send(JSON.stringify({ event: 'mark', streamSid: sid, mark: ev.mark })); // played
  });
  const done = new Promise((res) => ws.on('close', (code) => { closed = code; res(); }));
  let seq = 1;
  const send = (m) => ws.send(JSON.stringify({ ...m, sequenceNumber: String(seq++) }));
  ws.send(JSON.stringify({ event: 'connected', protocol: 'Call', version: '1.0.0' }));
  send({ event: 'start', streamSid: sid, start: { streamSid: sid, accountSid: 'AC00', callSid: 'CA00', tracks: ['inbound'],
    customParameters: { voice: 'NATM1', prompt: 'You answer the phone for a bakery.' },
    mediaFormat: { encoding: 'audio/x-mulaw', sampleRate: 8000, channels: 1 } } });
  t0 = Date.now();
  let chunk = 1;
  await stream(telephone(speech), 160, 20, (b) => send({ event: 'media', streamSid: sid,
    media: { track: 'inbound', chunk: String(chunk), timestamp: String(20 * chunk++), payload: b.toString('base64') } }));
  send({ event: 'stop', streamSid: sid, stop: { accountSid: 'AC00', callSid: 'CA00' } });
  await Promise.race([done, sleep(5000)]);
  log('twilio: events', JSON.stringify(seen), 'close', closed);
  assert.equal(closed, 1000, 'the server ends the stream normally after `stop`');
  assert.ok(media.length >= 20, `twilio: media came back (${media.length} messages)`);
  assert.ok(media.every((m) => m.bytes >= 638 && m.bytes <= 642), 'each media message is 80 ms of 8 kHz μ-law');
  const span = (media[media.length - 1].t - media[0].t) / 1000, audio = ((media.length - 1) * 0.08);
  log('twilio: pace', (audio / span).toFixed(2));
  assert.ok(audio / span > 0.8 && audio / span < 1.25, `twilio: media at real-time pace (${(audio / span).toFixed(2)})`);
  assert.ok(seen.clear > 0, 'twilio: a `clear` when the caller talks over the model');
}

// 4. The edges: no key, G.711 on the realtime endpoint, and the error limit.
async function edges(a) {
  await assert.rejects(open(`${a.wsBase}/v1/realtime`, null), /HTTP 401/, 'no API key: 401');
  await assert.rejects(open(`${a.wsBase}/v1/realtime`, 'wrong-key'), /HTTP 401/, 'a wrong API key: 401');

  const ws = await open(`${a.wsBase}/v1/realtime`, a.key);
  const deltas = [];
  ws.on('message', (raw) => {
    const ev = checkUtf8(raw);
    if (ev.type === 'response.output_audio.delta') deltas.push(Buffer.from(ev.delta, 'base64').length);
  });
  ws.send(JSON.stringify({ type: 'session.update', session: { input_audio_format: 'g711_ulaw', output_audio_format: 'g711_ulaw' } }));
  ws.send(JSON.stringify({ type: 'response.create' }));
  await stream(Buffer.alloc(8000 * 2, 0xff), 800, 100, (b) => ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: b.toString('base64') })));
  assert.ok(deltas.length > 5 && deltas.every((n) => n >= 638 && n <= 642), `g711_ulaw deltas of 80 ms at 8 kHz (${deltas.slice(0, 5)})`);
  ws.close();

  const spam = await open(`${a.wsBase}/v1/realtime`, a.key);
  let errors = 0;
  spam.on('message', (raw) => { if (checkUtf8(raw).type === 'error') errors++; });
  const closed = new Promise((res) => spam.on('close', (code) => res(code)));
  for (let i = 0; i < 40; i++) spam.send(JSON.stringify({ type: `bogus.${i}` }));
  const code = await Promise.race([closed, sleep(5000).then(() => 'open')]);
  log('edges: g711 deltas', deltas.length, 'spam errors', errors, 'close', code);
  assert.equal(code, 1008, 'the socket closes past the error limit');
  assert.equal(errors, 33, 'each bad event before the limit got its error, and the limit one its own');
}

async function main() {
  const a = parseArgs(process.argv);
  const speech = wavSamples(a.wav);
  const failures = [];
  for (const [name, run] of [['openai', openaiClient], ['agents', agentsClient], ['twilio', twilioReplay], ['edges', edges]]) {
    try {
      await run(a, speech);
      log(name, 'PASS');
    } catch (e) {
      failures.push(name);
      log(name, 'FAIL:', e.stack || e);
    }
  }
  log(failures.length ? `FAILED: ${failures.join(', ')}` : 'all clients passed');
  process.exit(failures.length ? 1 : 0);
}

main();
