'use strict';
// Node-RED flows for the real Comfy API v2 tests: test/real's flow (support/flow.js there) with one config node
// `cfg` speaking v2 (`dialect: 'comfy-api-v2'`, `authType: 'bearer'`, the token in credentials.apiKey), the
// queue node cancelling, and previews at up to 10 a second.
const helper = require('node-red-node-test-helper');
const real = require('../../real/support/flow');
const { v2 } = require('./v2');
const { made } = require('./api');

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

const V2_SERVER = {
  label: 'real Comfy API v2',
  configNode: v2Config,
  get credentials() {
    return v2.token ? { apiKey: v2.token } : {};
  },
  nodeProps: { await: { previewRate: 10 }, queue: { action: 'cancel' } },
};

/** The flow of test/real's support/flow.js on a v2 server; `props` sets a node's own properties by id. */
function v2Flow(baseUrl, props = {}) {
  return real.realFlow(baseUrl, props, V2_SERVER);
}

/** Loads the flow with the token in the config node's credentials; a collector per helper node. */
function loadFlow(baseUrl, props) {
  return real.loadFlow(baseUrl, props, V2_SERVER, made);
}

/** Submits a workflow through the submit node; resolves to the job id it sent and when it was sent. */
async function submitThrough(out, workflow, extra = {}, ms = 15_000) {
  const sentAt = Date.now();
  const msg = await real.outputOf(out, 'submit', 'submitted', { payload: workflow, ...extra }, ms);
  return { id: msg.prompt_id, sentAt, answeredAt: msg.receivedAt };
}

/** The config node's v2 event streams (their stats: streams opened, refused, frames). */
function eventStreams() {
  return helper.getNode('cfg').connection.dialect.events();
}

module.exports = {
  NODES: real.NODES,
  v2Config,
  v2Flow,
  loadFlow,
  collect: real.collect,
  send: real.send,
  outputOf: real.outputOf,
  submitThrough,
  endOf: real.endOf,
  eventStreams,
};
