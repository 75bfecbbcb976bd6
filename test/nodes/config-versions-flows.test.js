'use strict';
// Flows made with each earlier release (test/fixtures/flows/, as each release's editor saved them) deploy
// unchanged: loaded into a real Node-RED against the sandbox, each node does what it did before the settings
// it lacks existed (config-versions.ts fills them). A config node speaks today's API with its key as an API key;
// a submit node saved before "new seed each run" keeps its seeds; an await node resumes after a restart; an
// upload node refuses local addresses; buffer downloads, queue lists, job events and list pages work as then.
// Also a node of a newer release: read as it is, said once.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { GENERATION_LIMITS } = require('../../dist/generation/connection');
const { CONFIG_VERSIONS } = require('../../dist/nodes/config-versions');
const { statuses, textToImage } = require('../support/node-red');
const { until, collect, withFastSockets } = require('../support/sockets');
const { RELEASES, deployFixture, readFixture } = require('../support/config-versions');

const KEY = 'sk-versions-7c1e-secret';
const AUTOMATION_KEY = 'auto-versions-2b9d-secret';
const CREDENTIALS = { server: { apiKey: KEY }, automation: { apiKey: AUTOMATION_KEY } };
const PICTURE = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');

/** Warnings the runtime logged for nodes of `type` (Node-RED's warn level). */
function warningsOf(type) {
  return helper
    .log()
    .args.map(([entry]) => entry)
    .filter((entry) => entry && entry.level === 30 && entry.type === type)
    .map((entry) => String(entry.msg));
}

describe('flows saved by earlier releases deploy unchanged (config versions)', () => {
  withFastSockets();
  let sandbox;
  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({
      generationApiKey: KEY,
      automation: { apiKey: AUTOMATION_KEY },
      events: { autoRun: false, stepDelayMs: 1 },
    });
    sandbox.automation.seed(5);
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => sandbox.counters.reset());
  afterEach(async () => helper.unload());

  const deploy = (file, change) => deployFixture(file, sandbox, { credentials: CREDENTIALS, change });
  const keptFile = () =>
    path.join(
      helper._settings?.userDir ?? helper._RED.settings.userDir,
      'graph-gen',
      'await-job-await.jsonl',
    );

  /** Sends `msg` into node `id`; resolves to what its first output sends (a Catch node's msg fails it). */
  async function outputOf(id, msg, output = 1) {
    const out = collect(`${id}-out${output}`);
    const caught = collect('caught');
    helper.getNode(id).receive(msg);
    await until(() => out.received.length > 0 || caught.received.length > 0, `${id} to answer`);
    if (caught.received.length > 0) throw new Error(`${id} failed: ${caught.received[0].error.message}`);
    return out.received[0];
  }

  /** Submits through the flow's submit node (its own workflow; by hand, in msg.payload). */
  const submit = (file) => outputOf('submit', file.startsWith('0-') ? { payload: textToImage() } : {});

  for (const release of RELEASES) {
    const { file, versions } = release;
    const keepsSeeds = versions['graph-gen-submit'] < 2;

    describe(`a flow made with ${release.label} (${file})`, () => {
      it('its config node speaks today’s API with its key as an API key, no TLS or proxy, default limits; queue and list pages work', async () => {
        await deploy(file);
        const { connection, settingsError } = helper.getNode('server');
        assert.equal(settingsError, undefined);
        assert.equal(connection.dialect.name, 'comfyui');
        assert.equal(connection.settings.baseUrl, sandbox.url);
        assert.equal(connection.settings.apiKey, KEY);
        assert.equal(connection.settings.auth, undefined, 'the API-key scheme');
        assert.equal(connection.settings.transport, undefined, 'no TLS or proxy node');
        assert.equal(connection.settings.partnerKeyField, 'api_key_service_org');
        assert.deepEqual(connection.settings.limits, GENERATION_LIMITS);

        const queue = await outputOf('queue', {});
        assert.ok(Array.isArray(queue.running) && Array.isArray(queue.pending), 'a list of the queue');
        const [listed] = sandbox.counters.matching('/api/queue');
        assert.equal(listed.headers['x-api-key'], KEY);

        const page = await outputOf('list', {});
        assert.equal(page.payload.length, 5, 'one page');
        const [asked] = sandbox.counters.matching(/\/workflows$/);
        assert.equal(asked.query.get('limit'), '100');
        assert.equal(asked.headers['x-automation-api-key'], AUTOMATION_KEY);
        assert.deepEqual(warningsOf('graph-gen-config'), []);
      });

      it(`its submit node ${keepsSeeds ? 'keeps its seeds' : 'draws a new seed each run, as saved'}; await and download as then`, async () => {
        await deploy(file);
        let events;
        if (versions['graph-gen-job-events'] !== undefined) {
          events = collect('events-out1');
          const seen = statuses('events');
          await until(
            () => seen.some((status) => status.text === 'watching'),
            'the job events node to watch',
          );
        }
        const first = await submit(file);
        const second = await submit(file);
        const seeds = [first, second].map((msg) => msg.workflow['3'].inputs.seed);
        if (keepsSeeds) {
          assert.deepEqual(seeds, [1, 1]);
          assert.equal(first.seeds, undefined);
        } else {
          assert.notEqual(seeds[0], seeds[1]);
          assert.deepEqual(first.seeds, { 3: seeds[0] });
        }

        // Await: files of all nodes, no progress output; then a buffer download of the picture.
        const done = collect('await-out1');
        const progress = collect('await-out3');
        helper.getNode('await').receive(first);
        sandbox.events.run(first.prompt_id);
        await done.next(1, 8000);
        const result = done.received[0].payload;
        assert.equal(result.status, 'completed');
        assert.deepEqual(result.files, sandbox.jobs.jobs.get(first.prompt_id).outputs['9'].images);
        assert.equal(progress.received.length, 0);
        const file1 = await outputOf('download', done.received[0]);
        assert.ok(Buffer.isBuffer(file1.payload) && file1.payload.length > 0, 'a Buffer (buffer mode)');
        assert.equal(file1.filename, result.files[0].filename);

        if (events) {
          await until(
            () =>
              events.received.some((msg) => msg.prompt_id === first.prompt_id && msg.topic === 'completed'),
            'the job events node to tell the job completed',
          );
          assert.deepEqual(
            [...new Set(events.received.map((msg) => msg.topic))].sort(),
            ['completed'],
            'completed, failed and cancelled only',
          );
        }
        sandbox.events.run(second.prompt_id);
      });

      it('its await node resumes an await after Node-RED restarts (msg.resumed), as before', async () => {
        await deploy(file);
        const job = await submit(file);
        helper.getNode('await').receive({ ...job, topic: 'fox' });
        await until(() => fs.existsSync(keptFile()), 'the await to be kept for a restart');
        await helper.unload();
        await deploy(file);
        const done = collect('await-out1');
        sandbox.events.run(job.prompt_id);
        const msg = await done.next(1, 8000);
        assert.equal(msg.resumed, true);
        assert.equal(msg.topic, 'fox');
        assert.equal(msg.payload.status, 'completed');
      });

      it('its upload node uploads a Buffer under msg.filename and refuses a local address, as new nodes do', async () => {
        await deploy(file);
        const uploaded = await outputOf('upload', { payload: PICTURE, filename: 'fox.png' });
        assert.equal(uploaded.payload.name, 'fox.png');
        const [request] = sandbox.counters.matching('/api/upload/image');
        assert.equal(request.headers['x-api-key'], KEY);
        const caught = collect('caught');
        helper.getNode('upload').receive({ payload: `${sandbox.url}/api/view?filename=fox.png` });
        const failure = await caught.next(1, 5000);
        assert.match(failure.error.message, /a local address .*"Local addresses" allowed/);
        assert.equal(sandbox.counters.count(/^\/api\/view/), 0, 'nothing fetched');
      });
    });
  }

  it('a pool written by hand without a strategy chooses the soonest server (its first release’s default)', async () => {
    await deploy('0-written-by-hand');
    const pool = helper.getNode('pool').pool();
    assert.equal(pool.strategy, 'soonest');
    assert.deepEqual(
      pool.members.map((member) => member.id),
      ['server'],
    );
  });

  it('a flow saved with versions (today’s editor) deploys as the same flow without them', async () => {
    await deploy('5-dialect', (flow) => {
      for (const node of flow)
        if (CONFIG_VERSIONS[node.type]) node.configVersion = CONFIG_VERSIONS[node.type];
    });
    const job = await submit('5-dialect');
    assert.equal(typeof job.seeds?.['3'], 'number', 'new seed each run, as saved');
    helper.getNode('await').receive(job);
    const done = collect('await-out1');
    sandbox.events.run(job.prompt_id);
    assert.equal((await done.next(1, 8000)).payload.status, 'completed');
    assert.ok(fs.existsSync(keptFile()), 'resume as saved');
  });

  it('nodes of a newer release are read as they are (their settings used), and said once per type', async () => {
    const newer = 5000 + Math.floor(Math.random() * 100000);
    await deploy('5-dialect', (flow) => {
      const awaitNode = flow.find((node) => node.id === 'await');
      const submitNode = flow.find((node) => node.id === 'submit');
      Object.assign(awaitNode, { configVersion: newer, resume: false, somethingNew: 'x' });
      Object.assign(submitNode, { configVersion: newer, newSeed: false });
      flow.push({ ...awaitNode, id: 'await2', configVersion: newer, y: 400 });
    });
    const said = (type) => warningsOf(type).filter((text) => text.includes(`version ${newer}`));
    assert.equal(said('graph-gen-await-job').length, 1, 'once for two await nodes');
    assert.equal(said('graph-gen-submit').length, 1);
    assert.match(said('graph-gen-submit')[0], /newer release of @graph-gen\/node-red/);
    assert.match(
      said('graph-gen-submit')[0],
      new RegExp(`knows up to ${CONFIG_VERSIONS['graph-gen-submit']}`),
    );
    const job = await submit('5-dialect');
    assert.equal(job.workflow['3'].inputs.seed, 1, 'its newSeed (off) as saved');
    helper.getNode('await').receive(job);
    const done = collect('await-out1');
    sandbox.events.run(job.prompt_id);
    assert.equal((await done.next(1, 8000)).payload.status, 'completed');
    assert.equal(fs.existsSync(keptFile()), false, 'its resume (off) as saved');
    // Deployed again (a restart): said no more in this process.
    await helper.unload();
    await deploy('5-dialect', (flow) => {
      flow.find((node) => node.id === 'await').configVersion = newer;
    });
    assert.equal(said('graph-gen-await-job').length, 0);
    assert.ok(readFixture('5-dialect').every((node) => node.configVersion === undefined));
  });
});
