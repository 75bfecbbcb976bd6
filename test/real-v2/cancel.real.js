'use strict';
// Cancel against the real Comfy API v2 server through a real Node-RED flow (the queue node's cancel): a waiting
// job (ComfyUI drops it and keeps no record, so the proxy calls it `expired`, never `canceled`) and the running
// job (the proxy answers `canceling`; the interrupt lands at ComfyUI's next node boundary, then `canceled`).
// Each await ends `cancelled` on output 2. The slow graph: a chain of ImageBlur on a 256x256 image, CPU only.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { v2 } = require('./support/v2');
const { jobOf, jobReaches, settle, prefix, quickJob, blurJob, sleep } = require('./support/api');
const { loadFlow, outputOf, submitThrough } = require('./support/flow');

describe('real Comfy API v2: cancel', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('a waiting job: the await ends cancelled though the server says expired, and the job never runs', async () => {
    const out = await loadFlow(v2.url);
    const running = await submitThrough(out, blurJob(prefix('ahead'), { blurs: 3 }));
    const waiting = await submitThrough(out, quickJob(prefix('waiting')));
    await jobReaches(running.id, 'running', 30_000);
    assert.equal((await jobOf(waiting.id)).status, 'queued');
    // The queue node's list shows both where the server has them.
    const listed = await outputOf(out, 'queue', 'queued', { action: 'list' }, 15_000);
    assert.ok(listed.running.includes(running.id), JSON.stringify(listed.payload));
    assert.ok(listed.pending.includes(waiting.id), JSON.stringify(listed.payload));

    const sentAt = Date.now();
    const msg = await outputOf(out, 'queue', 'queued', { action: 'cancel', prompt_id: waiting.id }, 15_000);
    assert.deepEqual(msg.removed, [waiting.id], JSON.stringify(msg.payload));
    assert.deepEqual(msg.interrupted, []);
    assert.equal(msg.payload[waiting.id].status, 'expired', "the server's word for a dropped waiting job");

    const ended = await out.failed.of(waiting.id, 15_000);
    assert.equal(ended.payload.status, 'cancelled', JSON.stringify(ended.payload));
    assert.equal((await jobOf(waiting.id)).status, 'expired', 'and it stays so');
    // The job ahead is untouched and completes; the cancelled one never ran (no output, no run).
    const ahead = await out.done.of(running.id, 60_000);
    assert.equal(ahead.payload.status, 'completed');
    await sleep(500);
    const after = await jobOf(waiting.id);
    assert.equal(after.status, 'expired');
    assert.deepEqual(after.outputs, []);
    assert.equal(out.done.received.filter((m) => m.prompt_id === waiting.id).length, 0);
    assert.equal(out.failed.received.filter((m) => m.prompt_id === waiting.id).length, 1, 'ended once');
    process.stdout.write(
      `      (waiting job: its await ended ${ended.receivedAt - sentAt} ms after the cancel was sent)\n`,
    );
  });

  it('the running job: the await ends cancelled once the server says canceled', async () => {
    const out = await loadFlow(v2.url, { await: { progress: true } });
    const running = await submitThrough(out, blurJob(prefix('running'), { blurs: 8 }));
    await jobReaches(running.id, 'running', 30_000);
    await out.progress.find((m) => m.prompt_id === running.id, 'a progress msg of the running job', 15_000);

    const sentAt = Date.now();
    const msg = await outputOf(out, 'queue', 'queued', { prompt_id: running.id }, 15_000);
    assert.deepEqual(msg.interrupted, [running.id], JSON.stringify(msg.payload));
    assert.deepEqual(msg.removed, []);
    assert.equal(msg.payload[running.id].status, 'canceling', "the server's first word");

    const ended = await out.failed.of(running.id, 30_000);
    assert.equal(ended.payload.status, 'cancelled', JSON.stringify(ended.payload));
    const job = await jobOf(running.id);
    assert.equal(job.status, 'canceled');
    assert.deepEqual(job.outputs, []);
    await sleep(500);
    assert.equal(out.done.received.length, 0);
    assert.equal(out.failed.received.filter((m) => m.prompt_id === running.id).length, 1, 'ended once');
    process.stdout.write(
      `      (running job: its await ended ${ended.receivedAt - sentAt} ms after the cancel was sent; ` +
        `the job ran ${sentAt - running.sentAt} ms before)\n`,
    );
  });
});
