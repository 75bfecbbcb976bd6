'use strict';
const assert = require('node:assert/strict');
const { Counters } = require('../../dist/sandbox/server');

describe('sandbox counters', () => {
  it('keep only the latest requests, so a long-running sandbox stays small', () => {
    const counters = new Counters();
    counters.keep = 100;
    for (let i = 0; i < 1000; i++)
      counters.record({ method: 'GET', path: `/p/${i}`, query: new URLSearchParams(), headers: {} });
    assert.ok(counters.requests.length <= 110, `${counters.requests.length} kept`);
    assert.equal(counters.requests.at(-1).path, '/p/999');
    assert.equal(counters.count('/p/999'), 1);
    assert.equal(counters.count('/p/0'), 0);
  });
});
