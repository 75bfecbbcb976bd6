'use strict';
// The real ComfyUI that test/real/ runs against (loaded by .mocharc.real.json, so its hooks are mocha root
// hooks). COMFY_URL set: that server, as is (never restarted, never stopped). Otherwise a test kit beside the
// repository: COMFY_KIT=comfyui (the default, ../shared/peers/comfyui, ComfyUI v0.8.0) or COMFY_KIT=comfyui-new
// (../shared/peers/comfyui-new, v0.33.0). install.sh into COMFY_HOME (default .ci-cache/<kit>-real), start.sh on
// a free port with empty data folders and the kit's PreviewProbe test node loaded, stop.sh at the end; only then
// can a test restart the server. The server's version (from /api/system_stats) is `comfy.version`.
const fs = require('node:fs');
const path = require('node:path');
const { execFile, spawnSync } = require('node:child_process');
const { freePort } = require('../../../scripts/start');

const ROOT = path.resolve(__dirname, '../../..');
const KIT_NAME = process.env.COMFY_KIT || 'comfyui';
const KIT = path.resolve(ROOT, '../shared/peers', KIT_NAME);
/** The test node that sends previews without a model; it ships with the newer kit and runs on both. */
const PREVIEW_PROBE = path.resolve(ROOT, '../shared/peers/comfyui-new/preview_probe');
const INSTALL_TIMEOUT_MS = 30 * 60_000; // apt-get of about 270 packages on a new machine
const START_TIMEOUT_MS = 3 * 60_000;

const givenUrl = process.env.COMFY_URL ? process.env.COMFY_URL.trim().replace(/\/+$/, '') : '';
const kitPresent = fs.existsSync(path.join(KIT, 'start.sh'));
const managed = !givenUrl && kitPresent;
const home = path.resolve(process.env.COMFY_HOME || path.join(ROOT, `.ci-cache/${KIT_NAME}-real`));

const NO_SERVER =
  'No ComfyUI to test against: set COMFY_URL to a running self-hosted ComfyUI (v0.8.0 or later) without an API ' +
  `key (e.g. COMFY_URL=http://127.0.0.1:8188 npm run test:real), or put the test kit at ${KIT} ` +
  '(the shared/ folder beside this repository) so the suite installs and starts one itself.';

let port;
let started = false;

function run(script, env, timeoutMs, args = []) {
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      [path.join(KIT, script), ...args],
      { env: { ...process.env, ...env, COMFY_HOME: home }, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}${stderr}`.trim();
        if (!error) resolve(output);
        else reject(new Error(`${script} failed (${error.code ?? error.signal}): ${output.slice(-2000)}`));
      },
    );
  });
}

/** The PID in COMFY_HOME's pidfile when that process is alive, else undefined. */
function runningPid() {
  try {
    const pid = Number(fs.readFileSync(path.join(home, 'comfyui.pid'), 'utf8').trim());
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

/** Whether the kit's start.sh loads the probe itself (COMFY_PREVIEW_PROBE=1, the newer kit). */
function kitLoadsProbe() {
  return fs.readFileSync(path.join(KIT, 'start.sh'), 'utf8').includes('COMFY_PREVIEW_PROBE');
}

/** The probe node in the server's custom nodes, and what start.sh needs to load it (whitelisted by name). */
function probeArguments() {
  if (kitLoadsProbe() || !fs.existsSync(PREVIEW_PROBE)) return [];
  const target = path.join(home, 'data/custom_nodes/comfy_preview_probe');
  fs.rmSync(target, { recursive: true, force: true });
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.cpSync(PREVIEW_PROBE, target, { recursive: true });
  return ['--whitelist-custom-nodes', 'comfy_preview_probe'];
}

async function start(clean) {
  const env = { COMFY_PORT: String(port), COMFY_CLEAN: clean ? '1' : '0', COMFY_PREVIEW_PROBE: '1' };
  // Under data/custom_nodes, which COMFY_CLEAN leaves alone.
  const extra = probeArguments();
  await run('start.sh', env, START_TIMEOUT_MS, extra);
  started = true;
}

async function stop() {
  if (!started) return;
  started = false;
  await run('stop.sh', { COMFY_PORT: String(port) }, 60_000);
}

/** Stops the server and starts it again on the same port; resolves once it answers again. */
async function restart() {
  await stop();
  await start(false);
}

async function answers(url) {
  try {
    const response = await fetch(`${url}/api/system_stats`, { signal: AbortSignal.timeout(10_000) });
    await response.arrayBuffer();
    return response.ok;
  } catch {
    return false;
  }
}

/** [major, minor, patch] of a version text. */
function parts(version) {
  return String(version ?? '')
    .replace(/^v/, '')
    .split('.')
    .map((part) => Number.parseInt(part, 10) || 0);
}

async function versionOf(url) {
  const response = await fetch(`${url}/api/system_stats`, { signal: AbortSignal.timeout(10_000) });
  const stats = await response.json();
  return String(stats?.system?.comfyui_version ?? 'unknown');
}

const comfy = {
  /** The server's base address (set by the root hook, before any test runs). */
  url: givenUrl || undefined,
  /** Its `system.comfyui_version`, e.g. "0.33.0" (set by the root hook). */
  version: undefined,
  /** Whether the server is at least this version ("0.26"). */
  atLeast(minimum) {
    const have = parts(comfy.version);
    const want = parts(minimum);
    for (let index = 0; index < 3; index++) {
      if ((have[index] ?? 0) !== (want[index] ?? 0)) return (have[index] ?? 0) > (want[index] ?? 0);
    }
    return true;
  },
  /** True when this suite installed and started the server itself. */
  managed,
  /** Why restart() is missing, when it is. */
  noRestartReason: managed
    ? undefined
    : givenUrl
      ? 'COMFY_URL names a server this suite did not start, so it cannot restart it'
      : 'no server was found (see the failing root hook)',
  /** Stop and start again, same port: only when the suite manages the server (undefined otherwise). */
  restart: managed ? restart : undefined,
};

// A run cut short (Ctrl-C, a crash) still ends the server it started.
process.once('exit', () => {
  if (started) spawnSync('bash', [path.join(KIT, 'stop.sh')], { env: { ...process.env, COMFY_HOME: home } });
});

const mochaHooks = {
  async beforeAll() {
    this.timeout(INSTALL_TIMEOUT_MS + START_TIMEOUT_MS);
    if (givenUrl) {
      if (!(await answers(givenUrl))) {
        throw new Error(
          `COMFY_URL=${givenUrl} does not answer GET /api/system_stats: start that server first.`,
        );
      }
      comfy.version = await versionOf(givenUrl);
      process.stdout.write(`  real ComfyUI ${comfy.version}: ${givenUrl}\n`);
      return;
    }
    if (!managed) throw new Error(NO_SERVER);
    const pid = runningPid();
    if (pid !== undefined) {
      throw new Error(
        `A ComfyUI from COMFY_HOME=${home} is already running (pid ${pid}) and this suite did not start it: ` +
          `stop it (COMFY_HOME=${home} ${path.join(KIT, 'stop.sh')}), set COMFY_HOME to another folder, ` +
          'or point COMFY_URL at it.',
      );
    }
    await run('install.sh', {}, INSTALL_TIMEOUT_MS);
    port = Number(process.env.COMFY_PORT) || (await freePort());
    await start(true);
    comfy.url = `http://127.0.0.1:${port}`;
    comfy.version = await versionOf(comfy.url);
    process.stdout.write(`  real ComfyUI ${comfy.version}: ${comfy.url} (started from ${home})\n`);
  },
  async afterAll() {
    this.timeout(90_000);
    await stop();
  },
};

module.exports = { comfy, mochaHooks };
