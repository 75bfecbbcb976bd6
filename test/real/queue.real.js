'use strict';
// The queue node against a real ComfyUI: list, cancel a pending job, cancel the running job, and an interrupt
// aimed at a job that is not running. Each test keeps one long job running (a chain of blurs) and, where it
// needs one, a second job waiting behind it.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { jobOf, jobReaches, settle, prefix, quickJob, longJob, until } = require('./support/server');
const { loadFlow, outputOf, submitThrough } = require('./support/flow');
const { GenerationConnection } = require('../../dist/generation/connection');

/** Submits a long job and a quick one behind it; resolves once the long one runs. */
async function runningAndPending(out, name) {
  const running = await submitThrough(out, longJob(`${name}-running`));
  const pending = await submitThrough(out, quickJob(`${name}-pending`));
  await jobReaches(running, 'in_progress', 60_000);
  assert.equal((await jobOf(pending)).status, 'pending', 'the second job waits behind the first');
  return { running, pending };
}

describe('real ComfyUI: queue', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('list: msg.running holds the running job and msg.pending the one waiting', async () => {
    const out = await loadFlow(comfy.url);
    const { running, pending } = await runningAndPending(out, prefix('list'));
    const msg = await outputOf(out, 'queue', 'queued', { action: 'list', topic: 'q' });
    assert.ok(msg.running.includes(running), JSON.stringify(msg.running));
    assert.ok(msg.pending.includes(pending), JSON.stringify(msg.pending));
    assert.ok(Array.isArray(msg.payload.queue_running));
    assert.equal(msg.topic, 'q');
  });

  it('status checks read the server’s list of active jobs (GET /api/jobs), not its queue with every workflow', async () => {
    const out = await loadFlow(comfy.url);
    const { running, pending } = await runningAndPending(out, prefix('active-list'));
    // What the server answers: the whole list (no page), the two statuses, no workflow in an entry.
    const listed = await fetch(`${comfy.url}/api/jobs?status=pending,in_progress`).then((answer) =>
      answer.json(),
    );
    assert.equal(listed.pagination.has_more, false, JSON.stringify(listed.pagination));
    const statusOf = (id) => listed.jobs.find((job) => job.id === id)?.status;
    assert.equal(statusOf(running), 'in_progress');
    assert.equal(statusOf(pending), 'pending');
    assert.equal(JSON.stringify(listed).includes('ImageBlur'), false, 'no workflow in the list');
    // What a config node's connection makes of it: the list is used, and stays in use.
    const connection = new GenerationConnection({ baseUrl: comfy.url });
    try {
      const ids = await connection.queue();
      assert.equal(ids.kind, 'read', JSON.stringify(ids));
      assert.ok(ids.running.has(running), JSON.stringify([...ids.running]));
      assert.ok(ids.pending.has(pending), JSON.stringify([...ids.pending]));
      assert.equal(connection.dialect.lookup.absentRoutes.includes('jobs_list'), false);
    } finally {
      await connection.close();
    }
  });

  it('cancel of a pending job: its await ends cancelled at once; the msg says removed', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '90' } });
    const { running, pending } = await runningAndPending(out, prefix('cancel-pending'));
    const msg = await outputOf(out, 'queue', 'queued', { action: 'cancel', prompt_id: pending });
    const answered = Date.now();
    for (const list of ['removed', 'interrupted', 'not_queued']) {
      assert.ok(Array.isArray(msg[list]), `msg.${list} is an array: ${JSON.stringify(msg[list])}`);
    }
    assert.ok(msg.removed.includes(pending), `msg.removed ${JSON.stringify(msg.removed)}`);
    assert.equal(msg.interrupted.includes(pending), false);
    assert.equal(msg.not_queued.includes(pending), false);
    const ended = await out.failed.of(pending, 3_000);
    assert.ok(Date.now() - answered <= 3_000, `ended ${Date.now() - answered} ms after the cancel`);
    assert.equal(ended.payload.status, 'cancelled', JSON.stringify(ended.payload));
    assert.equal(
      out.done.received.some((m) => m.prompt_id === pending),
      false,
    );
    assert.equal((await jobOf(running)).status, 'in_progress', 'the running job was left alone');
  });

  it('cancel of the running job interrupts it: its await ends cancelled and the job does not complete', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '90' } });
    const running = await submitThrough(out, longJob(prefix('cancel-running'), { blurs: 6 }));
    await jobReaches(running, 'in_progress', 60_000);
    const msg = await outputOf(out, 'queue', 'queued', { action: 'cancel', prompt_id: [running] });
    assert.ok(Array.isArray(msg.interrupted), `msg.interrupted ${JSON.stringify(msg.interrupted)}`);
    assert.ok(msg.interrupted.includes(running), `msg.interrupted ${JSON.stringify(msg.interrupted)}`);
    const ended = await until(
      () =>
        out.failed.received.find((m) => m.prompt_id === running) ??
        out.done.received.find((m) => m.prompt_id === running),
      `the await of job ${running} to end`,
      20_000,
    );
    assert.equal(ended.payload.status, 'cancelled', JSON.stringify(ended.payload));
    const job = await jobReaches(running, ['failed', 'completed', 'cancelled'], 20_000);
    assert.notEqual(job.status, 'completed');
  });

  it('interrupt with the id of a job that is not running interrupts nothing', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '90' } });
    const { running, pending } = await runningAndPending(out, prefix('interrupt-other'));
    await outputOf(out, 'queue', 'queued', { action: 'interrupt', prompt_id: pending });
    const first = await until(
      () =>
        out.done.received.find((m) => m.prompt_id === running) ??
        out.failed.received.find((m) => m.prompt_id === running),
      `the await of job ${running} to end`,
      60_000,
    );
    assert.equal(first.payload.status, 'completed', JSON.stringify(first.payload));
    assert.ok(first.payload.files.length > 0);
    const second = await out.done.of(pending, 30_000);
    assert.equal(second.payload.status, 'completed');
  });
});
