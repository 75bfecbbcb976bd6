'use strict';
// Node-RED flows for the real Comfy API v2 tests: our nodes from dist/ plus Node-RED's catch node, one config
// node `cfg` speaking v2 (`dialect: 'comfy-api-v2'`, `authType: 'bearer'`, the token in credentials.apiKey), and
// helpers that collect what reaches each end of the flow.
const helper = require('node-red-node-test-helper');
const { coreNode } = require('../../support/node-red');
const { v2 } = require('./v2');
const { made, until } = require('./api');

const NODES = [
  require('../../../dist/nodes/graph-gen-config.js'),
  require('../../../dist/nodes/graph-gen-upload.js'),
  require('../../../dist/nodes/graph-gen-submit.js'),
  require('../../../dist/nodes/graph-gen-await-job.js'),
  require('../../../dist/nodes/graph-gen-download.js'),
  require('../../../dist/nodes/graph-gen-queue.js'),
  coreNode('common/25-catch.js'),
];

const SINKS = ['submitted', 'done', 'failed', 'progress', 'queued', 'uploaded', 'downloaded', 'caught'];

/** The v2 config node at `baseUrl` (the proxy, or a relay in front of it). */
function v2Config(baseUrl) {
  return {
    id: 'cfg',
    type: 'graph-gen-config',
    baseUrl,
    dialect: 'comfy-api-v2',
    authType: v2.token ? 'bearer' : 'none',
  };
}

/**
 * A flow on one tab: config `cfg` at `baseUrl`; submit `submit` wired to await `await` and to helper
 * `submitted`; await's outputs to helpers `done`, `failed`, `progress`; queue `queue` (cancel) to `queued`;
 * upload `upload` to `uploaded`; download `download` to `downloaded`; a Catch of the whole tab to `caught`.
 * `props` sets a node's own properties by id, e.g. `{ await: { progress: true } }`.
 */
function v2Flow(baseUrl, props = {}) {
  const z = 'real-v2';
  const node = (id, type, wires, own = {}) => ({
    id,
    z,
    type,
    server: 'cfg',
    x: 100,
    y: 100,
    wires,
    ...own,
    ...props[id],
  });
  const sink = (id) => ({ id, z, type: 'helper', x: 1, y: 1 });
  return [
    { id: z, type: 'tab', label: 'real Comfy API v2' },
    v2Config(baseUrl),
    node('submit', 'graph-gen-submit', [['await', 'submitted']]),
    node('await', 'graph-gen-await-job', [['done'], ['failed'], ['progress']], {
      timeout: '0',
      timeoutType: 'num',
      cancelOnTimeout: false,
      progress: false,
      previewRate: 10,
    }),
    node('queue', 'graph-gen-queue', [['queued']], { action: 'cancel' }),
    node('upload', 'graph-gen-upload', [['uploaded']], { mode: 'image', overwrite: true }),
    node('download', 'graph-gen-download', [['downloaded']], { mode: 'buffer' }),
    { id: 'catcher', z, type: 'catch', scope: null, uncaught: false, x: 1, y: 1, wires: [['caught']] },
    ...SINKS.map(sink),
  ];
}

/** Collects every msg a helper node receives. */
function collect(id) {
  const received = [];
  helper.getNode(id).on('input', (msg) => received.push({ ...msg, receivedAt: Date.now() }));
  return {
    received,
    /** The first msg (from now on, or already received) for which `match` holds; fails after `ms`. */
    find(match, what, ms = 15_000) {
      return until(() => received.find(match), `${what} at ${id}`, ms, 20);
    },
    /** The first msg that is about `promptId`. */
    of(promptId, ms = 15_000) {
      return this.find((msg) => msg.prompt_id === promptId, `a msg about job ${promptId}`, ms);
    },
    /** The n-th msg (1-based). */
    nth(n, ms = 15_000) {
      return until(() => received[n - 1], `msg ${n}`, ms, 20);
    },
  };
}

/**
 * Loads the flow with the token in the config node's credentials and returns a collector per helper node.
 * Every job id the submit node sends is recorded, so afterEach can end what is left on the server.
 */
async function loadFlow(baseUrl, props) {
  await helper.load(NODES, v2Flow(baseUrl, props), { cfg: v2.token ? { apiKey: v2.token } : {} });
  const out = {};
  for (const id of SINKS) out[id] = collect(id);
  helper.getNode('submitted').on('input', (msg) => made.add(msg.prompt_id));
  return out;
}

/** Sends `msg` into node `id`. */
function send(id, msg) {
  helper.getNode(id).receive(msg);
}

/**
 * Sends `msg` into node `id` and resolves to the msg it sent on to helper `sink`; fails with the Catch node's
 * error instead when the node failed, or after `ms`.
 */
async function outputOf(out, id, sink, msg, ms = 15_000) {
  const before = out[sink].received.length;
  const caughtBefore = out.caught.received.length;
  send(id, msg);
  await until(
    () => out[sink].received.length > before || out.caught.received.length > caughtBefore,
    `${id} to answer`,
    ms,
    20,
  );
  if (out[sink].received.length > before) return out[sink].received[before];
  const { error } = out.caught.received[caughtBefore];
  throw new Error(`${id} failed: ${error.code}: ${error.message}`);
}

/** The await's result for `id`, from whichever output it left. */
function endOf(out, id, ms = 30_000) {
  return until(
    () =>
      out.done.received.find((m) => m.prompt_id === id) ??
      out.failed.received.find((m) => m.prompt_id === id),
    `the await of job ${id} to end`,
    ms,
  );
}

/** Submits a workflow through the submit node; resolves to the job id it sent and when it was sent. */
async function submitThrough(out, workflow, extra = {}, ms = 15_000) {
  const sentAt = Date.now();
  const msg = await outputOf(out, 'submit', 'submitted', { payload: workflow, ...extra }, ms);
  return { id: msg.prompt_id, sentAt, answeredAt: msg.receivedAt };
}

/** The config node's v2 event streams (their stats: streams opened, refused, frames). */
function eventStreams() {
  return helper.getNode('cfg').connection.dialect.events();
}

module.exports = {
  NODES,
  v2Config,
  v2Flow,
  loadFlow,
  collect,
  send,
  outputOf,
  submitThrough,
  endOf,
  eventStreams,
};
