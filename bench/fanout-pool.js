'use strict';
// The pool mode of bench/fanout (`node bench/fanout.js 10000 --pool`): the same jobs through a graph-gen-pool of
// POOL_MEMBERS sandboxes (each a child process, as the one server is) and through one config node, in one real
// Node-RED, rounds alternating; submit -> await-job -> a function node as the Node-RED mode runs them; and, as the
// pool's own baseline, the same sandboxes through one config node each, the msgs sent to them in turn (a user's
// own routing without a pool, with a submit and an await-job per server). It reports per side Node-RED's CPU per
// job (the submits with the awaits' first checks, and the results' burst), wall time, completion->result
// latency, requests per job besides the submits (the pool's own reads included) and the queue entries they
// read, and the spread of the pool's jobs over its members (by msg.server, and by what each sandbox took).
//
// What choosing a member costs is then measured in this process, on the same built code (dist/) and the pool in
// the state the run leaves it in (every member up, its node definitions read, 1/POOL_MEMBERS of the jobs queued
// on each): ServerPool's choice (`order()`, the same private `choose()` a submit runs) timed over many calls in a
// row, the pure orderToTry and needsOf alone, and the CPU of whole `pool.submit`s against a connection's own
// `submit` (as the submit node calls each) and against the members' connections in turn without a pool (what
// four servers cost by themselves), rounds alternating; JobHomes.set once full; and a burst of choices into a
// pool just made (a deploy), before it has read any member's node definitions. `--compare <checkout>` adds a
// pool of another built checkout's classes to these rounds: before and after a change to the pool, in one run.
// Medians throughout. Past 400 lines: the Node-RED rounds, the measurements in this process and their report
// share the sandboxes and the pool's setup; apart, each would need the others' state handed over.
const path = require('node:path');
const { performance } = require('node:perf_hooks');

const POOL_MEMBERS = 4;
/** Calls of the choice timed in a row, per round. */
const CHOICES = 20_000;
/** Rounds of the choice's measurements (a few seconds each). */
const MICRO_ROUNDS = 5;

/** Runs the pool mode; `bench` holds what fanout.js shares (its sandbox children, helpers and settings). */
async function runPool(bench) {
  const { startChild, median, percentile, KEY, WORKFLOW, ROUNDS, SIZES, PROGRESS, COMPARE } = bench;
  const single = startChild();
  const members = Array.from({ length: POOL_MEMBERS }, () => startChild());
  await Promise.all([single.ready, ...members.map((member) => member.ready)]);
  const flow = await require('./fanout-node-red').startFlowBench({
    serviceUrl: single.url,
    key: KEY,
    workflow: WORKFLOW,
    progress: PROGRESS,
    memberUrls: members.map((member) => member.url),
  });
  const memberCalls = members.map((member) => member.call);
  const resetAll = (children) => Promise.all(children.map((child) => child.call('reset')));
  const sides = {
    one: { run: (jobs) => flow.run(single.call, jobs), children: [single] },
    // The same four servers without a pool: a config node, submit and await-job each, msgs sent in turn.
    each: { run: (jobs) => flow.run(memberCalls, jobs, { through: 'each' }), children: members },
    pool: { run: (jobs) => flow.run(memberCalls, jobs, { through: 'pool' }), children: members },
  };
  // Warm-up of every path (JIT, the members' node definitions), not measured.
  for (const side of Object.values(sides)) {
    await side.run(200);
    await resetAll(side.children);
  }

  const report = [];
  for (const jobs of SIZES) {
    const names = Object.keys(sides);
    const runs = Object.fromEntries(names.map((name) => [name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      // The order turns each round, so no side always runs first (or after the same one).
      for (const name of names.map((_, i) => names[(i + round) % names.length])) {
        const result = await sides[name].run(jobs);
        runs[name].push(result);
        await resetAll(sides[name].children);
        console.log(
          `  ${jobs} jobs, round ${round + 1}, ${name}: CPU submits ${result.submitCpuMs.toFixed(0)} ms + run ${result.cpuMs.toFixed(0)} ms, ` +
            `wall ${result.timeMs.toFixed(0)} ms, completed ${result.completed}` +
            (name === 'one' ? '' : `, by sandbox ${result.submitsBySandbox.join(' / ')}`) +
            `; submits ${result.submitsMs.toFixed(0)} ms, requests besides submits ${JSON.stringify(result.requestsByPath)}, ` +
            `queue entries read ${result.queueEntriesRead}`,
        );
      }
    }
    const summary = (list) => ({
      submitCpuMs: median(list.map((run) => run.submitCpuMs)),
      cpuMs: median(list.map((run) => run.cpuMs)),
      totalCpuMs: median(list.map((run) => run.submitCpuMs + run.cpuMs)),
      submitsMs: median(list.map((run) => run.submitsMs)),
      timeMs: median(list.map((run) => run.timeMs)),
      p50: median(list.map((run) => percentile(run.latencies, 50))),
      p99: median(list.map((run) => percentile(run.latencies, 99))),
      gcTotalMs: median(list.map((run) => run.gc.totalMs)),
      gcMaxMs: median(list.map((run) => run.gc.maxMs)),
      restPerJob: median(list.map((run) => run.restPerJob)),
      queueEntriesRead: median(list.map((run) => run.queueEntriesRead)),
      // Files written by the round (the pool's job homes; await-job's resume is off).
      journalWrites: median(list.map((run) => run.journalWritesAwaiting + run.journalWrites)),
      completed: Math.min(...list.map((run) => run.completed)),
      failed: Math.max(...list.map((run) => run.failed)),
      sockets: Math.max(...list.map((run) => run.socketsOpened)),
    });
    // The spread: each round's counts per member, and its largest deviation from an even share.
    const spreads = runs.pool.map((run) => {
      const byName = members.map((_, index) => run.servers[`sandbox ${index + 1}`] ?? 0);
      const even = jobs / POOL_MEMBERS;
      const deviation = Math.max(...byName.map((count) => Math.abs(count - even))) / even;
      return { byName, bySandbox: run.submitsBySandbox, deviation };
    });
    report.push({
      jobs,
      one: summary(runs.one),
      each: summary(runs.each),
      pool: summary(runs.pool),
      spreads,
    });
  }
  await flow.close();

  // Said (and kept) before the choice's measurements: a run stopped during those keeps its rounds.
  printReport(report, ROUNDS);
  bench.save({ report });
  const choice = await choiceCost(bench, single, members, SIZES.at(-1), COMPARE);
  await Promise.all([single, ...members].map((child) => child.call('close')));
  printChoice(choice);
  bench.save({ report, choice });
}

/**
 * The cost of choosing, in this process, on dist/'s ServerPool with POOL_MEMBERS members (a GenerationConnection
 * each, to the same sandboxes): per round, `jobs` submits through the pool, `jobs` through one connection (the
 * submit node's calls: a wait for the socket, then submit; an AbortSignal of its own each, as each msg has), and
 * `jobs` through the members' connections in turn without a pool (what four servers cost by themselves), their
 * CPU; then, the pool's members holding those jobs, the choice timed CHOICES times in a row. `compare`: a pool of
 * another built checkout's classes too, in the same rounds (before and after a change).
 */
async function choiceCost(bench, single, members, jobs, compare) {
  const { submitAll, median, KEY, WORKFLOW } = bench;
  const rounds = MICRO_ROUNDS;
  const load = (root) => {
    const dist = path.join(root, 'dist');
    return {
      ServerPool: require(path.join(dist, 'generation/pool/server-pool')).ServerPool,
      needsOf: require(path.join(dist, 'generation/pool/needs')).needsOf,
      orderToTry: require(path.join(dist, 'generation/pool/pool-routing')).orderToTry,
      GenerationConnection: require(path.join(dist, 'generation/connection')).GenerationConnection,
      JobHomes: require(path.join(dist, 'generation/pool/job-homes')).JobHomes,
    };
  };
  const builds = {
    pool: load(path.join(__dirname, '..')),
    ...(compare ? { poolCompared: load(compare) } : {}),
  };
  const connectWith = (build, url) =>
    new build.GenerationConnection({ baseUrl: url, apiKey: KEY, partnerKeyField: 'x' });
  const pools = Object.fromEntries(
    Object.entries(builds).map(([name, build]) => [
      name,
      new build.ServerPool(
        members.map((child, index) => ({
          id: `member-${index + 1}`,
          name: `sandbox ${index + 1}`,
          connection: connectWith(build, child.url),
        })),
        { strategy: 'soonest' },
      ),
    ]),
  );
  const direct = connectWith(builds.pool, single.url);
  const inTurn = members.map((child) => connectWith(builds.pool, child.url));
  // Kept open as a config node's is while its await node is deployed (a pool keeps each member's open).
  const stops = [direct, ...inTurn].map((connection) => connection.sockets().register({}));
  const all = [
    direct,
    ...inTurn,
    ...Object.values(pools).flatMap((pool) => pool.members.map((m) => m.connection)),
  ];
  await Promise.all(all.map((connection) => connection.sockets().ready(5000)));
  const viaConnection = async (connection) => {
    const signal = new AbortController().signal;
    await connection
      .sockets()
      .ready(5000)
      .catch(() => false);
    return connection.submit(WORKFLOW, connection.partnerExtra(false), signal);
  };
  let turn = 0;
  const sides = {
    direct: { submit: () => viaConnection(direct), children: [single] },
    fourInTurn: { submit: () => viaConnection(inTurn[turn++ % POOL_MEMBERS]), children: members },
    ...Object.fromEntries(
      Object.entries(pools).map(([name, pool]) => [
        name,
        {
          submit: () => pool.submit(WORKFLOW, { partner: false }, new AbortController().signal),
          children: members,
          pool,
          build: builds[name],
        },
      ]),
    ),
  };
  const resetAll = (children) => Promise.all(children.map((child) => child.call('reset')));
  // Warm-up: the members' node definitions are read, the paths compiled.
  for (const side of Object.values(sides)) {
    await submitAll(500, side.submit);
    await resetAll(side.children);
  }
  const names = Object.keys(sides);
  const measured = Object.fromEntries(names.map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    // The order turns each round.
    for (const name of names.map((_, i) => names[(i + round) % names.length])) {
      const side = sides[name];
      const cpu = process.cpuUsage();
      const started = performance.now();
      await submitAll(jobs, side.submit);
      const used = process.cpuUsage(cpu);
      const result = { cpuUs: (used.user + used.system) / jobs, wallMs: performance.now() - started };
      if (side.pool) {
        // The members' queues as their sockets report them: the last status frames arrive.
        await new Promise((resolve) => setTimeout(resolve, 300));
        const needs = side.build.needsOf(WORKFLOW);
        result.spread = (await Promise.all(members.map((child) => child.call('stats')))).map(
          (s) => s.submits,
        );
        result.chooseUs = await timeChoice(side.pool, needs);
        result.orderToTryUs = timeOrderToTry(side.build.orderToTry);
        result.needsOfUs = timeSync(() => side.build.needsOf(WORKFLOW), 200_000);
        result.homesSetUs = timeHomes(side.build.JobHomes);
        result.freshUs = await timeFreshBurst(side.build, members, WORKFLOW, connectWith);
      }
      measured[name].push(result);
      await resetAll(side.children);
    }
  }
  for (const stop of stops) stop();
  await Promise.all([
    ...Object.values(pools).map((pool) => pool.close()),
    ...all.map((connection) => connection.close()),
  ]);
  const med = (name, field) => (measured[name] ? median(measured[name].map((r) => r[field])) : undefined);
  const summary = (name) =>
    measured[name] && {
      cpuUs: med(name, 'cpuUs'),
      wallMs: med(name, 'wallMs'),
      chooseUs: med(name, 'chooseUs'),
      orderToTryUs: med(name, 'orderToTryUs'),
      needsOfUs: med(name, 'needsOfUs'),
      homesSetUs: med(name, 'homesSetUs'),
      freshUs: med(name, 'freshUs'),
      spreads: measured[name].map((r) => r.spread).filter(Boolean),
      rounds: measured[name],
    };
  return {
    jobs,
    rounds,
    compare,
    direct: summary('direct'),
    fourInTurn: summary('fourInTurn'),
    pool: summary('pool'),
    poolCompared: summary('poolCompared'),
  };
}

/**
 * µs per choice: ServerPool.order (its choose: each member's lacks, views, orderToTry), awaited in a row, each
 * with an AbortSignal of its own as each msg has (made before the clock starts: the node makes it either way).
 */
async function timeChoice(pool, needs) {
  const signals = Array.from({ length: CHOICES }, () => new AbortController().signal);
  for (let i = 0; i < 1000; i++) await pool.order(needs, undefined, signals[i]);
  const started = performance.now();
  for (const signal of signals) await pool.order(needs, undefined, signal);
  return ((performance.now() - started) * 1000) / CHOICES;
}

/** µs per call of the pure choice, on four members up with queues of about the run's length. */
function timeOrderToTry(orderToTry) {
  const views = Array.from({ length: POOL_MEMBERS }, (_, index) => ({
    reachability: 'up',
    able: true,
    ahead: 2500 + (index % 2),
  }));
  let turn = 0;
  return timeSync(() => (turn = orderToTry(views, 'soonest', turn)[0] + 1), 200_000);
}

/**
 * CPU µs per choice when CHOICES / 2 msgs ask a pool just made (a deploy) in the same turn, each with its own
 * signal: before any member's node definitions are read, every choice waits for them.
 */
async function timeFreshBurst(build, members, workflow, connectWith) {
  const connections = members.map((child) => connectWith(build, child.url));
  const pool = new build.ServerPool(
    connections.map((connection, index) => ({
      id: `fresh-${index + 1}`,
      name: `sandbox ${index + 1}`,
      connection,
    })),
    { strategy: 'soonest' },
  );
  await Promise.all(connections.map((connection) => connection.sockets().ready(5000)));
  const needs = build.needsOf(workflow);
  const signals = Array.from({ length: CHOICES / 2 }, () => new AbortController().signal);
  const cpu = process.cpuUsage();
  await Promise.all(signals.map((signal) => pool.order(needs, undefined, signal)));
  const used = process.cpuUsage(cpu);
  await pool.close();
  await Promise.all(connections.map((connection) => connection.close()));
  return (used.user + used.system) / signals.length;
}

/** µs per JobHomes.set (in memory) once it holds as many jobs as it keeps: what each submit costs from then on. */
function timeHomes(JobHomes) {
  const homes = JobHomes.inMemory();
  const ids = Array.from(
    { length: 100_000 },
    (_, index) => `${String(index).padStart(8, '0')}-5f1c-4b6e-9d2a-bench`,
  );
  for (let i = 0; i < 30_000; i++) homes.set(ids[i], `member-${i % POOL_MEMBERS}`);
  const started = performance.now();
  for (let i = 30_000; i < ids.length; i++) homes.set(ids[i], `member-${i % POOL_MEMBERS}`);
  return ((performance.now() - started) * 1000) / (ids.length - 30_000);
}

function timeSync(work, times) {
  for (let i = 0; i < times / 10; i++) work();
  const started = performance.now();
  for (let i = 0; i < times; i++) work();
  return ((performance.now() - started) * 1000) / times;
}

function printReport(report, rounds) {
  const ratio = (value, base) => `x${(value / base).toFixed(2)}`;
  const perJob = (ms, jobs) => `${((ms / jobs) * 1000).toFixed(0)} µs`;
  const rows = [];
  for (const { jobs, one, each, pool, spreads } of report) {
    const row = (label, pick, format, target = '') => [
      label,
      format(pick(one)),
      format(pick(each)),
      format(pick(pool)),
      typeof pick(one) === 'number' ? ratio(pick(pool), pick(one)) : '',
      typeof pick(one) === 'number' ? ratio(pick(pool), pick(each)) : '',
      target,
    ];
    rows.push(
      [
        `${jobs} jobs: completed (failed)`,
        ...[one, each, pool].map((side) => `${side.completed} (${side.failed})`),
        '',
        '',
        '',
      ],
      row(
        '  Node-RED CPU per job, all',
        (side) => side.totalCpuMs,
        (v) => perJob(v, jobs),
        'target <= x1.1',
      ),
      row(
        '    submits + awaits + 1.5 s',
        (side) => side.submitCpuMs,
        (v) => perJob(v, jobs),
      ),
      row(
        '    results (the run)',
        (side) => side.cpuMs,
        (v) => perJob(v, jobs),
      ),
      row(
        '  wall: submits (ms)',
        (side) => side.submitsMs,
        (v) => v.toFixed(0),
      ),
      row(
        '  wall: run to last result (ms)',
        (side) => side.timeMs,
        (v) => v.toFixed(0),
      ),
      row(
        '  completion->result p50 (ms)',
        (side) => side.p50,
        (v) => v.toFixed(2),
      ),
      row(
        '  completion->result p99 (ms)',
        (side) => side.p99,
        (v) => v.toFixed(2),
      ),
      row(
        '  GC in the run: total / longest (ms)',
        (side) => side,
        (s) => `${s.gcTotalMs.toFixed(0)} / ${s.gcMaxMs.toFixed(1)}`,
      ),
      row(
        '  requests per job besides submit',
        (side) => side.restPerJob,
        (v) => v.toFixed(3),
      ),
      row(
        '  queue entries the status checks read, per job',
        (side) => side.queueEntriesRead / jobs,
        (v) => v.toFixed(0),
      ),
      row(
        '  journal writes (the pool: its job homes)',
        (side) => side.journalWrites,
        (v) => String(v),
      ),
      ['  sockets open', ...[one, each, pool].map((side) => String(side.sockets)), '', '', ''],
    );
    for (const [index, spread] of spreads.entries())
      rows.push([
        `  spread, round ${index + 1}: msg.server (sandboxes took)`,
        '',
        '',
        `${spread.byName.join(' / ')} (${spread.bySandbox.join(' / ')})`,
        `${(spread.deviation * 100).toFixed(2)}%`,
        '',
        index === 0 ? 'largest deviation from even; target <= 10%' : '',
      ]);
  }
  const header = [
    `fanout --pool (medians of ${rounds} rounds)`,
    'one config node',
    `${POOL_MEMBERS} config nodes in turn`,
    `pool of ${POOL_MEMBERS}`,
    'pool / one',
    `pool / ${POOL_MEMBERS} in turn`,
    '',
  ];
  const widths = header.map((_, i) => Math.max(...[header, ...rows].map((r) => String(r[i]).length)));
  const line = (r) =>
    r
      .map((cell, i) => String(cell).padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) console.log(line(r));
}

function printChoice(c) {
  const ratio = (value, base) => `x${(value / base).toFixed(2)}`;
  const choiceLine = (side, label) =>
    `  ${label}: ServerPool.order ${side.chooseUs.toFixed(2)} µs a call (orderToTry ${side.orderToTryUs.toFixed(3)} µs, ` +
    `needsOf ${side.needsOfUs.toFixed(2)} µs); a job's home kept (JobHomes.set, once full) ${side.homesSetUs.toFixed(2)} µs; ` +
    `a burst of ${CHOICES / 2} choices into a pool just made (before it has any member's definitions) ${side.freshUs.toFixed(1)} µs CPU a choice; pool.submit CPU ${side.cpuUs.toFixed(0)} µs a submit, ` +
    `${(side.cpuUs - c.direct.cpuUs).toFixed(0)} µs over one connection's (${ratio(side.cpuUs, c.direct.cpuUs)}), ` +
    `${(side.cpuUs - c.fourInTurn.cpuUs).toFixed(0)} µs over four connections in turn (${ratio(side.cpuUs, c.fourInTurn.cpuUs)}); ` +
    `wall ${side.wallMs.toFixed(0)} ms; spread ${side.spreads.map((counts) => counts.join('/')).join(', ')}`;
  console.log(
    `choosing a member, in this process on dist/ (${POOL_MEMBERS} members up, ${c.jobs / POOL_MEMBERS} jobs queued on each; ` +
      `${c.jobs} submits a side, 64 at once; medians of ${c.rounds} rounds; target: the choice under 10 µs, and the ` +
      `submit node runs it twice a msg, once to read and once in pool.submit):`,
  );
  console.log(
    `  one connection: submit CPU ${c.direct.cpuUs.toFixed(0)} µs a submit, wall ${c.direct.wallMs.toFixed(0)} ms; ` +
      `four connections in turn, no pool: ${c.fourInTurn.cpuUs.toFixed(0)} µs, wall ${c.fourInTurn.wallMs.toFixed(0)} ms`,
  );
  console.log(choiceLine(c.pool, 'this build'));
  if (c.poolCompared) console.log(choiceLine(c.poolCompared, `compared build (${c.compare})`));
}

module.exports = { runPool, POOL_MEMBERS };
