'use strict';
// Keys out of everything the package passes on (issue 20): removeSecrets for data that reaches msgs and the
// dialog (addresses whole), shortenSignedAddresses for what users are told about a failure, holdsSecret on
// parsed values, none of them recursive. Then HttpClient against a server of ours that echoes the key.
const assert = require('node:assert/strict');
const {
  cleanForReport,
  holdsSecret,
  removeSecrets,
  shortenSignedAddresses,
} = require('../../dist/http/errors');
const { HttpClient } = require('../../dist/http/client');
const { startRogueServer } = require('../support/rogue-server');

/** A value nested `depth` deep, `leaf` at the bottom: `{a: [{a: [... leaf]}]}`. */
function nested(depth, leaf) {
  let value = leaf;
  for (let level = 0; level < depth; level++) value = level % 2 ? { a: value } : [value];
  return value;
}

/** The bottom of a value built by `nested`. */
function bottom(value) {
  let inner = value;
  while (inner && typeof inner === 'object') inner = Array.isArray(inner) ? inner[0] : inner.a;
  return inner;
}

describe('secrets', () => {
  describe('removeSecrets', () => {
    it('replaces every secret, as written and URL-encoded, in strings and property names', () => {
      const body = {
        message: 'key sk-123 refused',
        list: ['sk-123', 'token a%2Fb'],
        'sk-123': 'as a name',
      };
      assert.deepEqual(removeSecrets(body, ['sk-123', 'a/b', undefined, '']), {
        message: 'key *** refused',
        list: ['***', 'token ***'],
        '***': 'as a name',
      });
      assert.equal(
        removeSecrets('wss://h/ws?clientId=1&token=a%2Fb', ['a/b']),
        'wss://h/ws?clientId=1&token=***',
      );
    });

    it('leaves addresses whole: an image address in a workflow is data', () => {
      const workflow = { 1: { inputs: { image: 'https://img.example/cat.png?X-Amz-Signature=abc&e=1' } } };
      assert.deepEqual(removeSecrets(workflow, ['sk-123']), workflow);
      assert.equal(
        removeSecrets('https://img.example/cat.png?sig=abc&key=sk-123', ['sk-123']),
        'https://img.example/cat.png?sig=abc&key=***',
      );
    });

    it('finds a key JSON-escaped in text that was not parsed (.NET \\u002B, PHP \\/, a JSON text in a string)', () => {
      const key = 'sk-ab+cd/ef"gh';
      const dotnet = 'sk-ab\\u002Bcd/ef\\u0022gh';
      const php = 'sk-ab+cd\\/ef\\"gh';
      const inner = JSON.stringify(key).slice(1, -1);
      for (const form of [dotnet, php, inner, encodeURIComponent(key), key]) {
        assert.equal(
          removeSecrets(`<pre>X-API-Key: ${form}</pre>`, [key]),
          '<pre>X-API-Key: ***</pre>',
          form,
        );
      }
    });

    it('a secret inside a longer one does not split it', () => {
      assert.equal(removeSecrets('long: abcdef-123456', ['abcdef', 'abcdef-123456']), 'long: ***');
    });

    it('returns a clean value as it is and never changes the value it was given', () => {
      const clean = { a: ['b', { c: 'd' }] };
      assert.equal(removeSecrets(clean, ['sk-123']), clean);
      const dirty = { a: ['sk-123'] };
      const copy = removeSecrets(dirty, ['sk-123']);
      assert.deepEqual(dirty, { a: ['sk-123'] });
      assert.deepEqual(copy, { a: ['***'] });
    });

    it('keeps __proto__ a property name, shared parts and cycles as they were, Buffers as they are', () => {
      const value = JSON.parse('{"__proto__": {"k": "sk-123"}, "shared": null}');
      const shared = { s: 'sk-123' };
      value.shared = [shared, shared];
      value.self = value;
      value.bytes = Buffer.from('sk-123');
      const clean = removeSecrets(value, ['sk-123']);
      assert.equal(Object.getPrototypeOf(clean), Object.prototype);
      assert.deepEqual(Object.getOwnPropertyDescriptor(clean, '__proto__').value, { k: '***' });
      assert.equal(clean.shared[0], clean.shared[1]);
      assert.equal(clean.shared[0].s, '***');
      assert.equal(clean.self, clean);
      assert.ok(Buffer.isBuffer(clean.bytes));
      assert.equal({}.k, undefined, 'Object.prototype is untouched');
    });

    it('walks a value nested 50,000 deep without overflowing the stack', () => {
      const deep = nested(50_000, 'echo sk-123');
      assert.equal(holdsSecret(deep, ['sk-123']), true);
      const clean = removeSecrets(deep, ['sk-123']);
      assert.equal(bottom(clean), 'echo ***');
      assert.equal(bottom(cleanForReport(deep, ['sk-123'])), 'echo ***');
      assert.equal(holdsSecret(nested(50_000, 'clean'), ['sk-123']), false);
    });
  });

  describe('holdsSecret', () => {
    it('decides on the parsed value: a key the service wrote JSON-escaped is plain once parsed', () => {
      const key = 'sk-ab+cd/ef';
      assert.equal(holdsSecret(JSON.parse('{"echo": "sk-ab\\u002Bcd\\/ef"}'), [key]), true);
      assert.equal(holdsSecret(JSON.parse('{"sk-ab\\u002Bcd\\/ef": 1}'), [key]), true);
      assert.equal(holdsSecret({ a: [1, null, true, { b: 'sk-ab%2Bcd%2Fef' }] }, [key]), true);
      assert.equal(holdsSecret({ a: [1, null, true, { b: 'other' }] }, [key]), false);
      assert.equal(holdsSecret({ a: key }, [undefined, '']), false);
    });

    it('ends on a value with a cycle', () => {
      const looped = { a: 'clean', list: [] };
      looped.list.push(looped, looped);
      assert.equal(holdsSecret(looped, ['sk-123']), false);
      looped.b = 'sk-123';
      assert.equal(holdsSecret(looped, ['sk-123']), true);
    });
  });

  describe('shortenSignedAddresses and cleanForReport', () => {
    it('cuts the query off http(s) and ws(s) addresses, and nothing else', () => {
      assert.equal(
        shortenSignedAddresses(
          'see https://storage.example/f.png?sig=abc&exp=1 and WSS://h/ws?token=t or ftp://x?y',
        ),
        'see https://storage.example/f.png?… and WSS://h/ws?… or ftp://x?y',
      );
      assert.equal(shortenSignedAddresses('http://a/b#c?d http://e/f'), 'http://a/b#c?d http://e/f');
    });

    it('reads a text of many addresses without a query in one pass', () => {
      const text = 'http://a'.repeat(200_000);
      assert.equal(shortenSignedAddresses(text), text);
    });

    it('cleanForReport removes the secrets and shortens signed addresses, at any depth', () => {
      const body = {
        message: 'key sk-123 refused for https://storage.example/f.png?sig=abc',
        list: [{ url: 'wss://h/ws?token=sk-123' }],
      };
      assert.deepEqual(cleanForReport(body, ['sk-123']), {
        message: 'key *** refused for https://storage.example/f.png?…',
        list: [{ url: 'wss://h/ws?…' }],
      });
    });
  });

  describe('HttpClient', () => {
    const key = 'sk-Live+7f3e/2d1c9b8a7f6e5d4c3b2a1f0e9d8';
    let rogue;
    let client;
    before(async () => {
      rogue = await startRogueServer();
      client = new HttpClient({
        baseUrl: rogue.url,
        headers: { 'x-api-key': key },
        secrets: [key],
        serviceName: 'the test service',
        retry: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 },
      });
    });
    after(async () => {
      await client.close();
      await rogue.close();
    });

    it('an answer nested 50,000 deep that echoes the key is refused as unreadable, the key in no word of it', async () => {
      // Written out: JSON.stringify itself cannot go that deep.
      rogue.handle = (_req, res) =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(`${'{"a":['.repeat(25_000)}"echo ${key}"${']}'.repeat(25_000)}`);
      const error = await client.json('/api/thing').catch((e) => e);
      assert.equal(error.code, 'server_error');
      assert.match(error.message, /nests deeper than 256 levels/);
      assert.ok(!JSON.stringify({ message: error.message, cause: error.cause }).includes(key));
    });

    it('an answer nested 200 deep that echoes the key is passed on without it', async () => {
      rogue.handle = (_req, res) =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(`${'{"a":['.repeat(100)}"echo ${key}"${']}'.repeat(100)}`);
      const { body } = await client.json('/api/thing');
      assert.equal(bottom(body), 'echo ***');
    });

    it("an error body nested 50,000 deep is the service's refusal, not a failure of the package", async () => {
      rogue.handle = (_req, res) => {
        const text = `{"message":"bad key ${key}","deep":${'['.repeat(50_000)}${']'.repeat(50_000)}}`;
        res.writeHead(400, { 'content-type': 'application/json' }).end(text);
      };
      const error = await client.json('/api/thing', { action: 'reading the thing' }).catch((e) => e);
      assert.equal(error.code, 'invalid_request');
      // Too deep to read as JSON: shown as the text it is, cut, with the key removed.
      assert.match(error.message, /the service said: \{"message":"bad key \*\*\*"/);
      assert.ok(!error.message.includes(key));
    });
  });
});
