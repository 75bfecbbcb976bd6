'use strict';
// UI-format workflows against a real ComfyUI: converted with the server's own object_info, each must equal
// what the graph editor would export (the *.expected.json beside it) and run to success when submitted.
const assert = require('node:assert/strict');
const { comfy } = require('./support/comfy');
const { api, submitDirect, until, settle, prefix } = require('./support/server');
const { encodePng } = require('./support/png');
const { convertUiWorkflow } = require('../../dist/generation/workflows/ui-workflow');
const { displayNameOf } = require('../../dist/generation/workflows/node-definitions');

/** The image LoadImage reads in load-reroute.json: 40 x 30. */
const INPUT_IMAGE = 'ui-workflow-input.png';

/** Each fixture, and the size (width x height) of the image each of its SaveImage nodes writes. */
const FIXTURES = {
  'image-chain': { 4: '64x48' },
  'load-reroute': { 14: '24x16', 16: '40x30' },
  'primitive-sockets': { 25: '24x30' },
  'muted-bypassed': { 33: '16x16' },
  'links-as-objects': { 42: '20x20' },
};

/** Width x height from a PNG's IHDR. */
function sizeOfPng(bytes) {
  return `${bytes.readUInt32BE(16)}x${bytes.readUInt32BE(20)}`;
}

describe('real ComfyUI: UI-format workflows', function () {
  let objectInfo;

  /**
   * What the graph editor exports on this server: a node without a title of its own is titled with the server's
   * display name, which changes between versions ("EmptyImage" on 0.8, "Empty Image" on 0.33).
   */
  function expectedOn(ui, expected) {
    const copy = structuredClone(expected);
    for (const [id, node] of Object.entries(copy)) {
      const own = ui.nodes.find((candidate) => String(candidate.id) === id)?.title;
      if (!own) node._meta.title = displayNameOf(objectInfo[node.class_type], node.class_type);
    }
    return copy;
  }

  before(async () => {
    const answer = await api('/api/object_info');
    assert.equal(answer.status, 200);
    objectInfo = answer.body;
    const form = new FormData();
    const image = encodePng(40, 30, (x, y) => [x * 6, y * 8, 128, 255]);
    form.append('image', new Blob([image], { type: 'image/png' }), INPUT_IMAGE);
    form.append('overwrite', 'true');
    const upload = await fetch(`${comfy.url}/api/upload/image`, { method: 'POST', body: form });
    assert.equal(upload.status, 200, await upload.text());
  });
  afterEach(async () => settle());

  for (const [name, saved] of Object.entries(FIXTURES)) {
    it(`${name}: converts as the graph editor exports it, and runs to success`, async () => {
      const ui = require(`../fixtures/ui/${name}.json`);
      const workflow = convertUiWorkflow(ui, (classType) => objectInfo[classType]);
      assert.deepEqual(workflow, expectedOn(ui, require(`../fixtures/ui/${name}.expected.json`)));

      // Fresh file names: the server would answer a workflow it ran before from its cache.
      const run = prefix(`ui-${name}`);
      for (const id of Object.keys(saved)) workflow[id].inputs.filename_prefix = `${run}-${id}`;
      const promptId = await submitDirect(workflow);
      const entry = await until(
        async () => (await api(`/api/history/${promptId}`)).body?.[promptId],
        `job ${promptId} to reach the history`,
        60_000,
        100,
      );
      assert.equal(entry.status.status_str, 'success', JSON.stringify(entry.status.messages));
      assert.equal(entry.status.completed, true);
      assert.deepEqual(
        Object.keys(entry.outputs).sort(),
        Object.keys(saved).sort(),
        'only the SaveImage nodes kept',
      );
      for (const [id, size] of Object.entries(saved)) {
        const [file] = entry.outputs[id].images;
        assert.equal(file.filename.startsWith(`${run}-${id}`), true, file.filename);
        const query = new URLSearchParams({
          filename: file.filename,
          subfolder: file.subfolder,
          type: file.type,
        });
        const view = await fetch(`${comfy.url}/api/view?${query}`);
        assert.equal(view.status, 200);
        assert.equal(sizeOfPng(Buffer.from(await view.arrayBuffer())), size, `the image of SaveImage ${id}`);
      }
    });
  }
});
