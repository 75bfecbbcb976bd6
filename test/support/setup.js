'use strict';
// Loaded before every test file: points the test helper at the Node-RED under test (NODE_RED_PATH selects
// another install, e.g. Node-RED 5 in CI) and turns any unhandled rejection into a failed run, because in a
// real Node-RED one would take the runtime down.
const helper = require('node-red-node-test-helper');

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const nodeRedPath = process.env.NODE_RED_PATH || require.resolve('node-red');
// A user dir of the run's own: what nodes keep there (await-job's kept awaits) starts empty and stays out of
// the machine's ~/.node-red.
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-tests-'));
process.once('exit', () => fs.rmSync(userDir, { recursive: true, force: true }));
helper.init(nodeRedPath, { functionGlobalContext: {}, userDir });

const unhandled = [];
process.on('unhandledRejection', (reason) => unhandled.push(reason));

exports.mochaHooks = {
  afterEach() {
    // What a test's nodes kept for a restart (await-job) is not the next test's: the same node ids come again.
    fs.rmSync(path.join(userDir, 'graph-gen'), { recursive: true, force: true });
    if (unhandled.length > 0) {
      const reason = unhandled.splice(0);
      throw new Error(`unhandled rejection during the test: ${reason.map(String).join('; ')}`);
    }
  },
};
