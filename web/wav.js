// The conversation recording: two 16-bit channels at 24 kHz, left = the model as it was played,
// right = the microphone as it was sent, sample-aligned because both come from the same capture
// worklet block (see worklets/capture.js). Pure code, tested under node.

export class TwoTrackRecorder {
  constructor(rate) {
    this.rate = rate;
    this.sealed = []; // Blobs of SEAL_SECONDS each, in order
    this.open = []; // interleaved Int16Array blocks (L, R, L, R, ...) since the last seal
    this.openFrames = 0;
    this.frames = 0;
  }

  // left and right have the same length (one capture block each).
  append(left, right) {
    const n = Math.min(left.length, right.length);
    const block = new Int16Array(2 * n);
    for (let i = 0; i < n; i++) {
      block[2 * i] = toInt16(left[i]);
      block[2 * i + 1] = toInt16(right[i]);
    }
    this.open.push(block);
    this.openFrames += n;
    this.frames += n;
    // A Blob built from typed arrays copies them: sealing a few seconds at a time costs a small copy now and
    // lets the download reference the sealed Blobs instead of copying the whole call at once.
    if (this.openFrames >= SEAL_SECONDS * this.rate) {
      this.sealed.push(new Blob(this.open));
      this.open = [];
      this.openFrames = 0;
    }
  }

  get seconds() { return this.frames / this.rate; }

  // The whole recording as a RIFF/WAVE file (PCM, little-endian). Int16Array bytes are in the platform's
  // order, little-endian wherever browsers run.
  toWav() {
    return new Blob([wavHeader(this.frames, 2, this.rate), ...this.sealed, ...this.open], { type: 'audio/wav' });
  }
}

const SEAL_SECONDS = 5;

function toInt16(x) {
  const c = x > 1 ? 1 : x < -1 ? -1 : x;
  return Math.round(c * 32767);
}

export const WAV_HEADER_BYTES = 44;

// The RIFF/WAVE header of `frames` frames of 16-bit PCM.
function wavHeader(frames, channels, rate) {
  const dataBytes = frames * channels * 2;
  const out = new Uint8Array(WAV_HEADER_BYTES);
  const v = new DataView(out.buffer);
  const tag = (off, s) => { for (let i = 0; i < 4; i++) out[off + i] = s.charCodeAt(i); };
  tag(0, 'RIFF');
  v.setUint32(4, 36 + dataBytes, true);
  tag(8, 'WAVE');
  tag(12, 'fmt ');
  v.setUint32(16, 16, true);
  v.setUint16(20, 1, true); // PCM
  v.setUint16(22, channels, true);
  v.setUint32(24, rate, true);
  v.setUint32(28, rate * channels * 2, true);
  v.setUint16(32, channels * 2, true);
  v.setUint16(34, 16, true);
  tag(36, 'data');
  v.setUint32(40, dataBytes, true);
  return out;
}
