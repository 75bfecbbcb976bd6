'use strict';
// Shared by the pool's flow tests (test/generation/pool/pool*.test.js): three sandboxes playing three servers (each
// with the sandbox's control nodes, SandboxHang and friends, among its node definitions, so a workflow using them
// passes the pool's "able to run it" check and the server's own), a flow of config nodes A/B/C, a pool `p` of them and
// every generation node through the pool, and what a test reads of each server: the jobs it got and the requests it
// saw.
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { sandboxControlNodes } = require('../../dist/sandbox/v2-service');
const { coreNode } = require('./node-red');
const { collect, until } = require('./sockets');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-pool.js'),
  require('../../dist/nodes/graph-gen-upload.js'),
  require('../../dist/nodes/graph-gen-submit.js'),
  require('../../dist/nodes/graph-gen-await-job.js'),
  require('../../dist/nodes/graph-gen-download.js'),
  require('../../dist/nodes/graph-gen-queue.js'),
  require('../../dist/nodes/graph-gen-job-events.js'),
  coreNode('common/25-catch.js'),
];

const MEMBERS = [
  { id: 'ca', name: 'A' },
  { id: 'cb', name: 'B' },
  { id: 'cc', name: 'C' },
];

/** Three sandboxes; `each[i]` adds to the i-th one's options (its generation options merged). */
async function startMembers(each = []) {
  const started = [];
  for (let index = 0; index < 3; index++) {
    const extra = each[index] ?? {};
    started.push(
      await startSandbox({
        ...extra,
        generation: {
          ...extra.generation,
          nodeDefinitions: { ...sandboxControlNodes(), ...extra.generation?.nodeDefinitions },
        },
        events: { stepDelayMs: 1, ...extra.events },
      }),
    );
  }
  return started;
}

/** Closes the sandboxes still open (a test may have closed one). */
async function closeMembers(sandboxes) {
  for (const sandbox of sandboxes ?? []) if (!sandbox.closedByTest) await sandbox.close();
}

/** Closes one sandbox now: its port refuses connections from then on. */
async function stopMember(sandbox) {
  sandbox.closedByTest = true;
  await sandbox.close();
}

/**
 * The flow: config nodes ca/cb/cc (A/B/C) on the sandboxes, pool `p` of them, and through it upload, submit,
 * await (3 outputs: done, failed, progress), download and queue nodes, each wired to a helper of its own; a Catch
 * to `caught`. `pool` adds to the pool node, `awaitProps` to the await node, `members[i]` to the i-th config node;
 * `extra` are more nodes.
 */
function poolFlow(sandboxes, { pool = {}, awaitProps = {}, extra = [], members = [] } = {}) {
  const z = 'f1';
  const helperNode = (id) => ({ id, z, type: 'helper' });
  return [
    { id: z, type: 'tab' },
    ...MEMBERS.map((member, index) => ({
      id: member.id,
      type: 'graph-gen-config',
      name: member.name,
      baseUrl: sandboxes[index].url,
      ...members[index],
    })),
    {
      id: 'p',
      type: 'graph-gen-pool',
      name: 'the pool',
      server1: 'ca',
      server2: 'cb',
      server3: 'cc',
      strategy: 'soonest',
      ...pool,
    },
    { id: 'upload', z, type: 'graph-gen-upload', server: '', pool: 'p', wires: [['uploaded']] },
    { id: 'submit', z, type: 'graph-gen-submit', server: '', pool: 'p', wires: [['submitted']] },
    {
      id: 'await',
      z,
      type: 'graph-gen-await-job',
      server: '',
      pool: 'p',
      timeout: '0',
      timeoutType: 'num',
      wires: [['done'], ['failed'], ['progress']],
      ...awaitProps,
    },
    { id: 'download', z, type: 'graph-gen-download', server: '', pool: 'p', wires: [['downloaded']] },
    { id: 'queue', z, type: 'graph-gen-queue', server: '', pool: 'p', wires: [['queued']] },
    { id: 'catcher', z, type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
    ...['uploaded', 'submitted', 'done', 'failed', 'progress', 'downloaded', 'queued', 'caught'].map(
      helperNode,
    ),
    ...extra,
  ];
}

const OUTPUTS = ['uploaded', 'submitted', 'done', 'failed', 'progress', 'downloaded', 'queued', 'caught'];

/**
 * Loads the flow (with `credentials` by config node id) and waits until the pool has heard from all its members
 * (`up` of them: fewer when a test starts with one stopped); resolves to the pool and a collector per output helper.
 */
async function loadPool(sandboxes, options = {}, { up = 3, credentials = {} } = {}) {
  await helper.load(NODES, poolFlow(sandboxes, options), credentials);
  const pool = helper.getNode('p').pool();
  if (up > 0) await until(() => pool.upCount >= up, `${up} members of the pool to be up`);
  const out = Object.fromEntries(OUTPUTS.map((id) => [id, collect(id)]));
  return { pool, out };
}

/** The ids of the jobs a sandbox has (in the order it got them). */
function jobsOn(sandbox) {
  return [...sandbox.jobs.jobs.keys()];
}

/** How many submits a sandbox saw (POST /api/prompt, answered or not). */
function postsTo(sandbox) {
  return sandbox.counters.count('/api/prompt', 'POST');
}

/** Which sandbox has a job: its index (0 A, 1 B, 2 C), -1 when none, and fails when more than one has it. */
function whereIs(sandboxes, promptId) {
  const holders = sandboxes.map((sandbox, index) => (sandbox.jobs.jobs.has(promptId) ? index : -1));
  const found = holders.filter((index) => index >= 0);
  if (found.length > 1) throw new Error(`job ${promptId} is on ${found.length} servers`);
  return found[0] ?? -1;
}

/** Submits a msg through the submit node and resolves to what the node sent on (or rejects with the Catch's). */
async function submitThrough(out, msg, timeoutMs = 8000) {
  const count = out.submitted.received.length + 1;
  const failures = out.caught.received.length;
  helper.getNode('submit').receive(msg);
  await until(
    () => out.submitted.received.length >= count || out.caught.received.length > failures,
    'the submit to end',
    timeoutMs,
  );
  if (out.caught.received.length > failures) {
    const caught = out.caught.received[failures];
    throw Object.assign(new Error(`the submit failed: ${caught.error.message}`), { caught });
  }
  return out.submitted.received[count - 1];
}

/**
 * Whether a node type's runtime catalog (nodes/locales/en-US/<type>.json) has a text yet: until it does, the
 * runtime says the key itself (another part of issue 29 writes the pool's texts).
 */
function catalogHas(type, key) {
  const file = path.join(__dirname, '..', '..', 'nodes', 'locales', 'en-US', `${type}.json`);
  try {
    let found = JSON.parse(fs.readFileSync(file, 'utf8'))[type];
    for (const part of key.split('.')) found = found?.[part];
    return typeof found === 'string';
  } catch {
    return false;
  }
}

module.exports = {
  catalogHas,
  NODES,
  MEMBERS,
  startMembers,
  closeMembers,
  stopMember,
  poolFlow,
  loadPool,
  jobsOn,
  postsTo,
  whereIs,
  submitThrough,
};
