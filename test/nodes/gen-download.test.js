'use strict';
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const {
  API_KEY,
  flowWith,
  load,
  failureOf,
  outputOf,
  messages,
  textOf,
} = require('../support/generation-nodes');

describe('graph-gen-download', () => {
  let cloud;
  let selfHosted;
  let directory;
  const fox = { filename: 'fox_00001_.png', subfolder: '', type: 'output' };
  const owl = { filename: 'owl_00001_.png', subfolder: 'batch', type: 'output' };
  const foxBytes = crypto.randomBytes(70_000);
  const owlBytes = crypto.randomBytes(1234);

  /** A download node in file mode saving into `target` on the cloud sandbox, with `own` settings on top. */
  const loadFileMode = (target, own = {}) =>
    load(
      flowWith(
        { type: 'graph-gen-download', mode: 'file', directory: target, directoryType: 'str', ...own },
        { baseUrl: cloud.url },
      ),
    );

  before(async () => {
    await helper.startServer();
    cloud = await startSandbox({ generationApiKey: API_KEY });
    selfHosted = await startSandbox();
    for (const sandbox of [cloud, selfHosted]) {
      sandbox.generation.addFile(fox, { content: foxBytes });
      sandbox.generation.addFile(owl, { content: owlBytes, contentType: 'image/png' });
    }
    directory = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-download-'));
  });
  after(async () => {
    await cloud.close();
    await selfHosted.close();
    await helper.stopServer();
    fs.rmSync(directory, { recursive: true, force: true });
  });
  beforeEach(() => {
    for (const sandbox of [cloud, selfHosted]) {
      sandbox.faults.clear();
      sandbox.counters.reset();
      sandbox.generation.storage.counters.reset();
      sandbox.generation.storage.faults.clear();
    }
  });
  afterEach(async () => helper.unload());

  it('cloud: follows the 302 to the storage host without the key, and sends the file as a Buffer', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    const msg = await outputOf('n', { payload: fox, topic: 'kept' });
    assert.ok(Buffer.isBuffer(msg.payload));
    assert.ok(msg.payload.equals(foxBytes));
    assert.equal(msg.filename, fox.filename);
    assert.equal(msg.contentType, 'image/png');
    assert.deepEqual(msg.file, fox);
    assert.equal(msg.topic, 'kept');
    const view = cloud.counters.matching('/api/view')[0];
    assert.equal(view.headers['x-api-key'], API_KEY);
    assert.equal(view.query.get('filename'), fox.filename);
    assert.equal(view.query.get('type'), 'output');
    const storage = cloud.generation.storage.counters.requests;
    assert.equal(storage.length, 1);
    assert.equal(storage[0].headers['x-api-key'], undefined);
    assert.equal(storage[0].headers.cookie, undefined);
    assert.deepEqual(cloud.generation.storageLeaks(), []);
  });

  it('self-hosted: a 200 from /api/view is the file (no key sent anywhere)', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: selfHosted.url }), {});
    const msg = await outputOf('n', { payload: owl });
    assert.ok(msg.payload.equals(owlBytes));
    assert.equal(selfHosted.counters.matching('/api/view')[0].headers['x-api-key'], undefined);
    assert.equal(selfHosted.generation.storage.counters.requests.length, 0);
  });

  it('one msg per file for an array and for an await-job result', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    const two = messages('out', 2);
    helper.getNode('n').receive({ payload: [fox, owl], topic: 'batch', mine: { keep: 1 } });
    const [first, second] = await two;
    for (const msg of [first, second]) {
      assert.equal(msg.topic, 'batch');
      assert.deepEqual(msg.mine, { keep: 1 });
    }
    assert.equal(first.filename, fox.filename);
    assert.equal(second.filename, owl.filename);
    assert.ok(second.payload.equals(owlBytes));
    assert.notEqual(first._msgid, undefined);
    const result = messages('out', 2);
    helper
      .getNode('n')
      .receive({ payload: { prompt_id: 'p', status: 'completed', outputs: {}, files: [owl, fox] } });
    const files = await result;
    assert.deepEqual(
      files.map((msg) => msg.file),
      [owl, fox],
    );
    assert.deepEqual(cloud.generation.storageLeaks(), []);
  });

  it('file mode streams into the directory setting and does not overwrite unless told', async () => {
    const target = path.join(directory, 'set');
    await loadFileMode(target);
    const msg = await outputOf('n', { payload: fox, topic: 'saved', mine: 2 });
    assert.equal(msg.payload, path.join(target, fox.filename));
    assert.equal(msg.topic, 'saved');
    assert.equal(msg.mine, 2);
    assert.equal(msg.filename, fox.filename);
    assert.deepEqual(msg.file, fox);
    assert.ok(fs.readFileSync(msg.payload).equals(foxBytes));
    fs.writeFileSync(msg.payload, 'mine');
    cloud.counters.reset();
    const failure = await failureOf('n', { payload: fox });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /"fox_00001_.png" already exists/);
    assert.equal(fs.readFileSync(msg.payload, 'utf8'), 'mine');
    assert.equal(cloud.counters.count('/api/view'), 0, 'an existing file costs no download');
    // A file that fails to download leaves nothing behind.
    const gone = { filename: 'gone.png', subfolder: '', type: 'output' };
    await failureOf('n', { payload: gone });
    assert.equal(fs.existsSync(path.join(target, 'gone.png')), false);
    await helper.unload();
    await loadFileMode(target, { overwrite: true });
    // Overwriting: a failed download keeps the old file; a good one replaces it.
    fs.writeFileSync(msg.payload, 'mine');
    cloud.generation.storage.faults.add({ path: /^\/files\//, status: 403, body: 'Request has expired' });
    await failureOf('n', { payload: fox });
    assert.equal(fs.readFileSync(msg.payload, 'utf8'), 'mine');
    await outputOf('n', { payload: fox });
    assert.ok(fs.readFileSync(msg.payload).equals(foxBytes));
  });

  it('overwriting: a transfer that breaks off keeps the old file and leaves no partial file', async () => {
    const target = fs.mkdtempSync(path.join(directory, 'break-'));
    fs.writeFileSync(path.join(target, fox.filename), 'mine');
    await loadFileMode(target, { overwrite: true });
    cloud.generation.storage.faults.add({ path: /^\/files\//, breakAfterBytes: 20_000, times: 10 });
    const failure = await failureOf('n', { payload: fox }, 15000);
    assert.equal(failure.error.code, 'network');
    assert.match(failure.error.message, /"fox_00001_.png" broke off/);
    assert.deepEqual(fs.readdirSync(target), [fox.filename]);
    assert.equal(fs.readFileSync(path.join(target, fox.filename), 'utf8'), 'mine');
  });

  it('overwriting: a redeploy during the transfer keeps the old file and leaves no partial file', async () => {
    const target = fs.mkdtempSync(path.join(directory, 'redeploy-'));
    fs.writeFileSync(path.join(target, fox.filename), 'mine');
    await loadFileMode(target, { overwrite: true });
    cloud.generation.storage.faults.add({ path: /^\/files\//, stallAfterBytes: 20_000 });
    helper.getNode('n').receive({ payload: fox });
    const deadline = Date.now() + 5000;
    while (!fs.readdirSync(target).some((name) => name.endsWith('.part')) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(
      fs.readFileSync(path.join(target, fox.filename), 'utf8'),
      'mine',
      'the old file during the transfer',
    );
    await helper.unload();
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(fs.readdirSync(target), [fox.filename]);
    assert.equal(fs.readFileSync(path.join(target, fox.filename), 'utf8'), 'mine');
  });

  it('two downloads of one name at once never interleave: the file is one of them whole', async () => {
    const target = fs.mkdtempSync(path.join(directory, 'twice-'));
    // Two files of one name in two subfolders: both are saved as big.bin.
    const one = { filename: 'big.bin', subfolder: 'one', type: 'output' };
    const two = { filename: 'big.bin', subfolder: 'two', type: 'output' };
    const oneBytes = crypto.randomBytes(3 << 20);
    const twoBytes = crypto.randomBytes(2 << 20);
    cloud.generation.addFile(one, { content: oneBytes });
    cloud.generation.addFile(two, { content: twoBytes });
    await loadFileMode(target, { overwrite: true });
    for (let round = 0; round < 5; round++) {
      const both = messages('out', 2, 10000);
      helper.getNode('n').receive({ payload: one });
      helper.getNode('n').receive({ payload: two });
      await both;
      const saved = fs.readFileSync(path.join(target, 'big.bin'));
      assert.ok(saved.equals(oneBytes) || saved.equals(twoBytes), `round ${round}: a mix of both files`);
      assert.deepEqual(fs.readdirSync(target), ['big.bin']);
    }
  });

  it('file mode saves a large file byte for byte; one broken off after megabytes leaves the old file', async () => {
    const target = fs.mkdtempSync(path.join(directory, 'large-'));
    const heron = { filename: 'heron.bin', subfolder: '', type: 'output' };
    const heronBytes = crypto.randomBytes(24 << 20);
    cloud.generation.addFile(heron, { content: heronBytes });
    await loadFileMode(target, { overwrite: true });
    const msg = await outputOf('n', { payload: heron }, 15000);
    assert.ok(fs.readFileSync(msg.payload).equals(heronBytes));
    // Cut with megabytes received, some of them still on their way to the disk.
    fs.writeFileSync(msg.payload, 'mine');
    cloud.generation.storage.faults.add({ path: /^\/files\//, breakAfterBytes: 9 << 20, times: 10 });
    const failure = await failureOf('n', { payload: heron }, 15000);
    assert.match(failure.error.message, /"heron.bin" broke off/);
    assert.deepEqual(fs.readdirSync(target), [heron.filename]);
    assert.equal(fs.readFileSync(msg.payload, 'utf8'), 'mine');
  });

  it('file mode takes msg.directory, and refuses without any directory', async () => {
    await load(flowWith({ type: 'graph-gen-download', mode: 'file' }, { baseUrl: cloud.url }));
    const target = path.join(directory, 'from-msg');
    const msg = await outputOf('n', { payload: owl, directory: target });
    assert.equal(msg.payload, path.join(target, owl.filename));
    assert.ok(fs.readFileSync(msg.payload).equals(owlBytes));
    const failure = await failureOf('n', { payload: owl });
    assert.match(failure.error.message, /file mode needs a directory/);
  });

  for (const name of ['../escape.png', '..', '/etc/passwd', 'a/b.png', 'a\\b.png']) {
    it(`file mode refuses the name ${JSON.stringify(name)}, which would leave the directory`, async () => {
      const ref = { filename: name, subfolder: '', type: 'output' };
      cloud.generation.addFile(ref, { content: Buffer.from('x') });
      await load(
        flowWith(
          { type: 'graph-gen-download', mode: 'file', directory, directoryType: 'str' },
          { baseUrl: cloud.url },
        ),
      );
      const failure = await failureOf('n', { payload: ref });
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, /would leave the download directory/);
      assert.equal(cloud.counters.count('/api/view'), 0);
      assert.equal(fs.existsSync(path.join(directory, '..', 'escape.png')), false);
    });
  }

  describe("the target's place is checked before the transfer", () => {
    let place;
    beforeEach(() => {
      place = fs.mkdtempSync(path.join(directory, 'place-'));
    });
    const loadInto = (own = {}) =>
      load(flowWith({ type: 'graph-gen-download', mode: 'file', ...own }, { baseUrl: cloud.url }));

    it('a msg.directory that is a file, or lies below one, is refused and nothing is downloaded', async () => {
      const file = path.join(place, 'notes.txt');
      fs.writeFileSync(file, 'mine');
      await loadInto();
      for (const target of [file, path.join(file, 'below')]) {
        const failure = await failureOf('n', { payload: fox, directory: target });
        assert.equal(failure.error.code, 'invalid_input', target);
        assert.equal(
          failure.error.message,
          `"${fox.filename}" cannot be saved: ${target} is not a directory (a file is in its place or in its path): choose another directory`,
        );
      }
      assert.equal(fs.readFileSync(file, 'utf8'), 'mine');
      assert.equal(cloud.counters.count('/api/view'), 0);
    });

    it('a name longer than the file system allows is refused and nothing is downloaded', async () => {
      const long = { filename: `${'n'.repeat(300)}.png`, subfolder: '', type: 'output' };
      cloud.generation.addFile(long, { content: owlBytes });
      await loadInto({ overwrite: true });
      const failure = await failureOf('n', { payload: long, directory: place });
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(
        failure.error.message,
        new RegExp(
          `^"n{40}…n{8}\\.png" cannot be saved in ${place}: the name is longer than its file system allows`,
        ),
      );
      assert.equal(cloud.counters.count('/api/view'), 0);
      assert.deepEqual(fs.readdirSync(place), []);
    });

    it("a directory with the target's name is kept, with or without overwrite, and nothing is downloaded", async () => {
      fs.mkdirSync(path.join(place, fox.filename));
      for (const overwrite of [false, true]) {
        await loadInto({ overwrite });
        const failure = await failureOf('n', { payload: fox, directory: place });
        assert.equal(failure.error.code, 'invalid_input');
        assert.equal(
          failure.error.message,
          `"${fox.filename}" cannot be saved in ${place}: a directory of that name is there, and it is not replaced`,
        );
        await helper.unload();
      }
      assert.equal(cloud.counters.count('/api/view'), 0);
      assert.ok(fs.statSync(path.join(place, fox.filename)).isDirectory());
    });

    it('a directory that takes the name during the transfer fails with a file-system sentence, not network', async () => {
      const { startRogueServer } = require('../support/rogue-server');
      const rogue = await startRogueServer();
      let finish;
      rogue.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': foxBytes.length });
        res.write(foxBytes.subarray(0, 1000));
        finish = () => res.end(foxBytes.subarray(1000));
      };
      try {
        await load(
          flowWith({ type: 'graph-gen-download', mode: 'file', overwrite: true }, { baseUrl: rogue.url }),
          {},
        );
        const failure = failureOf('n', { payload: fox, directory: place });
        while (!finish || !fs.readdirSync(place).some((name) => name.endsWith('.part')))
          await new Promise((resolve) => setTimeout(resolve, 10));
        fs.mkdirSync(path.join(place, fox.filename));
        finish();
        const { error } = await failure;
        assert.equal(error.code, 'invalid_input');
        assert.equal(
          error.message,
          `"${fox.filename}" cannot be saved in ${place}: a directory of that name is there, and it is not replaced`,
        );
        assert.deepEqual(fs.readdirSync(place), [fox.filename]);
      } finally {
        await rogue.close();
      }
    });
  });

  it('a missing file fails naming it', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    const failure = await failureOf('n', {
      payload: { filename: 'gone.png', subfolder: '', type: 'output' },
    });
    assert.equal(failure.error.code, 'invalid_request');
    assert.equal(failure.error.cause.status, 404);
    assert.match(failure.error.message, /downloading "gone.png"/);
  });

  it('a storage host error fails naming the file, with no signed address in the error', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    cloud.generation.storage.faults.add({ path: /^\/files\//, status: 403, body: 'Request has expired' });
    const failure = await failureOf('n', { payload: fox });
    assert.equal(failure.error.code, 'invalid_request');
    assert.equal(failure.error.cause.status, 403);
    assert.match(failure.error.message, /storage host answered HTTP 403 for "fox_00001_.png"/);
    assert.doesNotMatch(textOf(failure.error), /signature=/);
    cloud.generation.storage.faults.add({ path: /^\/files\//, status: 500, body: 'boom' });
    const second = await failureOf('n', { payload: fox });
    assert.equal(second.error.code, 'server_error');
    assert.match(second.error.message, /HTTP 500 for "fox_00001_.png"/);
  });

  it('a 5xx from /api/view, once retries are spent, fails naming the file', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    cloud.faults.add({ path: '/api/view', status: 502, times: 10 });
    const failure = await failureOf('n', { payload: owl }, 15000);
    assert.equal(failure.error.code, 'server_error');
    assert.equal(failure.error.cause.status, 502);
    assert.match(failure.error.message, /HTTP 502 while downloading "owl_00001_.png"/);
    assert.ok(!textOf(failure).includes(API_KEY));
  });

  it('retries /api/view after a 503 and a 429 with Retry-After, then delivers the file', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    cloud.faults.add({ path: '/api/view', status: 503 });
    cloud.faults.add({ path: '/api/view', status: 429, retryAfter: 0 });
    const msg = await outputOf('n', { payload: owl });
    assert.ok(msg.payload.equals(owlBytes));
    assert.equal(cloud.counters.count('/api/view'), 3);
  });

  it('buffer mode: a chunked answer without Content-Length arrives whole too', async () => {
    const { startRogueServer } = require('../support/rogue-server');
    const rogue = await startRogueServer();
    const bytes = crypto.randomBytes(300_000);
    rogue.handle = (_req, res) => {
      res.writeHead(200, { 'content-type': 'image/png' });
      for (let at = 0; at < bytes.length; at += 70_000) res.write(bytes.subarray(at, at + 70_000));
      res.end();
    };
    try {
      await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url }), {});
      const msg = await outputOf('n', { payload: fox });
      assert.ok(msg.payload.equals(bytes));
      assert.equal(msg.contentType, 'image/png');
    } finally {
      await rogue.close();
    }
  });

  describe('buffer limit', () => {
    const { startRogueServer } = require('../support/rogue-server');
    let rogue;
    let closed;
    beforeEach(async () => {
      rogue = await startRogueServer();
      closed = 0;
    });
    afterEach(async () => rogue.close());

    /** Answers with a head that announces `announced` bytes (none: chunked) and then streams until stopped. */
    function serveEndless(announced) {
      rogue.handle = (_req, res) => {
        res.writeHead(200, {
          'content-type': 'video/mp4',
          ...(announced === undefined ? {} : { 'content-length': String(announced) }),
        });
        const chunk = Buffer.alloc(64 * 1024, 1);
        const pump = () => {
          while (!res.destroyed && res.write(chunk));
        };
        res.on('drain', pump);
        res.on('close', () => closed++);
        pump();
      };
    }

    it('refuses a file whose Content-Length is over the limit (default 512 MiB) before reading it', async () => {
      serveEndless(8 * 1024 ** 3);
      await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', { payload: fox });
      assert.equal(failure.error.code, 'invalid_input');
      assert.equal(
        failure.error.message,
        `"${fox.filename}" is 8 GiB, more than the download node's buffer limit of 512 MiB: raise "Buffer limit" in the node, or save the file with file output`,
      );
    });

    it('stops a file without Content-Length once it passes the limit set in the node', async () => {
      serveEndless(undefined);
      await load(flowWith({ type: 'graph-gen-download', bufferLimit: 2 }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', { payload: fox });
      assert.equal(failure.error.code, 'invalid_input');
      assert.equal(
        failure.error.message,
        `"${fox.filename}" is larger than the download node's buffer limit of 2 MiB: raise "Buffer limit" in the node, or save the file with file output`,
      );
      // The answer was cut off, not read on without end.
      while (closed === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      assert.equal(rogue.seen.length, 1);
    });

    it('a file within the limit arrives; file mode has no buffer limit', async () => {
      await load(flowWith({ type: 'graph-gen-download', bufferLimit: '0.05' }, { baseUrl: cloud.url }));
      const small = await outputOf('n', { payload: owl });
      assert.ok(small.payload.equals(owlBytes));
      const failure = await failureOf('n', { payload: fox });
      assert.equal(failure.error.code, 'invalid_input');
      assert.equal(
        failure.error.message,
        `"${fox.filename}" is 70000 bytes, more than the download node's buffer limit of 52429 bytes: raise "Buffer limit" in the node, or save the file with file output`,
      );
      await helper.unload();
      const target = path.join(directory, 'unlimited');
      await loadFileMode(target, { bufferLimit: 0.01 });
      const saved = await outputOf('n', { payload: fox });
      assert.ok(fs.readFileSync(saved.payload).equals(foxBytes));
    });
  });

  it('refuses a payload that names no file', async () => {
    await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: cloud.url }));
    const failure = await failureOf('n', { payload: 'fox.png' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /msg.payload must be a file reference/);
    const second = await failureOf('n', { payload: [fox, { subfolder: '' }] });
    assert.match(second.error.message, /file reference 2 of msg.payload has no filename/);
  });
});
