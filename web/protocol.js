// The chat WebSocket's messages and query string (protocol.md §1.4, §2.1). Pure code, tested under node.
// Every message is binary: one kind byte, then the payload.

export const KIND = Object.freeze({
  HANDSHAKE: 0x00, AUDIO: 0x01, TEXT: 0x02, CONTROL: 0x03, METADATA: 0x04, ERROR: 0x05, PING: 0x06,
});

// Sampling defaults of the official client (useModelParams.ts), sent unless the user changes them.
export const DEFAULT_SAMPLING = Object.freeze({
  text_temperature: 0.7, text_topk: 25, audio_temperature: 0.8, audio_topk: 250,
  pad_mult: 0, repetition_penalty_context: 64, repetition_penalty: 1.0,
});

export function audioMessage(page) {
  const msg = new Uint8Array(page.length + 1);
  msg[0] = KIND.AUDIO;
  msg.set(page, 1);
  return msg;
}

const utf8 = new TextDecoder('utf-8');

// Splits a received message into { kind, bytes } plus `text` for the kinds whose payload is UTF-8.
export function decodeMessage(data) {
  const b = data instanceof Uint8Array ? data : new Uint8Array(data);
  if (!b.length) return { kind: -1, bytes: b };
  const msg = { kind: b[0], bytes: b.subarray(1) };
  if (msg.kind === KIND.TEXT || msg.kind === KIND.ERROR || msg.kind === KIND.METADATA) msg.text = utf8.decode(msg.bytes);
  return msg;
}

// ws:// or wss:// URL of /api/chat on the page's own host, with the parameters in the official client's
// order (form encoding, so spaces travel as '+'). settings: { voice, prompt, seed (null = random per
// call), and the DEFAULT_SAMPLING keys }.
export function chatUrl(pageUrl, settings, random = Math.random) {
  const page = new URL(pageUrl);
  const scheme = page.protocol === 'https:' ? 'wss:' : 'ws:';
  const seed = () => (settings.seed ?? null) !== null ? settings.seed : Math.round(1e6 * random());
  const q = new URLSearchParams();
  for (const key of ['text_temperature', 'text_topk', 'audio_temperature', 'audio_topk', 'pad_mult']) {
    q.set(key, String(settings[key] ?? DEFAULT_SAMPLING[key]));
  }
  q.set('text_seed', String(seed()));
  q.set('audio_seed', String(seed()));
  for (const key of ['repetition_penalty_context', 'repetition_penalty']) {
    q.set(key, String(settings[key] ?? DEFAULT_SAMPLING[key]));
  }
  // libwebsockets drops the request at a decoded LF and cuts the query at a CR; the tokenizer's NFKC
  // normalization makes them spaces anyway, so a space gives the same tokens.
  q.set('text_prompt', (settings.prompt ?? '').replace(/[\r\n]+/g, ' '));
  // An empty name is refused; left out, the server uses its default voice (Start before /api/voices answers).
  if (settings.voice) q.set('voice_prompt', settings.voice);
  if ((settings.seed ?? null) !== null) q.set('seed', String(settings.seed));
  return `${scheme}//${page.host}/api/chat?${q}`;
}
