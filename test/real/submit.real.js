'use strict';
// Submit against a real ComfyUI: a workflow the server refuses reaches a Catch node with a useful sentence.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { settle, prefix } = require('./support/server');
const { loadFlow, send } = require('./support/flow');

describe('real ComfyUI: submit', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('an unknown checkpoint is refused: a Catch node gets invalid_request naming the node and the input', async () => {
    // The loader must feed an output: the server validates only what an output depends on.
    const workflow = {
      41: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'no-such-model.safetensors' } },
      5: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
      8: { class_type: 'VAEDecode', inputs: { samples: ['5', 0], vae: ['41', 2] } },
      9: { class_type: 'SaveImage', inputs: { filename_prefix: prefix('ckpt'), images: ['8', 0] } },
    };
    const out = await loadFlow(comfy.url);
    send('submit', { payload: workflow, topic: 'refused' });
    const caught = await out.caught.nth(1, 15_000);
    assert.equal(caught.error.code, 'invalid_request', caught.error.message);
    assert.match(caught.error.message, /\b41\b/, 'names the node id');
    assert.match(caught.error.message, /ckpt_name/, 'names the input');
    assert.equal(caught.topic, 'refused');
    assert.equal(out.submitted.received.length, 0);
  });
});
