'use strict';
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, textToImage, flowWith, load, failureOf, outputOf } = require('../support/generation-nodes');

describe('graph-gen-queue', () => {
  let cloud;
  let selfHosted;

  before(async () => {
    await helper.startServer();
    cloud = await startSandbox({ generationApiKey: API_KEY, events: { autoRun: false } });
    selfHosted = await startSandbox({ events: { autoRun: false } });
  });
  after(async () => {
    await cloud.close();
    await selfHosted.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    for (const sandbox of [cloud, selfHosted]) {
      sandbox.faults.clear();
      sandbox.counters.reset();
      sandbox.jobs.jobs.clear();
      sandbox.generation.options.queueShape = 'array';
    }
  });
  afterEach(async () => helper.unload());

  /** One running and two pending jobs. */
  function seed(sandbox) {
    const [running, first, second] = [1, 2, 3].map(() => sandbox.jobs.submit(textToImage(), 'client'));
    running.state = 'in_progress';
    return { running: running.id, pending: [first.id, second.id] };
  }

  it('list: the body as msg.payload, and msg.running / msg.pending from array elements', async () => {
    const ids = seed(selfHosted);
    await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: selfHosted.url }), {});
    const msg = await outputOf('n', { topic: 'q' });
    assert.equal(msg.payload.queue_running.length, 1);
    assert.equal(msg.payload.queue_running[0][1], ids.running);
    assert.deepEqual(msg.running, [ids.running]);
    assert.deepEqual(msg.pending, ids.pending);
    assert.equal(msg.topic, 'q');
  });

  it('list: msg.running / msg.pending from object elements ({prompt_id})', async () => {
    cloud.generation.options.queueShape = 'object';
    const ids = seed(cloud);
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const msg = await outputOf('n', {});
    assert.equal(msg.payload.queue_pending[0].prompt_id, ids.pending[0]);
    assert.deepEqual(msg.running, [ids.running]);
    assert.deepEqual(msg.pending, ids.pending);
    assert.equal(cloud.counters.matching('/api/queue', 'GET')[0].headers['x-api-key'], API_KEY);
  });

  it('cancel: POSTs {delete: ids} from msg.prompt_id (string or array) and the jobs are cancelled', async () => {
    const ids = seed(cloud);
    await load(flowWith({ type: 'graph-gen-queue', action: 'cancel' }, { baseUrl: cloud.url }));
    const msg = await outputOf('n', { prompt_id: ids.pending[0] });
    assert.deepEqual(msg.payload, { deleted: [ids.pending[0]] });
    assert.equal(cloud.jobs.jobs.get(ids.pending[0]).state, 'cancelled');
    await outputOf('n', { prompt_id: [ids.running, ids.pending[1]] });
    const bodies = cloud.counters.matching('/api/queue', 'POST');
    assert.equal(bodies.length, 2);
    assert.equal(cloud.jobs.jobs.get(ids.running).state, 'cancelled');
    assert.equal(cloud.jobs.jobs.get(ids.pending[1]).state, 'cancelled');
  });

  it('cancel: takes ids from msg.payload, and an empty answer body (self-hosted) gives an undefined payload', async () => {
    const ids = seed(selfHosted);
    await load(flowWith({ type: 'graph-gen-queue', action: 'cancel' }, { baseUrl: selfHosted.url }), {});
    const msg = await outputOf('n', { payload: ids.pending });
    assert.equal(msg.payload, undefined);
    // A self-hosted server takes pending jobs out of its queue and forgets them.
    assert.equal(selfHosted.jobs.jobs.has(ids.pending[0]), false);
    assert.equal(selfHosted.jobs.jobs.has(ids.pending[1]), false);
    assert.deepEqual(msg.removed, ids.pending);
    assert.deepEqual(msg.interrupted, []);
    assert.deepEqual(msg.not_queued, []);
  });

  it('cancel with no ids is refused before sending', async () => {
    await load(flowWith({ type: 'graph-gen-queue', action: 'cancel' }, { baseUrl: cloud.url }));
    for (const msg of [{}, { prompt_id: [] }, { payload: '' }]) {
      const failure = await failureOf('n', msg);
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, /cancel needs the prompt ids/);
    }
    assert.equal(cloud.counters.count('/api/queue', 'POST'), 0);
  });

  it('interrupt: POST /api/interrupt stops the running job; msg.action overrides the setting', async () => {
    const ids = seed(cloud);
    await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: cloud.url }));
    const msg = await outputOf('n', { action: 'interrupt' });
    assert.equal(msg.payload, undefined);
    assert.equal(cloud.counters.count('/api/interrupt', 'POST'), 1);
    assert.equal(cloud.jobs.jobs.get(ids.running).state, 'cancelled');
    const failure = await failureOf('n', { action: 'purge' });
    assert.match(failure.error.message, /msg.action must be list, cancel or interrupt/);
  });

  it('an interrupt that reached the server is never repeated; a list is retried after a 500', async () => {
    await load(flowWith({ type: 'graph-gen-queue', action: 'interrupt' }, { baseUrl: cloud.url }));
    cloud.faults.add({ path: '/api/interrupt', status: 500 });
    const failure = await failureOf('n', {});
    assert.equal(failure.error.code, 'server_error');
    assert.equal(cloud.counters.count('/api/interrupt'), 1);
    cloud.faults.add({ path: '/api/queue', method: 'GET', status: 500 });
    const msg = await outputOf('n', { action: 'list' });
    assert.deepEqual(msg.running, []);
    assert.equal(cloud.counters.count('/api/queue', 'GET'), 2);
  });

  it('self-hosted routes work without the /api prefix too', async () => {
    seed(selfHosted);
    const answer = await fetch(`${selfHosted.url}/queue`);
    assert.equal(answer.status, 200);
    assert.equal((await answer.json()).queue_pending.length, 2);
    const cloudAnswer = await fetch(`${cloud.url}/queue`, { headers: { 'x-api-key': API_KEY } });
    assert.equal(cloudAnswer.status, 404);
  });
});
