'use strict';
// The server pool (issue 29) in a real Node-RED against three sandboxes: where jobs go (fewest jobs ahead, what
// each server can run, ties in turns, the three strategies), a job's inputs and its later calls kept on its server
// (upload -> submit -> await -> download, msg.server), the queue and job events across members, and the statuses
// that count the members up. Failover, lost jobs and restarts are pool-failover.test.js beside this file; the pure
// choice is pool-routing.test.js. Past 400 lines: a test per rule of the issue, all on one flow and its three servers.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../../dist/sandbox');
const { POOL_TIMINGS } = require('../../../dist/generation/pool/server-pool');
const { DIALOG_DEFINITIONS } = require('../../../dist/generation/workflows/definitions-cache');
const { JobEvents } = require('../../../dist/generation/jobs/job-events');
const { sleep, until, collect, statuses, withFastSockets } = require('../../support/sockets');
const { textToImage } = require('../../support/node-red');
const {
  startMembers,
  closeMembers,
  stopMember,
  loadPool,
  jobsOn,
  postsTo,
  whereIs,
  submitThrough,
  catalogHas,
} = require('../../support/pool');

/** Another program's client id: no socket of this Node-RED hears its jobs' events. */
const OTHER = 'another-program';
const NAMES = ['A', 'B', 'C'];
const IDS = ['ca', 'cb', 'cc'];

/** A job that runs until released (or cancelled), after text-to-image's loader. */
function hanging() {
  return { ...textToImage(), 20: { class_type: 'SandboxHang', inputs: {} } };
}

/** How many of `msgs` went to each member, by msg.server (A, B, C). */
function spreadOf(msgs) {
  const counts = [0, 0, 0];
  for (const msg of msgs) counts[IDS.indexOf(msg.server.id)] += 1;
  return counts;
}

/** Polls an async check until it holds. */
async function eventually(check, what, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('server pool', function () {
  this.timeout(30_000);
  withFastSockets();
  let sandboxes;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await closeMembers(sandboxes);
    sandboxes = undefined;
  });

  /** Sends `count` msgs into the submit node at once; resolves to what it sent on, in order sent on. */
  async function submitTogether(out, payloads) {
    const first = out.submitted.received.length;
    for (const payload of payloads) helper.getNode('submit').receive({ payload });
    await until(
      () => out.submitted.received.length - first + out.caught.received.length >= payloads.length,
      'the submits to end',
    );
    assert.deepEqual(
      out.caught.received.map((msg) => msg.error.message),
      [],
    );
    return out.submitted.received.slice(first);
  }

  /** Awaits a submitted job through the pool; resolves to the await's output-1 msg. */
  async function awaitDone(out, submitted) {
    const count = out.done.received.length + 1;
    helper.getNode('await').receive(submitted);
    return out.done.next(count);
  }

  describe('where a job goes', () => {
    it('spread by queue length: a member with jobs waiting gets none of the next ones while the others have fewer', async () => {
      sandboxes = await startMembers();
      const { pool, out } = await loadPool(sandboxes);
      // Another program keeps A busy: one job running (held) and two waiting behind it.
      for (let n = 0; n < 3; n++) sandboxes[0].jobs.submit(hanging(), OTHER);
      // The pool hears of it from A's socket (its queue's `status`): all three, read from the pool's own count.
      await until(() => pool.watches[0].reported === 3, "the pool to hear of A's queue");
      assert.equal((await pool.order()).at(-1).id, 'ca');
      const sent = await submitTogether(
        out,
        [1, 2, 3, 4].map(() => textToImage()),
      );
      assert.deepEqual(spreadOf(sent), [0, 2, 2], 'A has three ahead; B and C take two each');
      assert.equal(postsTo(sandboxes[0]), 0, 'nothing was sent to A');
      for (const msg of sent) {
        assert.equal(
          whereIs(sandboxes, msg.prompt_id),
          IDS.indexOf(msg.server.id),
          'msg.server is where it runs',
        );
        assert.equal(msg.server.name, NAMES[IDS.indexOf(msg.server.id)]);
      }
      // Once A's queue is empty again, A takes its turn.
      for (const job of sandboxes[0].jobs.jobs.values()) sandboxes[0].jobs.cancel(job.id);
      await eventually(async () => (await pool.order())[0].id === 'ca', 'A to have the fewest jobs ahead');
      const [next] = await submitTogether(out, [textToImage()]);
      assert.equal(next.server.id, 'ca');
    });

    it('the pool counts the jobs it sent and has not seen queued yet: six sent together spread 2/2/2', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      const sent = await submitTogether(
        out,
        [1, 2, 3, 4, 5, 6].map(() => hanging()),
      );
      assert.deepEqual(spreadOf(sent), [2, 2, 2]);
      assert.deepEqual(
        sandboxes.map((sandbox) => jobsOn(sandbox).length),
        [2, 2, 2],
      );
    });

    it('ties take turns: nine jobs, each sent after the one before ended, run 3/3/3 on alike members', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      const done = [];
      for (let n = 0; n < 9; n++) {
        const submitted = await submitThrough(out, { payload: textToImage(), topic: `job ${n}` });
        const result = await awaitDone(out, submitted);
        assert.equal(result.payload.status, 'completed');
        assert.equal(result.topic, `job ${n}`);
        assert.deepEqual(result.server, submitted.server, 'the await followed the job to its member');
        done.push(result);
      }
      assert.deepEqual(spreadOf(done), [3, 3, 3]);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [3, 3, 3],
      );
      // In turns: no member twice in a row.
      for (let n = 1; n < done.length; n++) assert.notEqual(done[n].server.id, done[n - 1].server.id);
    });

    it("strategy 'turns': plain turns, however long a member's queue", async () => {
      sandboxes = await startMembers();
      const { pool, out } = await loadPool(sandboxes, { pool: { strategy: 'turns' } });
      for (let n = 0; n < 3; n++) sandboxes[0].jobs.submit(hanging(), OTHER);
      await until(() => pool.watches[0].reported === 3, "the pool to hear of A's queue");
      const sent = [];
      for (let n = 0; n < 6; n++) sent.push(await submitThrough(out, { payload: textToImage() }));
      assert.deepEqual(spreadOf(sent), [2, 2, 2]);
      assert.deepEqual(
        sent.map((msg) => msg.server.name),
        ['A', 'B', 'C', 'A', 'B', 'C'],
      );
    });

    it("strategy 'first': the first member up takes every job; when it stops, the next in the list", async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      const sent = await submitTogether(
        out,
        [1, 2, 3, 4].map(() => textToImage()),
      );
      assert.deepEqual(spreadOf(sent), [4, 0, 0]);
      await stopMember(sandboxes[0]);
      const after = [];
      for (let n = 0; n < 3; n++) after.push(await submitThrough(out, { payload: textToImage() }));
      assert.deepEqual(spreadOf(after), [0, 3, 0], 'B, listed second, takes them all');
      assert.equal(postsTo(sandboxes[2]), 0);
    });
  });

  describe('what each member can run', () => {
    /** A node class only C has (a custom node installed there). */
    const ONLY_ON_C = {
      input: { required: { images: ['IMAGE'] } },
      output: ['IMAGE'],
      output_name: ['IMAGE'],
      name: 'OnlyOnC',
      display_name: 'Only on C',
      category: 'test',
      output_node: false,
    };
    /** B's checkpoints: one only B has. */
    const CHECKPOINTS_OF_B = {
      input: { required: { ckpt_name: [['only-b.safetensors', 'v1-5-pruned-emaonly.safetensors']] } },
      output: ['MODEL', 'CLIP', 'VAE'],
      output_name: ['MODEL', 'CLIP', 'VAE'],
      name: 'CheckpointLoaderSimple',
      display_name: 'Load Checkpoint',
      category: 'loaders',
      output_node: false,
    };
    const usingC = () => ({ ...textToImage(), 20: { class_type: 'OnlyOnC', inputs: { images: ['8', 0] } } });
    const usingB = () => {
      const workflow = textToImage();
      workflow[4].inputs.ckpt_name = 'only-b.safetensors';
      return workflow;
    };
    const start = () =>
      startMembers([
        {},
        { generation: { nodeDefinitions: { CheckpointLoaderSimple: CHECKPOINTS_OF_B } } },
        { generation: { nodeDefinitions: { OnlyOnC: ONLY_ON_C } } },
      ]);

    it('a workflow using a node class only one member has always goes there; one naming a model only one lists too', async () => {
      sandboxes = await start();
      const { out } = await loadPool(sandboxes);
      const onC = await submitTogether(
        out,
        [1, 2, 3, 4].map(() => usingC()),
      );
      assert.deepEqual(spreadOf(onC), [0, 0, 4]);
      const onB = await submitTogether(
        out,
        [1, 2, 3, 4].map(() => usingB()),
      );
      assert.deepEqual(spreadOf(onB), [0, 4, 0]);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [0, 4, 4],
        'no member was tried that could not run it',
      );
      const result = await awaitDone(out, onC[0]);
      assert.equal(result.payload.status, 'completed');
      assert.equal(result.server.name, 'C');
    });

    it('a workflow no member can run is refused before anything is sent, naming what each member lacks', async () => {
      sandboxes = await start();
      const { out } = await loadPool(sandboxes);
      const workflow = usingB();
      workflow[20] = { class_type: 'OnlyOnC', inputs: { images: ['8', 0] } };
      helper.getNode('submit').receive({ payload: workflow });
      const caught = await out.caught.next();
      assert.equal(caught.error.code, 'invalid_input');
      const message = caught.error.message;
      assert.match(message, /no server of the pool can run this workflow/);
      assert.match(
        message,
        /A lacks node class OnlyOnC, model file "only-b\.safetensors" for CheckpointLoaderSimple\.ckpt_name/,
      );
      assert.match(message, /B lacks node class OnlyOnC(;|$)/);
      assert.match(message, /C lacks model file "only-b\.safetensors" for CheckpointLoaderSimple\.ckpt_name/);
      await sleep(100);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [0, 0, 0],
        'nothing was sent',
      );
      assert.equal(out.submitted.received.length, 0);
    });

    it('a node class installed on a member since its definitions were read is found when they are read again', async () => {
      const saved = DIALOG_DEFINITIONS.refreshLimitMs;
      DIALOG_DEFINITIONS.refreshLimitMs = 0;
      try {
        sandboxes = await startMembers();
        const { out } = await loadPool(sandboxes);
        const workflow = () => ({ ...textToImage(), 20: { class_type: 'Installed', inputs: {} } });
        helper.getNode('submit').receive({ payload: workflow() });
        assert.match((await out.caught.next()).error.message, /A lacks node class Installed/);
        sandboxes[1].generation.definitions.Installed = {
          ...ONLY_ON_C,
          name: 'Installed',
          input: { required: {} },
        };
        const sent = await submitThrough(out, { payload: workflow() });
        assert.equal(sent.server.name, 'B');
      } finally {
        DIALOG_DEFINITIONS.refreshLimitMs = saved;
      }
    });
  });

  describe('a job stays on its server', () => {
    /** A workflow that reads an uploaded picture and saves it. */
    const usingUpload = (name) => ({
      1: { class_type: 'LoadImage', inputs: { image: name } },
      2: { class_type: 'SaveImage', inputs: { filename_prefix: 'edited', images: ['1', 0] } },
    });
    const views = (sandbox) => sandbox.counters.count(/\/view$/, 'GET');

    it('an upload chooses the member and sets msg.server; the submit after it, the await and the download follow it there', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      // Three uploads sent together take turns.
      for (let n = 0; n < 3; n++)
        helper
          .getNode('upload')
          .receive({ payload: Buffer.from(`picture ${n}`), filename: `in-${n}.png`, topic: n });
      await out.uploaded.next(3);
      const uploads = out.uploaded.received;
      assert.deepEqual(spreadOf(uploads), [1, 1, 1], 'uploads sent together are spread');
      for (const uploaded of uploads) {
        const index = IDS.indexOf(uploaded.server.id);
        assert.deepEqual(uploaded.server, { id: IDS[index], name: NAMES[index] });
        assert.deepEqual(
          sandboxes[index].generation.uploads.map((upload) => upload.name),
          [uploaded.filename],
          'the file is on the member msg.server names',
        );
      }
      for (const uploaded of uploads) {
        const index = IDS.indexOf(uploaded.server.id);
        const submitted = await submitThrough(out, { ...uploaded, payload: usingUpload(uploaded.filename) });
        assert.deepEqual(submitted.server, uploaded.server, 'the submit followed the upload');
        assert.equal(whereIs(sandboxes, submitted.prompt_id), index);
        const result = await awaitDone(out, submitted);
        assert.equal(result.payload.status, 'completed');
        assert.deepEqual(result.server, uploaded.server);
        const before = sandboxes.map(views);
        helper.getNode('download').receive(result);
        const file = await out.downloaded.next();
        assert.ok(Buffer.isBuffer(file.payload) && file.payload.length > 0);
        assert.deepEqual(
          sandboxes.map((sandbox, each) => views(sandbox) - before[each]),
          [0, 1, 2].map((each) => (each === index ? 1 : 0)),
          'the file was read from the member that made it',
        );
      }
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 1, 1],
      );
    });

    it('a msg that lost msg.server still finds its job: the pool remembers where each job went', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      const sent = await submitTogether(
        out,
        [1, 2, 3].map(() => textToImage()),
      );
      for (const submitted of sent) {
        const where = submitted.server;
        delete submitted.server;
        const result = await awaitDone(out, submitted);
        assert.deepEqual(result.server, where, 'the await found the job on its member and says which');
        delete result.server;
        const before = sandboxes.map(views);
        helper.getNode('download').receive(result);
        await out.downloaded.next();
        assert.equal(views(sandboxes[IDS.indexOf(where.id)]) - before[IDS.indexOf(where.id)], 1);
      }
      // A job the pool never sent, without msg.server: a sentence that says what to send.
      helper.getNode('await').receive({ prompt_id: 'a1b2c3d4-0000-4000-8000-000000000000' });
      const caught = await out.caught.next();
      assert.equal(caught.error.code, 'invalid_input');
      assert.match(
        caught.error.message,
        /does not know which of its servers runs job a1b2c3d4-.*send msg\.server/,
      );
    });

    it('a msg.server that names a server not in the pool is refused with a sentence, and nothing is sent', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      const elsewhere = { id: 'c-elsewhere', name: 'D' };
      const refusals = [
        ['submit', { payload: textToImage(), server: elsewhere }],
        ['upload', { payload: Buffer.from('x'), filename: 'x.png', server: elsewhere }],
        ['await', { prompt_id: 'a1b2c3d4-0000-4000-8000-000000000000', server: elsewhere }],
        ['download', { payload: { filename: 'x.png', type: 'output' }, server: 'c-elsewhere' }],
        ['queue', { action: 'cancel', prompt_id: 'a1b2c3d4-0000-4000-8000-000000000000', server: elsewhere }],
      ];
      for (const [node, msg] of refusals) {
        helper.getNode(node).receive(msg);
        const caught = await out.caught.next();
        assert.equal(caught.error.code, 'invalid_input', node);
        assert.match(
          caught.error.message,
          /msg\.server names a server \("c-elsewhere"\) that is not in this pool: remove msg\.server, or send the msg through the pool it came from/,
          node,
        );
      }
      for (const sandbox of sandboxes) {
        assert.equal(postsTo(sandbox), 0);
        assert.equal(sandbox.generation.uploads.length, 0);
        assert.equal(sandbox.counters.count(/\/(view|queue|interrupt)$/), 0);
      }
    });
  });

  describe('queue and job events across members', () => {
    /** Requests that cancel: a queue delete, an interrupt, a job cancel. */
    const cancels = (sandbox) =>
      sandbox.counters.count(/^\/api\/(queue|interrupt|jobs\/cancel|jobs\/[^/]+\/cancel)$/, 'POST');

    it("queue list through the pool lists every member's jobs, each with its server, and each member's answer", async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      const sent = await submitTogether(
        out,
        [1, 2, 3, 4, 5, 6].map(() => hanging()),
      );
      await until(
        () => sandboxes.every((sandbox) => sandbox.jobs.running().length === 1),
        'one job running on each member',
      );
      helper.getNode('queue').receive({ action: 'list' });
      const listed = await out.queued.next();
      const running = sandboxes.map((sandbox) => sandbox.jobs.running()[0].id);
      const pending = sandboxes.map((sandbox) => sandbox.jobs.pending()[0].id);
      assert.deepEqual([...listed.running].sort(), [...running].sort());
      assert.deepEqual([...listed.pending].sort(), [...pending].sort());
      assert.deepEqual(
        listed.payload.servers,
        [0, 1, 2].map((index) => ({ id: IDS[index], name: NAMES[index], up: true })),
      );
      for (const [field, ids] of [
        ['queue_running', running],
        ['queue_pending', pending],
      ]) {
        assert.equal(listed.payload[field].length, 3, field);
        for (const entry of listed.payload[field]) {
          const id = entry.prompt_id;
          assert.ok(ids.includes(id), `${field} entry ${JSON.stringify(entry).slice(0, 80)} names its job`);
          assert.deepEqual(entry.server, sent.find((msg) => msg.prompt_id === id).server, 'with its member');
        }
      }
    });

    it("cancel through the pool goes to the job's member only: by msg.server, or by where the pool sent it", async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      await submitTogether(
        out,
        [1, 2, 3, 4, 5, 6].map(() => hanging()),
      );
      await until(
        () => sandboxes.every((sandbox) => sandbox.jobs.running().length === 1),
        'one job running on each member',
      );
      for (const sandbox of sandboxes) sandbox.counters.reset();
      // B's waiting job, without msg.server: the pool knows where it sent it.
      const waiting = sandboxes[1].jobs.pending()[0].id;
      helper.getNode('queue').receive({ action: 'cancel', prompt_id: waiting });
      const removed = await out.queued.next();
      assert.deepEqual(removed.removed, [waiting]);
      assert.equal(sandboxes[1].jobs.jobs.has(waiting), false);
      assert.deepEqual(
        sandboxes.map(cancels).map((count) => count > 0),
        [false, true, false],
      );
      // C's running job, with msg.server.
      for (const sandbox of sandboxes) sandbox.counters.reset();
      const runningOnC = sandboxes[2].jobs.running()[0].id;
      helper
        .getNode('queue')
        .receive({ action: 'cancel', prompt_id: runningOnC, server: { id: 'cc', name: 'C' } });
      const interrupted = await out.queued.next();
      assert.deepEqual(interrupted.interrupted, [runningOnC]);
      assert.equal(sandboxes[2].jobs.jobs.get(runningOnC).state, 'cancelled');
      assert.deepEqual(
        sandboxes.map(cancels).map((count) => count > 0),
        [false, false, true],
      );
      // A's jobs were not touched.
      assert.equal(sandboxes[0].jobs.running().length + sandboxes[0].jobs.pending().length, 2);
    });

    it('queue list with a member stopped: the others are listed, and the stopped one says it did not answer', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      await submitTogether(
        out,
        [1, 2, 3].map(() => hanging()),
      );
      await stopMember(sandboxes[1]);
      helper.getNode('queue').receive({ action: 'list' });
      const listed = await out.queued.next();
      assert.deepEqual(
        listed.payload.servers.map((server) => [server.name, server.up]),
        [
          ['A', true],
          ['B', false],
          ['C', true],
        ],
      );
      assert.equal(typeof listed.payload.servers[1].error, 'string');
      assert.ok(listed.payload.servers[1].error.length > 0);
      assert.deepEqual(listed.payload.queue_running.map((entry) => entry.server.name).sort(), ['A', 'C']);
      assert.equal(out.caught.received.length, 0, 'a member that did not answer does not fail the list');
    });

    it("job events through the pool tell every member's jobs, each with msg.server", async () => {
      const saved = JobEvents.defaultTimings;
      JobEvents.defaultTimings = { ...saved, settleMs: 20, pollMs: 300, retryMs: 100, retryMaxMs: 300 };
      try {
        sandboxes = await startMembers();
        const events = [
          {
            id: 'events',
            z: 'f1',
            type: 'graph-gen-job-events',
            server: '',
            pool: 'p',
            events: 'completed',
            clients: 'all',
            wires: [['told']],
          },
          { id: 'told', z: 'f1', type: 'helper' },
        ];
        const { out } = await loadPool(sandboxes, { extra: events });
        const told = collect('told');
        // Every status the node set since the load (the helper spies on Node.prototype.status): it may say
        // "watching" while loadPool waits for the members to be up, before a recorder set now would hear it.
        const node = helper.getNode('events');
        const shown = () =>
          node.status
            .getCalls()
            .filter((call) => call.thisValue === node)
            .map((call) => call.args[0]);
        await until(
          () => shown().some((status) => status?.text === 'watching'),
          'the node to watch every member',
        );
        // Another program's job on each member, and one through the pool.
        const others = [];
        for (const sandbox of sandboxes) {
          const response = await fetch(`${sandbox.url}/api/prompt`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ prompt: textToImage(), client_id: OTHER }),
          });
          others.push((await response.json()).prompt_id);
        }
        const [ours] = await submitTogether(out, [textToImage()]);
        await until(() => told.received.length >= 4, 'four jobs told');
        await sleep(200);
        assert.equal(told.received.length, 4, 'each job told once');
        for (const [index, id] of others.entries()) {
          const msg = told.received.find((each) => each.prompt_id === id);
          assert.equal(msg.topic, 'completed');
          assert.deepEqual(msg.server, { id: IDS[index], name: NAMES[index] });
        }
        const mine = told.received.find((each) => each.prompt_id === ours.prompt_id);
        assert.deepEqual(mine.server, ours.server);
      } finally {
        JobEvents.defaultTimings = saved;
      }
    });
  });

  describe('members of their own', () => {
    const KEY_A = 'sk-member-a-7f3e1c';
    const KEY_B = 'sk-member-b-2d9a4b';
    const TOKEN_C = 'v2-token-member-c-8e6f0d';

    it("each member keeps its own dialect and credential: a request to one carries its own, never another's", async () => {
      sandboxes = await startMembers([
        { generationApiKey: KEY_A },
        {},
        { dialect: 'comfy-api-v2', v2: { token: TOKEN_C, throttleMs: 0 } },
      ]);
      const { out } = await loadPool(
        sandboxes,
        { members: [{}, {}, { dialect: 'comfy-api-v2', authType: 'bearer' }] },
        { credentials: { ca: { apiKey: KEY_A }, cb: { apiKey: KEY_B }, cc: { apiKey: TOKEN_C } } },
      );
      const results = [];
      for (let n = 0; n < 6; n++) {
        const submitted = await submitThrough(out, { payload: textToImage() });
        results.push(await awaitDone(out, submitted));
      }
      // Each took jobs (a v2 member's queue is read every few seconds, not told: its count of jobs ahead is
      // the pool's own until then, so the spread need not be even).
      assert.deepEqual(
        spreadOf(results).map((count) => count > 0),
        [true, true, true],
      );
      for (const result of results) assert.equal(result.payload.status, 'completed', result.server.name);
      for (let n = 0; n < 3; n++)
        helper.getNode('upload').receive({ payload: Buffer.from(`picture ${n}`), filename: `in-${n}.png` });
      await out.uploaded.next(3);
      helper.getNode('queue').receive({ action: 'list' });
      const listed = await out.queued.next();
      assert.deepEqual(
        listed.payload.servers.map((server) => server.up),
        [true, true, true],
      );
      const secrets = [KEY_A, KEY_B, TOKEN_C];
      for (const [index, sandbox] of sandboxes.entries()) {
        const seen = JSON.stringify([sandbox.counters.requests, sandbox.counters.handshakes]);
        assert.ok(seen.includes(secrets[index]), `${NAMES[index]} got its own credential`);
        for (const [other, secret] of secrets.entries())
          if (other !== index)
            assert.equal(seen.includes(secret), false, `${NAMES[index]} got ${NAMES[other]}'s`);
      }
      const everything = JSON.stringify([
        out.submitted.received,
        out.done.received,
        listed,
        helper.log().args,
      ]);
      for (const secret of secrets)
        assert.equal(everything.includes(secret), false, 'a credential in a msg or log');
    });

    it('a member whose config node is missing is left out with a warning; a pool with none left refuses', async () => {
      sandboxes = await startMembers();
      const { pool, out } = await loadPool(
        sandboxes,
        { pool: { server2: 'missing', server4: 'cc', server5: '' } },
        { up: 2 },
      );
      assert.deepEqual(
        pool.members.map((member) => member.name),
        ['A', 'C'],
        'the missing one left out, a member listed twice once',
      );
      const warned = helper
        .log()
        .args.map(([entry]) => entry)
        .filter((entry) => entry && entry.level === 30 && entry.type === 'graph-gen-pool');
      assert.equal(warned.length, 1, JSON.stringify(warned));
      const sent = await submitTogether(
        out,
        [1, 2, 3, 4].map(() => textToImage()),
      );
      assert.deepEqual(spreadOf(sent), [2, 0, 2]);
      await helper.unload();
      await loadPool(sandboxes, { pool: { server1: 'gone', server2: '', server3: '' } }, { up: 0 });
      const caught = collect('caught');
      helper.getNode('submit').receive({ payload: textToImage() });
      assert.equal((await caught.next()).error.code, 'invalid_input');
      assert.equal(postsTo(sandboxes[0]) + postsTo(sandboxes[2]), 4, 'nothing more was sent');
    });
  });

  describe('statuses', () => {
    /** Whether a status says 2 of 3 servers are up (the catalog's words; its key while the catalog lacks it). */
    function saysTwoOfThree(status) {
      if (!status || status.fill !== 'yellow' || status.shape !== 'ring') return false;
      if (/\b2\b.*\b3\b/.test(status.text)) return true;
      return !catalogHas('graph-gen-pool', 'status.servers-up') && status.text === 'status.servers-up';
    }

    it('with one of three members stopped, the flow nodes say "2 of 3 servers", and stop saying it once it is back', async () => {
      const saved = POOL_TIMINGS.pollMs;
      POOL_TIMINGS.pollMs = 200;
      try {
        sandboxes = await startMembers();
        const { out } = await loadPool(sandboxes);
        const nodes = ['upload', 'submit', 'await', 'download', 'queue'];
        const seen = Object.fromEntries(nodes.map((id) => [id, statuses(id)]));
        const port = Number(new URL(sandboxes[2].url).port);
        await stopMember(sandboxes[2]);
        for (const id of nodes)
          await until(() => saysTwoOfThree(seen[id].at(-1)), `${id} to say 2 of 3 servers`);
        // Meanwhile jobs go to the two up.
        const sent = await submitTogether(
          out,
          [1, 2, 3, 4].map(() => textToImage()),
        );
        assert.deepEqual(spreadOf(sent), [2, 2, 0]);
        // Started again on its address, it is heard again and takes its turn.
        sandboxes[2] = await startSandbox({ port, events: { stepDelayMs: 1 } });
        for (const id of nodes)
          await until(() => !saysTwoOfThree(seen[id].at(-1)), `${id} to stop saying 2 of 3`);
        const again = await submitTogether(
          out,
          [1, 2, 3].map(() => textToImage()),
        );
        assert.ok(
          again.some((msg) => msg.server.name === 'C'),
          'C takes jobs again',
        );
      } finally {
        POOL_TIMINGS.pollMs = saved;
      }
    });
  });
});
