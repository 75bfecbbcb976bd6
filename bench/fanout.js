'use strict';
// bench/fanout: 1,000 jobs in flight through one config node's socket manager and job tracking, 50 events
// each (execution_start, execution_cached, executing, progress, progress_state, type-4 previews, executed,
// execution_success, executing null), from the sandbox running in a child process. Side by side in one
// run with a bare `ws` client that only parses the same frames. Reports time and CPU of this process (the
// client side), completion-event-to-output latency, heap per awaited job and sockets opened.
//
//   node bench/fanout.js [jobs]        (build first: npm run build)
//   FANOUT_FIRST_CHECK_MS=0 node bench/fanout.js   (every job also checked over REST once, as queued jobs are)
const { fork } = require('node:child_process');
const { performance } = require('node:perf_hooks');
const fs = require('node:fs');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');

const KEY = 'bench-key-2b7d';
const JOBS = Number(process.argv[2]) || 1000;
const ROUNDS = 3;
/** Three nodes, 14 sampler steps: 2 + 3 executing + 14 x (progress, progress_state, preview) + executed + success + executing null = 50. */
const WORKFLOW = {
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
  2: { class_type: 'KSampler', inputs: { steps: 14, model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'bench', images: ['2', 0] } },
};

if (process.argv[2] === '--sandbox') {
  runSandbox();
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}

/** The child: the sandbox, driven over IPC so its CPU is not the client's. */
async function runSandbox() {
  const { startSandbox } = require('../dist/sandbox');
  const sandbox = await startSandbox({
    generationApiKey: KEY,
    events: { autoRun: false, stepDelayMs: 0, maxSteps: 14, concurrency: Infinity },
  });
  process.on('message', (message) => {
    const reply = (body) => process.send({ id: message.id, ...body });
    if (message.cmd === 'submit') {
      const ids = [];
      for (let i = 0; i < message.jobs; i++) ids.push(sandbox.jobs.submit(WORKFLOW, message.clientId).id);
      reply({ ids });
    } else if (message.cmd === 'run') {
      for (const id of message.ids) sandbox.events.run(id);
      reply({});
    } else if (message.cmd === 'cancel') {
      for (const id of message.ids) sandbox.jobs.cancel(id);
      reply({});
    } else if (message.cmd === 'stats') {
      reply({
        socketsOpened: sandbox.counters.socketsOpened,
        framesSent: sandbox.events.framesSent,
        statusChecks: sandbox.counters.count(/^\/api\/job\/[^/]+\/status$/),
      });
    } else if (message.cmd === 'reset') {
      sandbox.counters.reset();
      reply({});
    } else if (message.cmd === 'close') {
      sandbox.close().then(() => {
        reply({});
        process.exit(0);
      });
    }
  });
  process.send({ ready: sandbox.url });
}

function startChild() {
  const child = fork(__filename, ['--sandbox'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
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

function median(runs, field) {
  return [...runs].sort((a, b) => a[field] - b[field])[Math.floor(runs.length / 2)];
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** The baseline: a bare ws client that parses every frame and counts each job's execution_success. */
async function runBaseline(child, jobs) {
  const WebSocket = require('ws');
  const clientId = `bench-baseline-${Date.now()}`;
  const { ids } = await child.call('submit', { jobs, clientId });
  const ws = new WebSocket(`${child.url.replace(/^http/, 'ws')}/ws?clientId=${clientId}&token=${KEY}`, {
    perMessageDeflate: false,
  });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
  const remaining = new Set(ids);
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
      if (
        message.type === 'execution_success' &&
        remaining.delete(message.data.prompt_id) &&
        remaining.size === 0
      )
        resolve();
    });
  });
  const cpu = process.cpuUsage();
  const started = performance.now();
  await child.call('run', { ids });
  await finished;
  const result = { timeMs: performance.now() - started, cpuMs: cpuMs(cpu), frames };
  ws.close();
  return result;
}

/** Ours: one GenerationConnection (what a config node holds) and one JobTracker (what an await node holds). */
async function runOurs(child, jobs) {
  const { GenerationConnection } = require('../dist/generation/connection');
  const { JobTracker } = require('../dist/generation/job-tracker');
  const connection = new GenerationConnection({ baseUrl: child.url, apiKey: KEY, partnerKeyField: 'x' });
  const sockets = connection.sockets();
  // Completion-event-to-output: from the manager handing execution_success to the tracker, to the result.
  const completionAt = new Map();
  const subscribe = sockets.subscribe.bind(sockets);
  sockets.subscribe = (promptId, listener) =>
    subscribe(promptId, (event) => {
      if (event.type === 'execution_success') completionAt.set(promptId, performance.now());
      listener(event);
    });
  // FANOUT_FIRST_CHECK_MS=0 forces the status check after subscribing for every job (as for queued jobs).
  const firstCheck = process.env.FANOUT_FIRST_CHECK_MS;
  const tracker = new JobTracker(
    connection,
    firstCheck === undefined ? {} : { firstCheckMs: Number(firstCheck) },
  );
  if (!(await sockets.ready(5000))) throw new Error('the socket did not open');
  const { ids } = await child.call('submit', { jobs, clientId: connection.clientId });
  const latencies = [];
  let completed = 0;
  let outputs = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  // onEnd is where the await-job node sends its output msg.
  const results = ids.map((id) =>
    tracker.track(id, {
      onEnd: (result) => {
        const at = completionAt.get(id);
        if (at !== undefined) latencies.push(performance.now() - at);
        if (result.status === 'completed') completed += 1;
        outputs += result.files?.length ?? 0;
      },
    }),
  );
  await child.call('run', { ids });
  await Promise.all(results);
  const result = {
    timeMs: performance.now() - started,
    cpuMs: cpuMs(cpu),
    frames: sockets.stats.framesReceived,
    completed,
    outputs,
    latencies: latencies.sort((a, b) => a - b),
    socketsOpened: sockets.stats.socketsOpened,
  };
  tracker.close();
  await connection.close();
  return result;
}

/** Heap per awaited job: 1,000 jobs awaited (subscribed, status checked) but not yet running. */
async function heapPerJob(child, jobs) {
  const { GenerationConnection } = require('../dist/generation/connection');
  const { JobTracker } = require('../dist/generation/job-tracker');
  const connection = new GenerationConnection({ baseUrl: child.url, apiKey: KEY, partnerKeyField: 'x' });
  const tracker = new JobTracker(connection, {});
  await connection.sockets().ready(5000);
  const { ids } = await child.call('submit', { jobs, clientId: connection.clientId });
  // Warm the paths once so the measurement holds jobs, not code.
  const warm = tracker.track(ids[0]);
  await new Promise((resolve) => setTimeout(resolve, 300));
  gc();
  const before = process.memoryUsage().heapUsed;
  const awaited = ids.slice(1).map((id) => tracker.track(id));
  // Let every status check come back: what stays is what an awaited job costs.
  const deadline = Date.now() + 10_000;
  while ((await child.call('stats')).statusChecks < ids.length && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 200));
  gc();
  const after = process.memoryUsage().heapUsed;
  tracker.close();
  await Promise.all([warm, ...awaited]);
  await child.call('cancel', { ids });
  await connection.close();
  return (after - before) / awaited.length;
}

async function main() {
  const child = startChild();
  await child.ready;
  // Warm-up of both paths (JIT, pools), not measured.
  await runBaseline(child, 100);
  await runOurs(child, 100);
  await child.call('reset');

  // Rounds alternate between the two clients; the median round of each is reported (the machine is shared).
  const baselines = [];
  const oursRuns = [];
  let socketsOpened = 0;
  for (let round = 0; round < ROUNDS; round++) {
    baselines.push(await runBaseline(child, JOBS));
    await child.call('reset');
    oursRuns.push(await runOurs(child, JOBS));
    socketsOpened = Math.max(socketsOpened, (await child.call('stats')).socketsOpened);
    await child.call('reset');
  }
  const baseline = {
    timeMs: median(baselines, 'timeMs').timeMs,
    cpuMs: median(baselines, 'cpuMs').cpuMs,
    frames: baselines[0].frames,
  };
  const ours = {
    ...median(oursRuns, 'cpuMs'),
    timeMs: median(oursRuns, 'timeMs').timeMs,
    latencies: oursRuns.flatMap((run) => run.latencies).sort((a, b) => a - b),
  };
  const heap = await heapPerJob(child, JOBS);
  await child.call('close');

  const eventsPerJob = baseline.frames / JOBS;
  const p50 = percentile(ours.latencies, 50);
  const p99 = percentile(ours.latencies, 99);
  const rows = [
    ['jobs in flight', JOBS, JOBS, `medians of ${ROUNDS} alternating rounds`],
    [
      'frames received',
      baseline.frames,
      ours.frames,
      `${eventsPerJob.toFixed(1)} per job (50 events + queue status)`,
    ],
    [
      'wall time (ms)',
      baseline.timeMs.toFixed(0),
      ours.timeMs.toFixed(0),
      `x${(ours.timeMs / baseline.timeMs).toFixed(2)} (target <= 1.5)`,
    ],
    [
      'client CPU (ms)',
      baseline.cpuMs.toFixed(0),
      ours.cpuMs.toFixed(0),
      `x${(ours.cpuMs / baseline.cpuMs).toFixed(2)} (target <= 1.5)`,
    ],
    ['completed / files', `${JOBS} / -`, `${ours.completed} / ${ours.outputs}`, ''],
    ['completion->output p50 (ms)', '-', p50.toFixed(3), 'all rounds'],
    ['completion->output p99 (ms)', '-', p99.toFixed(3), 'target < 5'],
    ['heap per awaited job (B)', '-', heap.toFixed(0), 'target < 4096'],
    ['sockets opened', 1, socketsOpened, 'must be 1'],
  ];
  const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => String(r[i]).length), 10));
  const line = (r) => r.map((cell, i) => String(cell).padEnd(widths[i])).join('  ');
  console.log(line(['fanout', 'ws baseline', 'graph-gen', 'ratio / target']));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows) console.log(line(row));
  const results = {
    date: new Date().toISOString(),
    jobs: JOBS,
    baseline: { timeMs: baseline.timeMs, cpuMs: baseline.cpuMs, frames: baseline.frames },
    ours: {
      timeMs: ours.timeMs,
      cpuMs: ours.cpuMs,
      frames: ours.frames,
      completed: ours.completed,
      p50,
      p99,
    },
    heapPerJobBytes: heap,
    socketsOpened,
  };
  fs.mkdirSync(path.join(__dirname, 'results'), { recursive: true });
  fs.writeFileSync(path.join(__dirname, 'results', 'fanout.json'), `${JSON.stringify(results, null, 2)}\n`);
}
