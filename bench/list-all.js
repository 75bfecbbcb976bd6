'use strict';
// Lists 50,000 workflows at limit 250 from the sandbox with our client's walk (as the list node's all mode
// does it: every page, repeats dropped) and, as the baseline, with a bare undici keep-alive loop over the
// same cursors. Each side runs in its own child process (so peak RSS is its own), warmed up once, then
// timed over several walks; the sandbox runs in this process. Usage: node bench/list-all.js [workflows]
const { fork } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { performance } = require('node:perf_hooks');

const WORKFLOWS = Number(process.argv[2]) || 50_000;
const LIMIT = 250;
const WALKS = 8;
const KEY = 'bench-key';

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

async function clientWalk(base) {
  const { AutomationClient, collectAll } = require('../dist/automation/client');
  const { port } = new URL(base);
  const client = (clientWalk.client ??= new AutomationClient({ host: '127.0.0.1', port, apiKey: KEY }));
  const { workflows } = await collectAll(client.walk({ limit: LIMIT }));
  return workflows.length;
}

async function worker(kind, base) {
  const walk = kind === 'client' ? clientWalk : baselineWalk;
  await walk(base); // warm-up: JIT and the connection
  const times = [];
  let count = 0;
  for (let i = 0; i < WALKS; i++) {
    const started = performance.now();
    count = await walk(base);
    times.push(performance.now() - started);
  }
  process.send({ times, count, maxRssKb: process.resourceUsage().maxRSS });
  process.exit(0);
}

function runWorker(kind, base) {
  return new Promise((resolve, reject) => {
    const child = fork(__filename, ['--worker', kind, base], { stdio: 'inherit' });
    child.once('message', resolve);
    child.once('exit', (code) => code !== 0 && reject(new Error(`${kind} worker exited with ${code}`)));
  });
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function main() {
  const { SandboxServer } = require('../dist/sandbox/server');
  const { mountAutomationService } = require('../dist/sandbox/automation-service');
  const server = new SandboxServer();
  mountAutomationService(server, { apiKey: KEY, workflows: WORKFLOWS });
  await server.listen();
  const results = {};
  try {
    // Alternating rounds, so a slow moment of the machine does not land on one side only.
    for (let round = 0; round < 3; round++) {
      for (const kind of ['baseline', 'client']) {
        server.counters.reset();
        const result = await runWorker(kind, server.url);
        const requests = server.counters.count('/api/v1/workflows') / (WALKS + 1);
        const entry = (results[kind] ??= { times: [], count: result.count, requests, maxRssKb: 0 });
        entry.times.push(...result.times);
        entry.maxRssKb = Math.max(entry.maxRssKb, result.maxRssKb);
        if (result.count !== WORKFLOWS) throw new Error(`${kind} listed ${result.count} of ${WORKFLOWS}`);
      }
    }
  } finally {
    await server.close();
  }
  const base = results.baseline;
  const ours = results.client;
  const ratio = median(ours.times) / median(base.times);
  const row = (label, a, b, r = '') =>
    `| ${label.padEnd(22)} | ${String(a).padStart(14)} | ${String(b).padStart(12)} | ${String(r).padStart(6)} |`;
  const lines = [
    `list-all: ${WORKFLOWS} workflows at limit ${LIMIT}, ${base.times.length} timed walks each (median), Node ${process.version}`,
    row('', 'bare undici', 'our client', 'ratio'),
    `|${'-'.repeat(24)}|${'-'.repeat(16)}|${'-'.repeat(14)}|${'-'.repeat(8)}|`,
    row('time per walk (ms)', median(base.times).toFixed(1), median(ours.times).toFixed(1), ratio.toFixed(3)),
    row('fastest walk (ms)', Math.min(...base.times).toFixed(1), Math.min(...ours.times).toFixed(1)),
    row('requests per walk', base.requests, ours.requests),
    row('workflows listed', base.count, ours.count),
    row('peak RSS (MB)', (base.maxRssKb / 1024).toFixed(1), (ours.maxRssKb / 1024).toFixed(1)),
    '',
    `target: ratio <= 1.2 -> ${ratio <= 1.2 ? 'met' : 'NOT met'}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  const dir = path.join(__dirname, 'results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'list-all.json'),
    JSON.stringify({ workflows: WORKFLOWS, limit: LIMIT, ratio, results, node: process.version }, null, 2),
  );
}

if (process.argv[2] === '--worker') {
  worker(process.argv[3], process.argv[4]).catch((error) => {
    process.stderr.write(`${error.stack}\n`);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    process.stderr.write(`${error.stack}\n`);
    process.exitCode = 1;
  });
}
