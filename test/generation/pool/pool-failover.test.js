'use strict';
// The server pool when servers fail (issue 29), in a real Node-RED against three sandboxes: a member that is stopped
// or answers 5xx is skipped before the job is sent, and the next one takes it; a submit whose answer was lost is
// settled on its member and never sent to another (a job runs once); a member that loses a job mid-run ends it
// lost, or with "run again elsewhere once" sends it once more to another member; and the pool remembers each job's
// member across a Node-RED restart, for msgs without msg.server and for awaits kept for the restart. Past 400
// lines: each way a server fails is its own story, on one flow and its three servers.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { JobBook } = require('../../../dist/generation/jobs/job-book');
const { sleep, until, collect, withFastSockets } = require('../../support/sockets');
const { textToImage } = require('../../support/node-red');
const {
  NODES,
  poolFlow,
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

const IDS = ['ca', 'cb', 'cc'];
const NAMES = ['A', 'B', 'C'];

/** A job that runs until released (or cancelled), after text-to-image's loader. */
function hanging(extra = {}) {
  return { ...textToImage(), 20: { class_type: 'SandboxHang', inputs: {} }, ...extra };
}

/** How many jobs the three sandboxes have, each. */
const jobCounts = (sandboxes) => sandboxes.map((sandbox) => jobsOn(sandbox).length);

/** Releases the job held on a sandbox once it is held there (a release before the run reaches it is lost). */
async function releaseWhenHeld(sandbox) {
  await until(() => sandbox.events.releaseHangs() > 0, 'a job held to release');
}

/** Warnings the nodes of a type logged. */
function warningsOf(type) {
  return helper
    .log()
    .args.map(([entry]) => entry)
    .filter((entry) => entry && entry.level === 30 && entry.type === type)
    .map((entry) => String(entry.msg));
}

describe('server pool: failover, lost jobs, restarts', function () {
  this.timeout(30_000);
  withFastSockets();
  let sandboxes;
  let savedJobTimings;

  before(async () => {
    savedJobTimings = JobBook.defaultTimings;
    // A job a server forgot is told lost 200 ms after the second "unknown" (2 s in production), and one it never
    // listed after 300 ms (10 s): whether the await heard of the job before its server restarted or not.
    JobBook.defaultTimings = {
      ...savedJobTimings,
      lostConfirmMs: 200,
      unknownGraceMs: 300,
      firstCheckMs: 20,
    };
    await helper.startServer();
  });
  after(async () => {
    JobBook.defaultTimings = savedJobTimings;
    await helper.stopServer();
  });
  afterEach(async () => {
    await helper.unload();
    await closeMembers(sandboxes);
    sandboxes = undefined;
  });

  /** Sends a submitted msg to the await node; resolves to its msg on output 1 or 2. */
  async function awaitEnd(out, submitted, timeoutMs = 8000) {
    const done = out.done.received.length;
    const failed = out.failed.received.length;
    helper.getNode('await').receive(submitted);
    await until(
      () => out.done.received.length > done || out.failed.received.length > failed,
      'the await to end',
      timeoutMs,
    );
    return out.done.received[done] ?? out.failed.received[failed];
  }

  describe('failover before the job is sent', () => {
    it('a stopped member (connection refused) is skipped: the next takes each job at once, and each runs once', async () => {
      sandboxes = await startMembers();
      const { out, pool } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      // Up by its socket, not only by a read it answered (a member whose socket had not opened yet when it
      // stopped is found down at its socket's next try: member-watch's test in pool-routing.test.js).
      await until(
        () => pool.members.every((member) => member.connection.sockets().isOpen),
        'every socket open',
      );
      await stopMember(sandboxes[0]);
      for (let n = 0; n < 3; n++) {
        const started = Date.now();
        const submitted = await submitThrough(out, { payload: textToImage(), topic: n });
        assert.ok(
          Date.now() - started < 2000,
          `sent on in ${Date.now() - started} ms, not held for the stopped one`,
        );
        assert.deepEqual(submitted.server, { id: 'cb', name: 'B' });
        const result = await awaitEnd(out, submitted);
        assert.equal(result.payload.status, 'completed');
        assert.equal(result.topic, n);
      }
      assert.deepEqual(jobCounts(sandboxes), [0, 3, 0]);
      assert.equal(out.done.received.length, 3, 'each job ended once');
      assert.equal(out.caught.received.length, 0);
    });

    it('a member answering 5xx or 429 to the submit is skipped: the next takes the job, and it runs once', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      sandboxes[0].faults.add({
        method: 'POST',
        path: '/api/prompt',
        status: 503,
        body: { message: 'overloaded' },
      });
      sandboxes[0].faults.add({
        method: 'POST',
        path: '/api/prompt',
        status: 500,
        body: { message: 'boom' },
      });
      sandboxes[0].faults.add({ method: 'POST', path: '/api/prompt', status: 429, retryAfter: 0 });
      const results = [];
      for (let n = 0; n < 3; n++) {
        const submitted = await submitThrough(out, { payload: textToImage() });
        assert.equal(submitted.server.name, 'B');
        results.push(await awaitEnd(out, submitted));
      }
      assert.deepEqual(
        results.map((msg) => msg.payload.status),
        ['completed', 'completed', 'completed'],
      );
      assert.equal(postsTo(sandboxes[0]), 3, 'A was tried for each and refused each');
      assert.deepEqual(jobCounts(sandboxes), [0, 3, 0], 'each job runs once, on B');
      // A that answers again takes the next one ('first': the first up in the list).
      const next = await submitThrough(out, { payload: textToImage() });
      assert.equal(next.server.name, 'A');
    });

    it('when every member refuses, the job fails with each member’s refusal, and none runs it', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes);
      for (const sandbox of sandboxes)
        sandbox.faults.add({
          method: 'POST',
          path: '/api/prompt',
          status: 503,
          body: { message: 'overloaded' },
        });
      helper.getNode('submit').receive({ payload: textToImage() });
      const caught = await out.caught.next();
      assert.equal(caught.error.code, 'server_error');
      assert.match(caught.error.message, /no server of the pool could take the job: /);
      for (const name of NAMES) assert.match(caught.error.message, new RegExp(`\\b${name}: `));
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 1, 1],
      );
      assert.deepEqual(jobCounts(sandboxes), [0, 0, 0]);
    });

    it('members known down are tried last, each refused connection passing the job on to the next', async () => {
      sandboxes = await startMembers();
      await stopMember(sandboxes[0]);
      await stopMember(sandboxes[1]);
      const { out } = await loadPool(sandboxes, {}, { up: 1 });
      sandboxes[2].faults.add({
        method: 'POST',
        path: '/api/prompt',
        status: 503,
        body: { message: 'overloaded' },
      });
      helper.getNode('submit').receive({ payload: textToImage() });
      const caught = await out.caught.next();
      // C, the one up, first; then A and B, down, in the listed order, each refusing the connection.
      assert.match(caught.error.message, /no server of the pool could take the job: C: .*; A: .*; B: .*/);
      assert.equal(caught.error.code, 'network', 'the last refusal');
      assert.equal(postsTo(sandboxes[2]), 1);
      // C answers again: it takes the next.
      const next = await submitThrough(out, { payload: textToImage() });
      assert.equal(next.server.name, 'C');
    });

    it('a member whose refusal may have reached it (a 400 for its workflow) is not skipped: the refusal is the answer', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      const broken = textToImage();
      delete broken[3].inputs.steps;
      helper.getNode('submit').receive({ payload: broken });
      const caught = await out.caught.next();
      assert.equal(caught.error.code, 'invalid_request');
      assert.match(caught.error.message, /Required input is missing "steps"/);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 0, 0],
      );
    });
  });

  describe('a submit whose answer was lost', () => {
    it('is asked for on its member and not sent to another: the job runs once, there', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      // A takes the job, and the connection breaks before its answer.
      sandboxes[0].faults.add({ method: 'POST', path: '/api/prompt', breakAfterBytes: 0 });
      const submitted = await submitThrough(out, { payload: textToImage() }, 15_000);
      assert.deepEqual(submitted.server, { id: 'ca', name: 'A' });
      assert.deepEqual(jobsOn(sandboxes[0]), [submitted.prompt_id]);
      assert.ok(
        sandboxes[0].counters.requests.some(
          (seen) => seen.method === 'GET' && seen.path.includes(submitted.prompt_id),
        ),
        'A was asked for the job by its id',
      );
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 0, 0],
        'not sent to another member',
      );
      const result = await awaitEnd(out, submitted);
      assert.equal(result.payload.status, 'completed');
      assert.equal(result.server.name, 'A');
      assert.deepEqual(jobCounts(sandboxes), [1, 0, 0]);
    });

    it('that its member cannot be asked about fails with a sentence, and is still not sent to another', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      sandboxes[0].faults.add({ method: 'POST', path: '/api/prompt', breakAfterBytes: 0 });
      // Every way of asking A about a job is refused (a proxy in front of it).
      sandboxes[0].faults.add({
        method: 'GET',
        path: /^\/api\/(jobs|job|history|history_v2|queue)(\/|$)/,
        status: 403,
        body: 'Forbidden',
        times: Infinity,
      });
      helper.getNode('submit').receive({ payload: textToImage() });
      const caught = await out.caught.next(1, 25_000);
      assert.equal(caught.error.code, 'network');
      assert.match(
        caught.error.message,
        /could not tell whether it has job [0-9a-f-]{36}, so it was not sent again/,
      );
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 0, 0],
        'not sent to another member',
      );
      assert.deepEqual(jobCounts(sandboxes), [1, 0, 0], 'A has it, once');
    });
  });

  describe('a member that loses a job mid-run', () => {
    it('without "run again elsewhere once": the await ends lost, on output 2, naming its member; nothing is sent again', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, { pool: { strategy: 'first' } });
      const submitted = await submitThrough(out, { payload: hanging() });
      assert.equal(submitted.server.name, 'A');
      await until(() => sandboxes[0].jobs.running().length === 1, 'the job to run on A');
      const ended = awaitEnd(out, submitted);
      sandboxes[0].events.restart();
      const result = await ended;
      assert.equal(result.payload.status, 'failed');
      assert.equal(result.payload.error.exception_type, 'JobLost');
      assert.deepEqual(result.server, { id: 'ca', name: 'A' });
      assert.equal(result.attempt, undefined, 'tries are counted only when it may run again');
      assert.equal(out.done.received.length, 0);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 0, 0],
      );
    });

    it('with "run again elsewhere once": sent once more to another member; the result comes on output 1 with msg.attempt 2', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, {
        pool: { strategy: 'first' },
        awaitProps: { runAgain: true },
      });
      const submitted = await submitThrough(out, { payload: hanging(), topic: 'fox' });
      assert.equal(submitted.server.name, 'A');
      const lostId = submitted.prompt_id;
      await until(() => sandboxes[0].jobs.running().length === 1, 'the job to run on A');
      helper.getNode('await').receive(submitted);
      sandboxes[0].events.restart();
      // Sent again: to B (the first in the list up and able, A left out), where it runs until released.
      await until(() => jobsOn(sandboxes[1]).length === 1, 'the job to be sent again');
      await releaseWhenHeld(sandboxes[1]);
      const result = await out.done.next(1, 10_000);
      assert.equal(result.payload.status, 'completed');
      assert.equal(result.attempt, 2);
      assert.deepEqual(result.server, { id: 'cb', name: 'B' });
      assert.equal(result.topic, 'fox');
      assert.notEqual(result.prompt_id, lostId, 'a new job');
      assert.deepEqual(jobsOn(sandboxes[1]), [result.prompt_id]);
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 1, 0],
        'sent again once',
      );
      await sleep(200);
      assert.equal(out.failed.received.length, 0, 'the loss itself is not sent');
      assert.equal(out.done.received.length, 1);
    });

    it('run again once only: lost on its second member too, the await ends lost on output 2 with msg.attempt 2', async () => {
      sandboxes = await startMembers();
      const { out } = await loadPool(sandboxes, {
        pool: { strategy: 'first' },
        awaitProps: { runAgain: true },
      });
      const submitted = await submitThrough(out, { payload: hanging() });
      await until(() => sandboxes[0].jobs.running().length === 1, 'the job to run on A');
      helper.getNode('await').receive(submitted);
      sandboxes[0].events.restart();
      await until(() => sandboxes[1].jobs.running().length === 1, 'the job to run again on B');
      sandboxes[1].events.restart();
      const result = await out.failed.next(1, 10_000);
      assert.equal(result.payload.error.exception_type, 'JobLost');
      assert.equal(result.attempt, 2);
      assert.equal(result.server.name, 'B');
      assert.equal(postsTo(sandboxes[2]), 0, 'not a third time');
    });

    it('with "run again elsewhere once" and no other member able to run it: it ends lost, and the node says why', async () => {
      const onlyOnA = {
        input: { required: {} },
        output: ['IMAGE'],
        name: 'OnlyOnA',
        display_name: 'Only on A',
        category: 'test',
        output_node: false,
      };
      sandboxes = await startMembers([{ generation: { nodeDefinitions: { OnlyOnA: onlyOnA } } }]);
      const { out } = await loadPool(sandboxes, { awaitProps: { runAgain: true } });
      const submitted = await submitThrough(out, {
        payload: hanging({ 21: { class_type: 'OnlyOnA', inputs: {} } }),
      });
      assert.equal(submitted.server.name, 'A');
      await until(() => sandboxes[0].jobs.running().length === 1, 'the job to run on A');
      helper.getNode('await').receive(submitted);
      sandboxes[0].events.restart();
      const result = await out.failed.next(1, 10_000);
      assert.equal(result.payload.error.exception_type, 'JobLost');
      assert.equal(result.attempt, 1);
      assert.equal(result.server.name, 'A');
      assert.deepEqual(
        sandboxes.map((sandbox) => postsTo(sandbox)),
        [1, 0, 0],
      );
      const said = warningsOf('graph-gen-await-job');
      if (catalogHas('graph-gen-await-job', 'warnings.not-run-again')) {
        const text = said.join('\n');
        assert.match(text, new RegExp(submitted.prompt_id));
        assert.match(text, /A lost the job before; B lacks node class OnlyOnA; C lacks node class OnlyOnA/);
      } else assert.ok(said.includes('warnings.not-run-again'), said.join('\n'));
    });
  });

  describe('after a restart of Node-RED', () => {
    const userDir = () => helper._settings?.userDir ?? helper._RED.settings.userDir;
    const homesFile = () => path.join(userDir(), 'graph-gen', 'pool-p.jsonl');

    it('a msg without msg.server finds its job on its member: the pool kept where each job went', async () => {
      sandboxes = await startMembers();
      let { out } = await loadPool(sandboxes);
      const sent = [];
      for (let n = 0; n < 3; n++) sent.push(await submitThrough(out, { payload: hanging() }));
      assert.deepEqual(jobCounts(sandboxes), [1, 1, 1]);
      await until(() => fs.existsSync(homesFile()), 'the job homes to be written');
      await helper.unload();
      ({ out } = await loadPool(sandboxes));
      // At once after the start: the file is read before a job's member is looked up.
      for (const submitted of sent) {
        const { server, ...lost } = submitted;
        assert.ok(server);
        helper.getNode('await').receive(lost);
      }
      for (const sandbox of sandboxes) await releaseWhenHeld(sandbox);
      await until(() => out.done.received.length + out.caught.received.length >= 3, 'the awaits to end');
      assert.deepEqual(
        out.caught.received.map((msg) => msg.error.message),
        [],
      );
      for (const result of out.done.received) {
        const where = whereIs(sandboxes, result.prompt_id);
        assert.deepEqual(result.server, { id: IDS[where], name: NAMES[where] });
        assert.deepEqual(result.server, sent.find((msg) => msg.prompt_id === result.prompt_id).server);
      }
    });

    it('awaits kept for the restart resume on their members, with or without msg.server', async () => {
      sandboxes = await startMembers();
      let { out } = await loadPool(sandboxes);
      const sent = [];
      for (let n = 0; n < 3; n++) sent.push(await submitThrough(out, { payload: hanging(), topic: n }));
      // Two awaited as the submit node sent them, one that lost msg.server on the way.
      helper.getNode('await').receive(sent[0]);
      helper.getNode('await').receive(sent[1]);
      const { server, ...lost } = sent[2];
      assert.ok(server);
      helper.getNode('await').receive(lost);
      const kept = path.join(userDir(), 'graph-gen', 'await-job-await.jsonl');
      await until(
        () => fs.existsSync(kept) && fs.readFileSync(kept, 'utf8').trim().split('\n').length >= 3,
        'the awaits to be kept',
      );
      await helper.unload();
      await helper.load(NODES, poolFlow(sandboxes), {});
      out = { done: collect('done'), failed: collect('failed'), caught: collect('caught') };
      for (const sandbox of sandboxes) await releaseWhenHeld(sandbox);
      await out.done.next(3);
      for (const result of out.done.received) {
        assert.equal(result.resumed, true);
        const original = sent.find((msg) => msg.prompt_id === result.prompt_id);
        assert.equal(result.topic, original.topic);
        assert.deepEqual(result.server, original.server, 'awaited on the member that runs it');
      }
      await sleep(200);
      assert.equal(out.done.received.length, 3, 'each once');
      assert.equal(out.failed.received.length, 0);
      assert.deepEqual(
        warningsOf('graph-gen-await-job').filter((text) => /pool/.test(text)),
        [],
        'no await was dropped for want of its member',
      );
    });
  });
});
