'use strict';
// bench/fanout: thousands of jobs in flight through one config node's connection (socket manager, job
// tracking, REST status checks), end to end, side by side in one run with a bare client (undici for the
// submits, one `ws` that parses every frame). Each job goes through POST /api/prompt as a user's does, then
// sends 56 events (execution_start, execution_cached, executing, progress, progress_state as a real server
// sends them, type-4 previews, executed, execution_success, executing null) from the sandbox in a child
// process, with its queue `status` events on. Latency runs from the sandbox's send of a job's execution_success frame (stamped into the frame
// with the machine's clock) to the moment the result reaches the caller's code: the tracker's onEnd, where
// the await-job node sends its msg, or the bare client's message handler after parsing.
//
//   node bench/fanout.js [1000,5000,10000] [--node-red [--resume]] [--progress] [--self-hosted]
//                        [--compare <checkout>] [--v2] [--pool] [--rounds N]   (build first)
//
// --v2: one more side, the same classes speaking Comfy API v2 to a second sandbox in its v2 mode (jobs followed
// by polling two shared list reads, event streams only for progress): requests per job besides the submit, the
// most streams open at once, and CPU per job beside today's dialect (classes) in the same run.
//
// --pool: instead of the sides above, a pool of 4 sandboxes (graph-gen-pool) beside one config node, both in a
// real Node-RED, and what choosing a member costs (bench/fanout-pool.js).
//
// Reports per size: wall time, client CPU, completion->result p50/p99 of both, REST requests per job,
// sockets opened; and heap per awaited job at the largest size. Medians of 5 alternating rounds.
const { fork } = require('node:child_process');
const { performance, PerformanceObserver } = require('node:perf_hooks');
const fs = require('node:fs');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');

const KEY = 'bench-key-2b7d';
const ARGS = process.argv.slice(2);
const SIZES = (ARGS.find((arg) => /^\d[\d,]*$/.test(arg)) ?? '1000,5000,10000').split(',').map(Number);
/** --node-red: also through the nodes in a real Node-RED; --progress: its await-job sends progress msgs too. */
const NODE_RED = ARGS.includes('--node-red');
const PROGRESS = ARGS.includes('--progress');
/**
 * --resume: the Node-RED side runs twice a round, await-job's "resume after a restart" off and on, in the same
 * Node-RED process: the cost of keeping every awaited job on disk.
 */
const RESUME = ARGS.includes('--resume');
/**
 * --self-hosted: the sandbox as a self-hosted server (no key, events by client id, and the list of active jobs
 * that status checks read instead of the queue); by default it is cloud-like.
 */
const SELF_HOSTED = ARGS.includes('--self-hosted');
/**
 * --compare <checkout>: one more side, the classes of another built checkout of this package (an older commit
 * in a git worktree, say), in the same run against the same sandbox, rounds alternating: before and after a
 * change, without two runs' noise between them.
 */
const COMPARE = ARGS.includes('--compare') ? path.resolve(ARGS[ARGS.indexOf('--compare') + 1]) : undefined;
const V2 = ARGS.includes('--v2');
const POOL = ARGS.includes('--pool');
const ROUNDS = ARGS.includes('--rounds') ? Number(ARGS[ARGS.indexOf('--rounds') + 1]) : 5;
const SUBMITS_AT_ONCE = 64;
/**
 * Three nodes, 14 sampler steps: 2 + 3 x (executing, progress_state before and after) + 14 x (progress,
 * progress_state, preview) + executed + success + executing null = 56, and 3 queue status frames.
 */
const WORKFLOW = {
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
  2: { class_type: 'KSampler', inputs: { steps: 14, model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'bench', images: ['2', 0] } },
};

/** Now on the machine's clock, in ms with sub-ms precision: comparable across processes. */
const clock = () => performance.timeOrigin + performance.now();
/** The collector's pauses (gcPauses), watched in the measuring process only, not in the sandbox's. */
let GC;

if (ARGS[0] === '--sandbox') {
  runSandbox(ARGS.includes('--v2-mode'));
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}

/** The child: the sandbox, driven over IPC so its CPU is not the client's. */
async function runSandbox(v2Mode) {
  const { startSandbox } = require('../dist/sandbox');
  const sandbox = await startSandbox({
    ...(v2Mode ? { dialect: 'comfy-api-v2', v2: { token: KEY } } : {}),
    generationApiKey: SELF_HOSTED ? undefined : KEY,
    events: { autoRun: false, stepDelayMs: 0, maxSteps: 14, concurrency: Infinity, stampCompletion: true },
  });
  // The sandbox's validation needs the workflow's loader inputs only: KSampler takes what it is given here.
  sandbox.generation.definitions.KSampler.input.required = { model: ['MODEL'] };
  sandbox.generation.definitions.SaveImage.input.required = { filename_prefix: ['STRING'] };
  // The jobs every queue read answered with (each with its workflow: what the reading side parses), counted as
  // each read comes in.
  const record = sandbox.counters.record.bind(sandbox.counters);
  let queueEntriesRead = 0;
  sandbox.counters.record = (seen) => {
    if (seen.path === '/api/queue') queueEntriesRead += sandbox.jobs.jobs.size;
    return record(seen);
  };
  process.on('message', (message) => {
    const reply = (body) => process.send({ id: message.id, ...body });
    if (message.cmd === 'run') {
      for (const id of message.ids) sandbox.events.run(id);
      reply({});
    } else if (message.cmd === 'cancel') {
      for (const job of sandbox.jobs.pending()) sandbox.jobs.cancel(job.id);
      reply({});
    } else if (message.cmd === 'stats') {
      const api = sandbox.counters.requests.filter((seen) => seen.path.startsWith('/api/'));
      const isSubmit = (seen) =>
        seen.path === '/api/prompt' || (seen.path === '/api/v2/jobs' && seen.method === 'POST');
      // Requests besides submits by path (a job's own path as {id}).
      const byPath = {};
      for (const seen of api) {
        if (isSubmit(seen)) continue;
        const route = seen.path.replace(/^\/api\/(jobs?|history(_v2)?)\/[^/]+/, '/api/$1/{id}');
        byPath[route] = (byPath[route] ?? 0) + 1;
      }
      reply({
        queueEntriesRead,
        byPath,
        socketsOpened: sandbox.counters.socketsOpened,
        socketsNow: sandbox.events.sockets,
        submits: api.filter(isSubmit).length,
        otherRequests: api.filter((seen) => !isSubmit(seen)).length,
        mostStreams: sandbox.v2?.counters.streams.mostOpen ?? 0,
      });
    } else if (message.cmd === 'runPending') {
      const ids = sandbox.jobs.pending().map((job) => job.id);
      for (const id of ids) sandbox.events.run(id);
      reply({ count: ids.length });
    } else if (message.cmd === 'stamps') {
      reply({ stamps: Object.fromEntries(sandbox.events.completionsSent) });
    } else if (message.cmd === 'reset') {
      sandbox.counters.reset();
      sandbox.v2?.counters.reset();
      sandbox.v2?.jobs.clear();
      sandbox.jobs.jobs.clear();
      // The outputs' file records too: kept from round to round they grew the sandbox's heap by 10,000 a
      // round, and its collector's pauses with it (frames stamped, then held in its write queue meanwhile).
      sandbox.jobs.files.clear();
      sandbox.events.completionsSent.clear();
      // The next side starts once the last one's socket is gone: this cloud-like sandbox sends every event
      // to every socket with the key.
      const started = Date.now();
      const settled = () => {
        if (sandbox.events.sockets === 0 || Date.now() - started > 5000) reply({});
        else setTimeout(settled, 20);
      };
      settled();
    } else if (message.cmd === 'close') {
      sandbox.close().then(() => {
        reply({});
        process.exit(0);
      });
    }
  });
  process.send({ ready: sandbox.url });
}

function startChild(v2Mode = false) {
  const child = fork(
    __filename,
    ['--sandbox', ...(SELF_HOSTED ? ['--self-hosted'] : []), ...(v2Mode ? ['--v2-mode'] : [])],
    {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  const pending = new Map();
  let next = 0;
  let url;
  const ready = new Promise((resolve) => {
    child.on('message', (message) => {
      if (message.ready) {
        url = message.ready;
        resolve();
      } else if (pending.has(message.id)) {
        pending.get(message.id)(message);
        pending.delete(message.id);
      }
    });
  });
  const call = (cmd, body = {}) =>
    new Promise((resolve) => {
      const id = next++;
      pending.set(id, resolve);
      child.send({ id, cmd, ...body });
    });
  return {
    ready,
    call,
    get url() {
      return url;
    },
  };
}

/**
 * The collector's pauses in this process from `reset()` on: a pause holds every frame that arrives meanwhile,
 * so the tail of a side's latency is often its longest pause.
 */
function gcPauses() {
  let totalMs = 0;
  let maxMs = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      totalMs += entry.duration;
      maxMs = Math.max(maxMs, entry.duration);
    }
  }).observe({ entryTypes: ['gc'] });
  return {
    reset: () => (totalMs = maxMs = 0),
    read: () => ({ totalMs, maxMs }),
  };
}

function gc() {
  v8.setFlagsFromString('--expose-gc');
  const collect = vm.runInNewContext('gc');
  collect();
  collect();
}

function cpuMs(start) {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** `count` submits, SUBMITS_AT_ONCE at a time, through `submitOne`; the prompt ids in order. */
async function submitAll(count, submitOne) {
  const ids = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const index = next++;
      ids[index] = await submitOne();
    }
  };
  await Promise.all(Array.from({ length: SUBMITS_AT_ONCE }, worker));
  return ids;
}

/** The baseline: undici submits, then one bare ws client that parses every frame. */
async function runBaseline(child, jobs) {
  const WebSocket = require('ws');
  const { request, Agent } = require('undici');
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 16 });
  const clientId = `bench-baseline-${Date.now()}`;
  const ws = new WebSocket(`${child.url.replace(/^http/, 'ws')}/ws?clientId=${clientId}&token=${KEY}`, {
    perMessageDeflate: false,
  });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
  const ids = await submitAll(jobs, async () => {
    const response = await request(`${child.url}/api/prompt`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: WORKFLOW, client_id: clientId }),
    });
    return (await response.body.json()).prompt_id;
  });
  const remaining = new Set(ids);
  const latencies = [];
  let frames = 0;
  const finished = new Promise((resolve) => {
    ws.on('message', (data, isBinary) => {
      frames += 1;
      if (isBinary) {
        const type = data.readUInt32BE(0);
        if (type === 4) {
          const length = data.readUInt32BE(4);
          JSON.parse(data.subarray(8, 8 + length).toString('utf8'));
        }
        return;
      }
      const message = JSON.parse(data.toString('utf8'));
      if (message.type === 'execution_success' && remaining.delete(message.data.prompt_id)) {
        latencies.push(clock() - message.data.sent_at);
        if (remaining.size === 0) resolve();
      }
    });
  });
  const cpu = process.cpuUsage();
  const started = performance.now();
  GC.reset();
  await child.call('run', { ids });
  await finished;
  const result = {
    timeMs: performance.now() - started,
    cpuMs: cpuMs(cpu),
    gc: GC.read(),
    frames,
    latencies: latencies.sort((a, b) => a - b),
    restPerJob: 0,
  };
  ws.close();
  await agent.close();
  return result;
}

/** Ours: one GenerationConnection (what a config node holds) and one JobTracker (what an await node holds). */
async function runOurs(child, jobs, root = path.join(__dirname, '..'), dialect = undefined) {
  const { GenerationConnection } = require(path.join(root, 'dist/generation/connection'));
  // Before the jobs/ folder (commit cbe490a and older) the tracker sat beside the connection.
  const trackerPath = path.join(root, 'dist/generation/jobs/job-tracker.js');
  const { JobTracker } = require(
    fs.existsSync(trackerPath) ? trackerPath : path.join(root, 'dist/generation/job-tracker'),
  );
  const connection = new GenerationConnection(
    dialect
      ? { baseUrl: child.url, dialect, auth: { scheme: 'bearer', secret: KEY }, partnerKeyField: 'x' }
      : { baseUrl: child.url, apiKey: KEY, partnerKeyField: 'x' },
  );
  const sockets = connection.sockets();
  // As an await-job node without progress output holds it (the Node-RED side's await-job is the same).
  const tracker = new JobTracker(connection, { progress: PROGRESS });
  if (!(await sockets.ready(5000))) throw new Error('the socket did not open');
  // Submitted as the submit node does, then awaited as the await-job node does.
  // Older builds submit through their REST client, with the socket's client id.
  const submit = connection.submit
    ? () => connection.submit(WORKFLOW)
    : () => connection.dialect.rest.submit(WORKFLOW, connection.clientId);
  const ids = await submitAll(jobs, async () => (await submit()).prompt_id);
  const before = await child.call('stats');
  // When each result reached the caller; after the run, less the sandbox's send time of the job's
  // execution_success (its stamps, over IPC): the shipped code runs untouched. In a typed array, as the bare
  // client's latencies are in an array of numbers: nothing the collector copies per job.
  const endedAt = new Float64Array(ids.length);
  let completed = 0;
  let outputs = 0;
  let progressMsgs = 0;
  let settled = 0;
  let allSettled;
  const finished = new Promise((resolve) => (allSettled = resolve));
  const cpu = process.cpuUsage();
  const started = performance.now();
  ids.forEach((id, index) => {
    // Awaited as the await-job node awaits it: onEnd is where the node sends its output msg. Counted, not
    // collected: a Promise.all would hold every result until the last, which neither the node nor the bare
    // client does (each scavenge in the burst would copy the results so far).
    void tracker.track(id, {
      onEnd: (result) => {
        endedAt[index] = clock();
        if (result?.status === 'completed') completed += 1;
        outputs += result?.files?.length ?? 0;
        if (++settled === ids.length) allSettled();
      },
      // --progress: each await wants its progress, as an await-job node with its progress output on (on v2
      // that opens the job's event stream, at most 8 at once).
      ...(PROGRESS ? { onProgress: () => (progressMsgs += 1) } : {}),
    });
  });
  GC.reset();
  await child.call('run', { ids });
  await finished;
  const timeMs = performance.now() - started;
  const cpuUsed = cpuMs(cpu);
  const gcUsed = GC.read();
  const after = await child.call('stats');
  const { stamps } = await child.call('stamps');
  const latencies = [];
  ids.forEach((id, index) => {
    if (stamps[id] !== undefined && endedAt[index] > 0) latencies.push(endedAt[index] - stamps[id]);
  });
  const result = {
    timeMs,
    cpuMs: cpuUsed,
    gc: gcUsed,
    frames: sockets.stats.framesReceived,
    completed,
    outputs,
    latencies: latencies.sort((a, b) => a - b),
    restPerJob: (after.otherRequests - before.otherRequests) / jobs,
    socketsOpened: dialect ? after.mostStreams : sockets.stats.socketsOpened,
    skippedPerJob: (sockets.stats.progressFramesSkipped ?? 0) / jobs,
    progressMsgs,
  };
  tracker.close();
  await connection.close();
  return result;
}

/** Heap per awaited job: `jobs` jobs awaited (subscribed, status checked) but not yet running. */
async function heapPerJob(child, jobs) {
  const { GenerationConnection } = require('../dist/generation/connection');
  const { JobTracker } = require('../dist/generation/jobs/job-tracker');
  const connection = new GenerationConnection({ baseUrl: child.url, apiKey: KEY, partnerKeyField: 'x' });
  const tracker = new JobTracker(connection, {});
  await connection.sockets().ready(5000);
  const ids = await submitAll(jobs, async () => (await connection.submit(WORKFLOW)).prompt_id);
  // Warm the paths once so the measurement holds jobs, not code.
  const warm = tracker.track(ids[0]);
  await new Promise((resolve) => setTimeout(resolve, 500));
  gc();
  const before = process.memoryUsage().heapUsed;
  const awaited = ids.slice(1).map((id) => tracker.track(id));
  // The first status checks (one queue read) come back: what stays is what an awaited job costs.
  await new Promise((resolve) => setTimeout(resolve, 2000));
  gc();
  const after = process.memoryUsage().heapUsed;
  tracker.close();
  await Promise.all([warm, ...awaited]);
  await child.call('cancel');
  await connection.close();
  return (after - before) / awaited.length;
}

async function main() {
  GC = gcPauses();
  if (POOL) {
    const { runPool } = require('./fanout-pool');
    const shared = { startChild, submitAll, median, percentile, KEY, WORKFLOW, SIZES, PROGRESS, COMPARE };
    const save = (result) => {
      fs.mkdirSync(path.join(__dirname, 'results'), { recursive: true });
      fs.writeFileSync(
        path.join(__dirname, 'results', `fanout-pool${PROGRESS ? '-progress' : ''}.json`),
        `${JSON.stringify({ date: new Date().toISOString(), node: process.version, ...result }, null, 2)}\n`,
      );
    };
    await runPool({ ...shared, save, ROUNDS: ARGS.includes('--rounds') ? ROUNDS : 3 });
    return;
  }
  const child = startChild();
  await child.ready;
  const childV2 = V2 ? startChild(true) : undefined;
  await childV2?.ready;
  const flow = NODE_RED
    ? await require('./fanout-node-red').startFlowBench({
        serviceUrl: child.url,
        key: KEY,
        workflow: WORKFLOW,
        progress: PROGRESS,
      })
    : undefined;
  const sides = {
    baseline: (jobs) => runBaseline(child, jobs),
    ours: (jobs) => runOurs(child, jobs),
    ...(COMPARE ? { compared: (jobs) => runOurs(child, jobs, COMPARE) } : {}),
    ...(childV2 ? { v2: (jobs) => runOurs(childV2, jobs, undefined, 'comfy-api-v2') } : {}),
    ...(flow ? { nodeRed: (jobs) => flow.run(child.call, jobs) } : {}),
    ...(flow && RESUME ? { nodeRedResume: (jobs) => flow.run(child.call, jobs, { resume: true }) } : {}),
  };
  // Warm-up of every path (JIT, pools), not measured.
  for (const [side, run] of Object.entries(sides)) {
    await run(200);
    await (side === 'v2' ? childV2 : child).call('reset');
  }

  const report = [];
  for (const jobs of SIZES) {
    const runs = Object.fromEntries(Object.keys(sides).map((side) => [side, []]));
    for (let round = 0; round < ROUNDS; round++) {
      // The order turns each round, so no side always runs first (or after the same one).
      const names = Object.keys(sides);
      const order = names.map((_, i) => names[(i + round) % names.length]);
      for (const side of order) {
        runs[side].push(await sides[side](jobs));
        await (side === 'v2' ? childV2 : child).call('reset');
      }
    }
    const summary = (list) =>
      list && {
        timeMs: median(list.map((run) => run.timeMs)),
        cpuMs: median(list.map((run) => run.cpuMs)),
        p50: median(list.map((run) => percentile(run.latencies, 50))),
        p99: median(list.map((run) => percentile(run.latencies, 99))),
        gcTotalMs: median(list.map((run) => run.gc.totalMs)),
        gcMaxMs: median(list.map((run) => run.gc.maxMs)),
        restPerJob: median(list.map((run) => run.restPerJob)),
        completed: Math.min(...list.map((run) => run.completed ?? jobs)),
        socketsOpened: Math.max(...list.map((run) => run.socketsOpened ?? 1)),
        frames: list[0].frames,
        skippedPerJob: list[0].skippedPerJob,
        progressMsgs: list[0].progressMsgs,
        keptBytes: median(list.map((run) => run.keptBytes ?? 0)),
        journalWrites: median(list.map((run) => run.journalWrites ?? 0)),
        journalWritesAwaiting: median(list.map((run) => run.journalWritesAwaiting ?? 0)),
        awaitingMs: median(list.map((run) => run.awaitingMs ?? 0)),
      };
    report.push({
      jobs,
      baseline: summary(runs.baseline),
      ours: summary(runs.ours),
      nodeRed: summary(runs.nodeRed),
      compared: summary(runs.compared),
      v2: summary(runs.v2),
      p99s: Object.fromEntries(
        Object.entries(runs).map(([side, list]) => [side, list.map((run) => percentile(run.latencies, 99))]),
      ),
      nodeRedResume: summary(runs.nodeRedResume),
    });
  }
  const heapJobs = SIZES.at(-1);
  const heap = await heapPerJob(child, heapJobs);
  if (flow) await flow.close();
  await child.call('close');
  await childV2?.call('close');

  const ratio = (value, base) => `x${(value / base).toFixed(2)}`;
  const rows = [];
  for (const { jobs, baseline, ours, nodeRed, nodeRedResume } of report) {
    const cells = (pick, format) => [
      format(pick(baseline)),
      format(pick(ours)),
      nodeRed ? format(pick(nodeRed)) : '',
    ];
    const ratios = (pick, target) =>
      [ratio(pick(ours), pick(baseline)), nodeRed ? ratio(pick(nodeRed), pick(baseline)) : '', target]
        .filter(Boolean)
        .join(' / ');
    rows.push(
      [
        `${jobs} jobs: completed`,
        jobs,
        ours.completed,
        nodeRed ? nodeRed.completed : '',
        `${(ours.frames / jobs).toFixed(1)} frames a job`,
      ],
      [
        '  completion->result p50 (ms)',
        ...cells(
          (side) => side.p50,
          (v) => v.toFixed(2),
        ),
        ratios((side) => side.p50, ''),
      ],
      [
        '  completion->result p99 (ms)',
        ...cells(
          (side) => side.p99,
          (v) => v.toFixed(2),
        ),
        ratios((side) => side.p99, 'target: classes <= x1.5, Node-RED < 50 ms'),
      ],
      [
        '  wall time (ms)',
        ...cells(
          (side) => side.timeMs,
          (v) => v.toFixed(0),
        ),
        ratios((side) => side.timeMs, ''),
      ],
      [
        '  client CPU (ms)',
        ...cells(
          (side) => side.cpuMs,
          (v) => v.toFixed(0),
        ),
        ratios((side) => side.cpuMs, 'target <= x1.2'),
      ],
      [
        '  GC pauses in the run: total / longest (ms)',
        ...cells(
          (side) => side,
          (side) => `${side.gcTotalMs.toFixed(0)} / ${side.gcMaxMs.toFixed(1)}`,
        ),
        '',
      ],
      [
        '  REST requests per job (besides submit)',
        ...cells(
          (side) => side.restPerJob,
          (v) => v.toFixed(3),
        ),
        '',
      ],
      ['  sockets open', ...cells((side) => side.socketsOpened, String), 'must be 1'],
      ['  frames a job skipped unread (progress off)', '0', ours.skippedPerJob.toFixed(1), '', ''],
    );
    if (nodeRed?.progressMsgs)
      rows.push(['  progress msgs per job', '', '', (nodeRed.progressMsgs / jobs).toFixed(1), '']);
    if (nodeRedResume) {
      const perSecond = (writes, ms) => (ms > 0 ? ((writes * 1000) / ms).toFixed(0) : '-');
      rows.push(
        [
          '  Node-RED, resume on: p50 / p99 (ms)',
          '',
          '',
          `${nodeRedResume.p50.toFixed(2)} / ${nodeRedResume.p99.toFixed(2)}`,
          `off: ${nodeRed.p50.toFixed(2)} / ${nodeRed.p99.toFixed(2)}`,
        ],
        [
          '  Node-RED, resume on: CPU (ms)',
          '',
          '',
          nodeRedResume.cpuMs.toFixed(0),
          `${ratio(nodeRedResume.cpuMs, nodeRed.cpuMs)} of resume off (${nodeRed.cpuMs.toFixed(0)}) / target <= x1.1`,
        ],
        [
          '  journal writes: awaiting / ending (per s)',
          '',
          '',
          `${nodeRedResume.journalWritesAwaiting} / ${nodeRedResume.journalWrites}`,
          `${perSecond(nodeRedResume.journalWritesAwaiting, nodeRedResume.awaitingMs)} / ${perSecond(nodeRedResume.journalWrites, nodeRedResume.timeMs)} a second`,
        ],
        [
          '  kept file at its largest (bytes)',
          '',
          '',
          String(nodeRedResume.keptBytes),
          `${(nodeRedResume.keptBytes / jobs).toFixed(0)} a job`,
        ],
      );
    }
  }
  rows.push([`heap per awaited job (B), ${heapJobs} jobs`, '-', heap.toFixed(0), '', 'target < 2048']);
  const header = [
    `fanout (medians of ${ROUNDS} rounds)`,
    'bare client',
    'classes',
    NODE_RED ? 'Node-RED' : '',
    'ratios to bare',
  ];
  const widths = header.map((_, i) => Math.max(...[header, ...rows].map((r) => String(r[i]).length)));
  const line = (r) =>
    r
      .map((cell, i) => String(cell).padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows) console.log(line(row));
  for (const { jobs, ours, v2 } of report) {
    if (!v2) continue;
    console.log(
      `${jobs} jobs, Comfy API v2 (classes, polling): completed ${v2.completed}, ` +
        `requests per job besides submit ${v2.restPerJob.toFixed(3)} (today's dialect ${ours.restPerJob.toFixed(3)}; target <= 1), ` +
        `most streams open ${v2.socketsOpened} (cap 8), ` +
        (PROGRESS ? `progress msgs per job ${(v2.progressMsgs / jobs).toFixed(1)}, ` : '') +
        `CPU per job ${((v2.cpuMs / jobs) * 1000).toFixed(0)} us (today's ${((ours.cpuMs / jobs) * 1000).toFixed(0)} us, ${ratio(v2.cpuMs, ours.cpuMs)}; target <= x1.5), ` +
        `wall ${v2.timeMs.toFixed(0)} ms (today's ${ours.timeMs.toFixed(0)} ms), completion->result p50 / p99 ${v2.p50.toFixed(0)} / ${v2.p99.toFixed(0)} ms`,
    );
  }
  for (const { jobs, baseline, ours, compared, p99s } of report) {
    if (compared) {
      const x = ratio;
      console.log(
        `${jobs} jobs, compared build (${COMPARE}): p50 / p99 ${compared.p50.toFixed(2)} / ${compared.p99.toFixed(2)} ms, ` +
          `p99 ${x(compared.p99, baseline.p99)} of bare (this build ${x(ours.p99, baseline.p99)}), ` +
          `CPU ${x(compared.cpuMs, baseline.cpuMs)} of bare (this build ${x(ours.cpuMs, baseline.cpuMs)}), ` +
          `GC longest ${compared.gcMaxMs.toFixed(1)} ms (this build ${ours.gcMaxMs.toFixed(1)})`,
      );
    }
    // One burst's tail moves with any pause on the machine: every round's, besides the medians.
    const each = Object.entries(p99s).map(
      ([side, list]) => `${side} ${list.map((v) => v.toFixed(1)).join(', ')}`,
    );
    console.log(`${jobs} jobs, p99 of each round (ms): ${each.join('; ')}`);
  }
  if (PROGRESS) console.log('(Node-RED: await-job with progress msgs on output 3, previews at 2 a second)');
  fs.mkdirSync(path.join(__dirname, 'results'), { recursive: true });
  fs.writeFileSync(
    path.join(
      __dirname,
      'results',
      `fanout${NODE_RED ? '-node-red' : ''}${PROGRESS ? '-progress' : ''}${RESUME ? '-resume' : ''}${V2 ? '-v2' : ''}.json`,
    ),
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, report, heapPerJobBytes: heap }, null, 2)}\n`,
  );
}
