// One conversation: microphone -> Opus/Ogg -> WebSocket -> Opus -> jitter buffer -> speakers, plus
// the two-track recording. The page (app.js) drives it and renders what it reports through `events`:
//   state(name, detail)   'starting' | 'waiting' (socket open, server preparing) | 'live' | 'ended'
//   text(piece)           a transcript piece from the model
//   levels({ mic, model }) RMS of the latest 20 ms of each side
//   stats({...})          delay and buffer figures, about every 100 ms
//   error({ code, message, live }) a failure (live: the call had started); the call ends right after
//                         with state 'ended'
//   notice({ kind, message }) the call goes on but lost its sound ('sound': the AudioContext stopped
//                         running) or its microphone ('mic'); message null when that is over

import { opusSupport, UplinkEncoder, DownlinkDecoder, RATE } from './codec.js';
import { KIND, audioMessage, decodeMessage, chatUrl } from './protocol.js';
import { Resampler } from './resample.js';
import { TwoTrackRecorder } from './wav.js';
import { watchSound, soundNotice, MIC_LOST_NOTICE } from './interruptions.js';

const SILENCE_TIMEOUT_MS = 10000; // what the official client allows once the call is live
// AudioContext.resume() never settles on a machine without a sound device (seen in Firefox).
const AUDIO_START_MS = 5000;

export class CallError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

const ERROR_TITLES = { insecure: 'Not a secure page', codec: 'Browser not supported', 'mic-denied': 'No microphone access',
  audio: 'No sound output', 'no-mic': 'No microphone', server: 'The server refused the call',
  'not-connected': 'Could not start the call', disconnected: 'Disconnected', internal: 'Something went wrong' };

// The alert's title for an error event. Once live, a 0x05 or a lost connection is no refusal.
export function errorTitle({ code, live }) {
  return live ? 'The call was interrupted' : ERROR_TITLES[code] ?? 'Error';
}

export class Call {
  constructor(settings, events) {
    this.settings = settings;
    this.events = events;
    this.state = 'idle';
    this.recording = new TwoTrackRecorder(RATE);
    this.sentSamples = 0; // microphone samples sent, at 24 kHz
    this.receivedSamples = 0; // model samples decoded, at 24 kHz
    this.textPieces = 0;
    this.serverError = null; // the last 0x05 message
    this.lastMessageAt = 0;
    this.soundStopped = null; // the AudioContext's state while it is not running during the call
    this.micLost = false; // the microphone track ended
    this.unplayedSamples = 0; // model audio received while the sound was stopped, at 24 kHz
  }

  // Must be called from a user gesture (it creates the AudioContext). Failures are reported through
  // events.error, never thrown.
  async start() {
    try {
      this.setState('starting');
      await this.openAudio();
      this.openSocket();
    } catch (e) {
      this.fail(e instanceof CallError ? e : new CallError('internal', e.message || String(e)));
    }
  }

  async openAudio() {
    if (!window.isSecureContext) {
      throw new CallError('insecure', 'The microphone only works on a secure page: open this over https:// ' +
        '(or on http://localhost, e.g. through an SSH tunnel).');
    }
    const support = await opusSupport();
    if (!support.ok) throw new CallError('codec', support.reason);
    this.encoderConfig = support.encoderConfig;
    const ctx = new AudioContext({ latencyHint: 'interactive' });
    this.ctx = ctx;
    await Promise.all([ctx.audioWorklet.addModule(new URL('./worklets/capture.js', import.meta.url)),
      ctx.audioWorklet.addModule(new URL('./worklets/playback.js', import.meta.url))]);
    const stream = await getMicrophone();
    if (this.state === 'ended') { // hung up while the permission prompt was open
      stream.getTracks().forEach((t) => t.stop());
      return;
    }
    await withTimeout(ctx.resume(), AUDIO_START_MS, new CallError('audio',
      'The audio output did not start. Check that a speaker or headphones are available and try again.'));
    this.playback = new AudioWorkletNode(ctx, 'pp-playback', { outputChannelCount: [1] });
    this.capture = new AudioWorkletNode(ctx, 'pp-capture', { numberOfInputs: 2, outputChannelCount: [1] });
    this.useMicrophone(stream);
    this.playback.connect(ctx.destination);
    this.playback.connect(this.capture, 0, 1);
    this.capture.connect(ctx.destination); // silent; keeps the node pulled by the graph
    this.capture.port.onmessage = (e) => this.onCaptured(e.data);
    this.playback.port.onmessage = (e) => this.onPlaybackStats(e.data.stats);
    this.upsampleFrom = 0; // the decoder's output rate, known at its first output
    this.superviseSound(globalThis.document);
  }

  // From now on the context's state changes reach onSoundState; gestures: where a user's tap or key
  // may resume it (the page's document).
  superviseSound(gestures) {
    this.stopWatchingSound = watchSound(this.ctx, gestures, (s) => this.onSoundState(s));
  }

  // Connects a microphone stream to the capture worklet in place of the current one (stopped).
  useMicrophone(stream) {
    const old = { source: this.micSource, stream: this.stream };
    this.stream = stream;
    this.micSource = this.ctx.createMediaStreamSource(stream);
    this.micSource.connect(this.capture, 0, 0);
    old.source?.disconnect();
    old.stream?.getTracks().forEach((t) => t.stop());
    const track = stream.getAudioTracks()[0];
    track?.addEventListener('ended', () => { if (this.stream === stream) this.onMicrophoneEnded(); });
  }

  // The microphone went away mid-call. The capture worklet keeps sending 20 ms blocks of silence in
  // its place, so the uplink stays real time and the call can go on once the user picks another one.
  onMicrophoneEnded() {
    if (this.state === 'ended' || this.micLost) return;
    this.micLost = true;
    this.events.notice?.({ kind: 'mic', message: MIC_LOST_NOTICE });
  }

  // The audio inputs the user can switch to: [{ id, label }] (labels are known once a microphone
  // has been granted, which it was to start the call).
  async microphones() {
    const devices = await navigator.mediaDevices?.enumerateDevices?.() ?? [];
    return devices.filter((d) => d.kind === 'audioinput')
      .map((d, i) => ({ id: d.deviceId, label: d.label || `Microphone ${i + 1}` }));
  }

  // Switches to the microphone with this device id ('' for the default) without ending the call.
  // A failure is reported as a 'mic' notice, never thrown: the call goes on with silence.
  async switchMicrophone(deviceId) {
    try {
      const stream = await getMicrophone(deviceId, 'choose a microphone again');
      if (this.state === 'ended') {
        stream.getTracks().forEach((t) => t.stop());
        return;
      }
      this.useMicrophone(stream);
      this.micLost = false;
      this.events.notice?.({ kind: 'mic', message: null });
    } catch (e) {
      this.micLost = true;
      this.events.notice?.({ kind: 'mic', message: `${e.message} Until then the model hears silence.` });
    }
  }

  // The AudioContext left 'running' (or came back). While it is stopped nothing is captured, so
  // nothing is sent: the server hears silence after its 1 s grace and ends the conversation after
  // its idle timeout (docs/protocol.md §1.5). The model's audio that arrives meanwhile is not
  // queued (it would play late, after the interruption); when the sound runs again, playback
  // starts afresh from what arrives next.
  onSoundState({ running, closed, state }) {
    if (this.state === 'ended') return;
    if (closed) {
      this.fail(new CallError('audio', 'The browser closed the audio output, so the call cannot go on. Start again.'));
    } else if (!running) {
      this.soundStopped = state;
      this.events.notice?.({ kind: 'sound', message: soundNotice(state) });
    } else if (this.soundStopped) {
      this.soundStopped = null;
      this.playback?.port.postMessage({ flush: true });
      this.events.notice?.({ kind: 'sound', message: null });
    }
  }

  // For a button: a click is the user gesture a suspended AudioContext may need to resume.
  resumeSound() {
    this.ctx?.resume().catch(() => { /* still not allowed: the notice stays */ });
  }

  openSocket() {
    if (this.state === 'ended') return;
    const ws = new WebSocket(chatUrl(location.href, this.settings));
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => this.setState('waiting');
    ws.onmessage = (e) => this.onMessage(e.data);
    ws.onclose = (e) => this.onClose(e);
  }

  onMessage(data) {
    if (this.state === 'ended') return;
    this.lastMessageAt = performance.now();
    if (typeof data === 'string') return; // the protocol is binary only
    const msg = decodeMessage(data);
    switch (msg.kind) {
      case KIND.HANDSHAKE: return this.goLive();
      case KIND.AUDIO: return this.decoder?.push(msg.bytes);
      case KIND.TEXT:
        this.textPieces++;
        return this.events.text?.(msg.text);
      case KIND.ERROR:
        this.serverError = msg.text;
        // The server's idle timeout, most likely: say what stopped the audio on this side.
        return this.fail(new CallError('server', this.soundStopped
          ? `${msg.text}. This device's sound had stopped (${this.soundStopped}), so no audio reached the server.`
          : msg.text));
      default: return undefined; // metadata, ping and unknown kinds carry nothing the page needs
    }
  }

  goLive() {
    if (this.state === 'live') return;
    const onCodecError = (e) => this.fail(new CallError('codec', `Opus codec error: ${e.message}`));
    this.encoder = new UplinkEncoder(this.encoderConfig, (page) => this.send(page), onCodecError);
    this.decoder = new DownlinkDecoder((pcm, rate) => this.onDecoded(pcm, rate), onCodecError);
    this.liveAt = performance.now();
    this.watchdog = setInterval(() => {
      if (performance.now() - this.lastMessageAt > SILENCE_TIMEOUT_MS) {
        this.fail(new CallError('timeout', onThisDevice('Nothing was received for 10 s') ??
          'The server stopped responding (nothing received for 10 s).'));
      }
    }, 1000);
    this.setState('live');
  }

  send(page) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(audioMessage(page));
  }

  // A 20 ms block from the capture worklet: both sides at 24 kHz, sample-aligned.
  onCaptured({ mic, model }) {
    this.events.levels?.({ mic: rms(mic), model: rms(model) });
    if (this.state !== 'live') return; // like the official client: nothing is sent before the handshake
    this.encoder.encode(mic);
    this.sentSamples += mic.length;
    this.recording.append(model, mic);
  }

  onDecoded(pcm, rate) {
    if (!this.ctx || this.state !== 'live') return;
    const samples = Math.round((pcm.length * RATE) / rate);
    if (this.soundStopped) {
      // The answers to audio sent before the stop still count toward the round trip; the rest
      // answers the server's own silence frames and is not played.
      const answering = Math.min(samples, Math.max(0, this.sentSamples - this.receivedSamples));
      this.receivedSamples += answering;
      this.unplayedSamples += samples - answering;
      return;
    }
    this.receivedSamples += samples;
    if (this.upsampleFrom !== rate) {
      this.upsampler = new Resampler(rate, this.ctx.sampleRate);
      this.upsampleFrom = rate;
    }
    const out = rate === this.ctx.sampleRate ? pcm : this.upsampler.process(pcm);
    this.playback.port.postMessage({ samples: out }, [out.buffer]);
  }

  onPlaybackStats(s) {
    const ms = (n, rate) => (1000 * n) / rate;
    this.events.stats?.({
      // Mic audio sent minus model audio received: the server's steps plus the network, both ways.
      roundTripMs: this.state === 'live' ? ms(this.sentSamples - this.receivedSamples, RATE) : null,
      bufferMs: ms(s.fill, s.rate), targetMs: ms(s.target, s.rate),
      minBufferMs: ms(s.minFill, s.rate), maxBufferMs: ms(s.maxFill, s.rate),
      playedMs: ms(s.played, s.rate), missedMs: ms(s.missed, s.rate), droppedMs: ms(s.dropped, s.rate),
      underruns: s.underruns, sentMs: ms(this.sentSamples, RATE), receivedMs: ms(this.receivedSamples, RATE),
      playbackRms: s.rms, unplayedMs: ms(this.unplayedSamples, RATE), recordedMs: ms(this.recording.frames, RATE),
      crcErrors: this.decoder?.crcErrors ?? 0,
    });
  }

  onClose(e) {
    if (this.state === 'ended') return;
    if (this.state === 'live' && e.wasClean) {
      this.finish('The server ended the call.');
    } else if (this.state === 'live') { // 1006: the network or the server went away without a close
      this.fail(new CallError('disconnected', onThisDevice(`The connection closed (code ${e.code})`) ??
        `The connection to the server was lost (code ${e.code}).`));
    } else if (this.state === 'waiting') {
      this.fail(new CallError('disconnected',
        `The server closed the connection before the call started (code ${e.code}${e.reason ? `: ${e.reason}` : ''}).`));
    } else {
      // The upgrade was refused or never reached the server; the browser only says 1006.
      const code = e.code;
      whyNotConnected(code).then((message) => this.fail(new CallError('not-connected', message)));
    }
  }

  fail(err) {
    if (this.state === 'ended') return;
    this.events.error?.({ code: err.code, message: err.message, live: this.state === 'live' });
    this.finish(err.message);
  }

  // Hang up (the user) or tear down after a failure; safe to call more than once.
  hangUp() { this.finish('You ended the call.'); }

  finish(reason) {
    if (this.state === 'ended') return;
    this.setState('ended', reason);
    clearInterval(this.watchdog);
    this.stopWatchingSound?.(); // before close(), whose 'closed' is no failure
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000);
    this.encoder?.close();
    this.decoder?.close();
    this.stream?.getTracks().forEach((t) => t.stop());
    this.ctx?.close();
  }

  setState(name, detail) {
    this.state = name;
    this.events.state?.(name, detail);
  }
}

// Why a call's WebSocket did not open, in the user's words. A refused upgrade (HTTP 503 from a server
// --behind-proxy that is full, loading or draining; 401 without a valid API key) reaches the page as
// close code 1006 with no status, so the server's own answers say why: /health (never behind a key)
// its state, /api/voices (behind the key like /api/chat) whether the key is missing.
export async function whyNotConnected(code) {
  let res;
  try {
    res = await fetch('/health', { cache: 'no-store' });
  } catch (e) {
    return `Could not reach the server (${e.message}). Check that it is running and that the network is up.`;
  }
  const health = await res.json().catch(() => null);
  if (!health?.status) { // not the server's JSON: a proxy's own error page
    return `The server's address answered with HTTP ${res.status} and no server status: a proxy in front of ` +
      'the server may not reach it. Try again in a moment.';
  }
  const sessions = health.sessions ?? {};
  switch (health.status) {
    case 'full':
      return `The server is full: ${sessions.active} of ${sessions.max} conversations are running. Try again in a moment.`;
    case 'loading': return 'The server is still loading its model. Try again in a minute.';
    case 'draining': return 'The server is shutting down. Try again once it is back.';
    case 'failing': case 'failed':
      return `The server cannot run conversations now${health.error ? `: ${health.error}` : ''}.`;
    default: break;
  }
  const voices = await fetch('/api/voices', { cache: 'no-store' }).catch(() => null);
  if (voices?.status === 401) {
    return 'The server needs an API key: open this page with ?token=YOUR_KEY at the end of its address.';
  }
  // Behind a load balancer (k8s.yaml's Service) /health may come from another instance than the
  // one that refused the call, so "has room" is not proof the refusal was something else.
  return `The call's connection did not open (code ${code}), though the server answers and has room now ` +
    '(behind a load balancer, the instance you reached may have been full). Try again; if it keeps failing, ' +
    'a proxy in front of the server may not pass WebSocket upgrades.';
}

// deviceId: a device from enumerateDevices(), or '' / absent for the browser's default. retry: what
// the user does once the cause is fixed, as the messages end with it.
async function getMicrophone(deviceId, retry = 'start again') {
  if (!navigator.mediaDevices?.getUserMedia) {
    throw new CallError('no-mic', 'This browser gives no access to a microphone here.');
  }
  try {
    return await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1,
        ...(deviceId ? { deviceId: { exact: deviceId } } : {}) },
      video: false,
    });
  } catch (e) {
    if (e.name === 'NotAllowedError' || e.name === 'SecurityError') {
      throw new CallError('mic-denied', 'Microphone permission was refused. Allow the microphone for this site ' +
        `(the icon in the address bar) and ${retry}.`);
    }
    if (e.name === 'NotFoundError' || e.name === 'OverconstrainedError') {
      throw new CallError('no-mic', `No microphone was found. Connect one and ${retry}.`);
    }
    if (e.name === 'NotReadableError') {
      throw new CallError('no-mic', 'The microphone is in use by another program or could not be opened.');
    }
    throw new CallError('no-mic', `The microphone could not be opened: ${e.message}`);
  }
}

// A lost call's message when the cause is this device's network (the browser knows it is offline),
// not the server: what happened, then that. Null when the browser thinks it is online.
function onThisDevice(what) {
  if (globalThis.navigator?.onLine !== false) return null;
  return `${what}: this device is offline. Check its network connection, then start again.`;
}

function withTimeout(promise, ms, error) {
  let timer;
  const expired = new Promise((_, reject) => { timer = setTimeout(() => reject(error), ms); });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

function rms(x) {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return x.length ? Math.sqrt(s / x.length) : 0;
}
