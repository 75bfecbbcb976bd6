'use strict';
// A pool of two real ComfyUIs (support/pool.js) losing one mid-run: the server running a job is stopped with its
// kit's stop.sh. New jobs go to the other; the job it ran ends lost (output 2, JobLost) once it is started again
// (ComfyUI keeps its queue in memory: started again, it knows none of its earlier jobs, and only a server that
// answers can say it does not know a job); with the await's "run again elsewhere once" that job runs again on the
// other server instead (msg.attempt 2). Started again, the stopped server takes jobs again.
// The pool takes plain turns here: the stopped server would get every other new job if the pool still took it
// for up (with `soonest`, its running job alone would send new jobs to the other one).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { uniquePrefix, quickJob, blurJob, until, sleep } = require('../real/support/workflows');
const { servers, start, stop, historyOf, jobOf, runsOn, settle } = require('./support/pool');
const { loadPoolFlow, submitAll, resultOf, spreadOf } = require('./support/pool-flow');

const prefix = (name) => uniquePrefix('pool', name);

/** A job of 8 blurs at 256² (about 10 s here): long enough for a stop to land while it runs. */
const longJob = (name) => blurJob(prefix(name), { blurs: 8 });

/** Asserts each msg's job completed on `server` (its result, and that server's history). */
async function assertCompletedOn(out, msgs, server) {
  for (const msg of msgs) {
    assert.equal(msg.server.id, server.key, `job ${msg.prompt_id} went to ${msg.server.name}`);
    const { msg: result, output } = await resultOf(out, msg.prompt_id, 120_000);
    assert.equal(output, 1, `job ${msg.prompt_id}: ${JSON.stringify(result.payload)}`);
    assert.equal(result.payload.status, 'completed');
    assert.ok(
      await historyOf(server, msg.prompt_id),
      `${server.name} has job ${msg.prompt_id} in its history`,
    );
  }
}

function quickJobs(count, name) {
  return Array.from({ length: count }, (_, index) => quickJob(prefix(`${name}-${index}`)));
}

describe('real pool of ComfyUI v0.8.0 and v0.33.0: a server stopped mid-run', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async function () {
    this.timeout(300_000);
    await helper.unload();
    // Starts again a server a failed test left stopped.
    await settle();
  });

  it('sends new jobs to the other server, ends the job it ran as lost once it answers again, and gives it jobs again once started', async function () {
    this.timeout(360_000);
    const stopped = servers.old;
    const other = servers.new;
    const out = await loadPoolFlow({ pool: { strategy: 'turns' } });
    const [long] = await submitAll(out, [longJob('lost')], { server: { id: stopped.key } });
    await runsOn(stopped, long.prompt_id);

    const stopFrom = Date.now();
    await stop(stopped);
    const downAt = Date.now();
    const during = await submitAll(out, quickJobs(4, 'during'));
    const submittedDuring = Date.now() - downAt;
    assert.deepEqual(
      spreadOf(during),
      { [stopped.key]: 0, [other.key]: 4 },
      'every new job went to the other',
    );
    await assertCompletedOn(out, during, other);
    // Down, it cannot say it lost the job: the await waits.
    assert.equal(
      out.done.received.length + out.failed.received.length,
      during.length,
      'only the new jobs ended',
    );
    const downFor = Date.now() - downAt;

    const startFrom = Date.now();
    await start(stopped);
    const upAt = Date.now();
    const { msg: lost, output } = await resultOf(out, long.prompt_id, 120_000);
    assert.equal(output, 2, JSON.stringify(lost.payload));
    assert.equal(lost.payload.status, 'failed');
    assert.equal(lost.payload.error?.exception_type, 'JobLost', JSON.stringify(lost.payload.error));
    assert.deepEqual(lost.server, { id: stopped.key, name: stopped.name });
    assert.equal(
      await historyOf(stopped, long.prompt_id),
      undefined,
      'started again, it knows the job no more',
    );
    const lostAfterUp = lost.receivedAt - upAt;

    // Started again: the pool gives it jobs again once it sees it up (its socket, or its next queue read).
    let firstBack;
    await until(
      async () => {
        const pair = await submitAll(out, quickJobs(2, 'back'));
        firstBack = pair.find((msg) => msg.server.id === stopped.key);
        return firstBack;
      },
      `a new job to go to ${stopped.name} again`,
      60_000,
      500,
    );
    const backAfterUp = Date.now() - upAt;
    const again = await submitAll(out, quickJobs(6, 'again'));
    const spread = spreadOf(again);
    assert.ok(spread[stopped.key] >= 2, `of 6 after its return: ${JSON.stringify(spread)}`);
    await assertCompletedOn(out, [firstBack], stopped);
    await assertCompletedOn(
      out,
      again.filter((msg) => msg.server.id === stopped.key),
      stopped,
    );
    await assertCompletedOn(
      out,
      again.filter((msg) => msg.server.id === other.key),
      other,
    );
    process.stdout.write(
      `      ${stopped.name} stopped in ${downAt - stopFrom} ms; 4 jobs while down all on ${other.name} ` +
        `(submitted in ${submittedDuring} ms); down ${downFor} ms; started in ${upAt - startFrom} ms; ` +
        `lost job ended ${lostAfterUp} ms after it answered; took a job again ${backAfterUp} ms after; ` +
        `6 then: ${JSON.stringify(spread)}\n`,
    );
  });

  it('with "run again elsewhere once", runs the job the stopped server lost again on the other (msg.attempt 2)', async function () {
    this.timeout(360_000);
    const stopped = servers.new;
    const other = servers.old;
    const out = await loadPoolFlow({ pool: { strategy: 'turns' }, awaitProps: { runAgain: true } });
    const [long] = await submitAll(out, [longJob('again')], { server: { id: stopped.key } });
    await runsOn(stopped, long.prompt_id);

    const stopFrom = Date.now();
    await stop(stopped);
    const downAt = Date.now();
    // Down for a while (as long as the 4 jobs of the test before took): nothing to say yet.
    await sleep(3_000);
    assert.equal(out.done.received.length + out.failed.received.length, 0, 'no result while it is down');
    const startFrom = Date.now();
    await start(stopped);
    const upAt = Date.now();

    const { msg, output } = await until(
      () => {
        const done = out.done.received.find((m) => m.topic === long.topic);
        if (done) return { msg: done, output: 1 };
        const failed = out.failed.received.find((m) => m.topic === long.topic);
        return failed ? { msg: failed, output: 2 } : undefined;
      },
      'the job run again to end',
      180_000,
    );
    assert.equal(output, 1, JSON.stringify(msg.payload));
    assert.equal(msg.payload.status, 'completed');
    assert.equal(msg.attempt, 2);
    assert.deepEqual(msg.server, { id: other.key, name: other.name }, 'run again on the other server');
    assert.notEqual(msg.prompt_id, long.prompt_id, 'a new job');
    assert.equal(msg.payload.prompt_id, msg.prompt_id);
    assert.ok(await historyOf(other, msg.prompt_id), `${other.name} ran it`);
    assert.equal(await historyOf(other, long.prompt_id), undefined, `${other.name} never had the first`);
    assert.equal(await historyOf(stopped, long.prompt_id), undefined, `${stopped.name} forgot the first`);
    assert.equal(await historyOf(stopped, msg.prompt_id), undefined, `${stopped.name} never had the second`);
    assert.equal(out.failed.received.length, 0, 'nothing on output 2');
    assert.equal(out.caught.received.length, 0);
    const saved = msg.payload.files.map((file) => file.filename);
    assert.equal(saved.length, 1);
    assert.ok(saved[0].startsWith(long.workflow[9].inputs.filename_prefix), saved[0]);
    // When the server took the job again (its own clock: create_time, ms since the epoch, on this machine).
    const sentAgainAt = (await jobOf(other, msg.prompt_id))?.create_time;
    process.stdout.write(
      `      ${stopped.name} stopped in ${downAt - stopFrom} ms, started in ${upAt - startFrom} ms; ` +
        `the job was sent again to ${other.name} ${sentAgainAt - upAt} ms after ${stopped.name} answered ` +
        `and ended ${msg.receivedAt - upAt} ms after\n`,
    );
  });
});
