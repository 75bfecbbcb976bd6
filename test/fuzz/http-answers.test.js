'use strict';
// The readers of HTTP answers (HttpClient's JSON answer reader, over real HTTP on 127.0.0.1; messageFromBody)
// and the address rule (http/address-policy.ts) against hostile input: a reader never throws anything but a
// ServiceError, keeps its sentence bounded, and refuses what nests too deep; the rule refuses every address of
// this machine or its networks, however it is written, unless it is the service's own origin.
const assert = require('node:assert/strict');
const http = require('node:http');
const { fc, fuzzOptions, hostileJson, deepJson } = require('../support/fuzz');
const { HttpClient } = require('../../dist/http/client');
const { ServiceError, messageFromBody } = require('../../dist/http/errors');
const { addressRefusal, isLocalAddress } = require('../../dist/http/address-policy');
const { MAX_JSON_DEPTH, nestsDeeperThan } = require('../../dist/boundary/outside');

/** The longest sentence a ServiceError carries, with the note of what was cut (errors.ts). */
const MAX_MESSAGE = 1100;

describe('HTTP answers and the address rule (fuzzed)', () => {
  let server;
  let client;
  /** What the server answers next: status and body text. */
  let next = { status: 200, text: '{}' };

  before(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      res.writeHead(next.status, { 'content-type': 'application/json' }).end(next.text);
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    client = new HttpClient({
      baseUrl: `http://127.0.0.1:${server.address().port}`,
      serviceName: 'the generation service',
      secrets: ['sk-fuzz-secret-1234'],
      retry: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 },
      maxJsonBytes: 4 * 1024 * 1024,
    });
  });
  after(async () => {
    await client.close(0);
    await new Promise((resolve) => server.close(resolve));
  });

  /** The client's reading of an answer: its body, or the ServiceError it raised (anything else fails). */
  async function answerOf(status, text) {
    next = { status, text };
    try {
      return { body: (await client.json('/api/x', { action: 'reading x' })).body };
    } catch (error) {
      assert.ok(error instanceof ServiceError, `not a ServiceError: ${error}`);
      assert.equal(typeof error.message, 'string');
      assert.ok(error.message.length <= MAX_MESSAGE, `${error.message.length} characters`);
      assert.ok(!error.message.includes('sk-fuzz-secret-1234'));
      return { error };
    }
  }

  it('a 200 answer is the JSON it holds, or a ServiceError; never a throw of another kind', async () => {
    await fc.assert(
      fc.asyncProperty(hostileJson(), fc.integer({ min: 0, max: 400 }), async (value, depth) => {
        const text = deepJson(depth, JSON.stringify(value));
        const read = await answerOf(200, text);
        // Nested past the bound: refused, not handed on; else exactly what JSON.parse reads.
        if (nestsDeeperThan(text, MAX_JSON_DEPTH)) assert.ok(read.error, `${depth} levels handed on`);
        else assert.deepEqual(read.body, JSON.parse(text));
      }),
      fuzzOptions(120),
    );
  });

  it('an error answer of any shape, depth or size is a ServiceError with a bounded sentence', async () => {
    const body = fc.oneof(
      hostileJson().map((value) => JSON.stringify(value)),
      fc
        .integer({ min: 250, max: 50_000 })
        .map((depth) => deepJson(depth, '"sk-fuzz-secret-1234"', 'message')),
      fc.constantFrom(
        `{"message":"${'m'.repeat(3_000_000)}"}`,
        `{"error":{"message":${deepJson(100_000)}}}`,
        'not json at all sk-fuzz-secret-1234',
        '',
      ),
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(400, 401, 403, 404, 429, 500, 503), body, async (status, text) => {
        const read = await answerOf(status, text);
        assert.ok(read.error, 'an error status is raised');
      }),
      fuzzOptions(80),
    );
  });

  it('messageFromBody never throws, reads only text, and keeps at most 300 characters', () => {
    fc.assert(
      fc.property(fc.oneof(hostileJson(), fc.anything()), (value) => {
        const message = messageFromBody(value);
        assert.ok(message === undefined || typeof message === 'string');
        if (message !== undefined) assert.ok(message.length <= 301, `${message.length}`);
      }),
      fuzzOptions(400),
    );
    assert.equal(messageFromBody({ message: { toString: () => 'x' } }), undefined);
    assert.equal(messageFromBody(JSON.parse('{"__proto__":{"message":"inherited"}}')), undefined);
  });

  /** IPv4 networks of this machine or its networks, as [first octets, prefix length]. */
  const LOCAL_V4 = [
    [[0, 0, 0, 0], 8],
    [[10, 0, 0, 0], 8],
    [[100, 64, 0, 0], 10],
    [[127, 0, 0, 0], 8],
    [[169, 254, 0, 0], 16],
    [[172, 16, 0, 0], 12],
    [[192, 168, 0, 0], 16],
    [[224, 0, 0, 0], 4],
    [[240, 0, 0, 0], 4],
  ];
  const localV4 = fc
    .tuple(fc.constantFrom(...LOCAL_V4), fc.integer({ min: 0, max: 0xffffffff }))
    .map(([[octets, prefix], random]) => {
      const network = ((octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]) >>> 0;
      const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
      return ((network & mask) | (random & ~mask)) >>> 0;
    });
  const octetsOf = (n) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  /** The ways a URL may write an IPv4 address that the WHATWG parser reads as that address. */
  const written = fc.tuple(
    localV4,
    fc.constantFrom('dotted', 'decimal', 'hex', 'octal', 'mapped', 'mapped-hex', 'nat64'),
  );
  const hostOf = ([n, form]) => {
    const o = octetsOf(n);
    const hex = (a, b) => ((a << 8) | b).toString(16);
    switch (form) {
      case 'decimal':
        return String(n);
      case 'hex':
        return `0x${n.toString(16)}`;
      case 'octal':
        return o.map((part) => `0${part.toString(8)}`).join('.');
      case 'mapped':
        return `[::ffff:${o.join('.')}]`;
      case 'mapped-hex':
        return `[::ffff:${hex(o[0], o[1])}:${hex(o[2], o[3])}]`;
      case 'nat64':
        return `[64:ff9b::${o.join('.')}]`;
      default:
        return o.join('.');
    }
  };
  const localV6 = fc
    .tuple(
      fc.constantFrom('::1', '::', 'fe80::', 'fc00::', 'fd12:3456::', 'ff02::', 'fec0::'),
      fc.integer({ min: 0, max: 0xffff }),
    )
    .map(([prefix, tail]) => `[${prefix.endsWith('::') ? `${prefix}${tail.toString(16)}` : prefix}]`);

  it("refuses every local address, however written, unless it is the service's own origin", () => {
    fc.assert(
      fc.property(
        fc.oneof(written.map(hostOf), localV6),
        fc.constantFrom('http', 'https'),
        (host, scheme) => {
          const url = new URL(`${scheme}://${host}:8443/view?x=1`);
          assert.equal(
            addressRefusal(url, undefined, { ownOrigin: 'https://service.example' }),
            'local',
            url.href,
          );
          assert.equal(addressRefusal(url, new URL('http://service.example/api/view')), 'local', url.href);
          assert.equal(addressRefusal(url, undefined, { ownOrigin: url.origin }), undefined);
          assert.equal(isLocalAddress(url.hostname), true, url.hostname);
        },
      ),
      fuzzOptions(500),
    );
  });

  it('refuses https to http and other schemes; a public address passes', () => {
    const from = new URL('https://service.example/api/view');
    assert.equal(addressRefusal(new URL('http://storage.example/f'), from), 'downgrade');
    assert.equal(addressRefusal(new URL('file:///etc/passwd'), from), 'scheme');
    for (const host of ['8.8.8.8', '1.1.1.1', '[2606:4700:4700::1111]', 'storage.example'])
      assert.equal(addressRefusal(new URL(`https://${host}/f`), from), undefined, host);
  });
});
