'use strict';
// TLS through Node-RED's tls-config node and a proxy as Node-RED's http request node takes one (its http proxy
// node, else http_proxy / https_proxy / no_proxy), for REST, the socket, the signed download address and URL
// uploads, against the sandbox behind a TLS terminator (certificates from a CA the test makes with openssl) and a
// CONNECT proxy, both small Node servers on 127.0.0.1.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const tls = require('node:tls');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { proxyFor, proxyFromEnvironment, proxyFromNode } = require('../../dist/http/proxy');
const { coreNode } = require('../support/node-red');
const { ALL_NODES, API_KEY, flowWith, failureOf, outputOf, textOf } = require('../support/generation-nodes');
const { workFolder, makeCertificates } = require('../real/support/protected-servers');

const NODES = [...ALL_NODES, coreNode('network/05-tls.js'), coreNode('network/06-httpproxy.js')];
const PROXY_PASSWORD = 'proxy-pw-77e1-secret';
const PASSPHRASE_FREE = { cert: '', key: '', ca: '' };

/** TLS in front of a port: every connection is decrypted and piped to it (HTTP and WebSocket alike). */
async function startTlsFront(certificates, port) {
  const server = tls.createServer(
    { cert: fs.readFileSync(certificates.serverCert), key: fs.readFileSync(certificates.serverKey) },
    (socket) => {
      const upstream = net.connect(port, '127.0.0.1');
      socket.pipe(upstream).pipe(socket);
      socket.on('error', () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
    },
  );
  server.on('tlsClientError', () => undefined);
  const front = { connections: 0 };
  server.on('connection', () => (front.connections += 1));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  front.url = `https://127.0.0.1:${server.address().port}`;
  front.close = () => closeServer(server);
  return front;
}

/**
 * A CONNECT proxy that records each tunnel's target and Proxy-Authorization; `refuse` answers 403 to targets it
 * returns true for.
 */
async function startConnectProxy() {
  const proxy = { tunnels: [], refuse: () => false, sockets: new Set() };
  const server = http.createServer((_req, res) => res.writeHead(405).end());
  server.on('connect', (req, socket, head) => {
    proxy.sockets.add(socket);
    socket.on('close', () => proxy.sockets.delete(socket));
    proxy.tunnels.push({ target: req.url, authorization: req.headers['proxy-authorization'] });
    if (proxy.refuse(req.url)) {
      socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const [host, port] = [req.url.slice(0, req.url.lastIndexOf(':')), Number(req.url.split(':').pop())];
    const upstream = net.connect(port, host, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${server.address().port}`;
  proxy.close = () => {
    for (const socket of proxy.sockets) socket.destroy();
    return closeServer(server);
  };
  return proxy;
}

function closeServer(server) {
  server.closeAllConnections?.();
  return new Promise((resolve) => server.close(() => resolve()));
}

describe('the proxy rule (http/proxy.ts), as Node-RED reads it', () => {
  it('reads http_proxy, https_proxy, all_proxy and no_proxy from the environment, npm_config_* first', () => {
    assert.equal(proxyFromEnvironment({}), undefined);
    assert.deepEqual(proxyFromEnvironment({ HTTPS_PROXY: 'proxy:3128', no_proxy: 'a.example, .corp ,' }), {
      httpProxy: '',
      httpsProxy: 'http://proxy:3128',
      noProxy: ['a.example', '.corp'],
    });
    const all = proxyFromEnvironment({ all_proxy: 'http://all:1', npm_config_http_proxy: 'http://npm:2' });
    assert.equal(all.httpProxy, 'http://npm:2');
    assert.equal(all.httpsProxy, 'http://all:1');
    assert.equal(proxyFromEnvironment({ npm_config_proxy: 'http://npm:2' }, { excludeNpm: true }), undefined);
  });

  it('sends an address through the proxy unless no_proxy names its host (exactly, .domain, *.domain, host:port, *)', () => {
    const settings = proxyFromNode({
      url: 'proxy.corp:8080',
      noproxy: ['exact.example', '.corp', '*.lan', 'gen.example:8443'],
    });
    const via = (address) => proxyFor(new URL(address), settings)?.href;
    assert.equal(via('https://gen.example'), 'http://proxy.corp:8080/');
    assert.equal(via('http://exact.example/x'), undefined);
    assert.equal(
      via('http://sub.exact.example/x'),
      'http://proxy.corp:8080/',
      'a plain entry is that host only',
    );
    assert.equal(via('https://gen.corp'), undefined);
    assert.equal(via('https://box.lan'), undefined);
    assert.equal(via('https://gen.example:8443'), undefined);
    assert.equal(via('https://gen.example:8444'), 'http://proxy.corp:8080/');
    assert.equal(proxyFor(new URL('https://x'), { httpsProxy: 'http://p:1', noProxy: ['*'] }), undefined);
    assert.equal(
      proxyFor(new URL('http://x'), { httpsProxy: 'http://p:1' }),
      undefined,
      'https_proxy is not for http',
    );
  });
});

describe('TLS configuration and proxy of graph-gen-config', function () {
  let dir;
  let certificates;
  let sandbox;
  let front;
  let proxy;
  let imageHost;
  const saved = {};

  before(async () => {
    dir = workFolder();
    certificates = makeCertificates(dir);
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY });
    sandbox.generation.addFile(
      { filename: 'fox.png', subfolder: '', type: 'output' },
      { content: Buffer.from('fox') },
    );
    front = await startTlsFront(certificates, sandbox.server.port);
    proxy = await startConnectProxy();
    imageHost = http.createServer((_req, res) =>
      res.writeHead(200, { 'content-type': 'image/png' }).end('image'),
    );
    await new Promise((resolve) => imageHost.listen(0, '127.0.0.1', resolve));
  });
  after(async () => {
    await closeServer(imageHost);
    await proxy.close();
    await front.close();
    await sandbox.close();
    await helper.stopServer();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    front.connections = 0;
    sandbox.counters.reset();
    sandbox.generation.storage.counters.reset();
    proxy.tunnels.length = 0;
    proxy.refuse = () => false;
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
      saved[name] = process.env[name];
      delete process.env[name];
    }
  });
  afterEach(async () => {
    await helper.unload();
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  /**
   * Config `c` at `baseUrl` with a tls-config node `tls` (credentials `tlsCredentials`, when given) and an http
   * proxy node `proxy` (when `proxyNode` is given); node `n` of `type`.
   */
  async function load(node, baseUrl, { tlsCredentials, verify = true, proxyNode } = {}) {
    const flow = flowWith(node, { baseUrl });
    const credentials = { c: { apiKey: API_KEY } };
    if (tlsCredentials) {
      flow[0].tls = 'tls';
      flow.push({ id: 'tls', type: 'tls-config', ...PASSPHRASE_FREE, verifyservercert: verify });
      credentials.tls = tlsCredentials;
    }
    if (proxyNode) {
      flow[0].proxy = 'proxy';
      flow.push({ id: 'proxy', type: 'http proxy', url: proxyNode.url, noproxy: proxyNode.noproxy ?? [] });
      credentials.proxy = proxyNode.credentials ?? {};
    }
    await helper.load(NODES, flow, credentials);
  }

  it("reaches an https service and its wss socket with the tls-config node's CA", async () => {
    await load({ type: 'graph-gen-queue' }, front.url, { tlsCredentials: { cadata: certificates.ca } });
    const msg = await outputOf('n', { action: 'list' });
    assert.ok(Array.isArray(msg.payload.queue_running));
    assert.equal(await helper.getNode('c').connection.sockets().ready(5000), true, 'the socket over wss');
    assert.equal(sandbox.counters.handshakes.length, 1);
  });

  it('refuses a certificate from an unknown CA once, with a sentence that says to add its CA', async () => {
    await load({ type: 'graph-gen-queue' }, front.url, { tlsCredentials: { cadata: certificates.otherCa } });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'network');
    assert.match(
      failure.error.message,
      /the certificate of 127\.0\.0\.1:\d+ is not trusted \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\): if it comes from a private certificate authority, add that authority's certificate \(CA\) in a TLS configuration on the config node/,
    );
    assert.equal(sandbox.counters.requests.length, 0, 'nothing reached the service');
    assert.equal(front.connections, 1, 'not tried again: it would not be trusted the next time either');
    await helper.unload();
    // "Verify server certificate" off: the same server is reached.
    await load({ type: 'graph-gen-queue' }, front.url, {
      tlsCredentials: { cadata: certificates.otherCa },
      verify: false,
    });
    await outputOf('n', { action: 'list' });
  });

  it('refuses a tls-config node that is not deployed, in words', async () => {
    const flow = flowWith({ type: 'graph-gen-queue' }, { baseUrl: front.url });
    flow[0].tls = 'missing-tls';
    await helper.load(NODES, flow, { c: { apiKey: API_KEY } });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /The TLS configuration chosen in the config node is not deployed/);
  });

  it("goes through the http proxy node for REST, the socket and the signed download, with the proxy's password", async () => {
    await load({ type: 'graph-gen-download' }, sandbox.url, {
      proxyNode: { url: proxy.url, credentials: { username: 'pu', password: PROXY_PASSWORD } },
    });
    const msg = await outputOf('n', { payload: { filename: 'fox.png', subfolder: '', type: 'output' } });
    assert.equal(msg.payload.toString(), 'fox');
    assert.equal(await helper.getNode('c').connection.sockets().ready(5000), true);
    const targets = proxy.tunnels.map((tunnel) => tunnel.target);
    const service = new URL(sandbox.url).host;
    const storage = new URL(sandbox.generation.storageUrl).host;
    assert.ok(targets.includes(service), `the service through the proxy: ${targets}`);
    assert.ok(targets.includes(storage), `the storage host through the proxy: ${targets}`);
    assert.ok(targets.filter((target) => target === service).length >= 2, 'REST and the socket');
    const expected = `Basic ${Buffer.from(`pu:${PROXY_PASSWORD}`).toString('base64')}`;
    for (const tunnel of proxy.tunnels) assert.equal(tunnel.authorization, expected);
    assert.equal(sandbox.generation.storage.counters.requests[0].headers['x-api-key'], undefined);
  });

  it('goes through https_proxy to an https service (TLS inside the tunnel), not for a no_proxy host', async () => {
    process.env.https_proxy = proxy.url;
    await load({ type: 'graph-gen-queue' }, front.url, { tlsCredentials: { cadata: certificates.ca } });
    await outputOf('n', { action: 'list' });
    assert.equal(await helper.getNode('c').connection.sockets().ready(5000), true);
    assert.deepEqual(
      new Set(proxy.tunnels.map((tunnel) => tunnel.target)),
      new Set([new URL(front.url).host]),
    );
    assert.ok(proxy.tunnels.length >= 2, 'REST and the socket');
    await helper.unload();
    proxy.tunnels.length = 0;
    process.env.no_proxy = '127.0.0.1';
    await load({ type: 'graph-gen-queue' }, front.url, { tlsCredentials: { cadata: certificates.ca } });
    await outputOf('n', { action: 'list' });
    assert.equal(proxy.tunnels.length, 0);
  });

  it('a proxy that refuses the service fails at once with a sentence naming the proxy, its password never shown', async () => {
    proxy.refuse = () => true;
    await load({ type: 'graph-gen-queue' }, sandbox.url, {
      proxyNode: { url: proxy.url, credentials: { username: 'pu', password: PROXY_PASSWORD } },
    });
    const failure = await failureOf('n', { action: 'list' });
    assert.equal(failure.error.code, 'network');
    assert.match(
      failure.error.message,
      /the proxy http:\/\/127\.0\.0\.1:\d+ refused to connect to 127\.0\.0\.1:\d+ \(HTTP 403\): check that the proxy .* lets Node-RED reach/,
    );
    assert.equal(proxy.tunnels.length, 1, 'not tried again');
    assert.ok(!textOf(failure).includes(PROXY_PASSWORD));
  });

  it("fetches an upload's image URL through the proxy too", async () => {
    // The sandbox stands in for the internet on 127.0.0.1: local addresses allowed.
    await load({ type: 'graph-gen-upload', urlLocal: true }, sandbox.url, { proxyNode: { url: proxy.url } });
    const image = `http://127.0.0.1:${imageHost.address().port}/cat.png`;
    const msg = await outputOf('n', { payload: image });
    assert.equal(msg.filename, 'cat.png');
    assert.ok(
      proxy.tunnels.some((tunnel) => tunnel.target === new URL(image).host),
      'the image host through the proxy',
    );
  });
});
