// Playback jitter buffer: a ring of float samples at the AudioContext's rate that the playback
// AudioWorklet pulls 128 frames at a time. Pure code, tested under node.
//
// The server sends one 80 ms page per model step, so audio arrives in bursts. The buffer waits until
// `target` samples are queued before it plays; it then plays every queued sample in order (no gaps
// while data is there). On an underrun it fades out, counts the missing samples, raises the target
// (up to maxTarget) and waits again.
//
// Extra delay does not stay for the rest of the call: when the lowest fill over a `windowMs` window stays more than `marginMs`
// above the target (the server's catch-up burst at call start, the backlog a network stall leaves),
// the excess is drained in splices of at most `chunkMs`: playback jumps ahead and the FADE_MS before
// the jump is crossfaded into the audio after it, so there is no click. A splice waits up to
// `patienceMs` for a quiet moment (peak under a tenth of the recent level), never leaves the fill
// below the target, and all splices together remove at most `drainRate` of the time played (5 %:
// 50 ms per second). After an underrun, or a near miss (fill under `nearMs`), the backlog is kept as
// protection for `calmMs`; after every further `calmMs` without either the target is lowered one step
// (never below its initial value) and what is above it drains. Only a huge burst, more than
// `target + slack` (500 ms) queued, is still cut back to the target at once.

const FADE_MS = 4; // short ramps hide the click of starting, stopping or skipping
const QUIET = 0.1; // a splice prefers audio whose peak is under this fraction of the recent peak...
const SILENT = 1e-3; // ...or under this absolute level

export class JitterBuffer {
  constructor(rate, { capacityMs = 8000, targetMs = 100, stepMs = 20, maxTargetMs = 400, slackMs = 500,
    windowMs = 3000, marginMs = 10, chunkMs = 8, drainRate = 0.05, patienceMs = 200, calmMs = 30000,
    nearMs = 20 } = {}) {
    const ms = (x) => Math.round((x * rate) / 1000);
    this.rate = rate;
    this.ring = new Float32Array(ms(capacityMs));
    this.read = 0;
    this.fill = 0;
    this.target = ms(targetMs);
    this.baseTarget = this.target;
    this.step = ms(stepMs);
    this.maxTarget = ms(maxTargetMs);
    this.slack = ms(slackMs);
    this.fade = Math.max(1, ms(FADE_MS));
    this.window = Math.max(1, ms(windowMs));
    this.margin = ms(marginMs);
    this.chunk = Math.max(1, ms(chunkMs));
    this.drainRate = drainRate;
    this.patience = ms(patienceMs);
    this.calmAfter = ms(calmMs);
    this.near = ms(nearMs);
    this.playing = false;
    this.starved = false; // ran dry and waits to refill: its silence counts as missed
    this.gain = 0; // current fade gain, ramps toward 1 while playing
    this.played = 0; // samples of real audio output
    this.missed = 0; // output samples that had no audio, from an underrun until playback resumed
    this.dropped = 0; // queued samples thrown away to cap or drain the delay
    this.underruns = 0;
    this.minFill = Infinity; // lowest fill seen while playing, since the last stats() call
    this.maxFill = 0;
    this.safe = Infinity; // samples played since the last underrun or near miss
    this.calm = 0; // ...and since the last target decrease
    this.loud = 0; // recent peak level of the output (decays over about a second)
    this.resetDrain();
  }

  resetDrain() {
    this.winMin = Infinity; // lowest fill in the current window
    this.winClock = 0; // samples played in it
    this.excess = 0; // samples still to drain
    this.credit = 0; // samples the rate limit allows to splice away now
    this.waited = 0; // samples played while a splice waited for a quiet moment
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
    if (this.playing && this.fill > this.target + this.slack) {
      this.skip(this.fill - this.target);
      this.resetDrain();
    }
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
      this.splice(out.length);
      const n = Math.min(out.length, this.fill);
      let peak = 0;
      for (; i < n; i++) {
        // Fade out over the last samples before running dry, in over the first after a start.
        const left = this.fill - i;
        const g = Math.min(this.gain + (i + 1) / this.fade, 1, left / this.fade);
        const v = this.ring[this.read];
        peak = Math.max(peak, Math.abs(v));
        out[i] = v * g;
        this.read = this.read + 1 === this.ring.length ? 0 : this.read + 1;
      }
      this.gain = n ? Math.min(1, this.gain + n / this.fade) : this.gain;
      this.fill -= n;
      this.played += n;
      this.minFill = Math.min(this.minFill, this.fill);
      this.loud = Math.max(peak, this.loud * Math.max(0, 1 - n / this.rate));
      if (i < out.length) {
        this.playing = false;
        this.starved = true;
        this.underruns++;
        this.missed += out.length - i;
        this.target = Math.min(this.maxTarget, this.target + this.step);
        this.safe = this.calm = 0;
        this.resetDrain();
      } else {
        this.watch(n);
      }
    } else if (this.starved) {
      this.missed += out.length;
    }
    out.fill(0, i);
  }

  // After a block of n samples played without running dry: target decay and the drain's window.
  watch(n) {
    if (this.fill < this.near) {
      this.safe = this.calm = 0;
      this.excess = 0;
    } else {
      this.safe += n;
      this.calm += n;
    }
    if (this.calm >= this.calmAfter) {
      this.calm = 0;
      this.target = Math.max(this.baseTarget, this.target - this.step);
    }
    this.winMin = Math.min(this.winMin, this.fill);
    this.winClock += n;
    if (this.winClock >= this.window) {
      const over = this.winMin - this.target;
      this.excess = this.safe >= this.calmAfter && over > this.margin ? over : 0;
      this.winMin = Infinity;
      this.winClock = 0;
    }
  }

  // Before a block of n samples plays: splice away part of the excess if the rate limit, the fill
  // and the audio allow it.
  splice(n) {
    this.credit = Math.min(this.chunk, this.credit + n * this.drainRate);
    if (this.excess <= 0) return;
    const d = Math.min(this.chunk, this.excess, this.fill - Math.max(this.target, this.fade));
    if (d <= 0 || this.credit < d) return;
    this.waited += n;
    const len = this.ring.length;
    let peak = 0;
    for (let j = 0; j < d + this.fade; j++) peak = Math.max(peak, Math.abs(this.ring[(this.read + j) % len]));
    if (peak > Math.max(SILENT, QUIET * this.loud) && this.waited <= this.patience) return;
    for (let j = 0; j < this.fade; j++) {
      const w = (j + 1) / (this.fade + 1);
      const a = (this.read + j) % len;
      const b = (this.read + d + j) % len;
      this.ring[b] = this.ring[a] * (1 - w) + this.ring[b] * w;
    }
    this.read = (this.read + d) % len;
    this.fill -= d;
    this.dropped += d;
    this.excess -= d;
    this.winMin -= d; // the window's lowest point so far is now that much lower too
    this.credit -= d;
    this.waited = 0;
  }

  // Drops everything queued (counted as dropped) and waits for `target` again, keeping the counters
  // and the target learned so far: after the AudioContext stopped, the queue holds audio from before
  // the stop, which would now play late.
  flush() {
    this.dropped += this.fill;
    this.fill = 0;
    this.playing = false;
    this.starved = false; // the silence until the next start is no underrun
    this.gain = 0;
    this.resetDrain();
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
