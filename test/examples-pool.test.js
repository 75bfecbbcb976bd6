'use strict';
// Example 10 (server pool, issue 29) as shipped, against two sandboxes: its config nodes read ${GRAPH_GEN_URL}
// (server A) and ${GRAPH_GEN_URL_2} (server B) from the environment, keys are ${GRAPH_GEN_API_KEY} credentials,
// with examples.test.js's test-only changes (debug nodes become helper nodes, files go to a temporary
// directory: test/support/examples.js). Six jobs at once spread over both servers, and each job's await and
// download go to the server that ran it (msg.server): what a user sees in the debug sidebar, checked against
// what each server was asked. It needs the graph-gen-pool node; so does the check below that every type an
// example uses is one Node-RED, this package or the dashboard package registers.
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../dist/sandbox');
const {
  NODES,
  examples,
  prepare,
  otherWorkflow,
  byName,
  messages,
  nodeErrors,
  orNodeErrors,
  silent,
} = require('./support/examples');

const POOL_NODES = [...NODES, require('../dist/nodes/graph-gen-pool.js')];
const GENERATION_KEY = 'examples-pool-generation-key-61';
const ENV = { GRAPH_GEN_URL: undefined, GRAPH_GEN_URL_2: undefined, GRAPH_GEN_API_KEY: GENERATION_KEY };
/** The prompts example 10's function node makes, one job each. */
const PROMPTS = [
  'a lighthouse on a cliff at dawn',
  'a harbour at night',
  'a mountain lake in autumn',
  'a desert caravan at dusk',
  'a snowy village street',
  'a field of sunflowers',
];

/** The node types a package registers, from its package.json (`node-red.nodes` is keyed by type). */
function packageTypes(packageJson) {
  return Object.keys(require(packageJson)['node-red'].nodes);
}

/** The node types Node-RED's own nodes register (the Node-RED under test: NODE_RED_PATH selects another). */
function coreTypes() {
  const base = process.env.NODE_RED_PATH ? path.dirname(process.env.NODE_RED_PATH) : __dirname;
  const core = path.join(
    path.dirname(require.resolve('@node-red/nodes/package.json', { paths: [base] })),
    'core',
  );
  const types = new Set();
  for (const file of fs.readdirSync(core, { recursive: true }).filter((name) => name.endsWith('.html'))) {
    const text = fs.readFileSync(path.join(core, file), 'utf8');
    for (const [, type] of text.matchAll(/registerType\(\s*["']([^"']+)["']/g)) types.add(type);
  }
  return types;
}

describe('examples: 10-server-pool against two sandboxes', function () {
  this.timeout(30000);
  /** The sandbox behind each of the example's servers, by the config node's name. */
  const servers = {};
  let dir;
  const saved = {};

  before(async () => {
    servers['server A'] = await startSandbox({ generationApiKey: GENERATION_KEY });
    servers['server B'] = await startSandbox({ generationApiKey: GENERATION_KEY });
    ENV.GRAPH_GEN_URL = servers['server A'].url;
    ENV.GRAPH_GEN_URL_2 = servers['server B'].url;
    for (const [name, value] of Object.entries(ENV)) {
      saved[name] = process.env[name];
      process.env[name] = value;
    }
    await helper.startServer();
  });

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-examples-pool-'));
  });

  afterEach(async () => {
    await helper.unload();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  after(async () => {
    await helper.stopServer();
    await Promise.all(Object.values(servers).map((sandbox) => sandbox.close()));
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  it('every node type the examples use is one Node-RED, this package or the dashboard package registers', () => {
    const known = new Set([
      'tab',
      ...coreTypes(),
      ...packageTypes('../package.json'),
      ...packageTypes('@flowfuse/node-red-dashboard/package.json'),
    ]);
    const unknown = Object.entries(examples).flatMap(([name, nodes]) =>
      nodes.filter((node) => !known.has(node.type)).map((node) => `${name}: ${node.type}`),
    );
    assert.deepStrictEqual(unknown, [], 'an example uses a node type nothing registers');
  });

  it('10-server-pool: six jobs at once run on both servers, each awaited and downloaded from the server that ran it', async () => {
    const { nodes, credentials } = prepare('10-server-pool', dir);
    const configIds = Object.fromEntries(
      nodes.filter((node) => node.type === 'graph-gen-config').map((node) => [node.name, node.id]),
    );
    assert.deepStrictEqual(Object.keys(configIds).sort(), Object.keys(servers));
    // Server B has run jobs of another client before: its job numbers, and so its file names, differ from
    // server A's, as two real servers' do. A download sent to the wrong server then finds no such file.
    const earlier = Array.from({ length: 10 }, () =>
      servers['server B'].jobs.submit(otherWorkflow(), 'another-client'),
    );
    for (let waited = 0; earlier.some((job) => job.state !== 'completed'); waited += 10) {
      assert.ok(waited < 8000, "server B's earlier jobs did not end");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    for (const sandbox of Object.values(servers)) sandbox.counters.reset();

    await helper.load(POOL_NODES, nodes, credentials);
    const savedFiles = messages(byName(nodes, 'helper', 'saved file'), PROMPTS.length, 20000);
    const ranOn = messages(byName(nodes, 'helper', 'ran on'), PROMPTS.length, 20000);
    const failures = silent(byName(nodes, 'helper', 'did not complete'));
    byName(nodes, 'inject', 'six jobs').receive({});
    const files = await orNodeErrors(savedFiles);
    const shown = await orNodeErrors(ranOn);

    assert.deepStrictEqual(failures, []);
    assert.deepStrictEqual(nodeErrors(), []);
    assert.deepStrictEqual(files.map((msg) => msg.topic).sort(), [...PROMPTS].sort());
    // What the "ran on" debug node shows: each job's server, and both servers among them.
    const names = shown.map((msg) => msg.server && msg.server.name);
    assert.ok(
      names.every((name) => name in servers),
      `msg.server.name is not a member's name: ${names.join(', ')}`,
    );
    assert.ok(
      names.includes('server A') && names.includes('server B'),
      `the six jobs did not spread over both servers: ${names.join(', ')}`,
    );

    // Each saved picture: its job ran on the server msg.server names, and only there; its file was asked
    // of that server.
    const downloads = {};
    for (const name of Object.keys(servers)) {
      downloads[name] = servers[name].counters
        .matching('/api/view', 'GET')
        .map((seen) => seen.query.get('filename'));
    }
    for (const msg of files) {
      const name = msg.server.name;
      assert.strictEqual(msg.server.id, configIds[name]);
      const job = servers[name].jobs.jobs.get(msg.prompt_id);
      assert.ok(job, `job "${msg.topic}" is not on ${name}, where msg.server says it ran`);
      assert.strictEqual(job.state, 'completed');
      assert.strictEqual(job.prompt['6'].inputs.text, `${msg.topic}, oil painting`);
      const other = Object.keys(servers).find((candidate) => candidate !== name);
      assert.strictEqual(servers[other].jobs.jobs.has(msg.prompt_id), false, `job "${msg.topic}" is on both`);
      const output = job.outputs['9'].images[0].filename;
      assert.ok(downloads[name].includes(output), `"${msg.topic}"'s picture was not asked of ${name}`);
      assert.strictEqual(msg.filename, path.join(dir, `${msg.prompt_id}-${output}`));
      assert.deepStrictEqual(fs.readFileSync(msg.filename).subarray(1, 4).toString(), 'PNG');
    }
    // No job posted twice, and each server asked only for its own jobs' pictures.
    const posted = Object.values(servers).map((sandbox) => sandbox.counters.count('/api/prompt', 'POST'));
    assert.strictEqual(
      posted.reduce((sum, count) => sum + count, 0),
      PROMPTS.length,
    );
    for (const name of Object.keys(servers)) {
      const ran = files.filter((msg) => msg.server.name === name).length;
      assert.strictEqual(
        downloads[name].length,
        ran,
        `${name} was asked for ${downloads[name].length} files`,
      );
    }
  });
});
