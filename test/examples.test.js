'use strict';
const { statuses } = require('./support/node-red');
// Every example flow under examples/ loads in Node-RED and does what its comment says, against the sandbox:
// the flows exactly as shipped (config nodes reading ${GRAPH_GEN_URL} and friends from the environment, keys
// as ${...} credentials, as the README tells a user to set them), with two test-only changes: debug nodes
// become helper nodes so the test can see what a user would see in the debug sidebar, and file paths point
// into a temporary directory.
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../dist/sandbox');
const { solidPng } = require('../scripts/start.js');
const {
  NODES,
  examples,
  prepare,
  prepareWithoutDashboard,
  otherWorkflow,
  firstMessage,
  byName,
  messages,
  orNodeErrors,
  silent,
} = require('./support/examples');

const GENERATION_KEY = 'examples-generation-key-31';
const AUTOMATION_KEY = 'examples-automation-key-47';
const WORKFLOWS = 23;

const ENV = {
  GRAPH_GEN_URL: undefined,
  GRAPH_GEN_API_KEY: GENERATION_KEY,
  AUTOMATION_URL: undefined,
  AUTOMATION_API_KEY: AUTOMATION_KEY,
};

describe('examples: every example flow runs against the sandbox', function () {
  let sandbox;
  let dir;
  const saved = {};

  before(async () => {
    sandbox = await startSandbox({
      generationApiKey: GENERATION_KEY,
      automation: { apiKey: AUTOMATION_KEY, workflows: WORKFLOWS },
    });
    ENV.GRAPH_GEN_URL = sandbox.url;
    ENV.AUTOMATION_URL = sandbox.url;
    for (const [name, value] of Object.entries(ENV)) {
      saved[name] = process.env[name];
      process.env[name] = value;
    }
    await helper.startServer();
  });

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-examples-'));
    fs.writeFileSync(path.join(dir, 'input.png'), solidPng(8, 8, [200, 80, 40, 255]));
    fs.writeFileSync(path.join(dir, 'mask.png'), solidPng(8, 8, [255, 255, 255, 255]));
    sandbox.events.options.autoRun = true;
    delete sandbox.events.options.concurrency;
  });

  afterEach(async () => {
    await helper.unload();
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

  it('ships the ten examples, each with a comment node that says what to configure', () => {
    assert.deepStrictEqual(Object.keys(examples), [
      '01-text-to-image',
      '02-image-to-image',
      '03-inpainting',
      '04-live-progress-and-previews',
      '05-queue-control',
      '06-scheduled-workflow-summary',
      '07-manual-paging',
      '08-prompt-to-picture-page',
      '09-job-events',
      '10-server-pool',
    ]);
    const used = new Set();
    for (const [name, nodes] of Object.entries(examples)) {
      const comment = nodes.find((node) => node.type === 'comment');
      assert.ok(
        comment && comment.name && comment.info.length > 80,
        `${name} has no comment node that explains it`,
      );
      const configs = nodes.filter((node) => node.type.endsWith('-config'));
      assert.ok(configs.length > 0, `${name} uses no service`);
      assert.match(
        comment.info,
        /API key|`\$\{(GRAPH_GEN|AUTOMATION)_API_KEY\}`/,
        `${name} does not say how to set the key`,
      );
      for (const config of configs) {
        assert.ok(!('credentials' in config), `${name} carries credentials`);
        // (GRAPH_GEN_URL_2: the pool example's second server.)
        assert.match(JSON.stringify(config), /\$\{(GRAPH_GEN|AUTOMATION)_URL(_2)?\}/);
      }
      nodes.forEach((node) => used.add(node.type));
    }
    for (const type of Object.keys(require('../package.json')['node-red'].nodes)) {
      assert.ok(used.has(type), `no example uses ${type}`);
    }
  });

  it('10-server-pool: every generation node goes through one pool of two servers, A and B, soonest first', () => {
    // Run end to end against two sandboxes by test/examples-pool.test.js (it needs the graph-gen-pool node).
    const nodes = examples['10-server-pool'];
    const pools = nodes.filter((node) => node.type === 'graph-gen-pool');
    assert.strictEqual(pools.length, 1);
    const [pool] = pools;
    assert.strictEqual(pool.name, 'two servers');
    assert.strictEqual(pool.strategy, 'soonest');
    const config = (id) => nodes.find((node) => node.id === id && node.type === 'graph-gen-config');
    assert.deepStrictEqual(
      [config(pool.server1)?.name, config(pool.server2)?.name],
      ['server A', 'server B'],
      'the pool has not server A and server B of this example as its members',
    );
    for (const slot of [3, 4, 5, 6, 7, 8]) assert.strictEqual(pool[`server${slot}`], '');
    assert.strictEqual(config(pool.server1).baseUrl, '${GRAPH_GEN_URL}');
    assert.strictEqual(config(pool.server2).baseUrl, '${GRAPH_GEN_URL_2}');
    const flowNodes = nodes.filter((node) => node.type.startsWith('graph-gen-') && node.z);
    assert.deepStrictEqual(flowNodes.map((node) => node.type).sort(), [
      'graph-gen-await-job',
      'graph-gen-download',
      'graph-gen-submit',
    ]);
    for (const node of flowNodes) {
      assert.strictEqual(node.pool, pool.id, `${node.type} does not go through the pool`);
      assert.strictEqual(node.server, pool.server1);
    }
    // The same workflow as the text-to-image example's, and a debug node that names each job's server.
    const submit = (name) => examples[name].find((node) => node.type === 'graph-gen-submit');
    assert.strictEqual(submit('10-server-pool').workflow, submit('01-text-to-image').workflow);
    const ranOn = nodes.find((node) => node.type === 'debug' && node.name === 'ran on');
    assert.strictEqual(ranOn.complete, 'server.name');
    assert.match(nodes.find((node) => node.type === 'comment').info, /soonest[\s\S]*msg\.server/);
  });

  it('01-text-to-image: inject -> submit -> await -> download -> file writes the image', async () => {
    const { nodes, credentials } = prepare('01-text-to-image', dir);
    await helper.load(NODES, nodes, credentials);
    const savedFile = messages(byName(nodes, 'helper', 'saved file'));
    const failures = silent(byName(nodes, 'helper', 'did not complete'));
    byName(nodes, 'inject', 'generate').receive({});
    const msg = await orNodeErrors(savedFile);
    assert.strictEqual(msg.topic, 'text to image');
    assert.ok(msg.filename.startsWith(`${dir}/`), msg.filename);
    const written = fs.readFileSync(msg.filename);
    assert.deepStrictEqual(
      written.subarray(1, 4).toString(),
      'PNG',
      'the saved file is not the PNG the service made',
    );
    assert.deepStrictEqual(failures, []);
    // The prompt text came from msg.inputs by the node's title, on a copy of the node's workflow.
    const job = [...sandbox.jobs.jobs.values()].at(-1);
    assert.strictEqual(job.prompt['6'].inputs.text, 'a lighthouse on a cliff at dawn, oil painting');
    assert.strictEqual(job.prompt['6']._meta.title, 'Positive prompt');
    assert.strictEqual(job.prompt['9'].class_type, 'SaveImage');
    // A new seed each run, said in msg.seeds; the node's workflow keeps its 42.
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
    assert.notStrictEqual(job.prompt['3'].inputs.seed, 42);
    const submit = nodes.find((node) => node.type === 'graph-gen-submit');
    assert.strictEqual(JSON.parse(submit.workflow)['3'].inputs.seed, 42);
    assert.strictEqual(submit.newSeed, true);
  });

  it('02-image-to-image: reads a file, uploads it, points LoadImage at it through msg.inputs, downloads', async () => {
    const { nodes, credentials } = prepare('02-image-to-image', dir);
    await helper.load(NODES, nodes, credentials);
    const result = messages(byName(nodes, 'helper', 'result'));
    byName(nodes, 'inject', 'start').receive({});
    const msg = await orNodeErrors(result);
    assert.ok(Buffer.isBuffer(msg.payload) && msg.payload.length > 0);
    assert.ok(msg.filename);
    const job = [...sandbox.jobs.jobs.values()].at(-1);
    assert.strictEqual(job.prompt['10'].inputs.image, 'input.png');
    assert.strictEqual(job.prompt['10']._meta.title, 'Input image');
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
    assert.ok(sandbox.counters.count('/api/upload/image', 'POST') >= 1);
  });

  it('03-inpainting: uploads the image, then the mask with original_ref, and repaints', async () => {
    const { nodes, credentials } = prepare('03-inpainting', dir);
    await helper.load(NODES, nodes, credentials);
    const masks = sandbox.counters.count('/api/upload/mask', 'POST');
    const result = messages(byName(nodes, 'helper', 'result'));
    const failures = silent(byName(nodes, 'helper', 'did not complete'));
    byName(nodes, 'inject', 'start').receive({});
    const msg = await orNodeErrors(result);
    assert.ok(Buffer.isBuffer(msg.payload));
    assert.deepStrictEqual(failures, []);
    assert.strictEqual(sandbox.counters.count('/api/upload/mask', 'POST'), masks + 1);
    const job = [...sandbox.jobs.jobs.values()].at(-1);
    assert.strictEqual(job.prompt['10'].inputs.image, 'clipspace/mask.png [input]');
    assert.strictEqual(job.prompt['11'].class_type, 'VAEEncodeForInpaint');
    assert.deepStrictEqual(msg.seeds, { 3: job.prompt['3'].inputs.seed });
  });

  it('04-live-progress-and-previews: progress, previews and the result arrive on their wires', async () => {
    const { nodes, credentials } = prepare('04-live-progress-and-previews', dir);
    await helper.load(NODES, nodes, credentials);
    const completed = messages(byName(nodes, 'helper', 'completed'));
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
    await new Promise((resolve) => setTimeout(resolve, 100));
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
    assert.ok(topics.has('executing') && topics.has('executed'), [...topics].join(', '));
  });

  it('05-queue-control: lists the queue, cancels a submitted job by its id, interrupts', async () => {
    const { nodes, credentials } = prepare('05-queue-control', dir);
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
    assert.strictEqual(sandbox.jobs.jobs.get(cancel.prompt_id).state, 'cancelled');
    assert.strictEqual(sandbox.jobs.jobs.get(cancel.prompt_id).prompt['6'].inputs.text, 'a job to cancel');
    assert.strictEqual(typeof cancel.seeds['3'], 'number');

    const interrupted = messages(byName(nodes, 'helper', 'interrupted'));
    const before = sandbox.counters.count('/api/interrupt', 'POST');
    byName(nodes, 'inject', 'interrupt').receive({});
    await interrupted;
    assert.strictEqual(sandbox.counters.count('/api/interrupt', 'POST'), before + 1);
  });

  it('06-scheduled-workflow-summary: runs on a weekday cron and summarises every active workflow', async () => {
    const { nodes, credentials } = prepare('06-scheduled-workflow-summary', dir);
    const cron = nodes.find((node) => node.type === 'inject');
    assert.strictEqual(cron.crontab, '00 08 * * 1,2,3,4,5');
    await helper.load(NODES, nodes, credentials);
    const summary = messages(byName(nodes, 'helper', 'summary'));
    byName(nodes, 'inject', 'weekdays 08:00').receive({});
    const msg = await orNodeErrors(summary);
    const response = await fetch(`${sandbox.url}/api/v1/workflows?active=true&limit=250`, {
      headers: { 'X-AUTOMATION-API-KEY': AUTOMATION_KEY },
    });
    const active = (await response.json()).data.length;
    assert.ok(active > 0 && active < WORKFLOWS);
    assert.strictEqual(msg.payload.active, active);
    assert.strictEqual(msg.payload.names.length, active);
    const requests = sandbox.counters.matching(/\/workflows$/).slice(-1)[0];
    assert.strictEqual(requests.query.get('active'), 'true');
  });

  it('07-manual-paging: loops page mode on msg.nextCursor, one message per page, and stops', async () => {
    const { nodes, credentials } = prepare('07-manual-paging', dir);
    await helper.load(NODES, nodes, credentials);
    const pages = messages(byName(nodes, 'helper', 'page'), 3);
    byName(nodes, 'inject', 'first page').receive({});
    const got = await orNodeErrors(pages);
    assert.deepStrictEqual(
      got.map((page) => page.payload.length),
      [10, 10, WORKFLOWS - 20],
    );
    assert.strictEqual(got[2].nextCursor, undefined);
    const ids = got.flatMap((page) => page.payload.map((workflow) => workflow.id));
    assert.strictEqual(new Set(ids).size, WORKFLOWS);
    const more = silent(byName(nodes, 'helper', 'page'));
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepStrictEqual(more, [], 'the loop did not stop after the last page');
  });
  it('09-job-events: a job another program ran is saved and logged', async () => {
    const { nodes, credentials } = prepare('09-job-events', dir);
    await helper.load(NODES, nodes, credentials);
    const shown = statuses(nodes.find((node) => node.type === 'graph-gen-job-events').id);
    const saved = messages(byName(nodes, 'helper', 'saved picture'));
    // It tells what happens once it watches (its first read of the server).
    for (let waited = 0; !shown.some((status) => status.text === 'watching'); waited += 10) {
      assert.ok(waited < 8000, 'the job events node did not start watching');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    // Submitted by someone else with the same key (the cloud sends every socket of the key its events).
    const job = sandbox.jobs.submit(
      {
        5: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
        9: { class_type: 'SaveImage', inputs: { filename_prefix: 'elsewhere', images: ['5', 0] } },
      },
      'another-program',
    );
    const msg = await orNodeErrors(saved);
    assert.strictEqual(msg.prompt_id, job.id);
    assert.strictEqual(msg.topic, 'completed');
    assert.strictEqual(msg.filename, path.join(dir, `${job.id}-${job.outputs['9'].images[0].filename}`));
    assert.deepStrictEqual(fs.readFileSync(msg.filename).subarray(1, 4).toString(), 'PNG');
  });

  it('08-prompt-to-picture-page: the queue list cancels a job it shows or refreshes, and nothing else a browser sends', async () => {
    const { nodes, credentials } = prepareWithoutDashboard('08-prompt-to-picture-page', dir);
    await helper.load(NODES, nodes, credentials);
    const queue = byName(nodes, 'helper', 'queue');
    // Where the queue list's buttons send to (whatever node the example has there).
    const buttons = helper.getNode(nodes.find((node) => node.name === 'cancel or refresh').id);
    const listing = (accept) => orNodeErrors(firstMessage(queue, (msg) => accept(msg.payload)));

    sandbox.events.options.autoRun = false; // held in the queue, as on a busy server
    const shown = listing((rows) => rows.some((row) => row.prompt === 'a held job'));
    byName(nodes, 'function', 'form to msg.inputs').receive({
      payload: { prompt: 'a held job', negative: '', size: '99999x99999', newSeed: true },
    });
    const [held] = (await shown).payload.filter((row) => row.prompt === 'a held job');
    assert.strictEqual(held.state, 'waiting');
    const job = sandbox.jobs.jobs.get(held.id);
    // Only the form's sizes: anything else a browser sends is the first one.
    assert.deepStrictEqual([job.prompt['5'].inputs.width, job.prompt['5'].inputs.height], [1024, 1024]);

    const interruptsBefore = sandbox.counters.count('/api/interrupt', 'POST');
    const cancelsBefore = sandbox.counters.count('/api/queue', 'POST');
    const interrupts = () => sandbox.counters.count('/api/interrupt', 'POST') - interruptsBefore;
    const cancels = () => sandbox.counters.count('/api/queue', 'POST') - cancelsBefore;
    // What a visitor could send from the page's socket: other actions, other ids, ids in bulk.
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
    assert.strictEqual(interrupts(), 0, 'a browser interrupted the service');
    assert.strictEqual(cancels(), 0, 'a browser cancelled a job the list does not show');
    // The cancel button of a listed job: that job cancelled, and only that, whatever else the msg says.
    const gone = listing((rows) => !rows.some((row) => row.id === held.id));
    buttons.receive({ prompt_id: held.id, action: 'interrupt' });
    await gone;
    assert.strictEqual(sandbox.jobs.jobs.get(held.id).state, 'cancelled');
    assert.strictEqual(cancels(), 1);
    assert.strictEqual(interrupts(), 0);
  });

  it("08-prompt-to-picture-page: the newest job's place in the queue under its progress, with the estimate where the server has one, gone once it runs", async () => {
    const { nodes, credentials } = prepareWithoutDashboard('08-prompt-to-picture-page', dir);
    const line = () => byName(nodes, 'helper', 'queue place');
    const hidden = { payload: '', visible: false };
    const shown = (text) => ({ payload: text, visible: true });
    const only = (msg) => ({ payload: msg.payload, visible: msg.visible });
    // On deploy: no line (the widget takes no room on the page).
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

    // A busy server (one job at a time, another client's holding it) that reports no run times (a cloud
    // service): the place alone, then gone when the job starts; the job runs to its picture.
    sandbox.events.options.concurrency = 1;
    const running = sandbox.jobs.submit(
      otherWorkflow({ 9: { class_type: 'SandboxHang', inputs: {} } }),
      'other',
    );
    try {
      const placed = orNodeErrors(firstMessage(line(), (msg) => msg.visible === true));
      byName(nodes, 'function', 'form to msg.inputs').receive({
        payload: { prompt: 'a job that waits its turn', negative: '', size: '512x512', newSeed: true },
      });
      assert.deepStrictEqual(only(await placed), shown('1 ahead'));
      const gone = orNodeErrors(firstMessage(line(), () => true));
      const pictures = orNodeErrors(firstMessage(byName(nodes, 'helper', 'gallery'), () => true, 15000));
      sandbox.jobs.interrupt(running.id);
      assert.deepStrictEqual(only(await gone), hidden);
      assert.strictEqual((await pictures).payload[0].prompt, 'a job that waits its turn');
    } finally {
      sandbox.jobs.interrupt(running.id);
    }

    // What await job's progress output sends while a job waits, with or without an estimate (seconds).
    const place = byName(nodes, 'function', 'queue place');
    place.context().flow.set('currentJob', 'newest-job');
    const next = () => orNodeErrors(firstMessage(line(), () => true, 2000));
    const cases = [
      [{ ahead: 2, eta_s: 40 }, shown('2 ahead, about 40 s (an estimate)')],
      [{ ahead: 2 }, shown('2 ahead')],
      [{ ahead: 3, eta_s: 150 }, shown('3 ahead, about 3 min (an estimate)')],
      [{ ahead: 1, eta_s: 0 }, shown('1 ahead, about 1 s (an estimate)')],
      [{ ahead: 0, eta_s: 0 }, shown('next in line')],
    ];
    for (const [payload, expected] of cases) {
      const got = next();
      place.receive({ topic: 'queue', payload, prompt_id: 'newest-job' });
      assert.deepStrictEqual(only(await got), expected, JSON.stringify(payload));
    }
    // An older job's place is not the page's; the newest one's start hides the line, once.
    const seen = silent(line());
    place.receive({ topic: 'queue', payload: { ahead: 1 }, prompt_id: 'older-job' });
    place.receive({ topic: 'execution_start', payload: {}, prompt_id: 'older-job' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepStrictEqual(seen, []);
    place.receive({ topic: 'execution_start', payload: {}, prompt_id: 'newest-job' });
    place.receive({ topic: 'progress', payload: { value: 1, max: 3 }, prompt_id: 'newest-job' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepStrictEqual(seen.map(only), [hidden]);
    // Its result hides it too, also when the visitor's prompt (a result's msg.topic) reads "queue".
    place.receive({ topic: 'queue', payload: { ahead: 1, eta_s: 5 }, prompt_id: 'newest-job' });
    const result = { prompt_id: 'newest-job', status: 'cancelled' };
    place.receive({ topic: 'queue', payload: result, prompt_id: 'newest-job' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepStrictEqual(seen.map(only), [hidden, shown('1 ahead, about 5 s (an estimate)'), hidden]);
  });

  it("08-prompt-to-picture-page: a visitor's form starts with the form's first size, sent to that visitor's browser only", async () => {
    const { nodes, credentials } = prepareWithoutDashboard('08-prompt-to-picture-page', dir);
    await helper.load(NODES, nodes, credentials);
    const form = byName(nodes, 'helper', 'picture form');
    const pageView = byName(nodes, 'helper', 'page view');
    const [firstSize] = examples['08-prompt-to-picture-page'].find(
      (node) => node.type === 'ui-form',
    ).dropdownOptions;
    const seen = silent(form);
    // Not to every visitor (a msg without _client goes to every open page), and only when a page opens.
    pageView.send({ topic: '$pageview', payload: { page: { name: 'Prompt to picture' } } });
    pageView.send({ topic: '$pageleave', payload: {}, _client: { socketId: 'visitor-1' } });
    const got = orNodeErrors(firstMessage(form, () => true));
    pageView.send({
      topic: '$pageview',
      payload: { page: { name: 'Prompt to picture' }, query: { size: '99999x99999' } },
      _client: { socketId: 'visitor-2', socketIp: '127.0.0.1' },
    });
    const msg = await got;
    // (As JSON: the function's objects are of another realm.)
    assert.deepStrictEqual(JSON.parse(JSON.stringify({ payload: msg.payload, _client: msg._client })), {
      payload: { size: firstSize.value },
      _client: { socketId: 'visitor-2' },
    });
    assert.strictEqual(firstSize.value, '1024x1024');
    assert.strictEqual(seen.length, 1);
  });
});
