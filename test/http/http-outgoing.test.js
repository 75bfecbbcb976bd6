'use strict';
// Outgoing requests whose address, time or failure someone else chose (issue 27, items 8, 12 and 16): the
// service's redirect of a download meets the address rule URL uploads meet; a steady upload is never cut by
// the request time limit and a stalled one is; a refusal or a failed TLS handshake names what it is about.
// Real HTTP(S) on 127.0.0.1: rogue services, a second local server standing for "another local address".
const assert = require('node:assert/strict');
const fs = require('node:fs');
const https = require('node:https');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { HttpClient } = require('../../dist/http/client');
const { GenerationConnection } = require('../../dist/generation/connection');
const { GenerationRestClient } = require('../../dist/generation/transfer/rest-client');
const { JobTracker } = require('../../dist/generation/jobs/job-tracker');
const { startSandbox } = require('../../dist/sandbox');
const { startRogueServer, json } = require('../support/rogue-server');
const { flowWith, load, failureOf, outputOf, textOf } = require('../support/generation-nodes');
const { KEY, workflow, until, withFastSockets } = require('../support/sockets');
const { textToImage } = require('../support/node-red');

const TLS = path.join(__dirname, '..', 'fixtures', 'tls');
const NO_RETRY = { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 };
const FOX = { filename: 'fox.png', subfolder: '', type: 'output' };

describe('outgoing requests: redirects, time limits and what failures name', () => {
  let rogue;
  let local;

  before(async () => {
    await helper.startServer();
    rogue = await startRogueServer();
    // Another local address: whatever it answers must never become a msg's payload.
    local = await startRogueServer();
    local.handle = (_req, res) => res.writeHead(200, { 'content-type': 'image/png' }).end('local secret');
  });
  after(async () => {
    await rogue.close();
    await local.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    rogue.seen.length = 0;
    local.seen.length = 0;
  });
  afterEach(() => helper.unload());

  describe('the service redirects a download (item 8)', () => {
    const redirectTo = (location) => {
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/view')) return res.writeHead(302, { location }).end();
        if (req.url.startsWith('/mine/'))
          return res.writeHead(200, { 'content-type': 'image/png' }).end('own');
        json(res, 404, {});
      };
    };
    const download = async () => {
      await load(flowWith({ type: 'graph-gen-download', mode: 'buffer' }, { baseUrl: rogue.url }), {});
      return { failure: await failureOf('n', { payload: FOX }, 10000) };
    };

    for (const [what, target] of [
      ['another local server (127.0.0.1, another port)', () => `${local.url}/secret.png`],
      ['the cloud metadata address', () => 'http://169.254.169.254/latest/meta-data/'],
      ['a private network address', () => 'http://10.1.2.3/x.png'],
      ['an IPv4-mapped IPv6 loopback', () => `http://[::ffff:127.0.0.1]:${new URL(local.url).port}/x`],
      ['127.0.0.1 written as a decimal number', () => `http://2130706433:${new URL(local.url).port}/x`],
      ['a host name that resolves to this machine', () => `http://localhost:${new URL(local.url).port}/x`],
    ]) {
      it(`is refused when it points to ${what}, and nothing is fetched there`, async () => {
        redirectTo(target());
        const { failure } = await download();
        assert.equal(failure.error.code, 'server_error');
        assert.match(
          failure.error.message,
          /redirected the download of "fox\.png" to .*a local address \(this machine, a private network or link-local\), which is refused: .*GRAPH_GEN_TRUSTED_ORIGINS/,
        );
        assert.equal(local.seen.length, 0, 'the local server was never asked');
        assert.ok(!textOf(failure).includes('local secret'));
      });
    }

    it("is followed to the service's own origin", async () => {
      redirectTo('/mine/fox.png');
      await load(flowWith({ type: 'graph-gen-download', mode: 'buffer' }, { baseUrl: rogue.url }), {});
      const msg = await outputOf('n', { payload: FOX }, 10000);
      assert.equal(msg.payload.toString(), 'own');
    });

    it('is refused from https to plain http', async () => {
      const server = https.createServer(
        {
          cert: fs.readFileSync(path.join(TLS, 'self-signed-cert.pem')),
          key: fs.readFileSync(path.join(TLS, 'self-signed-key.pem')),
        },
        (_req, res) => res.writeHead(302, { location: `${local.url}/x.png` }).end(),
      );
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const client = new HttpClient({
        baseUrl: `https://127.0.0.1:${server.address().port}`,
        serviceName: 'the generation service',
        transport: { tls: { rejectUnauthorized: false } },
        retry: NO_RETRY,
      });
      try {
        await assert.rejects(new GenerationRestClient(client).openFile(FOX), (error) => {
          assert.match(error.message, /redirected the download of "fox\.png" from https to plain http/);
          return true;
        });
        assert.equal(local.seen.length, 0);
      } finally {
        await client.close();
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    });
  });

  describe('the request time limit of an upload (item 12)', () => {
    /** A service that reads `bytesPerSecond` in 64 KiB reads, answering once it has read everything. */
    const reading = (bytesPerSecond, { stopAfter = Infinity } = {}) => {
      rogue.handle = (req, res) => {
        let read = 0;
        req.pause();
        const timer = setInterval(
          () => {
            if (read >= stopAfter) return;
            const chunk = req.read(65536) ?? req.read();
            if (chunk) read += chunk.length;
          },
          Math.round((65536 / bytesPerSecond) * 1000),
        );
        req.on('readable', () => undefined);
        req.on('end', () => {
          clearInterval(timer);
          json(res, 200, { name: 'big.png', subfolder: '', type: 'input' });
        });
        res.on('close', () => clearInterval(timer));
      };
    };
    const uploadClient = () =>
      new HttpClient({
        baseUrl: rogue.url,
        serviceName: 'the generation service',
        totalTimeoutMs: 1000,
        retry: NO_RETRY,
      });

    it('a 6 MiB upload the service reads steadily for 3 s succeeds with the limit at 1 s', async () => {
      reading(2 * 1024 * 1024);
      const client = uploadClient();
      const started = Date.now();
      try {
        const stored = await new GenerationRestClient(client).upload({
          source: Buffer.alloc(6 << 20, 1),
          filename: 'big.png',
        });
        assert.equal(stored.name, 'big.png');
        assert.ok(Date.now() - started > 2000, 'it took longer than the limit');
      } finally {
        await client.close(0);
      }
    }).timeout(15000);

    it('an upload the service stops reading is cut after the limit, naming what stalled', async () => {
      reading(4 * 1024 * 1024, { stopAfter: 1 << 20 });
      const client = uploadClient();
      const started = Date.now();
      try {
        await assert.rejects(
          new GenerationRestClient(client).upload({ source: Buffer.alloc(24 << 20, 1), filename: 'big.png' }),
          (error) => {
            assert.equal(error.code, 'network');
            assert.match(
              error.message,
              /stopped taking uploading "big\.png": nothing of it was taken for 1 s/,
            );
            return true;
          },
        );
        assert.ok(Date.now() - started < 5000, `cut in ${Date.now() - started} ms`);
      } finally {
        await client.close(0);
      }
    }).timeout(15000);

    it('a service that read the upload and never answers is cut too', async () => {
      rogue.handle = (req) => req.resume();
      const client = uploadClient();
      try {
        await assert.rejects(
          new GenerationRestClient(client).upload({ source: Buffer.alloc(1000, 1), filename: 'small.png' }),
          /took uploading "small\.png" but did not answer within 1 s of reading it/,
        );
      } finally {
        await client.close(0);
      }
    }).timeout(15000);
  });

  describe('failures that name the wrong thing (item 16)', () => {
    const open = withFastSockets();

    it('an await refused on every status check with basic authentication names the user name and password', async () => {
      const sandbox = await startSandbox({ events: { stepDelayMs: 1 } });
      open.push(sandbox);
      const connection = new GenerationConnection({
        baseUrl: sandbox.url,
        auth: { scheme: 'basic', username: 'alice', password: 'pw-basic-5e1f-secret' },
        jobTimings: {
          pollInitialMs: 50,
          pollMaxMs: 200,
          firstCheckMs: 20,
          lostConfirmMs: 100,
          unknownGraceMs: 200,
        },
      });
      open.push(connection);
      const tracker = new JobTracker(connection);
      open.push({ close: async () => tracker.close() });
      const job = sandbox.jobs.submit(workflow({ 9: { class_type: 'SandboxHang', inputs: {} } }), 'another');
      const pending = tracker.track(job.id);
      await until(() => tracker.views()[0]?.phase === 'running', 'the job to run');
      sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 401, times: Infinity });
      sandbox.faults.add({ path: /^\/api\//, status: 401, body: { message: 'no' }, times: Infinity });
      sandbox.events.dropSockets();
      const result = await pending;
      assert.equal(result.status, 'failed');
      assert.equal(result.error.exception_type, 'unauthorized');
      assert.match(
        result.error.exception_message,
        /user name and password \(basic authentication\) were refused/,
      );
      assert.doesNotMatch(result.error.exception_message, /API key/);
      assert.ok(!JSON.stringify(result).includes('pw-basic-5e1f-secret'));
    }).timeout(15000);

    it('a submit to a server whose certificate is not trusted fails at once, saying what to set', async () => {
      let requests = 0;
      const server = https.createServer(
        {
          cert: fs.readFileSync(path.join(TLS, 'self-signed-cert.pem')),
          key: fs.readFileSync(path.join(TLS, 'self-signed-key.pem')),
        },
        (_req, res) => {
          requests += 1;
          res.end('{}');
        },
      );
      server.on('tlsClientError', () => undefined);
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `https://127.0.0.1:${server.address().port}`;
      try {
        await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: url }), { apiKey: KEY });
        const started = Date.now();
        const failure = await failureOf('n', { payload: textToImage() }, 15000);
        const took = Date.now() - started;
        assert.equal(failure.error.code, 'network');
        assert.match(
          failure.error.message,
          /the certificate of 127\.0\.0\.1:\d+ is not trusted \(\w+\): .*add that authority's certificate \(CA\) in a TLS configuration on the config node/,
        );
        assert.doesNotMatch(failure.error.message, /could not tell/);
        // The socket's handshake fails on the certificate too, which ends the submit node's wait for it at
        // once, and the REST request is never tried again (before: 8-10 s in all).
        assert.ok(took < 2000, `it took ${took} ms`);
        assert.equal(requests, 0, 'no request reached the server');
      } finally {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    }).timeout(20000);
  });
});
