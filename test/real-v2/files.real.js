'use strict';
// Files against the real Comfy API v2 server through a real Node-RED flow: an image uploaded by the upload node
// and loaded by a workflow (LoadImage named by msg.payload.name in msg.inputs); the same bytes uploaded twice go
// over the wire once (counted by a TCP relay between Node-RED and the proxy: bytes, not requests).
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const helper = require('node-red-node-test-helper');
const { v2 } = require('./support/v2');
const { jobOf, settle, prefix } = require('./support/api');
const { loadFlow, send, outputOf, submitThrough } = require('./support/flow');
const { encodePng, SIGNATURE } = require('../real/support/png');
const { startTcpProxy } = require('../support/tcp-proxy');

/** LoadImage (its image set by msg.inputs) -> SaveImage "9". */
function loadJob(filenamePrefix) {
  return {
    1: { class_type: 'LoadImage', inputs: { image: 'set by msg' } },
    9: { class_type: 'SaveImage', inputs: { filename_prefix: filenamePrefix, images: ['1', 0] } },
  };
}

describe('real Comfy API v2: uploads and downloads', function () {
  let relay;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  beforeEach(async () => {
    const { hostname, port } = new URL(v2.url);
    relay = await startTcpProxy({ host: hostname, port: Number(port) });
  });
  afterEach(async () => {
    await helper.unload();
    await relay.close();
    await settle();
  });

  it('uploads an image, a workflow loads it by msg.payload.name, and the job runs and succeeds', async () => {
    const name = prefix('upload');
    // Bytes of this run's own: the server keeps bytes it has seen under the first name they came with.
    const tag = [...crypto.randomBytes(3), 255];
    const image = encodePng(48, 32, (x, y) => (x + y === 0 ? tag : [x * 5, y * 7, 160, 255]));
    const out = await loadFlow(relay.url, { download: { mode: 'buffer' } });
    const began = Date.now();
    const uploaded = await outputOf(out, 'upload', 'uploaded', { payload: image, filename: `${name}.png` });
    const uploadMs = Date.now() - began;
    // Where the server keeps it, as LoadImage names it: a path under input/ ending in the name given.
    assert.equal(uploaded.payload.type, 'input');
    assert.ok(uploaded.payload.name.endsWith(`/${name}.png`), `${uploaded.payload.name} for ${name}`);
    assert.match(uploaded.payload.hash, /^blake3:[0-9a-f]{64}$/);
    assert.equal(uploaded.payload.created_new, true);

    const { id, sentAt } = await submitThrough(out, loadJob(name), {
      inputs: { 1: { image: uploaded.payload.name } },
    });
    const done = await out.done.of(id, 30_000);
    assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
    assert.equal((await jobOf(id)).status, 'succeeded');
    send('download', { prompt_id: id, payload: structuredClone(done.payload) });
    const downloaded = await out.downloaded.find((msg) => msg.prompt_id === id, 'the download', 15_000);
    assert.deepEqual(downloaded.payload.subarray(0, SIGNATURE.length), SIGNATURE, 'a PNG');
    assert.equal(downloaded.payload.readUInt32BE(16), 48, 'the uploaded image, saved again: 48 wide');
    assert.equal(downloaded.payload.readUInt32BE(20), 32, '32 high');
    process.stdout.write(
      `      (upload ${uploadMs} ms; LoadImage job: result ${done.receivedAt - sentAt} ms after the submit)\n`,
    );
  });

  it('the same bytes uploaded twice are sent once: the second upload names the same asset, and a job loads it', async () => {
    const name = prefix('twice');
    // Noise does not compress: the bytes on the wire are at least the file's size.
    const noise = crypto.randomBytes(96 * 96 * 4);
    const image = encodePng(96, 96, (x, y) => [
      ...noise.subarray((y * 96 + x) * 4, (y * 96 + x) * 4 + 3),
      255,
    ]);
    const out = await loadFlow(relay.url);

    const before = relay.counters.bytesToTarget;
    const first = await outputOf(out, 'upload', 'uploaded', { payload: image, filename: `${name}-a.png` });
    const firstBytes = relay.counters.bytesToTarget - before;
    const second = await outputOf(out, 'upload', 'uploaded', { payload: image, filename: `${name}-b.png` });
    const secondBytes = relay.counters.bytesToTarget - before - firstBytes;

    assert.ok(
      firstBytes > image.length,
      `first upload: ${firstBytes} bytes sent for a ${image.length}-byte file`,
    );
    assert.ok(secondBytes < 4096, `second upload: ${secondBytes} bytes sent (no file)`);
    assert.equal(first.payload.created_new, true);
    assert.equal(second.payload.created_new, false);
    assert.equal(second.payload.asset_id, first.payload.asset_id, 'the same asset');
    assert.equal(second.payload.hash, first.payload.hash);
    // The server keeps the bytes under the first name they were uploaded with: the second names that file.
    assert.equal(second.payload.name, first.payload.name);

    const { id } = await submitThrough(out, loadJob(name), { inputs: { 1: { image: second.payload.name } } });
    const done = await out.done.of(id, 30_000);
    assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
    process.stdout.write(
      `      (a ${image.length}-byte PNG: ${firstBytes} bytes sent the first time, ${secondBytes} the second)\n`,
    );
  });
});
