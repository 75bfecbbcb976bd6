'use strict';
// Every failure of the generation REST nodes reaches a real Catch node with the contract's code, a sentence,
// and cause {status, body}, with no key in any of it; the node's status turns red.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const {
  API_KEY,
  PARTNER_KEY,
  textToImage,
  flowWith,
  load,
  failureOf,
  outputOf,
  textOf,
} = require('../support/generation-nodes');

describe('generation REST errors', () => {
  let sandbox;

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY, events: { autoRun: false } });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
  });
  afterEach(async () => helper.unload());

  // The service echoes the keys back in its error body: they must still not reach the msg.
  const echo = `key ${API_KEY} partner ${PARTNER_KEY}`;
  const cases = [
    [400, undefined, 'invalid_request', /refused submitting the workflow with HTTP 400/],
    [401, undefined, 'unauthorized', /API key was refused .* check the key in the config node/],
    [402, undefined, 'insufficient_credits', /not enough credits/],
    [429, undefined, 'subscription_inactive', /subscription is not active/],
    [429, 1, 'rate_limited', /limiting the rate of requests/],
    [500, undefined, 'server_error', /failed with HTTP 500 .* try again later/],
    [503, undefined, 'server_error', /failed with HTTP 503/],
  ];
  for (const [status, retryAfter, code, message] of cases) {
    it(`submit: HTTP ${status}${retryAfter ? ' with Retry-After' : ''} -> ${code}, caught, no key anywhere`, async () => {
      await load(flowWith({ type: 'graph-gen-submit', partner: 'always' }, { baseUrl: sandbox.url }));
      const node = helper.getNode('n');
      sandbox.faults.add({ path: '/api/prompt', status, retryAfter, body: { code: 'x', message: echo } });
      const failure = await failureOf('n', { payload: textToImage(), topic: 'kept' });
      assert.equal(failure.error.code, code);
      assert.match(failure.error.message, message);
      assert.doesNotMatch(
        failure.error.message,
        /^\w*Error: /,
        'a plain sentence, without the class name before it',
      );
      assert.equal(failure.error.cause.status, status);
      assert.equal(failure.topic, 'kept');
      assert.equal(failure.error.source.id, 'n');
      assert.ok(!textOf(failure).includes(API_KEY), 'no API key in the caught msg');
      assert.ok(!textOf(failure).includes(PARTNER_KEY), 'no partner key in the caught msg');
      assert.equal(sandbox.counters.count('/api/prompt'), 1, 'a submit is never repeated');
      assert.deepEqual(node.status.lastCall ? node.status.lastCall.args[0].fill : 'red', 'red');
    });
  }

  it('submit: the plain 401 of a wrong key is unauthorized', async () => {
    const flow = flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url });
    await helper.load(require('../support/generation-nodes').ALL_NODES, flow, {
      c: { apiKey: 'wrong-key-xyz' },
    });
    const failure = await failureOf('n', { payload: textToImage() });
    assert.equal(failure.error.code, 'unauthorized');
    assert.deepEqual(failure.error.cause.body, {
      code: 'unauthorized',
      message: 'Invalid or missing API key',
    });
    assert.ok(!textOf(failure).includes('wrong-key-xyz'));
  });

  it('no answer at all -> network, for every node', async () => {
    const closed = await startSandbox();
    const address = closed.url;
    await closed.close();
    const inputs = {
      'graph-gen-submit': { payload: textToImage() },
      'graph-gen-upload': { payload: Buffer.from('x'), filename: 'x.png' },
      'graph-gen-download': { payload: { filename: 'x.png', subfolder: '', type: 'output' } },
      'graph-gen-queue': {},
    };
    for (const [type, msg] of Object.entries(inputs)) {
      await load(flowWith({ type }, { baseUrl: address }));
      const failure = await failureOf('n', msg, 15000);
      assert.equal(failure.error.code, 'network', type);
      assert.match(failure.error.message, /did not answer .*: check the address/);
      await helper.unload();
    }
  });

  it('an answer that is not JSON -> server_error saying so', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: sandbox.url }));
    sandbox.faults.add({ path: '/api/queue', malformed: true });
    const failure = await failureOf('n', {});
    assert.equal(failure.error.code, 'server_error');
    assert.match(failure.error.message, /not JSON/);
  });

  it('every node without a config node fails with invalid_input', async () => {
    for (const type of ['graph-gen-submit', 'graph-gen-upload', 'graph-gen-download', 'graph-gen-queue']) {
      const flow = flowWith({ type }, { baseUrl: sandbox.url });
      flow[1].server = 'missing';
      await load(flow);
      const failure = await failureOf('n', { payload: textToImage() });
      assert.equal(failure.error.code, 'invalid_input', type);
      assert.match(failure.error.message, /no graph-gen-config is chosen/);
      await helper.unload();
    }
  });

  describe('a request whose connection was refused (nothing sent) is retried, POSTs included', () => {
    let late;
    afterEach(async () => late?.close());

    /** A free port nobody listens on yet; the sandbox starts there shortly after the request. */
    async function freePort() {
      const server = require('node:net').createServer().listen(0, '127.0.0.1');
      await new Promise((resolve) => server.once('listening', resolve));
      const { port } = server.address();
      await new Promise((resolve) => server.close(resolve));
      return port;
    }

    for (const [type, msg, path] of [
      [
        'graph-gen-upload',
        () => ({ payload: require('node:crypto').randomBytes(200_000), filename: 'late.png' }),
        '/api/upload/image',
      ],
      ['graph-gen-submit', () => ({ payload: textToImage() }), '/api/prompt'],
    ]) {
      it(`${type}: succeeds once the service is up, sent exactly once`, async () => {
        const port = await freePort();
        await load(flowWith({ type }, { baseUrl: `http://127.0.0.1:${port}` }));
        const out = outputOf('n', msg(), 8000);
        await new Promise((resolve) => setTimeout(resolve, 20));
        late = await startSandbox({ port, generationApiKey: API_KEY, events: { autoRun: false } });
        const result = await out;
        assert.equal(late.counters.count(path, 'POST'), 1);
        if (type === 'graph-gen-upload') {
          assert.equal(late.generation.uploads[0].size, 200_000);
          assert.equal(result.filename, 'late.png');
        } else {
          assert.equal(result.prompt_id, [...late.jobs.jobs.keys()][0]);
        }
      });
    }
  });
});
