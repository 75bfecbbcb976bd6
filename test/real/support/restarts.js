'use strict';
// A real Node-RED process for the resume suites of test/real and test/real-v2: its own user dir (this package
// linked in) with a flow that submits what POST /go sends and awaits it, its results appended as JSON lines by a
// file node; started, ended with a signal, started again. Each suite gives its server's config node, its long
// workflow and the status word that means "it runs".
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const start = require('../../../scripts/start.js');

/**
 * The flow: POST /go {workflow, mine} -> submit -> await; the await's results are appended as JSON lines to
 * `results` by a file node, and the job id is the HTTP answer.
 */
function resumeFlow(configNode, results) {
  const z = 'resume';
  return [
    { id: z, type: 'tab', label: 'resume' },
    configNode,
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

/**
 * Mocha hooks and helpers of one suite: `configNode()` and `credentials()` (its config node, id `cfg`, and
 * what goes encrypted into the user dir, as Node-RED keeps it; functions, read at each set-up: the server's
 * address is known only once the root hooks started it), `tmpPrefix`; `jobRuns(id)` resolves once the server runs the job; `made` collects the
 * jobs made (the suite cleans them up); `until` is the suite's waiter.
 */
function resumeHarness({ configNode, credentials, tmpPrefix, jobRuns, made, until }) {
  const state = {};

  async function startNodeRed() {
    // RESUME_LOG=1 shows Node-RED's own log (what it resumed, and when).
    const out = process.env.RESUME_LOG ? 'inherit' : 'ignore';
    state.nodeRed = await start.startNodeRed({
      userDir: state.userDir,
      port: state.port,
      stdio: ['ignore', out, out],
    });
  }

  /** Ends Node-RED with `signal`, and waits until it is gone. */
  async function endNodeRed(signal) {
    const { child } = state.nodeRed;
    state.nodeRed = undefined;
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill(signal);
    });
  }

  async function setUp() {
    state.tmp = fs.mkdtempSync(path.join(os.tmpdir(), tmpPrefix));
    state.userDir = path.join(state.tmp, 'user');
    state.results = path.join(state.tmp, 'results.jsonl');
    state.port = await start.freePort();
    start.prepareUserDir(state.userDir, { port: state.port, services: {}, flows: 'none' });
    fs.writeFileSync(
      path.join(state.userDir, 'flows.json'),
      JSON.stringify(resumeFlow(configNode(), state.results)),
    );
    const secrets = credentials?.();
    if (secrets) {
      const secret = fs.readFileSync(path.join(state.userDir, '.credential-secret'), 'utf8').trim();
      fs.writeFileSync(
        path.join(state.userDir, 'flows_cred.json'),
        JSON.stringify(start.encryptCredentials({ cfg: secrets }, secret)),
      );
    }
    await startNodeRed();
  }

  async function tearDown() {
    if (state.nodeRed) await endNodeRed('SIGKILL');
    fs.rmSync(state.tmp, { recursive: true, force: true });
  }

  /** Submits `workflow` through the flow; resolves to its job id once the server runs it and the await is kept. */
  async function submitRunning(workflow) {
    // Node-RED answers its port before the flows (and their /go route) have started: a 404 until then.
    const answer = await until(
      async () => {
        const tried = await fetch(`${state.nodeRed.url}go`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ workflow, mine: 42 }),
        });
        return tried.status === 404 ? undefined : tried;
      },
      'the flows to start',
      15_000,
    );
    assert.equal(answer.status, 200, await answer.clone().text());
    const { prompt_id: id } = await answer.json();
    made.add(id);
    await jobRuns(id);
    // A kill loses what was not yet written: the await is kept (README: graph-gen/await-job-<id>.jsonl) within
    // milliseconds of its start, and a kill inside those milliseconds is not what this test is about.
    const keptFile = path.join(state.userDir, 'graph-gen', 'await-job-await.jsonl');
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
        const lines = resultsIn(state.results);
        return lines.length > 0 ? lines : undefined;
      },
      'the resumed result',
      60_000,
    );
  }

  return {
    setUp,
    tearDown,
    startNodeRed,
    endNodeRed,
    submitRunning,
    firstResult,
    results: () => resultsIn(state.results),
  };
}

module.exports = { resumeHarness };
