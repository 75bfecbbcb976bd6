'use strict';
// bench/many-jobs: thousands of jobs as a flow makes them, beside a bare client, measured as an independent
// harness measured them (issue 30): a self-hosted server (no key; a job's events go to its client's socket only),
// each job awaited the moment its submit is answered (as a submit node wired to an await-job node does), every job
// held in the server's queue until the last is submitted, then all started at once; 14 sampler steps, 2 ms
// between a job's events. Each side runs in a fresh process of its own, against a fresh sandbox process:
//
// - bare: undici for the submits, one `ws` that parses every frame, results routed by prompt_id in a Map;
// - classes: the package as a flow uses it (dist/): one GenerationConnection (a config node) and one JobTracker
//   (an await-job node), with every request the job book makes on its own (its status checks, list reads).
//
// Per side: the client process's CPU from its first submit to its last result (submits, the wait, the run; the
// heap measurement's collections left out); its heap per job (the whole process's heapUsed after a full
// collection, with every job submitted and awaited, less the same before the first submit); the latency from the
// sandbox's send of a job's execution_success (stamped into the frame with the machine's clock) to the result in
// the caller's hands, p50 and p99; and the requests the client made besides its submits, list reads apart.
// Medians of the rounds (sides alternate within a round), never a side's best.
//
//   node bench/many-jobs.js [1000,10000,30000] [--rounds 5] [--compare <checkout>]   (build first)
//
// --compare <checkout>: one more side, the classes of another built checkout (a git worktree at an older
// commit), in the same rounds: before and after a change.
//
// Past 400 lines: the sandbox, both clients and the report are the three roles of one file (each process is this
// file run with its role), so what a side measures and how it is reported are read in one place.
const { fork } = require('node:child_process');
const { monitorEventLoopDelay, performance } = require('node:perf_hooks');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');

const ARGS = process.argv.slice(2);
const ROLE = ARGS[0];
const SIZES = (ARGS.find((arg) => /^\d[\d,]*$/.test(arg)) ?? '1000,10000,30000').split(',').map(Number);
const ROUNDS = ARGS.includes('--rounds') ? Number(ARGS[ARGS.indexOf('--rounds') + 1]) : 5;
const COMPARE = ARGS.includes('--compare') ? path.resolve(ARGS[ARGS.indexOf('--compare') + 1]) : undefined;
/**
 * --warm <jobs>: each client first runs this many jobs the same way, unmeasured, as a Node-RED that has run
 * for a while has its code compiled. Without it a short run measures V8's warm-up too: the first frames of the
 * burst run unoptimised, and the client falls behind the sandbox for the rest of it.
 */
const WARM = ARGS.includes('--warm') ? Number(ARGS[ARGS.indexOf('--warm') + 1]) : 0;
const SUBMITS_AT_ONCE = 64;
/** Three nodes, 14 sampler steps (progress, progress_state and a preview each). */
const WORKFLOW = {
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
  2: { class_type: 'KSampler', inputs: { steps: 14, model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'bench', images: ['2', 0] } },
};

/** Now on the machine's clock, in ms with sub-ms precision: comparable across processes. */
const clock = () => performance.timeOrigin + performance.now();

if (ROLE === '--sandbox') runSandbox();
else if (ROLE === '--client') runClient();
else
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });

// --- the processes ---

/** A child process driven over IPC: `call(cmd, body)` answers with its reply. */
function child(args) {
  // BENCH_CPU_PROF=<dir>: the clients write a CPU profile there (node --cpu-prof), to find where the time goes.
  const profile = process.env.BENCH_CPU_PROF && args[0] === '--client';
  const process_ = fork(__filename, args, {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: [
      ...(profile ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []),
      ...(process.env.BENCH_CLIENT_ARGS && args[0] === '--client'
        ? process.env.BENCH_CLIENT_ARGS.split(' ')
        : []),
    ],
  });
  const pending = new Map();
  const listeners = [];
  let next = 0;
  const ready = new Promise((resolve) => {
    process_.on('message', (message) => {
      if (message.ready !== undefined) resolve(message.ready);
      else if (pending.has(message.id)) {
        pending.get(message.id)(message);
        pending.delete(message.id);
      } else for (const listener of listeners) listener(message);
    });
  });
  return {
    ready,
    on: (listener) => listeners.push(listener),
    call: (cmd, body = {}) =>
      new Promise((resolve) => {
        const id = next++;
        pending.set(id, resolve);
        process_.send({ id, cmd, ...body });
      }),
    done: new Promise((resolve) => process_.on('exit', resolve)),
  };
}

/** The sandbox as a self-hosted server, every job held until `run`. */
async function runSandbox() {
  const { startSandbox } = require('../dist/sandbox');
  const sandbox = await startSandbox({
    events: { autoRun: false, stepDelayMs: 2, maxSteps: 14, concurrency: Infinity, stampCompletion: true },
  });
  // The sandbox's validation needs the workflow's loader inputs only: KSampler takes what it is given here.
  sandbox.generation.definitions.KSampler.input.required = { model: ['MODEL'] };
  sandbox.generation.definitions.SaveImage.input.required = { filename_prefix: ['STRING'] };
  process.on('message', (message) => {
    const reply = (body) => process.send({ id: message.id, ...body });
    if (message.cmd === 'runAll') {
      const ids = sandbox.jobs.pending().map((job) => job.id);
      for (const id of ids) sandbox.events.run(id);
      reply({ count: ids.length });
    } else if (message.cmd === 'stats') {
      const api = sandbox.counters.requests.filter((seen) => seen.path.startsWith('/api/'));
      const submits = api.filter((seen) => seen.path === '/api/prompt' && seen.method === 'POST').length;
      const lists = api.filter(
        (seen) => seen.method === 'GET' && (seen.path === '/api/jobs' || seen.path === '/api/queue'),
      ).length;
      reply({
        submits,
        lists,
        others: api.length - submits - lists,
        stamps: Object.fromEntries(sandbox.events.completionsSent),
      });
    } else if (message.cmd === 'resetCounters') {
      // What the warm-up asked is not the run's.
      sandbox.counters.requests.length = 0;
      reply({});
    } else if (message.cmd === 'close') {
      void sandbox.close().then(() => {
        reply({});
        process.exit(0);
      });
    }
  });
  process.send({ ready: sandbox.url });
}

/** One side, in its own process: `--client <side> <url> <jobs> [root]`. */
async function runClient() {
  const [, side, url, jobsText, warmText, root] = ARGS;
  const jobs = Number(jobsText);
  const warm = Number(warmText);
  const collect = fullCollector();
  // BENCH_TIMELINE=<dir>: this process's monotonic clock (the one a CPU profile's times are on) beside the machine's,
  // so bench/timeline.js can put the profile's samples next to each result's latency.
  if (process.env.BENCH_TIMELINE) {
    const clocks = { monotonicUs: Number(process.hrtime.bigint() / 1000n), wallMs: clock() };
    require('node:fs').writeFileSync(
      path.join(process.env.BENCH_TIMELINE, `clock-${process.pid}.json`),
      JSON.stringify(clocks),
    );
  }
  const measure = side === 'bare' ? bareClient : classesClient;
  let gcCpu = 0;
  /** The heap after a full collection; its collections' CPU is kept out of the side's. */
  const heapNow = () => {
    const start = process.cpuUsage();
    collect();
    const used = process.cpuUsage(start);
    gcCpu += (used.user + used.system) / 1000;
    return process.memoryUsage().heapUsed;
  };
  const client = await measure(url, root);
  if (warm > 0) await warmUp(client, warm);
  const heapBefore = heapNow();
  const cpu = process.cpuUsage();
  const endedAt = new Float64Array(jobs);
  const ids = new Array(jobs);
  let completed = 0;
  const { finished } = await submitAll(client, jobs, (index, id, ok) => {
    endedAt[index] = clock();
    ids[index] = id;
    if (ok) completed += 1;
  });
  const heapAfter = heapNow();
  process.send({ event: 'submitted' });
  // How long the event loop was held while the jobs ran: a block delays every result that comes during it.
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  await finished;
  loop.disable();
  const used = process.cpuUsage(cpu);
  const cpuMs = (used.user + used.system) / 1000 - gcCpu;
  await client.close();
  process.send(
    {
      event: 'done',
      cpuMs,
      heapPerJob: (heapAfter - heapBefore) / jobs,
      loopP99: loop.percentile(99) / 1e6,
      loopMax: loop.max / 1e6,
      completed,
      pid: process.pid,
      ids,
      endedAt: [...endedAt],
    },
    // Exit once the message is out: a large one (30,000 ids) is still being written when send returns.
    () => process.exit(0),
  );
}

/**
 * Submits `jobs` jobs, SUBMITS_AT_ONCE at a time, each awaited the moment its submit is answered (as a submit node
 * wired to an await-job node does); `ended(index, id, ok)` as each ends. Resolves once all are submitted, with
 * `finished`, which resolves once all have ended.
 */
async function submitAll(client, jobs, ended) {
  let settled = 0;
  let allSettled;
  const finished = new Promise((resolve) => (allSettled = resolve));
  let next = 0;
  const worker = async () => {
    while (next < jobs) {
      const index = next++;
      const id = await client.submit();
      client.await(id, (ok) => {
        ended(index, id, ok);
        if (++settled === jobs) allSettled();
      });
    }
  };
  await Promise.all(Array.from({ length: SUBMITS_AT_ONCE }, worker));
  return { finished };
}

/** Runs `jobs` jobs as the measured ones run, unmeasured; resolves once the sandbox has forgotten the requests. */
async function warmUp(client, jobs) {
  const { finished } = await submitAll(client, jobs, () => undefined);
  process.send({ event: 'warm-submitted' });
  await finished;
  await new Promise((resolve) => {
    process.once('message', (message) => {
      process.send({ id: message.id });
      resolve();
    });
    process.send({ event: 'warm' });
  });
}

function fullCollector() {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  return () => {
    gc();
    gc();
  };
}

/** The bare client: undici submits, one ws that parses every frame, results by prompt_id. */
async function bareClient(url) {
  const WebSocket = require('ws');
  const { request, Agent } = require('undici');
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 16 });
  const clientId = `bench-bare-${process.pid}`;
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/ws?clientId=${clientId}`, {
    perMessageDeflate: false,
  });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  ws.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
  const waiting = new Map();
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      if (data.readUInt32BE(0) === 4) JSON.parse(data.subarray(8, 8 + data.readUInt32BE(4)).toString('utf8'));
      return;
    }
    const message = JSON.parse(data.toString('utf8'));
    if (message.type === 'execution_success') {
      const done = waiting.get(message.data.prompt_id);
      if (done) {
        waiting.delete(message.data.prompt_id);
        done(true);
      }
    }
  });
  return {
    submit: async () => {
      const response = await request(`${url}/api/prompt`, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: WORKFLOW, client_id: clientId }),
      });
      return (await response.body.json()).prompt_id;
    },
    await: (id, done) => waiting.set(id, done),
    close: async () => {
      ws.close();
      await agent.close();
    },
  };
}

/** The classes: one connection (a config node) and one tracker (an await-job node without progress output). */
async function classesClient(url, root = path.join(__dirname, '..')) {
  const { GenerationConnection } = require(path.join(root, 'dist/generation/connection'));
  const { JobTracker } = require(path.join(root, 'dist/generation/jobs/job-tracker'));
  const connection = new GenerationConnection({ baseUrl: url, partnerKeyField: 'x' });
  const tracker = new JobTracker(connection, {});
  if (!(await connection.sockets().ready(5000))) throw new Error('the socket did not open');
  return {
    submit: async () => (await connection.submit(WORKFLOW)).prompt_id,
    await: (id, done) => {
      void tracker.track(id, { onEnd: (result) => done(result?.status === 'completed') });
    },
    close: async () => {
      tracker.close();
      await connection.close();
    },
  };
}

// --- the run ---

async function runSide(side, jobs, root) {
  const sandbox = child(['--sandbox']);
  const url = await sandbox.ready;
  const client = child(['--client', side, url, String(jobs), String(WARM), ...(root ? [root] : [])]);
  const done = new Promise((resolve) => {
    client.on(async (message) => {
      if (message.event === 'submitted') await sandbox.call('runAll');
      else if (message.event === 'warm-submitted') await sandbox.call('runAll');
      else if (message.event === 'warm') {
        await sandbox.call('resetCounters');
        await client.call('go');
      } else if (message.event === 'done') resolve(message);
    });
  });
  const result = await done;
  const stats = await sandbox.call('stats');
  await sandbox.call('close');
  await Promise.all([client.done, sandbox.done]);
  const latencies = [];
  const timeline = [];
  result.ids.forEach((id, index) => {
    const sent = stats.stamps[id];
    if (sent === undefined || !(result.endedAt[index] > 0)) return;
    latencies.push(result.endedAt[index] - sent);
    timeline.push([sent, result.endedAt[index] - sent]);
  });
  // BENCH_TIMELINE=<dir>: each result's send time and latency, for bench/timeline.js.
  if (process.env.BENCH_TIMELINE) {
    require('node:fs').writeFileSync(
      path.join(process.env.BENCH_TIMELINE, `results-${root ? 'before' : side}-${jobs}-${result.pid}.json`),
      JSON.stringify(timeline),
    );
  }
  latencies.sort((a, b) => a - b);
  if (result.completed !== jobs) throw new Error(`${side}: ${result.completed} of ${jobs} jobs completed`);
  return {
    cpuMs: result.cpuMs,
    heapPerJob: result.heapPerJob,
    loopP99: result.loopP99,
    loopMax: result.loopMax,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    lists: stats.lists,
    others: stats.others,
  };
}

function percentile(sorted, p) {
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function main() {
  const sides = [['bare'], ['classes'], ...(COMPARE ? [['before', COMPARE]] : [])];
  const table = [];
  for (const jobs of SIZES) {
    const runs = Object.fromEntries(sides.map(([name]) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      // Sides alternate: what the machine does meanwhile falls on each in turn.
      const order = round % 2 === 0 ? sides : [...sides].reverse();
      for (const [name, root] of order) {
        const side = name === 'bare' ? 'bare' : 'classes';
        const run = await runSide(side, jobs, root);
        runs[name].push(run);
        // BENCH_VERBOSE=1: each run as it ends (the spread the medians hide).
        if (process.env.BENCH_VERBOSE)
          console.error(
            `${jobs} ${name}: CPU ${(run.cpuMs / 1000).toFixed(2)} s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(1)} ms`,
          );
      }
    }
    for (const [name] of sides) {
      const of = (field) => median(runs[name].map((run) => run[field]));
      table.push({
        jobs,
        side: name,
        cpuS: of('cpuMs') / 1000,
        heapKB: of('heapPerJob') / 1024,
        p50: of('p50'),
        p99: of('p99'),
        loopP99: of('loopP99'),
        loopMax: of('loopMax'),
        lists: of('lists'),
        others: of('others'),
      });
    }
  }
  const rows = table.map((row) => {
    const bare = table.find((other) => other.jobs === row.jobs && other.side === 'bare');
    const ratio = (a, b) => (row.side === 'bare' ? '' : ` (x${(a / b).toFixed(2)})`);
    return (
      `| ${row.jobs} | ${row.side} | ${row.cpuS.toFixed(2)} s${ratio(row.cpuS, bare.cpuS)} | ` +
      `${row.heapKB.toFixed(1)} KB${ratio(row.heapKB, bare.heapKB)} | ${row.p50.toFixed(2)} ms | ` +
      `${row.p99.toFixed(1)} ms${ratio(row.p99, bare.p99)} | ` +
      `${row.loopP99.toFixed(1)} / ${row.loopMax.toFixed(1)} ms | ${row.lists} | ${row.others} |`
    );
  });
  console.log(`\nmedians of ${ROUNDS} rounds, each side in fresh processes (node ${process.version})\n`);
  console.log(
    '| jobs | side | client CPU | heap per job | p50 | p99 | loop delay p99 / max | list reads | other requests |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
}
