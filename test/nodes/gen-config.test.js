'use strict';
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, PARTNER_KEY, flowWith, load, outputOf } = require('../support/generation-nodes');

describe('graph-gen-config', () => {
  let cloud;
  let selfHosted;

  before(async () => {
    await helper.startServer();
    cloud = await startSandbox({ generationApiKey: API_KEY });
    selfHosted = await startSandbox();
  });
  after(async () => {
    await cloud.close();
    await selfHosted.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    cloud.counters.reset();
    selfHosted.counters.reset();
  });
  afterEach(async () => helper.unload());

  it('holds one connection with the settings and keys, and closes it when the flow stops', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: `${cloud.url}  ` }));
    const config = helper.getNode('c');
    const { connection } = config;
    assert.match(connection.clientId, /^[0-9a-f-]{36}$/);
    assert.deepEqual(connection.settings, {
      clientId: connection.clientId,
      baseUrl: cloud.url,
      dialect: 'comfyui',
      apiKey: API_KEY,
      partnerKey: PARTNER_KEY,
      partnerKeyField: 'api_key_service_org',
      limits: {
        answerBytes: 8 * 1024 * 1024,
        listBytes: 64 * 1024 * 1024,
        requestTimeoutMs: 120_000,
        keptEventBytes: 64 * 1024 * 1024,
      },
    });
    await outputOf('n', {});
    assert.equal(cloud.counters.matching('/api/queue')[0].headers['x-api-key'], API_KEY);
    await helper.unload();
    assert.equal(connection.http.agent.closed, true);
  });

  it('keeps its socket id across restarts, so a self-hosted server’s events of earlier jobs still reach it', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: selfHosted.url }), {});
    const first = helper.getNode('c').connection.clientId;
    await helper.unload();
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: selfHosted.url }), {});
    assert.equal(helper.getNode('c').connection.clientId, first);
  });

  it('no API key = a self-hosted server: no X-API-Key header at all', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: selfHosted.url }), {});
    assert.equal(helper.getNode('c').connection.settings.apiKey, undefined);
    await outputOf('n', {});
    assert.equal(selfHosted.counters.matching('/api/queue')[0].headers['x-api-key'], undefined);
  });

  it('keeps the keys out of the exported flow (credentials only)', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const config = helper.getNode('c');
    assert.equal(config.apiKey, undefined);
    assert.equal(config.credentials.apiKey, API_KEY);
  });

  describe('test connection (admin endpoint)', () => {
    const test = (body) => helper.request().post('/graph-gen/graph-gen-config/test').send(body);

    it('answers ok with the typed key', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }), {});
      const answer = await test({ id: 'c', baseUrl: cloud.url, apiKey: API_KEY });
      assert.equal(answer.status, 200);
      assert.equal(answer.body.ok, true);
      assert.match(answer.body.message, /^Connected: .* accepted the API key\.$/);
      assert.equal(cloud.counters.matching('/api/queue')[0].headers['x-api-key'], API_KEY);
    });

    it('uses the stored key when the field is unchanged (only the node id given)', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
      const unchanged = await test({ id: 'c', baseUrl: cloud.url });
      assert.equal(unchanged.body.ok, true);
      const placeholder = await test({ id: 'c', baseUrl: cloud.url, apiKey: '__PWRD__' });
      assert.equal(placeholder.body.ok, true);
      assert.equal(cloud.counters.matching('/api/queue')[1].headers['x-api-key'], API_KEY);
    });

    it('says in words that the key was refused, with no key in the answer', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
      const answer = await test({ baseUrl: cloud.url, apiKey: 'wrong-key-123' });
      assert.equal(answer.body.ok, false);
      assert.equal(answer.body.code, 'unauthorized');
      assert.match(answer.body.message, /refused the API key: check the key\./);
      assert.ok(!JSON.stringify(answer.body).includes('wrong-key-123'));
      const none = await test({ baseUrl: cloud.url, apiKey: '' });
      assert.match(none.body.message, /asks for an API key/);
    });

    it('says when the service cannot be reached or the address is not http(s)', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
      const closed = await startSandbox();
      const address = closed.url;
      await closed.close();
      const answer = await test({ baseUrl: address, apiKey: 'k' });
      assert.equal(answer.body.ok, false);
      assert.equal(answer.body.code, 'network');
      assert.match(answer.body.message, /could not be reached: check the address/);
      const bad = await test({ baseUrl: 'ftp://example.com' });
      assert.match(bad.body.message, /not an http\(s\) address/);
    });

    it('tests a deployed ${VAR} address with its stored ${VAR} key as the deploy resolved them', async () => {
      process.env.GEN_TEST_URL = cloud.url;
      process.env.GEN_TEST_KEY = API_KEY;
      try {
        await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: '${GEN_TEST_URL}' }), {
          apiKey: '${GEN_TEST_KEY}',
        });
        const answer = await test({ id: 'c', baseUrl: '${GEN_TEST_URL}' });
        assert.equal(answer.body.ok, true, answer.body.message);
        assert.equal(cloud.counters.matching('/api/queue')[0].headers['x-api-key'], API_KEY);
      } finally {
        delete process.env.GEN_TEST_URL;
        delete process.env.GEN_TEST_KEY;
      }
    });

    it('never reads the server environment into a typed key: it asks to deploy first and sends nothing', async () => {
      const rogue = await startSandbox();
      process.env.GEN_TEST_URL = cloud.url;
      process.env.GEN_TEST_SECRET = 'environment-secret';
      try {
        await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: '${GEN_TEST_URL}' }), {});
        // Toward a typed address, and toward the deployed one: only a deployed node resolves its variables.
        for (const baseUrl of [rogue.url, '${GEN_TEST_URL}']) {
          const answer = await test({ id: 'c', baseUrl, apiKey: '${GEN_TEST_SECRET}' });
          assert.equal(answer.body.ok, false, baseUrl);
          assert.equal(answer.body.code, 'invalid_input');
          assert.match(
            answer.body.message,
            /the key name an environment variable .*deploy the config node first/,
          );
          assert.doesNotMatch(JSON.stringify(answer.body), /environment-secret/);
        }
        assert.deepEqual(rogue.counters.requests, []);
        assert.deepEqual(cloud.counters.requests, []);
      } finally {
        delete process.env.GEN_TEST_URL;
        delete process.env.GEN_TEST_SECRET;
        await rogue.close();
      }
    });

    it('never reads the server environment into a typed address: it asks to deploy first', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }), {});
      process.env.GEN_TEST_SECRET = 'environment-secret';
      try {
        const answer = await test({ id: 'c', baseUrl: 'http://127.0.0.1:9/${GEN_TEST_SECRET}' });
        assert.equal(answer.body.ok, false);
        assert.match(answer.body.message, /deploy the config node first/);
        assert.doesNotMatch(JSON.stringify(answer.body), /environment-secret/);
      } finally {
        delete process.env.GEN_TEST_SECRET;
      }
    });

    it('sends a stored key only to the address it was deployed with, and only for its own node type', async () => {
      const rogue = await startSandbox();
      try {
        await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
        // Another address with the node's id: tested without the stored key.
        await test({ id: 'c', baseUrl: rogue.url });
        await test({ id: 'c', baseUrl: rogue.url, apiKey: '__PWRD__' });
        const seen = rogue.counters.requests;
        assert.ok(seen.length >= 2);
        for (const request of seen) assert.equal(request.headers['x-api-key'], undefined);
        // The id of a node of another type (here the queue node): no stored key either.
        cloud.counters.reset();
        await test({ id: 'n', baseUrl: cloud.url });
        assert.equal(cloud.counters.matching('/api/queue')[0].headers['x-api-key'], undefined);
      } finally {
        await rogue.close();
      }
    });

    it('answers a self-hosted server without a key', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: selfHosted.url }), {});
      const answer = await test({ id: 'c', baseUrl: selfHosted.url, apiKey: '' });
      assert.equal(answer.body.ok, true);
      assert.match(answer.body.message, /no API key set/);
    });
  });
});
