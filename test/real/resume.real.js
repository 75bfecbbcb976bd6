'use strict';
// Awaits outlive Node-RED: a real Node-RED process (its own user dir, this package linked in) awaits a job on the
// real ComfyUI, is stopped with SIGTERM or killed with SIGKILL, and started again: the job's result goes out once,
// with the msg it came with and `msg.resumed`, whether the job ended while Node-RED was down or after it came back.
const assert = require('node:assert/strict');
const { comfy } = require('./support/comfy');
const { jobReaches, settle, prefix, longJob, until, made } = require('./support/server');
const { resumeHarness } = require('./support/restarts');

describe('real ComfyUI: awaits resume after Node-RED restarts (a real Node-RED process)', function () {
  this.timeout(180_000);
  const nodeRed = resumeHarness({
    configNode: () => ({
      id: 'cfg',
      type: 'graph-gen-config',
      baseUrl: comfy.url,
      partnerKeyField: 'api_key_service_org',
    }),
    tmpPrefix: 'graph-gen-resume-',
    jobRuns: (id) => jobReaches(id, 'in_progress', 60_000),
    made,
    until,
  });
  const { startNodeRed, endNodeRed, firstResult } = nodeRed;

  beforeEach(() => nodeRed.setUp());
  afterEach(async () => {
    await nodeRed.tearDown();
    await settle();
  });

  /** Submits a long job through the flow; resolves to its prompt id once the server runs it. */
  const submitRunning = (name) => nodeRed.submitRunning(longJob(prefix(name), { blurs: 4 }));

  for (const signal of ['SIGTERM', 'SIGKILL']) {
    it(`${signal}: a job that ends while Node-RED is down is sent once after the restart, with its msg and msg.resumed`, async () => {
      const id = await submitRunning(`resume-down-${signal}`);
      await endNodeRed(signal);
      await jobReaches(id, 'completed', 60_000);
      const restarted = Date.now();
      await startNodeRed();
      const [line] = await firstResult();
      process.stdout.write(
        `      (${signal}, ended while down: result ${line.at - restarted} ms after the restart began)\n`,
      );
      assert.equal(line.prompt_id, id);
      assert.equal(line.status, 'completed');
      assert.ok(line.files.length >= 1, JSON.stringify(line));
      assert.equal(line.resumed, true);
      assert.equal(line.mine, 42, 'the msg it came with');
      assert.equal(line.live, false, 'the HTTP request is not kept');
      await new Promise((resolve) => setTimeout(resolve, 1000));
      assert.equal(nodeRed.results().length, 1, 'sent once');
    });

    it(`${signal}: a job still running after the restart is sent once when it ends`, async () => {
      const id = await submitRunning(`resume-up-${signal}`);
      await endNodeRed(signal);
      const restarted = Date.now();
      await startNodeRed();
      const job = await jobReaches(id, 'completed', 60_000);
      const [line] = await firstResult();
      process.stdout.write(
        `      (${signal}, ended after the restart: result ${line.at - restarted} ms after the restart began, ${line.at - job.execution_end_time} ms after the job ended)\n`,
      );
      assert.equal(line.prompt_id, id);
      assert.equal(line.status, 'completed');
      assert.equal(line.resumed, true);
      assert.equal(line.mine, 42);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      assert.equal(nodeRed.results().length, 1, 'sent once');
    });
  }
});
