'use strict';
// The real Comfy API v2 server that test/real-v2/ runs against (loaded by .mocharc.real-v2.json, so its hooks are
// mocha root hooks): comfy-api-proxy (../shared/peers/comfy-v2) in front of a real ComfyUI v0.33.0
// (../shared/peers/comfyui-new). V2_URL set: that server, as is (never started or stopped here; V2_TOKEN its
// token, default the kit's `comfy-v2-test-key`; COMFY_URL, when set, the ComfyUI behind it). Otherwise both kits:
// install.sh of each (COMFY_HOME and V2_HOME, default .ci-cache/comfy-v2-real/{comfyui,proxy}), ComfyUI started
// on a free port with empty data folders and the kit's PreviewProbe test node, then the proxy on another free
// port in front of it (V2_TOKEN=comfy-v2-test-key, V2_STATE=1: jobs survive a proxy restart, an empty state dir
// to begin with); stop.sh of each at the end, proxy first. Only what this file started is ever stopped: each
// kit's stop.sh ends the PID its start.sh wrote, nothing else.
const fs = require('node:fs');
const path = require('node:path');
const { execFile, spawnSync } = require('node:child_process');
const { freePort } = require('../../../scripts/start');

const ROOT = path.resolve(__dirname, '../../..');
const PEERS = path.resolve(ROOT, '../shared/peers');
const KITS = {
  comfy: { dir: path.join(PEERS, 'comfyui-new'), pidFile: 'comfyui.pid', homeVariable: 'COMFY_HOME' },
  proxy: { dir: path.join(PEERS, 'comfy-v2'), pidFile: 'comfy-v2.pid', homeVariable: 'V2_HOME' },
};
/** The fixed test key of the proxy kit (its env.sh): clients send `Authorization: Bearer comfy-v2-test-key`. */
const KIT_TOKEN = 'comfy-v2-test-key';
const INSTALL_TIMEOUT_MS = 30 * 60_000; // apt-get of about 270 packages on a new machine
const START_TIMEOUT_MS = 3 * 60_000;

const trimmed = (text) => (text ? text.trim().replace(/\/+$/, '') : '');
const givenUrl = trimmed(process.env.V2_URL);
const token = process.env.V2_TOKEN === undefined ? KIT_TOKEN : process.env.V2_TOKEN;
const kitsPresent = Object.values(KITS).every((kit) => fs.existsSync(path.join(kit.dir, 'start.sh')));
const managed = !givenUrl && kitsPresent;
const home = path.resolve(process.env.V2_REAL_HOME || path.join(ROOT, '.ci-cache/comfy-v2-real'));
const homes = {
  comfy: path.resolve(process.env.COMFY_HOME || path.join(home, 'comfyui')),
  proxy: path.resolve(process.env.V2_HOME || path.join(home, 'proxy')),
};

const NO_SERVER =
  'No Comfy API v2 server to test against: set V2_URL (and V2_TOKEN) to a running comfy-api-proxy, or put the ' +
  `test kits at ${KITS.comfy.dir} and ${KITS.proxy.dir} (the shared/ folder beside this repository) so the ` +
  'suite installs and starts them itself.';

/** Which servers this file started (and so must stop), with their ports. */
const started = { comfy: false, proxy: false };
const ports = { comfy: 0, proxy: 0 };

/** The environment a kit's script runs with: only this run's homes, ports and settings. */
function kitEnv(extra) {
  const env = { ...process.env, COMFY_HOME: homes.comfy, V2_HOME: homes.proxy, ...extra };
  // Settings of a server given from outside never leak into the kits' own.
  if (!extra.COMFY_URL) delete env.COMFY_URL;
  delete env.V2_URL;
  return env;
}

function run(kit, script, env, timeoutMs) {
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      [path.join(KITS[kit].dir, script)],
      { env: kitEnv(env), timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}${stderr}`.trim();
        if (!error) resolve(output);
        else
          reject(
            new Error(`${kit} ${script} failed (${error.code ?? error.signal}): ${output.slice(-2000)}`),
          );
      },
    );
  });
}

/** The PID in a kit's pidfile when that process is alive, else undefined. */
function runningPid(kit) {
  try {
    const pid = Number(fs.readFileSync(path.join(homes[kit], KITS[kit].pidFile), 'utf8').trim());
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

const comfyEnv = () => ({ COMFY_PORT: String(ports.comfy) });
const proxyEnv = () => ({
  V2_PORT: String(ports.proxy),
  COMFY_URL: `http://127.0.0.1:${ports.comfy}`,
  V2_TOKEN: KIT_TOKEN,
  V2_STATE: '1',
});

async function startComfy() {
  await run(
    'comfy',
    'start.sh',
    { ...comfyEnv(), COMFY_CLEAN: '1', COMFY_PREVIEW_PROBE: '1' },
    START_TIMEOUT_MS,
  );
  started.comfy = true;
}

async function startProxy(clean) {
  await run('proxy', 'start.sh', { ...proxyEnv(), V2_CLEAN: clean ? '1' : '0' }, START_TIMEOUT_MS);
  started.proxy = true;
}

async function stopProxy() {
  if (!started.proxy) return;
  started.proxy = false;
  await run('proxy', 'stop.sh', proxyEnv(), 60_000);
}

async function stopComfy() {
  if (!started.comfy) return;
  started.comfy = false;
  await run('comfy', 'stop.sh', comfyEnv(), 60_000);
}

/** Stops the proxy and starts it again on the same port and state dir; resolves once it answers. */
async function restartProxy() {
  await stopProxy();
  await startProxy(false);
}

async function health(url) {
  try {
    const response = await fetch(`${url}/api/v2/health`, { signal: AbortSignal.timeout(10_000) });
    const body = await response.json().catch(() => undefined);
    return response.ok ? (body ?? {}) : undefined;
  } catch {
    return undefined;
  }
}

const v2 = {
  /** The proxy's base address (set by the root hook, before any test runs). */
  url: givenUrl || undefined,
  /** The bearer token it takes (empty: it runs open). */
  token,
  /** The ComfyUI behind it, when known (the kits', or COMFY_URL with V2_URL). */
  comfyUrl: givenUrl ? trimmed(process.env.COMFY_URL) || undefined : undefined,
  /** True when this suite installed and started both servers itself. */
  managed,
  /** Stop and start the proxy again, same port and state: only when the suite manages it (undefined otherwise). */
  restartProxy: managed ? restartProxy : undefined,
};

// A run cut short (Ctrl-C, a crash) still ends what it started, proxy first.
process.once('exit', () => {
  if (started.proxy) spawnSync('bash', [path.join(KITS.proxy.dir, 'stop.sh')], { env: kitEnv(proxyEnv()) });
  if (started.comfy) spawnSync('bash', [path.join(KITS.comfy.dir, 'stop.sh')], { env: kitEnv(comfyEnv()) });
});

const mochaHooks = {
  async beforeAll() {
    this.timeout(INSTALL_TIMEOUT_MS + 2 * START_TIMEOUT_MS);
    if (givenUrl) {
      const said = await health(givenUrl);
      if (!said)
        throw new Error(`V2_URL=${givenUrl} does not answer GET /api/v2/health: start that server first.`);
      process.stdout.write(`  real Comfy API v2: ${givenUrl} (${JSON.stringify(said)})\n`);
      return;
    }
    if (!managed) throw new Error(NO_SERVER);
    for (const kit of ['comfy', 'proxy']) {
      const pid = runningPid(kit);
      if (pid !== undefined) {
        throw new Error(
          `A server from ${KITS[kit].homeVariable}=${homes[kit]} is already running (pid ${pid}) and this suite ` +
            `did not start it: stop it (${KITS[kit].homeVariable}=${homes[kit]} ${path.join(KITS[kit].dir, 'stop.sh')}), ` +
            `set ${KITS[kit].homeVariable} to another folder, or point V2_URL at it.`,
        );
      }
    }
    const began = Date.now();
    // One after the other: on a new machine each may run apt-get, which takes a lock.
    await run('comfy', 'install.sh', {}, INSTALL_TIMEOUT_MS);
    await run('proxy', 'install.sh', {}, INSTALL_TIMEOUT_MS);
    const installed = Date.now();
    ports.comfy = Number(process.env.COMFY_PORT) || (await freePort());
    ports.proxy = Number(process.env.V2_PORT) || (await freePort());
    await startComfy();
    const comfyUp = Date.now();
    await startProxy(true);
    v2.url = `http://127.0.0.1:${ports.proxy}`;
    v2.comfyUrl = `http://127.0.0.1:${ports.comfy}`;
    const said = await health(v2.url);
    process.stdout.write(
      `  real Comfy API v2: comfy-api-proxy ${v2.url} (${JSON.stringify(said)}) -> ComfyUI ${v2.comfyUrl}; ` +
        `install ${installed - began} ms, ComfyUI start ${comfyUp - installed} ms, proxy start ${Date.now() - comfyUp} ms\n`,
    );
  },
  async afterAll() {
    this.timeout(120_000);
    try {
      await stopProxy();
    } finally {
      await stopComfy();
    }
  },
};

module.exports = { v2, mochaHooks };
