'use strict';
// A job's way through a real Node-RED flow against the real Comfy API v2 server (comfy-api-proxy in front of
// ComfyUI v0.33.0): submit, await with live progress, download of the output; a job that fails at run time; a
// workflow the server refuses.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { v2 } = require('./support/v2');
const { jobOf, settle, prefix, quickJob, previewJob } = require('./support/api');
const { loadFlow, send, outputOf, submitThrough, eventStreams } = require('./support/flow');
const { SIGNATURE } = require('../real/support/png');

describe('real Comfy API v2: a job through a flow', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('submits, awaits with live progress (status, progress, previews, outputs) and downloads the PNG', async () => {
    const name = prefix('progress');
    const out = await loadFlow(v2.url, { await: { progress: true } });
    const { id, sentAt, answeredAt } = await submitThrough(out, previewJob(name, { steps: 6, delay: 0.3 }));
    const done = await out.done.of(id, 60_000);
    const job = await jobOf(id);

    assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
    assert.equal(job.status, 'succeeded', 'the server says so too');
    assert.equal(done.payload.files.length, 1);
    const [file] = done.payload.files;
    assert.ok(file.filename.startsWith(name), file.filename);
    assert.equal(file.type, 'output');
    assert.equal(file.asset_id, job.outputs[0].id, "the file is the server's output asset");
    assert.equal(out.failed.received.length, 0);

    // Progress: every kind the stream carries arrives as a msg on output 3, each about this job.
    const progress = out.progress.received.filter((msg) => msg.prompt_id === id);
    const kinds = {};
    for (const msg of progress) kinds[msg.topic] = (kinds[msg.topic] ?? 0) + 1;
    assert.ok(kinds.execution_start >= 1, JSON.stringify(kinds));
    assert.ok(kinds.progress_state >= 1, `the stream's job-wide progress: ${JSON.stringify(kinds)}`);
    assert.ok(kinds.progress >= 1, `the probe node's steps: ${JSON.stringify(kinds)}`);
    assert.ok(kinds.preview >= 1, `the probe node's previews: ${JSON.stringify(kinds)}`);
    const preview = progress.find((msg) => msg.topic === 'preview');
    assert.ok(Buffer.isBuffer(preview.payload), 'a preview is the image');
    assert.equal(preview.payload[0], 0xff, 'a JPEG');
    assert.equal(preview.payload[1], 0xd8, 'a JPEG');
    const steps = progress.filter((msg) => msg.topic === 'progress').map((msg) => msg.payload.value);
    assert.ok(
      steps.every((step) => step >= 1 && step <= 6),
      steps.join(' '),
    );
    assert.ok(eventStreams().stats.streamsOpened >= 1, JSON.stringify(eventStreams().stats));

    send('download', { prompt_id: id, payload: structuredClone(done.payload) });
    const downloaded = await out.downloaded.find((msg) => msg.prompt_id === id, 'the download', 15_000);
    assert.ok(Buffer.isBuffer(downloaded.payload));
    assert.ok(downloaded.payload.length > SIGNATURE.length, `${downloaded.payload.length} bytes`);
    assert.deepEqual(downloaded.payload.subarray(0, SIGNATURE.length), SIGNATURE, 'the bytes are a PNG');
    // The PNG's own size: 128 x 128.
    assert.equal(downloaded.payload.readUInt32BE(16), 128);
    assert.equal(downloaded.payload.readUInt32BE(20), 128);

    if (v2.token) {
      for (const msg of [done, downloaded, ...progress])
        assert.ok(!JSON.stringify(msg).includes(v2.token), `the token in a ${msg.topic ?? 'result'} msg`);
    }
    const lastProgress = Math.max(...progress.map((msg) => msg.receivedAt));
    process.stdout.write(
      `      (submit answered in ${answeredAt - sentAt} ms; result ${done.receivedAt - sentAt} ms after the submit, ` +
        `${done.receivedAt - lastProgress} ms after the last progress msg; download ${downloaded.receivedAt - done.receivedAt} ms, ` +
        `${downloaded.payload.length} bytes; progress msgs ${JSON.stringify(kinds)}; streams ${JSON.stringify(eventStreams().stats)})\n`,
    );
  });

  it('a job that fails at run time (LoadImage of a file that is no image) ends on output 2 with the server’s error', async () => {
    const name = prefix('junk');
    const out = await loadFlow(v2.url);
    const junk = Buffer.from(`not an image ${name}\n`.repeat(20));
    const uploaded = await outputOf(out, 'upload', 'uploaded', { payload: junk, filename: `${name}.png` });
    const { id, sentAt } = await submitThrough(
      out,
      {
        1: { class_type: 'LoadImage', inputs: { image: 'set by msg' } },
        9: { class_type: 'SaveImage', inputs: { filename_prefix: name, images: ['1', 0] } },
      },
      { inputs: { 1: { image: uploaded.payload.name } } },
    );
    const failed = await out.failed.of(id, 30_000);
    const job = await jobOf(id);
    assert.equal(job.status, 'failed');
    assert.equal(failed.payload.status, 'failed', JSON.stringify(failed.payload));
    assert.equal(failed.payload.error.exception_type, 'LoadImage', "the failed node's class");
    assert.equal(failed.payload.error.exception_message, job.error.message, "the server's message");
    assert.match(failed.payload.error.exception_message, /cannot identify image file/);
    assert.equal(out.done.received.length, 0);
    process.stdout.write(`      (failed job: result ${failed.receivedAt - sentAt} ms after the submit)\n`);
  });

  it('a workflow the server refuses (an unknown node) reaches a Catch node as invalid, with its node_errors', async () => {
    const out = await loadFlow(v2.url);
    const workflow = {
      1: { class_type: 'NoSuchNodeForV2', inputs: {} },
      9: { class_type: 'SaveImage', inputs: { filename_prefix: prefix('refused'), images: ['1', 0] } },
    };
    send('submit', { payload: workflow, topic: 'refused' });
    const caught = await out.caught.nth(1, 15_000);
    assert.equal(caught.error.code, 'invalid_request', caught.error.message);
    assert.match(caught.error.message, /NoSuchNodeForV2/, 'names the unknown node');
    assert.equal(caught.topic, 'refused');
    assert.equal(caught.error.cause?.status, 422);
    // The server's answer as today's 400 body: its code as the error type, node_errors verbatim.
    assert.equal(caught.error.cause?.body?.error?.type, 'invalid_workflow', JSON.stringify(caught.error));
    assert.deepEqual(caught.error.cause?.body?.node_errors, {}, JSON.stringify(caught.error));
    assert.equal(out.submitted.received.length, 0);
    if (v2.token) assert.ok(!JSON.stringify(caught).includes(v2.token), 'the token is in no msg');
  });

  it('a value the server refuses names the node and the input (node_errors read)', async () => {
    const out = await loadFlow(v2.url);
    const workflow = quickJob(prefix('bad-value'));
    workflow[1].inputs.width = -5;
    send('submit', { payload: workflow });
    const caught = await out.caught.nth(1, 15_000);
    assert.equal(caught.error.code, 'invalid_request', caught.error.message);
    assert.match(caught.error.message, /\b1\b/, 'names the node id');
    assert.match(caught.error.message, /width/, 'names the input');
    const nodeError = caught.error.cause?.body?.node_errors?.['1'];
    assert.equal(nodeError?.errors?.[0]?.type, 'value_smaller_than_min', JSON.stringify(caught.error.cause));
  });
});
