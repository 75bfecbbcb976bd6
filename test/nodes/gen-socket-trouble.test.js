'use strict';
// Submit, upload, download and queue show the shared socket's trouble ("reconnecting", "unauthorized") in
// their status while it lasts, as await-job does, and their own status again when it ends.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, ALL_NODES, textToImage, outputOf, nextMessage } = require('../support/generation-nodes');
const { statuses, until, withFastSockets } = require('../support/sockets');

const NODES = ['submit', 'upload', 'download', 'queue'];

describe('generation nodes: the shared socket in their status', () => {
  let sandbox;
  withFastSockets();

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
  });
  afterEach(async () => {
    sandbox.faults.clear();
    await helper.unload();
  });

  /** One of each node on config `c`; the submit is wired to `out` and sends on. */
  async function load() {
    const flow = [
      { id: 'c', type: 'graph-gen-config', baseUrl: sandbox.url, partnerKeyField: 'api_key_service_org' },
      { id: 'submit', type: 'graph-gen-submit', server: 'c', wires: [['out']] },
      { id: 'upload', type: 'graph-gen-upload', server: 'c', wires: [[]] },
      { id: 'download', type: 'graph-gen-download', server: 'c', wires: [[]] },
      { id: 'queue', type: 'graph-gen-queue', server: 'c', action: 'list', wires: [['listed']] },
      { id: 'out', type: 'helper' },
      { id: 'listed', type: 'helper' },
      { id: 'catcher', type: 'catch', scope: null, uncaught: false, wires: [['caught']] },
      { id: 'caught', type: 'helper' },
    ];
    await helper.load(ALL_NODES, flow, { c: { apiKey: API_KEY } });
    const seen = Object.fromEntries(NODES.map((id) => [id, statuses(id)]));
    return { seen, connection: helper.getNode('c').connection };
  }

  const lastText = (seen, id) => seen[id].at(-1)?.text;

  it('all four say "reconnecting" while the socket is down, and their own status again once it is back', async () => {
    const { seen, connection } = await load();
    // A submit opens the shared socket, and leaves its own status.
    const submitted = await outputOf('submit', { payload: textToImage() });
    const own = `submitted ${submitted.prompt_id.slice(0, 8)}`;
    assert.equal(connection.sockets().state, 'open');
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: Infinity });
    sandbox.events.dropSockets();
    await until(
      () => NODES.every((id) => lastText(seen, id) === 'reconnecting'),
      'every node to say reconnecting',
    );
    for (const id of NODES)
      assert.deepEqual(seen[id].at(-1), { fill: 'yellow', shape: 'ring', text: 'reconnecting' });
    // Failed reconnect attempts do not make the status flicker.
    const handshakes = sandbox.counters.handshakes.length;
    await until(() => sandbox.counters.handshakes.length >= handshakes + 2, 'two more reconnect attempts');
    for (const id of NODES) assert.deepEqual(seen[id].map((s) => s.text).slice(-1), ['reconnecting']);
    assert.equal(seen.upload.filter((s) => s.text === 'reconnecting').length, 1);
    sandbox.faults.clear();
    await until(() => connection.sockets().state === 'open', 'the socket to be back');
    await until(() => lastText(seen, 'submit') === own, "submit's own status back");
    assert.deepEqual(seen.submit.at(-1), { fill: 'green', shape: 'dot', text: own });
    for (const id of ['upload', 'download', 'queue']) assert.deepEqual(seen[id].at(-1), {});
  });

  it('all four say "unauthorized" (red) while the socket is refused; a queue list during it keeps that showing', async () => {
    const { seen, connection } = await load();
    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 401, times: Infinity });
    assert.equal(await connection.sockets().ready(2000), false);
    await until(
      () => NODES.every((id) => lastText(seen, id) === 'unauthorized'),
      'every node to say unauthorized',
    );
    for (const id of NODES)
      assert.deepEqual(seen[id].at(-1), { fill: 'red', shape: 'ring', text: 'unauthorized' });
    // The queue's own answer is kept for when the trouble ends, not shown over it.
    const answer = nextMessage('listed');
    helper.getNode('queue').receive({});
    const listed = await answer;
    assert.deepEqual(listed.running, []);
    assert.equal(lastText(seen, 'queue'), 'unauthorized');
    sandbox.faults.clear();
    await until(() => connection.sockets().state === 'open', 'the socket to be accepted', 5000);
    await until(() => lastText(seen, 'queue') === '0 running, 0 queued', "the queue's own status back");
  });

  it('each node registers with the shared socket without opening it, and frees its registration on close', async () => {
    const { connection } = await load();
    const sockets = connection.sockets();
    assert.equal(sockets.users.size, 4);
    assert.equal(sockets.state, 'idle');
    assert.equal(sandbox.counters.handshakes.length, 0);
    for (const id of NODES) await helper.getNode(id).close(true);
    assert.equal(sockets.users.size, 0);
  });
});
