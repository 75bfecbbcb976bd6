'use strict';
// Job tracking over the socket manager against the sandbox, without Node-RED: routing as self-hosted and
// cloud servers do it, polling when the socket cannot be had, the REST fallbacks for missed outputs.
const assert = require('node:assert/strict');
const { startSandbox } = require('../../../dist/sandbox');
const { GenerationConnection } = require('../../../dist/generation/connection');
const { JobTracker } = require('../../../dist/generation/jobs/job-tracker');
const { KEY, workflow, sleep, until, fileNames, withFastSockets } = require('../../support/sockets');

const fastPolls = { pollInitialMs: 50, pollMaxMs: 200, queueFreshMs: 0 };

describe('job tracking against the sandbox', () => {
  // Fast reconnects for these tests; what a test opens is closed after it, last first.
  const open = withFastSockets();

  async function setUp(sandboxOptions = {}, key = KEY, jobTimings = fastPolls) {
    const apiKey = key ?? undefined;
    const sandbox = await startSandbox({
      generationApiKey: apiKey,
      ...sandboxOptions,
      events: { stepDelayMs: 1, ...sandboxOptions.events },
    });
    open.push(sandbox);
    const connection = new GenerationConnection({
      baseUrl: sandbox.url,
      apiKey,
      partnerKeyField: 'api_key_service_org',
      jobTimings,
    });
    open.push(connection);
    const tracker = new JobTracker(connection);
    open.push({ close: async () => tracker.close() });
    return { sandbox, connection, tracker };
  }

  it("self-hosted: events only reach the socket of the job's client_id", async () => {
    const { sandbox, connection, tracker } = await setUp({}, null);
    const other = new GenerationConnection({ baseUrl: sandbox.url, partnerKeyField: 'x' });
    open.push(other);
    assert.equal(await other.sockets().ready(5000), true);
    const seenByOther = [];
    const job = sandbox.jobs.submit(workflow(), connection.clientId);
    other.sockets().subscribe(job.id, { onEvent: (event) => seenByOther.push(event.type) });
    const result = await tracker.track(job.id);
    assert.equal(result.status, 'completed');
    assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
    assert.equal(
      sandbox.counters.handshakes[0].query.has('token'),
      false,
      'no token for a self-hosted server',
    );
    await sleep(20);
    assert.deepEqual(seenByOther, [], 'another client sees nothing of the job');
  });

  it('self-hosted: a job submitted without client_id ends on `executing` null, outputs read over REST', async () => {
    const { sandbox, connection, tracker } = await setUp({}, null);
    await connection.sockets().ready(5000);
    const types = [];
    const job = sandbox.jobs.submit(workflow());
    const result = await tracker.track(job.id, { onProgress: (p) => types.push(p.topic) });
    assert.equal(types.includes('execution_success'), false);
    assert.equal(types.includes('execution_start'), false);
    assert.equal(result.status, 'completed');
    assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
    assert.equal(result.outputs_incomplete, undefined);
    assert.ok(sandbox.counters.count(/\/(jobs|history)\//) >= 1, 'the outputs were read over REST');
  });

  it("cloud: every socket of the key gets every job's events; prompt_id keeps jobs apart", async () => {
    const { sandbox, connection, tracker } = await setUp();
    const second = new GenerationConnection({
      baseUrl: sandbox.url,
      apiKey: KEY,
      partnerKeyField: 'x',
      jobTimings: fastPolls,
    });
    open.push(second);
    const secondTracker = new JobTracker(second);
    open.push({ close: async () => secondTracker.close() });
    await Promise.all([connection.sockets().ready(5000), second.sockets().ready(5000)]);
    const mine = sandbox.jobs.submit(workflow({}, { prefix: 'mine' }), connection.clientId);
    const theirs = sandbox.jobs.submit(workflow({}, { prefix: 'theirs' }), second.clientId);
    const [a, b, c] = await Promise.all([
      tracker.track(mine.id),
      tracker.track(theirs.id),
      secondTracker.track(mine.id),
    ]);
    assert.deepEqual(fileNames(a.outputs), fileNames(mine.outputs));
    assert.deepEqual(fileNames(b.outputs), fileNames(theirs.outputs));
    assert.deepEqual(c.files, a.files);
    assert.ok(a.files.every((f) => f.filename.startsWith('mine')));
  });

  it('polls the status when the socket cannot be had, and reads the outputs over REST', async () => {
    const { sandbox, tracker } = await setUp();
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
    const job = sandbox.jobs.submit(workflow({ 25: { class_type: 'SandboxSlow', inputs: { ms: 400 } } }));
    const result = await tracker.track(job.id);
    assert.equal(result.status, 'completed');
    assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
    // A poll reads the queue while the job is in it, then the job's own status once it is not.
    const polls = sandbox.counters.matching('/api/queue', 'GET').length;
    assert.ok(polls >= 2, `polled ${polls} times`);
    // The end and its outputs in one answer of /api/jobs/{id}; the status route cloud deprecates is not asked.
    assert.ok(sandbox.counters.count(`/api/jobs/${job.id}`) >= 1, 'the end and outputs from /api/jobs');
    assert.equal(sandbox.counters.count(`/api/job/${job.id}/status`), 0, 'the deprecated status route');
  });

  it('polls a job while the socket is down at a growing interval, up to the maximum', async () => {
    const { sandbox, tracker } = await setUp({}, KEY, {
      pollInitialMs: 40,
      pollMaxMs: 160,
      firstCheckMs: 60_000,
      queueFreshMs: 0,
    });
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
    const job = sandbox.jobs.submit(workflow({ 2: { class_type: 'SandboxHang', inputs: {} } }));
    const times = [];
    const record = sandbox.counters.record.bind(sandbox.counters);
    sandbox.counters.record = (seen) => {
      // A poll of a job the queue lists is a queue read.
      if (seen.path === '/api/queue' && seen.method === 'GET') times.push(Date.now());
      return record(seen);
    };
    const started = Date.now();
    const pending = tracker.track(job.id);
    await until(() => times.length >= 8, 'eight polls', 8000);
    const gaps = [times[0] - started, ...times.slice(1).map((t, i) => t - times[i])];
    assert.ok(gaps[0] < 120, `first poll after ${gaps[0]} ms`);
    assert.ok(gaps[3] > gaps[0], `the interval grows: ${gaps.join(', ')}`);
    for (const gap of gaps.slice(-3))
      assert.ok(gap >= 140 && gap < 600, `capped near 160 ms: ${gaps.join(', ')}`);
    sandbox.jobs.cancel(job.id);
    assert.equal((await pending).status, 'cancelled');
  });

  it('checks each job after a reconnect: one that ended while the socket was down resolves with its outputs', async () => {
    const { sandbox, connection, tracker } = await setUp({}, KEY, {
      pollInitialMs: 60_000,
      pollMaxMs: 60_000,
      firstCheckMs: 60_000,
    });
    assert.equal(await connection.sockets().ready(5000), true);
    const job = sandbox.jobs.submit(
      workflow({ 25: { class_type: 'SandboxSlow', inputs: { ms: 300 } } }),
      connection.clientId,
    );
    const pending = tracker.track(job.id);
    await until(() => job.state === 'in_progress', 'the job to run');
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
    sandbox.events.dropSockets();
    await until(() => job.state === 'completed', 'the job to end while the socket is down');
    sandbox.counters.reset();
    sandbox.faults.clear();
    const reopened = Date.now();
    const result = await pending;
    assert.ok(Date.now() - reopened < 3000, 'resolved by the check after the reconnect, not by polling');
    assert.equal(result.status, 'completed');
    assert.deepEqual(result.outputs, job.outputs, 'the missed outputs were read over REST');
    assert.equal(result.outputs_incomplete, undefined);
    assert.ok(sandbox.counters.count(`/api/jobs/${job.id}`) >= 1);
    assert.equal(sandbox.counters.socketsOpened, 1);
  });

  it('falls back from /api/jobs to history_v2 to history, and says outputs_incomplete when none has them', async () => {
    const { sandbox, tracker } = await setUp();
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
    sandbox.generation.options.jobsEndpoint = false;
    const first = sandbox.jobs.submit(workflow());
    const viaV2 = await tracker.track(first.id);
    assert.deepEqual(fileNames(viaV2.outputs), fileNames(first.outputs));
    assert.ok(sandbox.counters.count(`/api/history_v2/${first.id}`) >= 1);
    sandbox.generation.options.historyV2Endpoint = false;
    const second = sandbox.jobs.submit(workflow());
    const viaHistory = await tracker.track(second.id);
    assert.deepEqual(fileNames(viaHistory.outputs), fileNames(second.outputs));
    sandbox.generation.options.historyEndpoint = false;
    const third = sandbox.jobs.submit(workflow());
    const incomplete = await tracker.track(third.id);
    assert.equal(incomplete.status, 'completed');
    assert.equal(incomplete.outputs_incomplete, true);
    assert.deepEqual(incomplete.files, []);
  });

  it('leaves the socket when the tracker closes, and resolves open jobs with nothing', async () => {
    const { sandbox, connection, tracker } = await setUp();
    const job = sandbox.jobs.submit(workflow({ 9: { class_type: 'SandboxHang', inputs: {} } }));
    const pending = tracker.track(job.id);
    await until(() => connection.sockets().isOpen, 'the socket');
    tracker.close();
    assert.equal(await pending, undefined);
    await until(
      () => connection.sockets().state === 'idle' && sandbox.counters.socketsOpen === 0,
      'the idle close after the grace time',
    );
    sandbox.jobs.cancel(job.id);
  });
});
