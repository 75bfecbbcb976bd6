'use strict';
// Lists 50,000 workflows at limit 250 from the sandbox three ways: the baseline, a bare undici keep-alive
// loop over the cursors; our client's walk (client.walk, pages appended to one array); and our walk as the
// list node's all mode runs it (collectAll: the same, with repeated ids dropped). Each side runs in its own
// child process (so its peak RSS is its own), is warmed up once, then timed walk by walk in turns with the
// others; the sandbox runs in this process. Usage: node bench/list-all.js [workflows] [walks]
const { fork } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { performance } = require('node:perf_hooks');

const WORKFLOWS = Number(process.argv[2]) || 50_000;
const WALKS = Number(process.argv[3]) || 20;
const LIMIT = 250;
const KEY = 'bench-key';
const TARGET = 1.2;

const SIDES = {
  baseline: 'bare undici loop',
  walk: 'our client walk',
  all: 'walk + repeat filter',
};

async function baselineWalk(base) {
  const { Agent, request } = require('undici');
  const agent = (baselineWalk.agent ??= new Agent({ keepAliveTimeout: 30_000, connections: 16 }));
  const headers = { 'x-automation-api-key': KEY, accept: 'application/json' };
  const workflows = [];
  let cursor;
  do {
    const url = `${base}/api/v1/workflows?limit=${LIMIT}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const response = await request(url, { headers, dispatcher: agent });
    if (response.statusCode !== 200) throw new Error(`HTTP ${response.statusCode}`);
    const page = await response.body.json();
    for (const workflow of page.data) workflows.push(workflow);
    cursor = page.nextCursor;
  } while (cursor);
  return workflows.length;
}

function ourClient(base) {
  const { AutomationClient } = require('../dist/automation/client');
  ourClient.client ??= new AutomationClient({ host: '127.0.0.1', port: new URL(base).port, apiKey: KEY });
  return ourClient.client;
}

async function clientWalk(base) {
  const workflows = [];
  for await (const page of ourClient(base).walk({ limit: LIMIT })) {
    for (const workflow of page.data) workflows.push(workflow);
  }
  return workflows.length;
}

async function allModeWalk(base) {
  const { collectAll } = require('../dist/automation/client');
  const { workflows } = await collectAll(ourClient(base).walk({ limit: LIMIT }));
  return workflows.length;
}

const WALKERS = { baseline: baselineWalk, walk: clientWalk, all: allModeWalk };

/** A child process that walks when told to and reports each walk's time, then its peak RSS. */
function worker(side, base) {
  process.on('message', async (command) => {
    try {
      if (command === 'walk') {
        const started = performance.now();
        const count = await WALKERS[side](base);
        process.send({ ms: performance.now() - started, count });
      } else {
        process.send({ maxRssKb: process.resourceUsage().maxRSS });
        process.exit(0);
      }
    } catch (error) {
      process.stderr.write(`${error.stack}\n`);
      process.exit(1);
    }
  });
}

function startWorker(side, base) {
  const child = fork(__filename, ['--worker', side, base], { stdio: 'inherit' });
  child.once('exit', (code) => code !== 0 && process.stderr.write(`${side} worker exited with ${code}\n`));
  return {
    ask(command) {
      return new Promise((resolve) => {
        child.once('message', resolve);
        child.send(command);
      });
    },
  };
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function main() {
  const { SandboxServer } = require('../dist/sandbox/server');
  const { mountAutomationService } = require('../dist/sandbox/automation-service');
  const server = new SandboxServer();
  mountAutomationService(server, { apiKey: KEY, workflows: WORKFLOWS });
  await server.listen();
  const sides = Object.keys(SIDES);
  const results = {};
  try {
    const workers = Object.fromEntries(sides.map((side) => [side, startWorker(side, server.url)]));
    for (const side of sides) {
      await workers[side].ask('walk'); // warm-up: JIT and the connection
      results[side] = { times: [], requests: 0, count: 0, maxRssKb: 0 };
    }
    // Walk by walk, rotating which side goes first, so a slow moment of the machine hits every side alike.
    for (let walk = 0; walk < WALKS; walk++) {
      const order = sides.map((_, i) => sides[(i + walk) % sides.length]);
      for (const side of order) {
        server.counters.reset();
        const { ms, count } = await workers[side].ask('walk');
        if (count !== WORKFLOWS) throw new Error(`${side} listed ${count} of ${WORKFLOWS}`);
        Object.assign(results[side], { count, requests: server.counters.count('/api/v1/workflows') });
        results[side].times.push(ms);
      }
    }
    for (const side of sides) results[side].maxRssKb = (await workers[side].ask('done')).maxRssKb;
  } finally {
    await server.close();
  }

  const base = results.baseline;
  const cell = (text, width) => String(text).padStart(width);
  const row = (label, values) => `| ${label.padEnd(30)} | ${values.map((v) => cell(v, 20)).join(' | ')} |`;
  const ratioOf = (side, pick) => (pick(results[side].times) / pick(base.times)).toFixed(3);
  const fastest = (times) => Math.min(...times);
  const lines = [
    `list-all: ${WORKFLOWS} workflows at limit ${LIMIT}, ${WALKS} timed walks per side, Node ${process.version}`,
    '',
    row(
      '',
      sides.map((side) => SIDES[side]),
    ),
    `|${'-'.repeat(32)}|${sides.map(() => '-'.repeat(22)).join('|')}|`,
    row(
      'median time per walk (ms)',
      sides.map((side) => median(results[side].times).toFixed(1)),
    ),
    row(
      'fastest walk (ms)',
      sides.map((side) => fastest(results[side].times).toFixed(1)),
    ),
    row(
      'ratio to baseline (median)',
      sides.map((side) => ratioOf(side, median)),
    ),
    row(
      'ratio to baseline (fastest)',
      sides.map((side) => ratioOf(side, fastest)),
    ),
    row(
      'requests per walk',
      sides.map((side) => results[side].requests),
    ),
    row(
      'workflows listed',
      sides.map((side) => results[side].count),
    ),
    row(
      'peak RSS (MB)',
      sides.map((side) => (results[side].maxRssKb / 1024).toFixed(1)),
    ),
    '',
    ...['walk', 'all'].map((side) => {
      const ratio = Number(ratioOf(side, median));
      return `target (median ratio <= ${TARGET}), ${SIDES[side]}: ${ratio <= TARGET ? 'met' : 'NOT met'} (${ratio})`;
    }),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  const dir = path.join(__dirname, 'results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'list-all.json'),
    JSON.stringify(
      { workflows: WORKFLOWS, limit: LIMIT, walks: WALKS, node: process.version, results },
      null,
      2,
    ),
  );
}

if (process.argv[2] === '--worker') {
  worker(process.argv[3], process.argv[4]);
} else {
  main().catch((error) => {
    process.stderr.write(`${error.stack}\n`);
    process.exitCode = 1;
  });
}
