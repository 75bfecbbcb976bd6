'use strict';
// What a misbehaving server, a redeploy at the wrong moment or a bad setting must not do to a flow (issue 9):
// each test drives the nodes in Node-RED against the sandbox or a server of ours that breaks the protocol.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../dist/sandbox');
const { describeSubmitProblems } = require('../dist/generation/workflows/workflow');
const { HttpClient } = require('../dist/http/client');
const { asServiceError } = require('../dist/nodes/node-helpers');
const { startRogueServer, json } = require('./support/rogue-server');
const {
  ALL_NODES,
  textToImage,
  flowWith,
  load,
  failureOf,
  outputOf,
  textOf,
} = require('./support/generation-nodes');
const { awaitFlow, collect, sleep, workflow, until } = require('./support/sockets');

const awaitNode = require('../dist/nodes/graph-gen-await-job.js');

describe('hardening', () => {
  let rogue;
  before(async () => {
    await helper.startServer();
    rogue = await startRogueServer();
  });
  after(async () => {
    await rogue.close();
    await helper.stopServer();
  });
  afterEach(async () => {
    rogue.seen.length = 0;
    await helper.unload();
  });

  describe('redeploy and close', () => {
    it('a submit node closed while it waits for the socket sends nothing afterwards', async () => {
      const sandbox = await startSandbox();
      try {
        // The socket cannot be had, so the submit waits (up to 5 s) before it posts.
        sandbox.faults.add({ method: 'UPGRADE', path: '/ws', drop: true, times: Infinity });
        await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }), {});
        helper.getNode('n').receive({ payload: textToImage() });
        await sleep(300);
        await helper.unload();
        await sleep(5500);
        assert.equal(sandbox.counters.matching('/api/prompt', 'POST').length, 0);
      } finally {
        await sandbox.close();
      }
    }).timeout(15000);
  });

  describe('redeploy with work in flight', () => {
    it('an upload, a download, a submit and an await all in flight: the flow stops in under 2 s', async () => {
      const sandbox = await startSandbox();
      const os = require('node:os');
      const fs = require('node:fs');
      const path = require('node:path');
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'inflight-'));
      try {
        const big = { filename: 'big.bin', subfolder: '', type: 'output' };
        sandbox.generation.addFile(big, { size: 64 << 20 });
        sandbox.faults.add({ path: '/api/upload/image', delayMs: 30_000 });
        sandbox.faults.add({ path: '/api/view', stallAfterBytes: 1 << 20 });
        sandbox.faults.add({ path: '/api/prompt', delayMs: 30_000 });
        const flow = [
          { id: 'f1', type: 'tab' },
          { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url, partnerKeyField: 'x' },
          { id: 'up', z: 'f1', x: 1, y: 1, type: 'graph-gen-upload', server: 'cfg', wires: [[]] },
          {
            id: 'dl',
            z: 'f1',
            x: 1,
            y: 1,
            type: 'graph-gen-download',
            server: 'cfg',
            mode: 'file',
            directory,
            directoryType: 'str',
            wires: [[]],
          },
          { id: 'sub', z: 'f1', x: 1, y: 1, type: 'graph-gen-submit', server: 'cfg', wires: [[]] },
          {
            id: 'aw',
            z: 'f1',
            x: 1,
            y: 1,
            type: 'graph-gen-await-job',
            server: 'cfg',
            timeout: '0',
            timeoutType: 'num',
            wires: [[], [], []],
          },
        ];
        await helper.load([...ALL_NODES, awaitNode], flow, { cfg: {} });
        const hang = sandbox.jobs.submit(workflow({ 9: { class_type: 'SandboxHang', inputs: {} } }), 'x');
        helper.getNode('up').receive({ payload: Buffer.alloc(1000, 1), filename: 'a.png' });
        helper.getNode('dl').receive({ payload: big });
        helper.getNode('sub').receive({ payload: textToImage() });
        helper.getNode('aw').receive({ prompt_id: hang.id });
        await until(
          () =>
            ['/api/upload/image', '/api/view', '/api/prompt'].every(
              (route) => sandbox.counters.count(route) > 0,
            ),
          'every request under way',
        );
        await sleep(200);
        const started = Date.now();
        await helper.unload();
        const took = Date.now() - started;
        assert.ok(took < 2000, `the redeploy took ${took} ms`);
        assert.deepEqual(fs.readdirSync(directory), [], 'no partial download left');
      } finally {
        await sandbox.close();
        fs.rmSync(directory, { recursive: true, force: true });
      }
    });
  });

  describe('errors', () => {
    it('a redirect is an error naming the new scheme and host (never its query): fix the base address', async () => {
      rogue.handle = (req, res) =>
        res.writeHead(301, { location: `https://gen.example.com${req.url}?sig=s3cr3t-signature` }).end();
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', {});
      assert.equal(failure.error.code, 'invalid_request');
      assert.match(
        failure.error.message,
        /redirected listing the queue \(HTTP 301\) to https:\/\/gen\.example\.com/,
      );
      assert.match(failure.error.message, /base address/);
      assert.doesNotMatch(textOf(failure.error), /s3cr3t/);
      assert.equal(rogue.seen.length, 1, 'the redirect is not followed');
    });

    it('a base address without a scheme: the config node does not throw, and its users say what to fix', async () => {
      const flow = awaitFlow({ url: 'gen.example.com' }, {}, [
        { id: 'q', z: 'f1', type: 'graph-gen-queue', server: 'cfg', action: 'list', wires: [[]] },
      ]);
      await helper.load([...ALL_NODES, awaitNode], flow, { cfg: {} });
      assert.equal(helper.getNode('cfg').connection, undefined);
      const caught = collect('caught');
      helper.getNode('q').receive({});
      const failure = (await caught.next()).error;
      assert.equal(failure.code, 'invalid_input');
      assert.match(
        failure.message,
        /"gen.example.com" of the graph-gen-config node is not an http\(s\) address/,
      );
      assert.match(failure.message, /e\.g\. https:\/\/gen\.example\.com/);
      helper.getNode('await').receive({ prompt_id: 'p' });
      assert.match((await caught.next()).error.message, /not an http\(s\) address/);
    });

    it('a failure nobody foresaw is internal_error, not the user input', () => {
      const error = asServiceError(new TypeError('x is not a function'));
      assert.equal(error.code, 'internal_error');
      assert.match(error.message, /unexpected failure in the node: x is not a function/);
    });

    it('malformed node_errors map to a sentence, never a crash of the error mapping', () => {
      const shapes = [
        { node_errors: { 3: { errors: 'not an array' } } },
        { node_errors: { 3: null, 4: { errors: [null, 7, { message: 5 }] } } },
        { node_errors: { 3: { errors: [{ message: 'Value not in list', extra_info: 'x' }] } } },
        { node_errors: [1, 2], error: { message: ['a'] } },
      ];
      for (const body of shapes)
        assert.equal(typeof describeSubmitProblems(body), 'string', JSON.stringify(body));
      assert.match(
        describeSubmitProblems(shapes[2]),
        /node "3": Value not in list/,
        'what can be read is still said',
      );
    });

    it('a queue answer of the wrong shape is a server_error, not an empty queue', async () => {
      rogue.handle = (_req, res) => json(res, 200, [[0, 'a']]);
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', {});
      assert.equal(failure.error.code, 'server_error');
      assert.match(failure.error.message, /not a queue/);
    });

    it('an unparsable Location is a server_error naming the file', async () => {
      rogue.handle = (_req, res) => res.writeHead(302, { location: 'http://[::not-an-address' }).end();
      await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url }), { apiKey: 'k-123456789' });
      const failure = await failureOf('n', {
        payload: { filename: 'fox.png', subfolder: '', type: 'output' },
      });
      assert.equal(failure.error.code, 'server_error');
      assert.match(failure.error.message, /download of "fox.png" to an address that cannot be read/);
    });

    it("a storage host's error that echoes the signature does not carry it to msg.error", async () => {
      const signature = 'a1b2c3d4e5f6a7b8c9d0';
      const failure = await storageEchoing(rogue, signature, 'bad');
      assert.equal(failure.error.cause.status, 403);
      assert.doesNotMatch(textOf(failure), new RegExp(signature));
    });

    it('a timeout past 24.8 days is refused before anything is awaited (a timer would fire at once)', async () => {
      const sandbox = await startSandbox();
      try {
        await helper.load([...ALL_NODES, awaitNode], awaitFlow(sandbox), { cfg: {} });
        const caught = collect('caught');
        helper.getNode('await').receive({ prompt_id: 'p', timeout: 2_200_000 });
        const failure = (await caught.next()).error;
        assert.equal(failure.code, 'invalid_input');
        assert.match(failure.message, /longer than 24 days/);
        await sleep(100);
        assert.equal(sandbox.counters.matching('/api/queue', 'POST').length, 0, 'nothing was cancelled');
      } finally {
        await sandbox.close();
      }
    });
  });

  describe('answers that never end', () => {
    it('a connection that breaks while the body is read is a network failure, and a GET is retried', async () => {
      let calls = 0;
      rogue.handle = (_req, res) => {
        calls += 1;
        if (calls === 1) {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': 500 });
          res.write('{"queue_running": [');
          setTimeout(() => res.socket.destroy(), 20);
          return;
        }
        json(res, 200, { queue_running: [], queue_pending: [] });
      };
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {});
      const msg = await outputOf('n', {});
      assert.deepEqual(msg.running, []);
      assert.equal(calls, 2);
      // A submit is not repeated, and says network, not a refused input.
      rogue.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': 500 });
        res.write('{"prompt_id": "a');
        setTimeout(() => res.socket.destroy(), 20);
      };
      await helper.unload();
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: rogue.url }), {});
      rogue.seen.length = 0;
      // Nor is it sent again while the server cannot say whether it has the job.
      const failure = await failureOf('n', { payload: textToImage() }, 20000);
      assert.equal(failure.error.code, 'network');
      assert.match(failure.error.message, /could not tell whether it has job/);
      assert.equal(rogue.seen.filter((seen) => seen.method === 'POST').length, 1);
    }).timeout(30000);

    it('an endless answer is cut at the size limit: server_error, the connection dropped', async () => {
      let chunks = 0;
      rogue.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"queue_running": ["');
        const block = Buffer.alloc(1 << 20, 'a');
        const more = () => {
          while (res.write(block)) chunks += 1;
          chunks += 1;
        };
        res.on('drain', more);
        more();
      };
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', {}, 15000);
      assert.equal(failure.error.code, 'server_error');
      assert.match(failure.error.message, /answered listing the queue with more than 64 MiB/);
      const sent = chunks;
      await sleep(200);
      assert.ok(chunks - sent < 5, 'the client stopped reading');
    }).timeout(20000);

    it('a body that trickles ends at the total time limit', async () => {
      rogue.handle = (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const timer = setInterval(() => res.write(' '), 100);
        res.on('close', () => clearInterval(timer));
      };
      const client = new HttpClient({
        baseUrl: rogue.url,
        serviceName: 'the generation service',
        totalTimeoutMs: 800,
        retry: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 },
      });
      const started = Date.now();
      await assert.rejects(client.json('/api/queue', { action: 'listing the queue' }), (error) => {
        assert.equal(error.code, 'network');
        assert.match(error.message, /did not finish answering listing the queue within 1 s/);
        return true;
      });
      assert.ok(Date.now() - started < 3000);
      await client.close();
    });

    it('an error of several MB is cut to a readable sentence and body', async () => {
      rogue.handle = (_req, res) =>
        json(res, 400, {
          error: { type: 'invalid_prompt', message: 'x'.repeat(5_000_000), details: '' },
          node_errors: Object.fromEntries(
            Array.from({ length: 20_000 }, (_, i) => [
              String(i),
              { errors: [{ message: 'bad' }], class_type: 'K' },
            ]),
          ),
        });
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: rogue.url }), {});
      const failure = await failureOf('n', { payload: textToImage() }, 10000);
      assert.equal(failure.error.code, 'invalid_request');
      assert.ok(failure.error.message.length < 1100, `${failure.error.message.length} characters`);
      assert.match(failure.error.message, /more characters left out/);
      assert.ok(JSON.stringify(failure.error.cause.body).length < 4200);
    });

    it('closing a config node takes under a second while a call to a service that never answers is under way', async () => {
      rogue.handle = () => undefined;
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {});
      helper.getNode('n').receive({});
      await until(() => rogue.seen.length === 1, 'the request');
      const started = Date.now();
      await helper.unload();
      assert.ok(Date.now() - started < 1000, `closed in ${Date.now() - started} ms`);
    });
  });

  describe('limits are settings of the config nodes', () => {
    it('graph-gen-config: answer and list sizes, the request time limit and the kept events', async () => {
      const sandbox = await startSandbox({ events: { autoRun: false } });
      try {
        for (let i = 0; i < 5; i++) sandbox.jobs.submit(textToImage(), 'someone');
        const flow = flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: sandbox.url });
        Object.assign(flow[0], { listLimitMiB: '0.001', keptEventsMiB: '2', requestTimeout: '0.5' });
        await load(flow, {});
        const failure = await failureOf('n', {});
        assert.equal(failure.error.code, 'server_error');
        assert.match(failure.error.message, /more than 1 KiB/);
        const connection = helper.getNode('c').connection;
        assert.equal(connection.limits.keptEventBytes, 2 * 1024 * 1024);
        assert.equal(connection.limits.requestTimeoutMs, 500);
        assert.equal(connection.limits.answerBytes, 8 * 1024 * 1024, 'blank or absent: the default');
      } finally {
        await sandbox.close();
      }
    });

    it('automation-config: a page larger than its limit is refused', async () => {
      rogue.handle = (_req, res) => json(res, 200, { data: [{ id: 'x'.repeat(5000) }] });
      const { port } = new URL(rogue.url);
      const automationConfig = require('../dist/nodes/automation-config.js');
      const listNode = require('../dist/nodes/automation-list-workflows.js');
      const { coreNode } = require('./support/node-red');
      await helper.load(
        [automationConfig, listNode, coreNode('common/25-catch.js')],
        [
          { id: 'f1', type: 'tab' },
          {
            id: 'a',
            type: 'automation-config',
            host: '127.0.0.1',
            port,
            protocol: 'http',
            pageLimitMiB: '0.001',
          },
          {
            id: 'l',
            z: 'f1',
            x: 1,
            y: 1,
            type: 'automation-list-workflows',
            server: 'a',
            mode: 'page',
            wires: [[]],
          },
          { id: 'catcher', z: 'f1', x: 1, y: 1, type: 'catch', scope: null, wires: [['caught']] },
          { id: 'caught', z: 'f1', x: 1, y: 1, type: 'helper' },
        ],
        { a: { apiKey: 'k' } },
      );
      const caught = collect('caught');
      helper.getNode('l').receive({});
      const failure = (await caught.next()).error;
      assert.equal(failure.code, 'server_error');
      assert.match(failure.message, /more than 1 KiB/);
    });
  });

  describe('a service that rewrites the prototype', () => {
    it('node ids __proto__ and constructor in events stay keys of the outputs; Object.prototype is untouched', async () => {
      const sandbox = await startSandbox({ events: { autoRun: false } });
      try {
        await helper.load([...ALL_NODES, awaitNode], awaitFlow(sandbox), { cfg: {} });
        const done = collect('done');
        const job = sandbox.jobs.submit(workflow(), helper.getNode('cfg').connection.clientId);
        helper.getNode('await').receive({ prompt_id: job.id });
        await helper.getNode('cfg').connection.sockets().ready(5000);
        await sleep(50);
        const send = (type, data) =>
          sandbox.events.sendRaw(JSON.stringify({ type, data: { prompt_id: job.id, ...data } }));
        send('execution_start', {});
        send('executed', { node: '__proto__', output: { polluted: ['yes'] } });
        send('executed', { node: 'constructor', output: { keys: 'not a function' } });
        send('executed', { node: '9', output: { __proto__: { polluted: 'yes' } } });
        send('execution_success', {});
        const msg = await done.next();
        assert.equal({}.polluted, undefined);
        assert.equal(typeof Object.keys, 'function');
        assert.ok(Object.hasOwn(msg.payload.outputs, '__proto__'));
        assert.deepEqual(msg.payload.outputs.__proto__, { polluted: ['yes'] });
        assert.deepEqual(msg.payload.outputs.constructor, { keys: 'not a function' });
      } finally {
        await sandbox.close();
      }
    });
  });

  describe('service data as keys', () => {
    it('a job whose prompt_id is __proto__ is unknown, not taken for Object.prototype', async () => {
      const { GenerationConnection } = require('../dist/generation/connection');
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/history/')) return json(res, 200, {});
        if (req.url.startsWith('/api/queue')) return json(res, 200, { queue_running: [], queue_pending: [] });
        res.writeHead(404, { 'content-type': 'text/plain' }).end('404: Not Found');
      };
      const connection = new GenerationConnection({ baseUrl: rogue.url, partnerKeyField: 'x' });
      try {
        assert.deepEqual(await connection.dialect.lookup.status('__proto__'), { kind: 'unknown' });
        assert.deepEqual(await connection.dialect.lookup.ended('__proto__'), { kind: 'none' });
      } finally {
        await connection.close();
      }
    });

    it('a walk whose cursors are 48 kB each ends with an error at once', async () => {
      const { AutomationClient } = require('../dist/automation/client');
      rogue.handle = (_req, res) => json(res, 200, { data: [{ id: 1 }], nextCursor: 'c'.repeat(48_000) });
      const { port } = new URL(rogue.url);
      const client = new AutomationClient({
        deployment: 'self-hosted',
        host: '127.0.0.1',
        port,
        protocol: 'http',
      });
      try {
        await assert.rejects(
          (async () => {
            for await (const page of client.walk({})) assert.ok(page);
          })(),
          (error) => {
            assert.equal(error.code, 'server_error');
            assert.match(error.message, /nextCursor of 48000 characters/);
            return true;
          },
        );
        assert.equal(rogue.seen.length, 1);
      } finally {
        await client.close();
      }
    });
  });

  describe('secrets', () => {
    it("the queue list removes keys from every entry's extra_data (other clients' partner keys)", async () => {
      rogue.handle = (_req, res) =>
        json(res, 200, {
          queue_running: [
            [0, 'run-1', {}, { client_id: 'c', api_key_comfy_org: 'other-key-1', my_token: 'tok-2' }, ['9']],
          ],
          queue_pending: [
            {
              prompt_id: 'p-2',
              extra_data: { api_key_service_org: 'other-key-3', custom_key: 'other-key-4' },
            },
          ],
        });
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {
        partnerKey: 'partner-k',
      });
      const msg = await outputOf('n', {});
      assert.deepEqual(msg.running, ['run-1']);
      assert.deepEqual(msg.pending, ['p-2']);
      assert.deepEqual(msg.payload.queue_running[0][3], { client_id: 'c' });
      assert.deepEqual(msg.payload.queue_pending[0].extra_data, {});
      assert.doesNotMatch(textOf(msg), /other-key|tok-2/);
    });

    it('keys the service echoes (values, property names, errors, tracebacks, content types) never reach a msg', async () => {
      const key = 'sk-echo-7f3e2d1c';
      const partner = 'partner-echo-9b8a';
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/object_info')) return json(res, 200, {});
        if (req.url.startsWith('/api/prompt'))
          return json(res, 200, { prompt_id: 'p-1', echo: `key ${key}`, [partner]: 'as a name' });
        if (req.url.startsWith('/api/view'))
          return res.writeHead(200, { 'content-type': `image/png; k=${key}` }).end('png');
        json(res, 400, { code: 'bad', message: `bad key ${key} or ${encodeURIComponent(partner)}` });
      };
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: rogue.url }), {
        apiKey: key,
        partnerKey: partner,
      });
      // A submit waits up to 5 s for a socket this server does not have.
      const msg = await outputOf('n', { payload: textToImage() }, 15000);
      assert.doesNotMatch(textOf(msg), new RegExp(`${key}|${partner}`));
      await helper.unload();
      await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url }), {
        apiKey: key,
        partnerKey: partner,
      });
      const file = await outputOf('n', { payload: { filename: 'a.png', subfolder: '', type: 'output' } });
      assert.doesNotMatch(textOf(file), new RegExp(key));
      await helper.unload();
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {
        apiKey: key,
        partnerKey: partner,
      });
      const failure = await failureOf('n', {});
      assert.doesNotMatch(textOf(failure), new RegExp(`${key}|${partner}`));
    });

    it('an execution_error whose message and traceback echo the partner key reaches output 2 without it', async () => {
      const partner = 'partner-trace-5e4d3c';
      const sandbox = await startSandbox({ events: { autoRun: false } });
      try {
        await helper.load([...ALL_NODES, awaitNode], awaitFlow(sandbox), { cfg: { partnerKey: partner } });
        const failed = collect('failed');
        const connection = helper.getNode('cfg').connection;
        const job = sandbox.jobs.submit(workflow(), connection.clientId);
        helper.getNode('await').receive({ prompt_id: job.id });
        await connection.sockets().ready(5000);
        await sleep(50);
        sandbox.events.sendRaw(
          JSON.stringify({
            type: 'execution_error',
            data: {
              prompt_id: job.id,
              exception_type: 'InsufficientFundsError',
              exception_message: `key ${partner} has no credits`,
              traceback: [`  File "api.py", in call(key="${partner}")`],
            },
          }),
        );
        const msg = await failed.next();
        assert.equal(msg.payload.error.exception_type, 'InsufficientFundsError');
        assert.doesNotMatch(textOf(msg), new RegExp(partner));
      } finally {
        await sandbox.close();
      }
    });

    it('a text frame (binary type 3) that echoes the partner key reaches output 3 without it', async () => {
      const partner = 'partner-text-2f1e0d';
      const sandbox = await startSandbox({ events: { stepDelayMs: 1 } });
      try {
        await helper.load([...ALL_NODES, awaitNode], awaitFlow(sandbox, { progress: true }), {
          cfg: { partnerKey: partner },
        });
        const progress = collect('progress');
        const done = collect('done');
        const connection = helper.getNode('cfg').connection;
        await connection.sockets().ready(5000);
        const job = sandbox.jobs.submit(
          workflow({ 4: { class_type: 'SandboxText', inputs: { text: `calling with key=${partner}` } } }),
          connection.clientId,
        );
        helper.getNode('await').receive({ prompt_id: job.id });
        await done.next();
        const text = progress.received.find((m) => m.topic === 'text');
        assert.ok(text, 'the text frame reached output 3');
        assert.equal(text.payload, 'calling with key=***');
        assert.doesNotMatch(textOf(text), new RegExp(partner));
      } finally {
        await sandbox.close();
      }
    });

    it('a gateway page (HTTP 200, not JSON) that echoes the key across its 300th character keeps no part of it', async () => {
      const key = 'sk-gw-7f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b';
      // A gateway that shows the request's headers: the key starts at character 279.
      rogue.handle = (req, res) =>
        res
          .writeHead(200, { 'content-type': 'text/html' })
          .end(`<html><pre>${'.'.repeat(256)} x-api-key: ${req.headers['x-api-key']}\n</pre></html>`);
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {
        apiKey: key,
      });
      const failure = await failureOf('n', {});
      assert.equal(failure.error.code, 'server_error');
      assert.match(failure.error.cause.body, /x-api-key: \*\*\*/);
      assertNoPartOf(key, textOf(failure));
    });

    it("a storage host's error that echoes the signature across its 300th character keeps no part of it", async () => {
      const signature = 'a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0';
      // The signature starts at character 280.
      const failure = await storageEchoing(rogue, signature, '.'.repeat(201));
      assert.equal(failure.error.cause.status, 403);
      assert.match(failure.error.cause.body, /<SignatureProvided>\*\*\*</);
      assertNoPartOf(signature, textOf(failure));
    });

    it("a storage host's endless error is read up to the answer limit, then the download fails", async () => {
      let chunks = 0;
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/view'))
          return res.writeHead(302, { location: '/bucket/fox.png?X-Amz-Signature=s1g2n3a4t5u6r7e8' }).end();
        res.writeHead(403, { 'content-type': 'application/xml' });
        res.write('<Error><Message>');
        const block = Buffer.alloc(1 << 20, 'a');
        const more = () => {
          while (res.write(block)) chunks += 1;
          chunks += 1;
        };
        res.on('drain', more);
        more();
      };
      const flow = flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url });
      flow[0].answerLimitMiB = '1';
      await load(flow, { apiKey: 'k-123456789' });
      const failure = await failureOf(
        'n',
        { payload: { filename: 'fox.png', subfolder: '', type: 'output' } },
        15000,
      );
      assert.equal(failure.error.code, 'invalid_request');
      assert.match(failure.error.message, /the storage host answered HTTP 403 for "fox.png"/);
      const sent = chunks;
      await sleep(200);
      assert.ok(chunks - sent < 5, 'the client stopped reading');
    }).timeout(20000);

    it('a key the service echoes JSON-escaped (\\u002B as .NET writes it, \\/ as PHP does) never reaches a msg', async () => {
      const key = 'sk-esc+7f3e/2d1c0b9a';
      const dotnet = key.replace('+', '\\u002B');
      const php = key.replace('/', '\\/');
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/object_info')) return json(res, 200, {});
        const text = req.url.startsWith('/api/prompt')
          ? `{"prompt_id":"p-1","echo":"key ${dotnet}","${php}":"as a name"}`
          : `{"queue_running":[[0,"run-1",{"note":"key ${php}"},{},[]]],"queue_pending":[]}`;
        res.writeHead(200, { 'content-type': 'application/json' }).end(text);
      };
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: rogue.url }), { apiKey: key });
      // A submit waits up to 5 s for a socket this server does not have.
      const submitted = await outputOf('n', { payload: textToImage() }, 15000);
      assert.equal(submitted.payload.echo, 'key ***');
      assert.equal(submitted.payload['***'], 'as a name');
      assert.ok(!textOf(submitted).includes(key));
      await helper.unload();
      await load(flowWith({ type: 'graph-gen-queue', action: 'list' }, { baseUrl: rogue.url }), {
        apiKey: key,
      });
      const listed = await outputOf('n', {});
      assert.equal(listed.payload.queue_running[0][2].note, 'key ***');
      assert.ok(!textOf(listed).includes(key));
    });

    it('a refusal whose body is nested 50,000 deep and echoes the key is refused as unreadable, without the key', async () => {
      const key = 'sk-deep-7f3e2d1c';
      rogue.handle = (req, res) => {
        if (req.url.startsWith('/api/object_info')) return json(res, 200, {});
        // Written out: JSON.stringify itself cannot go that deep.
        const deep = `${'{"a":['.repeat(25_000)}"key ${req.headers['x-api-key']}"${']}'.repeat(25_000)}`;
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(`{"message":"bad key ${req.headers['x-api-key']}","deep":${deep}}`);
      };
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: rogue.url }), { apiKey: key });
      // A submit waits up to 5 s for a socket this server does not have.
      const failure = await failureOf('n', { payload: textToImage() }, 15000);
      assert.equal(failure.error.code, 'invalid_request');
      // Nested past the reading bound (boundary/outside.ts), it is not parsed: what it said is not read.
      assert.match(failure.error.message, /refused submitting the workflow with HTTP 400/);
      assert.ok(!textOf(failure).includes(key));
    });
  });

  describe('uploads and the request time limit', () => {
    it('an upload the service stops reading is cut by the time limit (counted while nothing moves); its answer is still limited', async () => {
      // The service reads nothing for 1.5 s, three times the limit: 32 MiB cannot all wait in the sockets'
      // buffers, so nothing moves. (One it reads steadily, however long, is not cut:
      // test/http/http-outgoing.test.js.)
      rogue.handle = (req, res) => {
        req.pause();
        setTimeout(() => {
          req.resume();
          req.on('end', () => json(res, 200, { name: 'big.png', subfolder: '', type: 'input' }));
        }, 1500);
      };
      const flow = flowWith({ type: 'graph-gen-upload' }, { baseUrl: rogue.url });
      flow[0].requestTimeout = '0.5';
      await load(flow, {});
      const big = Buffer.alloc(32 << 20, 1);
      const stalled = await failureOf('n', { payload: big, filename: 'big.png' }, 15000);
      assert.equal(stalled.error.code, 'network');
      assert.match(stalled.error.message, /stopped taking uploading "big\.png": nothing of it was taken for/);
      // Once the body is sent, the answer must come within the limit, however slowly it trickles.
      rogue.handle = (req, res) => {
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json' });
          const timer = setInterval(() => res.write(' '), 100);
          res.on('close', () => clearInterval(timer));
        });
      };
      const failure = await failureOf('n', { payload: Buffer.alloc(1000, 1), filename: 'small.png' }, 15000);
      assert.equal(failure.error.code, 'network');
      assert.match(failure.error.message, /did not finish answering uploading "small.png" within 1 s/);
    }).timeout(20000);
  });
});

/**
 * A download whose storage host refuses the signed address (403) with an S3-style error that echoes its signature
 * after `message`: the Catch node's msg.
 */
async function storageEchoing(rogue, signature, message) {
  rogue.handle = (req, res) => {
    if (req.url.startsWith('/api/view'))
      return res
        .writeHead(302, { location: `/bucket/fox.png?X-Amz-Signature=${signature}&X-Amz-Expires=300` })
        .end();
    res
      .writeHead(403, { 'content-type': 'application/xml' })
      .end(
        `<Error><Code>SignatureDoesNotMatch</Code><Message>${message}</Message><SignatureProvided>${signature}</SignatureProvided></Error>`,
      );
  };
  await load(flowWith({ type: 'graph-gen-download' }, { baseUrl: rogue.url }), { apiKey: 'k-123456789' });
  return failureOf('n', { payload: { filename: 'fox.png', subfolder: '', type: 'output' } });
}

/** Fails when any 8 characters of `secret` in a row appear in `text`. */
function assertNoPartOf(secret, text) {
  for (let start = 0; start + 8 <= secret.length; start++) {
    const part = secret.slice(start, start + 8);
    assert.ok(!text.includes(part), `"${part}" of the secret is in: ${text.slice(0, 600)}`);
  }
}

describe('msg values that refer to themselves, or that JSON cannot hold (issue 20)', () => {
  const automationConfig = require('../dist/nodes/automation-config.js');
  const listNode = require('../dist/nodes/automation-list-workflows.js');
  const { startAutomationSandbox, flow: automationFlow, listRequests } = require('./support/automation');
  let sandbox;
  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox();
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  afterEach(async () => helper.unload());

  /** An object that holds itself, as a flow can build one by mistake. */
  function circular() {
    const value = { name: 'loop' };
    value.self = value;
    return value;
  }
  const submits = () => sandbox.counters.matching('/api/prompt', 'POST').length;

  it('says where a value JSON cannot hold breaks, and shows any value by its kind without walking it', () => {
    const { jsonProblemOf, shownValue } = require('../dist/boundary/json-values');
    const list = [1, { a: [2] }];
    list[1].a.push(list);
    assert.deepEqual(jsonProblemOf({ list }), {
      path: 'list[1].a[1]',
      problem: 'refers to itself (a circular structure)',
    });
    assert.deepEqual(jsonProblemOf({ n: [3n] }), {
      path: 'n[0]',
      problem: 'is a BigInt, which JSON cannot hold',
    });
    let deep = [];
    for (let level = 0; level < 200_000; level++) deep = [deep];
    assert.match(jsonProblemOf({ deep }).problem, /^nests deeper than 1000 levels$/);
    const shared = { x: 1 };
    assert.equal(
      jsonProblemOf({ a: shared, b: shared, when: new Date(0), bytes: Buffer.from('hi') }),
      undefined,
    );
    const table = [
      ['text', '"text"'],
      ['t'.repeat(100), `"${'t'.repeat(60)}…"`],
      [7, '7'],
      [false, 'false'],
      [null, 'null'],
      [undefined, 'undefined'],
      [5n, '5n'],
      [[1, 2, 3], 'an array of 3 items'],
      [Buffer.from('abc'), 'a Buffer of 3 bytes'],
      [circular(), 'an object'],
      [Object.create(null), 'an object'],
    ];
    for (const [value, shown] of table) assert.equal(shownValue(value), shown);
  });

  it('submit: a workflow in msg.payload that refers to itself is refused naming where, and nothing is sent', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }), {});
    const workflow = textToImage();
    workflow[6].inputs.more = workflow[6].inputs;
    const failure = await failureOf('n', { payload: workflow });
    assert.equal(failure.error.code, 'invalid_input');
    assert.equal(
      failure.error.message,
      'The workflow cannot be sent: 6.inputs.more refers to itself (a circular structure). Give msg.payload and msg.inputs plain values (text, numbers, true/false, lists and objects)',
    );
    assert.equal(submits(), 0);
  });

  it('submit: a value of msg.inputs that refers to itself, or a BigInt, is refused naming where', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }), {});
    const looped = await failureOf('n', { payload: textToImage(), inputs: { 6: { text: circular() } } });
    assert.equal(looped.error.code, 'invalid_input');
    assert.match(
      looped.error.message,
      /^The workflow cannot be sent: 6\.inputs\.text\.self refers to itself/,
    );
    const big = await failureOf('n', { payload: textToImage(), inputs: { 3: { seed: 2n ** 70n } } });
    assert.equal(big.error.code, 'invalid_input');
    assert.match(
      big.error.message,
      /^The workflow cannot be sent: 3\.inputs\.seed is a BigInt, which JSON cannot hold/,
    );
    assert.equal(submits(), 0);
  });

  it('queue: a prompt_id or an action that refers to itself is refused with a sentence', async () => {
    await load(flowWith({ type: 'graph-gen-queue', action: 'cancel' }, { baseUrl: sandbox.url }), {});
    const id = circular();
    id.prompt_id = id;
    const cancel = await failureOf('n', { prompt_id: id });
    assert.equal(cancel.error.code, 'invalid_input');
    assert.equal(cancel.error.message, 'a prompt id to cancel is not text: an object');
    const listed = await failureOf('n', { prompt_id: [{ prompt_id: [circular()] }] });
    assert.equal(listed.error.message, 'a prompt id to cancel is not text: an array of 1 item');
    const action = await failureOf('n', { action: circular() });
    assert.equal(action.error.code, 'invalid_input');
    assert.equal(action.error.message, 'msg.action must be list, cancel or interrupt, not an object');
    assert.equal(sandbox.counters.matching('/api/queue').length, 0);
  });

  it('upload: msg.original_ref whose subfolder refers to itself, and a msg.type JSON cannot show, are refused', async () => {
    await load(flowWith({ type: 'graph-gen-upload' }, { baseUrl: sandbox.url }), {});
    const mask = await failureOf('n', {
      payload: Buffer.from('mask'),
      filename: 'mask.png',
      original_ref: { filename: 'fox.png', subfolder: circular() },
    });
    assert.equal(mask.error.code, 'invalid_input');
    assert.equal(mask.error.message, 'msg.original_ref.subfolder must be text, not an object');
    const type = await failureOf('n', {
      payload: Buffer.from('x'),
      filename: 'x.png',
      type: Object.create(null),
    });
    assert.equal(type.error.code, 'invalid_input');
    assert.equal(type.error.message, 'msg.type must be "input" or "temp", not "an object"');
    assert.equal(sandbox.counters.matching(/^\/api\/upload\//, 'POST').length, 0);
  });

  it('list workflows: a msg.limit or msg.active that refers to itself is refused with a sentence', async () => {
    const automation = await startAutomationSandbox({ workflows: 3 });
    try {
      await helper.load(
        [automationConfig, listNode, ...ALL_NODES],
        automationFlow(automation, { wires: [['out']] }),
        { cfg: { apiKey: 'key' } },
      );
      const limit = await failureOf('list', { limit: circular() });
      assert.equal(limit.error.code, 'invalid_input');
      assert.match(limit.error.message, /^the limit an object is not a whole number from 1 to 250/);
      const active = await failureOf('list', { active: circular() });
      assert.equal(active.error.code, 'invalid_input');
      assert.match(active.error.message, /^active an object is not true, false or any/);
      assert.equal(listRequests(automation).length, 0);
    } finally {
      await automation.close();
    }
  });
});
