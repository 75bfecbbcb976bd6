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
// from the first send to the last msg, per msg.
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
  const results = { ours: [], hop: [], chain: [] };
  const names = Object.keys(sides);
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names.map((_, i) => names[(i + round) % names.length]))
      results[name].push((await sides[name](COUNT)) * 1000);
  }
  await stopProcesses([nodeRed.child]);
  await sandbox.call('close');
  fs.rmSync(userDir, { recursive: true, force: true });

  const ours = median(results.ours);
  const hop = median(results.hop);
  const chain = median(results.chain);
  const row = (what, value, note) =>
    console.log(`${what.padEnd(62)}${value.toFixed(1).padStart(8)} µs  ${note}`);
  console.log(`per result, ${COUNT} at once, Node-RED CPU, medians of ${ROUNDS} rounds`);
  row(
    'ours: frames -> await-job -> function node (a result)',
    ours,
    `x${(ours / hop).toFixed(2)} of a hop / target <= x1.5`,
  );
  row('Node-RED: function node -> function node (a msg)', hop, '');
  row(
    'Node-RED: function -> change -> change -> function (a msg)',
    chain,
    `x${(chain / hop).toFixed(2)} of a hop`,
  );
  console.log(
    `rounds (µs): ours ${results.ours.map((v) => v.toFixed(1)).join(', ')}; hop ${results.hop.map((v) => v.toFixed(1)).join(', ')}; chain ${results.chain.map((v) => v.toFixed(1)).join(', ')}`,
  );
}
