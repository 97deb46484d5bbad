// Playback AudioWorklet (runs on the audio rendering thread): plays the model's audio from a
// JitterBuffer (../jitter.js). The page posts { samples } (Float32Array at the context's rate) or
// { flush: true } (drop what is queued); the worklet posts { stats } about every 100 ms, with the output's RMS since the
// previous report.

import { JitterBuffer } from '../jitter.js';

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.jitter = new JitterBuffer(sampleRate);
    this.sumSquares = 0;
    this.count = 0;
    this.port.onmessage = (e) => {
      if (e.data.flush) this.jitter.flush();
      else if (e.data.samples) this.jitter.push(e.data.samples);
    };
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    this.jitter.pull(out[0]);
    for (let c = 1; c < out.length; c++) out[c].set(out[0]);
    for (let i = 0; i < out[0].length; i++) this.sumSquares += out[0][i] * out[0][i];
    this.count += out[0].length;
    if (this.count >= sampleRate / 10) {
      const stats = this.jitter.stats();
      stats.rms = Math.sqrt(this.sumSquares / this.count);
      stats.rate = sampleRate;
      this.port.postMessage({ stats });
      this.sumSquares = 0;
      this.count = 0;
    }
    return true;
  }
}

registerProcessor('pp-playback', PlaybackProcessor);
