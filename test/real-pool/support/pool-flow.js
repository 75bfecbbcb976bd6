'use strict';
// The Node-RED flow of the real pool suite: a config node per real server (ids `old` and `new`, as in
// support/pool.js, named "ComfyUI <version>"), a graph-gen-pool `p` of both, and a submit and an await that work
// through the pool (`pool: 'p'`, no server of their own), each end of the flow collected (test/real's collect).
const helper = require('node-red-node-test-helper');
const { coreNode } = require('../../support/node-red');
const { collect, send } = require('../../real/support/flow');
const { until } = require('../../real/support/workflows');
const { SERVER_LIST } = require('./pool');

const NODES = [
  require('../../../dist/nodes/graph-gen-config.js'),
  require('../../../dist/nodes/graph-gen-pool.js'),
  require('../../../dist/nodes/graph-gen-submit.js'),
  require('../../../dist/nodes/graph-gen-await-job.js'),
  coreNode('common/25-catch.js'),
];

const SINKS = ['submitted', 'done', 'failed', 'caught'];

/**
 * The flow: configs `old` and `new`, pool `p` (server1 old, server2 new; `pool` sets its own properties, e.g.
 * `{ strategy: 'turns' }`), submit `submit` -> await `await` and helper `submitted`; await's outputs 1 and 2 to
 * helpers `done` and `failed`; a Catch of the tab to `caught`. `awaitProps` sets the await's own properties
 * (`{ runAgain: true }`).
 */
function poolFlow({ pool = {}, awaitProps = {} } = {}) {
  const z = 'pool';
  const sink = (id) => ({ id, z, type: 'helper', x: 1, y: 1 });
  return [
    { id: z, type: 'tab', label: 'real pool' },
    ...SERVER_LIST.map((server) => ({
      id: server.key,
      type: 'graph-gen-config',
      name: server.name,
      baseUrl: server.url,
      partnerKeyField: 'api_key_service_org',
    })),
    { id: 'p', type: 'graph-gen-pool', name: 'two servers', server1: 'old', server2: 'new', ...pool },
    {
      id: 'submit',
      z,
      type: 'graph-gen-submit',
      server: '',
      pool: 'p',
      partner: 'auto',
      x: 100,
      y: 100,
      wires: [['await', 'submitted']],
    },
    {
      id: 'await',
      z,
      type: 'graph-gen-await-job',
      server: '',
      pool: 'p',
      timeout: '0',
      timeoutType: 'num',
      cancelOnTimeout: false,
      progress: false,
      x: 100,
      y: 100,
      wires: [['done'], ['failed'], []],
      ...awaitProps,
    },
    { id: 'catcher', z, type: 'catch', scope: null, uncaught: false, x: 1, y: 1, wires: [['caught']] },
    ...SINKS.map(sink),
  ];
}

/** Loads the flow and returns a collector per helper node. */
async function loadPoolFlow(options) {
  await helper.load(NODES, poolFlow(options), {});
  const out = {};
  for (const id of SINKS) out[id] = collect(id);
  return out;
}

/**
 * Sends each workflow into the submit node at once (as a flow's burst does), each msg with `extra`'s fields too
 * (`{ server: { id: 'old' } }` pins the jobs to a server, as an upload before them would); resolves to the
 * submitted msgs in the order sent (matched by `topic`), or fails with the Catch node's error when a submit failed.
 */
async function submitAll(out, workflows, extra = {}, ms = 60_000) {
  const tag = `burst-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
  const topics = workflows.map((_, index) => `${tag}-${index}`);
  const caughtBefore = out.caught.received.length;
  workflows.forEach((workflow, index) =>
    send('submit', { ...structuredClone(extra), payload: workflow, topic: topics[index] }),
  );
  await until(
    () => {
      const caught = out.caught.received.slice(caughtBefore).find((msg) => topics.includes(msg.topic));
      if (caught) throw new Error(`a submit failed: ${caught.error?.code}: ${caught.error?.message}`);
      return topics.every((topic) => out.submitted.received.some((msg) => msg.topic === topic));
    },
    `${workflows.length} submits through the pool`,
    ms,
    20,
  );
  return topics.map((topic) => out.submitted.received.find((msg) => msg.topic === topic));
}

/** The await's result for job `id`, from whichever output it left ({msg, output: 1 | 2}). */
async function resultOf(out, id, ms = 60_000) {
  return until(
    () => {
      const done = out.done.received.find((msg) => msg.prompt_id === id);
      if (done) return { msg: done, output: 1 };
      const failed = out.failed.received.find((msg) => msg.prompt_id === id);
      return failed ? { msg: failed, output: 2 } : undefined;
    },
    `the await of job ${id} to end`,
    ms,
  );
}

/** How many of `msgs` went to each server, by its key: { old: n, new: n }. */
function spreadOf(msgs) {
  const spread = Object.fromEntries(SERVER_LIST.map((server) => [server.key, 0]));
  for (const msg of msgs) spread[msg.server.id] = (spread[msg.server.id] ?? 0) + 1;
  return spread;
}

module.exports = { poolFlow, loadPoolFlow, submitAll, resultOf, spreadOf };
