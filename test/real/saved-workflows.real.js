'use strict';
// Workflows saved on a real ComfyUI through the route its own page saves them with
// (POST /api/userdata/<"workflows/" + name, URL-encoded whole>, the workflow's JSON text as the body): listed as
// the page lists them, run by name through the submit node (read for each msg, msg.inputs applied), and one
// that has gone said so.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { api, settle, prefix } = require('./support/server');
const { loadFlow, outputOf, send } = require('./support/flow');
const { HttpClient } = require('../../dist/http/client');
const { listSavedWorkflows } = require('../../dist/generation/workflows/saved-workflows');

/** EmptyImage 64x48 -> ImageAddNoise -> ImageBlur "Soften" -> SaveImage "Save Image", as the page saves it. */
const uiChain = () => structuredClone(require('../fixtures/ui/image-chain.json'));

/** Width x height from a PNG's IHDR. */
function sizeOfPng(bytes) {
  return `${bytes.readUInt32BE(16)}x${bytes.readUInt32BE(20)}`;
}

/** Saves as ComfyUI's page does (`api.storeUserData`): no content type, overwrite, full_info. */
async function saveLikeThePage(name, workflow) {
  const route = `/api/userdata/${encodeURIComponent(`workflows/${name}`)}?overwrite=true&full_info=true`;
  const response = await fetch(`${comfy.url}${route}`, {
    method: 'POST',
    body: JSON.stringify(workflow),
    signal: AbortSignal.timeout(15_000),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

async function deleteSaved(name) {
  await fetch(`${comfy.url}/api/userdata/${encodeURIComponent(`workflows/${name}`)}`, {
    method: 'DELETE',
    signal: AbortSignal.timeout(15_000),
  });
}

/** The size of the image a completed job's SaveImage wrote. */
async function imageSize(done) {
  const [file] = done.payload.files;
  const query = new URLSearchParams({ filename: file.filename, subfolder: file.subfolder, type: file.type });
  const view = await fetch(`${comfy.url}/api/view?${query}`, { signal: AbortSignal.timeout(15_000) });
  assert.equal(view.status, 200);
  return sizeOfPng(Buffer.from(await view.arrayBuffer()));
}

describe('real ComfyUI: workflows saved on the server', function () {
  // A folder with a space and a name of its own per run: the server keeps user data across a restart.
  const name = `graph-gen tests/image chain ${prefix('saved')}.json`;

  before(async () => helper.startServer());
  after(async () => {
    await deleteSaved(name);
    await helper.stopServer();
  });
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('lists a workflow saved through the page’s route by its path, with its size and time in milliseconds', async () => {
    const saved = await saveLikeThePage(name, uiChain());
    assert.equal(saved.path, `workflows/${name}`);
    const http = new HttpClient({ baseUrl: comfy.url, serviceName: 'the generation service' });
    try {
      const list = await listSavedWorkflows(http);
      const entry = list.workflows.find((workflow) => workflow.name === name);
      assert.ok(entry, `not listed: ${JSON.stringify(list.workflows.map((workflow) => workflow.name))}`);
      assert.equal(entry.size, JSON.stringify(uiChain()).length);
      // v0.8.0 answers seconds, v0.33.0 milliseconds: both read as milliseconds.
      assert.ok(Math.abs(entry.modified - Date.now()) < 10 * 60_000, `modified ${entry.modified}`);
    } finally {
      await http.close();
    }
  });

  it('runs the saved workflow by name with msg.inputs, reading it again for each msg', async () => {
    await saveLikeThePage(name, uiChain());
    const out = await loadFlow(comfy.url, { submit: { savedWorkflow: name, newSeed: false } });

    const first = await outputOf(out, 'submit', 'submitted', {
      payload: 'go',
      inputs: { Soften: { blur_radius: 5 }, 'Save Image': { filename_prefix: prefix('saved-first') } },
    });
    assert.equal(first.workflow[3].class_type, 'ImageBlur');
    assert.equal(first.workflow[3].inputs.blur_radius, 5);
    const firstDone = await out.done.of(first.prompt_id, 60_000);
    assert.equal(firstDone.payload.status, 'completed');
    assert.equal(await imageSize(firstDone), '64x48');
    const history = await api(`/api/history/${first.prompt_id}`);
    assert.equal(history.body[first.prompt_id].prompt[2][3].inputs.blur_radius, 5, 'the server ran another');

    // Changed in the page: the next msg runs what is saved there now.
    const changed = uiChain();
    changed.nodes.find((node) => node.type === 'EmptyImage').widgets_values[0] = 32;
    await saveLikeThePage(name, changed);
    const second = await outputOf(out, 'submit', 'submitted', {
      payload: 'again',
      inputs: { 'Save Image': { filename_prefix: prefix('saved-second') } },
    });
    const secondDone = await out.done.of(second.prompt_id, 60_000);
    assert.equal(await imageSize(secondDone), '32x48');
  });

  it('says clearly that a saved workflow has gone, and submits nothing', async () => {
    const gone = `graph-gen tests/gone ${prefix('gone')}.json`;
    await saveLikeThePage(gone, uiChain());
    await deleteSaved(gone);
    const out = await loadFlow(comfy.url, { submit: { savedWorkflow: gone } });
    send('submit', { payload: 'go' });
    const caught = await out.caught.nth(1, 15_000);
    assert.equal(caught.error.code, 'invalid_request', caught.error.message);
    assert.equal(caught.error.cause.status, 404);
    assert.match(
      caught.error.message,
      /^The saved workflow "graph-gen tests\/gone .*\.json" is not on the generation service \(any more\)/,
    );
    assert.equal(out.submitted.received.length, 0);
  });
});
