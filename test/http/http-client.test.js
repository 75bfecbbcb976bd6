'use strict';
const assert = require('node:assert/strict');
const { HttpClient } = require('../../dist/http/client');
const { SandboxServer } = require('../../dist/sandbox/server');

describe('http client', () => {
  let server;
  let client;
  const fast = { attempts: 3, baseDelayMs: 1, maxDelayMs: 5 };

  before(async () => {
    server = new SandboxServer();
    server.route('GET', /^\/prefix\/api\/thing$/, (ctx) =>
      ctx.json(200, { ok: true, query: ctx.url.search }),
    );
    server.route('POST', /^\/prefix\/api\/thing$/, async (ctx) =>
      ctx.json(200, JSON.parse((await ctx.body()).toString())),
    );
    await server.listen();
    client = new HttpClient({
      baseUrl: `${server.url}/prefix/`,
      headers: { 'x-api-key': 'secret-key' },
      secrets: ['secret-key'],
      serviceName: 'the test service',
      retry: fast,
    });
  });
  beforeEach(() => {
    server.faults.clear();
    server.counters.reset();
  });
  after(async () => {
    await client.close();
    await server.close();
  });

  it('keeps the base path, sends the headers and the query', async () => {
    const { body } = await client.json('/api/thing', { query: { a: 1, b: undefined } });
    assert.deepEqual(body, { ok: true, query: '?a=1' });
    assert.equal(server.counters.matching('/prefix/api/thing')[0].headers['x-api-key'], 'secret-key');
  });

  it('retries a GET on 5xx and a 429 with Retry-After, then succeeds', async () => {
    server.faults.add({ path: '/prefix/api/thing', status: 503, times: 1 });
    server.faults.add({ path: '/prefix/api/thing', status: 429, retryAfter: 0, times: 1 });
    const { body } = await client.json('/api/thing');
    assert.equal(body.ok, true);
    assert.equal(server.counters.count('/prefix/api/thing'), 3);
  });

  it('gives up after the attempts with a server_error that names no key', async () => {
    server.faults.add({
      path: '/prefix/api/thing',
      status: 500,
      body: { message: 'boom secret-key' },
      times: 5,
    });
    const error = await client.json('/api/thing', { action: 'reading the thing' }).catch((e) => e);
    assert.equal(error.code, 'server_error');
    assert.equal(error.cause.status, 500);
    assert.match(error.message, /reading the thing/);
    assert.doesNotMatch(JSON.stringify({ m: error.message, c: error.cause }), /secret-key/);
    assert.equal(server.counters.count('/prefix/api/thing'), 3);
  });

  it('never repeats a POST that reached the server', async () => {
    server.faults.add({ path: '/prefix/api/thing', method: 'POST', status: 500, times: 1 });
    const error = await client.json('/api/thing', { method: 'POST', json: { x: 1 } }).catch((e) => e);
    assert.equal(error.code, 'server_error');
    assert.equal(server.counters.count('/prefix/api/thing', 'POST'), 1);
    server.faults.add({ path: '/prefix/api/thing', method: 'POST', drop: true, times: 1 });
    const dropped = await client.json('/api/thing', { method: 'POST', json: { x: 1 } }).catch((e) => e);
    assert.equal(dropped.code, 'network');
    assert.equal(server.counters.count('/prefix/api/thing', 'POST'), 2);
  });

  it('maps 401, 402, 429 and a body that is not JSON', async () => {
    for (const [status, code] of [
      [401, 'unauthorized'],
      [402, 'insufficient_credits'],
      [429, 'subscription_inactive'],
      [400, 'invalid_request'],
    ]) {
      server.faults.add({ path: '/prefix/api/thing', status, body: { code: 'x', message: 'said so' } });
      const error = await client.json('/api/thing').catch((e) => e);
      assert.equal(error.code, code, String(status));
      assert.match(error.message, /the service said: said so/);
    }
    server.faults.add({ path: '/prefix/api/thing', malformed: true });
    const error = await client.json('/api/thing').catch((e) => e);
    assert.equal(error.code, 'server_error');
    assert.match(error.message, /not JSON/);
  });

  it('does not try again a GET its time limit cut, nor one its caller stopped', async () => {
    const timed = new HttpClient({
      baseUrl: `${server.url}/prefix/`,
      serviceName: 'the test service',
      retry: fast,
      totalTimeoutMs: 300,
    });
    try {
      server.faults.add({ path: '/prefix/api/thing', delayMs: 2000, times: 5 });
      const late = await timed.json('/api/thing', { action: 'reading the thing' }).catch((e) => e);
      assert.equal(late.code, 'network');
      assert.match(late.message, /did not answer within 1 s/);
      assert.equal(server.counters.count('/prefix/api/thing'), 1, 'one attempt, not three');
      server.counters.reset();
      const stopped = new AbortController();
      setTimeout(() => stopped.abort(), 100);
      const error = await client.json('/api/thing', { signal: stopped.signal }).catch((e) => e);
      assert.equal(error.code, 'network');
      assert.match(error.message, /was stopped before/);
      assert.equal(server.counters.count('/prefix/api/thing'), 1, 'one attempt, not three');
    } finally {
      await timed.close(0);
    }
  });

  it('reports a service that does not answer as network', async () => {
    const nowhere = new HttpClient({
      baseUrl: 'http://127.0.0.1:1',
      serviceName: 'the test service',
      retry: fast,
    });
    const error = await nowhere.json('/api/thing').catch((e) => e);
    await nowhere.close();
    assert.equal(error.code, 'network');
    assert.match(error.message, /did not answer/);
  });
});
