'use strict';
// The submit dialog's endpoints on the config node: the server's node definitions (a deployed node's shared
// with its connection, typed settings' cached per config node, address and key; a refresh reads them again at
// most once per 10 s) and the conversion of UI-format workflows (write permission). Real Node-RED runtime
// (test helper) and the sandbox over HTTP; the key never comes back, an unreachable server is a sentence.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, PARTNER_KEY, flowWith } = require('../support/generation-nodes');

const configNode = require('../../dist/nodes/graph-gen-config.js');
const { DIALOG_DEFINITIONS } = require('../../dist/generation/workflows/definitions-cache');
const queueNode = require('../../dist/nodes/graph-gen-queue.js');

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
const UI_WORKFLOW = require('../fixtures/ui/checkpoint-prompt.json');

const DIALOG_DEFAULTS = { ...DIALOG_DEFINITIONS };
/** Lets every refresh read (for tests about what a refresh reads, not how often). */
const refreshAlwaysReads = () => (DIALOG_DEFINITIONS.refreshLimitMs = 0);
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

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
  afterEach(async () => {
    Object.assign(DIALOG_DEFINITIONS, DIALOG_DEFAULTS);
    await helper.unload();
  });

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
    refreshAlwaysReads();
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
    refreshAlwaysReads();
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

  it('answers settings that are objects whose toString is no function in words, never a thrown 500', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const hostile = { toString: 1, valueOf: 1 };
    for (const body of [
      { id: 'new', baseUrl: hostile },
      { id: 'new', baseUrl: cloud.url, apiKey: hostile, timeout: hostile },
      { id: 'new', baseUrl: [hostile], proxy: hostile },
    ]) {
      const answer = remember(await definitions(body));
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.equal(typeof answer.body.ok, 'boolean');
      if (!answer.body.ok) assert.equal(typeof answer.body.message, 'string');
    }
    const test = await helper
      .request()
      .post('/graph-gen/graph-gen-config/test')
      .send({ id: 'new', baseUrl: hostile, timeout: hostile });
    assert.equal(test.status, 200, JSON.stringify(test.body));
    assert.equal(test.body.ok, false);
    assert.match(test.body.message, /base address/);
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
    assert.deepEqual(asked, ['graph-gen-config.read', 'graph-gen-config.write']);
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
  it("reads a server's definitions on refresh at most once per 10 s, whoever asks (a read-only user too)", async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    granted = new Set(['graph-gen-config.read']);
    for (let press = 0; press < 5; press++) {
      const answer = remember(await definitions({ id: 'c', baseUrl: cloud.url, refresh: true }));
      assert.equal(answer.body.ok, true, answer.body.message);
    }
    assert.equal(objectInfoReads(cloud), 1, 'each Refresh downloaded object_info again');
    // Typed settings (write permission) are held apart, with the same limit.
    granted = new Set(['graph-gen-config.read', 'graph-gen-config.write']);
    for (let press = 0; press < 3; press++) {
      remember(await definitions({ id: 'c', baseUrl: cloud.url, apiKey: API_KEY, refresh: true }));
    }
    assert.equal(objectInfoReads(cloud), 2);
    // Once the last read is older than the limit, a refresh reads again.
    DIALOG_DEFINITIONS.refreshLimitMs = 30;
    await pause(50);
    remember(await definitions({ id: 'c', baseUrl: cloud.url, refresh: true }));
    remember(await definitions({ id: 'c', baseUrl: cloud.url, apiKey: API_KEY, refresh: true }));
    assert.equal(objectInfoReads(cloud), 4);
  });

  it('answers a deployed node with the definitions its connection holds, read again once 10 minutes old', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    const { connection } = helper.getNode('c');
    // What the submit nodes read is what the dialog shows: no second download, no second copy.
    const held = await connection.dialect.rest.nodeDefinitions();
    assert.equal(objectInfoReads(cloud), 1);
    const answer = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    assert.equal(answer.body.ok, true, answer.body.message);
    assert.deepEqual(Object.keys(answer.body.definitions).sort(), Object.keys(held).sort());
    assert.equal(objectInfoReads(cloud), 1, 'the dialog downloaded what the connection holds');
    // The server gains a model; once the held copy is older than the dialog's limit, the dialog reads it
    // again, and the submit nodes get the new copy too.
    cloud.generation.definitions.CheckpointLoaderSimple.input.required.ckpt_name[0].push('later.safetensors');
    try {
      DIALOG_DEFINITIONS.maxAgeMs = 30;
      await pause(50);
      const later = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
      assert.equal(objectInfoReads(cloud), 2);
      assert.ok(
        later.body.definitions.CheckpointLoaderSimple.inputs[0].options.includes('later.safetensors'),
      );
      const shared = await connection.dialect.rest.nodeDefinitions();
      assert.ok(shared.CheckpointLoaderSimple.input.required.ckpt_name[0].includes('later.safetensors'));
      assert.equal(objectInfoReads(cloud), 2);
    } finally {
      cloud.generation.definitions.CheckpointLoaderSimple.input.required.ckpt_name[0].pop();
    }
    // A deployed server that refuses its key is a sentence, as for typed settings.
    await helper.unload();
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }), { apiKey: `${API_KEY}-old` });
    const refused = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
    assert.equal(refused.body.code, 'unauthorized');
    assert.match(refused.body.message, /refused the API key, so its node definitions cannot be shown/);
  });

  it("stops waiting for a deployed node's slow server with a sentence, and answers what the read brings later", async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    DIALOG_DEFINITIONS.waitMs = 100;
    cloud.faults.add({ path: '/api/object_info', delayMs: 600 });
    try {
      const slow = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
      assert.equal(slow.body.ok, false);
      assert.equal(slow.body.code, 'network');
      assert.match(
        slow.body.message,
        /did not send its node definitions within \d+ s, so they cannot be shown yet/,
      );
      // The read went on; once it is in, the dialog answers it without another download.
      await pause(800);
      const later = remember(await definitions({ id: 'c', baseUrl: cloud.url }));
      assert.equal(later.body.ok, true, later.body.message);
      assert.equal(objectInfoReads(cloud), 1);
    } finally {
      cloud.faults.clear();
    }
  });

  it('never reads the server environment into a typed key: it asks to deploy first', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    process.env.EDITOR_TEST_SECRET = 'environment-secret';
    try {
      for (const body of [
        { id: 'c', baseUrl: cloud.url, apiKey: '${EDITOR_TEST_SECRET}', workflow: UI_WORKFLOW },
        { baseUrl: cloud.url, apiKey: '${EDITOR_TEST_SECRET}', workflow: UI_WORKFLOW },
      ]) {
        for (const ask of [definitions, convert]) {
          const answer = remember(await ask(body));
          assert.equal(answer.body.ok, false);
          assert.equal(answer.body.code, 'invalid_input');
          assert.match(answer.body.message, /deploy the config node first/);
          assert.doesNotMatch(JSON.stringify(answer.body), /environment-secret/);
        }
      }
      assert.deepEqual(cloud.counters.requests, []);
    } finally {
      delete process.env.EDITOR_TEST_SECRET;
    }
  });

  it('converts only for users who may change config nodes, and refuses a pathological workflow in words', async () => {
    await load(flowWith({ type: 'graph-gen-queue' }, { baseUrl: cloud.url }));
    granted = new Set(['graph-gen-config.read']);
    const readOnly = await convert({ id: 'c', baseUrl: cloud.url, workflow: UI_WORKFLOW });
    assert.equal(readOnly.status, 401);
    assert.equal(objectInfoReads(cloud), 0);
    granted = new Set(['graph-gen-config.read', 'graph-gen-config.write']);
    // As on a real server, the prompt's text asks for dynamic prompts.
    const { text } = cloud.generation.definitions.CLIPTextEncode.input.required;
    text[1].dynamicPrompts = true;
    try {
      // 16,000 nested {a|...} groups in a prompt (once a stack overflow, and seconds of CPU before it).
      const deep = structuredClone(UI_WORKFLOW);
      const prompt = deep.nodes.find((node) => node.type === 'CLIPTextEncode');
      prompt.widgets_values = [`${'{a|'.repeat(16_000)}b${'}'.repeat(16_000)}`];
      const refused = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: deep }));
      assert.equal(refused.body.ok, false);
      assert.equal(refused.body.code, 'invalid_input');
      assert.match(
        refused.body.message,
        new RegExp(
          `input "text" of node "${prompt.id}" \\(.*CLIPTextEncode\\): the dynamic prompt nests .* more than 64 deep`,
        ),
      );
      // The runtime goes on answering.
      const converted = remember(await convert({ id: 'c', baseUrl: cloud.url, workflow: UI_WORKFLOW }));
      assert.equal(converted.body.ok, true, converted.body.message);
    } finally {
      delete text[1].dynamicPrompts;
    }
  });
});

describe('DefinitionsCache', () => {
  const { DefinitionsCache } = require('../../dist/generation/workflows/definitions-cache');

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
    // Entries past their time are dropped, asked for or not.
    assert.equal(cache.size, 2);
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.equal(cache.size, 0, 'definitions were kept in memory past their time');
  });

  it('reads again on refresh only once the entry is older than the refresh limit', async () => {
    let reads = 0;
    const cache = new DefinitionsCache(
      async () => {
        reads++;
        return { Node: { input: {} } };
      },
      60_000,
      8,
      40,
    );
    const source = { configId: 'c', baseUrl: 'http://127.0.0.1:1', apiKey: 'k' };
    await cache.get(source);
    await cache.get(source, true);
    await cache.get(source, true);
    assert.equal(reads, 1, 'a refresh right after a read read again');
    await new Promise((resolve) => setTimeout(resolve, 60));
    await cache.get(source);
    assert.equal(reads, 1, 'the entry was read again before its time');
    await cache.get(source, true);
    assert.equal(reads, 2);
    cache.clear();
    assert.equal(cache.size, 0);
  });
});
