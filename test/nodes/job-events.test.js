'use strict';
// The job-events node against the sandbox: every job of the server is told, whoever submitted it (another
// program over REST, this flow), each event once, only the events chosen, only others' jobs when asked; nothing
// is read while the server is idle; after a restart no job is told twice and a job that ended meanwhile is told
// once; on the cloud the socket brings every job; a job list that cannot be read is never "no jobs".
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { JobEvents } = require('../../dist/generation/jobs/job-events');
const { SocketManager } = require('../../dist/generation/jobs/socket-manager');
const { KEY, workflow, sleep, until, collect, statuses } = require('../support/sockets');
const { textToImage } = require('../support/node-red');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-job-events.js'),
  require('../../dist/nodes/graph-gen-submit.js'),
  require('../../dist/nodes/graph-gen-await-job.js'),
];
const ALL_EVENTS = 'queued,started,completed,failed,cancelled';
/** The client id another program submits with: no socket of this Node-RED hears its jobs' events. */
const OTHER = 'another-program';

function flow(sandbox, props = {}, extra = []) {
  return [
    { id: 'f1', type: 'tab' },
    { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url, partnerKeyField: 'api_key_service_org' },
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

/** A submit node of this flow (its msgs go to helper `submitted`). */
const SUBMIT = [
  { id: 'submit', z: 'f1', type: 'graph-gen-submit', server: 'cfg', wires: [['submitted']] },
  { id: 'submitted', z: 'f1', type: 'helper' },
];

/** Submits through this flow's submit node; resolves to the prompt id. */
async function submitHere() {
  const submitted = collect('submitted');
  helper.getNode('submit').receive({ payload: textToImage() });
  return (await submitted.next()).prompt_id;
}

/** Loads the flow and waits until the node watches (its first read done); resolves to its msgs. */
async function start(flowNodes, credentials = {}) {
  await helper.load(NODES, flowNodes, credentials);
  const out = collect('out');
  const seen = statuses('events');
  await until(() => seen.some((status) => status.text === 'watching'), 'the node to watch');
  return { out, seen };
}

/** Submits over REST as another program does: its own client_id. Resolves to the prompt id. */
async function submitAs(sandbox, clientId, prompt = textToImage(), headers = {}) {
  const response = await fetch(`${sandbox.url}/api/prompt`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ prompt, ...(clientId ? { client_id: clientId } : {}) }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body.prompt_id;
}

/** The topics told of one job, in order. */
function topicsOf(out, id) {
  return out.received.filter((msg) => msg.prompt_id === id).map((msg) => msg.topic);
}

function toldOf(out, id, topic) {
  return until(() => topicsOf(out, id).includes(topic), `${topic} of ${id}`);
}

/** The sandbox's requests settle: none for `quietMs` (the reads a change made are over). */
async function quiet(sandbox, quietMs = 200) {
  for (;;) {
    const before = sandbox.counters.requests.length;
    await sleep(quietMs);
    if (sandbox.counters.requests.length === before) return;
  }
}

function warnings() {
  return helper
    .log()
    .args.map(([entry]) => entry)
    .filter((entry) => entry && entry.level === 30 && entry.type === 'graph-gen-job-events')
    .map((entry) => String(entry.msg));
}

/**
 * Queues a job of the sandbox's own node classes (which its REST submit refuses, as a real server refuses nodes
 * it lacks) as another program's. Resolves to the prompt id.
 */
function submitScripted(sandbox, prompt) {
  return sandbox.jobs.submit(prompt, OTHER).id;
}

const failing = () => workflow({ 9: { class_type: 'SandboxFail', inputs: { exception_type: 'OOMError' } } });
const hanging = () => workflow({ 9: { class_type: 'SandboxHang', inputs: {} } });

describe('job events', function () {
  this.timeout(20_000);
  let savedEvents;
  let savedSockets;

  before(async () => {
    savedEvents = JobEvents.defaultTimings;
    JobEvents.defaultTimings = { ...savedEvents, settleMs: 20, pollMs: 300, retryMs: 100, retryMaxMs: 300 };
    savedSockets = SocketManager.defaultTimings;
    SocketManager.defaultTimings = { ...savedSockets, backoffBaseMs: 20, backoffMaxMs: 300, graceMs: 50 };
    await helper.startServer();
  });

  after(async () => {
    JobEvents.defaultTimings = savedEvents;
    SocketManager.defaultTimings = savedSockets;
    await helper.stopServer();
  });

  for (const serverVersion of ['0.8.0', '0.33.0']) {
    describe(`a self-hosted server (ComfyUI ${serverVersion})`, () => {
      let sandbox;

      beforeEach(async () => {
        sandbox = await startSandbox({ generation: { serverVersion } });
      });

      afterEach(async () => {
        await helper.unload();
        await sandbox.close();
      });

      it("tells each step of another program's job once, in order, with the result await-job gives", async () => {
        const { out } = await start(flow(sandbox));
        const id = await submitAs(sandbox, OTHER);
        await toldOf(out, id, 'completed');
        await quiet(sandbox);
        assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
        const done = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'completed');
        const job = sandbox.jobs.jobs.get(id);
        assert.deepEqual(done.payload, {
          prompt_id: id,
          status: 'completed',
          outputs: job.outputs,
          files: [job.outputs['9'].images[0]],
        });
        const queued = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'queued');
        assert.deepEqual(queued.payload, { prompt_id: id, status: 'queued' });
      });

      it('tells how jobs failed and were cancelled: an error, an interrupted run, a job taken out of the queue', async () => {
        const { out } = await start(flow(sandbox));
        const failed = submitScripted(sandbox, failing());
        await toldOf(out, failed, 'failed');
        const told = out.received.find((msg) => msg.prompt_id === failed && msg.topic === 'failed');
        assert.equal(told.payload.status, 'failed');
        assert.equal(told.payload.error.exception_type, 'OOMError');

        const running = submitScripted(sandbox, hanging());
        const waiting = await submitAs(sandbox, OTHER);
        await toldOf(out, running, 'started');
        await toldOf(out, waiting, 'queued');
        sandbox.jobs.remove(waiting);
        sandbox.jobs.interrupt(running);
        await toldOf(out, running, 'cancelled');
        await toldOf(out, waiting, 'cancelled');
        await quiet(sandbox);
        // v0.8 calls the interrupted job failed; its messages say it was interrupted.
        assert.deepEqual(topicsOf(out, running), ['queued', 'started', 'cancelled']);
        assert.deepEqual(topicsOf(out, waiting), ['queued', 'cancelled'], 'it never started');
        assert.deepEqual(topicsOf(out, failed), ['queued', 'started', 'failed']);
      });

      it('reads nothing while the server is idle, only when the queue changes', async () => {
        const { out } = await start(flow(sandbox));
        await quiet(sandbox);
        sandbox.counters.reset();
        await sleep(800);
        assert.deepEqual(
          sandbox.counters.requests.map((seen) => seen.path),
          [],
          'no request while nothing changes',
        );
        const id = await submitAs(sandbox, OTHER);
        await toldOf(out, id, 'completed');
        await quiet(sandbox);
        assert.ok(sandbox.counters.count('/api/jobs', 'GET') > 0, 'the change was read');
        sandbox.counters.reset();
        await sleep(800);
        assert.deepEqual(
          sandbox.counters.requests.map((seen) => seen.path),
          [],
          'idle again: nothing read',
        );
      });
    });
  }

  describe('a self-hosted server', () => {
    let sandbox;

    beforeEach(async () => {
      sandbox = await startSandbox({ generation: { serverVersion: '0.33.0' } });
    });

    afterEach(async () => {
      await helper.unload();
      await sandbox.close();
    });

    it('tells the jobs of this flow too', async () => {
      const { out } = await start(flow(sandbox, {}, SUBMIT));
      const id = await submitHere();
      await toldOf(out, id, 'completed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
    });

    // JSON carries `{"toString": 1}`: turning such a value into text by its own means throws, which once failed
    // every look at the server, so that no later job was told.
    it('a job whose answer holds values without a toString is told, and so is every job after it', async () => {
      const { out } = await start(flow(sandbox));
      sandbox.events.options.autoRun = false;
      const hostile = await submitAs(sandbox, OTHER);
      await toldOf(out, hostile, 'queued');
      const error = {
        exception_type: 'OOMError',
        exception_message: { toString: 1 },
        traceback: [{ toString: 1 }, 'File "nodes.py", line 1'],
      };
      sandbox.faults.add({
        path: `/api/jobs/${hostile}`,
        status: 200,
        body: { id: hostile, status: 'failed', execution_error: error },
        times: Infinity,
      });
      sandbox.events.options.autoRun = true;
      sandbox.events.run(hostile);
      await toldOf(out, hostile, 'failed');
      const later = await submitAs(sandbox, OTHER);
      await toldOf(out, later, 'completed');
      const told = out.received.find((msg) => msg.prompt_id === hostile && msg.topic === 'failed');
      assert.deepEqual(told.payload.error, {
        exception_type: 'OOMError',
        exception_message: '',
        traceback: ['File "nodes.py", line 1'],
      });
      assert.deepEqual(warnings(), []);
    });

    it('an entry whose id is no job id (past 200 characters) is left out with one warning and never told', async () => {
      const { out } = await start(flow(sandbox));
      const long = 'x'.repeat(300);
      sandbox.faults.add({
        path: '/api/jobs',
        method: 'GET',
        status: 200,
        body: {
          jobs: [{ id: long, status: 'pending', create_time: Date.now() }],
          pagination: { has_more: false },
        },
        times: Infinity,
      });
      for (let n = 0; n < 2; n++) {
        sandbox.events.broadcast('status', { status: { exec_info: { queue_remaining: 1 } } });
        await until(() => sandbox.counters.matching('/api/jobs', 'GET').length >= 2 * (n + 1), 'a look');
        await quiet(sandbox);
      }
      assert.equal(
        warnings().filter((text) => /name no job \(a job id of 300 characters/.test(text)).length,
        1,
      );
      sandbox.faults.clear();
      const later = await submitAs(sandbox, OTHER);
      await toldOf(out, later, 'completed');
      assert.deepEqual(
        out.received.filter((msg) => msg.prompt_id.length > 200),
        [],
      );
    });

    it("with only others' jobs, leaves out this config node's own, whichever way they were submitted", async () => {
      const { out } = await start(flow(sandbox, { clients: 'others' }, SUBMIT));
      const clientId = helper.getNode('cfg').connection.clientId;
      const ours = await submitHere();
      // Its own client id, but not through this connection: the server says whose it is.
      const oursByRest = await submitAs(sandbox, clientId);
      const theirs = await submitAs(sandbox, OTHER);
      const anonymous = await submitAs(sandbox, undefined);
      await toldOf(out, theirs, 'completed');
      await toldOf(out, anonymous, 'completed');
      await until(() => sandbox.jobs.jobs.get(oursByRest).state === 'completed', 'our job to end');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, theirs), ['queued', 'started', 'completed']);
      assert.deepEqual(topicsOf(out, anonymous), ['queued', 'started', 'completed']);
      assert.deepEqual(topicsOf(out, ours), []);
      assert.deepEqual(topicsOf(out, oursByRest), []);
    });

    it('tells a job that queued, ran and ended between two looks each step it passed, in order', async () => {
      const { out } = await start(flow(sandbox));
      sandbox.events.options.statusEvents = false;
      const id = await submitAs(sandbox, OTHER);
      await until(() => sandbox.jobs.jobs.get(id).state === 'completed', 'the job to end');
      assert.deepEqual(topicsOf(out, id), [], 'no queue change was announced yet');
      sandbox.events.broadcast('status', { status: { exec_info: { queue_remaining: 0 } } });
      await toldOf(out, id, 'completed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
    });

    it("with only others' jobs and only ends chosen, whose a job is comes from the server's record of it", async () => {
      const { out } = await start(flow(sandbox, { clients: 'others', events: 'completed' }));
      const clientId = helper.getNode('cfg').connection.clientId;
      const ours = await submitAs(sandbox, clientId);
      const theirs = await submitAs(sandbox, OTHER);
      await toldOf(out, theirs, 'completed');
      await until(() => sandbox.jobs.jobs.get(ours).state === 'completed', 'our job to end');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, ours), []);
      assert.equal(sandbox.counters.count('/api/queue', 'GET'), 0, 'no queue read: no waiting job is told');
    });

    it('while jobs wait or run, finds a change no status announced, and opens the socket again', async () => {
      const timings = JobEvents.defaultTimings;
      JobEvents.defaultTimings = { ...timings, activeCheckMs: 300 };
      try {
        const { out } = await start(flow(sandbox));
        sandbox.events.options.autoRun = false;
        const id = await submitAs(sandbox, OTHER);
        await toldOf(out, id, 'queued');
        const opened = sandbox.counters.socketsOpened;
        // The server stops telling this socket (Comfy-Org/ComfyUI#16010): the job runs unannounced.
        sandbox.events.options.statusEvents = false;
        sandbox.events.run(id);
        await toldOf(out, id, 'completed');
        assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
        await until(() => sandbox.counters.socketsOpened > opened, 'the socket to be opened again');
      } finally {
        JobEvents.defaultTimings = timings;
      }
    });

    it('tells the events chosen, and no other', async () => {
      const { out } = await start(flow(sandbox, { events: 'started,failed' }));
      const completed = await submitAs(sandbox, OTHER);
      const failed = submitScripted(sandbox, failing());
      await toldOf(out, failed, 'failed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, completed), ['started']);
      assert.deepEqual(topicsOf(out, failed), ['started', 'failed']);
    });

    it('after a restart tells no job twice, and once each job that ended while Node-RED was down', async () => {
      const nodes = flow(sandbox);
      let { out } = await start(nodes);
      const before = await submitAs(sandbox, OTHER);
      await toldOf(out, before, 'completed');
      sandbox.events.options.autoRun = false;
      const waiting = await submitAs(sandbox, OTHER);
      await toldOf(out, waiting, 'queued');
      await quiet(sandbox);
      await helper.unload();

      // While Node-RED is down: the waiting job runs, another comes and ends, a third is left waiting.
      sandbox.events.options.autoRun = true;
      sandbox.events.run(waiting);
      const whileDown = await submitAs(sandbox, OTHER);
      await until(() => sandbox.jobs.jobs.get(whileDown).state === 'completed', 'the job to end');
      sandbox.events.options.autoRun = false;
      const stillWaiting = await submitAs(sandbox, OTHER);

      ({ out } = await start(nodes));
      await toldOf(out, waiting, 'completed');
      await toldOf(out, whileDown, 'completed');
      await toldOf(out, stillWaiting, 'queued');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, before), [], 'told before the restart');
      assert.deepEqual(topicsOf(out, waiting), ['completed']);
      assert.deepEqual(topicsOf(out, whileDown), ['completed']);
      assert.deepEqual(topicsOf(out, stillWaiting), ['queued']);
      const done = out.received.find((msg) => msg.prompt_id === whileDown);
      assert.equal(done.payload.files.length, 1, 'with its files');

      // And from then on, as ever.
      sandbox.events.run(stillWaiting);
      await toldOf(out, stillWaiting, 'completed');
      assert.deepEqual(topicsOf(out, stillWaiting), ['queued', 'started', 'completed']);
    });

    it('tells nothing of what the server held when the node first started, only what happens after', async () => {
      const old = await submitAs(sandbox, OTHER);
      await until(() => sandbox.jobs.jobs.get(old).state === 'completed', 'an old job to end');
      sandbox.events.options.autoRun = false;
      const waiting = await submitAs(sandbox, OTHER);
      const { out } = await start(flow(sandbox));
      await quiet(sandbox);
      sandbox.events.options.autoRun = true;
      sandbox.events.run(waiting);
      await toldOf(out, waiting, 'completed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, old), []);
      assert.deepEqual(topicsOf(out, waiting), ['started', 'completed']);
    });

    it('removed from the flows, forgets what it told and leaves the socket and the server alone', async () => {
      const { out } = await start(flow(sandbox));
      const id = await submitAs(sandbox, OTHER);
      await toldOf(out, id, 'completed');
      await quiet(sandbox);
      const file = path.join(helper.settings().userDir, 'graph-gen', 'job-events-events.jsonl');
      await until(() => fs.existsSync(file), 'the memory to be written');
      // Only the changed nodes are stopped: the config node and its connection stay.
      await helper.setFlows(
        flow(sandbox).filter((node) => node.id !== 'events' && node.id !== 'out'),
        'nodes',
      );
      assert.equal(fs.existsSync(file), false);
      await until(() => sandbox.counters.socketsOpen === 0, 'the socket to close: nothing uses it');
      sandbox.counters.reset();
      await submitAs(sandbox, OTHER);
      await sleep(500);
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => `${seen.method} ${seen.path}`),
        ['POST /api/prompt'],
      );
    });

    it('a node removed while Node-RED was down has its memory swept at the next start', () => {
      const { sweepNodeFiles } = require('../../dist/nodes/node-state');
      const userDir = helper.settings().userDir;
      const folder = path.join(userDir, 'graph-gen');
      fs.mkdirSync(folder, { recursive: true });
      for (const name of ['sweep-test-gone.jsonl', 'sweep-test-a_b.jsonl', 'other-gone.jsonl'])
        fs.writeFileSync(path.join(folder, name), '');
      const RED = {
        settings: { userDir },
        nodes: {
          eachNode: (visit) =>
            [
              { id: 'a/b', type: 'graph-gen-job-events' },
              { id: 'gone', type: 'graph-gen-await-job' },
            ].forEach(visit),
        },
      };
      sweepNodeFiles(RED, 'graph-gen-job-events', 'sweep-test-', '.jsonl');
      assert.deepEqual(fs.readdirSync(folder).sort(), ['other-gone.jsonl', 'sweep-test-a_b.jsonl']);
    });

    for (const [trouble, fault] of [
      ['fails', { status: 503 }],
      ['is not a list of jobs', { malformed: true }],
    ]) {
      it(`a job list that ${trouble} is not "no jobs": nothing is told until it can be read, then all once`, async () => {
        const { out, seen } = await start(flow(sandbox));
        sandbox.events.options.autoRun = false;
        const id = await submitAs(sandbox, OTHER);
        await toldOf(out, id, 'queued');
        await quiet(sandbox);
        sandbox.faults.add({ path: '/api/jobs', method: 'GET', times: Infinity, ...fault });
        sandbox.events.options.autoRun = true;
        sandbox.events.run(id);
        await until(() => sandbox.jobs.jobs.get(id).state === 'completed', 'the job to end');
        await until(() => seen.some((status) => status.text === 'jobs unreadable'), 'the status to say so');
        await until(() => warnings().some((text) => /cannot be read/.test(text)), 'a warning');
        assert.deepEqual(topicsOf(out, id), ['queued'], 'nothing told while the list fails');
        sandbox.faults.clear();
        await toldOf(out, id, 'completed');
        await quiet(sandbox);
        assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
        assert.equal(seen.at(-1).text, 'watching');
        assert.equal(warnings().filter((text) => /cannot be read/.test(text)).length, 1, 'warned once');
      });
    }

    it("a job whose end cannot be read is told, after three tries, with the list's word and no outputs", async () => {
      const { out } = await start(flow(sandbox));
      sandbox.faults.add({
        path: /^\/api\/(jobs|history)\/[^/]+$/,
        method: 'GET',
        status: 400,
        times: Infinity,
      });
      const id = await submitAs(sandbox, OTHER);
      await toldOf(out, id, 'completed');
      const told = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'completed');
      assert.deepEqual(told.payload, {
        prompt_id: id,
        status: 'completed',
        outputs: {},
        files: [],
        outputs_incomplete: true,
      });
      assert.equal(sandbox.counters.count(new RegExp(`^/api/jobs/${id}$`)), 3);
    });

    it('reads the ends of many jobs a few per look, and the list a bounded number of pages', async () => {
      const timings = JobEvents.defaultTimings;
      JobEvents.defaultTimings = { ...timings, endsPerRead: 2, pageSize: 2, maxPages: 3 };
      try {
        const { out } = await start(flow(sandbox));
        sandbox.events.options.statusEvents = false;
        const first = [];
        for (let n = 0; n < 5; n++) first.push(await submitAs(sandbox, OTHER));
        await until(() => first.every((id) => sandbox.jobs.jobs.get(id).state === 'completed'), 'five jobs');
        sandbox.events.broadcast('status', { status: { exec_info: { queue_remaining: 0 } } });
        await until(() => first.every((id) => topicsOf(out, id).includes('completed')), 'all five told');
        assert.equal(sandbox.counters.count(/^\/api\/jobs\/[^/]+$/), 5, 'each end read once');
        assert.deepEqual(warnings(), []);

        // More than the pages hold ended unannounced: the newest are told, with a warning for the rest.
        const second = [];
        for (let n = 0; n < 8; n++) second.push(await submitAs(sandbox, OTHER));
        await until(
          () => second.every((id) => sandbox.jobs.jobs.get(id).state === 'completed'),
          'eight jobs',
        );
        sandbox.events.broadcast('status', { status: { exec_info: { queue_remaining: 0 } } });
        await until(() => warnings().some((text) => /more than 6 jobs/.test(text)), 'a warning');
        await until(() => second.slice(2).every((id) => topicsOf(out, id).includes('completed')), 'six told');
        await quiet(sandbox);
        assert.deepEqual(topicsOf(out, second[0]), []);
        assert.deepEqual(topicsOf(out, second[1]), []);
      } finally {
        JobEvents.defaultTimings = timings;
      }
    });

    it('a fault while starting is a warning, never an unhandled rejection', async () => {
      const timings = Object.getOwnPropertyDescriptor(JobEvents, 'defaultTimings');
      Object.defineProperty(JobEvents, 'defaultTimings', {
        configurable: true,
        get() {
          throw new Error('a fault in the watcher');
        },
      });
      try {
        await helper.load(NODES, flow(sandbox));
        await until(() => warnings().some((text) => /could not start: a fault/.test(text)), 'a warning');
      } finally {
        Object.defineProperty(JobEvents, 'defaultTimings', timings);
      }
    });

    it('without a socket, reads the jobs every so often and tells them', async () => {
      sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
      await helper.load(NODES, flow(sandbox));
      const out = collect('out');
      const seen = statuses('events');
      await until(() => seen.some((status) => status.text === 'polling (no socket)'), 'the node to poll');
      const id = await submitAs(sandbox, OTHER);
      await toldOf(out, id, 'completed');
      assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
    });
  });

  describe('the memory of what was told', () => {
    const { JobEventMemory, ENDED_KEPT } = require('../../dist/generation/jobs/job-event-memory');
    const store = () => {
      const map = new Map();
      return { map, entries: () => [...map], set: (k, v) => map.set(k, v), delete: (k) => map.delete(k) };
    };

    it('forgets ended jobs older than the mark, keeps waiting and running ones whatever their age', () => {
      const kept = store();
      const memory = new JobEventMemory(kept, 'cfg http://a');
      memory.setMark(100);
      memory.remember('old-ended', { step: 'ended', createdAt: 50 });
      memory.remember('old-running', { step: 'started', createdAt: 40 });
      memory.remember('at-mark', { step: 'ended', createdAt: 100 });
      memory.setMark(120);
      memory.forgetOld();
      assert.equal(memory.get('old-ended'), undefined);
      assert.deepEqual(memory.get('old-running'), { step: 'started', createdAt: 40 });
      assert.equal(memory.get('at-mark'), undefined);
      // What the store keeps is what a restart reads.
      const again = new JobEventMemory(kept, 'cfg http://a');
      assert.equal(again.mark, 120);
      assert.deepEqual(
        again.active().map(([id]) => id),
        ['old-running'],
      );
      assert.equal(again.size, 1);
    });

    it(`keeps the newest ${ENDED_KEPT} ended jobs without a create_time (the cloud), the oldest go first`, () => {
      const memory = new JobEventMemory(store(), 'cfg');
      memory.setMark(0);
      for (let n = 0; n < ENDED_KEPT + 10; n++) memory.remember(`job-${n}`, { step: 'ended' });
      memory.forgetOld();
      assert.equal(memory.size, ENDED_KEPT);
      assert.equal(memory.get('job-9'), undefined);
      assert.deepEqual(memory.get('job-10'), { step: 'ended' });
    });

    it('reads its store as untrusted: ids that are no job ids, steps that are none, and past MAX_JOBS are dropped', () => {
      const { MAX_JOBS } = require('../../dist/generation/jobs/job-event-memory');
      const kept = store();
      kept.map.set('mark', { mark: 5, scope: 'cfg' });
      kept.map.set(`j:${'x'.repeat(300)}`, { s: 'q' });
      kept.map.set('j:a-constructor-step', { s: 'constructor' });
      kept.map.set('j:a-proto-step', JSON.parse('{"s": "__proto__"}'));
      kept.map.set('j:', { s: 'q' });
      kept.map.set('j:good', { s: 'r', c: 3 });
      const memory = new JobEventMemory(kept, 'cfg');
      assert.deepEqual(memory.active(), [['good', { step: 'started', createdAt: 3 }]]);
      assert.deepEqual([...kept.map.keys()].sort(), ['j:good', 'mark']);

      const full = store();
      full.map.set('mark', { mark: 5, scope: 'cfg' });
      for (let n = 0; n < MAX_JOBS + 5; n++) full.map.set(`j:job-${n}`, { s: 'e' });
      assert.equal(new JobEventMemory(full, 'cfg').size, MAX_JOBS);
      assert.equal(full.map.size, MAX_JOBS + 1);
    });

    it('starts anew for another server: what was kept for another config node or address is dropped', () => {
      const kept = store();
      const memory = new JobEventMemory(kept, 'cfg http://a');
      memory.setMark(5);
      memory.remember('job', { step: 'queued', createdAt: 5 });
      const other = new JobEventMemory(kept, 'cfg http://b');
      assert.equal(other.begun, false);
      assert.equal(other.size, 0);
      assert.equal(kept.map.size, 0);
    });
  });

  describe('the cloud', () => {
    let sandbox;

    beforeEach(async () => {
      sandbox = await startSandbox({ generationApiKey: KEY });
    });

    afterEach(async () => {
      await helper.unload();
      await sandbox.close();
    });

    it("tells another program's jobs from the events every socket of the key gets", async () => {
      const { out } = await start(flow(sandbox), { cfg: { apiKey: KEY } });
      const id = await submitAs(sandbox, OTHER, textToImage(), { 'x-api-key': KEY });
      const failed = submitScripted(sandbox, failing());
      await toldOf(out, id, 'completed');
      await toldOf(out, failed, 'failed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, id), ['queued', 'started', 'completed']);
      assert.deepEqual(topicsOf(out, failed), ['queued', 'started', 'failed']);
      const done = out.received.find((msg) => msg.prompt_id === id && msg.topic === 'completed');
      assert.deepEqual(done.payload.files, [sandbox.jobs.jobs.get(id).outputs['9'].images[0]]);
      assert.equal(
        sandbox.counters.count(/^\/api\/jobs$/),
        1,
        'the cloud lists no jobs: asked once, no more',
      );
    });

    it('sends a copy of the result: a flow that changes it changes nothing an await of the job gets later', async () => {
      const awaiting = [
        {
          id: 'await',
          z: 'f1',
          type: 'graph-gen-await-job',
          server: 'cfg',
          timeout: '0',
          wires: [['awaited'], [], []],
        },
        { id: 'awaited', z: 'f1', type: 'helper' },
      ];
      const { out } = await start(flow(sandbox, { events: 'completed' }, awaiting), { cfg: { apiKey: KEY } });
      const id = await submitAs(sandbox, OTHER, textToImage(), { 'x-api-key': KEY });
      await toldOf(out, id, 'completed');
      const told = out.received.find((msg) => msg.prompt_id === id);
      told.payload.files.length = 0;
      told.payload.outputs['9'].images = [];
      const awaited = collect('awaited');
      helper.getNode('await').receive({ prompt_id: id });
      const result = (await awaited.next()).payload;
      assert.deepEqual(result.files, [sandbox.jobs.jobs.get(id).outputs['9'].images[0]]);
      assert.deepEqual(result.outputs, sandbox.jobs.jobs.get(id).outputs);
    });

    it('says unauthorized when the service refuses the key', async () => {
      await helper.load(NODES, flow(sandbox), { cfg: { apiKey: 'not-the-key' } });
      const seen = statuses('events');
      await until(() => seen.some((status) => status.text === 'unauthorized'), 'the status to say so');
      assert.equal(seen.at(-1).fill, 'red');
    });

    it('reads nothing while the key has no job, and nothing for a job the socket follows', async () => {
      const { out } = await start(flow(sandbox, { events: 'started,completed' }), { cfg: { apiKey: KEY } });
      await quiet(sandbox);
      sandbox.counters.reset();
      await sleep(800);
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => seen.path),
        [],
      );
      const id = await submitAs(sandbox, OTHER, textToImage(), { 'x-api-key': KEY });
      await toldOf(out, id, 'completed');
      await quiet(sandbox);
      assert.deepEqual(topicsOf(out, id), ['started', 'completed']);
      assert.deepEqual(
        sandbox.counters.requests.map((seen) => `${seen.method} ${seen.path}`),
        ['POST /api/prompt'],
        'only the submit: the job was followed by its events',
      );
    });
  });
});
