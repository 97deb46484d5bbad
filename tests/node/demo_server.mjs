// What the Node tests share: a `personaplex-server --demo` on a free port, and npm packages
// installed into a build tree's output directory (one copy per tree, so parallel ctest runs of
// several build trees never share a node_modules).

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, copyFileSync, createWriteStream, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs `npm ci` with the package.json and package-lock.json of dir in out, unless entry (a path
// under out) exists already. Returns entry's module, or null when npm could not install it.
export async function npmInstall(dir, out, entry, log) {
  const path = join(out, entry);
  if (!existsSync(path)) {
    for (const f of ['package.json', 'package-lock.json']) copyFileSync(join(dir, f), join(out, f));
    log('installing', entry.split('/').slice(1, -1).join('/'), 'and its dependencies from npm into', out);
    const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: out, stdio: 'inherit' });
    if (r.status !== 0 || !existsSync(path)) return null;
  }
  return import(pathToFileURL(path).href);
}

export async function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
    s.on('error', rej);
  });
}

// Starts the server and waits for /health; returns { url, port, stop }. extra: more arguments.
export async function startServer(bin, out, { tls, name, extra = [] }, log) {
  const port = await freePort();
  const args = ['--demo', '--host', '127.0.0.1', '--port', String(port), '--max-sessions', '1',
    '--state-dir', join(out, `state-${name}`), ...(tls ? [] : ['--no-tls']), ...extra];
  const logFile = join(out, `server-${name}.log`);
  log('starting', bin, args.join(' '), '(log:', logFile + ')');
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const sink = createWriteStream(logFile);
  proc.stdout.pipe(sink);
  proc.stderr.pipe(sink);
  let exited = null;
  proc.on('exit', (code, sig) => { exited = `exit ${code ?? sig}`; });
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}/`;
  const deadline = Date.now() + 90000;
  for (;;) {
    if (exited) throw new Error(`server ${exited} before it was ready; see ${logFile}`);
    if (Date.now() > deadline) { proc.kill('SIGTERM'); throw new Error(`server not ready after 90 s; see ${logFile}`); }
    if (await healthy(url)) break;
    await sleep(300);
  }
  // Stops the server; returns the problems its exit showed (a bad status, a sanitizer report).
  const stop = async () => {
    if (!exited) {
      proc.kill('SIGTERM');
      for (let i = 0; i < 100 && !exited; i++) await sleep(100);
      if (!exited) { proc.kill('SIGKILL'); return [`server ${name} ignored SIGTERM for 10 s`]; }
    }
    await new Promise((r) => sink.end(r));
    const found = [];
    if (exited !== 'exit 0') found.push(`server ${name} ended with ${exited}; see ${logFile}`);
    if (/AddressSanitizer|LeakSanitizer|runtime error:/.test(readFileSync(logFile, 'utf8'))) {
      found.push(`sanitizer report in ${logFile}`);
    }
    return found;
  };
  return { url, port, stop };
}

// True once GET /health answers 200 (the demo server's certificate is self-signed: not checked).
export function healthy(base) {
  const url = new URL('/health', base);
  const get = url.protocol === 'https:' ? httpsGet : httpGet;
  return new Promise((res) => {
    const req = get(url, { rejectUnauthorized: false, timeout: 2000 }, (r) => { r.resume(); res(r.statusCode === 200); });
    req.on('error', () => res(false));
    req.on('timeout', () => { req.destroy(); res(false); });
  });
}
