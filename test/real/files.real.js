'use strict';
// Files against a real ComfyUI: upload an image, upload a mask for it, run a workflow that loads the masked
// image, and download the result to disk.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { settle, prefix } = require('./support/server');
const { loadFlow, send, outputOf, submitThrough } = require('./support/flow');
const { encodePng, SIGNATURE } = require('./support/png');

describe('real ComfyUI: upload, mask, download', function () {
  let directory;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  beforeEach(() => {
    directory = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-real-'));
  });
  afterEach(async () => {
    await helper.unload();
    await settle();
    fs.rmSync(directory, { recursive: true, force: true });
  });

  it('uploads an image and its mask, runs LoadImage on the clipspace file, and saves the output to a folder', async () => {
    const name = prefix('mask');
    const image = encodePng(48, 32, (x, y) => [x * 5, y * 7, 160, 255]);
    const mask = encodePng(48, 32, (x) => [0, 0, 0, x < 24 ? 0 : 255]);
    const out = await loadFlow(comfy.url, { download: { mode: 'file', directory } });

    const uploaded = await outputOf(out, 'upload', 'uploaded', { payload: image, filename: `${name}.png` });
    assert.equal(uploaded.payload.name, `${name}.png`);
    const masked = await outputOf(out, 'upload', 'uploaded', {
      payload: mask,
      filename: `${name}-mask.png`,
      original_ref: {
        filename: uploaded.payload.name,
        subfolder: uploaded.payload.subfolder ?? '',
        type: 'input',
      },
    });
    assert.equal(masked.payload.subfolder, 'clipspace');

    const id = await submitThrough(out, {
      1: { class_type: 'LoadImage', inputs: { image: `clipspace/${masked.payload.name} [input]` } },
      9: { class_type: 'SaveImage', inputs: { filename_prefix: name, images: ['1', 0] } },
    });
    const done = await out.done.of(id, 30_000);
    assert.equal(done.payload.files.length, 1);
    const [file] = done.payload.files;

    send('download', { prompt_id: id, payload: structuredClone(done.payload) });
    const saved = await out.downloaded.find((msg) => msg.prompt_id === id, 'the saved file', 15_000);
    assert.equal(saved.filename, file.filename);
    assert.equal(path.dirname(saved.payload), directory);
    const bytes = fs.readFileSync(saved.payload);
    assert.ok(bytes.length > SIGNATURE.length, `${bytes.length} bytes saved`);
    assert.deepEqual(bytes.subarray(0, SIGNATURE.length), SIGNATURE, 'the file is a PNG');
    assert.equal(out.caught.received.length, 0);
  });
});
