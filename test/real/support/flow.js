'use strict';
// Node-RED flows for the real-server tests (test/real, and test/real-v2 through `flowKit`): our nodes from dist/
// plus Node-RED's catch node, one config node `cfg` (here: no API key, a self-hosted server), and helpers that
// collect what reaches each end of the flow.
const helper = require('node-red-node-test-helper');
const { coreNode } = require('../../support/node-red');
const { made, until } = require('./server');

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

/** The server of test/real: a self-hosted ComfyUI, no key, today's API. */
const SELF_HOSTED = {
  label: 'real server',
  configNode: (baseUrl) => ({
    id: 'cfg',
    type: 'graph-gen-config',
    baseUrl,
    partnerKeyField: 'api_key_service_org',
  }),
  credentials: {},
  nodeProps: { submit: { partner: 'auto' }, queue: { action: 'list' } },
};

/**
 * A flow on one tab: config `cfg` at `baseUrl`; submit `submit` wired to await `await` and to helper
 * `submitted`; await's outputs to helpers `done`, `failed`, `progress`; queue `queue` to helper `queued`;
 * upload `upload` to `uploaded`; download `download` to `downloaded`; a Catch of the whole tab to `caught`.
 * `props` sets a node's own properties by id, e.g. `{ await: { timeout: '60' } }`; `server` says which config
 * node and which node settings its suite uses.
 */
function realFlow(baseUrl, props = {}, server = SELF_HOSTED) {
  const z = 'real';
  const node = (id, type, wires, own = {}) => ({
    id,
    z,
    type,
    server: 'cfg',
    x: 100,
    y: 100,
    wires,
    ...own,
    ...server.nodeProps[id],
    ...props[id],
  });
  const sink = (id) => ({ id, z, type: 'helper', x: 1, y: 1 });
  return [
    { id: z, type: 'tab', label: server.label },
    server.configNode(baseUrl),
    node('submit', 'graph-gen-submit', [['await', 'submitted']]),
    node('await', 'graph-gen-await-job', [['done'], ['failed'], ['progress']], {
      timeout: '0',
      timeoutType: 'num',
      cancelOnTimeout: false,
      progress: false,
      previewRate: 2,
    }),
    node('queue', 'graph-gen-queue', [['queued']]),
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
 * Loads the flow (with the server's credentials: none for a self-hosted one) and returns a collector per helper
 * node. Every job id the submit node sends is recorded in `jobsMade`, so afterEach can take the job off the server.
 */
async function loadFlow(baseUrl, props, server = SELF_HOSTED, jobsMade = made) {
  await helper.load(NODES, realFlow(baseUrl, props, server), { cfg: server.credentials });
  const out = {};
  for (const id of SINKS) out[id] = collect(id);
  helper.getNode('submitted').on('input', (msg) => jobsMade.add(msg.prompt_id));
  return out;
}

/** Sends `msg` into node `id`. */
function send(id, msg) {
  helper.getNode(id).receive(msg);
}

/**
 * Sends `msg` into node `id` and resolves to the msg it sent on to helper `sink`; fails with the Catch
 * node's error instead when the node failed, or after `ms`.
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

/** Submits a workflow through the submit node; resolves to the prompt id it sent. */
async function submitThrough(out, workflow, extra = {}) {
  const msg = await outputOf(out, 'submit', 'submitted', { payload: workflow, ...extra });
  return msg.prompt_id;
}

module.exports = { NODES, realFlow, loadFlow, collect, send, outputOf, submitThrough, endOf };
