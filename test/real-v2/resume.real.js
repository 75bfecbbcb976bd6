'use strict';
// Awaits outlive Node-RED on Comfy API v2: a real Node-RED process (its own user dir, this package linked in, the
// token in its encrypted credentials) awaits a job on the real proxy, is stopped with SIGTERM or killed with
// SIGKILL, and started again: the job's result goes out once, with the msg it came with and `msg.resumed`,
// whether the job ended while Node-RED was down or after it came back.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { v2 } = require('./support/v2');
const { v2Config } = require('./support/flow');
const { jobOf, jobReaches, settle, prefix, blurJob, until, made, sleep } = require('./support/api');
const start = require('../../scripts/start.js');

/**
 * The flow: POST /go {workflow, mine} -> submit -> await; the await's results are appended as JSON lines to
 * `results` by a file node, and the job id is the HTTP answer.
 */
function resumeFlow(results) {
  const z = 'resume';
  return [
    { id: z, type: 'tab', label: 'resume on v2' },
    v2Config(v2.url),
    { id: 'in', z, type: 'http in', url: '/go', method: 'post', wires: [['prep']] },
    {
      id: 'prep',
      z,
      type: 'function',
      func: 'msg.mine = msg.payload.mine;\nmsg.payload = msg.payload.workflow;\nreturn msg;',
      outputs: 1,
      wires: [['submit']],
    },
    { id: 'submit', z, type: 'graph-gen-submit', server: 'cfg', wires: [['await', 'answer']] },
    {
      id: 'answer',
      z,
      type: 'function',
      func: 'msg.payload = { prompt_id: msg.prompt_id };\nreturn msg;',
      outputs: 1,
      wires: [['respond']],
    },
    { id: 'respond', z, type: 'http response', statusCode: '', wires: [] },
    {
      id: 'await',
      z,
      type: 'graph-gen-await-job',
      server: 'cfg',
      timeout: '0',
      timeoutType: 'num',
      wires: [['line'], ['line'], []],
    },
    {
      id: 'line',
      z,
      type: 'function',
      func:
        'msg.payload = JSON.stringify({ prompt_id: msg.prompt_id, status: msg.payload.status, files: msg.payload.files,' +
        ' resumed: msg.resumed === true, mine: msg.mine, live: msg.req !== undefined, at: Date.now() });\nreturn msg;',
      outputs: 1,
      wires: [['results-file']],
    },
    {
      id: 'results-file',
      z,
      type: 'file',
      filename: results,
      filenameType: 'str',
      appendNewline: true,
      createDir: true,
      overwriteFile: 'false',
      encoding: 'none',
      wires: [],
    },
  ];
}

/** The lines the file node wrote so far. */
function resultsIn(file) {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

describe('real Comfy API v2: awaits resume after Node-RED restarts (a real Node-RED process)', function () {
  this.timeout(180_000);
  let tmp;
  let userDir;
  let results;
  let port;
  let nodeRed;

  async function startNodeRed() {
    // RESUME_LOG=1 shows Node-RED's own log (what it resumed, and when).
    const out = process.env.RESUME_LOG ? 'inherit' : 'ignore';
    nodeRed = await start.startNodeRed({ userDir, port, stdio: ['ignore', out, out] });
  }

  /** Ends Node-RED with `signal`, and waits until it is gone. */
  async function endNodeRed(signal) {
    const { child } = nodeRed;
    nodeRed = undefined;
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill(signal);
    });
  }

  beforeEach(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-resume-v2-'));
    userDir = path.join(tmp, 'user');
    results = path.join(tmp, 'results.jsonl');
    port = await start.freePort();
    start.prepareUserDir(userDir, { port, services: {}, flows: 'none' });
    fs.writeFileSync(path.join(userDir, 'flows.json'), JSON.stringify(resumeFlow(results)));
    // The token in the config node's credentials, encrypted with the user dir's own secret (as Node-RED keeps it).
    const secret = fs.readFileSync(path.join(userDir, '.credential-secret'), 'utf8').trim();
    const credentials = v2.token ? { cfg: { apiKey: v2.token } } : {};
    fs.writeFileSync(
      path.join(userDir, 'flows_cred.json'),
      JSON.stringify(start.encryptCredentials(credentials, secret)),
    );
    await startNodeRed();
  });

  afterEach(async () => {
    if (nodeRed) await endNodeRed('SIGKILL');
    fs.rmSync(tmp, { recursive: true, force: true });
    await settle();
  });

  /** Submits a slow job through the flow; resolves to its id once the server runs it and the await is kept. */
  async function submitRunning(name, blurs) {
    // Node-RED answers its port before the flows (and their /go route) have started: a 404 until then.
    const answer = await until(
      async () => {
        const tried = await fetch(`${nodeRed.url}go`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ workflow: blurJob(prefix(name), { blurs }), mine: 42 }),
        });
        return tried.status === 404 ? undefined : tried;
      },
      'the flows to start',
      15_000,
    );
    assert.equal(answer.status, 200, await answer.clone().text());
    const { prompt_id: id } = await answer.json();
    made.add(id);
    await jobReaches(id, 'running', 60_000);
    // A kill loses what was not yet written: the await is kept (README: graph-gen/await-job-<id>.jsonl) within
    // milliseconds of its start, and a kill inside those milliseconds is not what this test is about.
    const keptFile = path.join(userDir, 'graph-gen', 'await-job-await.jsonl');
    await until(
      () => (fs.existsSync(keptFile) && fs.readFileSync(keptFile, 'utf8').includes(id) ? true : undefined),
      'the await to be kept',
      5_000,
    );
    return id;
  }

  /** The result lines, once there is one. */
  function firstResult() {
    return until(
      () => {
        const lines = resultsIn(results);
        return lines.length > 0 ? lines : undefined;
      },
      'the resumed result',
      60_000,
    );
  }

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
    assert.equal(resultsIn(results).length, 1, 'sent once');
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
    assert.equal(resultsIn(results).length, 1, 'sent once');
  });
});
