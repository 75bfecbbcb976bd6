'use strict';
// The sandbox's automation service behaves as real deployments do (FACTS.md), so the node tests that
// rely on it mean something.
const assert = require('node:assert/strict');
const { request } = require('undici');
const { KEY, startAutomationSandbox } = require('../support/automation');

describe('automation sandbox service', () => {
  let sandbox;
  const get = async (query, headers = { 'x-automation-api-key': KEY }) => {
    const response = await request(`${sandbox.server.url}/api/v1/workflows?${new URLSearchParams(query)}`, {
      headers,
    });
    return { status: response.statusCode, body: await response.body.json() };
  };

  before(async () => {
    sandbox = await startAutomationSandbox({ workflows: 600 });
  });
  after(async () => sandbox.close());

  it('pages with opaque cursors: default 100, over 250 capped silently, null at the end', async () => {
    const first = await get({});
    assert.equal(first.body.data.length, 100);
    assert.doesNotMatch(first.body.nextCursor, /100/, 'the cursor does not show the offset');
    assert.equal((await get({ limit: 1000 })).body.data.length, 250);
    const last = await get({
      limit: 250,
      cursor: (await get({ limit: 250, cursor: (await get({ limit: 250 })).body.nextCursor })).body
        .nextCursor,
    });
    assert.equal(last.body.data.length, 100);
    assert.equal(last.body.nextCursor, null);
  });

  it('does not keep active in the cursor', async () => {
    const active = await get({ active: 'true', limit: 10 });
    assert.ok(active.body.data.every((wf) => wf.active));
    const withoutActive = await get({ limit: 10, cursor: active.body.nextCursor });
    assert.ok(
      withoutActive.body.data.some((wf) => !wf.active),
      'the second page forgot the filter',
    );
  });

  it('answers limit=0 with everything and a cursor that repeats forever', async () => {
    const first = await get({ limit: 0 });
    assert.equal(first.body.data.length, 600);
    const second = await get({ limit: 0, cursor: first.body.nextCursor });
    assert.equal(second.body.nextCursor, first.body.nextCursor);
  });

  it('refuses a bad cursor with 400 and a missing or wrong key with 401 on every page', async () => {
    assert.deepEqual(await get({ cursor: 'bogus' }), {
      status: 400,
      body: { message: 'Parameter "cursor" is not valid' },
    });
    const { nextCursor } = (await get({})).body;
    for (const headers of [{}, { 'x-automation-api-key': 'wrong' }]) {
      assert.deepEqual(await get({}, headers), { status: 401, body: { message: 'Unauthorized' } });
      assert.deepEqual(await get({ cursor: nextCursor }, headers), {
        status: 401,
        body: { message: 'Unauthorized' },
      });
    }
  });
});
