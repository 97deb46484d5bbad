// The page: the setup form before a call, the call view during and after it. The audio and network
// work is in call.js; this file only renders what a Call reports and keeps the user's settings.

import { Call, errorTitle } from './call.js';
import { DEFAULT_SAMPLING } from './protocol.js';
import { PROMPT_PRESETS, FALLBACK_VOICES, voiceLabel } from './presets.js';
import { WAV_HEADER_BYTES } from './wav.js';

const $ = (id) => document.getElementById(id);
const STORE_KEY = 'personaplex.settings';
const SAMPLING_KEYS = [...Object.keys(DEFAULT_SAMPLING), 'seed'];

const ui = {
  form: $('setup-form'), setup: $('setup'), call: $('call'), voice: $('voice'), voiceHint: $('voice-hint'),
  prompt: $('prompt'), promptCount: $('prompt-count'), presets: $('presets'), start: $('start'),
  status: $('status'), statusText: $('status-text'), detail: $('call-detail'), transcript: $('transcript'),
  micLevel: $('mic-level'), modelLevel: $('model-level'), hangup: $('hangup'), again: $('again'),
  download: $('download'), alert: $('alert'), alertTitle: $('alert-title'), alertText: $('alert-text'),
  soundNotice: $('sound-notice'), soundNoticeText: $('sound-notice-text'), soundResume: $('sound-resume'),
  micNotice: $('mic-notice'), micNoticeText: $('mic-notice-text'), micSelect: $('mic-select'), micUse: $('mic-use'),
};

let call = null;
let lastStats = null;
let transcriptText = '';
let noticeLog = []; // every notice of the current call, for the test hook
const levels = { mic: 0, model: 0 };

// ---- settings ---------------------------------------------------------------------------------

function loadStored() {
  try { return JSON.parse(localStorage.getItem(STORE_KEY)) || {}; } catch { return {}; }
}

function saveStored(settings) {
  try { localStorage.setItem(STORE_KEY, JSON.stringify(settings)); } catch { /* private mode: not kept */ }
}

function fillSampling(values) {
  for (const key of SAMPLING_KEYS) {
    const input = ui.form.elements[key];
    input.value = values[key] ?? DEFAULT_SAMPLING[key] ?? '';
  }
}

function readSettings() {
  const s = { voice: ui.voice.value, prompt: ui.prompt.value.trim() };
  for (const key of SAMPLING_KEYS) {
    const raw = ui.form.elements[key].value.trim();
    const num = Number(raw);
    s[key] = raw === '' || !Number.isFinite(num) ? (DEFAULT_SAMPLING[key] ?? null) : num;
  }
  return s;
}

function renderPresets() {
  for (const preset of PROMPT_PRESETS) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'chip';
    b.textContent = preset.label;
    b.addEventListener('click', () => { ui.prompt.value = preset.text; onPromptInput(); });
    ui.presets.append(b);
  }
}

function onPromptInput() {
  ui.promptCount.textContent = `${ui.prompt.value.length} / 1000`;
  const chips = ui.presets.querySelectorAll('.chip');
  PROMPT_PRESETS.forEach((p, i) => chips[i].setAttribute('aria-pressed', String(p.text === ui.prompt.value.trim())));
}

// /api/voices answers { voices: [names], default: name }; a plain array is accepted too. A server
// with no voice files (the demo model) lists none and names only its default.
async function loadVoices(stored) {
  let voices = FALLBACK_VOICES;
  let preferred = 'NATF2';
  let hint = '';
  try {
    const res = await fetch('/api/voices');
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const body = await res.json();
    const list = (Array.isArray(body) ? body : body.voices ?? []).map((v) => (typeof v === 'string' ? v : v.name));
    preferred = body.default ?? list[0];
    if (list.length) voices = list;
    else if (preferred) {
      voices = [preferred];
      hint = 'This server has no voice files; it uses its default voice.';
    } else throw new Error('no voices');
  } catch (e) {
    hint = `The server did not list its voices (${e.message}); showing the standard presets.`;
  }
  ui.voiceHint.hidden = !hint;
  ui.voiceHint.textContent = hint;
  ui.voice.replaceChildren(...voices.map((v) => new Option(`${voiceLabel(v)} (${v})`, v)));
  ui.voice.value = voices.includes(stored.voice) ? stored.voice : voices.includes(preferred) ? preferred : voices[0];
}

async function loadHealth() {
  try {
    const res = await fetch('/health');
    const body = await res.json();
    $('demo-banner').hidden = body.model !== 'demo';
  } catch { /* an older server without /health: nothing to say */ }
}

// ---- call -------------------------------------------------------------------------------------

const STATE_TEXT = { idle: 'Ready', starting: 'Opening microphone…', waiting: 'Preparing the persona…',
  live: 'Live', ended: 'Call ended', failed: 'Failed' };

function setStatus(state) {
  ui.status.dataset.state = state;
  ui.statusText.textContent = STATE_TEXT[state];
  if (state === 'live') showHeld();
}

// ---- a live call without sound or microphone ------------------------------------------------------

// The pill says when a live call cannot be heard or cannot hear: "Live" would not be true.
function showHeld() {
  if (call?.state !== 'live') return;
  const held = !ui.soundNotice.hidden ? 'Sound paused' : !ui.micNotice.hidden ? 'No microphone' : null;
  ui.status.dataset.state = held ? 'held' : 'live';
  ui.statusText.textContent = held ?? STATE_TEXT.live;
}

function renderNotice({ kind, message }) {
  noticeLog.push({ kind, message });
  const [box, text] = kind === 'mic' ? [ui.micNotice, ui.micNoticeText] : [ui.soundNotice, ui.soundNoticeText];
  box.hidden = message === null;
  text.textContent = message ?? '';
  if (kind === 'mic' && message !== null) listMicrophones();
  showHeld();
}

function hideNotices() {
  ui.soundNotice.hidden = true;
  ui.micNotice.hidden = true;
}

// Fills the microphone choice; again when a device is plugged in while the choice is showing.
async function listMicrophones() {
  const mics = await call?.microphones().catch(() => []) ?? [];
  const chosen = ui.micSelect.value;
  ui.micSelect.replaceChildren(new Option('Default microphone', ''),
    ...mics.filter((m) => m.id && m.id !== 'default').map((m) => new Option(m.label, m.id)));
  if (mics.some((m) => m.id === chosen)) ui.micSelect.value = chosen;
}

function showAlert(title, text) {
  ui.alertTitle.textContent = title;
  ui.alertText.textContent = text;
  ui.alert.hidden = false;
}

function startCall(event) {
  event.preventDefault();
  const settings = readSettings();
  saveStored(settings);
  ui.alert.hidden = true;
  ui.setup.hidden = true;
  ui.call.hidden = false;
  ui.hangup.hidden = false;
  ui.again.hidden = true;
  ui.download.disabled = true;
  ui.transcript.replaceChildren(placeholder('Waiting for the model…'));
  transcriptText = '';
  noticeLog = [];
  lastStats = null;
  ui.detail.textContent = settings.voice ? voiceLabel(settings.voice) : 'Default voice';
  let failed = false;
  let wasLive = false;
  const started = performance.now();
  const waitTimer = setInterval(() => {
    if (call?.state === 'waiting') ui.statusText.textContent = `Preparing the persona… ${Math.round((performance.now() - started) / 1000)} s`;
  }, 500);
  call = new Call(settings, {
    state: (name, detail) => {
      setStatus(failed && name === 'ended' ? 'failed' : name);
      if (name === 'live') {
        wasLive = true;
        clearInterval(waitTimer);
        ui.transcript.replaceChildren(placeholder('Say hello. The model’s words appear here.'));
      }
      if (name === 'ended') {
        clearInterval(waitTimer);
        hideNotices();
        levels.mic = 0;
        levels.model = 0;
        if (!wasLive) {
          // Nothing happened yet: back to the form, with the alert's "Try again" one key away.
          ui.call.hidden = true;
          ui.setup.hidden = false;
          (failed ? $('alert-retry') : ui.start).focus();
          return;
        }
        ui.detail.textContent = failed ? '' : detail ?? '';
        ui.hangup.hidden = true;
        ui.again.hidden = false;
        ui.download.disabled = !(call.recording.frames > 0);
        ui.again.focus();
      }
    },
    text: appendText,
    levels: (l) => { levels.mic = Math.max(levels.mic, l.mic); levels.model = Math.max(levels.model, l.model); },
    stats: renderStats,
    notice: renderNotice,
    error: (e) => { failed = true; showAlert(errorTitle(e), e.message); },
  });
  call.start();
  ui.hangup.focus();
}

function placeholder(text) {
  const p = document.createElement('p');
  p.className = 'placeholder';
  p.textContent = text;
  return p;
}

function appendText(piece) {
  const box = ui.transcript;
  box.querySelector('.placeholder')?.remove();
  box.querySelector('.latest')?.classList.remove('latest');
  const span = document.createElement('span');
  span.className = 'latest';
  span.textContent = transcriptText ? piece : piece.trimStart(); // pieces carry their leading space
  box.append(span);
  transcriptText += piece;
  // Follow the text unless the reader scrolled up to read earlier lines.
  if (box.scrollHeight - box.scrollTop - box.clientHeight < 80) box.scrollTop = box.scrollHeight;
}

const fmtMs = (ms) => (ms === null || !Number.isFinite(ms) ? '–' : `${Math.round(ms)} ms`);
function fmtTime(ms) {
  const s = ms / 1000;
  return `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, '0')}`;
}

function renderStats(s) {
  lastStats = s;
  $('st-rtt').textContent = fmtMs(s.roundTripMs);
  $('st-buffer').textContent = `${fmtMs(s.bufferMs)} / ${Math.round(s.targetMs)}`;
  $('st-underruns').textContent = String(s.underruns);
  $('st-played').textContent = fmtTime(s.playedMs);
  if (call?.state === 'live' && s.recordedMs > 0) ui.download.disabled = false;
}

// Meters: dBFS from -60 to 0 as 0-100 %, with a short decay so speech does not flicker.
function drawMeters() {
  for (const side of ['mic', 'model']) {
    const el = side === 'mic' ? ui.micLevel : ui.modelLevel;
    const db = 20 * Math.log10(levels[side] + 1e-9);
    const pct = Math.max(0, Math.min(100, ((db + 60) / 60) * 100));
    el.style.width = `${pct}%`;
    el.parentElement.setAttribute('aria-valuenow', String(Math.round(pct)));
    levels[side] *= 0.8;
  }
  requestAnimationFrame(drawMeters);
}

function downloadWav() {
  if (!call) return;
  const a = document.createElement('a');
  a.href = URL.createObjectURL(call.recording.toWav());
  a.download = `personaplex-${new Date().toISOString().replace(/[:.]/g, '-')}.wav`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

function backToSetup() {
  call?.hangUp();
  call = null;
  ui.call.hidden = true;
  ui.setup.hidden = false;
  ui.alert.hidden = true;
  setStatus('idle');
  ui.start.focus();
}

// After a failure before the call went live the form is showing: start again at once. After a
// failure during a call, go back to the form and keep the settings.
function retry() {
  if (ui.call.hidden) ui.form.requestSubmit();
  else backToSetup();
}

// ---- test hook --------------------------------------------------------------------------------
// tests/browser reads these to check a call end to end (state, transcript, what was played).

// Reads the recording back through the WAV the download would give, so the check covers what the user gets.
async function recordingSummary() {
  const rec = call?.recording;
  if (!rec) return { frames: 0 };
  const pcm = new Int16Array((await rec.toWav().arrayBuffer()).slice(WAV_HEADER_BYTES));
  let model = 0;
  let mic = 0;
  let peak = 0;
  for (let i = 0; i + 1 < pcm.length; i += 2) {
    model += pcm[i] * pcm[i];
    mic += pcm[i + 1] * pcm[i + 1];
    peak = Math.max(peak, Math.abs(pcm[i]));
  }
  const n = Math.max(1, pcm.length / 2);
  return { frames: rec.frames, rate: rec.rate, modelRms: Math.sqrt(model / n) / 32767,
    micRms: Math.sqrt(mic / n) / 32767, modelPeak: peak / 32767 };
}

window.personaplexTest = {
  state: () => call?.state ?? 'idle',
  stats: () => lastStats,
  transcript: () => transcriptText,
  textPieces: () => call?.textPieces ?? 0,
  recording: recordingSummary,
  hangUp: () => call?.hangUp(),
  notices: () => noticeLog,
  // What the browser or the OS does to a call: the sound stopping, the microphone track ending.
  suspendSound: () => call?.ctx?.suspend(),
  endMicrophone: () => call?.stream?.getAudioTracks()[0]?.dispatchEvent(new Event('ended')),
};

// ---- start-up ---------------------------------------------------------------------------------

async function init() {
  const stored = loadStored();
  renderPresets();
  ui.prompt.value = stored.prompt ?? PROMPT_PRESETS[0].text;
  onPromptInput();
  fillSampling(stored);
  ui.prompt.addEventListener('input', onPromptInput);
  $('reset-sampling').addEventListener('click', () => fillSampling({}));
  ui.form.addEventListener('submit', startCall);
  ui.hangup.addEventListener('click', () => call?.hangUp());
  ui.again.addEventListener('click', backToSetup);
  ui.soundResume.addEventListener('click', () => call?.resumeSound());
  ui.micUse.addEventListener('click', () => call?.switchMicrophone(ui.micSelect.value));
  navigator.mediaDevices?.addEventListener?.('devicechange', () => { if (!ui.micNotice.hidden) listMicrophones(); });
  $('alert-retry').addEventListener('click', retry);
  ui.download.addEventListener('click', downloadWav);
  requestAnimationFrame(drawMeters);
  await Promise.all([loadVoices(stored), loadHealth()]);
}

init();
