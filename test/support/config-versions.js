'use strict';
// Shared by the config-version tests: the flows each release saved (test/fixtures/flows/, made from each
// release's editor defaults: `git show <rev>:nodes/<type>.html`), the version each node type of them is at, and
// a loader that deploys one against a sandbox with a helper node on each output.
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { coreNode } = require('./node-red');

const FLOWS = path.join(__dirname, '..', 'fixtures', 'flows');

/**
 * The flows, oldest first: the release each was saved by (its rev on main, where the editors had these defaults),
 * and the config version each node type of it is at (config-versions.ts). 0: written by hand, without settings.
 */
const RELEASES = [
  {
    file: '0-written-by-hand',
    label: 'a hand (no release: the settings left out)',
    rev: '-',
    versions: {
      'graph-gen-config': 0,
      'graph-gen-pool': 0,
      'automation-config': 0,
      'graph-gen-upload': 0,
      'graph-gen-submit': 0,
      'graph-gen-await-job': 0,
      'graph-gen-download': 0,
      'graph-gen-queue': 0,
      'graph-gen-job-events': 0,
      'automation-list-workflows': 0,
    },
  },
  {
    file: '1-first-release',
    label: 'the first release (issues 2-5)',
    rev: '6628a47^',
    versions: {
      'graph-gen-config': 1,
      'automation-config': 1,
      'graph-gen-upload': 1,
      'graph-gen-submit': 1,
      'graph-gen-await-job': 1,
      'graph-gen-download': 1,
      'graph-gen-queue': 1,
      'automation-list-workflows': 1,
    },
  },
  {
    file: '2-limits',
    label: 'the release of issues 8-9',
    rev: '813749b',
    versions: {
      'graph-gen-config': 2,
      'automation-config': 2,
      'graph-gen-upload': 1,
      'graph-gen-submit': 1,
      'graph-gen-await-job': 1,
      'graph-gen-download': 1,
      'graph-gen-queue': 1,
      'automation-list-workflows': 1,
    },
  },
  {
    file: '3-inputs',
    label: 'the release of issues 11-12',
    rev: '22dbb7c',
    versions: {
      'graph-gen-config': 2,
      'automation-config': 2,
      'graph-gen-upload': 2,
      'graph-gen-submit': 2,
      'graph-gen-await-job': 2,
      'graph-gen-download': 1,
      'graph-gen-queue': 1,
      'automation-list-workflows': 1,
    },
  },
  {
    file: '4-access',
    label: 'the release of issues 20-22',
    rev: '8aa5537',
    versions: {
      'graph-gen-config': 3,
      'automation-config': 2,
      'graph-gen-upload': 3,
      'graph-gen-submit': 3,
      'graph-gen-await-job': 3,
      'graph-gen-download': 2,
      'graph-gen-queue': 1,
      'graph-gen-job-events': 1,
      'automation-list-workflows': 1,
    },
  },
  {
    file: '5-dialect',
    label: 'the release of issue 28',
    rev: '8696cc6',
    versions: {
      'graph-gen-config': 4,
      'automation-config': 2,
      'graph-gen-upload': 3,
      'graph-gen-submit': 3,
      'graph-gen-await-job': 3,
      'graph-gen-download': 2,
      'graph-gen-queue': 1,
      'graph-gen-job-events': 1,
      'automation-list-workflows': 1,
    },
  },
];

/** A fixture flow as saved (a fresh copy each time). */
function readFixture(file) {
  return JSON.parse(fs.readFileSync(path.join(FLOWS, `${file}.json`), 'utf8'));
}

const NODES = [
  'graph-gen-config',
  'graph-gen-pool',
  'graph-gen-upload',
  'graph-gen-submit',
  'graph-gen-await-job',
  'graph-gen-download',
  'graph-gen-queue',
  'graph-gen-job-events',
  'automation-config',
  'automation-list-workflows',
].map((type) => require(`../../dist/nodes/${type}.js`));

/**
 * Deploys a fixture flow against the sandbox, its settings as saved: only where the servers are (the config
 * nodes' addresses) and where outputs go (each output of node `x` to a helper `x-out<n>`, a Catch node to
 * `caught`) are changed. `change` may alter the flow first (a test's own flow built on a fixture).
 */
async function deployFixture(file, sandbox, { credentials = {}, change } = {}) {
  const flow = readFixture(file);
  const tab = flow.find((node) => node.type === 'tab').id;
  const helpers = [];
  for (const node of flow) {
    if (node.type === 'graph-gen-config') node.baseUrl = sandbox.url;
    if (node.type === 'automation-config') {
      node.host = '127.0.0.1';
      node.port = String(new URL(sandbox.url).port);
    }
    if (Array.isArray(node.wires)) {
      node.wires = node.wires.map((_, index) => {
        helpers.push({ id: `${node.id}-out${index + 1}`, type: 'helper', z: tab, x: 1, y: 1 });
        return [`${node.id}-out${index + 1}`];
      });
    }
  }
  flow.push(...helpers, {
    id: 'catcher',
    type: 'catch',
    z: tab,
    x: 1,
    y: 1,
    scope: null,
    uncaught: false,
    wires: [['caught']],
  });
  flow.push({ id: 'caught', type: 'helper', z: tab, x: 1, y: 1 });
  change?.(flow);
  await helper.load([...NODES, coreNode('common/25-catch.js')], flow, credentials);
  return flow;
}

module.exports = { RELEASES, readFixture, deployFixture };
