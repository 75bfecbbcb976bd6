'use strict';
// The Node-RED mode of bench/fanout: the same jobs through the package's nodes in a real Node-RED runtime
// (the package's own node-red, started as a child process on a temporary user dir), as users run them. A flow
// deployed through the admin API takes `POST /bench/start {count}`, sends that many msgs into a submit node,
// awaits them with an await-job node and records, in a function node, the moment each result reaches the flow.
// Latency is that moment minus the sandbox's send of the job's execution_success frame; CPU is Node-RED's own.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { request } = require('undici');
const { freePort, prepareUserDir, startNodeRed, stopProcesses } = require('../scripts/start');

/** settings.js additions: a clock comparable across processes, and the process's CPU, for the functions. */
const BENCH_GLOBALS = `
const { performance } = require('node:perf_hooks');
function profiler(dir) {
  const inspector = require('node:inspector');
  const session = new inspector.Session();
  session.connect();
  let round = 0;
  return {
    start: () => session.post('Profiler.enable', () => session.post('Profiler.start')),
    stop: () =>
      session.post('Profiler.stop', (error, result) => {
        if (!error) require('node:fs').writeFileSync(dir + '/node-red-' + ++round + '.cpuprofile', JSON.stringify(result.profile));
      }),
  };
}
const gcPauses = { totalMs: 0, maxMs: 0 };
new (require('node:perf_hooks').PerformanceObserver)((list) => {
  for (const entry of list.getEntries()) {
    gcPauses.totalMs += entry.duration;
    gcPauses.maxMs = Math.max(gcPauses.maxMs, entry.duration);
  }
}).observe({ entryTypes: ['gc'] });
module.exports.functionGlobalContext = {
  bench: {
    // The collector's pauses since the round's run began (reset with profile=start).
    gc: gcPauses,
    clock: () => performance.timeOrigin + performance.now(),
    cpu: () => process.cpuUsage(),
    ended: new Map(),
    failed: 0,
    // BENCH_PROFILE_DIR set: a CPU profile of Node-RED per measured round (from the run to the last result).
    profiler: process.env.BENCH_PROFILE_DIR ? profiler(process.env.BENCH_PROFILE_DIR) : undefined,
    progress: 0,
    // What the await-job nodes' journals wrote (resume after a restart).
    journal: () => ({ ...require(process.env.GRAPH_GEN_DIST + '/persist/journal').Journal.written }),
  },
};
module.exports.logging = { console: { level: 'warn', metrics: false, audit: false } };
`;

/** The flow: start (fan out) -> submit -> await-job -> record; results and reset over HTTP. */
function benchFlow(serviceUrl, key, { progress, resume }) {
  const tab = 'bench-tab';
  const http = (id, method, url, wires) => ({ id, type: 'http in', z: tab, method, url, wires: [wires] });
  return [
    { id: tab, type: 'tab', label: 'fanout bench' },
    {
      id: 'bench-config',
      type: 'graph-gen-config',
      baseUrl: serviceUrl,
      credentials: { apiKey: key },
    },
    http('bench-start', 'post', '/bench/start', ['bench-fan-out']),
    {
      id: 'bench-fan-out',
      type: 'function',
      z: tab,
      outputs: 2,
      func: `const count = Number(msg.payload.count);
for (let i = 0; i < count; i++) node.send([{ payload: msg.payload.workflow }, null]);
return [null, { req: msg.req, res: msg.res, payload: { accepted: count } }];`,
      wires: [['bench-submit'], ['bench-response']],
    },
    {
      id: 'bench-submit',
      type: 'graph-gen-submit',
      z: tab,
      server: 'bench-config',
      wires: [['bench-await']],
    },
    {
      id: 'bench-await',
      type: 'graph-gen-await-job',
      z: tab,
      server: 'bench-config',
      progress,
      resume,
      previewRate: 2,
      wires: [['bench-record'], ['bench-failed'], progress ? ['bench-progress'] : []],
    },
    {
      id: 'bench-record',
      type: 'function',
      z: tab,
      func: `const bench = global.get('bench');
bench.ended.set(msg.prompt_id, bench.clock());
return null;`,
      wires: [],
    },
    {
      id: 'bench-failed',
      type: 'function',
      z: tab,
      func: `global.get('bench').failed += 1;
return null;`,
      wires: [],
    },
    {
      id: 'bench-progress',
      type: 'function',
      z: tab,
      func: `global.get('bench').progress += 1;
return null;`,
      wires: [],
    },
    http('bench-results', 'get', '/bench/results', ['bench-read']),
    {
      id: 'bench-read',
      type: 'function',
      z: tab,
      func: `const bench = global.get('bench');
const full = msg.req.query.full === '1';
if (msg.req.query.profile === 'start') bench.gc.totalMs = bench.gc.maxMs = 0;
if (bench.profiler && msg.req.query.profile === 'start') bench.profiler.start();
if (bench.profiler && msg.req.query.profile === 'stop') bench.profiler.stop();
msg.payload = {
  ended: bench.ended.size,
  failed: bench.failed,
  progress: bench.progress,
  cpu: bench.cpu(),
  gc: { ...bench.gc },
  journal: bench.journal(),
  times: full ? Object.fromEntries(bench.ended) : undefined,
};
if (msg.req.query.reset === '1') {
  bench.ended.clear();
  bench.failed = 0;
  bench.progress = 0;
}
return msg;`,
      wires: [['bench-response']],
    },
    { id: 'bench-response', type: 'http response', z: tab, statusCode: '', headers: {}, wires: [] },
  ];
}

async function call(url, method = 'GET', body) {
  const response = await request(url, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.body.text();
  if (response.statusCode >= 300) throw new Error(`${method} ${url}: ${response.statusCode} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** Starts Node-RED with the bench flow; `run(jobs)` measures one round; `close()` stops it. */
async function startFlowBench({ serviceUrl, key, workflow, progress }) {
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-bench-'));
  const port = await freePort();
  prepareUserDir(userDir, { port, flows: 'none' });
  fs.appendFileSync(path.join(userDir, 'settings.js'), BENCH_GLOBALS);
  const { child, url } = await startNodeRed({
    userDir,
    port,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { GRAPH_GEN_DIST: path.join(__dirname, '..', 'dist') },
  });
  const base = url.replace(/\/$/, '');
  const kept = path.join(userDir, 'graph-gen', 'await-job-bench-await.jsonl');
  /** One round of `jobs` jobs; `sandbox` is the child's IPC `call`; `resume`: await-job's setting. */
  async function run(sandbox, jobs, { resume = false } = {}) {
    const flow = benchFlow(serviceUrl, key, { progress, resume });
    // The flow is deployed for this round only: the cloud-like sandbox sends every event to every socket
    // with the key, so a socket left open would slow the other sides' rounds.
    await call(`${base}/flows`, 'POST', flow);
    // The deploy answers before its HTTP routes are in place.
    let initial;
    for (let tries = 0; ; tries++) {
      try {
        initial = await call(`${base}/bench/results?reset=1`);
        break;
      } catch (error) {
        if (tries > 100) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    const before = await sandbox('stats');
    const submittedAt = performance.now();
    await call(`${base}/bench/start`, 'POST', { count: jobs, workflow });
    // Every job submitted and awaited (first status checks answered) before the run starts.
    for (;;) {
      const stats = await sandbox('stats');
      if (stats.submits - before.submits >= jobs) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await new Promise((resolve) => setTimeout(resolve, 1500));
    // Every job awaited and kept: the journal at its largest.
    const keptBytes = fs.existsSync(kept) ? fs.statSync(kept).size : 0;
    const startedAt = performance.now();
    const start = await call(`${base}/bench/results?profile=start`);
    const started = performance.now();
    await sandbox('runPending');
    let state;
    for (;;) {
      state = await call(`${base}/bench/results`);
      if (state.ended + state.failed >= jobs) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const timeMs = performance.now() - started;
    const end = await call(`${base}/bench/results?full=1&profile=stop`);
    const after = await sandbox('stats');
    const { stamps } = await sandbox('stamps');
    await call(`${base}/flows`, 'POST', []);
    const latencies = [];
    for (const [id, at] of Object.entries(end.times)) {
      if (stamps[id] !== undefined) latencies.push(at - stamps[id]);
    }
    const cpu = (end.cpu.user + end.cpu.system - start.cpu.user - start.cpu.system) / 1000;
    return {
      keptBytes,
      // While the jobs were submitted and awaited (each kept), and while they ended (each forgotten).
      journalWritesAwaiting: start.journal.writes - initial.journal.writes,
      journalWrites: end.journal.writes - start.journal.writes,
      awaitingMs: startedAt - submittedAt,
      timeMs,
      cpuMs: cpu,
      gc: end.gc,
      completed: end.ended,
      failed: end.failed,
      progressMsgs: end.progress,
      latencies: latencies.sort((a, b) => a - b),
      restPerJob: (after.otherRequests - before.otherRequests) / jobs,
      socketsOpened: after.socketsNow,
    };
  }

  async function close() {
    await stopProcesses([child]);
    fs.rmSync(userDir, { recursive: true, force: true });
  }
  return { run, close };
}

module.exports = { startFlowBench };
