'use strict';
const assert = require('node:assert/strict');
const {
  parseBinaryFrame,
  encodePreview,
  encodeText,
  encodePreviewWithMetadata,
} = require('../../../dist/generation/jobs/frames');
const { phaseOfStatus, isTerminal } = require('../../../dist/generation/jobs/status-words');
const {
  mergeEntryOutput,
  mergeOutput,
  filesOf,
  outputsOfEntries,
} = require('../../../dist/generation/jobs/job-outputs');

const PNG = Buffer.from('89504e470d0a1a0a0000', 'hex');
const JPEG = Buffer.from('ffd8ffe000104a464946', 'hex');

describe('binary frames', () => {
  it('reads a type-1 preview: big-endian type and image type, then the bytes', () => {
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 1, 0, 0, 0, 2]), PNG]);
    const parsed = parseBinaryFrame(frame);
    assert.equal(parsed.ok, true);
    assert.equal(parsed.frame.type, 1);
    assert.equal(parsed.frame.imageType, 'png');
    assert.deepEqual(parsed.frame.image, PNG);
    assert.equal(parseBinaryFrame(encodePreview('jpeg', JPEG)).frame.imageType, 'jpeg');
  });

  it('reads a type-3 text frame: node id of the given length, then UTF-8 text', () => {
    const parsed = parseBinaryFrame(encodeText('12', 'héllo wörld'));
    assert.deepEqual(parsed, { ok: true, frame: { type: 3, nodeId: '12', text: 'héllo wörld' } });
  });

  it('reads a type-4 preview with its metadata and tells JPEG from PNG by the bytes', () => {
    const metadata = {
      node_id: '3',
      display_node_id: '3',
      real_node_id: '3',
      prompt_id: 'p1',
      parent_node_id: null,
    };
    const png = parseBinaryFrame(encodePreviewWithMetadata(metadata, PNG));
    assert.equal(png.ok, true);
    assert.deepEqual(png.frame.metadata, metadata);
    assert.equal(png.frame.imageType, 'png');
    assert.deepEqual(png.frame.image, PNG);
    assert.equal(parseBinaryFrame(encodePreviewWithMetadata(metadata, JPEG)).frame.imageType, 'jpeg');
  });

  const bad = [
    ['empty', Buffer.alloc(0)],
    ['shorter than its header', Buffer.from([0, 0, 0, 1, 0])],
    ['a preview without image bytes', Buffer.from([0, 0, 0, 1, 0, 0, 0, 1])],
    ['a preview with an unknown image type', Buffer.concat([Buffer.from([0, 0, 0, 1, 0, 0, 0, 9]), PNG])],
    ['a text frame whose node id runs past the end', Buffer.from([0, 0, 0, 3, 0, 0, 0, 50, 0x41])],
    ['a text frame with a huge length', Buffer.from([0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0x41])],
    ['metadata that runs past the end', Buffer.from([0, 0, 0, 4, 0, 0, 1, 0, 0x7b, 0x7d])],
    [
      'metadata that is not JSON',
      Buffer.concat([Buffer.from([0, 0, 0, 4, 0, 0, 0, 3]), Buffer.from('{x}'), PNG]),
    ],
    [
      'metadata that is not an object',
      Buffer.concat([Buffer.from([0, 0, 0, 4, 0, 0, 0, 4]), Buffer.from('null'), PNG]),
    ],
    ['a type-4 frame without an image', encodePreviewWithMetadata({ prompt_id: 'p' }, Buffer.alloc(0))],
    ['an unknown type', Buffer.from([0, 0, 0, 2, 0, 0, 0, 0, 1])],
  ];
  for (const [what, frame] of bad) {
    it(`refuses ${what} with a reason, without throwing`, () => {
      const parsed = parseBinaryFrame(frame);
      assert.equal(parsed.ok, false);
      assert.equal(typeof parsed.reason, 'string');
    });
  }

  it('refuses an oversized frame and counts an unknown type as such', () => {
    assert.match(parseBinaryFrame(encodePreview('png', Buffer.alloc(2048)), 1024).reason, /oversized/);
    assert.equal(parseBinaryFrame(Buffer.from([0, 0, 0, 7, 0, 0, 0, 0])).unknownType, 7);
  });

  it('never throws on random bytes', () => {
    for (let i = 0; i < 2000; i++) {
      const frame = Buffer.alloc(Math.floor(Math.random() * 40));
      for (let j = 0; j < frame.length; j++) frame[j] = Math.floor(Math.random() * 256);
      if (frame.length >= 4) frame.writeUInt32BE([1, 3, 4][i % 3], 0);
      const parsed = parseBinaryFrame(frame);
      assert.equal(typeof parsed.ok, 'boolean');
    }
  });
});

describe('status words', () => {
  const table = {
    pending: 'pending',
    in_progress: 'running',
    completed: 'completed',
    failed: 'failed',
    cancelled: 'cancelled',
    success: 'completed',
    error: 'failed',
    non_retryable_error: 'failed',
    lost: 'failed',
    canceled: 'cancelled',
    interrupted: 'cancelled',
    submitted: 'pending',
    waiting_to_dispatch: 'pending',
    queued_waiting: 'pending',
    queued_limited: 'pending',
    executing: 'running',
    'In Progress': 'running',
    SUCCESS: 'completed',
    something_new: 'running',
    '': 'running',
  };
  for (const [word, phase] of Object.entries(table)) {
    it(`maps "${word}" to ${phase}`, () => assert.equal(phaseOfStatus(word), phase));
  }
  it('treats a missing word as running and knows which phases end a job', () => {
    assert.equal(phaseOfStatus(undefined), 'running');
    assert.equal(phaseOfStatus(42), 'running');
    assert.deepEqual(['pending', 'running', 'completed', 'failed', 'cancelled'].filter(isTerminal), [
      'completed',
      'failed',
      'cancelled',
    ]);
  });
});

describe('job outputs', () => {
  it('appends several executed outputs of one node and lists every file once', () => {
    const outputs = {};
    const ref = (name, type = 'output') => ({ filename: name, subfolder: '', type });
    mergeOutput(outputs, '9', { images: [ref('a.png')] });
    mergeOutput(outputs, '9', { images: [ref('b.png')], text: ['x'] });
    mergeOutput(outputs, '12', {
      video: [ref('c.mp4')],
      audio: [{ filename: 'd.flac', subfolder: 'sub', type: 'output' }],
    });
    mergeOutput(outputs, '13', null);
    assert.deepEqual(
      outputs['9'].images.map((f) => f.filename),
      ['a.png', 'b.png'],
    );
    assert.deepEqual(outputs['9'].text, ['x']);
    assert.deepEqual(
      filesOf(outputs).map((f) => `${f.subfolder}/${f.filename}`),
      ['/a.png', '/b.png', '/c.mp4', 'sub/d.flac'],
    );
    mergeOutput(outputs, '14', { images: [ref('a.png')] });
    assert.equal(filesOf(outputs).length, 4, 'the same file named twice is listed once');
  });

  it("a running job's outputs from a server that names 100,000 nodes: each merged without looking through the others", function () {
    // Looked up in an array, each new node would be compared with every one before it (5e9 comparisons here).
    this.timeout(5000);
    let entries;
    for (let node = 0; node < 100_000; node++) {
      entries = mergeEntryOutput(entries, `n${node}`, { images: [{ filename: `${node}.png` }] });
    }
    entries = mergeEntryOutput(entries, 'n7', { images: [{ filename: 'again.png' }] });
    const outputs = outputsOfEntries(entries);
    const ids = Object.keys(outputs);
    assert.equal(ids.length, 100_000);
    assert.deepEqual(ids.slice(0, 3), ['n0', 'n1', 'n2'], 'in the order the nodes first reported');
    assert.deepEqual(
      outputs.n7.images.map((image) => image.filename),
      ['7.png', 'again.png'],
    );
  });

  it('a node that reports 100,000 times: each report appended without copying those before', function () {
    // A copy per report would move 5e9 references here.
    this.timeout(5000);
    const outputs = {};
    let entries;
    for (let report = 0; report < 100_000; report++) {
      const output = { images: [{ filename: `${report}.png` }], text: [String(report)] };
      mergeOutput(outputs, '9', output);
      entries = mergeEntryOutput(entries, '9', output);
    }
    for (const merged of [outputs['9'], outputsOfEntries(entries)['9']]) {
      assert.equal(merged.images.length, 100_000);
      assert.equal(merged.images[99_999].filename, '99999.png');
      assert.equal(merged.text.length, 100_000);
    }
  });
});
