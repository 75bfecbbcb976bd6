'use strict';
// What the generation REST nodes show under themselves: short texts (under 20 characters, so the editor
// never cuts them), saying what happened, and a red ring naming the failure.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { statuses } = require('../support/node-red');
const {
  API_KEY,
  textToImage,
  flowWith,
  load,
  failureOf,
  outputOf,
  messages,
} = require('../support/generation-nodes');

describe('generation REST node statuses', () => {
  let sandbox;
  const longName = 'a-rather-long-output-file-name_00001_.png';

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY, events: { autoRun: false } });
    sandbox.generation.addFile(
      { filename: longName, subfolder: '', type: 'output' },
      { content: Buffer.from('png') },
    );
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  afterEach(async () => helper.unload());

  async function statusesOf(node, msgs) {
    await load(flowWith(node, { baseUrl: sandbox.url }));
    const seen = statuses('n');
    for (const msg of msgs) await outputOf('n', msg);
    return seen;
  }

  function assertShort(seen) {
    assert.ok(seen.length > 0);
    for (const status of seen) {
      assert.ok(status.text === undefined || status.text.length < 20, JSON.stringify(status));
    }
  }

  it('upload, download, submit and queue say what they did in under 20 characters', async () => {
    const upload = await statusesOf({ type: 'graph-gen-upload' }, [
      { payload: Buffer.from('png'), filename: longName },
    ]);
    assertShort(upload);
    assert.equal(upload[0].text, 'uploading…');
    assert.match(upload.at(-1).text, /^uploaded a-rather-…$/);
    await helper.unload();

    const file = { filename: longName, subfolder: '', type: 'output' };
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: sandbox.url }));
    const download = statuses('n');
    const two = messages('out', 2);
    helper.getNode('n').receive({ payload: [file, file] });
    await two;
    await new Promise((resolve) => setImmediate(resolve));
    assertShort(download);
    assert.deepEqual(
      download.map((status) => status.text),
      ['file 1/2…', 'file 2/2…', '2 files'],
    );
    await helper.unload();

    const submit = await statusesOf({ type: 'graph-gen-submit' }, [{ payload: textToImage() }]);
    assertShort(submit);
    assert.match(submit.at(-1).text, /^submitted [0-9a-f-]{8}$/);
    await helper.unload();

    sandbox.jobs.jobs.clear();
    const job = sandbox.jobs.submit(textToImage(), 'client');
    job.state = 'in_progress';
    const waiting = [1, 2].map(() => sandbox.jobs.submit(textToImage(), 'client').id);
    const queue = await statusesOf({ type: 'graph-gen-queue' }, [
      {},
      { action: 'cancel', prompt_id: waiting },
      { action: 'interrupt' },
    ]);
    assertShort(queue);
    assert.deepEqual(
      queue.map((status) => status.text),
      ['1 running, 2 queued', 'cancelled 2', 'interrupted'],
    );
  });

  it('a failure turns the status into a red ring naming the error code', async () => {
    await load(flowWith({ type: 'graph-gen-queue', action: 'cancel' }, { baseUrl: sandbox.url }));
    const seen = statuses('n');
    await failureOf('n', {});
    assert.deepEqual(seen.at(-1), { fill: 'red', shape: 'ring', text: 'invalid input' });
    sandbox.faults.add({ method: 'POST', path: '/api/queue', status: 402, body: { message: 'no credits' } });
    await failureOf('n', { prompt_id: 'x' });
    assert.deepEqual(seen.at(-1), { fill: 'red', shape: 'ring', text: 'no credits' });
    sandbox.faults.add({ method: 'POST', path: '/api/queue', status: 429, body: { message: 'inactive' } });
    await failureOf('n', { prompt_id: 'x' });
    assert.deepEqual(seen.at(-1), { fill: 'red', shape: 'ring', text: 'no subscription' });
  });
});
