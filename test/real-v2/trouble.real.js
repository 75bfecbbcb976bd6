'use strict';
// The real Comfy API v2 server under trouble, through a real Node-RED flow: a submit whose outcome is uncertain (a
// TCP relay between Node-RED and the proxy loses the answer, or cuts the request before its body), and more
// awaits with progress at once than the proxy has event streams (8 for all its callers together).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { v2 } = require('./support/v2');
const { jobOf, jobReaches, listJobs, settle, prefix, blurJob, quickJob, sleep } = require('./support/api');
const { loadFlow, submitThrough, endOf, eventStreams } = require('./support/flow');
const { startTcpProxy } = require('../support/tcp-proxy');

/** The proxy's jobs whose outputs (or, for a job without any yet, nothing) name files of `filenamePrefix`. */
async function jobsSaving(filenamePrefix) {
  const jobs = await listJobs();
  return jobs.filter((job) => job.outputs.some((item) => item.name.startsWith(filenamePrefix)));
}

const SUBMIT = /^POST \/api\/v2\/jobs HTTP\/1\.1/m;
/** The progress msgs a job's event stream makes (`queue` comes from polling). */
const STREAM_TOPICS = new Set(['execution_start', 'progress', 'progress_state', 'preview', 'executed']);

describe('real Comfy API v2: trouble on the way', function () {
  let relay;

  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  beforeEach(async () => {
    const { hostname, port } = new URL(v2.url);
    relay = await startTcpProxy({ host: hostname, port: Number(port) });
  });
  afterEach(async () => {
    await helper.unload();
    await relay.close();
    await settle();
  });

  it('a submit whose answer was lost is found by its key, not sent again: one job, run once', async () => {
    const name = prefix('lost-answer');
    const out = await loadFlow(relay.url);
    const before = (await listJobs()).length;
    relay.loseAnswerTo(SUBMIT);
    const { id, sentAt, answeredAt } = await submitThrough(out, quickJob(name));
    assert.equal(relay.counters.answersLost, 1, 'the answer was lost on the way');
    const done = await endOf(out, id, 30_000);
    assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
    assert.deepEqual(
      done.payload.files.map((file) => file.filename),
      [`${name}_00001_.png`],
      'run once: the first file of its prefix',
    );
    const jobs = await listJobs();
    assert.equal(jobs.length, before + 1, 'one job more on the server');
    assert.equal(jobs[0].id, id, 'the job the submit node named');
    assert.deepEqual(
      (await jobsSaving(name)).map((job) => job.id),
      [id],
    );
    out.caught.received.forEach((msg) => assert.fail(`caught: ${msg.error.message}`));
    process.stdout.write(
      `      (answer lost: the submit node sent its msg ${answeredAt - sentAt} ms after the submit, result ${done.receivedAt - sentAt} ms)\n`,
    );
  });

  it('a submit cut before its body reached the server is sent again once: one job, run once', async () => {
    const name = prefix('cut-body');
    const out = await loadFlow(relay.url);
    const before = (await listJobs()).length;
    relay.cutBodyOf(SUBMIT);
    const { id, sentAt, answeredAt } = await submitThrough(out, quickJob(name), {}, 30_000);
    assert.equal(relay.counters.bodiesCut, 1, 'the first request lost its body');
    const done = await endOf(out, id, 30_000);
    assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
    assert.deepEqual(
      done.payload.files.map((file) => file.filename),
      [`${name}_00001_.png`],
    );
    const jobs = await listJobs();
    assert.equal(jobs.length, before + 1, 'one job more on the server');
    assert.equal(jobs[0].id, id);
    out.caught.received.forEach((msg) => assert.fail(`caught: ${msg.error.message}`));
    process.stdout.write(
      `      (body cut: sent again, the submit node sent its msg ${answeredAt - sentAt} ms after the submit, result ${done.receivedAt - sentAt} ms)\n`,
    );
  });

  if (v2.restartProxy) {
    it('the proxy restarted mid-job (its state kept): the await completes once, with the output', async () => {
      const out = await loadFlow(relay.url, { await: { progress: true } });
      const { id, sentAt } = await submitThrough(out, blurJob(prefix('proxy-restart'), { blurs: 3 }));
      await jobReaches(id, 'running', 30_000);
      await out.progress.find((m) => m.prompt_id === id, 'a progress msg', 15_000);
      const restartedAt = Date.now();
      await v2.restartProxy();
      const back = Date.now();
      const done = await endOf(out, id, 60_000);
      assert.equal(done.payload.status, 'completed', JSON.stringify(done.payload));
      assert.equal(done.payload.files.length, 1);
      assert.equal(done.payload.files[0].asset_id, (await jobOf(id)).outputs[0].id);
      await sleep(500);
      assert.equal(out.done.received.filter((m) => m.prompt_id === id).length, 1, 'ended once');
      assert.equal(out.failed.received.length, 0);
      process.stdout.write(
        `      (proxy down ${back - restartedAt} ms; result ${done.receivedAt - back} ms after it answered again, ` +
          `${done.receivedAt - sentAt} ms after the submit; streams ${JSON.stringify(eventStreams().stats)})\n`,
      );
    });
  } else {
    process.stdout.write(
      '  left out: "the proxy restarted mid-job": V2_URL names a server this suite did not start\n',
    );
  }

  it('nine awaits with progress at once (one more than the proxy’s 8 streams) all complete, each with progress', async () => {
    const out = await loadFlow(relay.url, { await: { progress: true } });
    let most = 0;
    const sampler = setInterval(() => {
      most = Math.max(most, eventStreams().openStreams);
    }, 25);
    try {
      const name = prefix('nine');
      const submitted = [];
      // The first runs about 2.5 s, long enough for all nine awaits to want a stream at once; the others are short.
      for (let index = 1; index <= 9; index++) {
        const shape = index === 1 ? { blurs: 2 } : { blurs: 1, size: 64, radius: 3 };
        submitted.push(await submitThrough(out, blurJob(`${name}-${index}`, shape)));
      }
      const began = submitted[0].sentAt;
      const ends = [];
      for (const { id } of submitted) {
        const msg = await endOf(out, id, 120_000);
        assert.equal(msg.payload.status, 'completed', JSON.stringify(msg.payload));
        assert.equal(msg.payload.files.length, 1);
        ends.push(msg.receivedAt - began);
      }
      await sleep(300);
      const stats = { ...eventStreams().stats };
      const kinds = {};
      const withoutStreamEvents = [];
      for (const [index, { id }] of submitted.entries()) {
        const topics = out.progress.received.filter((m) => m.prompt_id === id).map((m) => m.topic);
        if (!topics.some((topic) => STREAM_TOPICS.has(topic)))
          withoutStreamEvents.push(`${index + 1}: ${topics.join(' ')}`);
        for (const topic of new Set(topics)) kinds[topic] = (kinds[topic] ?? 0) + 1;
      }
      // The long job's stream was open while it ran: its live progress came.
      const first = out.progress.received.filter((m) => m.prompt_id === submitted[0].id).map((m) => m.topic);
      assert.ok(first.includes('progress') || first.includes('progress_state'), `job 1: ${first.join(' ')}`);
      // A short job's live progress may all fall in the proxy's 0.5 s throttle, and its outputs come after its final
      // status: when the REST read of that final status ends the job first, its stream closes before them (measured:
      // 1 short job of 8 in about one run in three). More than one such job is not that race.
      assert.ok(
        withoutStreamEvents.length <= 1,
        `jobs with no event from their stream: ${withoutStreamEvents.join('; ')}`,
      );
      assert.ok(most <= 8, `${most} streams open at once`);
      assert.equal(most, 8, 'all eight streams were used');
      assert.ok(stats.streamsOpened >= 9, JSON.stringify(stats));
      assert.equal(stats.streamsRefused, 0, `no 429: ${JSON.stringify(stats)}`);
      assert.equal(eventStreams().openStreams, 0, 'no stream left open');
      process.stdout.write(
        `      (nine jobs, results at ${ends.join(', ')} ms; streams: at most ${most} open at once, ${JSON.stringify(stats)}; ` +
          `jobs with each progress kind ${JSON.stringify(kinds)})\n`,
      );
    } finally {
      clearInterval(sampler);
    }
  });
});
