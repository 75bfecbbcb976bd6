'use strict';
// The config node's authentication: API key (as before), bearer token, basic, a header of the user's naming, and
// none; every request and the socket's handshake carry it, the signed download address gets none of it, a 401 or
// 403 names the scheme that was refused, and no secret is ever echoed.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { Credential } = require('../../dist/http/auth');
const { GenerationConnection } = require('../../dist/generation/connection');
const { API_KEY, flowWith, load, failureOf, outputOf, textOf } = require('../support/generation-nodes');

const TOKEN = 'tok-0a9f7e-secret';
const PASSWORD = 'pw-3c5d1b-secret';
const BASIC = `Basic ${Buffer.from(`alice:${PASSWORD}`).toString('base64')}`;

describe('authentication schemes (http/auth.ts)', () => {
  it('sends each scheme as its header, and a token on the socket only where asked', () => {
    const cases = [
      [{}, {}, undefined, undefined],
      [{ scheme: 'none', secret: 'ignored' }, {}, undefined, undefined],
      [{ secret: 'k1' }, { 'x-api-key': 'k1' }, 'k1', 'k1'],
      [{ scheme: 'bearer', secret: TOKEN }, { authorization: `Bearer ${TOKEN}` }, undefined, undefined],
      [
        { scheme: 'bearer', secret: TOKEN, tokenInQuery: true },
        { authorization: `Bearer ${TOKEN}` },
        TOKEN,
        undefined,
      ],
      [
        { scheme: 'basic', username: 'alice', password: PASSWORD },
        { authorization: BASIC },
        undefined,
        undefined,
      ],
      [
        { scheme: 'header', headerName: ' X-Auth-Token ', secret: TOKEN },
        { 'x-auth-token': TOKEN },
        undefined,
        undefined,
      ],
      [
        { scheme: 'header', headerName: 'Cookie', secret: `session=${TOKEN}`, tokenInQuery: true },
        { cookie: `session=${TOKEN}` },
        `session=${TOKEN}`,
        undefined,
      ],
    ];
    for (const [settings, headers, socketToken, cloudKey] of cases) {
      const credential = Credential.from(settings);
      assert.deepEqual(credential.headers, headers, JSON.stringify(settings));
      assert.equal(credential.socketToken, socketToken, JSON.stringify(settings));
      assert.equal(
        credential.cloudKey,
        cloudKey,
        `only the API-key scheme is a cloud key: ${JSON.stringify(settings)}`,
      );
    }
  });

  it('refuses settings that cannot be sent, saying what to fix and never the secret', () => {
    const cases = [
      [{ scheme: 'bearer' }, /bearer token, but none is set/],
      [{ scheme: 'basic' }, /neither is set/],
      [{ scheme: 'basic', username: 'a:b', password: 'p' }, /holds a colon/],
      [{ scheme: 'header', headerName: 'X Auth', secret: 's' }, /is not a header name/],
      [{ scheme: 'header', headerName: 'Host', secret: 's' }, /belongs to HTTP itself/],
      [{ scheme: 'header', headerName: 'Sec-WebSocket-Key', secret: 's' }, /belongs to HTTP itself/],
      [{ scheme: 'header', headerName: 'X-A' }, /value is not set/],
      [{ scheme: 'bearer', secret: `${TOKEN}\r\nX-Evil: 1` }, /line break/],
      [{ scheme: 'magic', secret: TOKEN }, /is not one of none, apiKey, bearer, basic, header/],
    ];
    for (const [settings, message] of cases) {
      assert.throws(
        () => Credential.from(settings),
        (error) =>
          error.code === 'invalid_input' && message.test(error.message) && !error.message.includes(TOKEN),
        JSON.stringify(settings),
      );
    }
  });
});

describe('graph-gen-config authentication against the sandbox', () => {
  let selfHosted;
  let cloud;
  let connection;

  before(async () => {
    await helper.startServer();
    selfHosted = await startSandbox();
    cloud = await startSandbox({ generationApiKey: API_KEY });
    cloud.generation.addFile(
      { filename: 'fox.png', subfolder: '', type: 'output' },
      { content: Buffer.from('fox') },
    );
  });
  after(async () => {
    await selfHosted.close();
    await cloud.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    for (const sandbox of [selfHosted, cloud]) {
      sandbox.counters.reset();
      sandbox.faults.clear();
      sandbox.server.login = undefined;
      sandbox.generation.storage.counters.reset();
    }
  });
  afterEach(async () => {
    await connection?.close();
    connection = undefined;
    await helper.unload();
  });

  const authFlow = (own, baseUrl = selfHosted.url) => {
    const flow = flowWith({ type: 'graph-gen-queue' }, { baseUrl });
    Object.assign(flow[0], own);
    return flow;
  };

  it('a bearer token goes on every request and on the handshake; a server behind it stays self-hosted', async () => {
    selfHosted.server.login = { header: 'authorization', value: `Bearer ${TOKEN}` };
    await load(authFlow({ authType: 'bearer' }), { apiKey: TOKEN });
    const msg = await outputOf('n', { action: 'list' });
    assert.ok(Array.isArray(msg.payload.queue_running));
    const { connection: held } = helper.getNode('c');
    assert.equal(held.settings.apiKey, undefined, 'not a cloud key');
    assert.equal(held.credential.cloudKey, undefined);
    assert.equal(await held.sockets().ready(5000), true, 'the handshake passed the login');
    const [handshake] = selfHosted.counters.handshakes;
    assert.equal(handshake.headers.authorization, `Bearer ${TOKEN}`);
    assert.equal(handshake.query.has('token'), false, 'no token in the address unless asked');
    for (const seen of selfHosted.counters.requests) {
      assert.equal(seen.headers.authorization, `Bearer ${TOKEN}`, seen.path);
      assert.equal(seen.headers['x-api-key'], undefined);
    }
  });

  it('a bearer token goes as ?token= on the socket when the server takes it so (ComfyUI-Login)', async () => {
    selfHosted.server.login = { header: 'authorization', value: `Bearer ${TOKEN}`, socketToken: TOKEN };
    connection = new GenerationConnection({
      baseUrl: selfHosted.url,
      partnerKeyField: 'f',
      auth: { scheme: 'bearer', secret: TOKEN, tokenInQuery: true },
    });
    assert.equal(await connection.sockets().ready(5000), true);
    assert.equal(selfHosted.counters.handshakes[0].query.get('token'), TOKEN);
  });

  it('a handshake refused with 401 says in the log which scheme, never its secret', async () => {
    selfHosted.faults.add({ method: 'UPGRADE', path: '/ws', status: 401, times: 5 });
    connection = new GenerationConnection({
      baseUrl: selfHosted.url,
      partnerKeyField: 'f',
      auth: { scheme: 'basic', username: 'alice', password: PASSWORD },
    });
    const lines = [];
    const sockets = connection.sockets();
    sockets.register({ onLog: (level, line) => lines.push(`${level} ${line}`) });
    assert.equal(await sockets.ready(3000), false);
    assert.equal(sockets.state, 'unauthorized');
    assert.ok(
      lines.some((line) =>
        /^warn .*the server refused the user name and password \(basic authentication\)/.test(line),
      ),
      lines.join('\n'),
    );
    assert.ok(!lines.join('\n').includes(PASSWORD));
  });

  it('basic: the user and password on requests and handshake; a wrong password names basic, without it', async () => {
    selfHosted.server.login = { header: 'authorization', value: BASIC };
    await load(authFlow({ authType: 'basic' }), { username: 'alice', password: PASSWORD });
    await outputOf('n', { action: 'list' });
    assert.equal(await helper.getNode('c').connection.sockets().ready(5000), true);
    assert.equal(selfHosted.counters.handshakes[0].headers.authorization, BASIC);
    await helper.unload();

    await load(authFlow({ authType: 'basic' }), { username: 'alice', password: 'wrong-pw-secret' });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'unauthorized');
    assert.match(
      failure.error.message,
      /^the user name and password \(basic authentication\) were refused by the generation service \(HTTP 401\) while listing the queue: check them in the config node/,
    );
    assert.ok(!textOf(failure).includes('wrong-pw-secret'));
    assert.ok(!textOf(failure).includes(Buffer.from('alice:wrong-pw-secret').toString('base64')));
  });

  it('a header of your naming; an echo of its value is removed, and the refusal names the header', async () => {
    selfHosted.server.login = { header: 'x-auth-token', value: TOKEN };
    await load(authFlow({ authType: 'header', authHeader: 'X-Auth-Token' }), { apiKey: TOKEN });
    await outputOf('n', { action: 'list' });
    assert.equal(await helper.getNode('c').connection.sockets().ready(5000), true);
    assert.equal(selfHosted.counters.handshakes[0].headers['x-auth-token'], TOKEN);
    selfHosted.faults.add({
      path: '/api/queue',
      status: 403,
      body: { message: `token ${TOKEN} is not allowed` },
    });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'unauthorized');
    assert.match(
      failure.error.message,
      /^the X-Auth-Token header was refused by the generation service \(HTTP 403\)/,
    );
    assert.ok(!textOf(failure).includes(TOKEN), textOf(failure));
  });

  it('none: nothing is sent, though a key is stored; a 401 then asks for credentials', async () => {
    await load(authFlow({ authType: 'none' }), { apiKey: 'stored-but-unused' });
    await outputOf('n', { action: 'list' });
    const [seen] = selfHosted.counters.requests;
    assert.equal(seen.headers['x-api-key'], undefined);
    assert.equal(seen.headers.authorization, undefined);
    selfHosted.server.login = { header: 'authorization', value: BASIC };
    const failure = await failureOf('n', { action: 'list' });
    assert.match(failure.error.message, /asks for an API key or other credentials \(HTTP 401\)/);
  });

  it('an old config node (no authentication setting) with a key is the API-key scheme, exactly as before', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }), { apiKey: API_KEY });
    const { connection: held } = helper.getNode('c');
    assert.equal(held.settings.auth, undefined);
    assert.equal(held.settings.apiKey, API_KEY);
    await outputOf('n', { action: 'list' });
    assert.equal(cloud.counters.requests[0].headers['x-api-key'], API_KEY);
    assert.equal(cloud.counters.requests[0].headers.authorization, undefined);
    assert.equal(await held.sockets().ready(5000), true);
    assert.equal(cloud.counters.handshakes[0].query.get('token'), API_KEY);
  });

  it('the signed download address gets none of a credential', async () => {
    // A header scheme named like the cloud's key: the service accepts it; the storage host must not see it.
    const own = { type: 'graph-gen-download' };
    const flow = flowWith(own, { baseUrl: cloud.url });
    Object.assign(flow[0], { authType: 'header', authHeader: 'X-API-Key', tokenInQuery: true });
    await load(flow, { apiKey: API_KEY });
    const msg = await outputOf('n', { payload: { filename: 'fox.png', subfolder: '', type: 'output' } });
    assert.equal(msg.payload.toString(), 'fox');
    assert.equal(cloud.counters.matching('/api/view')[0].headers['x-api-key'], API_KEY);
    const storage = cloud.generation.storage.counters.requests;
    assert.equal(storage.length, 1);
    assert.equal(storage[0].headers['x-api-key'], undefined);
    assert.equal(storage[0].headers.authorization, undefined);
    assert.deepEqual(cloud.generation.storageLeaks(), []);
  });

  it('settings that cannot be sent fail every node with a sentence (invalid_input)', async () => {
    await load(authFlow({ authType: 'header', authHeader: 'Content-Length' }), { apiKey: TOKEN });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(
      failure.error.message,
      /the header Content-Length in the config node belongs to HTTP itself/,
    );
    assert.equal(selfHosted.counters.requests.length, 0);
  });

  describe("the dialog's test connection", () => {
    const test = (body) => helper.request().post('/graph-gen/graph-gen-config/test').send(body);

    it('tests a typed scheme, and names the one refused without its secret', async () => {
      selfHosted.server.login = { header: 'authorization', value: BASIC };
      await load(authFlow({}), {});
      const ok = await test({
        baseUrl: selfHosted.url,
        authType: 'basic',
        username: 'alice',
        password: PASSWORD,
      });
      assert.equal(ok.body.ok, true, ok.body.message);
      assert.match(ok.body.message, /accepted the user name and password \(basic authentication\)\.$/);
      const refused = await test({ baseUrl: selfHosted.url, authType: 'bearer', apiKey: TOKEN });
      assert.equal(refused.body.code, 'unauthorized');
      assert.match(refused.body.message, /refused the bearer token: check the token\.$/);
      assert.ok(!textOf(refused.body).includes(TOKEN));
    });

    it("uses a deployed node's stored password when the field is unchanged, only for its saved settings", async () => {
      selfHosted.server.login = { header: 'authorization', value: BASIC };
      await load(authFlow({ authType: 'basic' }), { username: 'alice', password: PASSWORD });
      const saved = {
        id: 'c',
        baseUrl: selfHosted.url,
        authType: 'basic',
        username: 'alice',
        password: '__PWRD__',
      };
      const ok = await test(saved);
      assert.equal(ok.body.ok, true, ok.body.message);
      // Another scheme is other settings: the stored password is not sent.
      const other = await test({ ...saved, authType: 'header', authHeader: 'X-Password' });
      assert.equal(other.body.ok, false);
      assert.equal(selfHosted.counters.requests.filter((seen) => seen.headers['x-password']).length, 0);
    });

    it('an old node (no authentication setting) is tested with its stored key, as the API-key scheme', async () => {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }), { apiKey: API_KEY });
      const answer = await test({
        id: 'c',
        baseUrl: cloud.url,
        authType: 'apiKey',
        tokenInQuery: false,
        tls: '',
        proxy: '',
      });
      assert.equal(answer.body.ok, true, answer.body.message);
      assert.match(answer.body.message, /accepted the API key\.$/);
    });
  });
});
