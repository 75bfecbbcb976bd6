'use strict';
// What a socket's frames must not do to a job, to Node-RED or to the truth (issue 27): event types that name
// a plain object's prototype, a frame nested too deep to read, a stream of job ids without end, and a socket
// that never says a word. Each runs the nodes in Node-RED against the sandbox over real HTTP and WebSocket,
// or reads frames with the FrameReader itself.
const assert = require('node:assert/strict');
const http = require('node:http');
const helper = require('node-red-node-test-helper');
const { WebSocketServer } = require('ws');
const { startSandbox } = require('../../../dist/sandbox');
const { JobBook } = require('../../../dist/generation/jobs/job-book');
const {
  FrameReader,
  MAX_EXECUTING,
  PROGRESS_READ_MS,
} = require('../../../dist/generation/jobs/frame-reader');
const { ALL_NODES, textOf } = require('../../support/generation-nodes');
const { KEY, awaitFlow, collect, sleep, until, workflow, withFastSockets } = require('../../support/sockets');

const awaitNode = require('../../../dist/nodes/graph-gen-await-job.js');

describe('socket frames from a hostile server', () => {
  withFastSockets();
  let sandbox;
  before(async () => {
    await helper.startServer();
  });
  after(async () => {
    await helper.stopServer();
  });
  afterEach(async () => {
    await helper.unload();
    await sandbox?.close();
    sandbox = undefined;
  });

  /** An await-job node on a sandbox that runs nothing by itself; `send` writes raw frames of `job` to it. */
  async function awaitOne(options = {}) {
    sandbox = await startSandbox({ generationApiKey: KEY, events: { autoRun: false }, ...options });
    await helper.load([...ALL_NODES, awaitNode], awaitFlow(sandbox), { cfg: { apiKey: KEY } });
    const connection = helper.getNode('cfg').connection;
    const done = collect('done');
    const failed = collect('failed');
    const job = sandbox.jobs.submit(workflow(), connection.clientId);
    helper.getNode('await').receive({ prompt_id: job.id });
    await connection.sockets().ready(5000);
    // The await has subscribed and its first check has read the job as pending.
    await sleep(300);
    const send = (type, data) =>
      sandbox.events.sendRaw(JSON.stringify({ type, data: { prompt_id: job.id, ...data } }));
    return { connection, done, failed, job, send };
  }

  it('events whose type names a prototype member (constructor, __proto__, toString...) mean nothing; the await goes on', async () => {
    const { done, failed, send } = await awaitOne();
    send('execution_start', {});
    for (const type of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf'])
      send(type, { node: '3', output: { images: [] } });
    await sleep(200);
    assert.equal(failed.received.length, 0, textOf(failed.received[0]));
    assert.equal(done.received.length, 0);
    send('executed', {
      node: '3',
      output: { images: [{ filename: 'a.png', subfolder: '', type: 'output' }] },
    });
    send('execution_success', {});
    const msg = await done.next();
    assert.equal(msg.payload.status, 'completed');
    assert.deepEqual(Object.keys(msg.payload.outputs), ['3']);
    assert.equal(failed.received.length, 0);
  });

  it('an executed event nested 50,000 deep with the key at the bottom is dropped: the job is not reported whole, a later job completes, the key reaches no msg', async () => {
    const { connection, done, failed, job, send } = await awaitOne();
    send('execution_start', {});
    // Written out: JSON.stringify itself cannot go that deep. The prompt_id comes last, as ComfyUI writes it.
    const deep = `${'{"a":['.repeat(25_000)}"echo ${KEY}"${']}'.repeat(25_000)}`;
    const frame = `{"type":"executed","data":{"node":"3","display_node":"3","output":{"images":[],"deep":${deep}},"prompt_id":"${job.id}"}}`;
    assert.ok(frame.length > 190_000);
    sandbox.events.sendRaw(frame);
    send('executing', { node: null });
    send('execution_success', {});
    const first = await done.next();
    assert.equal(first.payload.prompt_id, job.id);
    // Its executed event was lost: what it made is only known from the server, which has nothing for it.
    assert.equal(first.payload.outputs_incomplete, true);
    assert.ok(connection.sockets().stats.framesDropped >= 1);
    // The same socket still carries a whole job.
    const later = sandbox.jobs.submit(workflow(), connection.clientId);
    helper.getNode('await').receive({ prompt_id: later.id });
    await sleep(100);
    sandbox.events.run(later.id);
    const second = await done.next(2);
    assert.equal(second.payload.prompt_id, later.id);
    assert.equal(second.payload.status, 'completed');
    assert.equal(second.payload.outputs_incomplete, undefined);
    assert.equal(failed.received.length, 0);
    for (const msg of [...done.received, ...failed.received]) assert.ok(!textOf(msg).includes(KEY));
  });

  it("executed events past 64 MiB of one job's outputs are dropped as lost: the job reads its outputs from the server and ends with what it kept", async () => {
    const { done, failed, job, send } = await awaitOne();
    send('execution_start', {});
    // 70 outputs of 1 MiB each: past the bound after 63 (each frame is a little more than 1 MiB).
    const pad = 'x'.repeat(1024 * 1024);
    for (let index = 0; index < 70; index++) {
      send('executed', {
        node: '3',
        display_node: '3',
        output: { images: [{ filename: `f${index}.png`, subfolder: '', type: 'output' }], pad },
      });
    }
    send('executing', { node: null });
    send('execution_success', {});
    const result = (await done.next(1, 15_000)).payload;
    assert.equal(result.prompt_id, job.id);
    assert.equal(result.status, 'completed');
    // The server has no outputs of this job: what the events gave, up to the bound, and said to be incomplete.
    assert.equal(result.outputs_incomplete, true);
    const names = result.outputs['3'].images.map((image) => image.filename);
    assert.equal(names.length, 63);
    assert.deepEqual(names.slice(-2), ['f61.png', 'f62.png']);
    assert.equal(result.files.length, 63);
    assert.equal(failed.received.length, 0);
  });
});

describe('the frame reader: job ids and the jobs it sees executing', () => {
  function reader({ progressWanted = true } = {}) {
    const seen = { jobs: [], drops: [] };
    const stats = {
      framesReceived: 0,
      unknownBinaryFrames: 0,
      unattributedFrames: 0,
      progressFramesSkipped: 0,
    };
    const frames = new FrameReader([], 1024 * 1024, stats, {
      progressWanted,
      epoch: 1,
      job: (promptId, event) => {
        seen.jobs.push(promptId);
        seen.types?.push(event.type);
      },
      status: (queue, data, previous) => seen.counts.push([queue, previous]),
      notification: () => undefined,
      features: () => undefined,
      drop: (reason) => seen.drops.push(reason),
    });
    seen.counts = [];
    const text = (value) => frames.read(Buffer.from(JSON.stringify(value)), false);
    return { frames, seen, stats, text };
  }

  it("tells each status frame's count with the one before it on the connection, none after a frame it could not read", () => {
    const { frames, seen, text } = reader();
    const status = (count) =>
      text({ type: 'status', data: { status: { exec_info: { queue_remaining: count } } } });
    status(3);
    status(4);
    // Frames that cannot be a status frame leave the count: a job's event, a binary frame, an event of no job.
    text({ type: 'execution_start', data: { prompt_id: 'p1' } });
    frames.read(Buffer.from([0, 0, 0, 1, 0, 0, 0, 2, 9, 9]), true);
    text({ type: 'crystools.monitor', data: {} });
    status(4);
    // A text frame that cannot be read may have been one (a deletion's lower count): the next has none before it.
    frames.read(Buffer.from('{"type": "status", "data": {"status": '), false);
    status(5);
    text({ data: { status: { exec_info: { queue_remaining: 9 } } } });
    status(6);
    // No count in it: the next has none to compare with either.
    text({ type: 'status', data: {} });
    status(6);
    frames.newConnection();
    status(2);
    assert.deepEqual(seen.counts, [
      [3, undefined],
      [4, 3],
      [4, 4],
      [5, undefined],
      [6, undefined],
      [undefined, 6],
      [6, undefined],
      [2, undefined],
    ]);
  });

  it('while no await wants progress, a progress_state frame is skipped however it is written; other frames are read', () => {
    const { seen, stats, frames } = reader({ progressWanted: false });
    seen.types = [];
    const data = '{"prompt_id": "p1", "nodes": {"2": {"state": "running", "value": 3, "max": 14}}}';
    const written = [
      `{"type": "progress_state", "data": ${data}}`, // ComfyUI's own, skipped by its first bytes
      `{"type":"progress_state","data":${data}}`, // compact
      `{ "type" : "progress_state", "data": ${data}}`, // spaced otherwise: parsed, then skipped
      `{"data": ${data}, "type": "progress_state"}`, // type last: parsed, then skipped
      `{"type": "progress_stateful", "data": ${data}}`, // another word that begins alike: read
      `{"type": "progress", "data": {"prompt_id": "p1", "value": 3, "max": 14}}`,
      `{"type": "progress_state"`, // cut short, but it starts as one: skipped unread like the first
    ];
    for (const frame of written) frames.read(Buffer.from(frame), false);
    assert.equal(stats.progressFramesSkipped, 5);
    assert.deepEqual(seen.types, ['progress_stateful', 'progress']);
  });

  it('while no await wants progress, progress frames are read at most one per 100 ms; all of them when one does', async () => {
    const progress = (value) =>
      Buffer.from(
        `{"type": "progress", "data": {"value": ${value}, "max": 99, "prompt_id": "p1", "node": "3"}}`,
      );
    const thin = reader({ progressWanted: false });
    thin.seen.types = [];
    for (let value = 0; value < 50; value++) thin.frames.read(progress(value), false);
    // The first is read (it feeds the await node's step and a missed start), the rest within 100 ms are not.
    assert.deepEqual(thin.seen.types, ['progress']);
    assert.equal(thin.stats.progressFramesSkipped, 49);
    // Written another way, it is parsed and handed on, as before.
    thin.frames.read(
      Buffer.from('{ "type" : "progress", "data": {"prompt_id": "p1", "value": 1, "max": 2}}'),
      false,
    );
    assert.equal(thin.seen.types.length, 2);
    await new Promise((resolve) => setTimeout(resolve, PROGRESS_READ_MS + 20));
    thin.frames.read(progress(50), false);
    assert.equal(thin.seen.types.length, 3, 'read again once 100 ms have passed');
    const all = reader({ progressWanted: true });
    all.seen.types = [];
    for (let value = 0; value < 50; value++) all.frames.read(progress(value), false);
    assert.equal(all.seen.types.length, 50);
    assert.equal(all.stats.progressFramesSkipped, 0);
  });

  it('a stream of execution_start with distinct ids keeps a bounded set of executing jobs', () => {
    const { frames, text } = reader();
    for (let i = 0; i < 20_000; i++) text({ type: 'execution_start', data: { prompt_id: `job-${i}` } });
    assert.ok(frames.executing.size <= MAX_EXECUTING, `${frames.executing.size} kept`);
  });

  it('a prompt_id that is not text, or is longer than 200 characters, is no job id: dropped with a reason', () => {
    const { seen, text } = reader();
    for (const id of ['x'.repeat(201), 'x'.repeat(100_000), 12, true, { toString: 'a' }, ['a'], ''])
      text({ type: 'execution_start', data: { prompt_id: id } });
    assert.deepEqual(
      seen.jobs.map((id) => id.length),
      [],
    );
    assert.equal(seen.drops.length, 6);
    text({ type: 'execution_start', data: { prompt_id: 'x'.repeat(200) } });
    assert.deepEqual(seen.jobs, ['x'.repeat(200)]);
  });
});

describe('a socket that never says a word', () => {
  let sandbox;
  let front;
  let saved;
  before(async () => {
    await helper.startServer();
    saved = JobBook.defaultTimings;
    JobBook.defaultTimings = { ...saved, socketSilentMs: 2_000 };
  });
  after(async () => {
    JobBook.defaultTimings = saved;
    await helper.stopServer();
  });
  afterEach(async () => {
    await helper.unload();
    await front?.close();
    await sandbox?.close();
  });

  /** The sandbox's REST routes, and a socket that accepts the upgrade and then sends nothing (pings answered). */
  async function silentFront(target) {
    const sockets = new WebSocketServer({ noServer: true });
    const connections = new Set();
    const server = http.createServer((req, res) => {
      const upstream = http.request(
        `${target}${req.url}`,
        { method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    });
    server.on('connection', (socket) => {
      connections.add(socket);
      socket.once('close', () => connections.delete(socket));
    });
    server.on('upgrade', (req, socket, head) => sockets.handleUpgrade(req, socket, head, () => undefined));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${server.address().port}`,
      close: () =>
        new Promise((resolve) => {
          for (const client of sockets.clients) client.terminate();
          for (const socket of connections) socket.destroy();
          server.close(() => resolve());
        }),
    };
  }

  it('a job that ends while the socket stays silent is delivered once the socket has been silent for socketSilentMs', async () => {
    sandbox = await startSandbox({ events: { autoRun: false } });
    front = await silentFront(sandbox.url);
    await helper.load([...ALL_NODES, awaitNode], awaitFlow({ url: front.url }), { cfg: {} });
    const connection = helper.getNode('cfg').connection;
    const done = collect('done');
    const job = sandbox.jobs.submit(workflow(), 'another-client');
    // Open before the await: a job awaited while the socket is not open yet is polled meanwhile.
    assert.equal(await connection.sockets().ready(5000), true);
    helper.getNode('await').receive({ prompt_id: job.id });
    // The first check finds it waiting; then it runs and ends without a word on this socket.
    await sleep(500);
    sandbox.events.run(job.id);
    await until(() => sandbox.jobs.jobs.get(job.id).state === 'completed', 'the job to end on the server');
    const endedAt = Date.now();
    const msg = await done.next(1, 5_000);
    assert.equal(msg.payload.status, 'completed');
    assert.ok(Date.now() - endedAt < 2_000 + 2_500, `${Date.now() - endedAt} ms after its end`);
    assert.equal(connection.sockets().stats.framesReceived, 0);
  });

  it('by default the whole socket is asked about after 20 s of silence (a job is delivered within 25 s of its end)', () => {
    assert.equal(saved.socketSilentMs, 20_000);
  });
});
