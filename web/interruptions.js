// A live call's audio being taken away from it: the AudioContext leaving 'running' (Safari's
// 'interrupted' for a phone call, Siri or another app; 'suspended' in Chrome and Firefox for the
// autoplay policy or an audio-device change) and the microphone track ending (headset disconnected,
// device unplugged, permission withdrawn). Pure code over the DOM's event interfaces, tested under
// node with fake contexts, tracks and documents.

// What the user is told while the sound is not running, by context state.
const SOUND_NOTICES = {
  interrupted: 'The sound was interrupted by another app or a phone call: the model cannot hear you and you cannot ' +
    'hear it. It comes back when the interruption ends; if it does not, tap or click this page.',
  suspended: 'The browser paused the sound: the model cannot hear you and you cannot hear it. Tap or click this page, ' +
    'or press a key, to resume.',
};

export function soundNotice(state) {
  return SOUND_NOTICES[state] ?? `The sound stopped (the audio output is '${state}'): tap or click this page to resume.`;
}

export const MIC_LOST_NOTICE = 'The microphone stopped (disconnected, unplugged, or its permission was withdrawn): ' +
  'the model hears silence. Choose a microphone to go on, or end the call.';

// The user actions a browser accepts as a gesture that may resume an AudioContext.
const GESTURES = ['pointerdown', 'keydown', 'touchend'];

// Watches ctx ('statechange') while a call is live and reports { running: true } when it runs,
// { running: false, state } when it leaves 'running', { closed: true } when it closes. When it
// stops running, resume() is tried at once (allowed when the cause has gone, e.g. Safari after a
// call ends) and again at the user's next gesture on `gestures` (a document), which is what the
// autoplay policy requires. Returns a function that stops watching.
export function watchSound(ctx, gestures, report) {
  let armed = false;
  const capture = { capture: true }; // a gesture anywhere on the page counts, whatever handles it
  const tryResume = () => { ctx.resume().catch(() => { /* not allowed yet: the next gesture tries again */ }); };
  const arm = (on) => {
    if (armed === on) return;
    armed = on;
    for (const type of GESTURES) {
      if (on) gestures?.addEventListener(type, tryResume, capture);
      else gestures?.removeEventListener(type, tryResume, capture);
    }
  };
  const onChange = () => {
    if (ctx.state === 'running') {
      arm(false);
      report({ running: true });
    } else if (ctx.state === 'closed') {
      arm(false);
      report({ closed: true });
    } else {
      report({ running: false, state: ctx.state });
      arm(true);
      tryResume();
    }
  };
  ctx.addEventListener('statechange', onChange);
  return () => {
    ctx.removeEventListener('statechange', onChange);
    arm(false);
  };
}
