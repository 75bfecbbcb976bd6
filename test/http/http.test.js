'use strict';
const assert = require('node:assert/strict');
const { codeForStatus, messageFromBody, ServiceError } = require('../../dist/http/errors');
const { parseRetryAfter, backoffDelay, withRetry } = require('../../dist/http/retry');

describe('http errors', () => {
  it('maps each HTTP status to the contract code', () => {
    const table = [
      [400, false, 'invalid_request'],
      [401, false, 'unauthorized'],
      [403, false, 'unauthorized'],
      [402, false, 'insufficient_credits'],
      [429, false, 'subscription_inactive'],
      [429, true, 'rate_limited'],
      [500, false, 'server_error'],
      [503, false, 'server_error'],
      [404, false, 'invalid_request'],
    ];
    for (const [status, retryAfter, code] of table)
      assert.equal(codeForStatus(status, retryAfter), code, `${status}`);
  });

  it('reads the message of every error body shape', () => {
    assert.equal(messageFromBody({ code: 'x', message: 'bad key' }), 'bad key');
    assert.equal(messageFromBody({ error: 'no such node' }), 'no such node');
    assert.equal(
      messageFromBody({
        error: { type: 't', message: 'Prompt outputs failed', details: 'node 3' },
        node_errors: {},
      }),
      'Prompt outputs failed: node 3',
    );
    assert.equal(messageFromBody('  plain text  '), 'plain text');
    assert.equal(messageFromBody({ unrelated: 1 }), undefined);
    assert.equal(messageFromBody('x'.repeat(1000)).length, 301);
  });

  it('keeps code and cause on the error for Catch nodes', () => {
    const error = new ServiceError('unauthorized', 'the API key was refused', {
      status: 401,
      body: { message: 'no' },
    });
    assert.equal(error.code, 'unauthorized');
    assert.deepEqual(error.cause, { status: 401, body: { message: 'no' } });
    assert.ok(error instanceof Error);
  });
});

describe('http retry', () => {
  it('reads Retry-After as seconds or a date', () => {
    assert.equal(parseRetryAfter('2'), 2000);
    assert.equal(parseRetryAfter(undefined), undefined);
    assert.equal(parseRetryAfter('soon'), undefined);
    assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6_000);
  });

  it('backs off with full jitter under a cap', () => {
    const policy = { attempts: 5, baseDelayMs: 100, maxDelayMs: 1000 };
    assert.equal(
      backoffDelay(0, policy, () => 0.999),
      99,
    );
    assert.equal(
      backoffDelay(3, policy, () => 0.5),
      400,
    );
    assert.equal(
      backoffDelay(10, policy, () => 0.999),
      999,
    );
    assert.equal(
      backoffDelay(2, policy, () => 0),
      0,
    );
  });

  it('retries only what the caller calls retryable, within the attempts', async () => {
    const policy = { attempts: 3, baseDelayMs: 1, maxDelayMs: 2 };
    let calls = 0;
    await assert.rejects(
      withRetry(
        async () => {
          calls++;
          throw new Error('down');
        },
        () => ({ retry: true }),
        policy,
      ),
      /down/,
    );
    assert.equal(calls, 3);
    calls = 0;
    await assert.rejects(
      withRetry(
        async () => {
          calls++;
          throw new Error('bad');
        },
        () => ({ retry: false }),
        policy,
      ),
      /bad/,
    );
    assert.equal(calls, 1);
    calls = 0;
    const value = await withRetry(
      async () => (++calls < 2 ? Promise.reject(new Error('once')) : 'ok'),
      () => ({ retry: true }),
      policy,
    );
    assert.equal(value, 'ok');
    assert.equal(calls, 2);
  });
});
