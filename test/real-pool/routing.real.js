'use strict';
// A pool of two real ComfyUIs (v0.8.0 and v0.33.0, support/pool.js) through a real Node-RED: where the jobs go.
// A dozen jobs sent at once spread over both, each result naming the server whose history holds the job; and a
// workflow with node classes only v0.33.0 has goes to v0.33.0 every time, never to v0.8.0 (not even a refused
// submit: v0.8.0's log says "got prompt" for every submit that reaches it).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { uniquePrefix, quickJob } = require('../real/support/workflows');
const {
  servers,
  SERVER_LIST,
  api,
  historyOf,
  logLength,
  logSince,
  settle,
  cropJob,
  NEW_ONLY_CLASSES,
} = require('./support/pool');
const { loadPoolFlow, submitAll, resultOf, spreadOf } = require('./support/pool-flow');

const prefix = (name) => uniquePrefix('pool', name);

/** Asserts that the server msg.server names holds the job in its history and the other does not. */
async function assertRanWhereSaid(msg) {
  const said = servers[msg.server.id];
  assert.ok(said, `msg.server ${JSON.stringify(msg.server)} names one of the pool's servers`);
  assert.equal(msg.server.name, said.name, 'msg.server.name is its config node name');
  for (const server of SERVER_LIST) {
    const entry = await historyOf(server, msg.prompt_id);
    if (server === said) {
      assert.ok(entry, `${server.name}, which msg.server names, has job ${msg.prompt_id} in its history`);
      assert.equal(entry.status?.status_str, 'success', JSON.stringify(entry.status));
    } else {
      assert.equal(entry, undefined, `${server.name} does not know job ${msg.prompt_id}`);
    }
  }
}

/** Width and height of a PNG (its IHDR chunk). */
function pngSize(bytes) {
  assert.equal(bytes.subarray(1, 4).toString('latin1'), 'PNG');
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

describe('real pool of ComfyUI v0.8.0 and v0.33.0: where jobs go', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async function () {
    this.timeout(120_000);
    await helper.unload();
    await settle();
  });

  it('spreads a dozen jobs sent at once over both servers; each result names the server that ran it', async function () {
    this.timeout(180_000);
    const out = await loadPoolFlow();
    const began = Date.now();
    const submitted = await submitAll(
      out,
      Array.from({ length: 12 }, (_, index) => quickJob(prefix(`spread-${index}`))),
    );
    const submittedIn = Date.now() - began;
    const spread = spreadOf(submitted);
    const results = [];
    for (const msg of submitted) {
      const { msg: result, output } = await resultOf(out, msg.prompt_id, 120_000);
      assert.equal(output, 1, `job ${msg.prompt_id}: ${JSON.stringify(result.payload)}`);
      assert.equal(result.payload.status, 'completed');
      assert.deepEqual(result.server, msg.server, 'the await reports the server the submit chose');
      assert.equal(result.payload.files.length, 1);
      assert.ok(result.payload.files[0].filename.startsWith(msg.workflow[9].inputs.filename_prefix));
      results.push(result);
    }
    for (const result of results) await assertRanWhereSaid(result);
    process.stdout.write(
      `      spread of 12: ${JSON.stringify(spread)}; submitted in ${submittedIn} ms, all ended in ${Date.now() - began} ms\n`,
    );
    // Alike and idle, each takes about half: at least a quarter each, whatever the queue reports' timing.
    for (const server of SERVER_LIST)
      assert.ok(
        spread[server.key] >= 3,
        `${server.name} ran ${spread[server.key]} of 12: ${JSON.stringify(spread)}`,
      );
    assert.equal(out.failed.received.length, 0);
    assert.equal(out.caught.received.length, 0);
  });

  it('sends a workflow with node classes only v0.33.0 has to v0.33.0 every time, and none of it to v0.8.0', async function () {
    this.timeout(180_000);
    // The premise, read from the servers themselves: v0.8.0 lacks the classes, v0.33.0 has them.
    const { body: oldClasses } = await api(servers.old, '/api/object_info');
    const { body: newClasses } = await api(servers.new, '/api/object_info');
    for (const name of NEW_ONLY_CLASSES) {
      assert.equal(oldClasses[name], undefined, `v0.8.0 has no ${name}`);
      assert.ok(newClasses[name], `v0.33.0 has ${name}`);
    }
    const out = await loadPoolFlow();
    const oldLogFrom = logLength(servers.old);
    // Six crops among six quick jobs, all at once: without the pool's capability routing, turns would send half
    // the crops to v0.8.0, which refuses them (400 invalid_prompt).
    const workflows = [];
    for (let index = 0; index < 6; index++) {
      workflows.push(cropJob(prefix(`crop-${index}`)), quickJob(prefix(`beside-${index}`)));
    }
    const began = Date.now();
    const submitted = await submitAll(out, workflows);
    const crops = submitted.filter((msg) => msg.workflow[3]?.class_type === 'ImageCropV2');
    const quick = submitted.filter((msg) => msg.workflow[3] === undefined);
    assert.equal(crops.length, 6);
    assert.deepEqual(spreadOf(crops), { old: 0, new: 6 }, 'every crop went to v0.33.0');
    // v0.8.0 was up and taking jobs all along: the quick ones beside the crops went there too.
    assert.ok(spreadOf(quick).old >= 1, `quick jobs beside the crops: ${JSON.stringify(spreadOf(quick))}`);

    for (const msg of submitted) {
      const { msg: result, output } = await resultOf(out, msg.prompt_id, 120_000);
      assert.equal(output, 1, `job ${msg.prompt_id}: ${JSON.stringify(result.payload)}`);
      await assertRanWhereSaid(result);
    }
    // Each crop really ran on v0.33.0: its saved image is the 32 × 16 region of the 64² one.
    for (const msg of crops) {
      const { msg: result } = await resultOf(out, msg.prompt_id);
      const [file] = result.payload.files;
      const query = new URLSearchParams({
        filename: file.filename,
        subfolder: file.subfolder,
        type: file.type,
      });
      const { status, body } = await api(servers.new, `/api/view?${query}`);
      assert.equal(status, 200);
      assert.deepEqual(pngSize(body), { width: 32, height: 16 });
    }
    // No submit of a crop reached v0.8.0: it refused none ("invalid prompt") and heard of none of the classes.
    const oldLog = logSince(servers.old, oldLogFrom);
    assert.doesNotMatch(oldLog, /invalid prompt/);
    for (const name of NEW_ONLY_CLASSES) assert.ok(!oldLog.includes(name), `v0.8.0's log names ${name}`);
    const oldSubmits = (oldLog.match(/got prompt/g) ?? []).length;
    assert.equal(
      oldSubmits,
      spreadOf(quick).old,
      "v0.8.0's log counts a submit for each quick job sent there only",
    );
    process.stdout.write(
      `      crops ${JSON.stringify(spreadOf(crops))}, quick jobs beside them ${JSON.stringify(spreadOf(quick))}; ` +
        `all ended in ${Date.now() - began} ms\n`,
    );
    assert.equal(out.caught.received.length, 0);
  });
});
