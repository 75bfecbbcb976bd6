'use strict';
// The real ComfyUI behind what people put in front of it: nginx terminating TLS (certificates from a CA this
// test makes) with basic auth, with a bearer check (the socket may carry the token as ?token=), or asking for a
// client certificate; and tinyproxy as the company's forward proxy, chosen as Node-RED's http proxy node or
// through https_proxy. Every node works through each: upload, submit, await with progress, download, queue, and
// the editor's node definitions. A wrong password, an unknown CA and a proxy that refuses each fail with a
// sentence that says what to fix, and no secret in it.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const { settle, prefix } = require('./support/server');
const { NODES, realFlow, collect, send, outputOf, submitThrough } = require('./support/flow');
const { made } = require('./support/server');
const { encodePng, SIGNATURE } = require('./support/png');
const { coreNode } = require('../support/node-red');
const {
  workFolder,
  makeCertificates,
  startNginx,
  startTinyproxy,
  stopAll,
} = require('./support/protected-servers');

const USER = 'comfy-user';
const PASSWORD = 'pw-7c1e9a-secret';
const TOKEN = 'tok-52b8d0f3-secret';
const PROXY_USER = 'proxy-user';
const PROXY_PASSWORD = 'proxy-pw-4d2a-secret';
const SECRETS = [PASSWORD, TOKEN, PROXY_PASSWORD, Buffer.from(`${USER}:${PASSWORD}`).toString('base64')];
const ALL_NODES = [...NODES, coreNode('network/05-tls.js'), coreNode('network/06-httpproxy.js')];
const SINKS = ['submitted', 'done', 'failed', 'progress', 'queued', 'uploaded', 'downloaded', 'caught'];

describe('real ComfyUI behind a login, TLS and a proxy', function () {
  let dir;
  let certificates;
  let fronts;
  let proxy;
  let strictProxy;
  /** The config node of the flow loaded last, as saved. */
  let deployedConfig;
  const savedEnvironment = {};

  before(async function () {
    this.timeout(120_000);
    dir = workFolder();
    certificates = makeCertificates(dir);
    fronts = await startNginx(dir, certificates, comfy.url, { user: USER, password: PASSWORD, token: TOKEN });
    proxy = await startTinyproxy(dir, 'proxy', { user: PROXY_USER, password: PROXY_PASSWORD });
    // A company proxy that tunnels to 443 only: the service's port is refused.
    strictProxy = await startTinyproxy(dir, 'strict-proxy', { connectPorts: [443] });
    await helper.startServer();
  });
  after(async () => {
    await helper.stopServer();
    await stopAll();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    for (const name of [
      'http_proxy',
      'https_proxy',
      'no_proxy',
      'HTTP_PROXY',
      'HTTPS_PROXY',
      'NO_PROXY',
      'all_proxy',
      'ALL_PROXY',
    ]) {
      savedEnvironment[name] = process.env[name];
      delete process.env[name];
    }
  });
  afterEach(async () => {
    await helper.unload();
    await settle();
    for (const [name, value] of Object.entries(savedEnvironment)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  /**
   * The real-server flow (support/flow.js) with the config node's access settings, a tls-config node `tls`
   * (the test's CA unless told) and an http proxy node `proxy` when asked; await sends progress.
   */
  async function load(baseUrl, access, credentials, { tls = { cadata: certificates.ca }, proxyNode } = {}) {
    const flow = realFlow(baseUrl, { await: { progress: true } });
    deployedConfig = flow.find((node) => node.id === 'cfg');
    Object.assign(deployedConfig, {
      tls: tls ? 'tls' : '',
      ...access,
      ...(proxyNode ? { proxy: 'proxy' } : {}),
    });
    const extra = [];
    const allCredentials = { cfg: credentials };
    if (tls) {
      extra.push({ id: 'tls', type: 'tls-config', cert: '', key: '', ca: '', verifyservercert: true });
      allCredentials.tls = tls;
    }
    if (proxyNode) {
      extra.push({ id: 'proxy', type: 'http proxy', url: proxyNode.url, noproxy: [] });
      allCredentials.proxy = proxyNode.credentials ?? {};
    }
    await helper.load(ALL_NODES, [...flow, ...extra], allCredentials);
    const out = {};
    for (const id of SINKS) out[id] = collect(id);
    helper.getNode('submitted').on('input', (msg) => made.add(msg.prompt_id));
    return out;
  }

  /**
   * The editor's node definitions of the deployed config node, read as the submit dialog reads them: with the
   * config node's settings as the editor holds them, and no credential typed.
   */
  async function definitions() {
    const saved = deployedConfig;
    const fields = ['baseUrl', 'authType', 'authHeader', 'tokenInQuery', 'tls', 'proxy'];
    const body = Object.fromEntries(
      fields.filter((field) => saved[field] !== undefined).map((field) => [field, saved[field]]),
    );
    const answer = await helper
      .request()
      .post('/graph-gen/graph-gen-config/definitions')
      .send({ id: 'cfg', ...body });
    return answer.body;
  }

  /** The dialog's "test connection" for settings as typed. */
  async function testConnection(body) {
    return (await helper.request().post('/graph-gen/graph-gen-config/test').send(body)).body;
  }

  function assertNoSecret(value, what) {
    const text = JSON.stringify(value);
    for (const secret of SECRETS)
      assert.ok(!text.includes(secret), `${what} holds a secret: ${text.slice(0, 300)}`);
  }

  /**
   * Upload an image, submit a workflow that loads it, await it with progress, download its output, list the
   * queue, and read the node definitions the editor shows: all through whatever the config node goes through.
   */
  async function everyNodeWorks(out) {
    const name = prefix('protected');
    const image = encodePng(24, 16, (x, y) => [x * 9, y * 13, 90, 255]);
    const uploaded = await outputOf(
      out,
      'upload',
      'uploaded',
      { payload: image, filename: `${name}.png` },
      30_000,
    );
    assert.equal(uploaded.payload.name, `${name}.png`);
    const id = await submitThrough(out, {
      1: { class_type: 'LoadImage', inputs: { image: uploaded.payload.name } },
      2: { class_type: 'ImageInvert', inputs: { image: ['1', 0] } },
      9: { class_type: 'SaveImage', inputs: { filename_prefix: name, images: ['2', 0] } },
    });
    const done = await out.done.of(id, 60_000);
    assert.equal(done.payload.status, 'completed');
    assert.equal(done.payload.files.length, 1);
    // Progress comes over the socket only: the handshake went through too.
    const progress = out.progress.received.filter((msg) => msg.prompt_id === id);
    assert.ok(progress.length > 0, 'progress msgs of the job');
    assert.ok(helper.getNode('cfg').connection.sockets().stats.socketsOpened >= 1);

    send('download', { prompt_id: id, payload: structuredClone(done.payload) });
    const downloaded = await out.downloaded.find(
      (msg) => msg.prompt_id === id,
      'the downloaded file',
      30_000,
    );
    const bytes = downloaded.payload;
    assert.ok(Buffer.isBuffer(bytes) && bytes.length > SIGNATURE.length, 'a file was downloaded');
    assert.deepEqual(bytes.subarray(0, SIGNATURE.length), SIGNATURE, 'the file is a PNG');

    const queued = await outputOf(out, 'queue', 'queued', { action: 'list' });
    assert.ok(Array.isArray(queued.payload.queue_running), JSON.stringify(queued.payload).slice(0, 200));

    const read = await definitions();
    assert.equal(read.ok, true, read.message);
    assert.ok(read.definitions.LoadImage, 'LoadImage among the definitions');
    assert.equal(out.caught.received.length, 0, JSON.stringify(out.caught.received.map((msg) => msg.error)));
  }

  /** The error the Catch node got for a msg sent into `id`. */
  async function failureOf(out, id, msg) {
    const before = out.caught.received.length;
    send(id, msg);
    const caught = await out.caught.nth(before + 1, 30_000);
    assertNoSecret(caught.error, 'the error');
    return caught.error;
  }

  function tunnelsIn(log) {
    return (fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '')
      .split('\n')
      .filter((line) => /CONNECT /.test(line)).length;
  }

  it('works through nginx with TLS from a private CA and basic auth, REST and socket alike', async () => {
    const access = { authType: 'basic' };
    const out = await load(fronts.basic, access, { username: USER, password: PASSWORD });
    await everyNodeWorks(out);
    const tested = await testConnection({
      id: 'cfg',
      baseUrl: fronts.basic,
      ...access,
      tls: 'tls',
      username: USER,
    });
    assert.equal(tested.ok, true, tested.message);
    assert.match(tested.message, /accepted the user name and password \(basic authentication\)/);
  });

  it('works through nginx with a bearer token, the socket carrying it as ?token= where the server asks so', async () => {
    const access = { authType: 'bearer', tokenInQuery: true };
    const out = await load(fronts.bearer, access, { apiKey: TOKEN });
    await everyNodeWorks(out);
  });

  it('works through nginx asking for a client certificate, given in the TLS configuration', async () => {
    const tls = {
      cadata: certificates.ca,
      certdata: certificates.clientCert,
      keydata: certificates.clientKey,
    };
    const out = await load(fronts.clientCert, { authType: 'none' }, {}, { tls });
    await everyNodeWorks(out);
  });

  it("works through a forward proxy (Node-RED's http proxy node, with its own password) to nginx", async () => {
    const access = { authType: 'basic' };
    const before = tunnelsIn(proxy.log);
    const out = await load(
      fronts.basic,
      access,
      { username: USER, password: PASSWORD },
      {
        proxyNode: { url: proxy.url, credentials: { username: PROXY_USER, password: PROXY_PASSWORD } },
      },
    );
    await everyNodeWorks(out);
    assert.ok(tunnelsIn(proxy.log) > before, 'the proxy tunnelled the connections');
  });

  it('works through the proxy https_proxy names (its password in the address), and directly for a no_proxy host', async () => {
    const access = { authType: 'bearer' };
    const address = new URL(proxy.url);
    address.username = PROXY_USER;
    address.password = PROXY_PASSWORD;
    process.env.https_proxy = address.href;
    let before = tunnelsIn(proxy.log);
    let out = await load(fronts.bearer, access, { apiKey: TOKEN });
    await everyNodeWorks(out);
    assert.ok(tunnelsIn(proxy.log) > before, 'the proxy tunnelled the connections');
    await helper.unload();

    process.env.no_proxy = 'localhost,127.0.0.1';
    before = tunnelsIn(proxy.log);
    out = await load(fronts.bearer, access, { apiKey: TOKEN });
    await outputOf(out, 'queue', 'queued', { action: 'list' });
    assert.equal(tunnelsIn(proxy.log), before, 'no_proxy: straight to the server');
  });

  it('a wrong password fails every request with a sentence naming basic authentication, and no password', async () => {
    const access = { authType: 'basic' };
    const out = await load(fronts.basic, access, { username: USER, password: 'not-the-password' });
    const error = await failureOf(out, 'queue', { action: 'list' });
    assert.equal(error.code, 'unauthorized');
    assert.match(
      error.message,
      /the user name and password \(basic authentication\) were refused by the generation service \(HTTP 401\)/,
    );
    assert.ok(!error.message.includes('not-the-password'));
    const upload = await failureOf(out, 'upload', {
      payload: encodePng(4, 4, () => [0, 0, 0, 255]),
      filename: 'x.png',
    });
    assert.equal(upload.code, 'unauthorized');
    const tested = await testConnection({
      baseUrl: fronts.basic,
      ...access,
      tls: 'tls',
      username: USER,
      password: 'wrong-again',
    });
    assert.equal(tested.code, 'unauthorized');
    assert.match(tested.message, /refused the user name and password \(basic authentication\): check them\./);
    assert.ok(!JSON.stringify(tested).includes('wrong-again'));
  });

  it('a certificate from an unknown CA fails with a sentence that says to add its CA', async () => {
    const out = await load(
      fronts.basic,
      { authType: 'basic' },
      { username: USER, password: PASSWORD },
      {
        tls: { cadata: certificates.otherCa },
      },
    );
    const error = await failureOf(out, 'queue', { action: 'list' });
    assert.equal(error.code, 'network');
    assert.match(
      error.message,
      /the certificate of 127\.0\.0\.1:\d+ is not trusted \([A-Z_]+\): .*add that authority's certificate \(CA\) in a TLS configuration/,
    );
    await helper.unload();
    // No TLS configuration: the system's authorities do not know the test's CA either.
    const plain = await load(
      fronts.basic,
      { authType: 'basic' },
      { username: USER, password: PASSWORD },
      { tls: null },
    );
    const refused = await failureOf(plain, 'submit', {
      payload: { 1: { class_type: 'EmptyImage', inputs: {} } },
    });
    assert.equal(refused.code, 'network');
    assert.match(refused.message, /is not trusted/);
  });

  it('a proxy that refuses the service, or wants its own password, fails with a sentence naming the proxy', async () => {
    let out = await load(
      fronts.basic,
      { authType: 'basic' },
      { username: USER, password: PASSWORD },
      {
        proxyNode: { url: strictProxy.url },
      },
    );
    let error = await failureOf(out, 'queue', { action: 'list' });
    assert.equal(error.code, 'network');
    assert.match(
      error.message,
      /the proxy http:\/\/127\.0\.0\.1:\d+ refused to connect to 127\.0\.0\.1:\d+ \(HTTP 403\)/,
    );
    await helper.unload();

    out = await load(
      fronts.basic,
      { authType: 'basic' },
      { username: USER, password: PASSWORD },
      {
        proxyNode: { url: proxy.url },
      },
    );
    error = await failureOf(out, 'queue', { action: 'list' });
    assert.match(
      error.message,
      /refused to connect .*\(HTTP 407\): it asks for its own user name and password/,
    );
  });
});
