'use strict';
// The resume journal and the kept msg against hostile input (src/persist/journal.ts, kept-awaits.ts): a journal
// file made of any lines is read without throwing, into well-typed entries within its bounds, and left whole by
// the next write; a msg of any content is kept and restored as itself (what can be restored of it), or refused
// with a reason.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { Journal } = require('../../dist/persist/journal');
const { readJsonText } = require('../../dist/boundary/outside');
const { fileId } = require('../../dist/nodes/node-state');
const {
  keptMessage,
  readKeptAwait,
  restoredMessage,
  KEPT_BUFFER_BYTES,
} = require('../../dist/generation/jobs/kept-awaits');

const MAX_LINE = 4096;
const MAX_STATE = 20_000;

const key = fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS), fc.string({ maxLength: 20 }));
const keptAwait = fc.record(
  {
    config: fc.oneof(fc.string({ maxLength: 10 }), hostileJson()),
    msg: fc.oneof(hostileJson(), fc.dictionary(key, hostileJson(), { maxKeys: 4 })),
    deadline: fc.oneof(fc.double(), fc.integer(), hostileJson()),
  },
  { requiredKeys: [] },
);
/** One line of a journal file as anything may have written it. */
const line = fc.oneof(
  fc.string({ maxLength: 80 }),
  hostileJson().map((value) => JSON.stringify(value)),
  fc.record({ k: fc.oneof(key, hostileJson()), v: keptAwait }).map((change) => JSON.stringify(change)),
  fc.record({ k: key, v: keptAwait }, { requiredKeys: ['k'] }).map((change) => JSON.stringify(change)),
  fc
    .record({
      k: key,
      v: fc.record({ config: fc.string(), msg: fc.dictionary(key, hostileJson(), { maxKeys: 4 }) }),
    })
    .map((change) => JSON.stringify(change)),
  key.map((k) => JSON.stringify({ k })),
  fc
    .integer({ min: MAX_LINE - 50, max: MAX_LINE * 3 })
    .map((size) => JSON.stringify({ k: 'huge', v: { config: 'cfg', msg: { text: 'x'.repeat(size) } } })),
  fc
    .integer({ min: 200, max: 3000 })
    .map((depth) => `{"k":"deep","v":{"config":"c","msg":{"m":${deepJson(depth)}}}}`),
  fc.constantFrom('{"__proto__":{"k":"x"},"v":1}', '{"k":"x","v":{"__proto__":{"config":"c","msg":{}}}}'),
);

function wellTyped(entry) {
  const [k, v] = entry;
  assert.equal(typeof k, 'string');
  assert.equal(typeof v.config, 'string');
  assert.ok(v.msg !== null && typeof v.msg === 'object' && !Array.isArray(v.msg));
  assert.ok(v.deadline === undefined || Number.isFinite(v.deadline));
  assert.deepEqual(
    Object.keys(v).filter((name) => !['config', 'msg', 'deadline'].includes(name)),
    [],
  );
}

/** A msg's content of any kind: JSON, Buffers, what cannot be restored, shared and self-referring parts. */
const anyContent = fc.oneof(
  hostileJson(),
  fc.anything({ withBigInt: true, withDate: true, withMap: true, withSet: true, withTypedArray: true }),
  fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes)),
  fc.constantFrom(
    () => 1,
    Symbol('s'),
    NaN,
    new (class Socket {})(),
    { $buffer: 'AAAA' },
    { $plain: { $buffer: 'AAAA' } },
    JSON.parse('{"__proto__": {"$buffer": "AAAA"}}'),
  ),
);

function withSelfReference(value) {
  if (value === null || typeof value !== 'object' || Buffer.isBuffer(value) || Object.isFrozen(value))
    return value;
  try {
    value.self = value;
  } catch {
    // not extensible
  }
  return value;
}

describe('resume journal (fuzzed)', () => {
  let folder;
  before(() => (folder = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-journal-fuzz-'))));
  after(() => fs.rmSync(folder, { recursive: true, force: true }));

  it('a file of hostile lines is read without throwing, into well-typed entries within bounds, and one write leaves it whole', async () => {
    let run = 0;
    let withEntries = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(line, { maxLength: 12 }), fc.boolean(), async (lines, cutLast) => {
        const file = path.join(folder, `j${run++}.jsonl`);
        let text = lines.join('\n') + (lines.length > 0 ? '\n' : '');
        if (cutLast && text.length > 2) text = text.slice(0, -2);
        fs.writeFileSync(file, text);
        const logged = [];
        const options = {
          readValue: readKeptAwait,
          maxLineBytes: MAX_LINE,
          maxBytes: MAX_STATE,
          log: (message) => logged.push(message),
        };
        const journal = await Journal.open(file, options);
        const entries = journal.entries();
        if (entries.length > 0) withEntries += 1;
        let bytes = 0;
        for (const entry of entries) {
          wellTyped(entry);
          const size = Buffer.byteLength(JSON.stringify({ k: entry[0], v: entry[1] }));
          assert.ok(size <= MAX_LINE, `an entry of ${size} bytes`);
          bytes += size + 1;
        }
        assert.ok(bytes <= MAX_STATE, `${bytes} bytes kept`);
        for (const message of logged) assert.equal(typeof message, 'string');
        assert.equal(journal.set('added', { config: 'cfg', msg: { a: 1 } }).ok, true);
        await journal.close();
        const again = await Journal.open(file, options);
        assert.deepEqual(again.entries(), [
          ...entries.filter(([k]) => k !== 'added'),
          ['added', { config: 'cfg', msg: { a: 1 } }],
        ]);
        fs.rmSync(file, { force: true });
      }),
      fuzzOptions(60),
    );
    assert.ok(withEntries > run / 4, `only ${withEntries} of ${run} files gave entries`);
  });

  it('a msg of hostile content is kept and restored as itself, or refused with a reason; never throws', () => {
    fc.assert(
      fc.property(
        fc.dictionary(key, anyContent, { maxKeys: 6 }),
        fc.boolean(),
        fc.integer({ min: 10, max: 100_000 }),
        (msg, selfRef, maxBytes) => {
          if (selfRef) withSelfReference(msg);
          const kept = keptMessage(msg, maxBytes);
          if (!kept.ok) {
            assert.equal(typeof kept.reason, 'string');
            assert.ok(kept.reason.length > 0);
            return;
          }
          // Through the journal's own reader, as after a restart.
          const read = readJsonText(JSON.stringify({ k: 'x', v: { config: 'c', msg: kept.msg } }));
          assert.equal(read.ok, true, read.reason);
          const entry = readKeptAwait(read.value.v);
          assert.equal(entry.ok, true, entry.reason);
          const restored = restoredMessage(entry.value.msg);
          // What was kept is what the msg holds that can be restored: keeping it again changes nothing...
          const again = keptMessage(restored);
          assert.equal(again.ok, true);
          assert.deepEqual(again.omitted, []);
          assert.deepEqual(again.msg, kept.msg);
          // ...and nothing restored is a live object, a function or a prototype of another.
          const stack = [restored];
          while (stack.length > 0) {
            const value = stack.pop();
            assert.notEqual(typeof value, 'function');
            if (value === null || typeof value !== 'object' || Buffer.isBuffer(value)) continue;
            const prototype = Object.getPrototypeOf(value);
            assert.ok(prototype === Object.prototype || prototype === Array.prototype);
            stack.push(...Object.values(value));
          }
        },
      ),
      fuzzOptions(300),
    );
  });

  it('JSON content and Buffers come back exactly, prototype words and tag-like keys included', () => {
    const buffer = fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes));
    fc.assert(
      fc.property(fc.dictionary(key, fc.oneof(hostileJson(), buffer), { maxKeys: 6 }), (msg) => {
        const kept = keptMessage(msg);
        assert.equal(kept.ok, true);
        assert.deepEqual(kept.omitted, []);
        const restored = restoredMessage(JSON.parse(JSON.stringify(kept.msg)));
        // JSON writes -0 as 0: the one difference allowed.
        const expected = JSON.parse(JSON.stringify(msg), (_k, value) =>
          value && value.type === 'Buffer' && Array.isArray(value.data) && Object.keys(value).length === 2
            ? Buffer.from(value.data)
            : value,
        );
        assert.deepEqual(restored, expected);
      }),
      fuzzOptions(300),
    );
  });

  it('a kept entry of any shape is read as a kept await or refused; restoring it never throws', () => {
    fc.assert(
      fc.property(hostileJson(), (value) => {
        const entry = readKeptAwait(value);
        if (!entry.ok) return assert.equal(typeof entry.reason, 'string');
        const restored = restoredMessage(entry.value.msg);
        assert.ok(restored !== null && typeof restored === 'object');
      }),
      fuzzOptions(300),
    );
    // Deep nesting within the bound a line may have, and a Buffer too large for a msg.
    const deep = keptMessage({ deep: JSON.parse(deepJson(300)), big: Buffer.alloc(KEPT_BUFFER_BYTES + 1) });
    assert.equal(deep.ok, true);
    assert.deepEqual(deep.omitted.length, 2);
  });

  it("state file names are one node id's only (case-blind too), path-safe, and Node-RED's own ids unchanged", () => {
    const odd = fc.oneof(
      fc.constantFrom(...PROTOTYPE_WORDS, 'a:b', 'a/b', 'a_b', 'A_B', '..', '.', '', 'a\\b', 'a\u0000b'),
      fc.string({ maxLength: 80 }),
      fc.string({ unit: 'binary', maxLength: 20 }),
    );
    fc.assert(
      fc.property(fc.uniqueArray(odd, { minLength: 2, maxLength: 8 }), (ids) => {
        const names = ids.map((id) => fileId(id));
        for (const name of names) {
          assert.match(name, /^[a-z0-9.~-]{1,100}$/);
          assert.ok(name !== '.' && name !== '..');
        }
        assert.equal(new Set(names.map((name) => name.toLowerCase())).size, ids.length, ids.join(' | '));
      }),
      fuzzOptions(300),
    );
    assert.equal(fileId('0a1b2c3d4e5f6a7b'), '0a1b2c3d4e5f6a7b');
    assert.equal(fileId('1b2a3c4d.5e6f7'), '1b2a3c4d.5e6f7');
  });
});
