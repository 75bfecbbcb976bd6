'use strict';
// Loaded before every test file: points the test helper at the Node-RED under test (NODE_RED_PATH selects
// another install, e.g. Node-RED 5 in CI) and turns any unhandled rejection into a failed run, because in a
// real Node-RED one would take the runtime down.
const helper = require('node-red-node-test-helper');

const nodeRedPath = process.env.NODE_RED_PATH || require.resolve('node-red');
helper.init(nodeRedPath, { functionGlobalContext: {} });

const unhandled = [];
process.on('unhandledRejection', (reason) => unhandled.push(reason));

exports.mochaHooks = {
  afterEach() {
    if (unhandled.length > 0) {
      const reason = unhandled.splice(0);
      throw new Error(`unhandled rejection during the test: ${reason.map(String).join('; ')}`);
    }
  },
};
