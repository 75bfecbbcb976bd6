'use strict';
// Shared by the example tests (test/examples.test.js on today's API, test/examples-v2.test.js on Comfy API v2):
// the nodes the examples use, the examples as shipped, and what turns one into a flow the test helper loads
// (debug nodes become helper nodes, file paths point into a temporary directory, keys are ${VAR} credentials),
// with waits for what a user would see in the debug sidebar and the log.
const assert = require('node:assert');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { readExamples } = require('../../scripts/start.js');
const { coreNode } = require('./node-red');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-upload.js'),
  require('../../dist/nodes/graph-gen-submit.js'),
  require('../../dist/nodes/graph-gen-await-job.js'),
  require('../../dist/nodes/graph-gen-download.js'),
  require('../../dist/nodes/graph-gen-queue.js'),
  require('../../dist/nodes/graph-gen-job-events.js'),
  require('../../dist/nodes/automation-config.js'),
  require('../../dist/nodes/automation-list-workflows.js'),
  coreNode('common/20-inject.js'),
  coreNode('common/90-comment.js'),
  coreNode('function/10-function.js'),
  coreNode('function/10-switch.js'),
  coreNode('function/15-change.js'),
  coreNode('storage/10-file.js'),
];

/** Every example as shipped, by name. */
const examples = Object.fromEntries(readExamples().map((example) => [example.name, example.nodes]));

/**
 * An example ready for helper.load: debug nodes become helper nodes (same id), file nodes read and write
 * under `dir`, and the config nodes get their keys the way a user sets them: `${VAR}` credentials.
 * `graphGenConfig` (optional) changes the graph-gen-config node's settings, e.g. its dialect.
 */
function prepare(name, dir, { graphGenConfig } = {}) {
  const credentials = {};
  const nodes = examples[name].map((original) => {
    const node = structuredClone(original);
    if (node.type === 'debug') return { id: node.id, z: node.z, type: 'helper', name: node.name };
    if (node.type === 'file in') node.filename = path.join(dir, node.filename);
    if (node.type === 'change') {
      for (const rule of node.rules) {
        if (typeof rule.to === 'string')
          rule.to = rule.to.replace("'graph-gen-output/'", JSON.stringify(`${dir}/`));
      }
    }
    if (node.type === 'graph-gen-config') {
      credentials[node.id] = { apiKey: '${GRAPH_GEN_API_KEY}' };
      Object.assign(node, graphGenConfig);
    }
    if (node.type === 'automation-config') credentials[node.id] = { apiKey: '${AUTOMATION_API_KEY}' };
    return node;
  });
  return { nodes, credentials };
}

/**
 * The dashboard example (08) without the dashboard: its widgets become helper nodes (same id, name and wires) and
 * its ui-base, pages, groups and theme go; what a browser would send is given to the node a widget feeds, or sent
 * from the widget's helper.
 */
function prepareWithoutDashboard(name, dir, options) {
  const prepared = prepare(name, dir, options);
  prepared.nodes = prepared.nodes
    .filter((node) => !node.type.startsWith('ui-') || node.z)
    .map((node) =>
      node.type.startsWith('ui-')
        ? { id: node.id, z: node.z, type: 'helper', name: node.name, wires: node.wires ?? [] }
        : node,
    );
  return prepared;
}

/** A workflow of another client's for the sandbox, with `extra` nodes (SandboxHang: runs until interrupted). */
const otherWorkflow = (extra = {}) => ({
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
  2: { class_type: 'KSampler', inputs: { steps: 3, seed: 1, model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'other', images: ['2', 0] } },
  ...extra,
});

/** Resolves with the first msg a helper node receives that `accept` takes (or fails after `ms`). */
function firstMessage(node, accept, ms = 8000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`"${node.name}" got no such message within ${ms} ms`)),
      ms,
    );
    node.on('input', (msg) => {
      if (!accept(msg)) return;
      clearTimeout(timer);
      resolve(msg);
    });
  });
}

function byName(nodes, type, name) {
  const node = nodes.find((candidate) => candidate.type === type && candidate.name === name);
  assert.ok(node, `no ${type} "${name}" in the example`);
  return helper.getNode(node.id);
}

/** Resolves with the next `count` messages a helper node receives (or fails after `ms`). */
function messages(node, count = 1, ms = 8000) {
  return new Promise((resolve, reject) => {
    const got = [];
    const timer = setTimeout(
      () => reject(new Error(`"${node.name}" got ${got.length} of ${count} messages within ${ms} ms`)),
      ms,
    );
    node.on('input', (msg) => {
      got.push(msg);
      if (got.length === count) {
        clearTimeout(timer);
        resolve(count === 1 ? got[0] : got);
      }
    });
  });
}

/** The errors nodes reported (what a user sees in the log and the debug sidebar): `type: message`. */
function nodeErrors() {
  return helper
    .log()
    .args.map(([entry]) => entry)
    .filter((entry) => entry && entry.level === 20)
    .map((entry) => `${entry.type}: ${entry.msg && entry.msg.message ? entry.msg.message : entry.msg}`);
}

/** Waits for `promise`; when it fails, says which node reported an error (what a user sees in the log). */
async function orNodeErrors(promise) {
  try {
    return await promise;
  } catch (error) {
    const errors = nodeErrors();
    error.message += errors.length ? `; node errors: ${errors.join(' | ')}` : '';
    throw error;
  }
}

function silent(node) {
  const seen = [];
  node.on('input', (msg) => seen.push(msg));
  return seen;
}

module.exports = {
  NODES,
  examples,
  prepare,
  prepareWithoutDashboard,
  otherWorkflow,
  firstMessage,
  byName,
  messages,
  nodeErrors,
  orNodeErrors,
  silent,
};
