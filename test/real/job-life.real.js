'use strict';
// A job's life against a real ComfyUI, on either kit (v0.8.0 and v0.33.0): what the server is and the routes
// picked by it (the cancel route from 0.26), `cancelled` against `failed`, job ids minted by the submit node and
// a submit whose answer was lost, type-4 previews routed to their own job, and a socket the server stopped
// sending to (Comfy-Org/ComfyUI#16010).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const WebSocket = require('ws');
const { comfy } = require('./support/comfy');
const { api, jobOf, jobReaches, settle, prefix, quickJob, longJob, until } = require('./support/server');
const { loadFlow, submitThrough, outputOf, endOf } = require('./support/flow');
const { startTcpProxy } = require('../support/tcp-proxy');
const { GenerationConnection } = require('../../dist/generation/connection');

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** EmptyImage -> PreviewProbe (`steps` previews, one every `delay` s) -> SaveImage. */
function previewJob(filenamePrefix, steps = 3, delay = 0.3) {
  return {
    1: {
      class_type: 'EmptyImage',
      inputs: { width: 64, height: 64, batch_size: 1, color: Math.floor(Math.random() * 16_777_216) },
    },
    2: { class_type: 'PreviewProbe', inputs: { image: ['1', 0], steps, delay } },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: filenamePrefix, images: ['2', 0] } },
  };
}

describe(`real ComfyUI: a job's life`, function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('reads what the server is from /api/system_stats, and picks the cancel route by it (0.26 and later)', async () => {
    const connection = new GenerationConnection({ baseUrl: comfy.url, partnerKeyField: 'x' });
    try {
      assert.equal((await connection.dialect.server.profile()).comfyuiVersion, comfy.version);
      assert.equal(await connection.dialect.server.hasCancelRoute(), comfy.atLeast('0.26'));
      // What the route answers where it is missing: the sign a fallback reads.
      const probe = await api(`/api/jobs/${crypto.randomUUID()}/cancel`, { method: 'POST' });
      if (comfy.atLeast('0.26')) assert.deepEqual(probe, { status: 200, body: { cancelled: false } });
      else assert.equal(probe.status, 405);
    } finally {
      await connection.close();
    }
  });

  it('cancels a waiting and the running job: each await ends cancelled, the waiting job never runs', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '120' }, queue: { action: 'cancel' } });
    const running = await submitThrough(out, longJob(prefix('life-running'), { blurs: 6 }));
    const pending = await submitThrough(out, quickJob(prefix('life-pending')));
    await jobReaches(running, 'in_progress', 60_000);
    assert.equal((await jobOf(pending)).status, 'pending');
    const msg = await outputOf(out, 'queue', 'queued', { prompt_id: [running, pending] }, 30_000);
    assert.deepEqual(msg.removed, [pending]);
    assert.deepEqual(msg.interrupted, [running]);
    if (comfy.atLeast('0.26')) {
      // One call a job: the route's own answers.
      assert.deepEqual(msg.payload, { [running]: { cancelled: true }, [pending]: { cancelled: true } });
    } else {
      // The queue's delete (an empty answer) and the targeted interrupt.
      assert.equal(msg.payload, undefined);
    }
    for (const id of [running, pending]) assert.equal((await endOf(out, id)).payload.status, 'cancelled');
    assert.equal(await jobOf(pending), undefined, 'the waiting job is gone, never run');
    const stopped = await jobReaches(running, ['failed', 'cancelled', 'completed'], 30_000);
    // From 0.9 the server's own word for it is `cancelled`; v0.8 says `failed` (with execution_interrupted).
    assert.equal(stopped.status, comfy.atLeast('0.9') ? 'cancelled' : 'failed');
  });

  it('a waiting job another program deletes ends JobLost, not after the quiet check: its only sign is a lower count', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '120' } });
    const running = await submitThrough(out, longJob(prefix('life-ahead'), { blurs: 6 }));
    const pending = await submitThrough(out, quickJob(prefix('life-deleted')));
    await jobReaches(running, 'in_progress', 60_000);
    // More submits after it: counts that only grow, which ask for no read of the queue.
    const later = [
      await submitThrough(out, quickJob(prefix('life-later'))),
      await submitThrough(out, quickJob(prefix('life-later'))),
    ];
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const deleted = Date.now();
    assert.equal((await api('/api/queue', { method: 'POST', body: { delete: [pending] } })).status, 200);
    const msg = await endOf(out, pending, 20_000);
    assert.equal(msg.payload.status, 'failed', JSON.stringify(msg.payload));
    assert.equal(msg.payload.error?.exception_type, 'JobLost', JSON.stringify(msg.payload));
    // A sweep 0.3 s after the fall finds it gone, and two answers 2 s apart confirm it; a job no read has placed
    // yet (the queue's growth asks for none) is not counted lost before 10 s after its await. Not the one-minute
    // quiet check.
    assert.ok(Date.now() - deleted < 16_000, `ended ${Date.now() - deleted} ms after the delete`);
    for (const id of later) assert.notEqual(await jobOf(id), undefined, 'the jobs after it are still there');
  });

  it('a job that ended before its cancel is not called cancelled: msg.not_queued names it, its await completes', async () => {
    const out = await loadFlow(comfy.url, { queue: { action: 'cancel' } });
    const id = await submitThrough(out, quickJob(prefix('life-ended')));
    await jobReaches(id, 'completed', 60_000);
    const msg = await outputOf(out, 'queue', 'queued', { prompt_id: id }, 30_000);
    assert.deepEqual(msg.not_queued, [id]);
    assert.deepEqual([...msg.removed, ...msg.interrupted], []);
    assert.equal((await endOf(out, id)).payload.status, 'completed');
  });

  it('mints its own lower-case UUID job id; a submit whose answer was lost is asked for, not sent again: it runs once', async () => {
    const { hostname, port } = new URL(comfy.url);
    const proxy = await startTcpProxy({ host: hostname, port: Number(port) });
    try {
      const out = await loadFlow(proxy.url);
      const first = await submitThrough(out, quickJob(prefix('life-uuid')));
      assert.match(first, UUID);
      assert.equal((await jobOf(first))?.id, first, 'the server knows the job by the id the node chose');
      proxy.loseAnswerTo(/^POST \/api\/prompt /m);
      const lost = await outputOf(
        out,
        'submit',
        'submitted',
        { payload: quickJob(prefix('life-lost')) },
        30_000,
      );
      assert.equal(proxy.counters.answersLost, 1, 'the submit’s answer was lost on the way');
      assert.match(lost.prompt_id, UUID);
      await jobReaches(lost.prompt_id, 'completed', 60_000);
      // Both servers take a repeated prompt_id as a second run: the list would hold it twice.
      const { body } = await api('/api/jobs?status=completed');
      assert.equal(body.jobs.filter((job) => job.id === lost.prompt_id).length, 1, 'it ran once');
      assert.equal((await endOf(out, lost.prompt_id)).payload.status, 'completed');
    } finally {
      await proxy.close();
    }
  });

  it('routes type-4 previews by their prompt_id: two jobs, each await gets its own previews only', async () => {
    const out = await loadFlow(comfy.url, { await: { progress: true, previewRate: 0 } });
    const first = await submitThrough(out, previewJob(prefix('life-preview-a')));
    const second = await submitThrough(out, previewJob(prefix('life-preview-b')));
    for (const id of [first, second])
      assert.equal((await endOf(out, id, 60_000)).payload.status, 'completed');
    for (const id of [first, second]) {
      const previews = out.progress.received.filter((msg) => msg.topic === 'preview' && msg.prompt_id === id);
      assert.equal(previews.length, 3, `previews of ${id}`);
      for (const preview of previews) {
        assert.equal(preview.metadata?.prompt_id, id, 'a type-4 preview, naming its own job');
        assert.ok(Buffer.isBuffer(preview.payload) && preview.payload.length > 100);
        assert.equal(preview.image_type, 'jpeg');
      }
    }
  });

  it('notices a socket the server stopped sending to: the job’s end arrives within 20 s, and the socket is opened again', async () => {
    const out = await loadFlow(comfy.url, { await: { timeout: '120' } });
    const connection = helper.getNode('cfg').connection;
    const id = await submitThrough(out, longJob(prefix('life-silent'), { blurs: 5 }));
    await jobReaches(id, 'in_progress', 60_000);
    const opened = connection.sockets().stats.socketsOpened;
    // Another socket of the same clientId takes ours out of the server's table, and its close forgets it:
    // ours stays open and hears nothing more (Comfy-Org/ComfyUI#16010).
    const intruder = new WebSocket(`${comfy.url.replace(/^http/, 'ws')}/ws?clientId=${connection.clientId}`);
    await new Promise((resolve, reject) => intruder.once('open', resolve).once('error', reject));
    intruder.close();
    await new Promise((resolve) => intruder.once('close', resolve));
    await jobReaches(id, 'completed', 60_000);
    const ended = Date.now();
    const msg = await endOf(out, id, 25_000);
    const waited = Date.now() - ended;
    assert.equal(msg.payload.status, 'completed');
    assert.ok(msg.payload.files.length >= 1, JSON.stringify(msg.payload));
    assert.ok(waited < 20_000, `the result came ${waited} ms after the job ended`);
    await until(
      () => connection.sockets().stats.socketsOpened > opened,
      'the socket to be opened again',
      5_000,
    );
  });
});
