'use strict';
// The one reader of Comfy API v2 answers (dialects/comfy-api-v2/v2-answers.ts), fed hostile values: a Job, a
// list of jobs, an Asset, an output item, the error envelope. Each never throws, keeps only bounded values
// (job ids of at most 200 characters, asset ids, names and words cut or left out), and never says a wrong
// fact: a status that is not a word is unreadable (never `unknown`, never an end), `unknown` comes only from
// `expired`, an end only from its own word, outputs only when every item could be read, and a list that may
// leave jobs out is a page.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const answers = require('../../dist/generation/dialects/comfy-api-v2/v2-answers');
const { MAX_JOB_ID_LENGTH } = require('../../dist/generation/jobs/job-ids');
const { promptIdsOf } = require('../../dist/generation/transfer/rest-client');

const {
  V2_LIMITS,
  V2_STATUSES,
  readV2Job,
  readV2JobList,
  readV2Asset,
  readV2Error,
  readV2OutputItem,
  answerOfJobBody,
  endedAnswerOfBody,
  queueReadOfBody,
  queueStateOf,
  cancelKindOfBody,
  todaysRefusalBody,
} = answers;

const HUGE = 'x'.repeat(200_000);
const ENDS = new Map([
  ['succeeded', 'completed'],
  ['failed', 'failed'],
  ['canceled', 'cancelled'],
]);

/** A record's own property, as the reader must read it. */
function own(value, key) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, key)
    ? value[key]
    : undefined;
}

const word = () =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...V2_STATUSES) },
    fc.constantFrom(...PROTOTYPE_WORDS, 'EXPIRED', ' expired', 'completed', 'x'.repeat(300)),
    fc.string({ maxLength: 20 }),
  );
const id = () =>
  fc.oneof(
    { weight: 3, arbitrary: fc.uuid() },
    fc.constantFrom(...PROTOTYPE_WORDS, '', 'x'.repeat(201), HUGE),
    fc.string({ maxLength: 30 }),
    hostileJson(),
  );
const text = () =>
  fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom(...PROTOTYPE_WORDS, HUGE, ''), hostileJson());
const outputItem = () =>
  fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record(
        {
          id: fc.oneof({ weight: 3, arbitrary: fc.uuid() }, text()),
          node_id: fc.oneof(fc.constantFrom('9', ...PROTOTYPE_WORDS), fc.integer(), text()),
          name: fc.oneof({ weight: 3, arbitrary: fc.constantFrom('a.png', 'b.mp4') }, text()),
          type: fc.oneof(
            fc.constantFrom('image', 'video', 'audio', 'text', 'latent', ...PROTOTYPE_WORDS),
            text(),
          ),
          content_type: text(),
        },
        { requiredKeys: [] },
      ),
    },
    hostileJson(),
  );
const jobBody = () =>
  fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record(
        {
          id: id(),
          status: fc.oneof({ weight: 3, arbitrary: word() }, hostileJson()),
          queue_position: fc.oneof(fc.integer({ min: -2, max: 20 }), hostileJson()),
          outputs: fc.oneof(
            { weight: 3, arbitrary: fc.array(outputItem(), { maxLength: 6 }) },
            hostileJson(),
          ),
          error: fc.oneof(
            fc.record({
              code: text(),
              message: text(),
              node_id: text(),
              class_type: text(),
              traceback: hostileJson(),
            }),
            hostileJson(),
          ),
          metadata: text(),
          created_at: fc.oneof(
            fc.date().map((date) => (Number.isNaN(date.getTime()) ? 'x' : date.toISOString())),
            text(),
          ),
        },
        { requiredKeys: ['id', 'status'] },
      ),
    },
    hostileJson(),
  );
const listBody = () =>
  fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record(
        {
          jobs: fc.oneof({ weight: 4, arbitrary: fc.array(jobBody(), { maxLength: 12 }) }, hostileJson()),
          truncated: fc.oneof({ weight: 3, arbitrary: fc.constant(false) }, fc.boolean(), hostileJson()),
        },
        { requiredKeys: ['jobs'] },
      ),
    },
    hostileJson(),
  );

function assertJobId(value) {
  assert.equal(typeof value, 'string');
  assert.ok(
    value.length > 0 && value.length <= MAX_JOB_ID_LENGTH,
    `an id of ${value.length} characters kept`,
  );
}

function assertOutputItem(item) {
  assert.ok(typeof item.id === 'string' && item.id.length > 0 && item.id.length <= V2_LIMITS.assetId);
  assert.ok(typeof item.name === 'string' && item.name.length > 0 && item.name.length <= V2_LIMITS.name);
  assert.ok(
    typeof item.node_id === 'string' && item.node_id.length > 0 && item.node_id.length <= V2_LIMITS.nodeId,
  );
  assert.ok(typeof item.type === 'string' && item.type.length <= V2_LIMITS.shortText);
  if (item.content_type !== undefined) assert.ok(item.content_type.length <= V2_LIMITS.shortText);
}

/** The files in today's outputs shape, counted. */
function filesIn(outputs) {
  let count = 0;
  for (const output of Object.values(outputs))
    for (const list of Object.values(output)) if (Array.isArray(list)) count += list.length;
  return count;
}

/** The checks every lookup answer passes, whatever it came from. */
function assertAnswerShape(answer) {
  assert.ok(['phase', 'unknown', 'unreadable'].includes(answer.kind), answer.kind);
  if (answer.kind === 'unreadable') {
    assert.equal(typeof answer.message, 'string');
    assert.ok(answer.message.length <= 1000, 'an unreadable answer says why in a bounded sentence');
  }
  if (answer.kind === 'phase' && answer.word !== undefined) assert.ok(answer.word.length <= V2_LIMITS.word);
  if (answer.kind === 'phase' && answer.error) {
    assert.ok(answer.error.exception_type.length <= V2_LIMITS.shortText);
    assert.ok(answer.error.exception_message.length <= V2_LIMITS.message);
  }
}

describe('v2 answers (fuzzed)', () => {
  afterEach(() => {
    // No reader may have written to a prototype.
    assert.deepEqual(Object.keys(Object.prototype), []);
    assert.deepEqual(Object.keys(Array.prototype), []);
  });

  it('a Job answer never throws, and its status says only what its word says', () => {
    fc.assert(
      fc.property(jobBody(), (body) => {
        const read = readV2Job(body);
        const answer = answerOfJobBody(body);
        assertAnswerShape(answer);
        const status = own(body, 'status');
        if (!read.ok) {
          // Could not read: never unknown, never a phase.
          assert.equal(answer.kind, 'unreadable');
          return;
        }
        assertJobId(read.value.id);
        assert.ok(read.value.word.length <= V2_LIMITS.word);
        assert.equal(typeof status, 'string', 'a job was read from a status that is no word');
        if (read.value.metadata !== undefined) assert.ok(read.value.metadata.length <= V2_LIMITS.metadata);
        for (const item of read.value.outputs) assertOutputItem(item);
        if (answer.kind === 'unknown') assert.equal(status, 'expired');
        if (status === 'expired') assert.equal(answer.kind, 'unknown');
        if (answer.kind === 'phase') {
          if (['completed', 'failed', 'cancelled'].includes(answer.phase))
            assert.equal(ENDS.get(status), answer.phase);
          if (answer.phase === 'pending') assert.equal(status, 'queued');
          if (answer.outputs !== undefined) {
            // Outputs only whole: every item the answer held is in them.
            const items = own(body, 'outputs');
            assert.equal(filesIn(answer.outputs), Array.isArray(items) ? items.length : 0);
          }
          if (answer.error) assert.equal(answer.phase, 'failed');
        }
      }),
      fuzzOptions(300),
    );
  });

  it('a status that is no word, or a prototype word, never ends a job nor makes it unknown', () => {
    fc.assert(
      fc.property(
        fc.uuid(),
        fc.oneof(
          hostileJson().filter((value) => typeof value !== 'string'),
          fc.constantFrom(...PROTOTYPE_WORDS, HUGE),
        ),
        (jobId, status) => {
          const answer = answerOfJobBody({ id: jobId, status, outputs: [] });
          if (typeof status !== 'string') assert.equal(answer.kind, 'unreadable');
          else assert.deepEqual([answer.kind, answer.phase], ['phase', 'running']);
          const ended = endedAnswerOfBody({ id: jobId, status });
          assert.equal(ended.kind, 'unreadable');
          assert.equal(cancelKindOfBody({ id: jobId, status }), 'unconfirmed');
        },
      ),
      fuzzOptions(200),
    );
  });

  it('an ended answer is found only for an end, none only for expired', () => {
    fc.assert(
      fc.property(jobBody(), (body) => {
        const ended = endedAnswerOfBody(body);
        assert.ok(['found', 'none', 'unreadable'].includes(ended.kind));
        const status = own(body, 'status');
        if (ended.kind === 'none') assert.equal(status, 'expired');
        if (ended.kind === 'found') {
          assert.ok(ENDS.has(status), String(status));
          const items = own(body, 'outputs');
          assert.equal(filesIn(ended.outputs), Array.isArray(items) ? items.length : 0);
          if (ended.error) assert.equal(status, 'failed');
        }
        const kind = cancelKindOfBody(body);
        if (kind === 'removed') assert.equal(status, 'expired');
        if (kind === 'interrupted') assert.ok(status === 'canceling' || status === 'canceled');
        if (kind === 'notQueued') assert.ok(status === 'succeeded' || status === 'failed');
      }),
      fuzzOptions(300),
    );
  });

  it('a list never throws, keeps only job ids, and is a page whenever it may leave jobs out', () => {
    fc.assert(
      fc.property(listBody(), fc.integer({ min: 1, max: 12 }), (body, limit) => {
        const read = queueReadOfBody(body, limit);
        const jobs = own(body, 'jobs');
        if (!Array.isArray(jobs)) {
          assert.equal(read.kind, 'unreadable');
          return;
        }
        assert.equal(read.kind, 'read');
        const named = [...read.running, ...read.pending, ...read.ended.keys()];
        for (const each of named) assertJobId(each);
        assert.ok(named.length <= jobs.length, 'no more jobs than the answer held');
        for (const each of read.running) assert.ok(!read.pending.has(each) && !read.ended.has(each));
        for (const each of read.pending) assert.ok(!read.ended.has(each));
        assert.deepEqual([...read.ahead.keys()].sort(), [...read.pending].sort());
        for (const ahead of read.ahead.values())
          assert.ok(Number.isSafeInteger(ahead) && ahead >= 0, String(ahead));
        for (const answer of read.ended.values()) {
          assertAnswerShape(answer);
          assert.ok(answer.kind === 'unknown' || ['completed', 'failed', 'cancelled'].includes(answer.phase));
        }
        if (own(body, 'truncated') !== false || jobs.length >= limit || read.dropped)
          assert.equal(read.partial, true);
        // Every entry that names a job is placed, or the read is a page.
        const readable = jobs.map((entry) => readV2Job(entry)).filter((job) => job.ok);
        if (readable.length !== jobs.length) assert.equal(read.partial, true);

        const list = readV2JobList(body);
        const state = queueStateOf(list.value, limit);
        const running = promptIdsOf(state.queue_running);
        const pending = promptIdsOf(state.queue_pending);
        for (const each of [...running, ...pending]) assertJobId(each);
        const positions = state.queue_pending
          .map((entry) => entry.queue_position)
          .filter((p) => p !== undefined);
        assert.deepEqual(
          positions,
          [...positions].sort((a, b) => a - b),
        );
      }),
      fuzzOptions(300),
    );
  });

  it('a list of more jobs than it reads is a page, and keeps no more than its bound', () => {
    const entries = Array.from({ length: V2_LIMITS.jobs + 5 }, (_, index) => ({
      id: `job-${index}`,
      status: 'queued',
      queue_position: index + 1,
    }));
    const read = queueReadOfBody({ jobs: entries, truncated: false }, 100_000);
    assert.equal(read.pending.size, V2_LIMITS.jobs);
    assert.equal(read.partial, true);
    assert.equal(read.dropped.count, 5);
  });

  it('outputs past the bound, or one that cannot be read, leave the job without outputs (not a part for the whole)', () => {
    const jobId = '0a0b0c0d-0000-4000-8000-000000000000';
    const item = (n) => ({ id: `a${n}`, node_id: '9', name: `${n}.png`, type: 'image' });
    const many = Array.from({ length: V2_LIMITS.outputs + 1 }, (_, n) => item(n));
    const answer = answerOfJobBody({ id: jobId, status: 'succeeded', outputs: many });
    assert.equal(answer.phase, 'completed');
    assert.equal(answer.outputs, undefined);
    assert.equal(endedAnswerOfBody({ id: jobId, status: 'succeeded', outputs: many }).kind, 'unreadable');
    const oneBad = [item(1), { id: HUGE, node_id: '9', name: 'x.png', type: 'image' }];
    assert.equal(answerOfJobBody({ id: jobId, status: 'succeeded', outputs: oneBad }).outputs, undefined);
    // A node id that is a prototype word is a key like any other.
    const proto = answerOfJobBody({
      id: jobId,
      status: 'succeeded',
      outputs: [{ ...item(1), node_id: '__proto__' }],
    });
    assert.ok(Object.hasOwn(proto.outputs, '__proto__'));
    assert.equal(proto.outputs.__proto__.images[0].filename, '1.png');
  });

  it('an output item, an asset and an error envelope are read bounded, or not at all', () => {
    fc.assert(
      fc.property(
        outputItem(),
        fc.oneof(
          fc.record(
            {
              id: text(),
              hash: fc.oneof(
                fc.constantFrom(`blake3:${'a'.repeat(64)}`, `BLAKE3:${'A'.repeat(64)}`, 'blake3:zz'),
                text(),
              ),
              size_bytes: hostileJson(),
              content_type: text(),
              file_path: text(),
              created_new: hostileJson(),
            },
            { requiredKeys: [] },
          ),
          hostileJson(),
        ),
        fc.oneof(
          fc.record({
            error: fc.oneof(
              fc.record(
                {
                  code: text(),
                  message: text(),
                  details: fc.oneof(fc.record({ node_errors: hostileJson() }), hostileJson()),
                },
                { requiredKeys: [] },
              ),
              hostileJson(),
            ),
          }),
          hostileJson(),
        ),
        (itemBody, assetBody, errorBody) => {
          const item = readV2OutputItem(itemBody);
          if (item.ok) assertOutputItem(item.value);
          else assert.equal(typeof item.reason, 'string');
          const asset = readV2Asset(assetBody);
          if (asset.ok) {
            assert.ok(asset.value.id.length > 0 && asset.value.id.length <= V2_LIMITS.assetId);
            if (asset.value.hash !== undefined) assert.match(asset.value.hash, /^blake3:[0-9a-f]{64}$/);
            if (asset.value.sizeBytes !== undefined) assert.ok(Number.isSafeInteger(asset.value.sizeBytes));
            if (asset.value.filePath !== undefined) assert.ok(asset.value.filePath.length <= V2_LIMITS.name);
            if (asset.value.createdNew !== undefined) assert.equal(typeof asset.value.createdNew, 'boolean');
          }
          const envelope = readV2Error(errorBody);
          if (envelope) {
            assert.ok(envelope.code.length > 0 && envelope.code.length <= V2_LIMITS.shortText);
            if (envelope.message !== undefined) assert.ok(envelope.message.length <= V2_LIMITS.message);
          }
          const todays = todaysRefusalBody(envelope);
          assert.equal(typeof todays.error.type, 'string');
          if (todays.node_errors !== undefined) assert.equal(typeof todays.node_errors, 'object');
        },
      ),
      fuzzOptions(300),
    );
  });

  it('values nested deep are read without walking them', () => {
    const deep = JSON.parse(deepJson(20_000, '0', 'x'));
    const deepList = JSON.parse(deepJson(20_000));
    const jobId = '0a0b0c0d-0000-4000-8000-000000000001';
    for (const body of [
      deep,
      deepList,
      { id: jobId, status: 'failed', error: deep, outputs: deepList, metadata: deep },
      { id: jobId, status: 'succeeded', outputs: [{ id: 'a', node_id: '9', name: deep, type: 'image' }] },
      { jobs: [deepList, { id: jobId, status: 'queued', queue_position: deep }], truncated: deep },
    ]) {
      assertAnswerShape(answerOfJobBody(body));
      endedAnswerOfBody(body);
      queueReadOfBody(body, 100);
      readV2Asset(body);
      todaysRefusalBody(readV2Error({ error: { code: 'invalid_workflow', details: { node_errors: deep } } }));
    }
    const read = queueReadOfBody(
      { jobs: [deepList, { id: jobId, status: 'queued', queue_position: deep }], truncated: false },
      100,
    );
    assert.equal(read.partial, true);
    // A waiting job waits for one running at least (whoever's), though the list names none.
    assert.equal(read.ahead.get(jobId), 1);
  });
});
