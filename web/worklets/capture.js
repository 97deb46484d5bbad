// Capture AudioWorklet (runs on the audio rendering thread).
// Input 0: the microphone. Input 1: a tap of the playback node's output, so the model's audio is
// recorded exactly as it was played, in the same render quantum as the microphone sample beside it.
// Both are converted to 24 kHz and posted to the page in 20 ms blocks: { mic, model } Float32Arrays.

import { Resampler } from '../resample.js';

const RATE = 24000;
const BLOCK = 480; // 20 ms at 24 kHz, one Opus packet

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.mic = new Resampler(sampleRate, RATE);
    this.model = new Resampler(sampleRate, RATE);
    this.micBuf = new Float32Array(BLOCK);
    this.modelBuf = new Float32Array(BLOCK);
    this.fill = 0;
    this.silence = new Float32Array(0);
  }

  process(inputs, outputs) {
    const frames = outputs[0][0].length; // the render quantum
    const mic = this.mic.process(this.channel(inputs[0], frames));
    const model = this.model.process(this.channel(inputs[1], frames));
    // Both converters see the same number of input samples, so they emit the same counts.
    const n = Math.min(mic.length, model.length);
    for (let i = 0; i < n; i++) {
      this.micBuf[this.fill] = mic[i];
      this.modelBuf[this.fill] = model[i];
      if (++this.fill === BLOCK) {
        this.port.postMessage({ mic: this.micBuf, model: this.modelBuf }, [this.micBuf.buffer, this.modelBuf.buffer]);
        this.micBuf = new Float32Array(BLOCK);
        this.modelBuf = new Float32Array(BLOCK);
        this.fill = 0;
      }
    }
    return true;
  }

  // First channel of an input, or silence while nothing is connected.
  channel(input, frames) {
    if (input && input.length) return input[0];
    if (this.silence.length !== frames) this.silence = new Float32Array(frames);
    return this.silence;
  }
}

registerProcessor('pp-capture', CaptureProcessor);
