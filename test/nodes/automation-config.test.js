'use strict';
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const configNode = require('../../dist/nodes/automation-config.js');
const listNode = require('../../dist/nodes/automation-list-workflows.js');
const {
  KEY,
  coreNode,
  startAutomationSandbox,
  listRequests,
  flow,
  collect,
} = require('../support/automation');

const catchNode = coreNode('common/25-catch.js');
const credentials = { cfg: { apiKey: KEY } };

describe('automation-config', () => {
  let sandbox;

  before(async () => {
    await helper.startServer();
    sandbox = await startAutomationSandbox({ workflows: 42 });
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

  it('holds one connection pool, closed on redeploy and replaced by a new one', async () => {
    await helper.load([configNode, listNode, catchNode], flow(sandbox), credentials);
    const first = helper.getNode('cfg').client;
    const out = collect('out');
    helper.getNode('list').receive({});
    await out.next();
    assert.equal(first.baseUrl, `http://127.0.0.1:${sandbox.server.port}/api/v1`);
    assert.equal(first.http.agent.closed, false);
    await helper.unload();
    assert.equal(first.http.agent.closed, true, 'the pool is closed when the flow stops');
    await helper.load([configNode, listNode, catchNode], flow(sandbox), credentials);
    const second = helper.getNode('cfg').client;
    assert.notEqual(second, first);
    const again = collect('out');
    helper.getNode('list').receive({});
    assert.equal((await again.next()).payload.length, 42);
  });

  it('sends the key in the configured header, under a path prefix written any way', async () => {
    const other = await startAutomationSandbox({
      workflows: 5,
      headerName: 'X-N8N-API-KEY',
      pathPrefix: '/n8n',
      versions: [2],
    });
    try {
      for (const pathPrefix of ['/n8n/', 'n8n', '/n8n']) {
        other.counters.reset();
        await helper.load(
          [configNode, listNode, catchNode],
          flow(other, {}, { headerName: 'X-N8N-API-KEY', pathPrefix, apiVersion: '2' }),
          credentials,
        );
        const out = collect('out');
        helper.getNode('list').receive({});
        assert.equal((await out.next()).payload.length, 5, pathPrefix);
        const [request] = listRequests(other);
        assert.equal(request.path, '/n8n/api/v2/workflows');
        assert.equal(request.headers['x-n8n-api-key'], KEY);
        assert.equal('x-automation-api-key' in request.headers, false);
        await helper.unload();
      }
    } finally {
      await other.close();
    }
  });

  it('fails the list node with a sentence when its settings make no address', async () => {
    await helper.load([configNode, listNode, catchNode], flow(sandbox, {}, { host: '' }), credentials);
    const caught = collect('caught');
    helper.getNode('list').receive({});
    const msg = await caught.next();
    assert.equal(msg.error.code, 'invalid_input');
    assert.match(msg.error.message, /host of the automation service is not set/);
  });

  it('tells the user when a list node has no config node chosen', async () => {
    await helper.load([configNode, listNode, catchNode], flow(sandbox, { server: 'missing' }), credentials);
    const caught = collect('caught');
    const list = helper.getNode('list');
    const seen = [];
    list.status = (status) => seen.push(status);
    list.receive({});
    const msg = await caught.next();
    assert.equal(msg.error.code, 'invalid_input');
    assert.match(msg.error.message, /no automation-config is chosen/);
    assert.equal(listRequests(sandbox).length, 0);
    assert.deepEqual(seen.at(-1), { fill: 'red', shape: 'ring', text: 'invalid input' });
  });

  describe('test connection (admin endpoint)', () => {
    const settings = () => ({
      deployment: 'self-hosted',
      protocol: 'http',
      host: '127.0.0.1',
      port: String(sandbox.server.port),
      apiVersion: '1',
      headerName: 'X-AUTOMATION-API-KEY',
    });
    const test = (body) => helper.request().post('/graph-gen/automation-config/test').send(body).expect(200);

    beforeEach(async () => helper.load([configNode, listNode, catchNode], flow(sandbox), credentials));

    it('says the key was accepted, asking for one workflow', async () => {
      const { body } = await test({ ...settings(), apiKey: KEY });
      assert.equal(body.ok, true);
      assert.match(body.message, /^Connected to http:\/\/127\.0\.0\.1:\d+\/api\/v1: the key was accepted/);
      const [request] = listRequests(sandbox);
      assert.equal(request.query.get('limit'), '1');
      assert.equal(request.headers['x-automation-api-key'], KEY);
    });

    it('gives the count when the service reports a total', async () => {
      sandbox.service.reportTotal = true;
      try {
        const { body } = await test({ ...settings(), apiKey: KEY });
        assert.match(body.message, /it has 42 workflows/);
      } finally {
        sandbox.service.reportTotal = false;
      }
    });

    it('says a typed key was refused, without repeating it', async () => {
      const { body } = await test({ ...settings(), apiKey: 'typed-wrong-key' });
      assert.equal(body.ok, false);
      assert.match(body.message, /refused the API key \(HTTP 401\)/);
      assert.doesNotMatch(body.message, /typed-wrong-key/);
    });

    it('uses the stored key of the node when the key field was left unchanged', async () => {
      for (const unchanged of [{ apiKey: '__PWRD__' }, {}]) {
        sandbox.counters.reset();
        const { body } = await test({ ...settings(), id: 'cfg', ...unchanged });
        assert.equal(body.ok, true, JSON.stringify(unchanged));
        assert.equal(listRequests(sandbox)[0].headers['x-automation-api-key'], KEY);
      }
    });

    it('tests deployed ${VAR} settings with a stored ${VAR} key as the deploy resolved them', async () => {
      process.env.TEST_AUTOMATION_PORT = String(sandbox.server.port);
      process.env.TEST_AUTOMATION_KEY = KEY;
      try {
        await helper.unload();
        await helper.load(
          [configNode, listNode, catchNode],
          flow(sandbox, {}, { port: '${TEST_AUTOMATION_PORT}' }),
          {
            cfg: { apiKey: '${TEST_AUTOMATION_KEY}' },
          },
        );
        const { body } = await test({ ...settings(), id: 'cfg', port: '${TEST_AUTOMATION_PORT}' });
        assert.equal(body.ok, true, body.message);
        assert.equal(listRequests(sandbox)[0].headers['x-automation-api-key'], KEY);
        // Typed settings with a reference are not read from the environment.
        const typed = await test({ ...settings(), port: '${TEST_AUTOMATION_PORT}', apiKey: KEY });
        assert.equal(typed.body.ok, false);
        assert.match(typed.body.message, /deploy the config node first/);
      } finally {
        delete process.env.TEST_AUTOMATION_PORT;
        delete process.env.TEST_AUTOMATION_KEY;
      }
    });

    it('never reads the server environment into a typed key, toward typed or deployed settings', async () => {
      process.env.TEST_AUTOMATION_SECRET = 'environment-secret';
      try {
        sandbox.counters.reset();
        for (const typed of [settings(), { ...settings(), host: 'localhost' }]) {
          const { body } = await test({ ...typed, id: 'cfg', apiKey: '${TEST_AUTOMATION_SECRET}' });
          assert.equal(body.ok, false);
          assert.match(body.message, /the key name an environment variable .*deploy the config node first/);
          assert.doesNotMatch(JSON.stringify(body), /environment-secret/);
        }
        assert.deepEqual(sandbox.counters.requests, []);
      } finally {
        delete process.env.TEST_AUTOMATION_SECRET;
      }
    });

    it('sends the stored key only toward the settings it was deployed with', async () => {
      sandbox.counters.reset();
      await test({ ...settings(), id: 'cfg', headerName: 'X-Other-Header' });
      await test({ ...settings(), id: 'cfg', apiVersion: '2' });
      const requests = sandbox.counters.requests;
      assert.ok(requests.length >= 2);
      for (const request of requests) {
        assert.equal(request.headers['x-automation-api-key'], undefined);
        assert.equal(request.headers['x-other-header'], undefined);
      }
    });

    it('says when the service cannot be reached, or the settings make no address', async () => {
      const unreachable = await test({ ...settings(), port: '1', apiKey: KEY });
      assert.equal(unreachable.body.ok, false);
      assert.match(unreachable.body.message, /could not be reached/);
      const noHost = await test({ ...settings(), host: '', apiKey: KEY });
      assert.equal(noHost.body.ok, false);
      assert.match(noHost.body.message, /do not make an address: the host/);
    });
  });
});
