'use strict';
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, flowWith, load, failureOf, outputOf } = require('../support/generation-nodes');

describe('graph-gen-upload', () => {
  let sandbox;
  let directory;

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY });
    directory = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-upload-'));
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
    fs.rmSync(directory, { recursive: true, force: true });
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
    sandbox.generation.uploads.length = 0;
  });
  afterEach(async () => helper.unload());

  const sha = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');
  const uploads = () => sandbox.counters.matching(/^\/api\/upload\//, 'POST');

  it('uploads a Buffer as msg.filename and sends the result on, keeping the msg', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const bytes = crypto.randomBytes(5000);
    const msg = await outputOf('n', { payload: bytes, filename: 'fox.png', topic: 't', mine: 1 });
    assert.deepEqual(msg.payload, { name: 'fox.png', subfolder: '', type: 'input' });
    assert.equal(msg.filename, 'fox.png');
    assert.equal(msg.topic, 't');
    assert.equal(msg.mine, 1);
    const [upload] = sandbox.generation.uploads;
    assert.equal(upload.route, 'image');
    assert.equal(upload.sha256, sha(bytes));
    assert.equal(upload.fields.type, 'input');
    assert.equal(upload.fields.overwrite, 'true');
    assert.equal(upload.headers['x-api-key'], API_KEY);
    assert.match(upload.headers['content-type'], /^multipart\/form-data; boundary=/);
  });

  it('streams a file path, named after its base name; msg.type temp and msg.overwrite false are sent', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const file = path.join(directory, 'owl.png');
    const bytes = crypto.randomBytes(300_000);
    fs.writeFileSync(file, bytes);
    const msg = await outputOf('n', { payload: file, type: 'temp', overwrite: false });
    assert.equal(msg.filename, 'owl.png');
    const [upload] = sandbox.generation.uploads;
    assert.equal(upload.size, bytes.length);
    assert.equal(upload.sha256, sha(bytes));
    assert.equal(upload.fields.type, 'temp');
    assert.equal(upload.fields.overwrite, 'false');
    assert.equal(Number(upload.headers['content-length']) > bytes.length, true);
  });

  it('takes the stored name from the TypedInput setting when set to a string', async () => {
    await load(
      flowWith(
        { type: 'graph-gen-upload', filename: 'fixed.png', filenameType: 'str' },
        { baseUrl: sandbox.url },
      ),
    );
    const msg = await outputOf('n', { payload: Buffer.from('abc'), filename: 'ignored.png' });
    assert.equal(msg.filename, 'fixed.png');
  });

  it('mask mode posts to /api/upload/mask with type input, subfolder clipspace and original_ref', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const original = { filename: 'fox.png', subfolder: '', type: 'input' };
    const msg = await outputOf('n', {
      payload: Buffer.from('mask bytes'),
      filename: 'mask.png',
      original_ref: original,
    });
    assert.deepEqual(msg.payload, { name: 'mask.png', subfolder: 'clipspace', type: 'input' });
    const [upload] = sandbox.generation.uploads;
    assert.equal(upload.route, 'mask');
    assert.equal(upload.fields.type, 'input');
    assert.equal(upload.fields.subfolder, 'clipspace');
    assert.deepEqual(JSON.parse(upload.fields.original_ref), original);
  });

  it('the mask setting uses the mask route too, and refuses an original_ref without filename before sending', async () => {
    await load(flowWith({ type: 'graph-gen-upload', mode: 'mask' }, { baseUrl: sandbox.url }));
    const failure = await failureOf('n', { payload: Buffer.from('m'), filename: 'm.png' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /original_ref must name the image/);
    const second = await failureOf('n', {
      payload: Buffer.from('m'),
      filename: 'm.png',
      original_ref: { subfolder: '' },
    });
    assert.match(second.error.message, /original_ref/);
    assert.equal(uploads().length, 0);
  });

  const refusals = [
    ['a missing file', () => ({ payload: path.join(directory, 'nope.png') }), /does not exist: .*nope\.png/],
    ['a directory', () => ({ payload: directory }), /is a directory/],
    ['an empty Buffer', () => ({ payload: Buffer.alloc(0), filename: 'x.png' }), /empty/],
    [
      'an empty file',
      () => {
        const file = path.join(directory, 'empty.png');
        fs.writeFileSync(file, '');
        return { payload: file };
      },
      /empty: .*empty\.png/,
    ],
    ['a number payload', () => ({ payload: 7 }), /must be a Buffer .* or a string/],
    ['a Buffer without a name', () => ({ payload: Buffer.from('x') }), /msg.filename is needed/],
    [
      'a bad msg.type',
      () => ({ payload: Buffer.from('x'), filename: 'x.png', type: 'output' }),
      /msg.type must be/,
    ],
  ];
  for (const [what, makeMsg, message] of refusals) {
    it(`refuses ${what} with a clear error and sends nothing`, async () => {
      await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
      const failure = await failureOf('n', makeMsg());
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, message);
      assert.equal(uploads().length, 0);
    });
  }

  it('an upload that reached the server is not repeated after a 5xx', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    sandbox.faults.add({ path: '/api/upload/image', status: 502 });
    const failure = await failureOf('n', { payload: Buffer.from('x'), filename: 'x.png' });
    assert.equal(failure.error.code, 'server_error');
    assert.match(failure.error.message, /uploading "x.png"/);
    assert.equal(uploads().length, 1);
  });

  it('streams a file of many read chunks whole, its part sized exactly, the name without its directory', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const file = path.join(directory, 'large.bin');
    const bytes = crypto.randomBytes(5 * 1024 * 1024 + 123);
    fs.writeFileSync(file, bytes);
    const msg = await outputOf('n', { payload: file, filename: 'sub/dir/heron.png' }, 15000);
    assert.equal(msg.payload.name, 'heron.png');
    const [upload] = sandbox.generation.uploads;
    assert.equal(upload.size, bytes.length);
    assert.equal(upload.sha256, sha(bytes));
    assert.equal(upload.contentType, 'image/png');
    assert.deepEqual(upload.fields, { type: 'input', overwrite: 'true' });
  });

  it('a redeploy during a file upload stops it and closes the file', async () => {
    // The server reads nothing for 30 s: the upload stalls with the file open, part sent, part not.
    sandbox.faults.add({ path: '/api/upload/image', delayMs: 30_000 });
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const file = path.join(directory, 'stalled.bin');
    fs.writeFileSync(file, crypto.randomBytes(32 * 1024 * 1024));
    /** This process's descriptors open on the file (Linux: /proc/self/fd). */
    const openOnFile = () =>
      fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return fs.readlinkSync(`/proc/self/fd/${fd}`) === file;
        } catch {
          return false; // closed between the listing and the look
        }
      }).length;
    const waitFor = async (condition, what) => {
      const deadline = Date.now() + 5000;
      while (!condition()) {
        if (Date.now() > deadline) assert.fail(what);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    };
    helper.getNode('n').receive({ payload: file });
    await waitFor(() => openOnFile() > 0, 'the upload never opened the file');
    await helper.unload();
    await waitFor(() => openOnFile() === 0, 'the file stayed open after the redeploy');
    assert.equal(sandbox.generation.uploads.length, 0);
  });

  it('encodes quotes and line breaks in the file name as browsers do', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }));
    const msg = await outputOf('n', { payload: Buffer.from('x'), filename: 'a "b"\r\n.png' });
    assert.equal(msg.filename, 'a %22b%22%0D%0A.png');
    assert.equal(sandbox.generation.uploads[0].contentType, 'image/png');
  });
});
