'use strict';
// bench/transfer's host: the Node-RED runtime each Node side starts before it transfers (see transfer.js), and
// the address of a file at the service, which every side asks alike.
const fs = require('node:fs');
const path = require('node:path');

/** A Node-RED runtime with no flows and no editor traffic: the process these nodes run in. */
async function startNodeRedHost(directory) {
  const RED = require('node-red');
  const userDir = fs.mkdtempSync(path.join(directory, '.node-red-'));
  RED.init(require('node:http').createServer(), {
    userDir,
    flowFile: 'flows.json',
    logging: { console: { level: 'off' } },
    telemetry: { enabled: false },
  });
  await RED.start();
  return async () => {
    await RED.stop();
    fs.rmSync(userDir, { recursive: true, force: true });
  };
}

/** The address the service answers a file at (both Node sides and curl ask the same). */
function viewAddress(baseUrl, ref) {
  const query = new URLSearchParams({ filename: ref.filename, subfolder: ref.subfolder, type: ref.type });
  return `${baseUrl}/api/view?${query}`;
}

module.exports = { startNodeRedHost, viewAddress };
