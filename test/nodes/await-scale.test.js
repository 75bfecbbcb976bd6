'use strict';
// Many jobs on one socket, a socket that keeps dropping, and redeploys that must leave nothing behind.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const configNode = require('../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../dist/nodes/graph-gen-await-job.js');
const { startSandbox } = require('../../dist/sandbox');
const { SocketManager } = require('../../dist/generation/jobs/socket-manager');
const { KEY, workflow, until, fileNames, coreNode, awaitFlow, collect } = require('../support/sockets');

const catchNode = coreNode('common/25-catch.js');

describe('graph-gen-await-job at scale', () => {
  let sandbox;
  let savedTimings;

  before(async () => {
    savedTimings = SocketManager.defaultTimings;
    SocketManager.defaultTimings = { ...savedTimings, backoffBaseMs: 20, backoffMaxMs: 500, graceMs: 50 };
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: KEY, events: { stepDelayMs: 2 } });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
    SocketManager.defaultTimings = savedTimings;
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
  });
  afterEach(async () => {
    assert.equal(JSON.stringify(helper.log().args).includes(KEY), false, 'the key appears in a log');
    await helper.unload();
    await until(() => sandbox.counters.socketsOpen === 0, 'the socket to close');
  });

  async function load(awaitProps) {
    await helper.load([configNode, awaitNode, catchNode], awaitFlow(sandbox, awaitProps), {
      cfg: { apiKey: KEY },
    });
    return {
      node: helper.getNode('await'),
      connection: helper.getNode('cfg').connection,
      done: collect('done'),
      failed: collect('failed'),
      progress: collect('progress'),
    };
  }

  it('gives 200 interleaved jobs on one socket exactly their own events and outputs', async () => {
    const { node, connection, done, failed, progress } = await load({ progress: true, previewRate: 0 });
    assert.equal(await connection.sockets().ready(5000), true);
    const jobs = [];
    for (let i = 0; i < 200; i++) {
      jobs.push(sandbox.jobs.submit(workflow({}, { prefix: `job${i}` }), connection.clientId));
      node.receive({ prompt_id: jobs[i].id, index: i });
    }
    await done.next(200, 30000);
    assert.equal(failed.received.length, 0);
    const byId = new Map(jobs.map((job, index) => [job.id, { job, index }]));
    for (const msg of done.received) {
      const { job, index } = byId.get(msg.payload.prompt_id);
      assert.equal(msg.index, index, 'the result goes with its own msg');
      assert.deepEqual(msg.payload.outputs, job.outputs);
      assert.deepEqual(
        msg.payload.files.map((f) => f.filename),
        [`job${index}_${job.number}_3_0.png`],
      );
    }
    const perJob = new Map();
    for (const msg of progress.received) {
      assert.equal(msg.prompt_id, (msg.payload && msg.payload.prompt_id) || msg.prompt_id);
      const { index } = byId.get(msg.prompt_id);
      assert.equal(msg.index, index, 'progress goes with its own msg');
      perJob.set(msg.prompt_id, [...(perJob.get(msg.prompt_id) ?? []), msg.topic]);
    }
    for (const topics of perJob.values()) {
      assert.equal(topics.filter((t) => t === 'executed').length, 1);
      assert.equal(topics.filter((t) => t === 'preview').length, 3);
      assert.equal(topics.filter((t) => t === 'execution_start').length, 1);
    }
    const order = progress.received.map((m) => m.prompt_id);
    assert.ok(order.lastIndexOf(jobs[0].id) > order.indexOf(jobs[1].id), 'the jobs really interleaved');
    assert.equal(sandbox.counters.socketsOpened, 1);
    assert.equal(connection.sockets().stats.socketsOpened, 1);
  });

  it('completes every job with all outputs, none twice, when the socket drops three times mid-job', async () => {
    const { node, connection, done, failed } = await load();
    assert.equal(await connection.sockets().ready(5000), true);
    sandbox.events.options.stepDelayMs = 25;
    const jobs = [];
    for (let i = 0; i < 20; i++) {
      jobs.push(
        sandbox.jobs.submit(
          workflow(
            { 4: { class_type: 'SaveImage', inputs: { filename_prefix: `b${i}`, sandbox_batches: 2 } } },
            { steps: 3, prefix: `a${i}`, save: { sandbox_batches: 2 } },
          ),
          connection.clientId,
        ),
      );
      node.receive({ prompt_id: jobs[i].id });
    }
    try {
      for (let drop = 1; drop <= 3; drop++) {
        sandbox.events.dropAfterFrames(40);
        await until(
          () => connection.sockets().stats.socketsOpened === drop + 1 && connection.sockets().isOpen,
          `reconnect ${drop}`,
          10000,
        );
        assert.ok(
          jobs.some((job) => job.state === 'in_progress'),
          `jobs still running after drop ${drop}`,
        );
      }
      await done.next(20, 20000);
    } finally {
      sandbox.events.options.stepDelayMs = 2;
      sandbox.events.dropAfterFrames(Infinity);
    }
    assert.equal(failed.received.length, 0, 'a dropped socket never fails a job');
    assert.ok(jobs.some((job) => job.state === 'completed'));
    for (const msg of done.received) {
      const job = jobs.find((j) => j.id === msg.payload.prompt_id);
      assert.deepEqual(msg.payload.outputs, job.outputs, 'all outputs');
      const names = msg.payload.files.map((f) => f.filename);
      assert.equal(names.length, 4);
      assert.equal(new Set(names).size, names.length, 'no file twice');
      assert.deepEqual([...names].sort(), fileNames(job.outputs));
    }
    assert.equal(sandbox.counters.socketsOpened, 4);
    assert.ok(sandbox.counters.count(/^\/api\/jobs\//) > 0, 'missed outputs were read over REST');
  });

  it('leaves no socket, timer or handle behind after 100 redeploys', async function () {
    this.timeout(60000);
    const activeHandles = () => process.getActiveResourcesInfo().filter((type) => type !== 'TTYWrap').length;
    const cycle = async (i) => {
      const { node, done } = await load({ timeout: '30' });
      const job = sandbox.jobs.submit(
        workflow({}, { prefix: `r${i}` }),
        helper.getNode('cfg').connection.clientId,
      );
      node.receive({ prompt_id: job.id });
      await done.next(1, 10000);
      await helper.unload();
    };
    await cycle(-1);
    await until(() => sandbox.counters.socketsOpen === 0, 'the warm-up socket to close');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = activeHandles();
    for (let i = 0; i < 100; i++) await cycle(i);
    await until(() => sandbox.counters.socketsOpen === 0, 'every socket to close');
    await until(() => activeHandles() <= before + 2, `active handles back to ${before}`, 5000).catch(
      () => undefined,
    );
    const after = activeHandles();
    assert.ok(
      after <= before + 2,
      `active handles grew from ${before} to ${after}: ${process.getActiveResourcesInfo().join(', ')}`,
    );
    assert.equal(sandbox.counters.socketsOpened, 101);
    assert.equal(sandbox.events.sockets, 0);
    await load();
  });
});
