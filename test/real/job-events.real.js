'use strict';
// The job-events node against a real ComfyUI: a job another client submits over REST is told (each step once,
// its outputs as the server holds them), an interrupted run is told cancelled whatever word the server uses,
// and no request is made while the server is idle. Every request the node's connection makes is counted on
// the client side (the server keeps no count).
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { comfy } = require('./support/comfy');
const {
  api,
  submitDirect,
  jobOf,
  jobReaches,
  settle,
  sleep,
  until,
  prefix,
  quickJob,
  longJob,
} = require('./support/server');

const NODES = [
  require('../../dist/nodes/graph-gen-config.js'),
  require('../../dist/nodes/graph-gen-job-events.js'),
];
/** How long the server is left idle while requests are counted. */
const IDLE_MS = 10_000;

/** Loads config `cfg` and a job-events node telling every event; resolves once it watches. */
async function watch(clients = 'all') {
  await helper.load(NODES, [
    { id: 'real', type: 'tab' },
    { id: 'cfg', type: 'graph-gen-config', baseUrl: comfy.url, partnerKeyField: 'api_key_service_org' },
    {
      id: 'events',
      z: 'real',
      type: 'graph-gen-job-events',
      server: 'cfg',
      events: 'queued,started,completed,failed,cancelled',
      clients,
      wires: [['out']],
    },
    { id: 'out', z: 'real', type: 'helper' },
  ]);
  const received = [];
  helper.getNode('out').on('input', (msg) => received.push(msg));
  // Every request of the connection, by path: the reads go through its HTTP client's json().
  const requests = [];
  const http = helper.getNode('cfg').connection.http;
  const json = http.json.bind(http);
  http.json = (path, options) => {
    requests.push(options?.query ? `${path}?${new URLSearchParams(options.query)}` : path);
    return json(path, options);
  };
  const node = helper.getNode('events');
  const shown = [];
  const status = node.status.bind(node);
  node.status = (value) => {
    shown.push(value.text);
    return status(value);
  };
  await until(() => shown.includes('watching'), 'the node to watch', 15_000);
  return { received, requests };
}

const topicsOf = (received, id) => received.filter((msg) => msg.prompt_id === id).map((msg) => msg.topic);

/** The requests settle: none for a second (the looks a change made are over). */
async function quiet(requests) {
  for (;;) {
    const before = requests.length;
    await sleep(1000);
    if (requests.length === before) return;
  }
}

describe('real ComfyUI: job events', function () {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());
  afterEach(async () => {
    await helper.unload();
    await settle();
  });

  it('tells a job another client submitted over REST, each step once, with the outputs the server holds', async () => {
    const { received } = await watch();
    const name = prefix('events');
    const id = await submitDirect(quickJob(name));
    await until(() => topicsOf(received, id).includes('completed'), 'the job to be told completed', 30_000);
    await sleep(1500);
    assert.deepEqual(topicsOf(received, id), ['queued', 'started', 'completed']);
    const done = received.find((msg) => msg.prompt_id === id && msg.topic === 'completed');
    const job = await jobOf(id);
    assert.deepEqual(done.payload.outputs, job.outputs);
    assert.equal(done.payload.files.length, 1);
    assert.ok(done.payload.files[0].filename.startsWith(name), done.payload.files[0].filename);
  });

  it('tells an interrupted run cancelled (v0.8 calls it failed, v0.9 and later cancelled)', async () => {
    const { received } = await watch();
    const id = await submitDirect(longJob(prefix('events-interrupted')));
    await jobReaches(id, 'in_progress', 60_000);
    await until(() => topicsOf(received, id).includes('started'), 'the job to be told started', 15_000);
    await api('/api/interrupt', { method: 'POST', body: { prompt_id: id } });
    await until(() => topicsOf(received, id).includes('cancelled'), 'the job to be told cancelled', 30_000);
    assert.deepEqual(topicsOf(received, id), ['queued', 'started', 'cancelled']);
  });

  it("with only others' jobs, leaves out one submitted with this config node's client id", async () => {
    const { received } = await watch('others');
    const clientId = helper.getNode('cfg').connection.clientId;
    const ours = await api('/api/prompt', {
      method: 'POST',
      body: { prompt: longJob(prefix('events-ours'), { blurs: 1 }), client_id: clientId },
    });
    assert.equal(ours.status, 200, JSON.stringify(ours.body));
    const theirs = await submitDirect(quickJob(prefix('events-theirs')));
    await until(() => topicsOf(received, theirs).includes('completed'), 'their job to be told', 60_000);
    await jobReaches(ours.body.prompt_id, 'completed', 60_000);
    await sleep(1500);
    assert.deepEqual(topicsOf(received, theirs), ['queued', 'started', 'completed']);
    assert.deepEqual(topicsOf(received, ours.body.prompt_id), []);
  });

  it('after a restart tells a job that ended while Node-RED was down once, and none told before', async () => {
    let { received } = await watch();
    const before = await submitDirect(quickJob(prefix('events-before')));
    await until(() => topicsOf(received, before).includes('completed'), 'the first job to be told', 30_000);
    await sleep(1500);
    await helper.unload();
    const whileDown = await submitDirect(quickJob(prefix('events-down')));
    await jobReaches(whileDown, 'completed', 30_000);
    ({ received } = await watch());
    await until(() => topicsOf(received, whileDown).includes('completed'), 'the job to be told', 30_000);
    await sleep(1500);
    assert.deepEqual(topicsOf(received, whileDown), ['completed']);
    assert.deepEqual(topicsOf(received, before), []);
  });

  it('makes no request while the server is idle, and reads a change only when one comes', async () => {
    const { received, requests } = await watch();
    await quiet(requests);
    const atStart = requests.splice(0);
    await sleep(IDLE_MS);
    const idle = requests.splice(0);
    const id = await submitDirect(quickJob(prefix('events-idle')));
    await until(() => topicsOf(received, id).includes('completed'), 'the job to be told completed', 30_000);
    await quiet(requests);
    const forTheJob = requests.splice(0);
    await sleep(IDLE_MS);
    const idleAfter = requests.splice(0);
    process.stdout.write(
      `      ComfyUI ${comfy.version}: at start ${atStart.length} requests (${atStart.join(', ')}); ` +
        `idle ${IDLE_MS / 1000} s: ${idle.length}; one job: ${forTheJob.length} (${forTheJob.join(', ')}); ` +
        `idle again: ${idleAfter.length}\n`,
    );
    assert.deepEqual(idle, [], 'no request while the server is idle');
    assert.deepEqual(idleAfter, [], 'none once the job was told');
    assert.ok(forTheJob.length > 0);
  });
});
