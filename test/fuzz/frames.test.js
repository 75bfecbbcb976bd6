'use strict';
// The socket's frame readers (frame-reader.ts, frames.ts) against hostile frames: text events with hostile
// types, prompt_ids and data, frames nested past the bound, binary frames of random bytes and hostile headers.
// They never throw, hand on only job ids that are text of bounded length, give every dropped frame a reason,
// and keep a bounded set of the jobs they see executing.
const assert = require('node:assert/strict');
const { MAX_JOB_ID_LENGTH } = require('../../dist/generation/jobs/job-ids');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { FrameReader, MAX_EXECUTING, UNREADABLE_EVENT } = require('../../dist/generation/jobs/frame-reader');
const {
  parseBinaryFrame,
  encodePreviewWithMetadata,
  encodeText,
} = require('../../dist/generation/jobs/frames');

const SECRET = 'sk-fuzz-5e6f7a8b';

/** A reader whose sink records what it is given; `progressWanted` as asked. */
function reader(progressWanted) {
  const seen = { jobs: [], drops: [], statuses: 0, notifications: [] };
  const stats = {
    framesReceived: 0,
    unknownBinaryFrames: 0,
    unattributedFrames: 0,
    progressFramesSkipped: 0,
  };
  const frames = new FrameReader([SECRET], 64 * 1024, stats, {
    progressWanted,
    epoch: 1,
    job: (promptId, event) => seen.jobs.push({ promptId, event }),
    status: (queue, data, previous) => {
      assert.ok(queue === undefined || Number.isFinite(queue));
      assert.equal(typeof data, 'object');
      // The count before is the last status frame's, or none (the first, or one it could not read came since).
      assert.ok(previous === undefined || previous === seen.lastCount, `${previous} after ${seen.lastCount}`);
      seen.lastCount = queue;
      seen.statuses += 1;
    },
    notification: (text) => seen.notifications.push(text),
    features: (data) => assert.equal(typeof data, 'object'),
    drop: (reason) => seen.drops.push(reason),
  });
  return { frames, seen, stats };
}

/** What the sink was given is what it was promised: job ids of text, bounded; a reason for each drop. */
function assertPromises({ frames, seen, stats }) {
  for (const { promptId, event } of seen.jobs) {
    assert.equal(typeof promptId, 'string');
    assert.ok(promptId.length > 0 && promptId.length <= MAX_JOB_ID_LENGTH, `a job id of ${promptId.length}`);
    assert.equal(typeof event.type, 'string');
    assert.equal(typeof event.data, 'object');
    assert.ok(!Array.isArray(event.data) && event.data !== null);
  }
  for (const reason of seen.drops) assert.ok(typeof reason === 'string' && reason.length > 0);
  for (const text of seen.notifications) assert.equal(typeof text, 'string');
  assert.ok(frames.executing.size <= MAX_EXECUTING);
  // Every frame was handed on, dropped with a reason, skipped, or is no job's (no prompt_id).
  assert.ok(seen.jobs.length + seen.drops.length + stats.progressFramesSkipped <= stats.framesReceived * 2);
}

const eventType = fc.oneof(
  fc.constantFrom(
    ...PROTOTYPE_WORDS,
    'status',
    'notification',
    'feature_flags',
    'execution_start',
    'executing',
    'executed',
    'progress',
    'progress_state',
    'execution_success',
    'execution_error',
    'execution_interrupted',
  ),
  fc.string({ maxLength: 12 }),
  hostileJson(),
);
const promptId = fc.oneof(
  fc.constantFrom(
    ...PROTOTYPE_WORDS,
    '',
    'x'.repeat(MAX_JOB_ID_LENGTH),
    'x'.repeat(MAX_JOB_ID_LENGTH + 1),
    `key ${SECRET}`,
  ),
  fc.uuid(),
  fc.string({ maxLength: 20 }),
  hostileJson(),
);
/** An event as a server writes one, every part of it possibly hostile. */
const textEvent = fc
  .record(
    {
      type: eventType,
      prompt_id: promptId,
      data: hostileJson(),
      node: fc.oneof(fc.constant(null), hostileJson()),
    },
    { requiredKeys: ['type'] },
  )
  .map(({ type, prompt_id: id, data, node }) => {
    const body = data !== null && typeof data === 'object' && !Array.isArray(data) ? { ...data } : {};
    if (id !== undefined) body.prompt_id = id;
    if (node !== undefined) body.node = node;
    return JSON.stringify({ type, data: Array.isArray(data) || data === null ? data : body });
  });
/** Text frames: events, events nested past the bound with their prompt_id last, and anything else. */
const textFrame = fc.oneof(
  { weight: 6, arbitrary: textEvent },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.integer({ min: 200, max: 3000 }),
        fc.constantFrom('executed', 'progress_state', 'toString'),
        fc.uuid(),
      )
      .map(
        ([depth, type, id]) =>
          `{"type":"${type}","data":{"node":"9","output":${deepJson(depth, `"${SECRET}"`, 'a')},"prompt_id":"${id}"}}`,
      ),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: hostileJson().map((value) => JSON.stringify(value) ?? 'null') },
);

/** Binary frames: random bytes, and the three types with hostile headers, lengths and metadata. */
const binaryFrame = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
  fc
    .tuple(
      fc.constantFrom(1, 3, 4, 0, 2, 0xffffffff),
      fc.integer({ min: 0, max: 0xffffffff }),
      fc.uint8Array({ maxLength: 64 }),
    )
    .map(([type, word, rest]) => {
      const header = Buffer.alloc(8);
      header.writeUInt32BE(type, 0);
      header.writeUInt32BE(word, 4);
      return Buffer.concat([header, Buffer.from(rest)]);
    }),
  fc
    .tuple(hostileJson(), promptId, fc.uint8Array({ minLength: 1, maxLength: 16 }))
    .map(([metadata, id, image]) => {
      const meta =
        metadata !== null && typeof metadata === 'object' && !Array.isArray(metadata) ? metadata : {};
      return encodePreviewWithMetadata({ ...meta, prompt_id: id }, Buffer.from(image));
    }),
  fc.integer({ min: 200, max: 5000 }).map((depth) => {
    const meta = Buffer.from(deepJson(depth, '1', 'a'));
    const header = Buffer.alloc(8);
    header.writeUInt32BE(4, 0);
    header.writeUInt32BE(meta.length, 4);
    return Buffer.concat([header, meta, Buffer.from([0x89, 0x50, 0x4e, 0x47])]);
  }),
  fc
    .tuple(fc.string({ maxLength: 20 }), fc.string({ maxLength: 40 }))
    .map(([node, text]) => encodeText(node, text)),
);

describe('socket frames (fuzzed)', () => {
  it('text frames: never throw, hand on only bounded text job ids, drop with a reason, keep a bounded executing set', () => {
    fc.assert(
      fc.property(fc.array(textFrame, { maxLength: 20 }), fc.boolean(), (texts, progressWanted) => {
        const read = reader(progressWanted);
        for (const text of texts) read.frames.read(Buffer.from(text), false);
        assertPromises(read);
        for (const { event } of read.seen.jobs) assert.ok(!JSON.stringify(event.data).includes(SECRET));
      }),
      fuzzOptions(80),
    );
  });

  it('a frame nested past the bound is dropped with a reason, and the job it names is told it lost an event', () => {
    fc.assert(
      fc.property(fc.integer({ min: 257, max: 20_000 }), fc.uuid(), (depth, id) => {
        const read = reader(false);
        const text = `{"type":"executed","data":{"node":"9","output":${deepJson(depth, `"${SECRET}"`)},"prompt_id":"${id}"}}`;
        read.frames.read(Buffer.from(text), false);
        assert.equal(read.seen.drops.length, 1);
        assert.match(read.seen.drops[0], /nests deeper/);
        assert.deepEqual(
          read.seen.jobs.map(({ promptId: job, event }) => [job, event.type, event.data]),
          [[id, UNREADABLE_EVENT, { prompt_id: id }]],
        );
      }),
      fuzzOptions(40),
    );
  });

  it('binary frames: parseBinaryFrame and the reader never throw; a refusal has a reason; metadata is shallow', () => {
    fc.assert(
      fc.property(fc.array(binaryFrame, { maxLength: 12 }), (buffers) => {
        const read = reader(true);
        // Some job executing, so prompt-less frames are placed.
        read.frames.read(
          Buffer.from(JSON.stringify({ type: 'execution_start', data: { prompt_id: 'p' } })),
          false,
        );
        for (const buffer of buffers) {
          const parsed = parseBinaryFrame(buffer, 64 * 1024);
          if (parsed.ok) assert.ok([1, 3, 4].includes(parsed.frame.type));
          else assert.ok(typeof parsed.reason === 'string' && parsed.reason.length > 0);
          if (parsed.ok && parsed.frame.type === 4)
            assert.ok(JSON.stringify(parsed.frame.metadata).length < 64 * 1024);
          read.frames.read(buffer, true);
        }
        assertPromises(read);
      }),
      fuzzOptions(200),
    );
  });

  it('a stream of distinct executing jobs keeps at most MAX_EXECUTING, and then places no prompt-less frame', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.uuid(), fc.string({ minLength: 1, maxLength: 8 })), {
          minLength: 1,
          maxLength: 300,
          size: 'max',
        }),
        (ids) => {
          const read = reader(true);
          for (const id of ids)
            read.frames.read(
              Buffer.from(JSON.stringify({ type: 'execution_start', data: { prompt_id: id } })),
              false,
            );
          assert.ok(read.frames.executing.size <= MAX_EXECUTING);
          const placed = read.seen.jobs.length;
          read.frames.read(encodeText('1', 'hello'), true);
          if (new Set(ids).size !== 1) assert.equal(read.seen.jobs.length, placed);
          else assert.equal(read.seen.jobs.at(-1).promptId, ids[0]);
        },
      ),
      fuzzOptions(100),
    );
  });
});
