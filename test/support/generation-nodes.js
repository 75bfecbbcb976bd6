'use strict';
const { coreNode, textToImage } = require('./node-red');
// Shared by the generation REST tests (test/nodes/gen-*.test.js and others): node modules to load, a
// text-to-image workflow the sandbox accepts, and small flow builders.
const helper = require('node-red-node-test-helper');

const configNode = require('../../dist/nodes/graph-gen-config.js');
const uploadNode = require('../../dist/nodes/graph-gen-upload.js');
const submitNode = require('../../dist/nodes/graph-gen-submit.js');
const downloadNode = require('../../dist/nodes/graph-gen-download.js');
const queueNode = require('../../dist/nodes/graph-gen-queue.js');
const catchNode = coreNode('common/25-catch.js');
const ALL_NODES = [configNode, uploadNode, submitNode, downloadNode, queueNode, catchNode];

const API_KEY = 'sk-test-4f1d2c3b-secret';
const PARTNER_KEY = 'partner-9a8b7c-secret';

/** A flow: config `c`, the node under test `n` (wired to helper `out`), and a catch node wired to `caught`. */
function flowWith(node, { baseUrl, name = 'n' } = {}) {
  return [
    { id: 'c', type: 'graph-gen-config', baseUrl, partnerKeyField: 'api_key_service_org' },
    { id: name, type: node.type, server: 'c', wires: [['out']], ...node },
    { id: 'out', type: 'helper' },
    { id: 'catcher', type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
    { id: 'caught', type: 'helper' },
  ];
}

/** Loads a flow with the given credentials for config `c`. */
async function load(flow, credentials = { apiKey: API_KEY, partnerKey: PARTNER_KEY }) {
  await helper.load(ALL_NODES, flow, { c: credentials });
}

// One permanent listener per helper node feeds a mailbox: Node-RED's own input-listener bookkeeping does not
// cope with listeners added and removed per test (EventEmitter.once), so none are removed.
const mailboxes = new WeakMap();

function mailbox(id) {
  const node = helper.getNode(id);
  let box = mailboxes.get(node);
  if (!box) {
    box = { queue: [], waiters: [] };
    mailboxes.set(node, box);
    node.on('input', (msg) => {
      const waiter = box.waiters.shift();
      if (waiter) waiter(msg);
      else box.queue.push(msg);
    });
  }
  return box;
}

/** The next message a helper node receives (rejects after `ms`). */
function nextMessage(id, ms = 5000) {
  const box = mailbox(id);
  if (box.queue.length > 0) return Promise.resolve(box.queue.shift());
  return new Promise((resolve, reject) => {
    const waiter = (msg) => {
      clearTimeout(timer);
      resolve(msg);
    };
    const timer = setTimeout(() => {
      box.waiters.splice(box.waiters.indexOf(waiter), 1);
      reject(new Error(`no message reached ${id} within ${ms} ms`));
    }, ms);
    timer.unref();
    box.waiters.push(waiter);
  });
}

/** `count` messages reaching a helper node, in order. */
async function messages(id, count, ms = 5000) {
  const seen = [];
  while (seen.length < count) seen.push(await nextMessage(id, ms));
  return seen;
}

/** Messages already waiting at a helper node (taken). */
function pending(id) {
  return mailbox(id).queue.splice(0);
}

/** Sends a msg into node `id` and waits for the catch node's msg (a failure). */
async function failureOf(id, msg, ms = 5000) {
  const caught = nextMessage('caught', ms);
  helper.getNode(id).receive(msg);
  return caught;
}

/** Sends a msg into node `id` and waits for its output. */
async function outputOf(id, msg, ms = 5000) {
  mailbox('caught');
  const out = nextMessage('out', ms);
  helper.getNode(id).receive(msg);
  try {
    return await out;
  } catch (error) {
    const failure = pending('caught')[0];
    throw failure ? new Error(`the node failed: ${failure.error.message}`) : error;
  }
}

/** Everything a msg or error carries, as text, to look for secrets in. */
function textOf(value) {
  return JSON.stringify(value, (_key, inner) => (Buffer.isBuffer(inner) ? '<buffer>' : inner));
}

module.exports = {
  API_KEY,
  PARTNER_KEY,
  ALL_NODES,
  textToImage,
  flowWith,
  load,
  nextMessage,
  messages,
  pending,
  failureOf,
  outputOf,
  textOf,
};
