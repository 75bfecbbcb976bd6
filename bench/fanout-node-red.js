'use strict';
// The Node-RED mode of bench/fanout: the same jobs through the package's nodes in a real Node-RED runtime
// (the package's own node-red, started as a child process on a temporary user dir), as users run them. A flow
// deployed through the admin API takes `POST /bench/start {count}`, sends that many msgs into a submit node,
// awaits them with an await-job node and records, in a function node, the moment each result reaches the flow.
// Latency is that moment minus the sandbox's send of the job's execution_success frame; CPU is Node-RED's own.
// With `memberUrls` a round can go through a graph-gen-pool of one config node per address instead (run's
// `through`), the submit and await-job nodes set to the pool, each result counted by its msg.server; or through
// those config nodes each with its own submit and await-job, the msgs sent to them in turn.
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
    stop: (label) =>
      session.post('Profiler.stop', (error, result) => {
        if (!error) require('node:fs').writeFileSync(dir + '/node-red-' + (label ? label + '-' : '') + ++round + '.cpuprofile', JSON.stringify(result.profile));
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
    // The collector's pauses since the round's run began (reset with gc=reset).
    gc: gcPauses,
    clock: () => performance.timeOrigin + performance.now(),
    cpu: () => process.cpuUsage(),
    ended: new Map(),
    failed: 0,
    // Results by the server msg.server names ('one' without a pool): the spread of a pool's jobs.
    servers: {},
    // BENCH_PROFILE_DIR set: a CPU profile of Node-RED per measured round (from the run to the last result;
    // BENCH_PROFILE_SUBMITS=1: from the first submit).
    profiler: process.env.BENCH_PROFILE_DIR ? profiler(process.env.BENCH_PROFILE_DIR) : undefined,
    progress: 0,
    // What the await-job nodes' journals wrote (resume after a restart).
    journal: () => ({ ...require(process.env.GRAPH_GEN_DIST + '/persist/journal').Journal.written }),
  },
};
module.exports.logging = { console: { level: 'warn', metrics: false, audit: false } };
`;

/**
 * The flow: start (fan out) -> submit -> await-job -> record; results and reset over HTTP. `through`: 'one' (one
 * config node at `serviceUrl`), 'pool' (a pool, strategy soonest, of one config node per `memberUrls` address) or
 * 'each' (one config node per address, each with its own submit and await-job, the fan-out sending the msgs to
 * them in turn: a user's own routing without a pool).
 */
function benchFlow(serviceUrl, key, { progress, resume, through = 'one', memberUrls = [] }) {
  const tab = 'bench-tab';
  const http = (id, method, url, wires) => ({ id, type: 'http in', z: tab, method, url, wires: [wires] });
  const configs =
    through === 'one'
      ? [{ id: 'bench-config', type: 'graph-gen-config', baseUrl: serviceUrl, credentials: { apiKey: key } }]
      : memberUrls.map((url, index) => ({
          id: `bench-member-${index + 1}`,
          type: 'graph-gen-config',
          name: `sandbox ${index + 1}`,
          baseUrl: url,
          credentials: { apiKey: key },
        }));
  const pool = {
    id: 'bench-pool',
    type: 'graph-gen-pool',
    name: 'bench pool',
    strategy: 'soonest',
    ...Object.fromEntries(configs.map((config, index) => [`server${index + 1}`, config.id])),
  };
  // One submit -> await-job pair per way; the first keeps the ids the resume figures read.
  const ways =
    through === 'pool' ? [{ server: '', pool: pool.id }] : configs.map((config) => ({ server: config.id }));
  const suffix = (index) => (index === 0 ? '' : `-${index + 1}`);
  return [
    { id: tab, type: 'tab', label: 'fanout bench' },
    ...configs,
    ...(through === 'pool' ? [pool] : []),
    http('bench-start', 'post', '/bench/start', ['bench-fan-out']),
    {
      id: 'bench-fan-out',
      type: 'function',
      z: tab,
      outputs: ways.length + 1,
      func: `const count = Number(msg.payload.count);
const ways = ${ways.length};
for (let i = 0; i < count; i++) {
  const out = new Array(ways + 1).fill(null);
  out[i % ways] = { payload: msg.payload.workflow };
  node.send(out);
}
const answer = new Array(ways + 1).fill(null);
answer[ways] = { req: msg.req, res: msg.res, payload: { accepted: count } };
return answer;`,
      wires: [...ways.map((_, index) => [`bench-submit${suffix(index)}`]), ['bench-response']],
    },
    ...ways.flatMap((target, index) => [
      {
        id: `bench-submit${suffix(index)}`,
        type: 'graph-gen-submit',
        z: tab,
        ...target,
        wires: [[`bench-await${suffix(index)}`]],
      },
      {
        id: `bench-await${suffix(index)}`,
        type: 'graph-gen-await-job',
        z: tab,
        ...target,
        progress,
        resume,
        previewRate: 2,
        wires: [['bench-record'], ['bench-failed'], progress ? ['bench-progress'] : []],
      },
    ]),
    {
      id: 'bench-record',
      type: 'function',
      z: tab,
      func: `const bench = global.get('bench');
bench.ended.set(msg.prompt_id, bench.clock());
const server = msg.server ? msg.server.name : 'one';
bench.servers[server] = (bench.servers[server] || 0) + 1;
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
if (msg.req.query.gc === 'reset') bench.gc.totalMs = bench.gc.maxMs = 0;
if (bench.profiler && msg.req.query.profile === 'start') bench.profiler.start();
if (bench.profiler && msg.req.query.profile === 'stop') bench.profiler.stop(msg.req.query.label);
msg.payload = {
  ended: bench.ended.size,
  failed: bench.failed,
  progress: bench.progress,
  servers: { ...bench.servers },
  cpu: bench.cpu(),
  gc: { ...bench.gc },
  journal: bench.journal(),
  times: full ? Object.fromEntries(bench.ended) : undefined,
};
if (msg.req.query.reset === '1') {
  bench.ended.clear();
  bench.failed = 0;
  bench.progress = 0;
  bench.servers = {};
}
return msg;`,
      wires: [['bench-response']],
    },
    { id: 'bench-response', type: 'http response', z: tab, statusCode: '', headers: {}, wires: [] },
  ];
}

/** Requests besides submits each path took between two `stats` of every sandbox. */
function requestsBetween(before, after) {
  const counts = {};
  after.forEach((stats, index) => {
    for (const [route, count] of Object.entries(stats.byPath)) {
      const more = count - (before[index].byPath[route] ?? 0);
      if (more > 0) counts[route] = (counts[route] ?? 0) + more;
    }
  });
  return counts;
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

/**
 * Starts Node-RED with the bench flow; `run(sandbox, jobs)` measures one round; `close()` stops it. `memberUrls`:
 * the servers' addresses for rounds run through a pool or through one config node each (`through`; `sandbox` is
 * then one IPC `call` per server, in order).
 */
async function startFlowBench({ serviceUrl, key, workflow, progress, memberUrls }) {
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
  // BENCH_PROFILE_SUBMITS=1: the profile spans the submits too (where a pool chooses its servers), not the
  // results' burst only; =only: the submits (and the awaits' first checks) alone, in a profile of their own.
  const profileSubmits = ['1', 'only'].includes(process.env.BENCH_PROFILE_SUBMITS);
  const submitsOnly = process.env.BENCH_PROFILE_SUBMITS === 'only';
  /**
   * One round of `jobs` jobs; `sandbox` is the child's IPC `call` (an array of them: every server the round's jobs
   * may go to); `resume`: await-job's setting; `through`: benchFlow's ('pool', 'each': the `memberUrls`).
   */
  async function run(sandbox, jobs, { resume = false, through = 'one' } = {}) {
    const sandboxes = Array.isArray(sandbox) ? sandbox : [sandbox];
    const each = (cmd) => Promise.all(sandboxes.map((callOne) => callOne(cmd)));
    const total = (list, field) => list.reduce((sum, stats) => sum + stats[field], 0);
    const flow = benchFlow(serviceUrl, key, { progress, resume, through, memberUrls });
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
    const before = await each('stats');
    if (profileSubmits) await call(`${base}/bench/results?profile=start`);
    // Node-RED's CPU from here: the submits and the awaits' first status checks, then (below) the run.
    const submitStart = await call(`${base}/bench/results`);
    const submittedAt = performance.now();
    await call(`${base}/bench/start`, 'POST', { count: jobs, workflow });
    // Every job submitted and awaited (first status checks answered) before the run starts.
    for (;;) {
      const stats = await each('stats');
      if (total(stats, 'submits') - total(before, 'submits') >= jobs) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const submitsMs = performance.now() - submittedAt;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    // Every job awaited and kept: the journal at its largest.
    const keptBytes = fs.existsSync(kept) ? fs.statSync(kept).size : 0;
    const startedAt = performance.now();
    const profileNow = submitsOnly
      ? `&profile=stop&label=${through}-submits`
      : profileSubmits
        ? ''
        : '&profile=start';
    const start = await call(`${base}/bench/results?gc=reset${profileNow}`);
    const started = performance.now();
    await each('runPending');
    let state;
    for (;;) {
      state = await call(`${base}/bench/results`);
      if (state.ended + state.failed >= jobs) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const timeMs = performance.now() - started;
    const end = await call(
      `${base}/bench/results?full=1${submitsOnly ? '' : `&profile=stop&label=${through}`}`,
    );
    const after = await each('stats');
    const stamps = Object.assign({}, ...(await each('stamps')).map((answer) => answer.stamps));
    await call(`${base}/flows`, 'POST', []);
    const latencies = [];
    for (const [id, at] of Object.entries(end.times)) {
      if (stamps[id] !== undefined) latencies.push(at - stamps[id]);
    }
    const cpuBetween = (from, to) => (to.cpu.user + to.cpu.system - from.cpu.user - from.cpu.system) / 1000;
    return {
      keptBytes,
      // While the jobs were submitted and awaited (each kept), and while they ended (each forgotten).
      journalWritesAwaiting: start.journal.writes - initial.journal.writes,
      journalWrites: end.journal.writes - start.journal.writes,
      awaitingMs: startedAt - submittedAt,
      timeMs,
      cpuMs: cpuBetween(start, end),
      // From the first submit to the run: submits, awaits, their first status checks, and 1.5 s of waiting
      // (the pool's and the sockets' own requests meanwhile).
      submitCpuMs: cpuBetween(submitStart, start),
      submitsMs,
      gc: end.gc,
      completed: end.ended,
      failed: end.failed,
      progressMsgs: end.progress,
      // Results by msg.server (the pool's members by name), and submits each sandbox took, in order.
      servers: end.servers,
      submitsBySandbox: after.map((stats, index) => stats.submits - before[index].submits),
      latencies: latencies.sort((a, b) => a - b),
      restPerJob: (total(after, 'otherRequests') - total(before, 'otherRequests')) / jobs,
      // Those requests by path, every server's together, and the jobs the queue reads among them listed.
      requestsByPath: requestsBetween(before, after),
      queueEntriesRead: total(after, 'queueEntriesRead') - total(before, 'queueEntriesRead'),
      socketsOpened: total(after, 'socketsNow'),
    };
  }

  async function close() {
    await stopProcesses([child]);
    fs.rmSync(userDir, { recursive: true, force: true });
  }
  return { run, close };
}

module.exports = { startFlowBench };
