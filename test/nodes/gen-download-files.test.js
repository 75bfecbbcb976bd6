'use strict';
// The download node's file mode with many files and with refused places: what the folder holds afterwards.
// The temporary file is made while the target's place is looked at (downloads.ts, prepareTarget), so a
// refusal must take it away again, and a missing folder is made only when the file cannot be made in it.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, flowWith, load, failureOf, messages, outputOf } = require('../support/generation-nodes');

describe('graph-gen-download: file mode, many files and refused places', () => {
  let cloud;
  let root;
  const heron = { filename: 'heron.png', subfolder: '', type: 'output' };
  const heronBytes = crypto.randomBytes(5000);

  const loadInto = (directory, own = {}) =>
    load(
      flowWith(
        { type: 'graph-gen-download', mode: 'file', directory, directoryType: 'str', ...own },
        { baseUrl: cloud.url },
      ),
    );

  before(async () => {
    await helper.startServer();
    cloud = await startSandbox({ generationApiKey: API_KEY });
    cloud.generation.addFile(heron, { content: heronBytes });
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-download-files-'));
  });
  after(async () => {
    await cloud.close();
    await helper.stopServer();
    fs.rmSync(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    cloud.counters.reset();
    cloud.generation.storage.counters.reset();
  });
  afterEach(async () => helper.unload());

  it('saves 40 files of one msg whole, in order, into a folder made three levels deep, and nothing else', async () => {
    const refs = Array.from({ length: 40 }, (_, index) => ({
      filename: `many_${String(index).padStart(2, '0')}.bin`,
      subfolder: '',
      type: 'output',
    }));
    // Sizes around the 64 KiB a socket read brings and the write-behind of 1 MiB.
    const sizes = refs.map((_, index) => [1, 65_535, 65_537, 300_000, (1 << 20) + 3][index % 5]);
    const contents = sizes.map((size) => crypto.randomBytes(size));
    refs.forEach((ref, index) => cloud.generation.addFile(ref, { content: contents[index] }));
    const directory = path.join(root, 'a', 'b', 'c');
    await loadInto(directory);
    const all = messages('out', refs.length, 20000);
    helper.getNode('n').receive({ payload: refs });
    const sent = await all;
    assert.deepEqual(
      sent.map((msg) => msg.payload),
      refs.map((ref) => path.join(directory, ref.filename)),
    );
    for (const [index, ref] of refs.entries())
      assert.ok(fs.readFileSync(path.join(directory, ref.filename)).equals(contents[index]), ref.filename);
    assert.deepEqual(fs.readdirSync(directory).sort(), refs.map((ref) => ref.filename).sort());
    assert.equal(cloud.generation.storage.counters.requests.length, refs.length);
    assert.deepEqual(cloud.generation.storageLeaks(), []);
  });

  it('a file that is there (overwrite off) is kept, no temporary file is left, and nothing is requested', async () => {
    const directory = fs.mkdtempSync(path.join(root, 'kept-'));
    fs.writeFileSync(path.join(directory, heron.filename), 'mine');
    await loadInto(directory);
    const failure = await failureOf('n', { payload: heron });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /"heron.png" already exists/);
    assert.deepEqual(fs.readdirSync(directory), [heron.filename]);
    assert.equal(fs.readFileSync(path.join(directory, heron.filename), 'utf8'), 'mine');
    assert.equal(cloud.counters.count('/api/view'), 0);
  });

  it('a folder of the name, with or without overwrite, is kept and no temporary file is left', async () => {
    const directory = fs.mkdtempSync(path.join(root, 'folder-'));
    fs.mkdirSync(path.join(directory, heron.filename));
    for (const overwrite of [false, true]) {
      await loadInto(directory, { overwrite });
      const failure = await failureOf('n', { payload: heron });
      assert.match(failure.error.message, /a directory of that name is there, and it is not replaced/);
      assert.deepEqual(fs.readdirSync(directory), [heron.filename]);
      await helper.unload();
    }
    assert.equal(cloud.counters.count('/api/view'), 0);
  });

  it('a file where the folder should be is refused and left as it was, and no folder is made below it', async () => {
    const file = path.join(root, 'a-file');
    fs.writeFileSync(file, 'mine');
    await loadInto(path.join(file, 'below', 'deeper'));
    const failure = await failureOf('n', { payload: heron });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /is not a directory \(a file is in its place or in its path\)/);
    assert.equal(fs.readFileSync(file, 'utf8'), 'mine');
    assert.equal(cloud.counters.count('/api/view'), 0);
  });

  it('with overwrite, an old file is replaced whole and the folder holds only it', async () => {
    const directory = fs.mkdtempSync(path.join(root, 'replaced-'));
    fs.writeFileSync(path.join(directory, heron.filename), 'old');
    await loadInto(directory, { overwrite: true });
    const msg = await outputOf('n', { payload: heron });
    assert.equal(msg.payload, path.join(directory, heron.filename));
    assert.ok(fs.readFileSync(msg.payload).equals(heronBytes));
    assert.deepEqual(fs.readdirSync(directory), [heron.filename]);
  });
});
