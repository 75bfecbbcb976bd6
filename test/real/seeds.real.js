'use strict';
// New seed each run against a real ComfyUI: the server answers a workflow it ran before from its cache
// (same file, nothing executed again); with the submit node's "new seed each run" the same workflow runs
// again. ImageAddNoise is an image-only node whose seed asks for control_after_generate, so no model is needed.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { api, settle, prefix } = require('./support/server');
const { loadFlow, submitThrough } = require('./support/flow');

/** EmptyImage -> ImageAddNoise ("Noise", seed 1) -> SaveImage, titled as the editor exports them. */
function noisyImage() {
  return {
    1: {
      class_type: 'EmptyImage',
      inputs: { width: 32, height: 32, batch_size: 1, color: crypto.randomInt(0, 16_777_216) },
      _meta: { title: 'Canvas' },
    },
    2: {
      class_type: 'ImageAddNoise',
      inputs: { seed: 1, strength: 0.5, image: ['1', 0] },
      _meta: { title: 'Noise' },
    },
    3: {
      class_type: 'SaveImage',
      inputs: { filename_prefix: prefix('seeds'), images: ['2', 0] },
      _meta: { title: 'Save' },
    },
  };
}

/** The node ids the server answered from its cache in a job, from its history. */
async function cachedNodes(promptId) {
  const { body } = await api(`/api/history/${promptId}`);
  const messages = body?.[promptId]?.status?.messages ?? [];
  const cached = messages.find(([type]) => type === 'execution_cached');
  return (cached?.[1]?.nodes ?? []).map(String).sort();
}

describe('real ComfyUI: new seed each run', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  /** Submits the node's workflow twice; the two completed results and the two submit msgs. */
  async function submitTwice(submitProps, msg = {}) {
    const out = await loadFlow(comfy.url, {
      submit: { workflow: JSON.stringify(noisyImage()), ...submitProps },
    });
    const runs = [];
    for (let i = 0; i < 2; i++) {
      const promptId = await submitThrough(out, undefined, { payload: 'go', ...msg });
      const done = await out.done.of(promptId, 60_000);
      assert.equal(done.payload.status, 'completed');
      runs.push({
        submitted: out.submitted.received.find((m) => m.prompt_id === promptId),
        files: done.payload.files.map((file) => file.filename),
        cached: await cachedNodes(promptId),
      });
    }
    return runs;
  }

  it('without it, the second submit of one workflow is answered from the cache: same file, nothing run', async () => {
    const [first, second] = await submitTwice({ newSeed: false });
    assert.equal(first.submitted.seeds, undefined);
    assert.deepEqual(first.cached, []);
    assert.deepEqual(second.cached, ['1', '2', '3']);
    assert.deepEqual(second.files, first.files);
  });

  it('with it, each submit has a new seed (msg.seeds) and runs again: the noise and save nodes execute, a new file', async () => {
    const [first, second] = await submitTwice({ newSeed: true });
    const seeds = [first, second].map((run) => run.submitted.seeds[2]);
    for (const [index, run] of [first, second].entries()) {
      assert.deepEqual(run.submitted.seeds, { 2: seeds[index] });
      assert.equal(run.submitted.workflow[2].inputs.seed, seeds[index]);
      assert.ok(Number.isSafeInteger(seeds[index]) && seeds[index] >= 0);
    }
    assert.notEqual(seeds[0], seeds[1]);
    assert.deepEqual(second.cached, ['1'], 'only the unchanged EmptyImage came from the cache');
    assert.notDeepEqual(second.files, first.files);
  });

  it('msg.inputs setting the seed by title keeps it: the same seed again is the cached result', async () => {
    const [first, second] = await submitTwice({ newSeed: true }, { inputs: { Noise: { seed: 12345 } } });
    assert.deepEqual(first.submitted.seeds, { 2: 12345 });
    assert.deepEqual(second.submitted.seeds, { 2: 12345 });
    assert.deepEqual(second.cached, ['1', '2', '3']);
    assert.deepEqual(second.files, first.files);
  });
});
