'use strict';
const { textToImage } = require('../support/node-red');
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const configNode = require('../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../dist/nodes/graph-gen-await-job.js');
const submitNode = require('../../dist/nodes/graph-gen-submit.js');
const { startSandbox } = require('../../dist/sandbox');
const { SocketManager } = require('../../dist/generation/jobs/socket-manager');
const { encodePreviewWithMetadata } = require('../../dist/generation/jobs/frames');
const {
  KEY,
  workflow,
  sleep,
  until,
  fileNames,
  coreNode,
  awaitFlow,
  collect,
  statuses,
} = require('../support/sockets');

const catchNode = coreNode('common/25-catch.js');

const EXCEPTION_TYPES = [
  'ValidationError',
  'ModelDownloadError',
  'ImageDownloadError',
  'OOMError',
  'InsufficientFundsError',
  'InactiveSubscriptionError',
];

describe('graph-gen-await-job', () => {
  let sandbox;
  let savedTimings;

  before(async () => {
    savedTimings = SocketManager.defaultTimings;
    SocketManager.defaultTimings = { ...savedTimings, backoffBaseMs: 20, backoffMaxMs: 2000, graceMs: 50 };
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: KEY, events: { stepDelayMs: 1 } });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
    SocketManager.defaultTimings = savedTimings;
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
    Object.assign(sandbox.generation.options, {
      statusWords: 'spec',
      jobsEndpoint: true,
      historyV2Endpoint: true,
      historyEndpoint: true,
    });
  });
  afterEach(async () => {
    const logged = JSON.stringify(helper.log().args);
    assert.equal(logged.includes(KEY), false, 'the key appears in a log');
    await helper.unload();
    await until(() => sandbox.counters.socketsOpen === 0, 'the socket to close after the flow stops');
  });

  async function load(awaitProps, credentials = { cfg: { apiKey: KEY } }) {
    await helper.load([configNode, awaitNode, catchNode], awaitFlow(sandbox, awaitProps), credentials);
    return {
      node: helper.getNode('await'),
      connection: helper.getNode('cfg').connection,
      done: collect('done'),
      failed: collect('failed'),
      progress: collect('progress'),
      caught: collect('caught'),
      status: statuses('await'),
    };
  }

  it('sends a completed job on output 1 with merged outputs and flat files, passing the msg through', async () => {
    const { node, connection, done, failed, progress, status } = await load();
    assert.equal(await connection.sockets().ready(5000), true);
    const job = sandbox.jobs.submit(
      workflow({ 25: { class_type: 'SandboxSlow', inputs: { ms: 400 } } }, { save: { sandbox_batches: 2 } }),
      connection.clientId,
    );
    node.receive({ prompt_id: job.id, topic: 'portrait', mine: { keep: true } });
    const msg = await done.next();
    assert.equal(msg.topic, 'portrait');
    assert.deepEqual(msg.mine, { keep: true });
    assert.equal(msg.prompt_id, job.id);
    assert.deepEqual(Object.keys(msg.payload).sort(), ['files', 'outputs', 'prompt_id', 'status']);
    assert.equal(msg.payload.status, 'completed');
    assert.equal(msg.payload.outputs['3'].images.length, 2, 'two executed events of one node, appended');
    assert.deepEqual(msg.payload.outputs, job.outputs);
    assert.deepEqual(msg.payload.files, job.outputs['3'].images);
    assert.equal(sandbox.counters.count(`/api/jobs/${job.id}`), 0, 'all outputs came over the socket');
    await sleep(200);
    assert.equal(failed.received.length + progress.received.length, 0, 'progress is off by default');
    // 4 nodes and 3 steps: 8 + 3 progress_state frames and 3 previews, which no node of this flow wants, and
    // the steps' progress frames past the first within 100 ms (the status shows the step read).
    const skipped = connection.sockets().stats.progressFramesSkipped;
    assert.ok(skipped >= 14 && skipped <= 16, `${skipped} skipped unread`);
    assert.deepEqual(status.at(-1), { fill: 'green', shape: 'dot', text: 'done' });
    assert.ok(
      status.some((s) => /^running/.test(s.text)),
      'running was shown',
    );
  });

  it('lists the files of the chosen nodes only: all, saved only (no temp previews), or these nodes by id or title', async () => {
    const graph = workflow({
      3: {
        class_type: 'SaveImage',
        inputs: { filename_prefix: 'final', images: ['2', 0] },
        _meta: { title: 'Final picture' },
      },
      10: { class_type: 'PreviewImage', inputs: { images: ['2', 0] } },
      11: { class_type: 'SaveImage', inputs: { filename_prefix: 'extra', images: ['2', 0] } },
    });
    const files = async (props) => {
      const { node, connection, done } = await load(props);
      assert.equal(await connection.sockets().ready(5000), true);
      const job = sandbox.jobs.submit(graph, connection.clientId);
      node.receive({ prompt_id: job.id, workflow: graph });
      const msg = await done.next();
      await helper.unload();
      const byNode = Object.fromEntries(
        Object.entries(msg.payload.outputs).map(([id, output]) => [id, output.images.map((i) => i.filename)]),
      );
      assert.deepEqual(Object.keys(byNode).sort(), ['10', '11', '3'], 'outputs stay whole');
      return msg.payload.files.map((file) => [file.type, file.filename.split('_')[0]]);
    };
    assert.deepEqual(await files({}), [
      ['output', 'final'],
      ['temp', 'ComfyUI'],
      ['output', 'extra'],
    ]);
    assert.deepEqual(await files({ filesFrom: 'saved' }), [
      ['output', 'final'],
      ['output', 'extra'],
    ]);
    assert.deepEqual(await files({ filesFrom: 'nodes', fileNodes: 'Final picture, 10' }), [
      ['output', 'final'],
      ['temp', 'ComfyUI'],
    ]);
  });

  it('a job awaited again after it ended lists all its files, though the first await listed saved ones only', async () => {
    const graph = workflow({ 10: { class_type: 'PreviewImage', inputs: { images: ['2', 0] } } });
    const extra = [
      {
        id: 'await2',
        z: 'f1',
        x: 100,
        y: 200,
        type: 'graph-gen-await-job',
        server: 'cfg',
        timeout: '0',
        timeoutType: 'num',
        progress: false,
        wires: [['done2']],
      },
      { id: 'done2', z: 'f1', x: 1, y: 1, type: 'helper' },
    ];
    await helper.load([configNode, awaitNode, catchNode], awaitFlow(sandbox, { filesFrom: 'saved' }, extra), {
      cfg: { apiKey: KEY },
    });
    const connection = helper.getNode('cfg').connection;
    const done = collect('done');
    const done2 = collect('done2');
    assert.equal(await connection.sockets().ready(5000), true);
    const job = sandbox.jobs.submit(graph, connection.clientId);
    helper.getNode('await').receive({ prompt_id: job.id });
    const first = await done.next();
    helper.getNode('await2').receive({ prompt_id: job.id });
    const second = await done2.next();
    const types = (msg) => msg.payload.files.map((file) => file.type);
    assert.deepEqual(types(first), ['output']);
    assert.deepEqual(
      types(second),
      ['output', 'temp'],
      'the remembered result was not changed by the first await',
    );
  });

  it('takes msg.payload.prompt_id, and refuses a msg without a prompt id where a Catch node sees it', async () => {
    const { node, connection, done, caught } = await load();
    await connection.sockets().ready(5000);
    const job = sandbox.jobs.submit(workflow(), connection.clientId);
    node.receive({ payload: { prompt_id: job.id } });
    assert.equal((await done.next()).payload.prompt_id, job.id);
    node.receive({ payload: 'nothing here' });
    const error = (await caught.next()).error;
    assert.equal(error.code, 'invalid_input');
    assert.match(error.message, /msg\.prompt_id/);
  });

  it('refuses a prompt id longer than a job id may be, in words, and asks the server nothing', async () => {
    const { node, caught } = await load();
    const asked = sandbox.counters.requests.length;
    node.receive({ prompt_id: 'x'.repeat(201) });
    const error = (await caught.next()).error;
    assert.equal(error.code, 'invalid_input');
    assert.match(error.message, /201 characters long, more than a job id's 200: set msg\.prompt_id/);
    assert.equal(sandbox.counters.requests.length, asked);
  });

  it('sends progress, previews (type 4 and type 1) and text frames on output 3 when enabled, previews rate-limited', async () => {
    const { node, connection, done, progress } = await load({ progress: true, previewRate: 2 });
    await connection.sockets().ready(5000);
    const job = sandbox.jobs.submit(
      workflow({
        4: { class_type: 'SandboxText', inputs: { text: 'a caption' } },
        5: { class_type: 'SandboxPreview', inputs: { count: 10 } },
      }),
      connection.clientId,
    );
    node.receive({ prompt_id: job.id, topic: 'mine' });
    await done.next();
    const topics = new Set(progress.received.map((m) => m.topic));
    for (const topic of [
      'execution_start',
      'execution_cached',
      'executing',
      'progress',
      'progress_state',
      'executed',
      'preview',
      'text',
    ])
      assert.ok(topics.has(topic), `topic ${topic}`);
    assert.ok(progress.received.every((m) => m.prompt_id === job.id));
    const previews = progress.received.filter((m) => m.topic === 'preview');
    assert.equal(previews.length, 2, '13 previews within a second, at most 2 passed on');
    assert.ok(Buffer.isBuffer(previews[0].payload));
    assert.equal(previews[0].image_type, 'png');
    assert.equal(previews[0].metadata.prompt_id, job.id);
    const text = progress.received.find((m) => m.topic === 'text');
    assert.equal(text.payload, 'a caption');
    assert.equal(text.node, '4');
    const step = progress.received.find((m) => m.topic === 'progress');
    assert.deepEqual([step.payload.value, step.payload.max], [1, 3]);

    const typeOne = sandbox.jobs.submit(
      { 5: { class_type: 'SandboxPreview', inputs: { count: 1, kind: 1 } } },
      connection.clientId,
    );
    node.receive({ prompt_id: typeOne.id });
    await done.next(2);
    const jpeg = progress.received.find((m) => m.topic === 'preview' && m.prompt_id === typeOne.id);
    assert.equal(jpeg.image_type, 'jpeg');
    assert.equal(jpeg.metadata, undefined);
    assert.equal(
      connection.sockets().stats.progressFramesSkipped,
      0,
      'with progress on, every frame is read',
    );
  });

  it('sends each exception_type on output 2 with the error, and shows it in the status', async () => {
    const { node, connection, failed, status } = await load();
    await connection.sockets().ready(5000);
    for (const type of EXCEPTION_TYPES) {
      const job = sandbox.jobs.submit(
        workflow({
          2: { class_type: 'SandboxFail', inputs: { exception_type: type, message: `${type} happened` } },
        }),
        connection.clientId,
      );
      node.receive({ prompt_id: job.id, expected: type });
    }
    await failed.next(EXCEPTION_TYPES.length);
    for (const msg of failed.received) {
      assert.equal(msg.payload.status, 'failed');
      assert.equal(msg.payload.error.exception_type, msg.expected);
      assert.equal(msg.payload.error.exception_message, `${msg.expected} happened`);
      assert.ok(Array.isArray(msg.payload.error.traceback));
      assert.equal(msg.payload.outputs, undefined);
    }
    await until(() => status.at(-1)?.fill === 'red', 'the failed status');
    assert.equal(status.at(-1).shape, 'ring');
    assert.ok(EXCEPTION_TYPES.some((type) => type.startsWith(status.at(-1).text.replace('…', ''))));
  });

  it('shows queued n, running node step n/max and failed exception type, every text under 20 characters', async () => {
    const { node, connection, failed, status } = await load();
    await connection.sockets().ready(5000);
    const id = 'status-words-job';
    const raw = (type, data) =>
      sandbox.events.sendRaw(JSON.stringify({ type, data: { prompt_id: id, ...data } }));
    node.receive({ prompt_id: id, topic: 'render', mine: 7 });
    sandbox.events.sendRaw(
      JSON.stringify({ type: 'status', data: { status: { exec_info: { queue_remaining: 4 } } } }),
    );
    await until(() => status.some((s) => s.text === 'queued 4'), 'queued 4');
    raw('execution_start', {});
    raw('executing', { node: '7' });
    raw('progress', { node: '7', value: 3, max: 20 });
    await until(() => status.some((s) => s.text === 'running 7 3/20'), 'running 7 3/20');
    raw('executing', { node: 'a-very-long-node-identifier' });
    await until(() => status.some((s) => s.text.startsWith('running a-very')), 'the long node id');
    raw('execution_error', { exception_type: 'InsufficientFundsError', exception_message: 'no funds' });
    const msg = await failed.next();
    assert.equal(msg.topic, 'render', 'output 2 keeps msg.topic');
    assert.equal(msg.mine, 7, "output 2 keeps the user's properties");
    assert.equal(msg.payload.error.exception_type, 'InsufficientFundsError');
    await until(() => status.at(-1)?.fill === 'red', 'the failed status');
    assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'InsufficientFundsE…' });
    for (const shown of status) assert.ok(shown.text === undefined || shown.text.length < 20, shown.text);
  });

  it('sends an interrupted job and a cancelled one as cancelled', async () => {
    const { node, connection, failed, status } = await load();
    await connection.sockets().ready(5000);
    const hang = () =>
      sandbox.jobs.submit(workflow({ 2: { class_type: 'SandboxHang', inputs: {} } }), connection.clientId);
    const first = hang();
    node.receive({ prompt_id: first.id });
    await until(
      () => first.state === 'in_progress' && status.some((s) => /^running/.test(s.text)),
      'the job to run',
    );
    sandbox.jobs.interrupt();
    const interrupted = await failed.next();
    assert.deepEqual(interrupted.payload, { prompt_id: first.id, status: 'cancelled' });
    const second = hang();
    node.receive({ prompt_id: second.id });
    await until(() => second.state === 'in_progress', 'the second job to run');
    sandbox.jobs.cancel(second.id);
    assert.equal((await failed.next(2)).payload.status, 'cancelled');

    // A job deleted while still queued gets no job event: the queue's status event prompts a check.
    sandbox.events.options.autoRun = false;
    const queued = sandbox.jobs.submit(workflow(), connection.clientId);
    sandbox.events.options.autoRun = true;
    const reads = sandbox.counters.matching('/api/queue', 'GET').length;
    node.receive({ prompt_id: queued.id });
    await until(
      () => sandbox.counters.matching('/api/queue', 'GET').length > reads,
      'the first status check (a queue read)',
    );
    const started = Date.now();
    sandbox.jobs.cancel(queued.id);
    assert.deepEqual((await failed.next(3)).payload, { prompt_id: queued.id, status: 'cancelled' });
    assert.ok(Date.now() - started < 3000, 'within a sweep, not the one-minute quiet check');
  });

  it('times out (setting and msg.timeout), and cancels the job on the service when asked to', async () => {
    const { node, connection, failed } = await load({ timeout: '0.3', cancelOnTimeout: true });
    await connection.sockets().ready(5000);
    const job = sandbox.jobs.submit(
      workflow({ 2: { class_type: 'SandboxHang', inputs: {} } }),
      connection.clientId,
    );
    const started = Date.now();
    node.receive({ prompt_id: job.id });
    const msg = await failed.next();
    assert.deepEqual(msg.payload, { prompt_id: job.id, status: 'timeout' });
    assert.ok(Date.now() - started >= 250);
    await until(() => job.state === 'cancelled', 'the cancel to reach the service');
    const [cancel] = sandbox.counters.matching('/api/queue', 'POST');
    assert.ok(cancel, 'POST /api/queue was sent');

    const other = sandbox.jobs.submit(
      workflow({ 2: { class_type: 'SandboxHang', inputs: {} } }),
      connection.clientId,
    );
    node.receive({ prompt_id: other.id, timeout: 0.1 });
    assert.equal((await failed.next(2)).payload.status, 'timeout');
    sandbox.jobs.cancel(other.id);
  });

  it('resolves at once a job that finished before it was awaited (socket closed then), and replays kept events', async () => {
    const { node, connection, done } = await load();
    const early = sandbox.jobs.submit(workflow({}, { prefix: 'early' }), connection.clientId);
    await until(() => early.state === 'completed', 'the job to end');
    node.receive({ prompt_id: early.id });
    const msg = await done.next();
    assert.deepEqual(fileNames(msg.payload.outputs), fileNames(early.outputs));
    assert.equal(msg.payload.outputs_incomplete, undefined);

    // submit -> delay -> await with the socket open: the kept events are replayed, nothing read over REST.
    await connection.sockets().ready(5000);
    sandbox.counters.reset();
    const later = sandbox.jobs.submit(workflow({}, { prefix: 'later' }), connection.clientId);
    await until(() => later.state === 'completed', 'the job to end');
    await sleep(50);
    node.receive({ prompt_id: later.id });
    const replayed = await done.next(2);
    assert.deepEqual(replayed.payload.outputs, later.outputs);
    assert.equal(sandbox.counters.count(`/api/jobs/${later.id}`), 0);
    assert.equal(
      connection.sockets().subscriptions.size,
      0,
      'a job ended by its replay leaves no subscription',
    );
  });

  it('understands raw status words: success, error, and keeps waiting on queued_waiting', async () => {
    sandbox.generation.options.statusWords = 'raw';
    const { node, connection, done, failed, status } = await load();
    const ok = sandbox.jobs.submit(workflow(), connection.clientId);
    const bad = sandbox.jobs.submit(
      workflow({ 2: { class_type: 'SandboxFail', inputs: { exception_type: 'OOMError' } } }),
      connection.clientId,
    );
    await until(() => ok.state === 'completed' && bad.state === 'failed', 'both jobs to end');
    sandbox.events.options.autoRun = false;
    const waiting = sandbox.jobs.submit(workflow(), connection.clientId);
    sandbox.events.options.autoRun = true;
    node.receive({ prompt_id: ok.id });
    node.receive({ prompt_id: bad.id });
    node.receive({ prompt_id: waiting.id });
    assert.equal((await done.next()).payload.status, 'completed');
    const failure = (await failed.next()).payload;
    assert.equal(failure.status, 'failed');
    assert.equal(failure.error.exception_type, 'OOMError', 'the error comes from /api/jobs');
    await until(() => status.at(-1)?.text?.startsWith('queued'), 'the queued status');
    assert.equal(done.received.length, 1, 'a waiting job is not an end');
    const raw = await connection.dialect.lookup.status(waiting.id);
    assert.deepEqual([raw.word, raw.phase], ['queued_waiting', 'pending']);
    sandbox.events.run(waiting.id);
    assert.equal((await done.next(2)).payload.prompt_id, waiting.id);
  });

  it('closes the socket at once when the flow stops, without waiting out the idle grace time', async () => {
    const timings = SocketManager.defaultTimings;
    SocketManager.defaultTimings = { ...timings, graceMs: 60_000 };
    try {
      const { node, connection } = await load();
      assert.equal(await connection.sockets().ready(5000), true);
      const job = sandbox.jobs.submit(
        workflow({ 2: { class_type: 'SandboxHang', inputs: {} } }),
        connection.clientId,
      );
      node.receive({ prompt_id: job.id });
      await until(() => job.state === 'in_progress', 'the job to run');
      const started = Date.now();
      await helper.unload();
      await until(() => sandbox.counters.socketsOpen === 0, 'the socket to close', 3000);
      assert.ok(Date.now() - started < 2000, `closed after ${Date.now() - started} ms`);
      assert.equal(connection.sockets().state, 'closed');
      sandbox.jobs.cancel(job.id);
    } finally {
      SocketManager.defaultTimings = timings;
    }
  });

  it('shows unauthorized when the socket handshake is refused and does not spin', async () => {
    const { node, done, status } = await load({}, { cfg: { apiKey: 'wrong-key-0042' } });
    node.receive({ prompt_id: 'whatever' });
    await until(() => status.some((s) => s.text === 'unauthorized'), 'the unauthorized status');
    assert.deepEqual(
      status.find((s) => s.text === 'unauthorized'),
      { fill: 'red', shape: 'ring', text: 'unauthorized' },
    );
    await sleep(700);
    assert.ok(sandbox.counters.handshakes.length <= 2, `${sandbox.counters.handshakes.length} handshakes`);
    assert.equal(done.received.length, 0);
    assert.equal(JSON.stringify(helper.log().args).includes('wrong-key-0042'), false);
  });

  it('drops garbage, truncated and oversized frames mid-job and still completes the job', async () => {
    const { node, connection, done, progress } = await load({ progress: true, previewRate: 0 });
    await connection.sockets().ready(5000);
    const job = sandbox.jobs.submit(
      workflow({ 25: { class_type: 'SandboxSlow', inputs: { ms: 300 } } }),
      connection.clientId,
    );
    node.receive({ prompt_id: job.id });
    await until(() => job.state === 'in_progress', 'the job to run');
    sandbox.events.sendRaw('{"type": oops');
    sandbox.events.sendRaw(Buffer.from([0, 0, 0, 4, 0, 0, 0, 200, 1]));
    sandbox.events.sendRaw(Buffer.from([0, 0, 0, 1]));
    sandbox.events.sendRaw(encodePreviewWithMetadata({ prompt_id: job.id }, Buffer.alloc(33 * 1024 * 1024)));
    sandbox.events.sendRaw(Buffer.from([0, 0, 0, 42, 0, 0, 0, 0]));
    const msg = await done.next(1, 10000);
    assert.deepEqual(msg.payload.outputs, job.outputs);
    assert.equal(
      progress.received.filter((m) => m.topic === 'preview').length,
      3,
      'only the well-formed previews',
    );
    assert.equal(connection.sockets().stats.socketsOpened, 1, 'the socket stayed up');
    assert.equal(connection.sockets().stats.framesDropped, 5);
  });

  it("self-hosted end to end: submit -> delay -> await gets every event of the job on the config's one socket", async () => {
    const selfHosted = await startSandbox({ events: { stepDelayMs: 1 } });
    try {
      const flow = awaitFlow(selfHosted, { progress: true, previewRate: 0 }, [
        {
          id: 'submit',
          z: 'f1',
          x: 1,
          y: 1,
          type: 'graph-gen-submit',
          server: 'cfg',
          workflow: '',
          check: false,
          partner: 'auto',
          wires: [['submitted']],
        },
        { id: 'submitted', z: 'f1', x: 1, y: 1, type: 'helper' },
      ]);
      await helper.load([configNode, awaitNode, submitNode, catchNode], flow, {});
      const submitted = collect('submitted');
      const done = collect('done');
      const progress = collect('progress');
      helper.getNode('submit').receive({ payload: textToImage(), topic: 'fox' });
      const msg = await submitted.next();
      const job = selfHosted.jobs.jobs.get(msg.prompt_id);
      assert.equal(
        job.clientId,
        helper.getNode('cfg').connection.clientId,
        "submitted with the socket's client id",
      );
      await until(() => job.state === 'completed', 'the job to end');
      await sleep(100);
      helper.getNode('await').receive(msg);
      const result = await done.next();
      assert.equal(result.topic, 'fox');
      assert.deepEqual(result.payload.outputs, job.outputs);
      assert.equal(result.payload.files.length, 1);
      const topics = progress.received.map((m) => m.topic);
      assert.equal(topics[0], 'execution_start', 'the kept events are replayed from the start');
      assert.ok(topics.includes('preview'));
      assert.equal(selfHosted.counters.socketsOpened, 1);
      assert.equal(selfHosted.counters.count(`/api/jobs/${job.id}`), 0, 'nothing was missed');
      await helper.unload();
      await until(() => selfHosted.counters.socketsOpen === 0, 'the socket to close');
    } finally {
      await selfHosted.close();
    }
  });
});
