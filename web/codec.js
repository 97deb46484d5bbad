// Opus in the browser through WebCodecs (AudioEncoder / AudioDecoder), with the Ogg framing of ogg.js.
//
// Decision (see web/README.md): WebCodecs only, no vendored WASM codec. Current Chromium (>= 94) and
// Firefox (>= 130) ship Opus in WebCodecs; where it is missing, opusSupport() says so and the page
// shows that message instead of starting a call.

import { OggReader, OpusOggWriter, isOpusHeader } from './ogg.js';

export const RATE = 24000; // the protocol's rate, both directions
export const PACKET = 480; // 20 ms at 24 kHz: the uplink packet size the official client uses

const encoderConfig = (withOpus) => ({
  codec: 'opus', sampleRate: RATE, numberOfChannels: 1, bitrate: 32000,
  // 'audio' is the application the official client's encoder uses (protocol.md §2.2).
  ...(withOpus ? { opus: { format: 'opus', frameDuration: 20000, application: 'audio' } } : {}),
});
const DECODER_CONFIG = { codec: 'opus', sampleRate: RATE, numberOfChannels: 1 };

// Resolves to { ok, reason, encoderConfig } for this browser.
export async function opusSupport() {
  if (typeof AudioEncoder === 'undefined' || typeof AudioDecoder === 'undefined') {
    return { ok: false, reason: 'This browser has no WebCodecs audio (AudioEncoder/AudioDecoder). Use a current Chrome, Edge or Firefox.' };
  }
  try {
    let config = encoderConfig(true);
    if (!(await AudioEncoder.isConfigSupported(config)).supported) config = encoderConfig(false);
    const enc = await AudioEncoder.isConfigSupported(config);
    const dec = await AudioDecoder.isConfigSupported(DECODER_CONFIG);
    if (!enc.supported || !dec.supported) return { ok: false, reason: 'This browser cannot encode or decode Opus at 24 kHz with WebCodecs.' };
    return { ok: true, encoderConfig: config };
  } catch (e) {
    return { ok: false, reason: `Opus support check failed: ${e.message}` };
  }
}

// Microphone PCM (24 kHz, any chunk size) -> Ogg pages ready for 0x01 messages, in order: OpusHead,
// OpusTags, then one page per two 20 ms packets.
export class UplinkEncoder {
  constructor(config, onPage, onError) {
    this.onPage = onPage;
    this.writer = null; // made on the first packet, when the encoder has told its pre-skip
    this.samples = 0; // samples handed to the encoder, for timestamps
    this.encoder = new AudioEncoder({ output: (chunk, meta) => this.output(chunk, meta), error: onError });
    this.encoder.configure(config);
  }

  encode(pcm) {
    if (this.encoder.state !== 'configured' || !pcm.length) return;
    const data = new AudioData({ format: 'f32', sampleRate: RATE, numberOfFrames: pcm.length, numberOfChannels: 1,
      timestamp: Math.round((this.samples * 1e6) / RATE), data: pcm });
    this.samples += pcm.length;
    this.encoder.encode(data);
    data.close();
  }

  output(chunk, meta) {
    if (!this.writer) {
      this.writer = new OpusOggWriter({ preSkip: preSkipOf(meta), inputRate: RATE });
      for (const page of this.writer.headers()) this.onPage(page);
    }
    const packet = new Uint8Array(chunk.byteLength);
    chunk.copyTo(packet);
    const duration48k = chunk.duration ? Math.round((chunk.duration * 48000) / 1e6) : 960;
    const page = this.writer.push(packet, duration48k);
    if (page) this.onPage(page);
  }

  close() {
    if (this.encoder.state !== 'closed') this.encoder.close();
  }
}

// The encoder's own OpusHead (decoderConfig.description) states its lookahead; 312 (6.5 ms at 48 kHz,
// libopus's usual value) when it gives none. Chrome writes it in samples at the input rate (156 at
// 24 kHz), RFC 7845 counts 48 kHz samples: scaled by 48000 / the head's input rate.
export function preSkipOf(meta) {
  const d = meta?.decoderConfig?.description;
  if (!d) return 312;
  const b = d instanceof ArrayBuffer ? new Uint8Array(d) : new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  if (b.length < 16 || !isOpusHeader(b)) return 312;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const inputRate = v.getUint32(12, true);
  return inputRate ? Math.round((v.getUint16(10, true) * 48000) / inputRate) : v.getUint16(10, true);
}

// Ogg bytes from 0x01 messages -> PCM blocks via onPcm(Float32Array, sampleRate).
export class DownlinkDecoder {
  constructor(onPcm, onError) {
    this.reader = new OggReader();
    this.onPcm = onPcm;
    this.timestamp = 0;
    this.decoder = new AudioDecoder({ output: (data) => this.output(data), error: onError });
    this.decoder.configure(DECODER_CONFIG);
  }

  push(bytes) {
    for (const p of this.reader.push(bytes)) {
      if (isOpusHeader(p.data) || this.decoder.state !== 'configured') continue;
      // Timestamps only order the chunks; 80 ms is the server's packet length (protocol.md §2.3).
      this.decoder.decode(new EncodedAudioChunk({ type: 'key', timestamp: this.timestamp, data: p.data }));
      this.timestamp += 80000;
    }
  }

  output(data) {
    const pcm = new Float32Array(data.numberOfFrames);
    data.copyTo(pcm, { planeIndex: 0, format: 'f32-planar' });
    const rate = data.sampleRate;
    data.close();
    this.onPcm(pcm, rate);
  }

  get crcErrors() { return this.reader.crcErrors; }

  close() {
    if (this.decoder.state !== 'closed') this.decoder.close();
  }
}
