'use strict';
// The submit dialog's endpoints on the config node: the server's node definitions (cached per config node,
// address and key; a refresh reads them again) and the conversion of UI-format workflows. Real Node-RED
// runtime (test helper) and the sandbox over HTTP; the key never comes back, an unreachable server is a
// sentence.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../dist/sandbox');
const { API_KEY, PARTNER_KEY, flowWith } = require('./gen-helpers');

const configNode = require('../dist/nodes/graph-gen-config.js');
const queueNode = require('../dist/nodes/graph-gen-queue.js');

// The permissions a request was asked for, and the ones the (pretend) user has.
const asked = [];
let granted = new Set(['graph-gen-config.read', 'graph-gen-config.write']);
function configWithPermissions(RED) {
  RED.auth.needsPermission = (permission) => (req, res, next) => {
    asked.push(permission);
    if (granted.has(permission)) next();
    else res.status(401).json({ message: 'permission denied' });
  };
  return configNode(RED);
}

async function load(flow, credentials = { apiKey: API_KEY, partnerKey: PARTNER_KEY }) {
  await helper.load([configWithPermissions, queueNode], flow, { c: credentials });
}

const definitions = (body) => helper.request().post('/graph-gen/graph-gen-config/definitions').send(body);
const convert = (body) => helper.request().post('/graph-gen/graph-gen-config/convert').send(body);

/** A UI-format workflow as the graph editor saves it: a checkpoint loader wired into a titled prompt. */
const UI_WORKFLOW = require('./fixtures/ui/checkpoint-prompt.json');

describe('submit dialog endpoints (node definitions, UI-format conversion)', () => {
  let cloud;
  let selfHosted;
  const objectInfoReads = (sandbox) => sandbox.counters.matching('/api/object_info').length;
  /** Every answer a test reads goes through here: none may hold the key. */
  const remember = (response) => {
    const text = JSON.stringify(response.body);
    assert.ok(!text.includes(API_KEY), `an answer holds the key: ${text.slice(0, 200)}`);
    return response;
  };

  before(async () => {
    await helper.startServer();
    cloud = await startSandbox({ generationApiKey: API_KEY });
    selfHosted = await startSandbox();
  });
  after(async () => {
    await cloud.close();
    await selfHosted.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    cloud.counters.reset();
    selfHosted.counters.reset();
    asked.length = 0;
    granted = new Set(['graph-gen-config.read', 'graph-gen-config.write']);
  });
  afterEach(async () => helper.unload());

  it('answers a deployed node the value inputs of every node type, read with its stored key', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const answer = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    assert.equal(answer.status, 200);
    assert.equal(answer.body.ok, true, answer.body.message);
    const { KSampler, CheckpointLoaderSimple, CLIPTextEncode } = answer.body.definitions;
    assert.equal(CheckpointLoaderSimple.title, 'Checkpoint Loader Simple');
    assert.deepEqual(CheckpointLoaderSimple.inputs[0].options, [
      'sd_xl_base_1.0.safetensors',
      'v1-5-pruned-emaonly.safetensors',
    ]);
    // Value inputs only, in the definition's order: links (model, positive, ...) are wired, not set.
    assert.deepEqual(
      KSampler.inputs.map((input) => input.name),
      ['seed', 'steps', 'cfg', 'sampler_name', 'scheduler', 'denoise'],
    );
    const steps = KSampler.inputs.find((input) => input.name === 'steps');
    assert.deepEqual([steps.type, steps.min, steps.max, steps.default], ['INT', 1, 10000, 20]);
    assert.equal(CLIPTextEncode.inputs[0].multiline, true);
    assert.equal(cloud.counters.matching('/api/object_info')[0].headers['x-api-key'], API_KEY);
    assert.deepEqual(asked, ['graph-gen-config.read']);
  });

  it('keeps the definitions per config node until a refresh reads them again', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    assert.equal(objectInfoReads(cloud), 1, 'the second dialog read them again');
    // The server gains a model: a refresh shows it, a cached answer does not.
    cloud.generation.definitions.CheckpointLoaderSimple.input.required.ckpt_name[0].push(
      'new-model.safetensors',
    );
    try {
      const cached = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
      assert.equal(objectInfoReads(cloud), 1);
      const refreshed = remember(await definitions({ id: 'c', baseUrl: cloud.url, refresh: true }));
      assert.equal(objectInfoReads(cloud), 2);
      const options = (answer) => answer.body.definitions.CheckpointLoaderSimple.inputs[0].options;
      assert.ok(!options(cached).includes('new-model.safetensors'));
      assert.ok(options(refreshed).includes('new-model.safetensors'));
      // Another config node (another id) has a cache of its own.
      remember(await definitions({ id: 'other', baseUrl: cloud.url, apiKey: API_KEY }));
      assert.equal(objectInfoReads(cloud), 3);
      // Dialogs that ask at once share one read.
      await Promise.all([1, 2, 3].map(() => definitions({ id: 'c', baseUrl: cloud.url, refresh: true })));
      assert.equal(objectInfoReads(cloud), 4);
    } finally {
      cloud.generation.definitions.CheckpointLoaderSimple.input.required.ckpt_name[0].pop();
    }
  });

  it('works for an unsaved config node: the typed address with the typed key (which needs write permission)', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: selfHosted.url }), {});
    const typed = remember(await definitions({ id: 'not-deployed', baseUrl: cloud.url, apiKey: API_KEY }));
    assert.equal(typed.body.ok, true, typed.body.message);
    assert.equal(cloud.counters.matching('/api/object_info')[0].headers['x-api-key'], API_KEY);
    // A new config node has no id on the server at all; a self-hosted address needs no key.
    const selfHostedAnswer = remember(await definitions({ baseUrl: selfHosted.url, apiKey: '' }));
    assert.equal(selfHostedAnswer.body.ok, true);
    assert.equal(selfHosted.counters.matching('/api/object_info')[0].headers['x-api-key'], undefined);
    assert.deepEqual(asked, ['graph-gen-config.write', 'graph-gen-config.write']);
    // A user who may only read config nodes cannot make Node-RED send a typed key anywhere.
    granted = new Set(['graph-gen-config.read']);
    const refused = await definitions({
      id: 'not-deployed',
      baseUrl: cloud.url,
      apiKey: API_KEY,
      refresh: true,
    });
    assert.equal(refused.status, 401);
    assert.equal(objectInfoReads(cloud), 1);
  });

  it('sends a stored key only for the deployed node, toward the address it was deployed with', async () => {
    const rogue = await startSandbox();
    try {
      await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
      // The node's id with another address: read without the stored key (and write permission is asked).
      remember(await definitions({ id: 'c', baseUrl: rogue.url }));
      remember(await definitions({ id: 'c', baseUrl: rogue.url, apiKey: '__PWRD__', refresh: true }));
      assert.equal(rogue.counters.matching('/api/object_info').length, 2);
      for (const request of rogue.counters.requests) assert.equal(request.headers['x-api-key'], undefined);
      assert.deepEqual(asked, ['graph-gen-config.write', 'graph-gen-config.write']);
      // The id of a node of another type: no stored key, so the cloud service asks for one.
      const other = remember(await definitions({ id: 'n', baseUrl: cloud.url }));
      assert.equal(other.body.ok, false);
      assert.equal(other.body.code, 'unauthorized');
      assert.match(
        other.body.message,
        /asks for an API key, so its node definitions cannot be shown: enter one/,
      );
      assert.equal(cloud.counters.matching('/api/object_info')[0].headers['x-api-key'], undefined);
    } finally {
      await rogue.close();
    }
  });

  it('never sends the key back, even when the server echoes it', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    cloud.generation.definitions.EchoKey = {
      input: { required: { note: ['STRING', { default: `key is ${API_KEY}` }], [API_KEY]: ['INT', {}] } },
      output: [],
      name: 'EchoKey',
      display_name: `Echo ${API_KEY}`,
      category: 'test',
      output_node: false,
    };
    try {
      const answer = remember(await definitions({ id: 'c', baseUrl: cloud.url, refresh: true }));
      assert.equal(answer.body.ok, true);
      const text = JSON.stringify(answer.body);
      assert.ok(!text.includes(API_KEY));
      assert.match(text, /key is \*\*\*/);
      const refused = remember(await definitions({ baseUrl: cloud.url, apiKey: `${API_KEY}-wrong` }));
      assert.equal(refused.body.code, 'unauthorized');
      assert.match(
        refused.body.message,
        /refused the API key, so its node definitions cannot be shown: check the key/,
      );
    } finally {
      delete cloud.generation.definitions.EchoKey;
    }
  });

  it('keeps signed addresses whole in definitions and converted workflows when a key is set, as a deploy does', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const address = 'https://img.example/cat.png?X-Amz-Signature=0a1b2c3d&X-Amz-Expires=300';
    cloud.generation.definitions.LoadImageFromUrl = {
      input: { required: { url: ['STRING', { default: address }] } },
      output: ['IMAGE'],
      name: 'LoadImageFromUrl',
      display_name: 'Load Image From URL',
      category: 'test',
      output_node: false,
    };
    try {
      const read = remember(await definitions({ id: 'c', baseUrl: cloud.url, refresh: true }));
      assert.equal(read.body.ok, true, read.body.message);
      assert.equal(read.body.definitions.LoadImageFromUrl.inputs[0].default, address);
      const ui = structuredClone(UI_WORKFLOW);
      ui.nodes[1].widgets_values = [address];
      const converted = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: ui }));
      assert.equal(converted.body.ok, true, converted.body.message);
      assert.equal(converted.body.workflow['2'].inputs.text, address);
    } finally {
      delete cloud.generation.definitions.LoadImageFromUrl;
    }
  });

  it('answers a server that cannot be reached, or an address that cannot be used, with a sentence', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const closed = await startSandbox();
    const address = closed.url;
    await closed.close();
    const started = Date.now();
    const unreachable = remember(await definitions({ id: 'c', baseUrl: address, apiKey: API_KEY }));
    assert.ok(Date.now() - started < 5000, 'the dialog waited long for a closed port');
    assert.deepEqual(Object.keys(unreachable.body).sort(), ['code', 'message', 'ok']);
    assert.equal(unreachable.body.ok, false);
    assert.equal(unreachable.body.code, 'network');
    assert.match(
      unreachable.body.message,
      /^127\.0\.0\.1:\d+ could not be reached, so its node definitions cannot be shown: check the address and that the service is running\.$/,
    );
    const ftp = remember(await definitions({ baseUrl: 'ftp://gen.example.com' }));
    assert.match(ftp.body.message, /not an http\(s\) address/);
    const empty = remember(await definitions({ id: 'new', baseUrl: '' }));
    assert.match(empty.body.message, /no base address: set it first/);
    process.env.EDITOR_TEST_SECRET = 'environment-secret';
    try {
      const variable = remember(await definitions({ baseUrl: 'http://127.0.0.1:9/${EDITOR_TEST_SECRET}' }));
      assert.match(variable.body.message, /deploy the config node first/);
      assert.doesNotMatch(JSON.stringify(variable.body), /environment-secret/);
    } finally {
      delete process.env.EDITOR_TEST_SECRET;
    }
  });

  it('converts a UI-format workflow with the cached definitions', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    const answer = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: UI_WORKFLOW }));
    assert.equal(answer.body.ok, true, answer.body.message);
    const { workflow } = answer.body;
    assert.deepEqual(Object.keys(workflow).sort(), ['1', '2']);
    assert.equal(workflow['1'].class_type, 'CheckpointLoaderSimple');
    assert.deepEqual(workflow['1'].inputs, { ckpt_name: 'v1-5-pruned-emaonly.safetensors' });
    assert.deepEqual(workflow['2'], {
      class_type: 'CLIPTextEncode',
      inputs: { text: 'a lighthouse at dusk', clip: ['1', 1] },
      _meta: { title: 'Positive prompt' },
    });
    assert.equal(objectInfoReads(cloud), 1, 'the conversion read the definitions again');
    assert.deepEqual(asked, ['graph-gen-config.read', 'graph-gen-config.read']);
  });

  it('refuses to convert what is not a UI-format workflow or names a node type the server lacks, in words', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const notUi = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: { 3: { inputs: {} } } }));
    assert.equal(notUi.body.ok, false);
    assert.equal(notUi.body.code, 'invalid_input');
    assert.match(notUi.body.message, /not a UI-format workflow/);
    const unknown = structuredClone(UI_WORKFLOW);
    unknown.nodes[1].type = 'NoSuchNode';
    const refused = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: unknown }));
    assert.equal(refused.body.ok, false);
    assert.equal(refused.body.code, 'invalid_input');
    assert.match(refused.body.message, /NoSuchNode/);
    const closed = await startSandbox();
    const address = closed.url;
    await closed.close();
    const unreachable = remember(await convert({ baseUrl: address, apiKey: API_KEY, workflow: UI_WORKFLOW }));
    assert.equal(unreachable.body.code, 'network');
    assert.match(unreachable.body.message, /could not be reached/);
  });
});

describe('DefinitionsCache', () => {
  const { DefinitionsCache } = require('../dist/generation/workflows/definitions-cache');

  it('reads again after its time, keeps at most its number of servers, and keeps no failed read', async () => {
    const reads = [];
    let fail = false;
    const cache = new DefinitionsCache(
      async (source) => {
        reads.push(source.baseUrl);
        if (fail) throw new Error('down');
        return { Node: { input: {} } };
      },
      60,
      2,
    );
    const source = (n) => ({ configId: 'c', baseUrl: `http://127.0.0.1:${n}`, apiKey: 'k' });
    await cache.get(source(1));
    await cache.get(source(1));
    assert.equal(reads.length, 1);
    await new Promise((resolve) => setTimeout(resolve, 80));
    await cache.get(source(1));
    assert.equal(reads.length, 2, 'an entry older than its time was answered');
    // Another key is another entry; a third server pushes out the least recently used.
    await cache.get({ ...source(1), apiKey: 'other' });
    assert.equal(reads.length, 3);
    await cache.get(source(2));
    await cache.get(source(1));
    assert.equal(reads.length, 5, 'the least recently used server was kept');
    fail = true;
    await assert.rejects(cache.get(source(3)), /down/);
    await assert.rejects(cache.get(source(3)), /down/);
    assert.equal(reads.length, 7, 'a failed read was kept');
  });
});
