// End-to-end test of the web page (web/) in headless Chromium against `personaplex-server --demo`.
//
//   node tests/browser/run.mjs --server build/personaplex-server [--out build/browser] [--no-tls-check]
//   node tests/browser/run.mjs --url http://127.0.0.1:8998/      (a server that is already running)
//
// Chromium's fake microphone plays tests/data/golden/speech-24k.wav. The test checks that the page
// connects, gets the handshake, plays non-silent audio (measured on the samples the page recorded
// from its playback output), shows transcript text, offers a valid WAV, and says so when the server
// is full (its 0x05, and a --behind-proxy server's 503 on the upgrade); then the same call over
// wss:// with a self-signed certificate. Screenshots go
// to the --out directory for review. Exit 0 pass, 1 fail, 77 skipped (no chromium, no npm package).

import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { npmInstall, sleep, startServer } from '../node/demo_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const SKIP = 77;

function parseArgs(argv) {
  const a = { server: null, url: null, out: join(repo, 'build-browser'), tls: true,
    chromium: process.env.CHROMIUM || '/usr/bin/chromium' };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--server') a.server = resolve(argv[++i]);
    else if (k === '--url') a.url = argv[++i];
    else if (k === '--out') a.out = resolve(argv[++i]);
    else if (k === '--chromium') a.chromium = argv[++i];
    else if (k === '--no-tls-check') a.tls = false;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.server && !a.url) throw new Error('give --server PATH or --url URL');
  return a;
}

const log = (...m) => console.log('[browser-test]', ...m);

// playwright-core (no browser download), installed into the output directory.
const loadPlaywright = (out) => npmInstall(here, out, 'node_modules/playwright-core/index.mjs', log);

async function waitFor(page, what, fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await page.evaluate(fn);
    if (v) return v;
    if (Date.now() > deadline) {
      const state = await page.evaluate(() => ({ state: window.personaplexTest?.state(), stats: window.personaplexTest?.stats(),
        alert: document.getElementById('alert').hidden ? null : document.getElementById('alert').innerText }));
      throw new Error(`timed out waiting for ${what}: ${JSON.stringify(state)}`);
    }
    await sleep(250);
  }
}

function watchPage(page, name, problems) {
  page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`${name}: console error: ${m.text()}`); });
}

// One whole call: setup page, start, live audio and text, hang up, download the WAV.
async function checkCall(browser, base, out, tag) {
  const problems = [];
  const context = await browser.newContext({ viewport: { width: 1100, height: 1000 }, acceptDownloads: true, ignoreHTTPSErrors: true });
  const page = await context.newPage();
  watchPage(page, tag, problems);
  await page.goto(base);
  await waitFor(page, 'the voice list', () => document.getElementById('voice').options.length > 0, 10000);
  // /health and /api/voices are fetched side by side: the banner may come a moment after the list
  await waitFor(page, 'the page saying the demo model is running (/health model "demo")',
    () => !document.getElementById('demo-banner').hidden, 10000);
  await page.screenshot({ path: join(out, `${tag}-setup.png`), fullPage: true });

  await page.click('#start');
  await waitFor(page, 'the handshake (state live)', () => window.personaplexTest.state() === 'live', 90000);
  log(tag, 'live');
  const stats = await waitFor(page, '3 s of played, non-silent audio and some transcript text', async () => {
    const t = window.personaplexTest;
    const s = t.stats();
    const rec = await t.recording();
    return s && s.playedMs > 3000 && rec.modelRms > 1e-3 && t.transcript().trim().length > 0 ? { s, rec, text: t.transcript() } : null;
  }, 60000);
  log(tag, 'stats', JSON.stringify(stats.s));
  log(tag, 'recording', JSON.stringify(stats.rec));
  log(tag, 'transcript', JSON.stringify(stats.text.slice(0, 120)));
  assert.ok(stats.rec.micRms > 1e-3, 'the fake microphone (speech-24k.wav) reached the page');
  assert.ok((await page.textContent('#transcript')).trim().length > 0, 'the transcript shows on the page');
  assert.equal(stats.s.crcErrors, 0, 'every downlink Ogg page had a good CRC');
  assert.ok(stats.s.roundTripMs !== null && stats.s.roundTripMs < 5000, `round trip ${stats.s.roundTripMs} ms`);
  await page.screenshot({ path: join(out, `${tag}-call.png`), fullPage: true });
  await checkInterruptions(page, out, tag);

  await page.click('#hangup');
  await waitFor(page, 'the call to end', () => window.personaplexTest.state() === 'ended', 5000);
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download')]);
  const wavPath = join(out, `${tag}-conversation.wav`);
  await download.saveAs(wavPath);
  const wav = readFileSync(wavPath);
  assert.equal(wav.toString('latin1', 0, 4), 'RIFF');
  assert.equal(wav.readUInt16LE(22), 2, 'WAV has two channels');
  assert.equal(wav.readUInt32LE(24), 24000, 'WAV is 24 kHz');
  assert.ok(wav.length > 44 + 3 * 24000 * 4, 'WAV holds the call');
  await page.screenshot({ path: join(out, `${tag}-ended.png`), fullPage: true });
  await context.close();
  return problems;
}

// A live call whose sound stops (this browser's autoplay policy lets the page resume it at once) and
// whose microphone track ends: the page says so, the call goes on, and a click takes the default
// microphone again.
async function checkInterruptions(page, out, tag) {
  await page.evaluate(() => { window.playedBefore = window.personaplexTest.stats().playedMs; });
  await page.evaluate(() => window.personaplexTest.suspendSound());
  await waitFor(page, 'the sound to stop and come back, said on the page', () => {
    const n = window.personaplexTest.notices().filter((x) => x.kind === 'sound');
    return n.length === 2 && /paused the sound/.test(n[0].message) && n[1].message === null &&
      document.getElementById('sound-notice').hidden && document.getElementById('status-text').textContent === 'Live';
  }, 5000);
  await waitFor(page, 'playback after the sound came back', () => window.personaplexTest.stats().playedMs > window.playedBefore + 1000, 10000);

  await page.evaluate(() => window.personaplexTest.endMicrophone());
  await waitFor(page, 'the lost microphone said on the page, with a choice of inputs', () =>
    !document.getElementById('mic-notice').hidden && document.getElementById('status-text').textContent === 'No microphone' &&
    document.getElementById('mic-select').options.length > 0, 5000);
  await page.screenshot({ path: join(out, `${tag}-no-microphone.png`), fullPage: true });
  await page.click('#mic-use');
  await waitFor(page, 'the default microphone back', () => document.getElementById('mic-notice').hidden &&
    document.getElementById('status-text').textContent === 'Live', 10000);
  assert.equal(await page.evaluate(() => window.personaplexTest.state()), 'live');
  log(tag, 'the sound stopping and the microphone ending were said and recovered from');
}

// While one call holds the only session, a second page must say the server is full: from the 0x05
// message, or (--behind-proxy, the upgrade refused with 503: the page sees only close code 1006)
// from /health. tag names the screenshot.
async function checkServerFull(browser, base, out, tag) {
  const problems = [];
  const ctxA = await browser.newContext({ ignoreHTTPSErrors: true });
  const a = await ctxA.newPage();
  watchPage(a, 'full-a', problems);
  await a.goto(base);
  await waitFor(a, 'the voice list', () => document.getElementById('voice').options.length > 0, 10000);
  await a.click('#start');
  await waitFor(a, 'the first call to go live', () => window.personaplexTest.state() === 'live', 90000);
  const ctxB = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: 'dark', ignoreHTTPSErrors: true });
  const b = await ctxB.newPage();
  await b.goto(base);
  await waitFor(b, 'the voice list', () => document.getElementById('voice').options.length > 0, 10000);
  await b.screenshot({ path: join(out, 'phone-dark-setup.png'), fullPage: true });
  await b.click('#start');
  const alert = await waitFor(b, 'the server-full message', () => {
    const el = document.getElementById('alert');
    return !el.hidden && window.personaplexTest.state() === 'ended' ? el.innerText : null;
  }, 30000);
  log(tag, 'second caller sees:', JSON.stringify(alert));
  await b.screenshot({ path: join(out, `${tag}-phone-dark-full.png`), fullPage: true });
  if (!/full/i.test(alert)) problems.push(`${tag}: the second caller is not told the server is full: ${JSON.stringify(alert)}`);
  await ctxB.close();
  await ctxA.close();
  return problems;
}

async function main() {
  const args = parseArgs(process.argv);
  mkdirSync(args.out, { recursive: true });
  if (!existsSync(args.chromium)) {
    console.log(`SKIP: no Chromium at ${args.chromium} (apt-get install chromium, or tools/install-deps.sh --browser)`);
    return SKIP;
  }
  const pw = await loadPlaywright(args.out);
  if (!pw) {
    console.log('SKIP: playwright-core could not be installed from npm (offline?)');
    return SKIP;
  }
  const wav = join(repo, 'tests/data/golden/speech-24k.wav');
  const launch = () => pw.chromium.launch({
    executablePath: args.chromium,
    headless: true,
    // playwright gives every launch a fresh temporary profile (the fresh --user-data-dir).
    args: ['--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${wav}`, '--autoplay-policy=no-user-gesture-required',
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--ignore-certificate-errors'],
  });

  const problems = [];
  const servers = [];
  let browser = null;
  try {
    browser = await launch();
    log('chromium', browser.version());
    let base = args.url;
    if (!base) {
      const s = await startServer(args.server, args.out, { tls: false, name: 'http' }, log);
      servers.push(s);
      base = s.url;
    }
    problems.push(...await checkCall(browser, base, args.out, 'http'));
    problems.push(...await checkServerFull(browser, base, args.out, 'full'));
    if (args.server) {
      const s = await startServer(args.server, args.out, { tls: false, name: 'proxy', extra: ['--behind-proxy'] }, log);
      servers.push(s);
      problems.push(...await checkServerFull(browser, s.url, args.out, 'full-behind-proxy'));
      problems.push(...await servers.pop().stop());
    }
    if (args.server && args.tls) {
      problems.push(...await servers.pop().stop());
      const s = await startServer(args.server, args.out, { tls: true, name: 'https' }, log);
      servers.push(s);
      problems.push(...await checkCall(browser, s.url, args.out, 'https'));
    }
  } finally {
    await browser?.close();
    for (const s of servers) problems.push(...await s.stop());
  }
  if (problems.length) {
    for (const p of problems) console.log('FAIL:', p);
    return 1;
  }
  log('screenshots and WAVs in', args.out);
  log('PASS');
  return 0;
}

main().then((code) => process.exit(code), (e) => {
  console.log('FAIL:', e.stack || e.message);
  process.exit(1);
});
