'use strict';
// The job-events node on Comfy API v2 (the sandbox's v2 mode, as comfy-api-proxy answers), in a real Node-RED
// runtime: the same msgs as on today's API for jobs of this flow and of another client (a direct POST to
// /api/v2/jobs), each step once; failed and cancelled jobs as such; a list that cannot be read tells nothing and
// concludes nothing; a restart tells nothing twice; the newest-100 window of the v2 list; and await-job's
// "resume after a restart" on v2.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { JobEvents } = require('../../dist/generation/jobs/job-events');
const {
  V2JobWatch,
  SUBMIT_ANSWER_GRACE_MS,
} = require('../../dist/generation/dialects/comfy-api-v2/v2-job-watch');
const { sleep, until, collect, statuses } = require('../support/sockets');
const { textToImage } = require('../support/node-red');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-job-events.js'),
  require('../../dist/nodes/graph-gen-submit.js'),
  require('../../dist/nodes/graph-gen-await-job.js'),
];
const TOKEN = 'v2-job-events-token-Hq2';
const AUTH = { authorization: `Bearer ${TOKEN}` };
const ALL_EVENTS = 'queued,started,completed,failed,cancelled';
/** How often the node looks in these tests. */
const POLL_MS = 100;

function configNode(sandbox) {
  return {
    id: 'cfg',
    type: 'graph-gen-config',
    baseUrl: sandbox.url,
    dialect: 'comfy-api-v2',
    authType: 'bearer',
    partnerKeyField: 'api_key_service_org',
  };
}

function flow(sandbox, props = {}, extra = []) {
  return [
    { id: 'f1', type: 'tab' },
    configNode(sandbox),
    {
      id: 'events',
      z: 'f1',
      type: 'graph-gen-job-events',
      server: 'cfg',
      events: ALL_EVENTS,
      clients: 'all',
      wires: [['out']],
      ...props,
    },
    { id: 'out', z: 'f1', type: 'helper' },
    ...extra,
  ];
}

const CREDENTIALS = { cfg: { apiKey: TOKEN } };

/** A submit node of this flow (its msgs go to helper `submitted`). */
const SUBMIT = [
  { id: 'submit', z: 'f1', type: 'graph-gen-submit', server: 'cfg', wires: [['submitted']] },
  { id: 'submitted', z: 'f1', type: 'helper' },
];

/** An await-job node (outputs: done, failed) for comparing its result with the event's. */
const AWAIT = [
  {
    id: 'await',
    z: 'f1',
    type: 'graph-gen-await-job',
    server: 'cfg',
    timeout: '0',
    timeoutType: 'num',
    cancelOnTimeout: false,
    progress: false,
    wires: [['done'], ['failed'], []],
  },
  { id: 'done', z: 'f1', type: 'helper' },
  { id: 'failed', z: 'f1', type: 'helper' },
];

async function submitHere() {
  const submitted = collect('submitted');
  helper.getNode('submit').receive({ payload: textToImage() });
  return (await submitted.next()).prompt_id;
}

/** Loads the flow and waits until the node watches (its first look done); resolves to its msgs. */
async function start(flowNodes) {
  await helper.load(NODES, flowNodes, CREDENTIALS);
  const out = collect('out');
  const seen = statuses('events');
  await until(() => seen.some((status) => status.text === 'watching'), 'the node to watch');
  return { out, seen };
}

/** A request to the sandbox's v2 routes as another client makes it: its own HTTP, the bearer token. */
async function call(sandbox, method, route, body) {
  const init = { method, headers: { ...AUTH } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['content-type'] = 'application/json';
  }
  const answer = await fetch(`${sandbox.url}${route}`, init);
  return { status: answer.status, json: await answer.json() };
}

/** Submits as another client does (`POST /api/v2/jobs`); resolves to the job id. */
async function submitAsOther(sandbox, workflow = textToImage(), extra = {}) {
  const answer = await call(sandbox, 'POST', '/api/v2/jobs', { workflow, ...extra });
  assert.equal(answer.status, 201, JSON.stringify(answer.json));
  return answer.json.id;
}

function topicsOf(out, id) {
  return out.received.filter((msg) => msg.prompt_id === id).map((msg) => msg.topic);
}

function toldOf(out, id, topic) {
  return until(() => topicsOf(out, id).includes(topic), `${topic} of ${id}`);
}

/** Several looks go by: whatever a look could still tell has been told. */
const looksPass = () => sleep(POLL_MS * 6);

function warnings() {
  return helper
    .log()
    .args.map(([entry]) => entry)
    .filter((entry) => entry && entry.level === 30 && entry.type === 'graph-gen-job-events')
    .map((entry) => String(entry.msg));
}

/** List requests, answered by the proxy or by an injected fault. */
const listReads = (sandbox) => sandbox.counters.count('/api/v2/jobs', 'GET');
const engineJob = (sandbox, id) => sandbox.jobs.jobs.get(id);
const ended = (sandbox, id) =>
  until(() => ['completed', 'failed', 'cancelled'].includes(engineJob(sandbox, id)?.state), `${id} to end`);

const failing = () => ({
  ...textToImage(),
  20: { class_type: 'SandboxFail', inputs: { exception_type: 'OOMError', message: 'out of memory' } },
});
const hanging = () => ({ ...textToImage(), 20: { class_type: 'SandboxHang', inputs: {} } });

describe('job events on Comfy API v2', function () {
  this.timeout(20_000);
  let savedEvents;
  let savedReads;
  let sandbox;

  before(async () => {
    savedEvents = JobEvents.defaultTimings;
    JobEvents.defaultTimings = {
      ...savedEvents,
      settleMs: 20,
      pollMs: 300,
      retryMs: 100,
      retryMaxMs: 300,
      unannouncedPollMs: POLL_MS,
    };
    savedReads = V2JobWatch.defaultReads;
    await helper.startServer();
  });

  after(async () => {
    JobEvents.defaultTimings = savedEvents;
    await helper.stopServer();
  });

  beforeEach(async () => {
    sandbox = await startSandbox({ dialect: 'comfy-api-v2', v2: { token: TOKEN } });
  });

  afterEach(async () => {
    V2JobWatch.defaultReads = savedReads;
    await helper.unload();
    await sandbox.close();
  });

  it("tells each step of another client's job once, in order, with the result await-job gives", async () => {
    const { out, seen } = await start(flow(sandbox, {}, AWAIT));
    sandbox.events.options.autoRun = false;
    const id = await submitAsOther(sandbox);
    await toldOf(out, id, 'queued');
    sandbox.events.options.autoRun = true;
    sandbox.events.run(id);
    await toldOf(out, id, 'completed');
    await looksPass();
    assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
    const queued = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'queued');
    assert.deepEqual(queued.payload, { prompt_id: id, status: 'queued' });

    const told = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'completed');
    const done = collect('done');
    helper.getNode('await').receive({ prompt_id: id });
    const awaited = (await done.next()).payload;
    assert.deepEqual(told.payload, awaited, 'the result await-job gives');
    assert.equal(told.payload.status, 'completed');
    const names = told.payload.files.map((file) => file.filename);
    assert.deepEqual(
      names,
      engineJob(sandbox, id).outputs['9'].images.map((file) => file.filename),
    );
    assert.ok(
      told.payload.files.every((file) => typeof file.asset_id === 'string'),
      'downloadable by asset id',
    );
    assert.equal(seen.at(-1).text, 'watching', 'polling is how v2 is watched: no "no socket" status');
    assert.deepEqual(warnings(), []);
  });

  it('tells the jobs of this flow too', async () => {
    const { out } = await start(flow(sandbox, {}, SUBMIT));
    const id = await submitHere();
    await toldOf(out, id, 'completed');
    await looksPass();
    assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
  });

  it('tells how jobs failed and were cancelled: an error, a cancelled run, a job cancelled while it waited', async () => {
    const { out } = await start(flow(sandbox));
    const failed = await submitAsOther(sandbox, failing());
    await toldOf(out, failed, 'failed');
    const told = out.received.find((msg) => msg.prompt_id === failed && msg.topic === 'failed');
    assert.equal(told.payload.status, 'failed');
    assert.equal(told.payload.error.exception_type, 'SandboxFail');
    assert.equal(told.payload.error.exception_message, 'out of memory');

    const running = await submitAsOther(sandbox, hanging());
    const waiting = await submitAsOther(sandbox);
    await toldOf(out, running, 'started');
    await toldOf(out, waiting, 'queued');
    // v2 cancels each job by its id: a waiting one leaves the queue (the proxy then calls it expired), a
    // running one stops at its next step (canceling, then canceled).
    assert.equal((await call(sandbox, 'POST', `/api/v2/jobs/${waiting}/cancel`)).json.status, 'expired');
    assert.equal((await call(sandbox, 'POST', `/api/v2/jobs/${running}/cancel`)).json.status, 'canceling');
    await toldOf(out, running, 'cancelled');
    await toldOf(out, waiting, 'cancelled');
    await looksPass();
    assert.deepEqual(topicsOf(out, failed), ['queued', 'started', 'failed']);
    assert.deepEqual(topicsOf(out, running), ['queued', 'started', 'cancelled']);
    assert.deepEqual(topicsOf(out, waiting), ['queued', 'cancelled'], 'it never started');
    const cancelled = out.received.find((msg) => msg.prompt_id === waiting && msg.topic === 'cancelled');
    assert.deepEqual(cancelled.payload, { prompt_id: waiting, status: 'cancelled' });
  });

  it('a job that was running when ComfyUI forgot it (restarted) is told failed, lost', async () => {
    const { out } = await start(flow(sandbox));
    const id = await submitAsOther(sandbox, hanging());
    await toldOf(out, id, 'started');
    assert.equal(sandbox.v2.faults.forgetJob(id), true);
    await toldOf(out, id, 'failed');
    const told = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'failed');
    assert.equal(told.payload.error.exception_type, 'JobLost');
    assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'failed']);
  });

  it("with only others' jobs, leaves out this config node's own; another graph-gen's is told after a moment", async () => {
    const { out } = await start(flow(sandbox, { clients: 'others' }, SUBMIT));
    const ours = await submitHere();
    const theirs = await submitAsOther(sandbox);
    // Another Node-RED's graph-gen writes the same metadata: it may be ours whose answer is on its way, so it
    // is decided a moment later, then told each step in order.
    const otherGraphGen = await submitAsOther(sandbox, textToImage(), { metadata: 'graph-gen:another-key' });
    // One with this config node's client id in its metadata (submitted before a restart, say): ours, at once.
    const clientId = helper.getNode('cfg').connection.clientId;
    const oursBefore = await submitAsOther(sandbox, textToImage(), { metadata: `graph-gen:${clientId}:k` });
    const firstMet = Date.now();
    await toldOf(out, theirs, 'completed');
    await toldOf(out, otherGraphGen, 'completed');
    assert.ok(Date.now() - firstMet >= SUBMIT_ANSWER_GRACE_MS - 200, 'decided after the grace');
    await ended(sandbox, ours);
    await looksPass();
    assert.deepEqual(topicsOf(out, theirs), ['queued', 'started', 'completed']);
    assert.deepEqual(topicsOf(out, otherGraphGen), ['queued', 'started', 'completed']);
    assert.deepEqual(topicsOf(out, ours), []);
    await ended(sandbox, oursBefore);
    await looksPass();
    assert.deepEqual(topicsOf(out, oursBefore), []);
  });

  for (const [trouble, makeFault] of [
    [
      'fails (503)',
      (sb) => sb.faults.add({ path: '/api/v2/jobs', method: 'GET', status: 503, times: Infinity }),
    ],
    [
      'is not a list of jobs',
      (sb) =>
        sb.faults.add({
          path: '/api/v2/jobs',
          method: 'GET',
          status: 200,
          body: { jobs: 'none', truncated: false },
          times: Infinity,
        }),
    ],
    ['fails as ComfyUI cannot be reached', (sb) => (sb.v2.faults.upstreamReachable = false)],
  ]) {
    it(`a job list that ${trouble} tells nothing and concludes nothing; once read, each step is told once`, async () => {
      const { out, seen } = await start(flow(sandbox));
      sandbox.events.options.autoRun = false;
      const id = await submitAsOther(sandbox);
      await toldOf(out, id, 'queued');
      makeFault(sandbox);
      const reads = listReads(sandbox);
      sandbox.events.options.autoRun = true;
      sandbox.events.run(id);
      await ended(sandbox, id);
      await until(() => seen.some((status) => status.text === 'jobs unreadable'), 'the status to say so');
      await until(() => warnings().some((text) => /cannot be read/.test(text)), 'a warning');
      await until(() => listReads(sandbox) >= reads + 3, 'looks that fail');
      assert.deepEqual(topicsOf(out, id), ['queued'], 'nothing told while the list cannot be read');
      sandbox.faults.clear();
      sandbox.v2.faults.clear();
      await toldOf(out, id, 'completed');
      await looksPass();
      assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
      assert.equal(seen.at(-1).text, 'watching');
      assert.equal(warnings().filter((text) => /cannot be read/.test(text)).length, 1, 'warned once');
    });
  }

  it('after a restart tells no job twice, and once each job that ended while Node-RED was down', async () => {
    const nodes = flow(sandbox);
    let { out } = await start(nodes);
    const before = await submitAsOther(sandbox);
    await toldOf(out, before, 'completed');
    sandbox.events.options.autoRun = false;
    const waiting = await submitAsOther(sandbox);
    await toldOf(out, waiting, 'queued');
    await looksPass();
    await helper.unload();

    // While Node-RED is down: the waiting job runs, another comes and ends, a third is left waiting.
    sandbox.events.options.autoRun = true;
    sandbox.events.run(waiting);
    const whileDown = await submitAsOther(sandbox);
    await ended(sandbox, whileDown);
    await ended(sandbox, waiting);
    sandbox.events.options.autoRun = false;
    const stillWaiting = await submitAsOther(sandbox);

    ({ out } = await start(nodes));
    await toldOf(out, waiting, 'completed');
    await toldOf(out, whileDown, 'completed');
    await toldOf(out, stillWaiting, 'queued');
    await looksPass();
    assert.deepEqual(topicsOf(out, before), [], 'told before the restart');
    assert.deepEqual(topicsOf(out, waiting), ['completed']);
    assert.deepEqual(topicsOf(out, whileDown), ['completed']);
    assert.deepEqual(topicsOf(out, stillWaiting), ['queued']);
    const done = out.received.find((msg) => msg.prompt_id === whileDown);
    assert.equal(done.payload.files.length, 1, 'with its files');

    // And from then on, as ever.
    sandbox.events.run(stillWaiting);
    await toldOf(out, stillWaiting, 'completed');
    await looksPass();
    assert.deepEqual(topicsOf(out, stillWaiting), ['queued', 'started', 'completed']);
  });

  it('tells nothing of what the server held when the node first started, only what happens after', async () => {
    const old = await submitAsOther(sandbox);
    await ended(sandbox, old);
    sandbox.events.options.autoRun = false;
    const waiting = await submitAsOther(sandbox);
    const { out } = await start(flow(sandbox));
    await looksPass();
    sandbox.events.options.autoRun = true;
    sandbox.events.run(waiting);
    await toldOf(out, waiting, 'completed');
    await looksPass();
    assert.deepEqual(topicsOf(out, old), []);
    assert.deepEqual(topicsOf(out, waiting), ['started', 'completed']);
  });

  it('the newest jobs only: a look widens its read to reach the last one, more than the list holds are said lost, a job seen before is read by its id', async () => {
    V2JobWatch.defaultReads = { firstJobs: 2, mostJobs: 5 };
    const { out } = await start(flow(sandbox));
    const listFails = () =>
      sandbox.faults.add({ path: '/api/v2/jobs', method: 'GET', status: 503, times: Infinity });
    const unfail = async () => {
      sandbox.faults.clear();
    };

    // Four jobs end between two looks: more than the first read holds, so the look reads the newest five.
    listFails();
    const four = [];
    for (let n = 0; n < 4; n++) four.push(await submitAsOther(sandbox));
    for (const id of four) await ended(sandbox, id);
    await unfail();
    await until(() => four.every((id) => topicsOf(out, id).includes('completed')), 'all four told');
    for (const id of four) assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
    assert.deepEqual(warnings(), []);

    // Seven: the list shows the newest five; the two oldest are never seen, and a warning says so.
    listFails();
    const seven = [];
    for (let n = 0; n < 7; n++) seven.push(await submitAsOther(sandbox));
    for (const id of seven) await ended(sandbox, id);
    await unfail();
    await until(() => seven.slice(2).every((id) => topicsOf(out, id).includes('completed')), 'five told');
    await until(() => warnings().some((text) => /more than 5 jobs were submitted/.test(text)), 'a warning');
    await looksPass();
    assert.deepEqual(topicsOf(out, seven[0]), []);
    assert.deepEqual(topicsOf(out, seven[1]), []);

    // A job told waiting falls out of the window behind five newer ones, and ends there: read by its id.
    sandbox.events.options.autoRun = false;
    const first = await submitAsOther(sandbox);
    await toldOf(out, first, 'queued');
    const newer = [];
    for (let n = 0; n < 5; n++) newer.push(await submitAsOther(sandbox));
    await until(() => newer.every((id) => topicsOf(out, id).includes('queued')), 'five newer waiting');
    const byId = sandbox.v2.counters.job(first);
    sandbox.events.options.autoRun = true;
    sandbox.events.run(first);
    await ended(sandbox, first);
    await toldOf(out, first, 'completed');
    assert.ok(sandbox.v2.counters.job(first) > byId, 'read by its id');
    assert.deepEqual(topicsOf(out, first), ['queued', 'started', 'completed']);
    for (const id of newer) sandbox.events.run(id);
    await until(() => newer.every((id) => topicsOf(out, id).includes('completed')), 'the newer ones told');
  });

  it('removed from the flows, forgets what it told and reads the server no more', async () => {
    const { out } = await start(flow(sandbox));
    const id = await submitAsOther(sandbox);
    await toldOf(out, id, 'completed');
    const file = path.join(helper.settings().userDir, 'graph-gen', 'job-events-events.jsonl');
    await until(() => fs.existsSync(file), 'the memory to be written');
    await helper.setFlows(
      flow(sandbox).filter((node) => node.id !== 'events' && node.id !== 'out'),
      'nodes',
    );
    assert.equal(fs.existsSync(file), false);
    const reads = listReads(sandbox);
    await sleep(POLL_MS * 5);
    assert.equal(listReads(sandbox), reads, 'no look after it went');
  });

  it('says unauthorized when the proxy refuses the token', async () => {
    await helper.load(NODES, flow(sandbox), { cfg: { apiKey: 'not-the-token' } });
    const seen = statuses('events');
    await until(() => seen.some((status) => status.text === 'unauthorized'), 'the status to say so');
    assert.equal(seen.at(-1).fill, 'red');
    assert.ok(warnings().every((text) => !text.includes(TOKEN) && !text.includes('not-the-token')));
  });
});

describe('await-job resumes after a restart on Comfy API v2', function () {
  this.timeout(20_000);
  const catchNode = require('../support/node-red').coreNode('common/25-catch.js');
  const AWAIT_NODES = [NODES[0], NODES[3], catchNode];
  let sandbox;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  beforeEach(async () => {
    sandbox = await startSandbox({
      dialect: 'comfy-api-v2',
      v2: { token: TOKEN },
      events: { autoRun: false, stepDelayMs: 1 },
    });
  });
  afterEach(async () => {
    await helper.unload();
    await sandbox.close();
  });

  const userDir = () => helper._settings?.userDir ?? helper._RED.settings.userDir;
  const keptFile = () => path.join(userDir(), 'graph-gen', 'await-job-await.jsonl');
  const load = () =>
    helper.load(
      AWAIT_NODES,
      [
        { id: 'f1', type: 'tab' },
        configNode(sandbox),
        { ...AWAIT[0], wires: [['done'], ['failed'], ['progress']] },
        AWAIT[1],
        AWAIT[2],
        { id: 'progress', z: 'f1', type: 'helper' },
      ],
      CREDENTIALS,
    );

  it('a job awaited when the flows stopped is awaited again when they start: sent once, its msg kept, msg.resumed', async () => {
    await load();
    const id = await submitAsOther(sandbox);
    helper.getNode('await').receive({ prompt_id: id, topic: 'fox', mine: 42, image: Buffer.from('small') });
    await until(() => fs.existsSync(keptFile()), 'the await to be kept');
    // A restart: the flows stop (the await ends with nothing sent) and start again.
    await helper.unload();
    await load();
    const done = collect('done');
    sandbox.events.run(id);
    const msg = await done.next(1, 8000);
    assert.equal(msg.resumed, true);
    assert.equal(msg.payload.status, 'completed');
    assert.deepEqual(
      msg.payload.files.map((file) => file.filename),
      engineJob(sandbox, id).outputs['9'].images.map((file) => file.filename),
    );
    assert.equal(msg.topic, 'fox');
    assert.equal(msg.mine, 42);
    assert.ok(Buffer.isBuffer(msg.image) && msg.image.toString() === 'small');
    await sleep(500);
    assert.equal(done.received.length, 1, 'sent once');
    assert.equal(collect('failed').received.length, 0);
    // Sent, then forgotten: a further restart sends nothing.
    await helper.unload();
    await load();
    await sleep(800);
    assert.equal(collect('done').received.length, 0);
  });

  it('a job that ended while the flows were stopped is read from the server at the start', async () => {
    await load();
    const id = await submitAsOther(sandbox);
    helper.getNode('await').receive({ prompt_id: id, topic: 'ended-while-down' });
    await until(() => fs.existsSync(keptFile()), 'the await to be kept');
    await helper.unload();
    sandbox.events.run(id);
    await ended(sandbox, id);
    await load();
    const done = collect('done');
    const msg = await done.next(1, 8000);
    assert.equal(msg.resumed, true);
    assert.equal(msg.topic, 'ended-while-down');
    assert.equal(msg.payload.status, 'completed');
    await sleep(500);
    assert.equal(done.received.length, 1, 'sent once');
  });
});
