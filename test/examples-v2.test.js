'use strict';
// The generation examples under examples/ on Comfy API v2: each imported as shipped, with only its config
// node's dialect switched to "comfy-api-v2" and its authentication to a bearer token (the token, as the
// README tells a user to set a key, a ${GRAPH_GEN_API_KEY} credential), run against the sandbox's v2 mode (as
// comfy-api-proxy in front of a ComfyUI), doing what it does on today's API; where v2 cannot (a mask upload, an
// interrupt), what the user sees instead. The test-only changes are examples.test.js's: debug nodes become helper
// nodes, file paths point into a temporary directory (test/support/examples.js).
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../dist/sandbox');
const { solidPng } = require('../scripts/start.js');
const { statuses, textToImage } = require('./support/node-red');
const {
  NODES,
  prepare,
  prepareWithoutDashboard,
  firstMessage,
  byName,
  messages,
  nodeErrors,
  orNodeErrors,
  silent,
} = require('./support/examples');

const TOKEN = 'examples-v2-bearer-token-83';
/** What the examples' config node is changed in, and nothing else. */
const V2_CONFIG = { graphGenConfig: { dialect: 'comfy-api-v2', authType: 'bearer' } };

const ENV = { GRAPH_GEN_URL: undefined, GRAPH_GEN_API_KEY: TOKEN };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

describe('examples on Comfy API v2: each generation example against the sandbox in v2 mode', function () {
  this.timeout(30_000);
  let sandbox;
  let dir;
  const saved = {};

  before(async () => {
    sandbox = await startSandbox({
      dialect: 'comfy-api-v2',
      v2: { token: TOKEN, keepaliveMs: 1000, throttleMs: 0 },
    });
    ENV.GRAPH_GEN_URL = sandbox.url;
    for (const [name, value] of Object.entries(ENV)) {
      saved[name] = process.env[name];
      process.env[name] = value;
    }
    await helper.startServer();
  });

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-examples-v2-'));
    fs.writeFileSync(path.join(dir, 'input.png'), solidPng(8, 8, [200, 80, 40, 255]));
    fs.writeFileSync(path.join(dir, 'mask.png'), solidPng(8, 8, [255, 255, 255, 255]));
    sandbox.events.options.autoRun = true;
    delete sandbox.events.options.concurrency;
    sandbox.v2.counters.reset();
  });

  afterEach(async () => {
    assert.strictEqual(JSON.stringify(helper.log().args).includes(TOKEN), false, 'the token is in a log');
    await helper.unload();
    for (const job of [...sandbox.jobs.jobs.values()]) {
      if (job.state === 'pending') sandbox.jobs.remove(job.id);
      if (job.state === 'in_progress') sandbox.jobs.interrupt(job.id);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  after(async () => {
    await helper.stopServer();
    await sandbox.close();
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  /** The engine's newest job (the ComfyUI behind the v2 server). */
  const newestJob = () => [...sandbox.jobs.jobs.values()].at(-1);

  it('01-text-to-image: inject -> submit -> await -> download -> file writes the image', async () => {
    const { nodes, credentials } = prepare('01-text-to-image', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const savedFile = messages(byName(nodes, 'helper', 'saved file'), 1, 15_000);
    const failures = silent(byName(nodes, 'helper', 'did not complete'));
    byName(nodes, 'inject', 'generate').receive({});
    const msg = await orNodeErrors(savedFile);
    assert.strictEqual(msg.topic, 'text to image');
    assert.ok(msg.filename.startsWith(`${dir}/`), msg.filename);
    assert.deepStrictEqual(fs.readFileSync(msg.filename).subarray(1, 4).toString(), 'PNG');
    assert.deepStrictEqual(failures, []);
    const job = newestJob();
    assert.ok(sandbox.v2.jobs.has(job.id), 'the job went through the v2 server');
    assert.strictEqual(job.prompt['6'].inputs.text, 'a lighthouse on a cliff at dawn, oil painting');
    assert.strictEqual(job.prompt['6']._meta.title, 'Positive prompt');
    // A new seed each run, told by its input's name (v2 has no node definitions), said in msg.seeds.
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
    assert.notStrictEqual(job.prompt['3'].inputs.seed, 42);
    assert.strictEqual(sandbox.v2.counters.route('GET /api/v2/assets/{id}/content'), 1);
    assert.deepStrictEqual(nodeErrors(), []);
    // The one thing a user is told: seeds are found by their inputs' names.
    const warnings = helper
      .log()
      .args.map(([entry]) => entry)
      .filter((entry) => entry && entry.level === 30 && entry.id);
    assert.deepStrictEqual(
      warnings.map((entry) => entry.type),
      ['graph-gen-submit'],
    );
    assert.match(warnings[0].msg, /offers no node definitions.*so seed inputs are told by name/);
  });

  it('02-image-to-image: reads a file, uploads it (by hash), points LoadImage at it through msg.inputs, downloads', async () => {
    const { nodes, credentials } = prepare('02-image-to-image', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const result = messages(byName(nodes, 'helper', 'result'), 1, 15_000);
    const failures = silent(byName(nodes, 'helper', 'did not complete'));
    byName(nodes, 'inject', 'start').receive({});
    const msg = await orNodeErrors(result);
    assert.ok(Buffer.isBuffer(msg.payload) && msg.payload.length > 0);
    assert.strictEqual(msg.payload.subarray(1, 4).toString(), 'PNG');
    assert.ok(msg.filename);
    assert.deepStrictEqual(failures, []);
    const job = newestJob();
    // The name the upload answered: where ComfyUI keeps the bytes under input/.
    assert.match(job.prompt['10'].inputs.image, /^graph-gen\/[0-9a-f]{16}\/input\.png$/);
    const stored = sandbox.generation.uploads.find(
      (upload) => `${upload.subfolder}/${upload.name}` === job.prompt['10'].inputs.image,
    );
    assert.ok(stored, 'ComfyUI has no input of that name');
    assert.strictEqual(job.prompt['10']._meta.title, 'Input image');
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
    // Run again: the same bytes are not sent again.
    const sent = sandbox.v2.counters.route('POST /api/v2/assets');
    const again = messages(byName(nodes, 'helper', 'result'), 1, 15_000);
    byName(nodes, 'inject', 'start').receive({});
    await orNodeErrors(again);
    assert.strictEqual(sandbox.v2.counters.route('POST /api/v2/assets'), sent);
    assert.strictEqual(newestJob().prompt['10'].inputs.image, job.prompt['10'].inputs.image);
  });

  it('03-inpainting: does not work on v2 (no mask uploads): the mask upload says so in a sentence', async () => {
    const { nodes, credentials } = prepare('03-inpainting', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const result = silent(byName(nodes, 'helper', 'result'));
    byName(nodes, 'inject', 'start').receive({});
    const mask = nodes.find((node) => node.name === 'upload mask');
    for (let waited = 0; !nodeErrors().some((line) => line.startsWith('graph-gen-upload')); waited += 20) {
      assert.ok(waited < 10_000, 'the mask upload reported nothing');
      await sleep(20);
    }
    const [line] = nodeErrors();
    assert.match(line, /Comfy API v2 has no route for mask uploads: upload the mask as an image/);
    const entry = helper
      .log()
      .args.map(([each]) => each)
      .find((each) => each && each.level === 20);
    assert.strictEqual(entry.id, mask.id);
    assert.strictEqual(sandbox.v2.counters.route('POST /api/v2/jobs'), 0);
    assert.deepStrictEqual(result, []);
  });

  it('04-live-progress-and-previews: progress, previews and the result arrive on their wires', async () => {
    const { nodes, credentials } = prepare('04-live-progress-and-previews', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const completed = messages(byName(nodes, 'helper', 'completed'), 1, 15_000);
    const previews = silent(byName(nodes, 'helper', 'preview image'));
    const steps = silent(byName(nodes, 'helper', 'step'));
    const others = silent(byName(nodes, 'helper', 'other events'));
    byName(nodes, 'inject', 'generate').receive({});
    const msg = await orNodeErrors(completed);
    assert.strictEqual(msg.payload.status, 'completed');
    assert.ok(msg.payload.files.length > 0);
    const job = sandbox.jobs.jobs.get(msg.prompt_id);
    assert.strictEqual(job.prompt['6'].inputs.text, 'a harbour at night, long exposure');
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
    await sleep(100);
    assert.ok(steps.length > 0, 'no progress step reached the step debug node');
    assert.ok(
      steps.every((step) => step.topic === 'progress' && Number.isInteger(step.payload.max)),
      'a non-progress event went to the step debug node',
    );
    assert.ok(previews.length > 0, 'no preview reached the preview debug node');
    assert.ok(
      previews.every(
        (preview) => Buffer.isBuffer(preview.payload) && /^(jpeg|png)$/.test(preview.image_type),
      ),
    );
    const topics = new Set(others.map((other) => other.topic));
    assert.ok(topics.has('execution_start') && topics.has('executed'), [...topics].join(', '));
    assert.strictEqual(sandbox.v2.counters.streams.opened, 1);
  });

  it('05-queue-control: lists the queue, cancels a submitted job by its id; the interrupt is refused in a sentence', async () => {
    const { nodes, credentials } = prepare('05-queue-control', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const listed = messages(byName(nodes, 'helper', 'queue'));
    byName(nodes, 'inject', 'list').receive({});
    const list = await orNodeErrors(listed);
    assert.ok(Array.isArray(list.payload.queue_running) && Array.isArray(list.payload.queue_pending));
    assert.ok(Array.isArray(list.running) && Array.isArray(list.pending));

    sandbox.events.options.autoRun = false; // keep the job waiting so there is something to cancel
    const cancelled = messages(byName(nodes, 'helper', 'cancelled'));
    byName(nodes, 'inject', 'submit, then cancel it').receive({});
    const cancel = await orNodeErrors(cancelled);
    assert.strictEqual(typeof cancel.prompt_id, 'string');
    assert.deepStrictEqual(cancel.removed, [cancel.prompt_id]);
    assert.strictEqual(sandbox.v2.counters.route('POST /api/v2/jobs/{id}/cancel'), 1);
    // ComfyUI dropped the waiting job and keeps nothing of it: the v2 server says `expired`.
    assert.strictEqual(sandbox.jobs.jobs.has(cancel.prompt_id), false);
    assert.strictEqual(cancel.payload[cancel.prompt_id].status, 'expired');
    assert.strictEqual(typeof cancel.seeds['3'], 'number');

    const interrupted = silent(byName(nodes, 'helper', 'interrupted'));
    byName(nodes, 'inject', 'interrupt').receive({});
    for (let waited = 0; nodeErrors().length === 0; waited += 20) {
      assert.ok(waited < 5000, 'the interrupt reported nothing');
      await sleep(20);
    }
    assert.match(
      nodeErrors()[0],
      /^graph-gen-queue: Comfy API v2 has no interrupt: cancel the job by its id/,
    );
    assert.deepStrictEqual(interrupted, []);
  });

  it('09-job-events: a job another program ran through the v2 server is saved and logged', async () => {
    const { nodes, credentials } = prepare('09-job-events', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const shown = statuses(nodes.find((node) => node.type === 'graph-gen-job-events').id);
    const saved = messages(byName(nodes, 'helper', 'saved picture'), 1, 20_000);
    for (let waited = 0; !shown.some((status) => status.text === 'watching'); waited += 10) {
      assert.ok(waited < 8000, 'the job events node did not start watching');
      await sleep(10);
    }
    // Another program submits through the same v2 server (no graph-gen key in its metadata).
    const answer = await fetch(`${sandbox.url}/api/v2/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        workflow: {
          5: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
          9: { class_type: 'SaveImage', inputs: { filename_prefix: 'elsewhere', images: ['5', 0] } },
        },
      }),
    });
    assert.strictEqual(answer.status, 201);
    const job = await answer.json();
    const msg = await orNodeErrors(saved);
    assert.strictEqual(msg.prompt_id, job.id);
    assert.strictEqual(msg.topic, 'completed');
    assert.ok(msg.filename.startsWith(path.join(dir, `${job.id}-elsewhere`)), msg.filename);
    assert.deepStrictEqual(fs.readFileSync(msg.filename).subarray(1, 4).toString(), 'PNG');
  });

  it('08-prompt-to-picture-page: the queue list cancels a job it shows or refreshes, and nothing else a browser sends', async () => {
    const { nodes, credentials } = prepareWithoutDashboard('08-prompt-to-picture-page', dir, V2_CONFIG);
    await helper.load(NODES, nodes, credentials);
    const queue = byName(nodes, 'helper', 'queue');
    const buttons = helper.getNode(nodes.find((node) => node.name === 'cancel or refresh').id);
    const listing = (accept) => orNodeErrors(firstMessage(queue, (msg) => accept(msg.payload), 15_000));

    sandbox.events.options.autoRun = false; // held in the queue, as on a busy server
    const shown = listing((rows) => rows.some((row) => row.prompt === 'a held job'));
    byName(nodes, 'function', 'form to msg.inputs').receive({
      payload: { prompt: 'a held job', negative: '', size: '99999x99999', newSeed: true },
    });
    const [held] = (await shown).payload.filter((row) => row.prompt === 'a held job');
    assert.strictEqual(held.state, 'waiting');
    const job = sandbox.jobs.jobs.get(held.id);
    assert.deepStrictEqual([job.prompt['5'].inputs.width, job.prompt['5'].inputs.height], [1024, 1024]);

    const cancels = () => sandbox.v2.counters.route('POST /api/v2/jobs/{id}/cancel');
    for (const msg of [
      { topic: 'refresh', action: 'interrupt' },
      { action: 'interrupt' },
      { prompt_id: 'a-job-the-list-does-not-show' },
      { prompt_id: [held.id] },
    ]) {
      const refreshed = listing((rows) => rows.some((row) => row.id === held.id));
      buttons.receive(msg);
      buttons.receive({ topic: 'refresh' });
      await refreshed;
    }
    assert.strictEqual(cancels(), 0, 'a browser cancelled a job the list does not show');
    const gone = listing((rows) => !rows.some((row) => row.id === held.id));
    buttons.receive({ prompt_id: held.id, action: 'interrupt' });
    await gone;
    assert.strictEqual(cancels(), 1);
    assert.deepStrictEqual(nodeErrors(), [], 'an interrupt was tried');
  });

  it("08-prompt-to-picture-page: the newest job's place in the queue under its progress, gone once it runs, then its picture", async () => {
    const { nodes, credentials } = prepareWithoutDashboard('08-prompt-to-picture-page', dir, V2_CONFIG);
    const line = () => byName(nodes, 'helper', 'queue place');
    const hidden = { payload: '', visible: false };
    const shown = (text) => ({ payload: text, visible: true });
    const only = (msg) => ({ payload: msg.payload, visible: msg.visible });
    const first = new Promise((resolve, reject) => {
      helper.load(NODES, nodes, credentials, () => {
        try {
          resolve(firstMessage(line(), () => true));
        } catch (error) {
          reject(error);
        }
      });
    });
    assert.deepStrictEqual(only(await orNodeErrors(first)), hidden);

    // A busy server: another client's job (through the same v2 server) holds its one slot.
    const other = await fetch(`${sandbox.url}/api/v2/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        workflow: { ...textToImage(), 20: { class_type: 'SandboxHang', inputs: {} } },
      }),
    });
    assert.strictEqual(other.status, 201);
    const running = await other.json();
    for (let waited = 0; sandbox.jobs.jobs.get(running.id)?.state !== 'in_progress'; waited += 20) {
      assert.ok(waited < 5000, "the other client's job did not start");
      await sleep(20);
    }
    try {
      const placed = orNodeErrors(firstMessage(line(), (msg) => msg.visible === true, 15_000));
      byName(nodes, 'function', 'form to msg.inputs').receive({
        payload: { prompt: 'a job that waits its turn', negative: '', size: '512x512', newSeed: true },
      });
      // v2 gives no run times: the place alone.
      assert.deepStrictEqual(only(await placed), shown('1 ahead'));
      const gone = orNodeErrors(firstMessage(line(), () => true, 15_000));
      const pictures = orNodeErrors(firstMessage(byName(nodes, 'helper', 'gallery'), () => true, 20_000));
      sandbox.jobs.interrupt(running.id);
      assert.deepStrictEqual(only(await gone), hidden);
      assert.strictEqual((await pictures).payload[0].prompt, 'a job that waits its turn');
    } finally {
      sandbox.jobs.interrupt(running.id);
    }
  });
});
