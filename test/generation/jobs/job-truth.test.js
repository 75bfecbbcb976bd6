'use strict';
// A job's end told truly (issue 27): each await's result its own, events lost to a bound never reported whole,
// a cancel the server did not confirm never turned into `cancelled`, no request left open by a redeploy, and a
// cancel on a server that tells neither its version nor its queue doing what the README says. Against a server
// of ours (HTTP and WebSocket on 127.0.0.1) that answers as each test needs.
const assert = require('node:assert/strict');
const http = require('node:http');
const helper = require('node-red-node-test-helper');
const { WebSocketServer } = require('ws');
const { awaitFlow, collect, sleep, until } = require('../../support/sockets');

const configNode = require('../../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../../dist/nodes/graph-gen-await-job.js');
const queueNode = require('../../../dist/nodes/graph-gen-queue.js');
const NODES = [configNode, awaitNode, queueNode];

/**
 * An HTTP server whose answers the test sets (`route(req, body)` returns `[status, json]`, `'hold'` or
 * undefined for a framework's 404 page), with a WebSocket on /ws that sends `frames` to every client.
 */
async function startServer() {
  const sockets = new Set();
  const requests = [];
  const server = {
    route: () => undefined,
    frames: [],
    requests,
    url: '',
    clients: new Set(),
  };
  const httpServer = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      const entry = { method: req.method, url: req.url, body, closed: false };
      requests.push(entry);
      // A held answer's close is its connection's (closed by the client that gave up on it).
      res.once('close', () => (entry.closed = true));
      const answer = server.route(req, body);
      if (answer === 'hold') return;
      if (!answer) return res.writeHead(404, { 'content-type': 'text/plain' }).end('404: Not Found');
      const text = JSON.stringify(answer[1]);
      res.writeHead(answer[0], {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
      });
      res.end(text);
    });
  });
  httpServer.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const wss = new WebSocketServer({ noServer: true });
  httpServer.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws) => {
      server.clients.add(ws);
      ws.once('close', () => server.clients.delete(ws));
      for (const frame of server.frames) ws.send(JSON.stringify(frame));
    }),
  );
  await new Promise((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
  server.url = `http://127.0.0.1:${httpServer.address().port}`;
  server.send = (frame) => {
    for (const ws of server.clients) ws.send(JSON.stringify(frame));
  };
  server.close = () =>
    new Promise((resolve) => {
      for (const ws of server.clients) ws.terminate();
      for (const socket of sockets) socket.destroy();
      wss.close();
      httpServer.close(() => resolve());
    });
  return server;
}

const EMPTY_QUEUE = [200, { queue_running: [], queue_pending: [] }];

/** The frames of a job that ran node 9, whose `executed` lists `files` files. */
function jobFrames(promptId, files) {
  const images = Array.from({ length: files }, (_, index) => ({
    filename: `picture-${String(index).padStart(4, '0')}-${'x'.repeat(40)}.png`,
    subfolder: '',
    type: 'output',
  }));
  return [
    { type: 'execution_start', data: { prompt_id: promptId, timestamp: 1 } },
    { type: 'executing', data: { node: '9', prompt_id: promptId } },
    { type: 'executed', data: { node: '9', prompt_id: promptId, output: { images } } },
    { type: 'execution_success', data: { prompt_id: promptId, timestamp: 2 } },
  ];
}

describe('a job told truly', () => {
  let server;
  before(async () => {
    await helper.startServer();
  });
  after(async () => {
    await helper.stopServer();
  });
  beforeEach(async () => {
    server = await startServer();
  });
  afterEach(async () => {
    await helper.unload();
    await server.close();
  });

  /** The await flow with a queue node `queue` (wired to `queued`), a config node of `limits`. */
  async function load(config = {}, queueProps = {}) {
    const flow = awaitFlow(server, {}, [
      { id: 'queue', z: 'f1', type: 'graph-gen-queue', server: 'cfg', wires: [['queued']], ...queueProps },
      { id: 'queued', z: 'f1', type: 'helper' },
    ]);
    Object.assign(flow[1], config);
    await helper.load(NODES, flow, { cfg: { apiKey: 'sk-truth-test-key' } });
    return {
      flow,
      connection: helper.getNode('cfg').connection,
      done: collect('done'),
      failed: collect('failed'),
      queued: collect('queued'),
    };
  }

  /** Opens the config node's socket (as a submit does) and waits for the events the server sends on it. */
  async function openSocket(connection) {
    connection.sockets().subscribe('someone-else', { onEvent: () => undefined });
    await until(() => server.clients.size > 0, 'the socket');
  }

  it('each await of a job gets a result of its own: a flow that changes one changes no other', async () => {
    server.route = (req) => (req.url === '/api/queue' ? EMPTY_QUEUE : undefined);
    server.frames = jobFrames('j4', 2);
    const { connection, done } = await load();
    await openSocket(connection);
    await until(() => connection.sockets().isKept('j4'), 'the job’s events kept');
    await sleep(100);
    helper.getNode('await').receive({ prompt_id: 'j4' });
    const first = await done.next(1, 3000);
    assert.equal(first.payload.files.length, 2);
    // What a change node downstream may do to its msg.
    first.payload.files[0].filename = 'changed.png';
    first.payload.outputs['9'].images.push({ filename: 'added.png', subfolder: '', type: 'output' });
    first.payload.outputs['9'].images[1].filename = 'changed-too.png';
    helper.getNode('await').receive({ prompt_id: 'j4' });
    const second = await done.next(2, 3000);
    assert.equal(second.payload.files.length, 2);
    assert.match(second.payload.files[0].filename, /^picture-0000/);
    assert.equal(second.payload.outputs['9'].images.length, 2);
    assert.match(second.payload.outputs['9'].images[1].filename, /^picture-0001/);
  });

  it('a job whose executed event was dropped by the bound on kept events never ends whole without its files', async () => {
    const files = [{ filename: 'kept-by-the-server.png', subfolder: '', type: 'output' }];
    server.route = (req) => {
      if (req.url === '/api/queue') return EMPTY_QUEUE;
      if (req.url === '/api/jobs/j5')
        return [200, { id: 'j5', status: 'completed', outputs: { 9: { images: files } } }];
      return undefined;
    };
    // The executed frame (30 files, about 2.5 KB) is larger than all that may be kept; the others fit.
    server.frames = jobFrames('j5', 30);
    const { connection, done } = await load({ keptEventsMiB: 1000 / (1024 * 1024) });
    await openSocket(connection);
    await until(() => connection.sockets().isKept('j5'), 'the job’s events kept');
    await until(() => connection.sockets().stats.bufferedEventsDropped > 0, 'the executed event dropped');
    await sleep(100);
    helper.getNode('await').receive({ prompt_id: 'j5' });
    const ended = await done.next(1, 5000);
    assert.equal(ended.payload.status, 'completed');
    const whole = ended.payload.files.length > 0 || ended.payload.outputs_incomplete === true;
    assert.ok(
      whole,
      `completed with ${JSON.stringify(ended.payload)}: neither the files nor outputs_incomplete`,
    );
    assert.deepEqual(ended.payload.files, files, 'the files the server has, read over REST');
  });

  /**
   * A job `id` waits in the queue; the queue node (`action`) asks the server to stop it, which `route` answers
   * without confirming it; then the server forgets the job (taken out elsewhere) and says the queue changed.
   * Returns the queue node's msg and the await's end.
   */
  async function unconfirmedThenForgotten(id, action, route) {
    let listed = true;
    server.route = (req) => {
      if (req.url === '/api/queue' && req.method === 'GET')
        return [200, { queue_running: [], queue_pending: listed ? [[0, id, {}, {}, []]] : [] }];
      if (req.url === `/api/history/${id}`) return [200, {}];
      return route(req);
    };
    const { failed, queued } = await load({}, { action });
    helper.getNode('await').receive({ prompt_id: id });
    await until(() => server.requests.some((r) => r.url === '/api/queue'), 'the first check');
    await sleep(200);
    helper.getNode('queue').receive({ prompt_id: id });
    const out = await queued.next(1, 3000);
    listed = false;
    server.send({ type: 'status', data: { status: { exec_info: { queue_remaining: 0 } } } });
    return { out, ended: await failed.next(1, 8000) };
  }

  it('a targeted interrupt of a job that only waited does not make it cancelled when the server forgets it', async () => {
    const { ended } = await unconfirmedThenForgotten('w10', 'interrupt', (req) =>
      req.url === '/api/interrupt' ? [200, {}] : undefined,
    );
    assert.equal(ended.payload.status, 'failed', `ended ${ended.payload.status}, not lost`);
    assert.equal(ended.payload.error.exception_type, 'JobLost');
  }).timeout(12000);

  it('a cancel whose delete the queue does not confirm does not make the job cancelled when the server forgets it', async () => {
    // The delete is answered, but the job stays in the queue: the cancel is not confirmed.
    const { out, ended } = await unconfirmedThenForgotten('w11', 'cancel', (req) => {
      if (req.url === '/api/system_stats') return [500, { error: 'broken' }];
      if (req.url === '/api/queue' && req.method === 'POST') return [200, {}];
      return undefined;
    });
    assert.deepEqual(out.unconfirmed, ['w11']);
    assert.deepEqual(out.removed, []);
    assert.equal(ended.payload.status, 'failed', `ended ${ended.payload.status}, not lost`);
    assert.equal(ended.payload.error.exception_type, 'JobLost');
  }).timeout(12000);

  it('a cancel on a server of unknown version whose queue cannot be read sends the targeted interrupt to the job its socket reports running', async () => {
    server.route = (req) => {
      if (req.url === '/api/system_stats') return [500, { error: 'broken' }];
      if (req.url === '/api/queue' && req.method === 'GET') return [500, { error: 'broken' }];
      if (req.url === '/api/queue' && req.method === 'POST') return [200, {}];
      if (req.url === '/api/interrupt') return [200, {}];
      return undefined;
    };
    server.frames = jobFrames('r15', 1).slice(0, 2);
    const { connection, queued } = await load({}, { action: 'cancel' });
    helper.getNode('await').receive({ prompt_id: 'r15' });
    await until(() => connection.jobs.lifeOf('r15')?.state === 'running', 'the job running', 3000);
    helper.getNode('queue').receive({ prompt_id: 'r15' });
    const out = await queued.next(1, 15000);
    assert.deepEqual(out.unconfirmed, ['r15']);
    const interrupts = server.requests.filter((r) => r.url === '/api/interrupt' && r.method === 'POST');
    assert.equal(interrupts.length, 1, 'one interrupt sent');
    assert.deepEqual(JSON.parse(interrupts[0].body), { prompt_id: 'r15' }, 'the targeted interrupt');
  }).timeout(20000);

  describe('a redeploy', () => {
    for (const deploy of ['full', 'nodes']) {
      it(`a status check in flight is cut off within 1 s of a redeploy (${deploy})`, async () => {
        server.route = (req) => {
          if (req.url.startsWith('/api/job/')) return 'hold';
          if (req.url === '/api/queue') return EMPTY_QUEUE;
          return undefined;
        };
        const { flow } = await load();
        helper.getNode('await').receive({ prompt_id: 'held-job' });
        await until(
          () => server.requests.some((r) => r.url.startsWith('/api/job/')),
          'the status check',
          5000,
        );
        const held = server.requests.find((r) => r.url.startsWith('/api/job/'));
        if (deploy === 'full') await helper.unload();
        else {
          // The await node changes (its timeout), the config node does not: only the await node restarts.
          const changed = flow.map((node) => (node.id === 'await' ? { ...node, timeout: '5' } : node));
          await helper.setFlows(changed, 'nodes', { cfg: { apiKey: 'sk-truth-test-key' } });
        }
        await sleep(1000);
        assert.equal(held.closed, true, 'the held status check is closed');
      }).timeout(10000);
    }
  });
});
