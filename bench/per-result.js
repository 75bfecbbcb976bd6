'use strict';
// bench/per-result: what one result costs in Node-RED when thousands of jobs end at once, against what Node-RED
// itself costs to move the same number of msgs between nodes, in the same process and the same run.
//
// Ours: `count` jobs go submit -> await-job; each is held running on the sandbox (a SandboxHang node) until all
// are; then all are released at once, and each job's last frames (its node's end, the save node's `executed`,
// `execution_success`, `executing` null) reach await-job, which sends the result to a function node. Measured:
// Node-RED's CPU from the release to the last result, per result.
// Node-RED's own: a function node sends `count` msgs to a function node (the same hop as await-job's result to
// the flow's function node), and the same through three core nodes (change, change, function); measured: CPU
// from the first send to the last msg, per msg. The frames alone: a bare `ws` client parsing the same burst.
// The classes: the package's connection and tracker without Node-RED, in this process.
// The baseline the target (x1.5) is set against: the bare client's frames plus the chain of core nodes, since
// any client pays the frames before a msg moves through as many nodes as ours does.
//
//   node bench/per-result.js [10000]   (build first; medians of 5 rounds, the order turning each round)
const { fork } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { request } = require('undici');
const { freePort, prepareUserDir, startNodeRed, stopProcesses } = require('../scripts/start');

const KEY = 'per-result-key-51c3';
const COUNT = Number(process.argv.find((arg) => /^\d+$/.test(arg)) ?? 10_000);
const ROUNDS = 5;
const WORKFLOW = {
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
  2: { class_type: 'SandboxHang', inputs: { model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'per-result', images: ['2', 0] } },
};

if (process.argv[2] === '--sandbox') runSandbox();
else
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });

/** The child: the sandbox (cloud-like: every job runs at once, every event to every socket of the key). */
async function runSandbox() {
  const { startSandbox } = require('../dist/sandbox');
  const sandbox = await startSandbox({
    generationApiKey: KEY,
    events: { stepDelayMs: 0, concurrency: Infinity, previews: false },
  });
  const { definitions } = sandbox.generation;
  definitions.SandboxHang = { ...definitions.VAEDecode, name: 'SandboxHang', input: { required: {} } };
  definitions.SaveImage.input.required = { filename_prefix: ['STRING'] };
  process.on('message', (message) => {
    const reply = (body) => process.send({ id: message.id, ...body });
    if (message.cmd === 'running') reply({ count: sandbox.jobs.running().length });
    else if (message.cmd === 'release') reply({ count: sandbox.events.releaseHangs() });
    else if (message.cmd === 'reset') {
      sandbox.jobs.jobs.clear();
      sandbox.jobs.files.clear();
      sandbox.counters.reset();
      reply({});
    } else if (message.cmd === 'close') sandbox.close().then(() => process.exit(0));
  });
  process.send({ ready: sandbox.url });
}

function startChild() {
  const child = fork(__filename, ['--sandbox'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const pending = new Map();
  let next = 0;
  let url;
  const ready = new Promise((resolve) =>
    child.on('message', (message) => {
      if (message.ready) {
        url = message.ready;
        resolve();
      } else pending.get(message.id)?.(message);
    }),
  );
  const call = (cmd) =>
    new Promise((resolve) => {
      const id = next++;
      pending.set(id, resolve);
      child.send({ id, cmd });
    });
  return { ready, call, child, url: () => url };
}

/** settings.js additions: the process's CPU and a tally per path, for the function nodes. */
const GLOBALS = `
module.exports.functionGlobalContext = {
  tally: { ours: 0, base: 0, chain: 0, oursEnd: null, baseStart: null, baseEnd: null, chainStart: null, chainEnd: null, target: 0 },
  cpu: () => process.cpuUsage(),
};
module.exports.logging = { console: { level: 'warn', metrics: false, audit: false } };
`;

function flow(serviceUrl) {
  const z = 'per-result';
  const fn = (id, func, wires, outputs = 1) => ({ id, type: 'function', z, func, outputs, wires });
  const http = (id, method, url, wires) => ({ id, type: 'http in', z, method, url, wires: [wires] });
  const respond = { id: 'respond', type: 'http response', z, statusCode: '', headers: {}, wires: [] };
  const done = (name) => `const t = global.get('tally');
if (++t.${name} === t.target) t.${name === 'ours' ? 'oursEnd' : `${name}End`} = global.get('cpu')();
return null;`;
  return [
    { id: z, type: 'tab', label: 'per result' },
    { id: 'cfg', type: 'graph-gen-config', baseUrl: serviceUrl, credentials: { apiKey: KEY } },
    http('submit-in', 'post', '/submit', ['fan-out']),
    fn(
      'fan-out',
      `const t = global.get('tally');
t.target = msg.payload.count; t.ours = 0; t.oursEnd = null;
for (let i = 0; i < msg.payload.count; i++) node.send([{ payload: msg.payload.workflow }, null]);
return [null, { req: msg.req, res: msg.res, payload: {} }];`,
      [['submit'], ['respond']],
      2,
    ),
    { id: 'submit', type: 'graph-gen-submit', z, server: 'cfg', wires: [['await']] },
    {
      id: 'await',
      type: 'graph-gen-await-job',
      z,
      server: 'cfg',
      resume: false,
      wires: [['ours'], ['ours'], []],
    },
    fn('ours', done('ours'), []),
    http('base-in', 'post', '/base', ['base-emit']),
    fn(
      'base-emit',
      `const t = global.get('tally');
t.target = msg.payload.count; t.base = 0; t.chain = 0;
const to = msg.payload.chain ? 'chain' : 'base';
t[to + 'Start'] = global.get('cpu')();
t[to + 'End'] = null;
for (let i = 0; i < msg.payload.count; i++) node.send(msg.payload.chain ? [null, { payload: i }, null] : [{ payload: i }, null, null]);
return [null, null, { req: msg.req, res: msg.res, payload: {} }];`,
      [['base'], ['change-1'], ['respond']],
      3,
    ),
    fn('base', done('base'), []),
    {
      id: 'change-1',
      type: 'change',
      z,
      rules: [{ t: 'set', p: 'topic', pt: 'msg', to: 'a', tot: 'str' }],
      wires: [['change-2']],
    },
    {
      id: 'change-2',
      type: 'change',
      z,
      rules: [{ t: 'set', p: 'topic', pt: 'msg', to: 'b', tot: 'str' }],
      wires: [['chain']],
    },
    fn('chain', done('chain'), []),
    http('state-in', 'get', '/state', ['state']),
    fn('state', `msg.payload = { ...global.get('tally'), now: global.get('cpu')() };\nreturn msg;`, [
      ['respond'],
    ]),
    respond,
  ];
}

async function call(base, route, body) {
  const response = await request(`${base}${route}`, {
    method: body ? 'POST' : 'GET',
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.body.text();
  if (response.statusCode >= 300) throw new Error(`${route}: ${response.statusCode} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

const cpuMs = (from, to) => (to.user + to.system - from.user - from.system) / 1000;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function until(check, what, ms = 120_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function main() {
  const sandbox = startChild();
  await sandbox.ready;
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-per-result-'));
  const port = await freePort();
  prepareUserDir(userDir, { port, flows: 'none' });
  fs.appendFileSync(path.join(userDir, 'settings.js'), GLOBALS);
  const nodeRed = await startNodeRed({ userDir, port, stdio: ['ignore', 'inherit', 'inherit'] });
  const base = nodeRed.url.replace(/\/$/, '');
  await call(base, '/flows', flow(sandbox.url()));
  await until(() => call(base, '/state').catch(() => false), 'the flow');

  const sides = {
    /** `count` jobs held running, then released at once: Node-RED's CPU to the last result. */
    async ours(count) {
      await call(base, '/submit', { count, workflow: WORKFLOW });
      await until(async () => (await sandbox.call('running')).count >= count, 'every job to run');
      // Every job awaited and its first check answered before the release.
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const before = (await call(base, '/state')).now;
      await sandbox.call('release');
      const state = await until(async () => {
        const now = await call(base, '/state');
        return now.oursEnd ? now : undefined;
      }, 'every result');
      await sandbox.call('reset');
      return cpuMs(before, state.oursEnd) / count;
    },
    /**
     * The same burst without Node-RED: this package's connection and tracker in this process (the socket, the
     * job's life, the result), as an await-job node holds them. What Node-RED adds is the rest.
     */
    async classes(count) {
      const { GenerationConnection } = require('../dist/generation/connection');
      const { JobTracker } = require('../dist/generation/jobs/job-tracker');
      const connection = new GenerationConnection({
        baseUrl: sandbox.url(),
        apiKey: KEY,
        partnerKeyField: 'x',
      });
      const tracker = new JobTracker(connection, { progress: false });
      await connection.sockets().ready(5000);
      let ended = 0;
      let allEnded;
      const finished = new Promise((resolve) => (allEnded = resolve));
      // Each job awaited the moment its submit answers, as the submit node hands it to await-job.
      const submits = [];
      for (let i = 0; i < count; i++) {
        submits.push(
          connection.submit(WORKFLOW).then(({ prompt_id: id }) => {
            void tracker.track(id, { onEnd: () => ++ended === count && allEnded() });
          }),
        );
      }
      await Promise.all(submits);
      await until(async () => (await sandbox.call('running')).count >= count, 'every job to run');
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const before = process.cpuUsage();
      await sandbox.call('release');
      await finished;
      const used = cpuMs({ user: 0, system: 0 }, process.cpuUsage(before));
      tracker.close();
      await connection.close();
      await sandbox.call('reset');
      return used / count;
    },
    /**
     * The frames alone: a bare `ws` client in this process that parses every frame of the same burst and counts
     * the jobs' `execution_success`, which is what any client of the service pays before its first node.
     */
    async bare(count) {
      const WebSocket = require('ws');
      const clientId = `per-result-bare-${Date.now()}`;
      const ws = new WebSocket(
        `${sandbox.url().replace(/^http/, 'ws')}/ws?clientId=${clientId}&token=${KEY}`,
        {
          perMessageDeflate: false,
        },
      );
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      const submits = [];
      for (let i = 0; i < count; i++) {
        submits.push(
          request(`${sandbox.url()}/api/prompt`, {
            method: 'POST',
            headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
            body: JSON.stringify({ prompt: WORKFLOW, client_id: clientId }),
          }).then((response) => response.body.json()),
        );
      }
      await Promise.all(submits);
      await until(async () => (await sandbox.call('running')).count >= count, 'every job to run');
      await new Promise((resolve) => setTimeout(resolve, 2000));
      let ended = 0;
      const finished = new Promise((resolve) =>
        ws.on('message', (data, isBinary) => {
          if (isBinary) return;
          const message = JSON.parse(data.toString('utf8'));
          if (message.type === 'execution_success' && ++ended === count) resolve();
        }),
      );
      const before = process.cpuUsage();
      await sandbox.call('release');
      await finished;
      const used = cpuMs({ user: 0, system: 0 }, process.cpuUsage(before));
      ws.close();
      await sandbox.call('reset');
      return used / count;
    },
    /** Node-RED's own: `count` msgs from a function node to a function node. */
    async hop(count) {
      await call(base, '/base', { count });
      const state = await until(async () => {
        const now = await call(base, '/state');
        return now.baseEnd && now.base >= count ? now : undefined;
      }, 'every msg');
      return cpuMs(state.baseStart, state.baseEnd) / count;
    },
    /** Node-RED's own: `count` msgs through change, change, function. */
    async chain(count) {
      await call(base, '/base', { count, chain: true });
      const state = await until(async () => {
        const now = await call(base, '/state');
        return now.chainEnd && now.chain >= count ? now : undefined;
      }, 'every msg');
      return cpuMs(state.chainStart, state.chainEnd) / count;
    },
  };
  // Warm-up, not measured.
  for (const side of Object.values(sides)) await side(500);
  const results = { ours: [], classes: [], bare: [], hop: [], chain: [] };
  const names = Object.keys(sides);
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names.map((_, i) => names[(i + round) % names.length]))
      results[name].push((await sides[name](COUNT)) * 1000);
  }
  await stopProcesses([nodeRed.child]);
  // The child answers `close` by leaving.
  await new Promise((resolve) => {
    sandbox.child.once('exit', resolve);
    void sandbox.call('close');
  });
  fs.rmSync(userDir, { recursive: true, force: true });

  const [ours, classes, bare, hop, chain] = ['ours', 'classes', 'bare', 'hop', 'chain'].map((name) =>
    median(results[name]),
  );
  const row = (what, value, note) =>
    console.log(`${what.padEnd(66)}${value.toFixed(1).padStart(8)} µs  ${note}`);
  console.log(`per result, ${COUNT} at once, CPU, medians of ${ROUNDS} rounds`);
  row('ours in Node-RED: frames -> await-job -> function node', ours, '');
  row('  the socket and the job life (the same burst without Node-RED)', classes, '');
  row('  the rest: Node-RED and the await-job node (ours - classes)', ours - classes, '');
  row("bare ws client: the same burst's frames, parsed", bare, '');
  row('Node-RED: function node -> function node (a msg)', hop, '');
  row(
    'Node-RED: function -> change -> change -> function (a msg)',
    chain,
    `x${(chain / hop).toFixed(2)} of a hop`,
  );
  row(
    'baseline: the bare client, then the chain of core nodes',
    bare + chain,
    `ours x${(ours / (bare + chain)).toFixed(2)} / target <= x1.5`,
  );
  row(
    'Node-RED part alone: ours - classes against the chain',
    ours - classes,
    `x${((ours - classes) / chain).toFixed(2)} of the chain`,
  );
  const list = (name) => results[name].map((value) => value.toFixed(1)).join(', ');
  console.log(
    `rounds (µs): ours ${list('ours')}; classes ${list('classes')}; bare ${list('bare')}; hop ${list('hop')}; chain ${list('chain')}`,
  );
}
