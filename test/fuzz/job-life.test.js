'use strict';
// A job's life and its book (src/generation/jobs/job-life.ts, job-book.ts) fed random sequences of socket
// events: the real types and prototype words, hostile data, ids repeated and out of order. What they promise:
// never throw, end at most once, never end `completed` without the server's execution_success (nor whole when
// an event was lost), and give each await a result that shares nothing with another's.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { JobBook } = require('../../dist/generation/jobs/job-book');
const { CancelRegistry } = require('../../dist/generation/jobs/cancels');
const { copyJson } = require('../../dist/boundary/outside');
const { mergeEntryOutput, mergeOutput, outputsOfEntries } = require('../../dist/generation/jobs/job-outputs');

const REAL_TYPES = [
  'execution_start',
  'executing',
  'progress',
  'progress_state',
  'executed',
  'execution_cached',
  'execution_success',
  'execution_error',
  'execution_interrupted',
  'preview',
  'text',
  'status',
];

/** A book whose server never answers: every end comes from the events alone. */
function silentBook() {
  const never = () => new Promise(() => undefined);
  const sockets = {
    isOpen: true,
    epoch: 1,
    stats: { framesReceived: 0 },
    subscribe: () => undefined,
    unsubscribe: () => undefined,
    register: () => () => undefined,
    reopen: () => undefined,
  };
  return new JobBook({
    lookup: { status: never, queue: never, ended: never, runTimeMs: never },
    cancels: new CancelRegistry(),
    sockets: () => sockets,
  });
}

/** An await that records what it is told. */
function recorder(wantsProgress) {
  return {
    wantsProgress,
    ends: [],
    onChange: () => undefined,
    onProgress: () => undefined,
    onEnd(result) {
      this.ends.push(result);
    },
  };
}

const word = fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS), fc.string({ maxLength: 8 }));

/** One event as the socket hands it on: data a parsed JSON record, with the fields the life reads often present. */
const event = fc.record({
  type: fc.oneof(
    fc.constantFrom(...REAL_TYPES),
    fc.constantFrom(...PROTOTYPE_WORDS),
    fc.string({ maxLength: 8 }),
  ),
  data: fc
    .tuple(
      fc.dictionary(word, hostileJson(), { maxKeys: 3 }),
      fc.record(
        {
          node: fc.oneof(hostileJson(), fc.constantFrom('9', null, '__proto__', 'constructor')),
          display_node: hostileJson(),
          output: fc.oneof(
            hostileJson(),
            fc.dictionary(
              word,
              fc.array(fc.record({ filename: word, subfolder: word, type: word }), { maxLength: 3 }),
            ),
          ),
          value: hostileJson(),
          max: hostileJson(),
        },
        { requiredKeys: [] },
      ),
    )
    .map(([extra, known]) => JSON.parse(JSON.stringify(Object.assign(extra, known)))),
  epoch: fc.integer({ min: 1, max: 3 }),
  eventsLost: fc.constantFrom(undefined, undefined, undefined, true),
});

/** Every object a value reaches (iteratively: results may nest deep). */
function objectsOf(value) {
  const seen = new Set();
  const stack = [value];
  while (stack.length > 0) {
    const part = stack.pop();
    if (part === null || typeof part !== 'object' || seen.has(part)) continue;
    seen.add(part);
    for (const key of Object.keys(part)) stack.push(part[key]);
  }
  return seen;
}

function assertNothingShared(a, b) {
  const ofA = objectsOf(a);
  for (const part of objectsOf(b)) assert.ok(!ofA.has(part), 'two awaits share an object of their results');
}

describe('a job life (fuzzed)', () => {
  it('never throws, ends each await at most once, and never completed without execution_success', () => {
    fc.assert(
      fc.property(fc.array(event, { maxLength: 8 }), fc.boolean(), (events, wantsProgress) => {
        const book = silentBook();
        try {
          const first = recorder(wantsProgress);
          const second = recorder(!wantsProgress);
          book.attach('job', first);
          book.attach('job', second);
          const life = book.lifeOf('job');
          for (const one of events) life.onEvent(one);
          for (const job of [first, second]) {
            assert.ok(job.ends.length <= 1, `ended ${job.ends.length} times`);
            const [result] = job.ends;
            if (result?.status === 'completed') {
              assert.ok(
                events.some((one) => one.type === 'execution_success'),
                'completed without success',
              );
              assert.ok(!events.some((one) => one.eventsLost), 'completed whole though an event was lost');
            }
          }
          assert.equal(first.ends.length, second.ends.length, 'both awaits end together');
        } finally {
          book.close();
        }
      }),
      fuzzOptions(40),
    );
  });

  it('each await, and a later one, gets a result that shares no object with another', () => {
    const success = fc.constant({ type: 'execution_success', data: {}, epoch: 1 });
    fc.assert(
      fc.property(fc.array(event, { maxLength: 8 }), (events) => {
        const book = silentBook();
        try {
          const first = recorder(false);
          const second = recorder(false);
          book.attach('job', first);
          book.attach('job', second);
          const life = book.lifeOf('job');
          // Started on one connection and succeeded on it: its events are the whole of it.
          life.onEvent({ type: 'execution_start', data: {}, epoch: 1 });
          for (const one of events)
            if (!END_TYPES.has(one.type)) life.onEvent({ ...one, epoch: 1, eventsLost: undefined });
          life.onEvent(fc.sample(success, 1)[0]);
          assert.equal(first.ends.length, 1);
          const told = JSON.parse(JSON.stringify(first.ends[0]));
          // What a flow may do to its msg.payload: every object and array of the first result changed.
          for (const part of objectsOf(first.ends[0])) {
            if (Array.isArray(part)) part.push('changed');
            else part.changed = true;
          }
          const later = recorder(false);
          book.attach('job', later);
          assert.equal(later.ends.length, 1, 'a later await gets the kept result at once');
          const results = [first.ends[0], second.ends[0], later.ends[0]];
          assert.deepEqual(results[1], told);
          assert.deepEqual(results[2], told, 'the kept result was changed through the first await');
          assertNothingShared(results[0], results[1]);
          assertNothingShared(results[0], results[2]);
          assertNothingShared(results[1], results[2]);
        } finally {
          book.close();
        }
      }),
      fuzzOptions(40),
    );
  });

  it('a job that lost an event never ends completed from its events alone', () => {
    const middle = event.filter((one) => !END_TYPES.has(one.type));
    fc.assert(
      fc.property(fc.array(middle, { maxLength: 8 }), fc.nat(), fc.boolean(), (events, at, byCall) => {
        const book = silentBook();
        try {
          const job = recorder(false);
          book.attach('job', job);
          const life = book.lifeOf('job');
          const sequence = [
            { type: 'execution_start', data: {}, epoch: 1 },
            ...events.map((one) => ({ ...one, epoch: 1, eventsLost: undefined })),
            { type: 'execution_success', data: {}, epoch: 1 },
          ];
          const lostAt = at % sequence.length;
          sequence.forEach((one, index) => {
            if (index === lostAt && byCall) life.eventsLost();
            life.onEvent(index === lostAt && !byCall ? { ...one, eventsLost: true } : one);
          });
          // The server never answers here: only its outputs read over REST could end it.
          assert.equal(job.ends.length, 0, `ended ${job.ends[0]?.status} from its events alone`);
          assert.equal(life.state, 'ending');
        } finally {
          book.close();
        }
      }),
      fuzzOptions(40),
    );
  });

  it("a running job's outputs, kept as entries, end as the same outputs as merged into one object", () => {
    const nodeId = fc.oneof(fc.constantFrom('3', '9', '75', '__proto__', 'constructor', 'toString'), word);
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            nodeId,
            event.map((one) => one.data.output),
          ),
          { maxLength: 24 },
        ),
        (reports) => {
          const merged = {};
          let entries;
          for (const [id, output] of reports) {
            mergeOutput(merged, id, output);
            entries = mergeEntryOutput(entries, id, output);
          }
          const ended = outputsOfEntries(entries);
          assert.deepEqual(Object.keys(ended), Object.keys(merged));
          for (const id of Object.keys(merged)) {
            assert.ok(Object.hasOwn(ended, id), `node ${id} is an own key`);
            assert.deepEqual(ended[id], merged[id]);
          }
          assert.equal(
            Object.getPrototypeOf(ended),
            Object.prototype,
            'a node id never changes the prototype',
          );
        },
      ),
      fuzzOptions(200),
    );
  });

  it('a result longer than 256 K characters is not kept: a later await of it asks the server', () => {
    const book = silentBook();
    try {
      const ended = (pad) => {
        const id = `job-${pad.length}`;
        book.attach(id, recorder(false));
        const life = book.lifeOf(id);
        life.onEvent({ type: 'execution_start', data: {}, epoch: 1 });
        const output = { images: [{ filename: 'a.png', subfolder: '', type: 'output' }], pad };
        life.onEvent({ type: 'executed', data: { node: '9', output }, epoch: 1, bytes: pad.length });
        life.onEvent({ type: 'execution_success', data: {}, epoch: 1 });
        const later = recorder(false);
        book.attach(id, later);
        return later;
      };
      const small = ended('x'.repeat(200 * 1024));
      assert.equal(small.ends.length, 1, 'kept: the later await has it at once');
      assert.equal(small.ends[0].outputs['9'].pad.length, 200 * 1024);
      // This book's server never answers: the later await of the large one waits for it.
      assert.equal(ended('x'.repeat(300 * 1024)).ends.length, 0);
    } finally {
      book.close();
    }
  });

  it('copyJson copies any JSON value whole, sharing no object, without recursion', () => {
    fc.assert(
      fc.property(hostileJson(), (value) => {
        const copy = copyJson(value);
        assert.deepEqual(copy, value);
        if (value !== null && typeof value === 'object') assertNothingShared(value, copy);
      }),
      fuzzOptions(150),
    );
    const deep = JSON.parse(`${'{"__proto__":['.repeat(100_000)}1${']}'.repeat(100_000)}`);
    const copy = copyJson(deep);
    let depth = 0;
    for (let part = copy; typeof part === 'object'; part = Array.isArray(part) ? part[0] : part.__proto__) {
      assert.ok(Object.hasOwn(part, '__proto__') || Array.isArray(part));
      depth += 1;
    }
    assert.equal(depth, 200_000);
  });
});

const END_TYPES = new Set(['execution_success', 'execution_error', 'execution_interrupted']);
