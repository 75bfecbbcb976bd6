'use strict';
// A job's life (src/generation/jobs/job-life.ts) against the sandbox: no job ends wrongly on an answer that
// could not be read, a cancel says what it did, a revoked key ends the await, every await of a job gets the
// whole result, a silent socket is noticed, and a closing config node cuts off what is under way.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const WebSocket = require('ws');
const { startSandbox } = require('../../../dist/sandbox');
const { GenerationConnection } = require('../../../dist/generation/connection');
const { JobTracker } = require('../../../dist/generation/jobs/job-tracker');
const { JobBook } = require('../../../dist/generation/jobs/job-book');
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
const { coreNode, textToImage } = require('../../support/node-red');

const configNode = require('../../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../../dist/nodes/graph-gen-await-job.js');
const queueNode = require('../../../dist/nodes/graph-gen-queue.js');
const submitNode = require('../../../dist/nodes/graph-gen-submit.js');
const catchNode = coreNode('common/25-catch.js');

const HANG = { 9: { class_type: 'SandboxHang', inputs: {} } };
const FAST = { pollInitialMs: 50, pollMaxMs: 200, firstCheckMs: 20, lostConfirmMs: 100, unknownGraceMs: 200 };

/** A promise's value, or `still waiting` if it has none after `ms`. */
function within(promise, ms) {
  return Promise.race([promise, sleep(ms).then(() => 'still waiting')]);
}

describe("a job's life", () => {
  const open = withFastSockets();

  async function setUp({ key, timings, sandboxOptions, limits } = {}) {
    const sandbox = await startSandbox({
      generationApiKey: key,
      ...sandboxOptions,
      events: { stepDelayMs: 1, ...sandboxOptions?.events },
    });
    open.push(sandbox);
    const connection = new GenerationConnection({
      baseUrl: sandbox.url,
      apiKey: key,
      partnerKeyField: 'x',
      jobTimings: { ...FAST, ...timings },
      limits,
    });
    open.push(connection);
    const tracker = new JobTracker(connection);
    open.push({ close: async () => tracker.close() });
    return { sandbox, connection, tracker };
  }

  describe('an answer that could not be read is never taken for an absent job', () => {
    // A self-hosted server that tells a waiting job from a forgotten one only through its queue (no
    // /api/jobs/{id}, no list of active jobs), whose queue then cannot be read.
    const queueOnly = { generation: { jobsEndpoint: false, jobsList: false }, events: { autoRun: false } };
    for (const [what, fault, limits] of [
      ['a queue that fails (500)', { status: 500, body: { error: 'busy' } }],
      ['a queue route the server lacks', { status: 404, body: '404: Not Found' }],
      ['a queue over the list size limit', undefined, { listBytes: 256 }],
    ]) {
      it(`${what}: a waiting job is not lost, and completes once the server is readable`, async () => {
        const { sandbox, tracker } = await setUp({ sandboxOptions: queueOnly, limits });
        const job = sandbox.jobs.submit(workflow(), 'another-client');
        // Enough jobs that the queue's answer is larger than 256 bytes.
        for (let n = 0; n < 3; n++) sandbox.jobs.submit(workflow(), 'another-client');
        if (fault) sandbox.faults.add({ method: 'GET', path: '/api/queue', times: Infinity, ...fault });
        const pending = tracker.track(job.id);
        // Ten times the grace and confirmation of a lost job.
        assert.equal(await within(pending, 2000), 'still waiting');
        sandbox.faults.clear();
        sandbox.events.run(job.id);
        if (limits) sandbox.jobs.jobs.forEach((other) => other !== job && sandbox.jobs.jobs.delete(other.id));
        const result = await within(pending, 5000);
        assert.equal(result?.status, 'completed', JSON.stringify(result));
        assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
      }).timeout(20000);
    }

    it('`executing` null followed by checks that fail is not taken for completed', async () => {
      const { sandbox, connection, tracker } = await setUp();
      await connection.sockets().ready(5000);
      const job = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
      sandbox.faults.add({
        method: 'GET',
        path: /^\/api\/(jobs|history|queue|job)/,
        status: 500,
        times: Infinity,
      });
      // The end of a run, as if the job's success had been missed: only REST can say how it ended.
      sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: null, prompt_id: job.id } }));
      // A whole check failed: its last route (history) was tried four times, retries and all.
      await until(() => sandbox.counters.count(`/api/history/${job.id}`) >= 4, 'a failed check', 20000);
      assert.equal(await within(pending, 300), 'still waiting');
      sandbox.faults.clear();
      await sleep(300);
      sandbox.jobs.interrupt(job.id);
      assert.equal((await within(pending, 5000))?.status, 'cancelled', 'it ran on, and was interrupted');
    }).timeout(30000);
  });

  describe('a revoked key and a rate limit', () => {
    it('every status check refused (401): the await ends failed, unauthorized, with a sentence and no key', async () => {
      const { sandbox, tracker } = await setUp({ key: KEY });
      const job = sandbox.jobs.submit(workflow(HANG), 'another-client');
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
      // The key is revoked: the socket's reconnects and every REST route are refused.
      sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 401, times: Infinity });
      sandbox.faults.add({
        path: /^\/api\//,
        status: 401,
        body: { message: 'key revoked' },
        times: Infinity,
      });
      sandbox.events.dropSockets();
      const result = await within(pending, 5000);
      assert.equal(result?.status, 'failed', JSON.stringify(result));
      assert.equal(result.error.exception_type, 'unauthorized');
      assert.match(
        result.error.exception_message,
        /every status check of job .* was refused.*the API key was refused by the generation service \(HTTP 401\).*check the key in the config node/,
      );
      assert.equal(JSON.stringify(result).includes(KEY), false);
      assert.equal(job.state, 'in_progress', 'the job itself runs on');
    });

    it('a 429 with Retry-After is waited out, and the job is still followed to its end', async () => {
      const { sandbox, connection, tracker } = await setUp({
        key: KEY,
        sandboxOptions: { events: { autoRun: false } },
      });
      await connection.sockets().ready(5000);
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      sandbox.faults.add({ method: 'GET', path: /^\/api\//, status: 429, retryAfter: 1, times: 8 });
      sandbox.counters.reset();
      const pending = tracker.track(job.id);
      await sleep(1200);
      assert.equal(await within(pending, 10), 'still waiting');
      // Asked again after Retry-After, not at the poll's pace.
      assert.ok(
        sandbox.counters.requests.length <= 4,
        `${sandbox.counters.requests.length} requests in 1.2 s`,
      );
      sandbox.events.run(job.id);
      const result = await within(pending, 15000);
      assert.equal(result?.status, 'completed', JSON.stringify(result));
    }).timeout(25000);
  });

  describe('every await of a job gets the whole result', () => {
    // A cloud-like server with no route that gives a job's outputs: they come from its events only.
    const noOutputRoutes = {
      generation: { jobsEndpoint: false, historyV2Endpoint: false, historyEndpoint: false },
    };

    it('two awaits of one job, the second after the first ended, and a third later: each gets every file', async () => {
      const { sandbox, connection, tracker } = await setUp({ key: KEY, sandboxOptions: noOutputRoutes });
      const second = new JobTracker(connection);
      open.push({ close: async () => second.close() });
      await connection.sockets().ready(5000);
      const job = sandbox.jobs.submit(workflow(), connection.clientId);
      await until(() => job.state === 'completed', 'the job to end');
      await sleep(50);
      const first = await tracker.track(job.id);
      const again = await second.track(job.id);
      await sleep(300);
      const later = await second.track(job.id);
      for (const result of [first, again, later]) {
        assert.equal(result.status, 'completed');
        assert.equal(result.outputs_incomplete, undefined);
        assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs));
        assert.equal(result.files.length, 1);
      }
      assert.notEqual(first, again, 'each await has its own copy');
    });

    it('two awaits at once share one life: one check, both results whole', async () => {
      const { sandbox, connection, tracker } = await setUp({ key: KEY, sandboxOptions: noOutputRoutes });
      const second = new JobTracker(connection);
      open.push({ close: async () => second.close() });
      await connection.sockets().ready(5000);
      const job = sandbox.jobs.submit(
        workflow({ 5: { class_type: 'SandboxSlow', inputs: { ms: 200 } } }),
        connection.clientId,
      );
      const [one, two] = await Promise.all([tracker.track(job.id), second.track(job.id)]);
      assert.deepEqual(fileNames(one.outputs), fileNames(job.outputs));
      assert.deepEqual(fileNames(two.outputs), fileNames(job.outputs));
      assert.equal(connection.jobs.size, 0);
    });
  });

  it('a socket the server stopped sending to is noticed: the job’s end comes within 20 s, the socket opened again', async () => {
    // Default timings: what a user gets.
    const { sandbox, connection, tracker } = await setUp({
      timings: JobBook.defaultTimings,
      sandboxOptions: { events: { stepDelayMs: 150 } },
    });
    const sockets = connection.sockets();
    await sockets.ready(5000);
    const slow = (id) => ({ class_type: 'SandboxSlow', inputs: { ms: 400 }, id });
    const job = sandbox.jobs.submit(
      workflow({ 4: slow(4), 5: slow(5), 6: slow(6), 7: slow(7), 8: slow(8), 10: slow(10) }),
      connection.clientId,
    );
    const pending = tracker.track(job.id);
    await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
    // Comfy-Org/ComfyUI#16010: another socket of the same clientId takes ours out of the server's table and
    // its close forgets both; ours stays open and hears nothing more.
    const intruder = new WebSocket(
      `${sandbox.url.replace(/^http/, 'ws')}/ws?clientId=${connection.clientId}`,
    );
    await new Promise((resolve) => intruder.once('open', resolve));
    intruder.close();
    await until(() => job.state === 'completed', 'the job to end', 10000);
    const ended = Date.now();
    const result = await within(pending, 20000);
    assert.equal(result?.status, 'completed', JSON.stringify(result));
    assert.ok(Date.now() - ended < 20000);
    assert.deepEqual(fileNames(result.outputs), fileNames(job.outputs), 'the outputs read over REST');
    await until(() => sockets.stats.socketsOpened === 2, 'the socket to be opened again', 3000);
  }).timeout(40000);

  it('a job awaited on a socket that was already silent (no event ever comes) is noticed too: its end within 20 s', async () => {
    // As after Node-RED restarts with its kept socket id (a resumed await): the server may drop the new
    // socket as it forgets the old one, before any event of the job reached it.
    const { sandbox, connection, tracker } = await setUp({
      timings: JobBook.defaultTimings,
      sandboxOptions: { events: { stepDelayMs: 150 } },
    });
    const sockets = connection.sockets();
    await sockets.ready(5000);
    const slow = (id) => ({ class_type: 'SandboxSlow', inputs: { ms: 1000 }, id });
    const intruder = new WebSocket(
      `${sandbox.url.replace(/^http/, 'ws')}/ws?clientId=${connection.clientId}`,
    );
    await new Promise((resolve) => intruder.once('open', resolve));
    intruder.close();
    await sleep(200);
    const job = sandbox.jobs.submit(
      workflow({ 4: slow(4), 5: slow(5), 6: slow(6), 7: slow(7), 8: slow(8), 10: slow(10) }),
      connection.clientId,
    );
    await until(() => job.state === 'in_progress', 'the job to run');
    const pending = tracker.track(job.id);
    await until(() => job.state === 'completed', 'the job to end', 15000);
    const ended = Date.now();
    const result = await within(pending, 20000);
    assert.equal(result?.status, 'completed', JSON.stringify(result));
    assert.ok(Date.now() - ended < 20000);
    await until(() => sockets.stats.socketsOpened === 2, 'the socket to be opened again', 3000);
  }).timeout(60000);

  describe('cancel says what it did (nodes)', () => {
    let sandbox;
    before(async () => helper.startServer());
    after(async () => helper.stopServer());
    afterEach(async () => {
      await helper.unload();
      await sandbox?.close();
    });

    async function loadFlow(options = {}) {
      sandbox = await startSandbox({ events: { stepDelayMs: 1 }, ...options });
      const flow = awaitFlow(sandbox, {}, [
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
      await helper.load([configNode, awaitNode, queueNode, catchNode], flow, { cfg: {} });
      const connection = helper.getNode('cfg').connection;
      await connection.sockets().ready(5000);
      return { connection, done: collect('done'), failed: collect('failed'), queued: collect('queued') };
    }

    it('a running job that completes between the queue reads around the delete is ended, not cancelled', async () => {
      const { connection, done, queued } = await loadFlow();
      const job = sandbox.jobs.submit(
        workflow({ 5: { class_type: 'SandboxSlow', inputs: { ms: 300 } } }),
        connection.clientId,
      );
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => job.state === 'in_progress', 'the job to run');
      // The delete is slow to answer: the job ends meanwhile.
      sandbox.faults.add({ method: 'POST', path: '/api/queue', delayMs: 800 });
      helper.getNode('queue').receive({ prompt_id: job.id });
      const out = await queued.next(1, 5000);
      assert.equal(job.state, 'completed');
      assert.deepEqual(out.not_queued, [job.id]);
      assert.deepEqual([...out.removed, ...out.interrupted], []);
      assert.equal(sandbox.counters.matching('/api/interrupt').length, 0);
      assert.equal((await done.next(1, 3000)).payload.status, 'completed');
    });

    it('a queue that cannot be read after the delete: nothing counts as removed; the targeted interrupt is sent, the await ends when the job stops', async () => {
      const { connection, failed, queued } = await loadFlow();
      const job = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => job.state === 'in_progress', 'the job to run');
      sandbox.faults.add({ method: 'GET', path: /^\/api\/(queue|jobs)$/, status: 500, times: Infinity });
      helper.getNode('queue').receive({ prompt_id: job.id });
      const out = await queued.next(1, 15000);
      assert.deepEqual(out.unconfirmed, [job.id]);
      assert.deepEqual(out.removed, []);
      assert.equal(sandbox.counters.matching('/api/interrupt', 'POST').length, 1);
      assert.equal(job.state, 'cancelled', 'the job was stopped');
      assert.equal((await failed.next(1, 5000)).payload.status, 'cancelled');
    }).timeout(30000);

    it('ComfyUI 0.26 and later: one call a job cancels a waiting and the running one; no delete, no interrupt', async () => {
      const { connection, failed, queued } = await loadFlow({ generation: { serverVersion: '0.33.0' } });
      const running = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      const waiting = sandbox.jobs.submit(workflow(), connection.clientId);
      await until(() => running.state === 'in_progress', 'the first job to run');
      for (const job of [running, waiting]) helper.getNode('await').receive({ prompt_id: job.id });
      sandbox.counters.reset();
      helper.getNode('queue').receive({ prompt_id: [running.id, waiting.id] });
      const out = await queued.next(1, 5000);
      assert.deepEqual(out.interrupted, [running.id]);
      assert.deepEqual(out.removed, [waiting.id]);
      assert.deepEqual(out.payload, { [running.id]: { cancelled: true }, [waiting.id]: { cancelled: true } });
      const posts = sandbox.counters.requests
        .filter((seen) => seen.method === 'POST')
        .map((seen) => seen.path);
      assert.deepEqual(posts, [`/api/jobs/${running.id}/cancel`, `/api/jobs/${waiting.id}/cancel`]);
      for (const n of [1, 2]) assert.equal((await failed.next(n, 3000)).payload.status, 'cancelled');
      const detail = await (await fetch(`${sandbox.url}/api/jobs/${running.id}`)).json();
      assert.equal(detail.status, 'cancelled', 'its word for an interrupted job since 0.9');
    });

    it('ComfyUI 0.26 and later: a cancel of a job id that is a prototype word answers for it in msg.payload', async () => {
      const { connection, queued } = await loadFlow({ generation: { serverVersion: '0.33.0' } });
      const waiting = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      helper.getNode('queue').receive({ prompt_id: ['__proto__', waiting.id] });
      const out = await queued.next(1, 5000);
      assert.deepEqual(Object.keys(out.payload), ['__proto__', waiting.id]);
      assert.equal(Object.getPrototypeOf(out.payload), Object.prototype);
      assert.deepEqual(out.not_queued, ['__proto__']);
    });

    it('older servers are never sent the cancel route', async () => {
      const { connection, queued } = await loadFlow();
      const waiting = sandbox.jobs.submit(workflow(HANG), connection.clientId);
      helper.getNode('queue').receive({ prompt_id: waiting.id });
      await queued.next(1, 5000);
      assert.equal(sandbox.counters.matching(/\/cancel$/).length, 0);
      assert.equal(sandbox.counters.matching('/api/queue', 'POST').length, 1);
    });
  });

  describe('job ids', () => {
    before(async () => helper.startServer());
    after(async () => helper.stopServer());
    afterEach(async () => helper.unload());

    it('the submit node sends its own lower-case UUID as prompt_id, which ComfyUI 0.25 and later require', async () => {
      const sandbox = await startSandbox({ generation: { serverVersion: '0.33.0' } });
      open.push(sandbox);
      const refused = await fetch(`${sandbox.url}/api/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: workflow(), prompt_id: 'my-job-1' }),
      });
      assert.equal(refused.status, 400);
      assert.equal((await refused.json()).error.type, 'invalid_prompt_id');
      const flow = [
        { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url, partnerKeyField: 'x' },
        { id: 'submit', type: 'graph-gen-submit', server: 'cfg', wires: [['out']] },
        { id: 'out', type: 'helper' },
      ];
      await helper.load([configNode, submitNode], flow, { cfg: {} });
      const out = collect('out');
      helper.getNode('submit').receive({ payload: textToImage() });
      const msg = await out.next(1, 8000);
      assert.match(msg.prompt_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.ok(sandbox.jobs.jobs.has(msg.prompt_id));
    });
  });

  describe('closing', () => {
    before(async () => helper.startServer());
    after(async () => helper.stopServer());

    it('a redeploy leaves no connection open after 1 s, though the server holds a shared read and a status check', async () => {
      const sandbox = await startSandbox({ events: { autoRun: false } });
      open.push(sandbox);
      const flow = awaitFlow(sandbox, {}, [
        { id: 'submit', z: 'f1', type: 'graph-gen-submit', server: 'cfg', check: true, wires: [[]] },
      ]);
      await helper.load([configNode, awaitNode, submitNode, catchNode], flow, { cfg: {} });
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      // Every read is answered 10 s late: the node definitions (one read the submit nodes share, which a
      // node's close does not stop) and the status checks.
      sandbox.faults.add({ method: 'GET', path: /^\/api\//, holdMs: 10_000, times: Infinity });
      helper.getNode('submit').receive({ payload: textToImage() });
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => sandbox.counters.count('/api/object_info') === 1, 'the definitions read');
      await until(
        () => sandbox.counters.requests.some((seen) => seen.path.startsWith('/api/jobs')),
        'a check',
      );
      await sleep(100);
      assert.ok(sandbox.server.openConnections > 0);
      const closed = Date.now();
      await helper.unload();
      await until(() => sandbox.server.openConnections === 0, 'every connection to close', 1000);
      assert.ok(Date.now() - closed < 1000);
    });
  });
});
