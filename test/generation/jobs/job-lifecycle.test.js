'use strict';
// Every job ends, and every cancel cancels, on a server that answers as a real self-hosted one does (the
// sandbox's self-hosted mode follows what was measured on ComfyUI v0.8.0): absent status routes, jobs the
// server forgets (queue delete, restart), interrupts that read as failures. test/real/ runs the same
// behaviours against the real server.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../../dist/sandbox');
const { GenerationConnection } = require('../../../dist/generation/connection');
const { JobTracker } = require('../../../dist/generation/jobs/job-tracker');
const {
  KEY,
  workflow,
  sleep,
  until,
  fileNames,
  awaitFlow,
  collect,
  withFastSockets,
} = require('../../support/sockets');

const configNode = require('../../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../../dist/nodes/graph-gen-await-job.js');
const queueNode = require('../../../dist/nodes/graph-gen-queue.js');
const { coreNode } = require('../../support/node-red');

const HANG = { 9: { class_type: 'SandboxHang', inputs: {} } };

describe('job lifecycle on a self-hosted server', () => {
  // Fast reconnects for these tests; what a test opens is closed after it, last first.
  const open = withFastSockets();

  async function setUp({ key, trackerOptions, sandboxOptions } = {}) {
    const sandbox = await startSandbox({
      generationApiKey: key,
      ...sandboxOptions,
      events: { stepDelayMs: 1, ...sandboxOptions?.events },
    });
    open.push(sandbox);
    const connection = new GenerationConnection({
      baseUrl: sandbox.url,
      apiKey: key,
      partnerKeyField: 'api_key_service_org',
      jobTimings: { pollInitialMs: 50, pollMaxMs: 200, ...trackerOptions },
    });
    open.push(connection);
    const tracker = new JobTracker(connection);
    open.push({ close: async () => tracker.close() });
    return { sandbox, connection, tracker };
  }

  describe('status routes', () => {
    it('a route answering a text/plain 404 is absent, remembered: later checks cost one request', async () => {
      const { sandbox, connection } = await setUp();
      sandbox.generation.options.jobsEndpoint = false;
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      sandbox.counters.reset();
      const first = await connection.dialect.lookup.status(job.id);
      assert.equal(first.phase, 'completed');
      assert.deepEqual(fileNames(first.outputs), fileNames(job.outputs));
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => seen.path),
        [`/api/jobs/${job.id}`, `/api/job/${job.id}/status`, `/api/history/${job.id}`],
      );
      assert.deepEqual(connection.dialect.lookup.absentRoutes.sort(), ['jobs', 'status']);
      sandbox.counters.reset();
      assert.equal((await connection.dialect.lookup.status(job.id)).phase, 'completed');
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => seen.path),
        [`/api/history/${job.id}`],
      );
    });

    it('asks /api/jobs/{id} first, not the status route cloud deprecates: one request answers, outputs and all', async () => {
      const { sandbox, connection } = await setUp();
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      sandbox.counters.reset();
      const answer = await connection.dialect.lookup.status(job.id);
      assert.equal(answer.phase, 'completed');
      assert.deepEqual(fileNames(answer.outputs), fileNames(job.outputs));
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => seen.path),
        [`/api/jobs/${job.id}`],
      );
    });

    it('a 405 is absent too, and the history route answers when /api/jobs is missing', async () => {
      const { sandbox, connection } = await setUp();
      sandbox.generation.options.jobsEndpoint = false;
      sandbox.faults.add({ path: /\/status$/, status: 405, body: 'Method Not Allowed' });
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      const answer = await connection.dialect.lookup.status(job.id);
      assert.equal(answer.phase, 'completed');
      assert.deepEqual(fileNames(answer.outputs), fileNames(job.outputs));
      assert.deepEqual(connection.dialect.lookup.absentRoutes.sort(), ['jobs', 'status']);
    });

    it('with history only, the queue tells a waiting job from a forgotten one', async () => {
      const { sandbox, connection } = await setUp({ sandboxOptions: { events: { autoRun: false } } });
      sandbox.generation.options.jobsEndpoint = false;
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      assert.equal((await connection.dialect.lookup.status(job.id)).phase, 'pending');
      assert.equal((await connection.dialect.lookup.status('no-such-job')).kind, 'unknown');
    });

    it('a 200 whose body is not JSON is an answer that could not be read, not an absent job', async () => {
      const { sandbox, connection } = await setUp();
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      sandbox.faults.add({ path: `/api/jobs/${job.id}`, malformed: true });
      const answer = await connection.dialect.lookup.status(job.id);
      assert.equal(answer.kind, 'unreadable');
      assert.equal(answer.reason, 'failed');
      assert.match(answer.message, /not JSON/);
    });
  });

  describe('no job waits forever', () => {
    it('a job that ended before it was awaited resolves with its outputs', async () => {
      const { sandbox, tracker } = await setUp();
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      const result = await tracker.track(job.id);
      assert.equal(result.status, 'completed');
      assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
      assert.equal(result.outputs_incomplete, undefined);
    });

    // JSON carries `{"toString": 1}`: turning such a value into text by its own means throws, which once made a
    // lookup reject and the await wait for ever without a word.
    it('a status answer holding a value without a toString is "could not read": the job is asked elsewhere and ends', async () => {
      const { sandbox, tracker } = await setUp();
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      sandbox.faults.add({
        path: `/api/job/${job.id}/status`,
        status: 200,
        body: { status: { toString: 1 } },
        times: Infinity,
      });
      const result = await Promise.race([tracker.track(job.id), sleep(5000).then(() => 'still waiting')]);
      assert.equal(result?.status, 'completed');
      assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
    });

    it('a traceback holding values without a toString ends the await failed, with the lines that are text', async () => {
      const { sandbox, tracker } = await setUp();
      const job = sandbox.jobs.submit(workflow(), 'someone-else');
      await until(() => job.state === 'completed', 'the job to end');
      const error = {
        exception_type: { toString: 1 },
        exception_message: 'out of memory',
        traceback: [{ toString: 1 }, 'File "nodes.py", line 1', { valueOf: 1, toString: 'x' }],
      };
      sandbox.faults.add({
        path: `/api/jobs/${job.id}`,
        status: 200,
        body: { id: job.id, status: 'failed', execution_error: error },
        times: Infinity,
      });
      const result = await Promise.race([tracker.track(job.id), sleep(5000).then(() => 'still waiting')]);
      assert.equal(result?.status, 'failed');
      assert.deepEqual(result.error, {
        exception_type: 'unknown',
        exception_message: 'out of memory',
        traceback: ['File "nodes.py", line 1'],
      });
    });

    it('a job no route knows ends failed with JobLost after the grace time, confirmed by a second check', async () => {
      const { tracker } = await setUp({ trackerOptions: { unknownGraceMs: 300, lostConfirmMs: 100 } });
      const started = Date.now();
      const result = await tracker.track('never-submitted');
      const took = Date.now() - started;
      assert.equal(result.status, 'failed');
      assert.equal(result.error.exception_type, 'JobLost');
      assert.match(result.error.exception_message, /no longer knows job never-submitted/);
      assert.match(
        result.error.exception_message,
        /deleted from its queue elsewhere, or the server restarted/,
      );
      assert.ok(took >= 300, `ended after ${took} ms, before the grace time`);
    });

    it('a restart of the server mid-job ends the await JobLost soon after the reconnect', async () => {
      const { sandbox, connection, tracker } = await setUp({ trackerOptions: { lostConfirmMs: 200 } });
      await connection.sockets().ready(5000);
      const job = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
      sandbox.events.restart();
      const reconnected = Date.now();
      const result = await pending;
      assert.equal(result.status, 'failed');
      assert.equal(result.error.exception_type, 'JobLost');
      assert.ok(Date.now() - reconnected < 5000);
    });

    it('a check under way during a reconnect is followed by another: a job that ended meanwhile is seen', async () => {
      const { sandbox, connection, tracker } = await setUp({ trackerOptions: { quietCheckMs: 600_000 } });
      const sockets = connection.sockets();
      await sockets.ready(5000);
      const job = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
      // After the first reconnect the status check (a read of the active jobs) answers "running" at once, but
      // the answer is held back.
      sandbox.counters.reset();
      sandbox.faults.add({ method: 'GET', path: '/api/jobs', holdMs: 500 });
      sandbox.events.dropSockets();
      await until(() => sandbox.counters.matching('/api/jobs', 'GET').length === 1, 'the first check');
      await sleep(50);
      // The job ends with no event reaching us, and the socket drops and comes back again meanwhile.
      job.state = 'completed';
      await until(() => sockets.epoch === 2 && sockets.isOpen, 'the first reconnect');
      sandbox.events.dropSockets();
      await until(() => sockets.epoch === 3 && sockets.isOpen, 'the second reconnect');
      const result = await Promise.race([pending, sleep(3000).then(() => 'still waiting')]);
      assert.equal(result?.status, 'completed');
    });
  });

  describe('status traffic grows with time, not with the number of jobs', () => {
    /** 2,000 jobs queued on a quiet socket (no events at all), awaited for `ms`: the requests meanwhile. */
    async function quietQueue({ key, ms }) {
      const { sandbox, connection, tracker } = await setUp({
        key,
        trackerOptions: { quietCheckMs: 200, queueFreshMs: 100 },
        sandboxOptions: { events: { autoRun: false, statusEvents: false } },
      });
      await connection.sockets().ready(5000);
      const ids = Array.from({ length: 2000 }, () => sandbox.jobs.submit(workflow(), 'other-client').id);
      sandbox.counters.reset();
      const pending = ids.map((id) => tracker.track(id));
      await sleep(ms);
      const requests = sandbox.counters.requests.filter((seen) => seen.path.startsWith('/api/'));
      assert.equal(tracker.views().filter((job) => job.phase === 'pending').length, 2000);
      tracker.close();
      await Promise.all(pending);
      return { sandbox, requests };
    }

    it('2,000 jobs queued on a quiet socket for ten quiet periods cost a few queue reads, no per-job check', async () => {
      const { requests } = await quietQueue({ key: 'k-quiet', ms: 2200 });
      const reads = requests.filter((seen) => seen.path === '/api/queue').length;
      // This cloud-like server has no list of active jobs: asked once, then only its queue is read.
      assert.equal(requests.length, reads + 1, 'only queue reads');
      assert.equal(requests.filter((seen) => seen.path === '/api/jobs').length, 1);
      assert.ok(reads >= 5 && reads <= 30, `${reads} queue reads for 2,000 jobs over 2.2 s`);
    }).timeout(30000);

    it('a self-hosted server lists its waiting and running jobs at /api/jobs: read there, without their workflows', async () => {
      const { sandbox, requests } = await quietQueue({ ms: 1200 });
      assert.ok(requests.length >= 3, `${requests.length} reads`);
      assert.deepEqual(
        new Set(requests.map((seen) => `${seen.method} ${seen.path}`)),
        new Set(['GET /api/jobs']),
      );
      // What it saves: the list's answer against the queue's, for the same 2,000 jobs.
      const sizeOf = async (path) =>
        (await fetch(`${sandbox.url}${path}`).then((answer) => answer.text())).length;
      const listBytes = await sizeOf('/api/jobs?status=pending,in_progress');
      const queueBytes = await sizeOf('/api/queue');
      // These workflows are three tiny nodes; a real one is tens of kilobytes, all in each queue entry.
      assert.ok(listBytes * 1.5 < queueBytes, `list ${listBytes} B, queue ${queueBytes} B`);
    }).timeout(30000);

    it("another program's job, seen running by a read and never heard, ends with the count's fall: swept, not left to the silence watch", async () => {
      const { sandbox, connection, tracker } = await setUp({ trackerOptions: { quietCheckMs: 600_000 } });
      await connection.sockets().ready(5000);
      // Its events go to the other program's socket: here only the queue's count changes.
      const job = sandbox.jobs.submit(workflow(HANG), 'other-client');
      await until(() => job.state === 'in_progress', 'the job to run');
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'a read to place it running');
      await sleep(500);
      sandbox.events.releaseHangs();
      const ended = Date.now();
      const result = await Promise.race([pending, sleep(5000).then(() => 'still waiting')]);
      assert.equal(result?.status, 'completed');
      // A sweep 0.3 s after the fall, not the silence watch's 15 s for a running job none of whose events came.
      assert.ok(Date.now() - ended < 3000, `ended ${Date.now() - ended} ms after the job did`);
    }).timeout(20000);

    it('a queue that only grows is not read; a job deleted from it (its count falls) is swept at once', async () => {
      const { sandbox, connection, tracker } = await setUp({
        trackerOptions: { quietCheckMs: 600_000 },
        sandboxOptions: { events: { autoRun: false } },
      });
      // The sandbox's validation takes these short workflows (as bench/many-jobs.js does).
      sandbox.generation.definitions.KSampler.input.required = { model: ['MODEL'] };
      await connection.sockets().ready(5000);
      const listReads = () =>
        sandbox.counters.requests.filter(
          (seen) => seen.method === 'GET' && (seen.path === '/api/jobs' || seen.path === '/api/queue'),
        ).length;
      sandbox.counters.reset();
      // Submitted here on the open socket, each awaited at once: every submit tells a higher count (the book
      // starts with the first await, and compares the first count it hears with the socket's last).
      const ids = [];
      const pending = [];
      for (let round = 0; round < 8; round++) {
        for (let n = 0; n < 5; n++) {
          const { prompt_id: id } = await connection.submit(workflow());
          ids.push(id);
          pending.push(tracker.track(id));
        }
        await sleep(150);
      }
      // Two sweep intervals and more: a sweep on each of these 40 changes would have read the list.
      await sleep(2500);
      assert.equal(listReads(), 0, 'no read of the list while the queue only grew');
      // Another client deletes a waiting job: no event of its own, only a lower count.
      sandbox.jobs.cancel(ids[7]);
      const started = Date.now();
      const result = await Promise.race([pending[7], sleep(5000).then(() => 'still waiting')]);
      assert.equal(result?.status, 'cancelled');
      assert.ok(Date.now() - started < 3000, 'within a sweep, not the quiet check');
      assert.ok(listReads() >= 1, 'the sweep read the list');
      tracker.close();
      await Promise.all(pending);
    }).timeout(20000);
  });

  describe('queue reads: the list of active jobs where the server has it, else the queue', () => {
    /** A self-hosted sandbox with a running job and a waiting one; the connection's reads counted from here. */
    async function runningAndWaiting(generationOptions = {}, trackerOptions = {}) {
      const { sandbox, connection } = await setUp({
        sandboxOptions: { events: { autoRun: false } },
        trackerOptions,
      });
      Object.assign(sandbox.generation.options, generationOptions);
      const running = sandbox.jobs.submit(workflow(), 'other-client');
      const waiting = sandbox.jobs.submit(workflow(), 'other-client');
      running.state = 'in_progress';
      sandbox.counters.reset();
      const reads = () => sandbox.counters.requests.map((seen) => `${seen.method} ${seen.path}`);
      return { sandbox, connection, running, waiting, reads };
    }
    const idsOf = (read) => {
      assert.equal(read.kind, 'read', JSON.stringify(read));
      return { running: [...read.running], pending: [...read.pending] };
    };

    it('from the list: the running job and the waiting one, in one request', async () => {
      const { connection, running, waiting, reads } = await runningAndWaiting();
      assert.deepEqual(idsOf(await connection.queue()), { running: [running.id], pending: [waiting.id] });
      assert.deepEqual(reads(), ['GET /api/jobs']);
    });

    it('a server without the list (an older one) is asked once, then only its queue is read', async () => {
      const { connection, running, waiting, reads } = await runningAndWaiting({ jobsList: false });
      const expected = { running: [running.id], pending: [waiting.id] };
      assert.deepEqual(idsOf(await connection.queue()), expected);
      assert.deepEqual(await connection.queue().then(idsOf), expected);
      assert.deepEqual(reads(), ['GET /api/jobs', 'GET /api/queue', 'GET /api/queue']);
      assert.ok(connection.dialect.lookup.absentRoutes.includes('jobs_list'));
    });

    for (const [what, fault] of [
      [
        'a page of a longer list',
        { body: { jobs: [], pagination: { offset: 0, limit: 1, total: 2, has_more: true } } },
      ],
      [
        'a list that ignored the filter',
        { body: { jobs: [{ id: 'x', status: 'completed' }], pagination: { has_more: false } } },
      ],
      ['a refused filter (400)', { status: 400, body: { error: 'Invalid status value(s)' } }],
      ['another shape', { body: [{ id: 'x', status: 'pending' }] }],
    ]) {
      it(`${what} is not taken for the queue: the queue is read for a while, then the list is asked again`, async () => {
        const { sandbox, connection, running, waiting, reads } = await runningAndWaiting(
          {},
          { listRetryMs: 300 },
        );
        sandbox.faults.add({ method: 'GET', path: '/api/jobs', status: 200, ...fault });
        const expected = { running: [running.id], pending: [waiting.id] };
        assert.deepEqual(idsOf(await connection.queue()), expected);
        assert.deepEqual(idsOf(await connection.queue()), expected);
        assert.deepEqual(reads(), ['GET /api/jobs', 'GET /api/queue', 'GET /api/queue']);
        // One odd answer does not switch the list off for the connection's life.
        await sleep(350);
        assert.deepEqual(idsOf(await connection.queue()), expected);
        assert.deepEqual(reads().slice(3), ['GET /api/jobs']);
      });
    }

    it('a list that failed once (a 500 after retries) is read from the queue that time, and tried again next time', async () => {
      const { sandbox, connection, running, waiting, reads } = await runningAndWaiting();
      sandbox.faults.add({
        method: 'GET',
        path: '/api/jobs',
        status: 500,
        body: { error: 'busy' },
        times: Infinity,
      });
      const expected = { running: [running.id], pending: [waiting.id] };
      assert.deepEqual(idsOf(await connection.queue()), expected);
      sandbox.faults.clear();
      sandbox.counters.reset();
      assert.deepEqual(idsOf(await connection.queue()), expected);
      assert.deepEqual(reads(), ['GET /api/jobs']);
    });
  });

  describe('cancel means cancelled (nodes)', () => {
    const catchNode = coreNode('common/25-catch.js');
    let sandbox;
    before(async () => {
      await helper.startServer();
    });
    after(async () => {
      await helper.stopServer();
    });
    beforeEach(async () => {
      sandbox = await startSandbox({ events: { stepDelayMs: 1 } });
    });
    afterEach(async () => {
      await helper.unload();
      await sandbox.close();
    });

    /** A config, an await-job and a queue node (cancel); `credentials` of the config. */
    async function loadFlow(target = sandbox, credentials = {}) {
      const flow = awaitFlow(target, {}, [
        {
          id: 'queue',
          z: 'f1',
          type: 'graph-gen-queue',
          server: 'cfg',
          action: 'cancel',
          wires: [['queued']],
        },
        { id: 'queued', z: 'f1', type: 'helper' },
      ]);
      await helper.load([configNode, awaitNode, queueNode, catchNode], flow, { cfg: credentials });
      const connection = helper.getNode('cfg').connection;
      await connection.sockets().ready(5000);
      return {
        connection,
        done: collect('done'),
        failed: collect('failed'),
        queued: collect('queued'),
      };
    }

    /** A job that runs until stopped, and one waiting behind it (self-hosted servers run one at a time). */
    async function runningAndPending(connection) {
      const running = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      const waiting = sandbox.jobs.submit(workflow(), connection.clientId);
      await until(() => running.state === 'in_progress', 'the first job to run');
      return { running, waiting };
    }

    it('cancelling a pending job ends its await cancelled at once; msg.removed names it', async () => {
      const { connection, failed, queued } = await loadFlow();
      const { running, waiting } = await runningAndPending(connection);
      helper.getNode('await').receive({ prompt_id: waiting.id });
      await sleep(50);
      const started = Date.now();
      helper.getNode('queue').receive({ prompt_id: waiting.id });
      const out = await queued.next();
      assert.deepEqual(out.removed, [waiting.id]);
      assert.deepEqual(out.interrupted, []);
      assert.deepEqual(out.not_queued, []);
      const ended = await failed.next(1, 2000);
      assert.equal(ended.payload.status, 'cancelled');
      assert.equal(ended.payload.prompt_id, waiting.id);
      assert.ok(Date.now() - started < 1000);
      assert.equal(sandbox.jobs.jobs.has(waiting.id), false, 'the server forgot the pending job');
      assert.equal(running.state, 'in_progress', 'the running job was not touched');
      assert.equal(sandbox.counters.matching('/api/interrupt').length, 0);
    });

    it('cancelling the running job sends the targeted interrupt; its await ends cancelled', async () => {
      const { connection, failed, queued } = await loadFlow();
      const { running } = await runningAndPending(connection);
      helper.getNode('await').receive({ prompt_id: running.id });
      helper.getNode('queue').receive({ prompt_id: running.id });
      const out = await queued.next();
      assert.deepEqual(out.interrupted, [running.id]);
      assert.deepEqual(out.removed, []);
      const [interrupt] = sandbox.counters.matching('/api/interrupt', 'POST');
      assert.ok(interrupt, 'an interrupt was sent');
      const ended = await failed.next(1, 3000);
      assert.equal(ended.payload.status, 'cancelled');
      assert.equal(running.state, 'cancelled');
    });

    it('an await of a job cancelled from the queue before it was awaited ends cancelled at once', async () => {
      const { connection, failed, queued } = await loadFlow();
      const { waiting } = await runningAndPending(connection);
      helper.getNode('queue').receive({ prompt_id: waiting.id });
      await queued.next();
      helper.getNode('await').receive({ prompt_id: waiting.id });
      const ended = await failed.next(1, 1000);
      assert.equal(ended.payload.status, 'cancelled');
    });

    it('a job interrupted while nobody awaited it reads as cancelled, though the server says failed', async () => {
      const { failed } = await loadFlow();
      const job = sandbox.jobs.submit(workflow(HANG), 'another-client');
      await until(() => job.state === 'in_progress', 'the job to run');
      sandbox.jobs.interrupt(job.id);
      const detail = await (await fetch(`${sandbox.url}/api/jobs/${job.id}`)).json();
      assert.equal(detail.status, 'failed');
      helper.getNode('await').receive({ prompt_id: job.id });
      const ended = await failed.next(1, 3000);
      assert.equal(ended.payload.status, 'cancelled');
      assert.equal(ended.payload.error, undefined);
    });

    it('interrupt with msg.prompt_id of a job that is not running interrupts nothing', async () => {
      const { connection, queued } = await loadFlow();
      const { running, waiting } = await runningAndPending(connection);
      helper.getNode('queue').receive({ action: 'interrupt', prompt_id: waiting.id });
      await queued.next();
      const [sent] = sandbox.counters.matching('/api/interrupt', 'POST');
      assert.ok(sent);
      assert.equal(running.state, 'in_progress');
      assert.equal(waiting.state, 'pending');
      helper.getNode('queue').receive({ action: 'interrupt', prompt_id: running.id });
      await queued.next();
      await until(() => running.state === 'cancelled', 'the running job to be interrupted');
    });

    it('a cloud service that honours delete for a running job gets no interrupt', async () => {
      await sandbox.close();
      sandbox = await startSandbox({ generationApiKey: KEY, events: { stepDelayMs: 1 } });
      const { failed, queued } = await loadFlow(sandbox, { apiKey: KEY });
      const job = sandbox.jobs.submit(workflow(HANG), 'someone');
      await until(() => job.state === 'in_progress', 'the job to run');
      helper.getNode('await').receive({ prompt_id: job.id });
      helper.getNode('queue').receive({ prompt_id: job.id });
      const out = await queued.next();
      assert.deepEqual(out.payload, { deleted: [job.id] });
      // It was running, and the delete stopped it: interrupted, with no interrupt sent.
      assert.deepEqual(out.interrupted, [job.id]);
      assert.deepEqual(out.removed, []);
      assert.equal(sandbox.counters.matching('/api/interrupt').length, 0);
      assert.equal((await failed.next(1, 2000)).payload.status, 'cancelled');
    });
  });
});
