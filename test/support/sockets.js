'use strict';
const { coreNode, statuses } = require('./node-red');
// Shared by the socket-* and await-* tests: workflows the sandbox's event runner understands, a flow with
// an await-job node, and waits for what a user sees (msgs on each output, Catch msgs, statuses).
const helper = require('node-red-node-test-helper');

const KEY = 'sk-test-7c1f0e9a2b';

/** A small text-to-image workflow: loader, sampler (progress + previews), save (executed with files). */
function workflow(extra = {}, options = {}) {
  return {
    1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
    2: { class_type: 'KSampler', inputs: { steps: options.steps ?? 3, seed: 1, model: ['1', 0] } },
    3: {
      class_type: 'SaveImage',
      inputs: { filename_prefix: options.prefix ?? 'out', images: ['2', 0], ...options.save },
    },
    ...extra,
  };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `predicate` until true or the time is up (then fails with `what`). */
async function until(predicate, what, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The file names a sandbox job's outputs name, sorted. */
function fileNames(outputs) {
  const names = [];
  for (const output of Object.values(outputs ?? {})) {
    for (const list of Object.values(output))
      if (Array.isArray(list)) for (const f of list) names.push(f.filename);
  }
  return names.sort();
}

/** Config node, await-job node `await` wired to helpers `done`, `failed`, `progress`; a Catch to `caught`. */
function awaitFlow(sandbox, awaitProps = {}, extra = []) {
  return [
    { id: 'f1', type: 'tab' },
    { id: 'cfg', type: 'graph-gen-config', baseUrl: sandbox.url, partnerKeyField: 'api_key_service_org' },
    {
      id: 'await',
      z: 'f1',
      x: 100,
      y: 100,
      type: 'graph-gen-await-job',
      server: 'cfg',
      timeout: '0',
      timeoutType: 'num',
      cancelOnTimeout: false,
      progress: false,
      previewRate: 2,
      wires: [['done'], ['failed'], ['progress']],
      ...awaitProps,
    },
    { id: 'done', z: 'f1', x: 1, y: 1, type: 'helper' },
    { id: 'failed', z: 'f1', x: 1, y: 1, type: 'helper' },
    { id: 'progress', z: 'f1', x: 1, y: 1, type: 'helper' },
    { id: 'catcher', z: 'f1', x: 1, y: 1, type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
    { id: 'caught', z: 'f1', x: 1, y: 1, type: 'helper' },
    ...extra,
  ];
}

/** Collects every msg a helper node receives; `next(n)` waits for the n-th (1-based) one. */
function collect(id) {
  const node = helper.getNode(id);
  const received = [];
  let consumed = 0;
  node.on('input', (msg) => received.push(msg));
  return {
    received,
    /** The n-th msg, or without n the first one not yet returned. */
    async next(count = consumed + 1, timeoutMs = 8000) {
      consumed = Math.max(consumed, count);
      await until(() => received.length >= count, `msg ${count} on ${id}`, timeoutMs);
      return received[count - 1];
    },
  };
}

/**
 * Inside a describe: the socket manager reconnects fast for its tests (restored after), and the returned
 * list's items (anything with `close()`) are closed after each test, last first.
 */
function withFastSockets() {
  const { SocketManager } = require('../../dist/generation/jobs/socket-manager');
  const open = [];
  let saved;
  before(() => {
    saved = SocketManager.defaultTimings;
    SocketManager.defaultTimings = { ...saved, backoffBaseMs: 20, backoffMaxMs: 300, graceMs: 50 };
  });
  after(() => {
    SocketManager.defaultTimings = saved;
  });
  afterEach(async () => {
    for (const item of open.splice(0).reverse()) await item.close();
  });
  return open;
}

module.exports = {
  KEY,
  workflow,
  sleep,
  until,
  fileNames,
  coreNode,
  awaitFlow,
  collect,
  statuses,
  withFastSockets,
};
