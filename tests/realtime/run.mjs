// End-to-end test of /v1/realtime and /v1/twilio against `personaplex-server --demo`, over TLS
// (the server's self-signed certificate, trusted through NODE_EXTRA_CA_CERTS) and with an API key:
// the official openai package's realtime client, @openai/agents-realtime's RealtimeSession, a
// Twilio Media Streams replay and the edge cases (clients.mjs). (/api/chat keeps its own tests:
// server_e2e, web_browser.)
//
//   node tests/realtime/run.mjs --server build/personaplex-server [--out build/realtime]
//
// Exit 0 pass, 1 fail, 77 skipped (npm could not install the clients).

import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { npmInstall, startServer } from '../node/demo_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const SKIP = 77;
const log = (...m) => console.log('[realtime-test]', ...m);

function parseArgs(argv) {
  const a = { server: null, out: join(repo, 'build-realtime') };
  for (let i = 2; i < argv.length; i++) {
    if (argv[i] === '--server') a.server = resolve(argv[++i]);
    else if (argv[i] === '--out') a.out = resolve(argv[++i]);
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!a.server) throw new Error('give --server PATH');
  return a;
}

async function main() {
  const args = parseArgs(process.argv);
  mkdirSync(args.out, { recursive: true });
  if (!(await npmInstall(here, args.out, 'node_modules/ws/wrapper.mjs', log))) {
    console.log('SKIP: the realtime clients could not be installed from npm (offline?)');
    return SKIP;
  }
  copyFileSync(join(here, 'clients.mjs'), join(args.out, 'clients.mjs'));
  const key = randomBytes(24).toString('hex');
  const keys = join(args.out, 'api-keys');
  writeFileSync(keys, `# test key\n${key}\n`, { mode: 0o600 });
  const name = 'realtime';
  const server = await startServer(args.server, args.out,
    { tls: true, name, extra: ['--api-keys', keys, '--max-sessions', '4'] }, log);
  let rc = 1;
  try {
    const cert = join(args.out, `state-${name}`, 'cert.pem');
    if (!existsSync(cert)) throw new Error(`no certificate at ${cert}`);
    const r = spawnSync(process.execPath, ['clients.mjs', '--base', server.url.replace(/\/$/, ''), '--key', key,
      '--wav', join(repo, 'tests/data/golden/speech-24k.wav')],
    { cwd: args.out, stdio: 'inherit', env: { ...process.env, NODE_EXTRA_CA_CERTS: cert }, timeout: 150000 });
    rc = r.status === 0 ? 0 : 1;
  } finally {
    const problems = await server.stop();
    for (const p of problems) log('problem:', p);
    if (problems.length) rc = 1;
    const serverLog = readFileSync(join(args.out, `server-${name}.log`), 'utf8');
    if (serverLog.includes(key)) {
      log('problem: the API key appears in the server log');
      rc = 1;
    }
  }
  return rc;
}

main().then((rc) => process.exit(rc), (e) => { console.error(e); process.exit(1); });
