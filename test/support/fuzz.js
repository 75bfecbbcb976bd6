'use strict';
// Shared by the property-based tests (test/fuzz): a fixed seed and a number of runs CI can afford, more on
// demand (`npm run fuzz` sets FUZZ_RUNS; FUZZ_SEED replays a failure that a run printed).
const fc = require('fast-check');

const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : 27;
const runs = process.env.FUZZ_RUNS ? Number(process.env.FUZZ_RUNS) : undefined;

/** fast-check's options for one property: `ciRuns` in `npm test`, FUZZ_RUNS when set. */
function fuzzOptions(ciRuns) {
  return { seed, numRuns: runs ?? ciRuns, endOnFailure: true };
}

/** Words that name a plain object's prototype members: as keys and as values they must mean nothing. */
const PROTOTYPE_WORDS = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'valueOf',
  'hasOwnProperty',
  'isPrototypeOf',
  'propertyIsEnumerable',
  'toLocaleString',
  '__defineGetter__',
  '__lookupGetter__',
];

/** A JSON text nesting `depth` levels of arrays (or objects under `key`) around `inner`. */
function deepJson(depth, inner = '0', key) {
  return key === undefined
    ? '['.repeat(depth) + inner + ']'.repeat(depth)
    : `{"${key}":`.repeat(depth) + inner + '}'.repeat(depth);
}

/**
 * Hostile JSON values: prototype words as keys and as values, `{"toString": 1}` and friends, wrong types, huge
 * strings and numbers, deep nesting. Parsed from text, as they reach the readers (JSON.parse makes `__proto__`
 * an own property).
 */
function hostileJson() {
  const word = fc.oneof(fc.constantFrom(...PROTOTYPE_WORDS), fc.string({ maxLength: 12 }));
  const leaf = fc.oneof(
    fc.constantFrom(...PROTOTYPE_WORDS),
    fc.string({ maxLength: 40 }),
    fc.constantFrom('x'.repeat(200_000), ''),
    fc.double(),
    fc.constantFrom(1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, -0, 0),
    fc.integer(),
    fc.boolean(),
    fc.constant(null),
    fc.constantFrom(
      { toString: 1 },
      { valueOf: 1, toString: 'x' },
      { toJSON: 1 },
      JSON.parse('{"__proto__": 1}'),
    ),
  );
  const { tree } = fc.letrec((tie) => ({
    tree: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, tie('array'), tie('object')),
    array: fc.array(tie('tree'), { maxLength: 5 }),
    object: fc.dictionary(word, tie('tree'), { maxKeys: 6 }),
  }));
  return tree.map((value) => JSON.parse(JSON.stringify(value) ?? 'null'));
}

module.exports = { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS };
