// Playback jitter buffer: a ring of float samples at the AudioContext's rate that the playback
// AudioWorklet pulls 128 frames at a time. Pure code, tested under node.
//
// The server sends one 80 ms page per model step, so audio arrives in bursts. The buffer waits until
// `target` samples are queued before it plays; it then plays every queued sample in order (no gaps
// while data is there). On an underrun it fades out, counts the missing samples, raises the target
// (up to maxTarget) and waits again. When a burst piles up more than `target + slack`, it drops the
// oldest audio back to the target so the delay does not keep growing.

const FADE_MS = 4; // short ramps hide the click of starting, stopping or skipping

export class JitterBuffer {
  constructor(rate, { capacityMs = 8000, targetMs = 100, stepMs = 20, maxTargetMs = 400, slackMs = 240 } = {}) {
    const ms = (x) => Math.round((x * rate) / 1000);
    this.ring = new Float32Array(ms(capacityMs));
    this.read = 0;
    this.fill = 0;
    this.target = ms(targetMs);
    this.step = ms(stepMs);
    this.maxTarget = ms(maxTargetMs);
    this.slack = ms(slackMs);
    this.fade = Math.max(1, ms(FADE_MS));
    this.playing = false;
    this.starved = false; // ran dry and waits to refill: its silence counts as missed
    this.gain = 0; // current fade gain, ramps toward 1 while playing
    this.played = 0; // samples of real audio output
    this.missed = 0; // output samples that had no audio, from an underrun until playback resumed
    this.dropped = 0; // queued samples thrown away to cap the delay
    this.underruns = 0;
    this.minFill = Infinity; // lowest fill seen while playing, since the last stats() call
    this.maxFill = 0;
  }

  push(samples) {
    let src = samples;
    if (src.length > this.ring.length) src = src.subarray(src.length - this.ring.length);
    const overflow = this.fill + src.length - this.ring.length;
    if (overflow > 0) this.skip(overflow);
    let write = (this.read + this.fill) % this.ring.length;
    for (let i = 0; i < src.length; i++) {
      this.ring[write] = src[i];
      write = write + 1 === this.ring.length ? 0 : write + 1;
    }
    this.fill += src.length;
    this.maxFill = Math.max(this.maxFill, this.fill);
    if (this.playing && this.fill > this.target + this.slack) this.skip(this.fill - this.target);
  }

  // Fills `out` (the worklet's output block); zeros where there is nothing to play.
  pull(out) {
    if (!this.playing && this.fill >= this.target) {
      this.playing = true;
      this.starved = false;
      this.gain = 0;
    }
    let i = 0;
    if (this.playing) {
      const n = Math.min(out.length, this.fill);
      for (; i < n; i++) {
        // Fade out over the last samples before running dry, in over the first after a start.
        const left = this.fill - i;
        const g = Math.min(this.gain + (i + 1) / this.fade, 1, left / this.fade);
        out[i] = this.ring[this.read] * g;
        this.read = this.read + 1 === this.ring.length ? 0 : this.read + 1;
      }
      this.gain = n ? Math.min(1, this.gain + n / this.fade) : this.gain;
      this.fill -= n;
      this.played += n;
      this.minFill = Math.min(this.minFill, this.fill);
      if (i < out.length) {
        this.playing = false;
        this.starved = true;
        this.underruns++;
        this.missed += out.length - i;
        this.target = Math.min(this.maxTarget, this.target + this.step);
      }
    } else if (this.starved) {
      this.missed += out.length;
    }
    out.fill(0, i);
  }

  skip(n) {
    this.read = (this.read + n) % this.ring.length;
    this.fill -= n;
    this.dropped += n;
    this.gain = 0; // fade back in after the jump
  }

  // Counters for the page; min/max fill restart at every call.
  stats() {
    const s = { fill: this.fill, target: this.target, played: this.played, missed: this.missed,
      dropped: this.dropped, underruns: this.underruns, playing: this.playing,
      minFill: this.minFill === Infinity ? this.fill : this.minFill, maxFill: this.maxFill };
    this.minFill = Infinity;
    this.maxFill = this.fill;
    return s;
  }
}
