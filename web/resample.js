// Streaming sample-rate converter (windowed sinc) between the AudioContext's rate and the
// protocol's 24 kHz. Browsers differ in whether they resample a microphone into a context of another
// rate (Firefox refuses), so the page keeps the device's rate and converts here instead.
// Pure code: runs in the capture AudioWorklet, on the main thread and under node's test runner.

// Coefficients for one output sample are interpolated between PHASES precomputed filter rows, so no
// sin() runs per sample; 256 phases keep the interpolation error far below 16-bit resolution.
const PHASES = 256;

export class Resampler {
  // zeros: sinc zero crossings kept on each side (filter length and steepness).
  constructor(inRate, outRate, { zeros = 8 } = {}) {
    if (!(inRate > 0 && outRate > 0)) throw new RangeError('resampler: rates must be positive');
    this.step = inRate / outRate; // input samples per output sample
    // Cut below the lower Nyquist with room for the window's transition band.
    const fc = Math.min(1, outRate / inRate) * 0.92;
    this.half = Math.ceil(zeros / fc); // taps on each side, in input samples
    this.table = makeTable(this.half, fc);
    // History starts with half-1 zeros so the first output lines up with the first input sample.
    this.buf = new Float32Array(4096);
    this.len = this.half - 1;
    this.t = this.half - 1; // read position in buf, in input samples
  }

  // Converts one chunk; returns the output samples it completes (possibly none).
  process(input) {
    this.append(input);
    const taps = 2 * this.half;
    const avail = Math.max(0, Math.ceil((this.len - this.half - this.t) / this.step) + 1);
    const out = new Float32Array(avail);
    let count = 0;
    while (count < avail) {
      const n = Math.floor(this.t);
      if (n + this.half >= this.len) break;
      const pf = (this.t - n) * PHASES;
      const p = Math.floor(pf);
      const frac = pf - p;
      const a = p * taps;
      const b = a + taps;
      const base = n - this.half + 1;
      let acc = 0;
      for (let k = 0; k < taps; k++) {
        const c = this.table[a + k] + frac * (this.table[b + k] - this.table[a + k]);
        acc += c * this.buf[base + k];
      }
      out[count++] = acc;
      this.t += this.step;
    }
    this.discard();
    return count === avail ? out : out.subarray(0, count);
  }

  append(input) {
    if (this.len + input.length > this.buf.length) {
      const grown = new Float32Array(Math.max(this.buf.length * 2, this.len + input.length));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
  }

  // Drops the input no future output sample can reach.
  discard() {
    const keepFrom = Math.floor(this.t) - this.half + 1;
    if (keepFrom <= 0) return;
    this.buf.copyWithin(0, keepFrom, this.len);
    this.len -= keepFrom;
    this.t -= keepFrom;
  }
}

// Rows 0..PHASES of 2*half taps each; row p is the filter for a read position p/PHASES past an
// input sample. Tap k of a row weights input sample (n - half + 1 + k).
function makeTable(half, fc) {
  const taps = 2 * half;
  const table = new Float32Array((PHASES + 1) * taps);
  for (let p = 0; p <= PHASES; p++) {
    const f = p / PHASES;
    let sum = 0;
    for (let k = 0; k < taps; k++) {
      const d = f + half - 1 - k; // distance from the read position to the tap
      const x = d / half;
      const w = Math.abs(x) >= 1 ? 0 : 0.42 + 0.5 * Math.cos(Math.PI * x) + 0.08 * Math.cos(2 * Math.PI * x);
      const s = d === 0 ? 1 : Math.sin(Math.PI * fc * d) / (Math.PI * fc * d);
      table[p * taps + k] = fc * s * w;
      sum += fc * s * w;
    }
    // Unit gain at DC for every phase, so steady levels do not ripple with the phase.
    for (let k = 0; k < taps; k++) table[p * taps + k] /= sum;
  }
  return table;
}
