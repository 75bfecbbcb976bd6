'use strict';
// New seeds, as pure functions: which inputs take them, their ranges (JSON-safe), and the draw.
const assert = require('node:assert/strict');
const {
  applyNewSeeds,
  randomSeed,
  seedInputsByName,
  seedInputsOf,
} = require('../../../dist/generation/workflows/workflow');
const objectInfo = require('../../fixtures/object_info.json');

describe('new seeds', () => {
  it("takes a real server's seed inputs with ranges JSON numbers hold exactly (2^64 - 1 and -2^63 clamped)", () => {
    const workflow = {
      1: { class_type: 'KSampler', inputs: { seed: 5, steps: 20, model: ['9', 0] } },
      2: { class_type: 'RandomNoise', inputs: { noise_seed: 0 } },
      3: { class_type: 'PrimitiveInt', inputs: { value: 3 } },
      4: { class_type: 'ImageBlur', inputs: { blur_radius: 1, sigma: 1, image: ['9', 0] } },
      5: { class_type: 'NotOnTheServer', inputs: { seed: 1 } },
    };
    assert.deepEqual(
      seedInputsOf(workflow, (type) => objectInfo[type]),
      [
        { id: '1', input: 'seed', min: 0, max: Number.MAX_SAFE_INTEGER },
        { id: '2', input: 'noise_seed', min: 0, max: Number.MAX_SAFE_INTEGER },
        { id: '3', input: 'value', min: -Number.MAX_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER },
      ],
    );
  });

  it('by name, without definitions: number inputs named seed or noise_seed only', () => {
    const workflow = {
      1: { class_type: 'A', inputs: { seed: 5, steps: 20 } },
      2: { class_type: 'B', inputs: { noise_seed: 0, seed: ['1', 0], value: 3 } },
      3: { class_type: 'C', inputs: { seed: '7' } },
    };
    assert.deepEqual(
      seedInputsByName(workflow).map(({ id, input }) => `${id}.${input}`),
      ['1.seed', '2.noise_seed'],
    );
  });

  it('draws whole numbers over the whole range, high bits included', () => {
    const draws = Array.from({ length: 400 }, () => randomSeed(0, Number.MAX_SAFE_INTEGER));
    assert.ok(draws.every((value) => Number.isSafeInteger(value) && value >= 0));
    assert.ok(
      draws.some((value) => value >= 2 ** 52),
      'about half of the draws are at least 2^52',
    );
    assert.ok(draws.some((value) => value < 2 ** 52));
    const small = new Set(Array.from({ length: 300 }, () => randomSeed(-1, 1)));
    assert.deepEqual([...small].sort(), [-1, 0, 1]);
    assert.equal(randomSeed(4, 4), 4);
  });

  it('keeps a draw within [min, max] for a range wider than 2^53 (its size counted exactly, not rounded)', () => {
    const M = Number.MAX_SAFE_INTEGER;
    const bits = (...values) => {
      let next = 0;
      return () => values[next++];
    };
    // 2^64 - 1 is in the rejected top remainder (it would favour small values); the next draw is max exactly.
    assert.equal(randomSeed(-M, M, bits(2n ** 64n - 1n, 2n ** 64n - 1025n)), M);
    assert.equal(randomSeed(-M, M, bits(2n ** 54n - 2n)), M);
    assert.equal(randomSeed(-M, M, bits(2n ** 53n - 1n)), 0);
    assert.equal(randomSeed(-M, M, bits(0n)), -M);
    for (let draw = 0; draw < 400; draw++) {
      const value = randomSeed(-M, M);
      assert.ok(Number.isSafeInteger(value) && value >= -M && value <= M, String(value));
    }
  });

  it('keeps the inputs msg.inputs set and reports every value used', () => {
    const workflow = {
      1: { class_type: 'A', inputs: { seed: 5 } },
      2: { class_type: 'B', inputs: { noise_seed: 0, variation: 1 } },
    };
    const seeds = [
      { id: '1', input: 'seed', min: 0, max: 9 },
      { id: '2', input: 'noise_seed', min: 0, max: 9 },
      { id: '2', input: 'variation', min: 0, max: 9 },
    ];
    const used = applyNewSeeds(workflow, seeds, { 2: { variation: 1 } }, () => 8);
    assert.deepEqual(used, { 1: 8, 2: { noise_seed: 8, variation: 1 } });
    assert.deepEqual(workflow[2].inputs, { noise_seed: 8, variation: 1 });
  });

  it('a node whose id is a prototype word gets its new seed, and msg.seeds names it', () => {
    // Node ids are words of the workflow (JSON.parse keeps "__proto__" as an own key).
    const workflow = JSON.parse(
      '{"__proto__": {"class_type": "A", "inputs": {"seed": 5}}, "constructor": {"class_type": "A", "inputs": {"seed": 5}}}',
    );
    const seeds = [
      { id: '__proto__', input: 'seed', min: 0, max: 9 },
      { id: 'constructor', input: 'seed', min: 0, max: 9 },
    ];
    const used = applyNewSeeds(workflow, seeds, {}, () => 8);
    assert.deepEqual(Object.entries(used), [
      ['__proto__', 8],
      ['constructor', 8],
    ]);
    assert.equal(Object.getPrototypeOf(used), Object.prototype);
    assert.equal(workflow['__proto__'].inputs.seed, 8);
  });
});
