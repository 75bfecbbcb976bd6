'use strict';
// The two real ComfyUIs that test/real-pool/ runs a server pool over (loaded by .mocharc.real-pool.json, so its
// hooks are mocha root hooks): v0.8.0 from ../shared/peers/comfyui (`servers.old`) and v0.33.0 from
// ../shared/peers/comfyui-new (`servers.new`), the oldest and the newest release users run, side by side as a
// user with two machines would have them. Each kit's install.sh runs into a home (POOL_OLD_HOME / POOL_NEW_HOME;
// else the first of CI's leg 3/4 homes .ci-cache/comfyui{,-new}, `npm run test:real`'s .ci-cache/comfyui{,-new}-real
// or leg 5's .ci-cache/comfy-v2-real/comfyui that is installed already, so CI unpacks no tree twice; else the
// leg 3/4 one), then its start.sh on a free port (POOL_OLD_PORT / POOL_NEW_PORT to choose) with empty data
// folders. A test stops a server with its kit's stop.sh and starts it again (a member lost mid-run); stop.sh of
// each at the end. Only what this file started is ever stopped: stop.sh ends the PID its start.sh wrote.
// Both servers are this suite's alone, so cleaning up after a test empties their whole queues.
const fs = require('node:fs');
const path = require('node:path');
const { execFile, spawnSync } = require('node:child_process');
const { freePort } = require('../../../scripts/start');
const { until, uniqueColor } = require('../../real/support/workflows');

const ROOT = path.resolve(__dirname, '../../..');
const PEERS = path.resolve(ROOT, '../shared/peers');
const CACHE = path.join(ROOT, '.ci-cache');
const INSTALL_TIMEOUT_MS = 30 * 60_000; // apt-get of about 270 packages on a new machine
const START_TIMEOUT_MS = 3 * 60_000;

/** The homes other suites install a kit into, CI's first (the home this suite makes when none exists). */
const HOMES_OF = {
  comfyui: ['comfyui', 'comfyui-real'],
  'comfyui-new': ['comfyui-new', 'comfyui-new-real', 'comfy-v2-real/comfyui'],
};

function homeFor(kit, variable) {
  if (process.env[variable]) return path.resolve(process.env[variable]);
  const candidates = HOMES_OF[kit].map((name) => path.join(CACHE, name));
  return candidates.find((home) => fs.existsSync(path.join(home, 'src/main.py'))) ?? candidates[0];
}

/**
 * One real server: its kit, home, port and address, and how to stop and start it. `key` is also the id of its
 * config node in the test flows (msg.server.id names it).
 */
function makeServer(key, kit) {
  const upper = key.toUpperCase();
  const server = {
    key,
    kit,
    dir: path.join(PEERS, kit),
    home: homeFor(kit, `POOL_${upper}_HOME`),
    portVariable: `POOL_${upper}_PORT`,
    port: 0,
    /** Its base address (set by the root hook). */
    url: undefined,
    /** Its `system.comfyui_version` (set by the root hook). */
    version: undefined,
    /** Whether this suite started it and has not stopped it since. */
    running: false,
    /** The PID its start.sh wrote, while running. */
    pid: undefined,
    get name() {
      return `ComfyUI ${server.version}`;
    },
    get logFile() {
      return path.join(server.home, 'logs/comfyui.log');
    },
  };
  return server;
}

const servers = { old: makeServer('old', 'comfyui'), new: makeServer('new', 'comfyui-new') };
const SERVER_LIST = [servers.old, servers.new];

function run(server, script, env, timeoutMs) {
  return new Promise((resolve, reject) => {
    const kitEnv = { ...process.env, ...env, COMFY_HOME: server.home, COMFY_PORT: String(server.port) };
    // Settings of a server given from outside never leak into the kits' own.
    delete kitEnv.COMFY_URL;
    execFile(
      'bash',
      [path.join(server.dir, script)],
      { env: kitEnv, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}${stderr}`.trim();
        if (!error) resolve(output);
        else
          reject(
            new Error(
              `${server.kit} ${script} failed (${error.code ?? error.signal}): ${output.slice(-2000)}`,
            ),
          );
      },
    );
  });
}

/** The PID in the server's pidfile when that process is alive, else undefined. */
function runningPid(server) {
  try {
    const pid = Number(fs.readFileSync(path.join(server.home, 'comfyui.pid'), 'utf8').trim());
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

/** Starts the server (start.sh waits until it answers); `clean` empties its data folders first. */
async function start(server, { clean = false } = {}) {
  if (server.running) return;
  await run(server, 'start.sh', { COMFY_CLEAN: clean ? '1' : '0' }, START_TIMEOUT_MS);
  server.running = true;
  server.pid = runningPid(server);
}

/** Stops the server with its kit's stop.sh (the PID its start.sh wrote); resolves once that process is gone. */
async function stop(server) {
  if (!server.running) return;
  const { pid } = server;
  server.running = false;
  server.pid = undefined;
  await run(server, 'stop.sh', {}, 60_000);
  if (pid !== undefined)
    await until(() => !alive(pid), `ComfyUI ${server.version} (pid ${pid}) to end`, 30_000, 100);
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** One request to a server; resolves to {status, body} (body parsed when JSON, else text). */
async function api(server, route, { method = 'GET', body } = {}) {
  const response = await fetch(`${server.url}${route}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const bytes = Buffer.from(await response.arrayBuffer());
  const type = response.headers.get('content-type') ?? '';
  let parsed = bytes;
  if (!type.startsWith('image/')) {
    const text = bytes.toString('utf8');
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
  }
  return { status: response.status, body: parsed };
}

/** The server's history entry of a job ({prompt, outputs, status}), or undefined when it does not know it. */
async function historyOf(server, promptId) {
  const { status, body } = await api(server, `/api/history/${encodeURIComponent(promptId)}`);
  if (status !== 200) throw new Error(`GET /api/history on ${server.name} answered ${status}`);
  return body?.[promptId];
}

/** GET /api/jobs/{id} on a server: the job, or undefined when it does not know it. */
async function jobOf(server, promptId) {
  const { status, body } = await api(server, `/api/jobs/${encodeURIComponent(promptId)}`);
  return status === 200 ? body : undefined;
}

/** Waits until the server runs the job (its status is in_progress); fails when it ended first. */
function runsOn(server, promptId, ms = 60_000) {
  return until(
    async () => {
      const job = await jobOf(server, promptId);
      if (job && ['completed', 'failed', 'cancelled'].includes(job.status))
        throw new Error(`job ${promptId} ended (${job.status}) on ${server.name} before it was seen running`);
      return job?.status === 'in_progress' ? job : undefined;
    },
    `job ${promptId} to run on ${server.name}`,
    ms,
    100,
  );
}

/** Whether the server answers GET /api/system_stats. */
async function answers(server) {
  try {
    return (await api(server, '/api/system_stats')).status === 200;
  } catch {
    return false;
  }
}

/** What the server's log gained since `offset` (a length of it read before). */
function logSince(server, offset) {
  const text = fs.existsSync(server.logFile) ? fs.readFileSync(server.logFile, 'utf8') : '';
  return text.slice(offset);
}

function logLength(server) {
  return fs.existsSync(server.logFile) ? fs.readFileSync(server.logFile, 'utf8').length : 0;
}

/**
 * After a test: every stopped server started again, and both queues emptied (whatever still waits is removed,
 * whatever runs is interrupted), so the next test starts on idle servers.
 */
async function settle() {
  for (const server of SERVER_LIST) await start(server);
  for (const server of SERVER_LIST) {
    await api(server, '/api/queue', { method: 'POST', body: { clear: true } });
    await until(
      async () => {
        const { body } = await api(server, '/api/queue');
        const running = body?.queue_running ?? [];
        const pending = body?.queue_pending ?? [];
        if (pending.length > 0) await api(server, '/api/queue', { method: 'POST', body: { clear: true } });
        if (running.length > 0) await api(server, '/api/interrupt', { method: 'POST' });
        return running.length === 0 && pending.length === 0;
      },
      `${server.name}'s queue to empty`,
      60_000,
      250,
    );
  }
}

/**
 * A workflow only v0.33.0 can run: EmptyImage 64² -> PrimitiveBoundingBox (x 8, y 8, 32 × 16) -> ImageCropV2 ->
 * SaveImage "9". PrimitiveBoundingBox and ImageCropV2 came after v0.8.0 (GET /api/object_info: v0.8.0 lists 445
 * classes and neither of them, v0.33.0 601); both are plain image ops that run on CPU without a model file. The
 * saved image is 32 × 16.
 */
function cropJob(filenamePrefix) {
  return {
    1: { class_type: 'EmptyImage', inputs: { width: 64, height: 64, batch_size: 1, color: uniqueColor() } },
    2: { class_type: 'PrimitiveBoundingBox', inputs: { x: 8, y: 8, width: 32, height: 16 } },
    3: { class_type: 'ImageCropV2', inputs: { image: ['1', 0], crop_region: ['2', 0] } },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: filenamePrefix, images: ['3', 0] } },
  };
}

/** The node classes cropJob needs that v0.8.0 lacks. */
const NEW_ONLY_CLASSES = ['PrimitiveBoundingBox', 'ImageCropV2'];

// A run cut short (Ctrl-C, a crash) still ends what it started.
process.once('exit', () => {
  for (const server of SERVER_LIST) {
    if (!server.running) continue;
    spawnSync('bash', [path.join(server.dir, 'stop.sh')], {
      env: { ...process.env, COMFY_HOME: server.home, COMFY_PORT: String(server.port) },
    });
  }
});

const mochaHooks = {
  async beforeAll() {
    this.timeout(2 * (INSTALL_TIMEOUT_MS + START_TIMEOUT_MS));
    for (const server of SERVER_LIST) {
      if (!fs.existsSync(path.join(server.dir, 'start.sh'))) {
        throw new Error(
          `No ComfyUI test kit at ${server.dir}: the pool suite needs both kits of ../shared/peers (comfyui and ` +
            'comfyui-new), the shared/ folder beside this repository; it installs and starts both itself.',
        );
      }
      const pid = runningPid(server);
      if (pid !== undefined) {
        throw new Error(
          `A ComfyUI from ${server.home} is already running (pid ${pid}) and this suite did not start it: stop it ` +
            `(COMFY_HOME=${server.home} ${path.join(server.dir, 'stop.sh')}) or set POOL_${server.key.toUpperCase()}_HOME ` +
            'to another folder.',
        );
      }
    }
    const began = Date.now();
    // One after the other: on a new machine each may run apt-get, which takes a lock.
    for (const server of SERVER_LIST) await run(server, 'install.sh', {}, INSTALL_TIMEOUT_MS);
    const installed = Date.now();
    const said = [];
    for (const server of SERVER_LIST) {
      server.port = Number(process.env[server.portVariable]) || (await freePort());
      server.url = `http://127.0.0.1:${server.port}`;
      const before = Date.now();
      await start(server, { clean: true });
      const { body } = await api(server, '/api/system_stats');
      server.version = String(body?.system?.comfyui_version ?? 'unknown');
      said.push(
        `ComfyUI ${server.version} ${server.url} pid ${server.pid} (${server.home}, started in ${Date.now() - before} ms)`,
      );
    }
    process.stdout.write(`  real pool: ${said.join('; ')}; install ${installed - began} ms\n`);
  },
  async afterAll() {
    this.timeout(120_000);
    try {
      await stop(servers.old);
    } finally {
      await stop(servers.new);
    }
  },
};

module.exports = {
  servers,
  SERVER_LIST,
  start,
  stop,
  api,
  historyOf,
  jobOf,
  runsOn,
  answers,
  logSince,
  logLength,
  settle,
  cropJob,
  NEW_ONLY_CLASSES,
  mochaHooks,
};
