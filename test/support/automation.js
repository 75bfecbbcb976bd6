'use strict';
const { coreNode, statuses } = require('./node-red');
// Shared by the automation test files: a sandbox with only the automation service, a flow builder, and
// waits for what a user would see (messages on a wire, Catch node messages, node statuses).
const helper = require('node-red-node-test-helper');
const { SandboxServer } = require('../../dist/sandbox/server');
const { mountAutomationService } = require('../../dist/sandbox/automation-service');

const KEY = 'auto-secret-key-123';

async function startAutomationSandbox(options = {}) {
  const server = new SandboxServer();
  const service = mountAutomationService(server, { apiKey: KEY, ...options });
  await server.listen();
  return { server, service, counters: server.counters, faults: server.faults, close: () => server.close() };
}

/** The list requests the sandbox saw (path ends in /workflows). */
function listRequests(sandbox) {
  return sandbox.counters.matching(/\/workflows$/);
}

function flow(sandbox, listProps = {}, configProps = {}) {
  // Flow nodes on a tab with a position: the runtime takes a node without `x`/`y` for a config node.
  return [
    { id: 'f1', type: 'tab' },
    {
      id: 'cfg',
      type: 'automation-config',
      deployment: 'self-hosted',
      protocol: 'http',
      host: '127.0.0.1',
      port: String(sandbox.server.port),
      apiVersion: '1',
      headerName: 'X-AUTOMATION-API-KEY',
      retries: '2',
      retryDelay: '5',
      ...configProps,
    },
    {
      id: 'list',
      z: 'f1',
      x: 100,
      y: 100,
      type: 'automation-list-workflows',
      server: 'cfg',
      active: 'any',
      activeType: 'filter',
      limit: '100',
      limitType: 'num',
      mode: 'page',
      split: 'none',
      maxPages: '',
      wires: [['out']],
      ...listProps,
    },
    { id: 'out', z: 'f1', x: 1, y: 1, type: 'helper' },
    { id: 'catcher', z: 'f1', x: 1, y: 1, type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
    { id: 'caught', z: 'f1', x: 1, y: 1, type: 'helper' },
  ];
}

/** Collects every msg a helper node receives; `next(n)` waits for the n-th (1-based) one. */
function collect(id) {
  const node = helper.getNode(id);
  const received = [];
  const waiters = [];
  node.on('input', (msg) => {
    received.push(msg);
    for (const waiter of waiters.splice(0)) waiter();
  });
  return {
    received,
    async next(count = received.length + 1, timeoutMs = 5000) {
      const started = Date.now();
      while (received.length < count) {
        if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for msg ${count} on ${id}`);
        await new Promise((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 50);
        });
      }
      return received[count - 1];
    },
  };
}

module.exports = { KEY, coreNode, startAutomationSandbox, listRequests, flow, collect, statuses };
