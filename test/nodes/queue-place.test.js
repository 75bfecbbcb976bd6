'use strict';
// A waiting job's place in the queue and an estimate of its wait: await-job's status ("queued: 2 ahead") and its
// progress output (`topic: "queue"`, `payload: {ahead, eta_s}` whenever the place changes).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const {
  KEY,
  workflow,
  sleep,
  until,
  awaitFlow,
  collect,
  statuses,
  withFastSockets,
} = require('../support/sockets');
const { coreNode } = require('../support/node-red');

const configNode = require('../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../dist/nodes/graph-gen-await-job.js');
const NODES = [configNode, awaitNode, coreNode('common/25-catch.js')];
const HANG = { 9: { class_type: 'SandboxHang', inputs: {} } };

describe("a waiting job's place in the queue", () => {
  const open = withFastSockets();
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => helper.unload());

  /** A running job and two waiting behind it, of another client; the last one awaited with progress on. */
  async function queueOfThree(sandboxOptions, credentials = {}) {
    const sandbox = await startSandbox({ events: { stepDelayMs: 1 }, ...sandboxOptions });
    open.push(sandbox);
    await helper.load(NODES, awaitFlow(sandbox, { progress: true }), { cfg: credentials });
    // Jobs that ran before: the server's run times of them make the estimate.
    const earlier = [1, 2].map(() => sandbox.jobs.submit(workflow(), 'another-client'));
    await until(() => earlier.every((job) => job.state === 'completed'), 'the earlier jobs to end');
    const running = sandbox.jobs.submit(workflow(HANG), 'another-client');
    await until(() => running.state === 'in_progress', 'the first job to run');
    const first = sandbox.jobs.submit(workflow(), 'another-client');
    const second = sandbox.jobs.submit(workflow(), 'another-client');
    const progress = collect('progress');
    const shown = statuses('await');
    helper.getNode('await').receive({ prompt_id: second.id });
    return { sandbox, running, first, second, progress, shown };
  }

  const places = (progress) =>
    progress.received.filter((msg) => msg.topic === 'queue').map((msg) => msg.payload);

  it('self-hosted: shows how many jobs are ahead, and sends {ahead, eta_s} when the place changes', async () => {
    const { sandbox, running, first, second, progress, shown } = await queueOfThree({
      events: { stepDelayMs: 1, concurrency: 1 },
    });
    await until(() => places(progress).length === 1, 'the first place');
    const [place] = places(progress);
    assert.equal(place.ahead, 2, 'the running job and the one waiting before it');
    assert.equal(typeof place.eta_s, 'number', JSON.stringify(place));
    await until(() => shown.some((status) => status.text === 'queued: 2 ahead'), 'the status');
    // The job before it leaves the queue: one ahead now.
    sandbox.jobs.remove(first.id);
    sandbox.events.broadcast('status', { status: { exec_info: { queue_remaining: 2 } } });
    await until(() => places(progress).length === 2, 'the next place');
    assert.equal(places(progress)[1].ahead, 1);
    await until(() => shown.some((status) => status.text === 'queued: 1 ahead'), 'the status');
    sandbox.jobs.interrupt(running.id);
    assert.equal((await collect('done').next(1, 5000)).prompt_id, second.id);
    assert.equal(places(progress).length, 2, 'no place once it runs');
  });

  it('a job put before it (a submit to the front) moves it back: the queue grew, and its place is read again', async () => {
    const { sandbox, running, first, second, progress, shown } = await queueOfThree({
      events: { stepDelayMs: 1, concurrency: 1 },
    });
    await until(() => places(progress).length === 1, 'the first place');
    assert.equal(places(progress)[0].ahead, 2);
    // Past the reads the await made on its own: the sweep of its first status frame (it knew no count before it)
    // and the poll of a job awaited before the socket opened (2 s).
    await sleep(2500);
    // As ComfyUI's `front: true` does: a number lower than every waiting job's. The count only grows.
    const before = sandbox.jobs.submit(workflow(), 'another-client');
    before.number = first.number - 1;
    await until(() => places(progress).length === 2, 'the next place', 5000);
    assert.equal(places(progress)[1].ahead, 3);
    await until(() => shown.some((status) => status.text === 'queued: 3 ahead'), 'the status');
    sandbox.jobs.interrupt(running.id);
    assert.equal((await collect('done').next(1, 10000)).prompt_id, second.id);
  });

  it('a server that reports no run times (a cloud service without the list): the place without an estimate', async () => {
    const { progress } = await queueOfThree(
      { generationApiKey: KEY, events: { stepDelayMs: 1, concurrency: 1 } },
      { apiKey: KEY },
    );
    await until(() => places(progress).length === 1, 'the first place');
    assert.deepEqual(places(progress)[0], { ahead: 2 });
  });
});
