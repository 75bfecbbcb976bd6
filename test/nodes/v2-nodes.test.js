'use strict';
// The generation nodes on Comfy API v2: a config node with the dialect "comfy-api-v2" and a bearer token, in a
// real Node-RED runtime (the test helper), against the sandbox's v2 mode over HTTP on 127.0.0.1 (it answers as
// comfy-api-proxy does in front of a ComfyUI, with the sandbox's job engine as that ComfyUI). What a user sees:
// the msgs on each output, what a Catch node gets, what the log says; and what it costs the server (the
// sandbox's v2 counters: requests per route and per job, event streams open). Past 400 lines: one flow and one
// sandbox for every node on v2, so each case is a few lines of what a user does and sees.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { V2EventStreams } = require('../../dist/generation/dialects/comfy-api-v2/v2-event-streams');
const { coreNode, statuses, textToImage } = require('../support/node-red');
const { textOf } = require('../support/generation-nodes');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-upload.js'),
  require('../../dist/nodes/graph-gen-submit.js'),
  require('../../dist/nodes/graph-gen-await-job.js'),
  require('../../dist/nodes/graph-gen-download.js'),
  require('../../dist/nodes/graph-gen-queue.js'),
  coreNode('common/25-catch.js'),
];

const TOKEN = 'v2-nodes-bearer-3f9e1c7a';
const UI_WORKFLOW = require('../fixtures/ui/checkpoint-prompt.json');
const { solidPng } = require('../../scripts/start.js');

/** Runs until cancelled (the engine's SandboxHang): a job that holds the engine's one slot. */
const HANG = { 20: { class_type: 'SandboxHang', inputs: {} } };
/** The text-to-image workflow with `extra` nodes (SandboxSlow, SandboxFail, SandboxHang, LoadImage). */
const graph = (extra = {}) => ({ ...textToImage(), ...extra });
const slow = (ms) => graph({ 20: { class_type: 'SandboxSlow', inputs: { ms } } });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check, what, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Lets the job held by its SandboxHang node go on to its end (once it reached that node). */
const releaseHang = (sandbox) => until(() => sandbox.events.releaseHangs() > 0, 'a job held by SandboxHang');

/**
 * The flow: a v2 config node `c` (bearer token), submit `submit` (wired to `submitted` only: tests pass its msg
 * on), await `await` with progress (outputs `done`, `failed`, `progress`), await `quiet` without progress
 * (`quietDone`, `quietFailed`), download `download` (buffer, to `files`) and `toFile` (file mode into `dir`, to
 * `saved`), upload `upload` (to `uploaded`), queue `queue` (to `queued`), and a Catch node (to `caught`).
 */
function v2Flow(sandbox, dir, config = {}) {
  const server = 'c';
  return [
    { id: 'f1', type: 'tab' },
    {
      id: server,
      type: 'graph-gen-config',
      baseUrl: sandbox.url,
      dialect: 'comfy-api-v2',
      authType: 'bearer',
      partnerKeyField: 'api_key_service_org',
      ...config,
    },
    { id: 'submit', z: 'f1', type: 'graph-gen-submit', server, wires: [['submitted']] },
    {
      id: 'await',
      z: 'f1',
      type: 'graph-gen-await-job',
      server,
      timeout: '0',
      timeoutType: 'num',
      progress: true,
      previewRate: 0,
      resume: false,
      wires: [['done'], ['failed'], ['progress']],
    },
    {
      id: 'quiet',
      z: 'f1',
      type: 'graph-gen-await-job',
      server,
      timeout: '0',
      timeoutType: 'num',
      progress: false,
      resume: false,
      wires: [['quietDone'], ['quietFailed'], []],
    },
    { id: 'download', z: 'f1', type: 'graph-gen-download', server, mode: 'buffer', wires: [['files']] },
    {
      id: 'toFile',
      z: 'f1',
      type: 'graph-gen-download',
      server,
      mode: 'file',
      directory: dir,
      directoryType: 'str',
      wires: [['saved']],
    },
    { id: 'upload', z: 'f1', type: 'graph-gen-upload', server, wires: [['uploaded']] },
    { id: 'queue', z: 'f1', type: 'graph-gen-queue', server, action: 'list', wires: [['queued']] },
    { id: 'catcher', z: 'f1', type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
    ...HELPERS.map((id) => ({ id, z: 'f1', type: 'helper' })),
  ];
}

const HELPERS = [
  'submitted',
  'done',
  'failed',
  'progress',
  'quietDone',
  'quietFailed',
  'files',
  'saved',
  'uploaded',
  'queued',
  'caught',
];

/** What each helper node received and no test took yet, by helper id (listened to from the flow's start). */
const boxes = new Map();

function listen(ids) {
  for (const id of ids) {
    const box = [];
    boxes.set(id, box);
    helper.getNode(id).on('input', (msg) => box.push(msg));
  }
}

/** Takes the first msg a helper node received that `accept` takes, waiting up to `ms`. */
async function take(id, ms = 15_000, accept = () => true) {
  const box = boxes.get(id);
  const index = await until(
    () => {
      const at = box.findIndex(accept);
      return at >= 0 ? at + 1 : 0;
    },
    `a message at ${id}`,
    ms,
  );
  return box.splice(index - 1, 1)[0];
}

/** Takes every msg a helper node received so far. */
const taken = (id) => boxes.get(id).splice(0);

/** Takes the next msg of `id`; fails at once, with the Catch node's error, when the Catch node gets one first. */
async function outputOf(id, ms = 15_000) {
  const got = await until(
    () => (boxes.get(id).length > 0 ? 'out' : boxes.get('caught').length > 0 ? 'caught' : undefined),
    `a message at ${id}`,
    ms,
  );
  if (got === 'caught') throw new Error(`the node failed: ${taken('caught')[0].error.message}`);
  return take(id);
}

describe('the generation nodes on Comfy API v2 (sandbox v2 mode, real Node-RED)', function () {
  this.timeout(60_000);
  let sandbox;
  let dir;
  let savedStreamTimings;

  before(async () => {
    // A stream that failed is tried again sooner than in a flow (2 s .. 30 s): the tests wait less.
    savedStreamTimings = V2EventStreams.defaultTimings;
    V2EventStreams.defaultTimings = { ...savedStreamTimings, retryBaseMs: 200, retryMaxMs: 1000 };
    await helper.startServer();
    sandbox = await startSandbox({
      dialect: 'comfy-api-v2',
      v2: { token: TOKEN, keepaliveMs: 1000, throttleMs: 0 },
      events: { stepDelayMs: 5 },
    });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
    V2EventStreams.defaultTimings = savedStreamTimings;
  });
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-v2-nodes-'));
    sandbox.v2.faults.clear();
    sandbox.v2.counters.reset();
    sandbox.events.options.autoRun = true;
  });
  afterEach(async () => {
    const logged = JSON.stringify(helper.log().args);
    assert.equal(logged.includes(TOKEN), false, 'the token appears in a log');
    await helper.unload();
    // Nothing left running in the engine for the next test: its one slot is free again.
    for (const job of [...sandbox.jobs.jobs.values()]) {
      if (job.state === 'pending') sandbox.jobs.remove(job.id);
      if (job.state === 'in_progress') sandbox.jobs.interrupt(job.id);
    }
    sandbox.events.releaseHangs();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function load(config = {}, credentials = { apiKey: TOKEN }) {
    await helper.load(NODES, v2Flow(sandbox, dir, config), { c: credentials });
    listen(HELPERS);
  }

  /** Submits through the submit node: its msg (with `prompt_id`); fails with the Catch node's error. */
  async function submitted(msg) {
    helper.getNode('submit').receive(msg);
    return outputOf('submitted');
  }

  /** Submits `workflow` and passes the submit's msg to the await node `awaitId`. */
  async function submitAndAwait(workflow, awaitId = 'await', extra = {}) {
    const msg = await submitted({ payload: workflow, ...extra });
    helper.getNode(awaitId).receive(msg);
    return msg;
  }

  /** Errors the nodes logged (what a user sees in the debug sidebar and the log). */
  const loggedErrors = () =>
    helper
      .log()
      .args.map(([entry]) => entry)
      .filter((entry) => entry && entry.level === 20);

  it('submit → await with progress → download (Buffer and file): the result and its picture', async () => {
    await load();
    const status = statuses('await');
    const msg = await submitAndAwait(slow(300), 'await', { topic: 'fox', mine: { keep: true } });
    assert.match(msg.prompt_id, /^[0-9a-f-]{36}$/);
    assert.equal(msg.payload.prompt_id, msg.prompt_id);
    assert.equal(msg.workflow['6'].inputs.text, 'a red fox');
    const done = await outputOf('done');
    assert.equal(done.topic, 'fox');
    assert.deepEqual(done.mine, { keep: true });
    assert.equal(done.payload.status, 'completed');
    assert.equal(done.payload.prompt_id, msg.prompt_id);
    assert.equal(done.payload.files.length, 1);
    const [file] = done.payload.files;
    assert.match(file.filename, /^fox.*\.png$/);
    assert.equal(typeof file.asset_id, 'string');
    assert.deepEqual(Object.keys(done.payload.outputs), ['9']);

    const progress = taken('progress');
    const topics = new Set(progress.map((each) => each.topic));
    assert.ok(topics.has('execution_start'), [...topics].join(', '));
    assert.ok(topics.has('progress') || topics.has('progress_state'), [...topics].join(', '));
    assert.ok(
      progress.every((each) => each.prompt_id === msg.prompt_id && each.topic !== undefined),
      'every progress msg names its job',
    );
    assert.deepEqual(taken('failed'), []);
    await until(() => status.at(-1)?.text === 'done', 'the status "done"', 2000);
    assert.deepEqual(status.at(-1), { fill: 'green', shape: 'dot', text: 'done' });

    // Buffer mode: the bytes the engine made, with their name and type.
    // Each node takes a copy: a node changes the msg it is given.
    helper.getNode('download').receive(structuredClone(done));
    const bytes = await outputOf('files');
    const made = sandbox.jobs.files.get(`output/${file.subfolder}/${file.filename}`);
    assert.ok(Buffer.isBuffer(bytes.payload) && bytes.payload.length > 0);
    assert.equal(bytes.payload.subarray(1, 4).toString(), 'PNG');
    assert.equal(bytes.filename, file.filename);
    assert.equal(bytes.contentType, 'image/png');
    assert.deepEqual(bytes.payload, made.content);
    // File mode: the same bytes written to the directory.
    helper.getNode('toFile').receive(structuredClone(done));
    const saved = await outputOf('saved');
    assert.equal(saved.payload, path.join(dir, file.filename));
    assert.deepEqual(fs.readFileSync(saved.payload), bytes.payload);
    assert.ok(sandbox.v2.counters.route('GET /api/v2/assets/{id}/content') >= 2);
    assert.deepEqual(taken('caught'), []);
  });

  it("a job that waits behind another gets its place as a progress msg (from v2's queue_position), then runs", async () => {
    await load();
    const status = statuses('await');
    const blocker = await submitAndAwait(graph(HANG), 'quiet');
    await until(
      () => sandbox.jobs.jobs.get(blocker.prompt_id)?.state === 'in_progress',
      'the blocker to run',
    );
    const waiting = await submitAndAwait(slow(50));
    const place = await take('progress', 15_000, (msg) => msg.topic === 'queue');
    assert.equal(place.prompt_id, waiting.prompt_id);
    // The server runs our blocker, and no other of ours waits before it.
    assert.deepEqual(place.payload, { ahead: 1 });
    await until(
      () => status.some((each) => each.text === 'queued: 1 ahead'),
      'the place in the status',
      3000,
    );
    assert.deepEqual(taken('done'), []);
    await releaseHang(sandbox);
    const done = await outputOf('done');
    assert.equal(done.prompt_id, waiting.prompt_id);
    assert.equal(done.payload.status, 'completed');
    assert.equal((await outputOf('quietDone')).prompt_id, blocker.prompt_id);
    const after = taken('progress').map((msg) => msg.topic);
    assert.ok(after.includes('execution_start'), `no execution_start after the place: ${after.join(', ')}`);
    assert.deepEqual(taken('caught'), []);
  });

  it('a job that waits behind one ComfyUI runs for another program (not through v2) is told 1 ahead, not next in line', async () => {
    await load();
    // Submitted on ComfyUI's own page: the v2 server does not list it, but ComfyUI runs it first.
    const elsewhere = sandbox.jobs.submit(graph(HANG), 'comfyui-page');
    await until(() => sandbox.jobs.jobs.get(elsewhere.id)?.state === 'in_progress', 'the other job to run');
    const waiting = await submitAndAwait(slow(50));
    const place = await take('progress', 15_000, (msg) => msg.topic === 'queue');
    assert.equal(place.prompt_id, waiting.prompt_id);
    assert.deepEqual(place.payload, { ahead: 1 });
    await releaseHang(sandbox);
    assert.equal((await outputOf('done')).prompt_id, waiting.prompt_id);
  });

  it('with progress, an await ends as soon as its stream tells the end, not at the next poll', async () => {
    await load();
    const msg = await submitAndAwait(graph(HANG), 'await');
    await take('progress', 10_000, (each) => each.topic === 'execution_start');
    // Another await makes the config node read the list of jobs now, while the first still runs.
    const reads = sandbox.v2.counters.route('GET /api/v2/jobs');
    await submitAndAwait(slow(10), 'quiet');
    await until(() => sandbox.v2.counters.route('GET /api/v2/jobs') > reads, 'a read of the jobs');
    await sleep(100);
    await releaseHang(sandbox);
    const done = await outputOf('done');
    const arrived = Date.now();
    assert.equal(done.prompt_id, msg.prompt_id);
    const late = arrived - sandbox.jobs.jobs.get(msg.prompt_id).endedAt;
    assert.ok(late < 600, `the result came ${late} ms after the job ended`);
  });

  it('upload: msg.payload.name goes into a LoadImage input (msg.inputs) and the job runs on those bytes; the same bytes again are not sent again', async () => {
    await load();
    const png = solidPng(8, 8, [200, 80, 40, 255]);
    helper.getNode('upload').receive({ payload: png, filename: 'in.png' });
    const uploaded = await outputOf('uploaded');
    assert.match(uploaded.payload.name, /^graph-gen\/[0-9a-f]{16}\/in\.png$/);
    assert.equal(uploaded.filename, uploaded.payload.name);
    assert.equal(uploaded.payload.type, 'input');
    assert.equal(uploaded.payload.created_new, true);
    assert.match(uploaded.payload.hash, /^blake3:[0-9a-f]{64}$/);
    const stored = sandbox.generation.uploads.at(-1);
    assert.equal(
      `${stored.subfolder}/${stored.name}`,
      uploaded.payload.name,
      'ComfyUI keeps it where the name says',
    );

    const workflow = graph({ 10: { class_type: 'LoadImage', inputs: { image: 'example.png' } } });
    workflow['5'] = { class_type: 'VAEEncode', inputs: { pixels: ['10', 0], vae: ['4', 2] } };
    const msg = await submitAndAwait(workflow, 'quiet', { inputs: { 10: { image: uploaded.payload.name } } });
    assert.equal((await outputOf('quietDone')).payload.status, 'completed');
    const job = sandbox.jobs.jobs.get(msg.prompt_id);
    assert.equal(job.prompt['10'].inputs.image, uploaded.payload.name);
    assert.equal(job.state, 'completed');

    // The same bytes under another name: the server has them, so they are not sent again.
    const sent = () => sandbox.v2.counters.route('POST /api/v2/assets');
    assert.equal(sent(), 1);
    helper.getNode('upload').receive({ payload: Buffer.from(png), filename: 'again.png' });
    const again = await outputOf('uploaded');
    assert.equal(sent(), 1, 'the bytes were sent twice');
    assert.equal(sandbox.v2.counters.route('HEAD /api/v2/assets/by-hash/{hash}'), 2);
    assert.equal(sandbox.v2.counters.route('POST /api/v2/assets/from-hash'), 1);
    assert.equal(again.payload.name, uploaded.payload.name, 'where the server keeps those bytes');
    assert.equal(again.payload.asset_id, uploaded.payload.asset_id);
    assert.equal(again.payload.created_new, false);
    assert.equal(sandbox.generation.uploads.at(-1), stored, 'ComfyUI got no second upload');
  });

  it('a workflow that fails while it runs ends on output 2 with its error; the status says why', async () => {
    await load();
    const status = statuses('await');
    const failing = graph({
      20: {
        class_type: 'SandboxFail',
        inputs: { exception_type: 'OOMError', message: 'out of memory on node 20' },
      },
    });
    const msg = await submitAndAwait(failing, 'await', { topic: 'doomed' });
    const failed = await outputOf('failed');
    assert.equal(failed.topic, 'doomed');
    assert.equal(failed.prompt_id, msg.prompt_id);
    assert.equal(failed.payload.status, 'failed');
    // v2 names the failing node's class, not the exception's type.
    assert.equal(failed.payload.error.exception_type, 'SandboxFail');
    assert.match(failed.payload.error.exception_message, /out of memory on node 20/);
    await until(() => status.at(-1)?.fill === 'red', 'a red status', 2000);
    assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'SandboxFail' });
    assert.deepEqual(taken('done'), []);
    assert.deepEqual(taken('caught'), [], 'a failed job is a result, not an error');
  });

  it("a refused workflow (v2's 422 invalid_workflow) reaches a Catch node with node_errors, as today's 400 does", async () => {
    await load();
    const broken = graph();
    delete broken['5'].inputs.width;
    helper.getNode('submit').receive({ payload: broken, topic: 'broken' });
    const caught = await take('caught');
    assert.equal(caught.topic, 'broken');
    assert.equal(caught.error.code, 'invalid_request');
    assert.match(caught.error.message, /refused the workflow/);
    assert.match(caught.error.message, /5/);
    assert.match(caught.error.message, /width/);
    assert.equal(caught.error.cause.status, 422);
    assert.equal(caught.error.cause.body.node_errors['5'].errors[0].type, 'required_input_missing');
    assert.equal(caught.error.cause.body.error.type, 'invalid_workflow');
    assert.deepEqual(taken('submitted'), []);
    assert.equal(textOf(caught).includes(TOKEN), false);
  });

  it('a UI-format workflow is refused in a sentence before anything is sent (v2 has no node definitions)', async () => {
    await load();
    helper.getNode('submit').receive({ payload: structuredClone(UI_WORKFLOW) });
    const caught = await take('caught');
    assert.equal(caught.error.code, 'invalid_input');
    assert.match(caught.error.message, /Comfy API v2/);
    assert.match(caught.error.message, /API format/);
    assert.equal(sandbox.v2.counters.route('POST /api/v2/jobs'), 0, 'something was sent');
  });

  it('queue: lists running and waiting jobs; cancels a waiting job (its await ends cancelled, not lost) and a running one; interrupt is refused in a sentence', async () => {
    await load();
    const running = await submitAndAwait(graph(HANG), 'quiet');
    await until(() => sandbox.jobs.jobs.get(running.prompt_id)?.state === 'in_progress', 'the job to run');
    const waiting = await submitAndAwait(slow(50), 'await');
    const queue = helper.getNode('queue');

    queue.receive({ topic: 'list' });
    const list = await outputOf('queued');
    assert.deepEqual(list.running, [running.prompt_id]);
    assert.deepEqual(list.pending, [waiting.prompt_id]);
    assert.equal(list.payload.queue_pending[0].queue_position, 1);

    // Waiting: ComfyUI drops it and keeps nothing, so the server says `expired`; this config cancelled it.
    queue.receive({ action: 'cancel', prompt_id: waiting.prompt_id });
    const cancelWaiting = await outputOf('queued');
    assert.deepEqual(cancelWaiting.removed, [waiting.prompt_id]);
    assert.equal(cancelWaiting.payload[waiting.prompt_id].status, 'expired');
    const ended = await outputOf('failed');
    assert.equal(ended.prompt_id, waiting.prompt_id);
    assert.equal(ended.payload.status, 'cancelled');
    assert.equal(ended.payload.error, undefined, 'not lost');

    // Running: canceling, then cancelled when the interrupt lands.
    queue.receive({ action: 'cancel', prompt_id: running.prompt_id });
    const cancelRunning = await outputOf('queued');
    assert.deepEqual(cancelRunning.interrupted, [running.prompt_id]);
    assert.equal(cancelRunning.payload[running.prompt_id].status, 'canceling');
    const stopped = await outputOf('quietFailed');
    assert.equal(stopped.prompt_id, running.prompt_id);
    assert.equal(stopped.payload.status, 'cancelled');
    assert.equal(stopped.payload.error, undefined);

    queue.receive({ action: 'interrupt' });
    const refused = await take('caught');
    assert.equal(refused.error.code, 'invalid_input');
    assert.match(refused.error.message, /Comfy API v2 has no interrupt: cancel the job by its id/);
    assert.deepEqual(taken('done'), []);
  });

  it('an uncertain submit (its answer lost) gives one job, run once', async () => {
    await load();
    const before = sandbox.jobs.jobs.size;
    sandbox.v2.faults.loseSubmitAnswers(1);
    const msg = await submitAndAwait(slow(50), 'quiet');
    assert.equal(sandbox.v2.counters.route('POST /api/v2/jobs'), 1, 'the workflow was sent again');
    assert.equal(sandbox.jobs.jobs.size, before + 1);
    assert.ok(sandbox.v2.jobs.has(msg.prompt_id));
    const done = await outputOf('quietDone');
    assert.equal(done.prompt_id, msg.prompt_id);
    assert.equal(done.payload.status, 'completed');
    assert.equal(sandbox.jobs.jobs.size, before + 1);
    assert.deepEqual(taken('caught'), []);
  });

  it("nine awaits with progress at once: at most 8 streams open, every await completes, the 9th's by polling", async () => {
    await load();
    sandbox.events.options.autoRun = false;
    const msgs = [];
    for (let index = 0; index < 9; index++) msgs.push(await submitAndAwait(slow(100), 'await'));
    await until(() => sandbox.v2.counters.streams.open === 8, 'eight streams to open');
    await sleep(300);
    assert.equal(sandbox.v2.counters.streams.open, 8, 'the client keeps to the 8 streams the server has');
    // The 9th job (no stream: the 8 slots stay taken by the waiting jobs) runs and ends first.
    const ninth = msgs[8];
    // Eight streams asked for, none refused: the 9th job has none.
    assert.equal(sandbox.v2.counters.route('GET /api/v2/jobs/{id}/events'), 8);
    sandbox.events.run(ninth.prompt_id);
    const first = await outputOf('done', 15_000);
    assert.equal(first.prompt_id, ninth.prompt_id);
    assert.equal(first.payload.status, 'completed');
    assert.equal(first.payload.files.length, 1);
    assert.equal(sandbox.v2.counters.streams.open, 8);
    assert.equal(sandbox.v2.counters.streams.opened, 8, 'the 9th job got a stream');
    for (const msg of msgs.slice(0, 8)) sandbox.events.run(msg.prompt_id);
    const done = [first];
    while (done.length < 9) done.push(await outputOf('done', 30_000));
    assert.deepEqual(done.map((msg) => msg.prompt_id).sort(), msgs.map((msg) => msg.prompt_id).sort());
    assert.ok(done.every((msg) => msg.payload.status === 'completed' && msg.payload.files.length === 1));
    const { streams } = sandbox.v2.counters;
    console.log(
      `      streams: ${JSON.stringify(streams)}; requests: ${JSON.stringify(Object.fromEntries(sandbox.v2.counters.byRoute))}`,
    );
    assert.ok(streams.mostOpen <= 8, `${streams.mostOpen} streams open at once`);
    assert.equal(streams.refused, 0, 'the client asked for more streams than the server has');
    const progressed = new Set(
      taken('progress')
        .filter((msg) => msg.topic === 'progress')
        .map((msg) => msg.prompt_id),
    );
    assert.ok(progressed.size >= 8, `live progress of ${progressed.size} jobs`);
    assert.deepEqual(taken('failed'), []);
    assert.deepEqual(taken('caught'), []);
  });

  it('a 429 (the stream cap held by other clients) is no error: the job is polled to its end', async () => {
    const crowded = await startSandbox({
      dialect: 'comfy-api-v2',
      v2: { token: TOKEN, maxStreams: 1, keepaliveMs: 1000, throttleMs: 0 },
      events: { stepDelayMs: 5 },
    });
    const other = new AbortController();
    try {
      // Another client's job, whose event stream holds the server's one slot.
      const answer = await fetch(`${crowded.url}/api/v2/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ workflow: graph(HANG) }),
      });
      const job = await answer.json();
      const stream = await fetch(`${crowded.url}/api/v2/jobs/${job.id}/events`, {
        headers: { authorization: `Bearer ${TOKEN}` },
        signal: other.signal,
      });
      assert.equal(stream.status, 200);
      await helper.load(NODES, v2Flow(crowded, dir), { c: { apiKey: TOKEN } });
      listen(HELPERS);
      helper.getNode('submit').receive({ payload: slow(50) });
      const msg = await outputOf('submitted');
      helper.getNode('await').receive(msg);
      await until(() => crowded.v2.counters.streams.refused > 0, 'the server to refuse a stream');
      await releaseHang(crowded);
      const done = await outputOf('done', 20_000);
      assert.equal(done.prompt_id, msg.prompt_id);
      assert.equal(done.payload.status, 'completed');
      assert.equal(done.payload.files.length, 1);
      assert.deepEqual(taken('failed'), []);
      assert.deepEqual(taken('caught'), []);
      assert.deepEqual(loggedErrors(), []);
      const warnings = helper
        .log()
        .args.map(([entry]) => entry)
        .filter((entry) => entry && entry.level === 30 && entry.id);
      assert.deepEqual(warnings, [], 'a node warned of a busy server');
    } finally {
      other.abort();
      await helper.unload();
      await crowded.close();
    }
  });

  it('the server behind unreachable mid-job, then back: the await completes, no error, not lost', async () => {
    await load();
    const msg = await submitAndAwait(slow(2500), 'await');
    await take('progress', 10_000, (each) => each.topic === 'execution_start');
    sandbox.v2.faults.upstreamReachable = false;
    // Longer than the job runs: it ends while the server cannot tell.
    await sleep(3000);
    assert.equal(sandbox.jobs.jobs.get(msg.prompt_id).state, 'completed');
    assert.deepEqual(taken('done'), []);
    sandbox.v2.faults.upstreamReachable = true;
    const done = await outputOf('done', 20_000);
    assert.equal(done.prompt_id, msg.prompt_id);
    assert.equal(done.payload.status, 'completed');
    assert.equal(done.payload.files.length, 1);
    assert.deepEqual(taken('failed'), []);
    assert.deepEqual(taken('caught'), []);
    assert.deepEqual(loggedErrors(), []);
  });

  it('a job the server forgot while awaited (a ComfyUI restart: `expired`) ends as lost (JobLost)', async () => {
    await load();
    const msg = await submitAndAwait(graph(HANG), 'await');
    await until(() => sandbox.jobs.jobs.get(msg.prompt_id)?.state === 'in_progress', 'the job to run');
    await take('progress', 10_000, (each) => each.topic === 'execution_start');
    assert.equal(sandbox.v2.faults.forgetJob(msg.prompt_id), true);
    const lost = await outputOf('failed', 20_000);
    assert.equal(lost.prompt_id, msg.prompt_id);
    assert.equal(lost.payload.status, 'failed');
    assert.equal(lost.payload.error.exception_type, 'JobLost');
    assert.deepEqual(taken('caught'), []);
  });

  it('a job this config cancelled that the server then forgot (`expired`) ends cancelled, not lost', async () => {
    await load();
    const msg = await submitAndAwait(graph(HANG), 'quiet');
    await until(() => sandbox.jobs.jobs.get(msg.prompt_id)?.state === 'in_progress', 'the job to run');
    helper.getNode('queue').receive({ action: 'cancel', prompt_id: msg.prompt_id });
    const cancelled = await outputOf('queued');
    assert.deepEqual(cancelled.interrupted, [msg.prompt_id]);
    // ComfyUI restarts before the interrupt is seen to land: the job is expired from then.
    sandbox.v2.faults.forgetJob(msg.prompt_id);
    const ended = await outputOf('quietFailed', 20_000);
    assert.equal(ended.prompt_id, msg.prompt_id);
    assert.equal(ended.payload.status, 'cancelled');
    assert.equal(ended.payload.error, undefined);
    const answer = await fetch(`${sandbox.url}/api/v2/jobs/${msg.prompt_id}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal((await answer.json()).status, 'expired', 'the server no longer knows how it ended');
  });

  it('requests per job: an await of a job that ends while others wait costs about one request besides its submit', async () => {
    await load();
    const blocker = await submitAndAwait(graph(HANG), 'quiet');
    await until(
      () => sandbox.jobs.jobs.get(blocker.prompt_id)?.state === 'in_progress',
      'the blocker to run',
    );
    const count = 6;
    const msgs = [];
    for (let index = 0; index < count; index++) msgs.push(await submitAndAwait(slow(400), 'quiet'));
    // They wait a while (polled meanwhile), then run one after another.
    await sleep(3000);
    const { counters } = sandbox.v2;
    const whileWaiting = Object.fromEntries(counters.byRoute);
    counters.reset();
    await releaseHang(sandbox);
    const done = [];
    while (done.length < count + 1) done.push(await outputOf('quietDone', 30_000));
    const jobs = count + 1;
    const sum = (routes) => Object.values(routes).reduce((total, n) => total + n, 0);
    const whileEnding = Object.fromEntries(counters.byRoute);
    const submits = whileWaiting['POST /api/v2/jobs'];
    const waitingRequests = sum(whileWaiting) - submits;
    const endingRequests = sum(whileEnding);
    console.log(
      `      ${jobs} jobs: ${submits} submits; while they waited 3 s: ${JSON.stringify(whileWaiting)}; while they ended one after another: ${JSON.stringify(whileEnding)}`,
    );
    console.log(
      `      besides the submit, per job: ${((waitingRequests + endingRequests) / jobs).toFixed(2)} (${(endingRequests / jobs).toFixed(2)} while ending); each job's own routes: ${msgs.map((msg) => counters.job(msg.prompt_id)).join(', ')}`,
    );
    assert.equal(submits, jobs);
    assert.equal(counters.route('POST /api/v2/jobs'), 0);
    assert.equal(counters.streams.opened, 0, 'an await without progress opened a stream');
    assert.ok(endingRequests / jobs <= 1.2, `${endingRequests} requests for ${jobs} jobs ending`);
    assert.ok(
      (waitingRequests + endingRequests) / jobs <= 2,
      `${waitingRequests + endingRequests} requests for ${jobs} jobs`,
    );
  });

  describe('the config dialog on a v2 server', () => {
    const post = (route, body) => helper.request().post(`/graph-gen/graph-gen-config/${route}`).send(body);
    const v2Settings = () => ({
      id: 'c',
      baseUrl: sandbox.url,
      dialect: 'comfy-api-v2',
      authType: 'bearer',
    });

    it('test connection says the server speaks Comfy API v2; with the ComfyUI dialect, to choose Comfy API v2', async () => {
      await load();
      const host = new URL(sandbox.url).host;
      const typed = await post('test', { ...v2Settings(), apiKey: TOKEN });
      assert.deepEqual(typed.body, {
        ok: true,
        code: 'ok',
        message: `Connected: ${host} speaks Comfy API v2 and accepted the bearer token.`,
      });
      // The deployed node's stored token (the field unchanged).
      const stored = await post('test', v2Settings());
      assert.equal(stored.body.ok, true, stored.body.message);
      const wrong = await post('test', { ...v2Settings(), id: 'not-deployed', apiKey: 'a-wrong-token' });
      assert.equal(wrong.body.ok, false);
      assert.equal(wrong.body.code, 'unauthorized');
      assert.equal(JSON.stringify(wrong.body).includes('a-wrong-token'), false);
      // The token as an API key (X-API-Key): the sentence says v2 takes a bearer token.
      const asKey = await post('test', { ...v2Settings(), id: 'typed', authType: 'apiKey', apiKey: TOKEN });
      assert.deepEqual(asKey.body, {
        ok: false,
        code: 'unauthorized',
        message: `${host} speaks Comfy API v2, which takes a bearer token (Authorization: Bearer): choose "Bearer token" as the authentication and enter the server's token.`,
      });
      for (const authType of ['bearer', 'apiKey']) {
        const todays = await post('test', { ...v2Settings(), dialect: 'comfyui', authType, apiKey: TOKEN });
        assert.deepEqual(todays.body, {
          ok: false,
          code: 'invalid_input',
          message: `${host} speaks Comfy API v2, not ComfyUI's API: choose "Comfy API v2" as the dialect.`,
        });
      }
      assert.equal(JSON.stringify(helper.log().args).includes(TOKEN), false);
    });

    it('the submit dialog asks a v2 config node for node definitions: a sentence, and the flow goes on', async () => {
      await load();
      for (const body of [v2Settings(), { ...v2Settings(), id: 'typed', apiKey: TOKEN }]) {
        const answer = await post('definitions', body);
        assert.equal(answer.status, 200);
        assert.equal(answer.body.ok, false, JSON.stringify(answer.body));
        assert.equal(answer.body.code, 'invalid_input');
        assert.match(
          answer.body.message,
          /speaks Comfy API v2, which offers no node definitions: give the workflow in API format/,
        );
        assert.equal(JSON.stringify(answer.body).includes(TOKEN), false);
        const converted = await post('convert', { ...body, workflow: structuredClone(UI_WORKFLOW) });
        assert.equal(converted.body.ok, false);
        assert.match(converted.body.message, /Comfy API v2/, JSON.stringify(converted.body));
      }
      // Nothing broke: the config node's jobs run as before.
      await submitAndAwait(slow(20), 'quiet');
      assert.equal((await outputOf('quietDone')).payload.status, 'completed');
    });
  });
});
