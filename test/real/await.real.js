'use strict';
// Await job against a real ComfyUI: jobs that ended before anyone awaited them, and a job that fails.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const {
  api,
  submitDirect,
  jobOf,
  jobReaches,
  settle,
  prefix,
  quickJob,
  longJob,
} = require('./support/server');
const { loadFlow, send, submitThrough } = require('./support/flow');

describe('real ComfyUI: await job', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('resolves a job that completed before it was awaited, with its outputs and files', async () => {
    const name = prefix('before');
    const id = await submitDirect(quickJob(name));
    const job = await jobReaches(id, 'completed', 30_000);
    const out = await loadFlow(comfy.url);
    send('await', { prompt_id: id, topic: 'late' });
    const msg = await out.done.of(id, 15_000);
    assert.equal(msg.topic, 'late');
    assert.equal(msg.payload.status, 'completed');
    assert.equal(msg.payload.prompt_id, id);
    assert.deepEqual(msg.payload.outputs, job.outputs, 'the outputs the server holds for the job');
    assert.equal(msg.payload.files.length, 1);
    assert.equal(msg.payload.files[0].type, 'output');
    assert.ok(msg.payload.files[0].filename.startsWith(name), msg.payload.files[0].filename);
    assert.equal(msg.payload.outputs_incomplete, undefined);
    assert.equal(out.failed.received.length, 0);
  });

  it("skips the server's progress_state frames unread while no await wants progress, and reads them when one does", async () => {
    // Off: the result is whole, and the frames that only feed progress output were not parsed.
    let out = await loadFlow(comfy.url);
    const sockets = () => helper.getNode('cfg').connection.sockets();
    const quiet = await submitThrough(out, quickJob(prefix('no-progress')));
    const msg = await out.done.of(quiet, 30_000);
    assert.equal(msg.payload.status, 'completed');
    assert.equal(msg.payload.files.length, 1);
    // The server sends two progress_state frames per node (running, finished).
    assert.ok(sockets().stats.progressFramesSkipped >= 2, `${sockets().stats.progressFramesSkipped} skipped`);
    assert.equal(sockets().stats.framesDropped, 0);
    await helper.unload();

    // On: the same frames arrive as progress msgs.
    out = await loadFlow(comfy.url, { await: { progress: true } });
    const watched = await submitThrough(out, quickJob(prefix('progress')));
    await out.done.of(watched, 30_000);
    const topics = out.progress.received.filter((m) => m.prompt_id === watched).map((m) => m.topic);
    assert.ok(topics.includes('progress_state'), topics.join(' '));
    assert.equal(sockets().stats.progressFramesSkipped, 0);
  });

  it('reads a job interrupted while nobody awaited it as cancelled (v0.8 says failed, v0.9 and later cancelled)', async () => {
    const id = await submitDirect(longJob(prefix('interrupted')));
    await jobReaches(id, 'in_progress', 60_000);
    await api('/api/interrupt', { method: 'POST', body: { prompt_id: id } });
    const job = await jobReaches(id, ['failed', 'completed', 'cancelled'], 30_000);
    assert.equal(job.status, comfy.atLeast('0.9') ? 'cancelled' : 'failed', 'the server’s word for it');
    const out = await loadFlow(comfy.url);
    send('await', { prompt_id: id });
    const msg = await out.failed.of(id, 15_000);
    assert.equal(msg.payload.status, 'cancelled', JSON.stringify(msg.payload));
    assert.equal(msg.payload.prompt_id, id);
    assert.equal(out.done.received.length, 0);
  });

  it('sends an execution error on output 2 as failed, with the exception the server reported', async () => {
    const workflow = quickJob('../../x');
    const out = await loadFlow(comfy.url);
    const id = await submitThrough(out, workflow);
    const msg = await out.failed.of(id, 30_000);
    assert.equal(msg.payload.status, 'failed');
    const job = await jobOf(id);
    assert.equal(job.status, 'failed');
    assert.equal(msg.payload.error.exception_type, job.execution_error.exception_type);
    assert.equal(msg.payload.error.exception_message, job.execution_error.exception_message);
    assert.match(msg.payload.error.exception_message, /outside the output folder/);
    assert.equal(out.done.received.length, 0);
  });
});
