'use strict';
// The boundary's primitives (src/boundary/outside.ts) against hostile values: they never throw, never call a
// value's own toString, and refuse what nests too deep instead of handing it on.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, deepJson } = require('../support/fuzz');
const outside = require('../../dist/boundary/outside');

describe('boundary primitives (fuzzed)', () => {
  it('textOf, errorText and numberOf never throw and bound what they give', () => {
    fc.assert(
      fc.property(fc.oneof(hostileJson(), fc.anything()), (value) => {
        const text = outside.textOf(value, 50);
        assert.ok(text === undefined || (typeof text === 'string' && text.length <= 50));
        const words = outside.errorText(value, 50);
        assert.equal(typeof words, 'string');
        const number = outside.numberOf(value);
        assert.ok(number === undefined || Number.isFinite(number));
        if (typeof value === 'object' && value !== null) assert.equal(number, undefined);
      }),
      fuzzOptions(300),
    );
  });

  it('numberOf reads finite numbers and text that is one, and nothing blank', () => {
    for (const [value, expected] of [
      [3, 3],
      [' 2.5 ', 2.5],
      ['0', 0],
      ['', undefined],
      ['  ', undefined],
      ['x', undefined],
      [Infinity, undefined],
      [true, undefined],
      [JSON.parse('{"toString": 1}'), undefined],
      [[5], undefined],
    ])
      assert.equal(outside.numberOf(value), expected, JSON.stringify(value));
  });

  it('readJsonText reads what JSON.parse reads when shallow, and refuses what nests past the bound', () => {
    fc.assert(
      fc.property(hostileJson(), fc.integer({ min: 0, max: 400 }), (value, depth) => {
        const text = deepJson(depth, JSON.stringify(value));
        const read = outside.readJsonText(text, 300);
        if (depth > 300) assert.equal(read.ok, false);
        else if (read.ok) assert.deepEqual(read.value, JSON.parse(text));
        else assert.ok(outside.nestsDeeperThan(text, 300), read.reason);
      }),
      fuzzOptions(200),
    );
  });

  it('readTime reads RFC 3339 date-times only: any other value is no time, never some date', () => {
    fc.assert(
      fc.property(
        fc.oneof(hostileJson(), fc.anything(), fc.string({ maxLength: 40 })),
        fc.date({ min: new Date(0), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true }),
        (value, date) => {
          const time = outside.readTime(value);
          if (time !== undefined) {
            assert.equal(typeof value, 'string');
            assert.match(value, /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}/);
          }
          // Written as a server writes it (Python's isoformat with an offset, or Z), it is read exactly.
          const iso = date.toISOString();
          assert.equal(outside.readTime(iso), date.getTime());
          assert.equal(outside.readTime(iso.replace('Z', '000+00:00')), date.getTime());
        },
      ),
      fuzzOptions(300),
    );
    for (const text of ['!6!$', '6', '2026', '1 2', 'x 12', '2026-11-26', 'Thu, 26 Nov 2026 21:33:51 GMT'])
      assert.equal(outside.readTime(text), undefined, text);
    assert.equal(outside.readTime('2026-11-26T21:33:51.006331+01:00'), Date.UTC(2026, 10, 26, 20, 33, 51, 6));
    assert.equal(outside.readTime('2026-11-26T21:33:51'), Date.UTC(2026, 10, 26, 21, 33, 51));
  });

  it('a text of 100,000 levels is refused in one pass, and strings holding brackets do not count', () => {
    assert.equal(outside.readJsonText(deepJson(100_000)).ok, false);
    assert.equal(outside.readJsonText(deepJson(100_000, '0', 'toString')).ok, false);
    const brackets = JSON.stringify({ text: '['.repeat(10_000) });
    assert.deepEqual(outside.readJsonText(brackets), { ok: true, value: { text: '['.repeat(10_000) } });
    const escaped = JSON.stringify({ text: '\\"['.repeat(5_000) });
    assert.equal(outside.readJsonText(escaped).ok, true);
  });

  it('ownValue never answers with a prototype member', () => {
    fc.assert(
      fc.property(hostileJson(), fc.string(), (value, key) => {
        if (value === null || typeof value !== 'object') return;
        const got = outside.ownValue(value, key);
        if (!Object.hasOwn(value, key)) assert.equal(got, undefined);
      }),
      fuzzOptions(300),
    );
    assert.equal(outside.ownValue({}, 'constructor'), undefined);
    assert.equal(outside.ownValue(JSON.parse('{"__proto__": 5}'), '__proto__'), 5);
  });
});
