'use strict';
// graph-gen-upload's other sources: data: URLs, base64 text, and http(s) URLs fetched from a local image host
// with faults (too big, endless, slow, 404, redirects), against the sandbox over real HTTP.
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { readUploadSource, DEFAULT_URL_LIMITS } = require('../../dist/generation/transfer/upload-source');
const { isLocalAddress } = require('../../dist/generation/transfer/local-address');
const {
  API_KEY,
  PARTNER_KEY,
  flowWith,
  load,
  failureOf,
  outputOf,
  textOf,
} = require('../support/generation-nodes');
const { statuses } = require('../support/node-red');

const MIB = 1024 * 1024;

/** A local image host: its routes, and every request it saw (headers included). */
async function startImageHost(bytes) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    seen.push({ path: url.pathname, headers: req.headers });
    const redirect = /^\/hop\/(\d+)$/.exec(url.pathname);
    if (redirect) {
      const left = Number(redirect[1]);
      res.writeHead(302, { location: left > 1 ? `/hop/${left - 1}` : '/img/fox.png' }).end();
    } else if (url.pathname === '/img/fox.png' || url.pathname === '/nameless/') {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': bytes.length }).end(bytes);
    } else if (url.pathname === '/big.png') {
      // Says 2 MiB up front and never sends it: refused on Content-Length alone.
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': 2 * MIB });
      res.write(Buffer.alloc(1024));
    } else if (url.pathname === '/endless.png') {
      // No Content-Length: streams until the reader stops it.
      res.writeHead(200, { 'content-type': 'image/png' });
      const chunk = Buffer.alloc(64 * 1024, 7);
      const pump = () => {
        while (res.write(chunk));
      };
      res.on('drain', pump);
      pump();
    } else if (url.pathname === '/slow.png') {
      res.writeHead(200, { 'content-type': 'image/png' });
      const timer = setInterval(() => res.write(Buffer.from([1])), 50);
      res.on('close', () => clearInterval(timer));
    } else if (url.pathname === '/to-metadata') {
      res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
    } else if (url.pathname === '/to-localhost') {
      res.writeHead(302, { location: `http://localhost:${server.address().port}/img/fox.png` }).end();
    } else if (url.pathname === '/ftp') {
      res.writeHead(302, { location: 'ftp://127.0.0.1/fox.png' }).end();
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not here');
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sockets = new Set();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    host: `127.0.0.1:${server.address().port}`,
    seen,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The temporary directories the upload node makes for URLs. */
function temporaryCopies() {
  return new Set(fs.readdirSync(os.tmpdir()).filter((name) => name.startsWith('graph-gen-upload-')));
}

describe('graph-gen-upload sources: data: URL, base64, http(s) URL', () => {
  let sandbox;
  let imageHost;
  let directory;
  const image = crypto.randomBytes(40_000);

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY });
    imageHost = await startImageHost(image);
    directory = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-upload-sources-'));
  });
  after(async () => {
    await imageHost.close();
    await sandbox.close();
    await helper.stopServer();
    fs.rmSync(directory, { recursive: true, force: true });
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
    sandbox.generation.uploads.length = 0;
    imageHost.seen.length = 0;
  });
  afterEach(async () => helper.unload());

  const sha = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');
  const uploads = () => sandbox.generation.uploads;
  // The image host is on 127.0.0.1, a local address: these tests allow local addresses.
  const loadUpload = (settings = {}) =>
    load(flowWith({ type: 'graph-gen-upload', urlLocal: true, ...settings }, { baseUrl: sandbox.url }));

  it('uploads the bytes of a data: URL (base64 and percent-encoded) under msg.filename', async () => {
    await loadUpload();
    const msg = await outputOf('n', {
      payload: `data:image/png;base64,${image.toString('base64')}`,
      filename: 'drawn.png',
    });
    assert.equal(msg.filename, 'drawn.png');
    assert.equal(uploads()[0].sha256, sha(image));
    assert.equal(uploads()[0].contentType, 'image/png');
    await outputOf('n', { payload: 'data:text/plain,a%20b%C3%A9', filename: 'note.txt' });
    assert.equal(uploads()[1].sha256, sha(Buffer.from('a bé')));
  });

  it('a data: URL without ;base64 is percent-decoded into bytes (any byte, not only UTF-8 text)', async () => {
    await loadUpload();
    await outputOf('n', { payload: 'data:application/octet-stream,%FF%D8%00%80ok%2', filename: 'raw.bin' });
    assert.equal(uploads()[0].sha256, sha(Buffer.from([0xff, 0xd8, 0x00, 0x80, 0x6f, 0x6b, 0x25, 0x32])));
    assert.equal(uploads()[0].size, 8);
    // With ;base64 the data is percent-decoded first, as browsers read it.
    await outputOf('n', { payload: 'data:text/plain;base64,aGk%3D', filename: 'hi.txt' });
    assert.equal(uploads()[1].sha256, sha(Buffer.from('hi')));
  });

  it('uploads base64 text: auto takes 64+ base64 characters (white space ignored), base64 mode any length', async () => {
    await loadUpload();
    const wrapped = image.toString('base64').replace(/.{76}/g, '$&\n').trim();
    await outputOf('n', { payload: wrapped, filename: 'b64.png' });
    assert.equal(uploads()[0].sha256, sha(image));
    await helper.unload();
    await loadUpload({ payloadIs: 'base64' });
    await outputOf('n', { payload: 'aGk=', filename: 'hi.txt' });
    assert.equal(uploads()[1].sha256, sha(Buffer.from('hi')));
  });

  it('auto reads an existing file as a path even when its name is base64 text; path mode never decodes', async () => {
    const name = 'A'.repeat(64);
    fs.writeFileSync(path.join(directory, name), image);
    await loadUpload();
    const cwd = process.cwd();
    process.chdir(directory);
    try {
      await outputOf('n', { payload: name, filename: 'file.png' });
    } finally {
      process.chdir(cwd);
    }
    assert.equal(uploads()[0].sha256, sha(image));
    await helper.unload();
    await loadUpload({ payloadIs: 'path' });
    const failure = await failureOf('n', { payload: 'B'.repeat(64) });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /The file to upload does not exist: B{64}/);
  });

  const refusals = [
    [
      'a data: URL without msg.filename',
      {},
      { payload: 'data:image/png;base64,aGk=' },
      /msg.filename is needed to upload a data: URL/,
    ],
    [
      'base64 text without msg.filename',
      { payloadIs: 'base64' },
      { payload: 'aGk=' },
      /needed to upload base64 text/,
    ],
    [
      'text that is not base64 in base64 mode',
      { payloadIs: 'base64' },
      { payload: 'not base64!', filename: 'x.png' },
      /msg.payload is not base64 text/,
    ],
    [
      'a data: URL with broken base64',
      {},
      { payload: 'data:image/png;base64,a*b', filename: 'x.png' },
      /The data of the data: URL in msg.payload is not base64/,
    ],
    ['empty text', {}, { payload: '  ' }, /msg.payload is empty text/],
    ['a number', {}, { payload: 7 }, /must be a Buffer .* or a string .*http\(s\) URL/],
  ];
  for (const [what, settings, msg, message] of refusals) {
    it(`refuses ${what} with a sentence, sending nothing`, async () => {
      await loadUpload(settings);
      const failure = await failureOf('n', msg);
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, message);
      assert.equal(sandbox.counters.matching(/^\/api\/upload\//, 'POST').length, 0);
    });
  }

  it('fetches an http URL without any key, names it after the last path segment, and leaves no temporary file', async () => {
    await loadUpload();
    const before = temporaryCopies();
    const status = statuses('n');
    const msg = await outputOf('n', { payload: `${imageHost.url}/img/fox.png?sig=abc` });
    assert.equal(msg.filename, 'fox.png');
    assert.deepEqual(msg.payload, { name: 'fox.png', subfolder: '', type: 'input' });
    assert.equal(uploads()[0].sha256, sha(image));
    assert.equal(uploads()[0].size, image.length);
    assert.equal(uploads()[0].contentType, 'image/png');
    // The image host saw no key, no partner key, no header of the service.
    assert.equal(imageHost.seen.length, 1);
    assert.equal(imageHost.seen[0].headers['x-api-key'], undefined);
    assert.ok(!textOf(imageHost.seen).includes(API_KEY));
    assert.ok(!textOf(imageHost.seen).includes(PARTNER_KEY));
    assert.deepEqual(
      status.map((s) => s.text),
      ['fetching…', 'uploading…', 'uploaded fox.png'],
    );
    assert.deepEqual(
      [...temporaryCopies()].filter((name) => !before.has(name)),
      [],
    );
  });

  it('msg.filename names a URL upload; a URL that names no file needs one', async () => {
    await loadUpload();
    const named = await outputOf('n', { payload: `${imageHost.url}/img/fox.png`, filename: 'vixen.png' });
    assert.equal(named.filename, 'vixen.png');
    const failure = await failureOf('n', { payload: `${imageHost.url}/nameless/` });
    assert.equal(failure.error.code, 'invalid_input');
    assert.equal(
      failure.error.message,
      `msg.filename is needed to upload from ${imageHost.host}: the URL names no file to store it as`,
    );
    assert.equal(imageHost.seen.length, 1, 'the nameless URL was not fetched');
  });

  it('follows up to 5 redirects; a sixth is refused naming the host', async () => {
    await loadUpload();
    const msg = await outputOf('n', { payload: `${imageHost.url}/hop/5`, filename: 'hops.png' });
    assert.equal(msg.filename, 'hops.png');
    assert.equal(uploads()[0].sha256, sha(image));
    assert.equal(imageHost.seen.length, 6);
    const failure = await failureOf('n', { payload: `${imageHost.url}/hop/6`, filename: 'hops.png' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.equal(
      failure.error.message,
      `The file at ${imageHost.host} redirects more than 5 times: give its final address`,
    );
    assert.equal(uploads().length, 1);
  });

  it('refuses a redirect to another scheme', async () => {
    await loadUpload();
    const failure = await failureOf('n', { payload: `${imageHost.url}/ftp`, filename: 'x.png' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(
      failure.error.message,
      /redirected the file to a ftp: address; only http and https are followed/,
    );
  });

  it('a 404 is refused naming the host, never the path or the query (it may hold a signature)', async () => {
    await loadUpload();
    const failure = await failureOf('n', {
      payload: `${imageHost.url}/private/cat.png?X-Signature=s3cr3t-sig`,
    });
    assert.equal(failure.error.code, 'invalid_input');
    assert.equal(
      failure.error.message,
      `${imageHost.host} answered HTTP 404 for the file in msg.payload: check the URL (it is fetched without any key)`,
    );
    assert.ok(!textOf(failure.error).includes('s3cr3t-sig'));
    assert.ok(!textOf(failure.error).includes('/private'));
    assert.equal(uploads().length, 0);
  });

  it('refuses a file over the URL limit by its Content-Length, and one without while it streams', async () => {
    await loadUpload({ urlLimit: 1 });
    const before = temporaryCopies();
    const big = await failureOf('n', { payload: `${imageHost.url}/big.png` });
    assert.equal(big.error.code, 'invalid_input');
    assert.equal(
      big.error.message,
      `The file at ${imageHost.host} is 2 MiB, more than the upload node's URL limit of 1 MiB: raise "URL limit" in the node, or fetch it another way`,
    );
    const endless = await failureOf('n', { payload: `${imageHost.url}/endless.png` });
    assert.equal(endless.error.code, 'invalid_input');
    assert.match(endless.error.message, /is larger than the upload node's URL limit of 1 MiB/);
    assert.equal(uploads().length, 0);
    assert.deepEqual(
      [...temporaryCopies()].filter((name) => !before.has(name)),
      [],
    );
  });

  it('a URL that does not arrive within the URL timeout fails with network, naming the host', async () => {
    await loadUpload({ urlTimeout: 0.4 });
    const started = Date.now();
    const failure = await failureOf('n', { payload: `${imageHost.url}/slow.png` });
    assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
    assert.equal(failure.error.code, 'network');
    assert.equal(
      failure.error.message,
      `The file at ${imageHost.host} did not arrive within 0.4 s: check that the host answers, or raise "URL timeout" in the node`,
    );
    assert.equal(uploads().length, 0);
  });

  it('a host that cannot be reached fails with network, naming the host', async () => {
    const closed = http.createServer();
    await new Promise((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = closed.address().port;
    await new Promise((resolve) => closed.close(resolve));
    await loadUpload();
    const failure = await failureOf('n', { payload: `http://127.0.0.1:${port}/fox.png` });
    assert.equal(failure.error.code, 'network');
    assert.match(
      failure.error.message,
      new RegExp(`^The file at 127.0.0.1:${port} could not be fetched \\(ECONNREFUSED\\)`),
    );
  });

  it('takes a URL timeout longer than a Node timer holds (2^31 ms and more) as no limit, not as 1 ms', async () => {
    await loadUpload({ urlTimeout: 2 ** 31 / 1000 + 1 });
    const msg = await outputOf('n', { payload: `${imageHost.url}/img/fox.png` });
    assert.equal(msg.filename, 'fox.png');
    assert.equal(uploads()[0].sha256, sha(image));
  });

  describe('local addresses (this machine, private networks, link-local)', () => {
    const setting = /only with "Local addresses" allowed in its settings/;

    it('count as local: loopback, private, link-local, CGNAT, multicast, and IPv4 wrapped in IPv6', () => {
      const local = ['127.0.0.1', '127.9.9.9', '10.0.0.1', '172.16.0.1', '172.31.255.255', '192.168.1.1'];
      local.push('169.254.169.254', '100.64.0.1', '0.0.0.0', '224.0.0.1', '255.255.255.255', '::1', '[::1]');
      local.push(
        '::',
        '::ffff:127.0.0.1',
        '::ffff:7f00:1',
        'fe80::1',
        'fd00::1',
        'ff02::1',
        '64:ff9b::a9fe:a9fe',
      );
      local.push('2002:c0a8:101::1');
      const remote = ['8.8.8.8', '172.32.0.1', '192.169.0.1', '::ffff:8.8.8.8', '2001:4860:4860::8888'];
      remote.push('64:ff9b::808:808', 'example.com');
      for (const address of local) assert.equal(isLocalAddress(address), true, address);
      for (const address of remote) assert.equal(isLocalAddress(address), false, address);
    });

    it('are refused by default, naming the setting, and nothing is fetched', async () => {
      await loadUpload({ urlLocal: undefined });
      const loopback = await failureOf('n', { payload: `${imageHost.url}/img/fox.png` });
      assert.equal(loopback.error.code, 'invalid_input');
      assert.equal(
        loopback.error.message,
        `The URL in msg.payload points to ${imageHost.host}, a local address (this machine, a private network or link-local): the upload node fetches from such addresses only with "Local addresses" allowed in its settings`,
      );
      for (const address of [
        'http://10.1.2.3/fox.png',
        'http://192.168.0.10/fox.png',
        'http://169.254.169.254/latest/meta-data/iam',
        'http://[::1]:9/fox.png',
        'http://[::ffff:127.0.0.1]:9/fox.png',
        'http://0.0.0.0:9/fox.png',
        'https://[fe80::1]/fox.png',
      ]) {
        const failure = await failureOf('n', { payload: address, filename: 'x.png' });
        assert.equal(failure.error.code, 'invalid_input', address);
        assert.match(failure.error.message, setting, address);
      }
      assert.equal(imageHost.seen.length, 0);
      assert.equal(uploads().length, 0);
    });

    it('a host name that resolves to a local address is refused before connecting', async () => {
      await loadUpload({ urlLocal: false });
      const port = new URL(imageHost.url).port;
      const failure = await failureOf('n', { payload: `http://localhost:${port}/img/fox.png` });
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(
        failure.error.message,
        /^The URL's host localhost resolves to (127\.0\.0\.1|::1), a local address .*"Local addresses"/,
      );
      assert.equal(imageHost.seen.length, 0);
      assert.equal(uploads().length, 0);
    });

    /**
     * The image host stands in for a host on the internet: its address passes as public once, for the URL
     * itself, and every later address is judged as usual.
     */
    function publicOnce() {
      let passed = false;
      return (address) => {
        if (address === '127.0.0.1' && !passed) {
          passed = true;
          return false;
        }
        return isLocalAddress(address);
      };
    }
    const fetchUrl = (url, isLocal) =>
      readUploadSource(url, 'auto', { filename: 'x.png', limits: DEFAULT_URL_LIMITS, isLocal });

    it('a redirect to a local address, or to a host name that resolves to one, is refused and not followed', async () => {
      await assert.rejects(fetchUrl(`${imageHost.url}/to-metadata`, publicOnce()), (error) => {
        assert.equal(error.code, 'invalid_input');
        assert.equal(
          error.message,
          `${imageHost.host} redirected the file to 169.254.169.254, a local address (this machine, a private network or link-local): the upload node fetches from such addresses only with "Local addresses" allowed in its settings`,
        );
        return true;
      });
      await assert.rejects(fetchUrl(`${imageHost.url}/to-localhost`, publicOnce()), (error) => {
        assert.equal(error.code, 'invalid_input');
        assert.match(error.message, /^The URL's host localhost resolves to 127\.0\.0\.1, a local address/);
        return true;
      });
      assert.deepEqual(
        imageHost.seen.map((request) => request.path),
        ['/to-metadata', '/to-localhost'],
      );
    });

    it('with "Local addresses" on, the same redirects are followed', async () => {
      const source = await readUploadSource(`${imageHost.url}/to-localhost`, 'auto', {
        filename: 'x.png',
        limits: { ...DEFAULT_URL_LIMITS, allowLocal: true },
      });
      try {
        assert.equal(sha(fs.readFileSync(source.source)), sha(image));
      } finally {
        await source.release();
      }
    });

    it('a redirect from https to http is refused whatever the setting, and the http address is not fetched', async () => {
      const fixtures = path.join(__dirname, '..', 'fixtures', 'tls');
      const secure = https.createServer(
        {
          key: fs.readFileSync(path.join(fixtures, 'self-signed-key.pem')),
          cert: fs.readFileSync(path.join(fixtures, 'self-signed-cert.pem')),
        },
        (req, res) => res.writeHead(302, { location: `${imageHost.url}/img/fox.png` }).end(),
      );
      await new Promise((resolve) => secure.listen(0, '127.0.0.1', resolve));
      const secureHost = `127.0.0.1:${secure.address().port}`;
      // The test's own certificate: trusted for this test only.
      process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
      try {
        for (const allowLocal of [false, true]) {
          await assert.rejects(
            readUploadSource(`https://${secureHost}/fox.png`, 'auto', {
              limits: { ...DEFAULT_URL_LIMITS, allowLocal },
              isLocal: publicOnce(),
            }),
            (error) => {
              assert.equal(error.code, 'invalid_input');
              assert.equal(
                error.message,
                `${secureHost} redirected the file from https to plain http (${imageHost.host}), which is refused: give an address that stays on https`,
              );
              return true;
            },
          );
        }
      } finally {
        delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
        secure.closeAllConnections();
        await new Promise((resolve) => secure.close(resolve));
      }
      assert.equal(imageHost.seen.length, 0);
    });
  });
});
