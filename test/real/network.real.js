'use strict';
// A real ComfyUI behind trouble: the socket cut mid-job, WebSocket upgrades refused by a proxy, the server
// restarted mid-job. REST and the WebSocket both go through test/support/tcp-proxy.js where a test needs it.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { jobOf, jobReaches, settle, prefix, quickJob, longJob, until, sleep } = require('./support/server');
const { loadFlow, submitThrough, endOf } = require('./support/flow');
const { startTcpProxy } = require('../support/tcp-proxy');

describe('real ComfyUI: network trouble', function () {
  let proxy;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  beforeEach(async () => {
    const { hostname, port } = new URL(comfy.url);
    proxy = await startTcpProxy({ host: hostname, port: Number(port) });
  });
  afterEach(async () => {
    await helper.unload();
    await proxy.close();
    await settle();
  });

  it('the socket cut twice mid-job: every awaited job completes with all its outputs', async () => {
    const out = await loadFlow(proxy.url, { await: { progress: true } });
    const name = prefix('cut');
    const ids = [];
    for (const index of [1, 2, 3]) {
      ids.push(await submitThrough(out, longJob(`${name}-${index}`, { blurs: 3, saveEach: true })));
    }
    await jobReaches(ids[0], 'in_progress', 60_000);
    assert.equal(proxy.counters.upgrades, 1, 'one socket went through the proxy');
    // Each cut keeps the way closed for 2 s, longer than between two outputs of a job (about 1.2 s), so the
    // socket misses some of them: a bare reconnect (a random wait under 0.5 s) would often miss nothing.
    const cut = async () => {
      proxy.blockNew(true);
      proxy.cutAll();
      await sleep(2_000);
      proxy.blockNew(false);
    };
    await cut();
    await until(() => proxy.counters.upgrades >= 2, 'the socket to come back after the first cut', 20_000);
    await sleep(300);
    await cut();

    let missed = 0;
    for (const id of ids) {
      const msg = await endOf(out, id, 90_000);
      assert.equal(msg.payload.status, 'completed', JSON.stringify(msg.payload));
      assert.equal(msg.payload.outputs_incomplete, undefined, `job ${id}: outputs_incomplete`);
      const job = await jobOf(id);
      assert.deepEqual(msg.payload.outputs, job.outputs, `job ${id}: every output the server holds`);
      assert.equal(msg.payload.files.length, 3, `job ${id}: all three saved images`);
      const heard = out.progress.received.filter((m) => m.prompt_id === id && m.topic === 'executed');
      missed += 3 - heard.length;
    }
    assert.equal(proxy.counters.cuts, 2);
    assert.ok(missed > 0, 'the cuts made the socket miss outputs (else this test proves nothing)');
  });

  it('WebSocket upgrades refused at a proxy: the await completes the job by polling its status', async () => {
    proxy.refuseUpgrades(true);
    const out = await loadFlow(proxy.url);
    const id = await submitThrough(out, longJob(prefix('no-socket'), { blurs: 1 }));
    const msg = await endOf(out, id, 60_000);
    assert.equal(msg.payload.status, 'completed', JSON.stringify(msg.payload));
    assert.ok(msg.payload.files.length > 0, 'files');
    assert.ok(proxy.counters.upgradesRefused >= 1, 'the socket was tried and refused');
    assert.equal(proxy.counters.upgrades, 0, 'no socket got through');
  });

  if (comfy.restart) {
    it('the server restarted mid-job: the await ends failed with JobLost soon after it answers again', async () => {
      const out = await loadFlow(comfy.url);
      const id = await submitThrough(out, longJob(prefix('restart'), { blurs: 6 }));
      await jobReaches(id, 'in_progress', 60_000);
      await comfy.restart();
      // From the moment the server answers again: 15 s at most.
      const msg = await endOf(out, id, 15_000);
      assert.equal(msg.payload.status, 'failed', JSON.stringify(msg.payload));
      assert.equal(msg.payload.error?.exception_type, 'JobLost', JSON.stringify(msg.payload));

      // The same flow goes on working with the restarted server.
      const next = await submitThrough(out, quickJob(prefix('after-restart')));
      const after = await endOf(out, next, 30_000);
      assert.equal(after.payload.status, 'completed', JSON.stringify(after.payload));
      assert.ok(after.payload.files.length > 0);
    });
  } else {
    process.stdout.write(`  left out: "the server restarted mid-job": ${comfy.noRestartReason}\n`);
  }
});
