'use strict';
// Awaits outlive Node-RED on Comfy API v2: a real Node-RED process (its own user dir, this package linked in, the
// token in its encrypted credentials) awaits a job on the real proxy, is stopped with SIGTERM or killed with
// SIGKILL, and started again: the job's result goes out once, with the msg it came with and `msg.resumed`,
// whether the job ended while Node-RED was down or after it came back.
const assert = require('node:assert/strict');
const { v2 } = require('./support/v2');
const { v2Config } = require('./support/flow');
const { jobOf, jobReaches, settle, prefix, blurJob, until, made, sleep } = require('./support/api');
const { resumeHarness } = require('../real/support/restarts');

describe('real Comfy API v2: awaits resume after Node-RED restarts (a real Node-RED process)', function () {
  this.timeout(180_000);
  const nodeRed = resumeHarness({
    configNode: () => v2Config(v2.url),
    credentials: () => (v2.token ? { apiKey: v2.token } : undefined),
    tmpPrefix: 'graph-gen-resume-v2-',
    jobRuns: (id) => jobReaches(id, 'running', 60_000),
    made,
    until,
  });
  const { startNodeRed, endNodeRed, firstResult } = nodeRed;

  beforeEach(() => nodeRed.setUp());
  afterEach(async () => {
    await nodeRed.tearDown();
    await settle();
  });

  /** Submits a slow job through the flow; resolves to its id once the server runs it and the await is kept. */
  const submitRunning = (name, blurs) => nodeRed.submitRunning(blurJob(prefix(name), { blurs }));

  it('SIGTERM: a job that ends while Node-RED is down is sent once after the restart, with its msg and msg.resumed', async () => {
    const id = await submitRunning('resume-down', 2);
    await endNodeRed('SIGTERM');
    await jobReaches(id, 'succeeded', 60_000);
    const restarted = Date.now();
    await startNodeRed();
    const [line] = await firstResult();
    process.stdout.write(
      `      (SIGTERM, ended while down: result ${line.at - restarted} ms after the restart began)\n`,
    );
    assert.equal(line.prompt_id, id);
    assert.equal(line.status, 'completed');
    assert.equal(line.files.length, 1, JSON.stringify(line));
    assert.equal(line.files[0].asset_id, (await jobOf(id)).outputs[0].id, 'the file names its v2 asset');
    assert.equal(line.resumed, true);
    assert.equal(line.mine, 42, 'the msg it came with');
    assert.equal(line.live, false, 'the HTTP request is not kept');
    await sleep(1000);
    assert.equal(nodeRed.results().length, 1, 'sent once');
  });

  it('SIGKILL: a job still running after the restart is sent once when it ends', async () => {
    const id = await submitRunning('resume-up', 3);
    await endNodeRed('SIGKILL');
    const restarted = Date.now();
    await startNodeRed();
    const job = await jobReaches(id, 'succeeded', 60_000);
    const endedSeen = Date.now();
    const [line] = await firstResult();
    process.stdout.write(
      `      (SIGKILL, ended after the restart: result ${line.at - restarted} ms after the restart began, ` +
        `${line.at - endedSeen} ms after a poll here saw the job succeeded)\n`,
    );
    assert.equal(line.prompt_id, id);
    assert.equal(line.status, 'completed');
    assert.equal(line.files[0].asset_id, job.outputs[0].id);
    assert.equal(line.resumed, true);
    assert.equal(line.mine, 42);
    await sleep(1000);
    assert.equal(nodeRed.results().length, 1, 'sent once');
  });
});
