'use strict';
// graph-gen-submit: msg.inputs keyed by node title, new seeds each run (msg.seeds), and UI-format workflows
// converted with the server's node definitions, against the sandbox over real HTTP.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, textToImage, flowWith, load, failureOf, outputOf } = require('../support/generation-nodes');
const objectInfo = require('../fixtures/object_info.json');

/** textToImage with the titles the graph editor's "Export (API)" writes. */
function titled() {
  const workflow = textToImage();
  const titles = { 3: 'Sampler', 6: 'Positive prompt', 7: 'Negative prompt', 9: 'Save' };
  for (const [id, title] of Object.entries(titles)) workflow[id]._meta = { title };
  return workflow;
}

const MAX_SEED = Number.MAX_SAFE_INTEGER;

describe('graph-gen-submit: titles, new seeds, UI format', () => {
  let sandbox;
  /** Node types the tests add to the sandbox's object_info. */
  const added = {
    EmptyImage: objectInfo.EmptyImage,
    ImageAddNoise: objectInfo.ImageAddNoise,
    ImageBlur: objectInfo.ImageBlur,
    // Two inputs that take a new value each run, one with a narrow range.
    DualSeed: {
      input: {
        required: {
          noise_seed: ['INT', { default: 0, min: 0, max: 2 ** 64, control_after_generate: true }],
          variation: ['INT', { default: 10, min: 10, max: 12, control_after_generate: true }],
          steps: ['INT', { default: 4, min: 1, max: 100 }],
        },
      },
      output: ['LATENT'],
      name: 'DualSeed',
      display_name: 'Dual Seed',
      category: 'sampling',
      output_node: false,
    },
  };

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox({ generationApiKey: API_KEY });
    Object.assign(sandbox.generation.definitions, added);
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
  });
  afterEach(async () => helper.unload());

  const lastJob = () => [...sandbox.jobs.jobs.values()].at(-1);
  const submitted = () => sandbox.counters.matching('/api/prompt', 'POST');
  const loadSubmit = (settings = {}, credentials) =>
    load(flowWith({ type: 'graph-gen-submit', ...settings }, { baseUrl: sandbox.url }), credentials);

  describe('msg.inputs keyed by title', () => {
    it('sets inputs by node title and by id in one msg', async () => {
      await loadSubmit();
      const msg = await outputOf('n', {
        payload: titled(),
        inputs: { 'Positive prompt': { text: 'a cat' }, 3: { steps: 5 }, Sampler: { cfg: 4 } },
      });
      assert.equal(lastJob().prompt[6].inputs.text, 'a cat');
      assert.equal(lastJob().prompt[3].inputs.steps, 5);
      assert.equal(lastJob().prompt[3].inputs.cfg, 4);
      assert.equal(lastJob().prompt[7].inputs.text, 'blurry');
      assert.equal(msg.workflow[6].inputs.text, 'a cat');
    });

    it('a key that is a node id is that node, even when another node carries it as its title', async () => {
      await loadSubmit();
      const workflow = titled();
      workflow[7]._meta.title = '6';
      await outputOf('n', { payload: workflow, inputs: { 6: { text: 'by id' } } });
      assert.equal(lastJob().prompt[6].inputs.text, 'by id');
      assert.equal(lastJob().prompt[7].inputs.text, 'blurry');
    });

    it('refuses a title that several nodes carry, naming their ids, before sending', async () => {
      await loadSubmit();
      const workflow = titled();
      workflow[6]._meta.title = 'Prompt';
      workflow[7]._meta.title = 'Prompt';
      const failure = await failureOf('n', { payload: workflow, inputs: { Prompt: { text: 'x' } } });
      assert.equal(failure.error.code, 'invalid_input');
      assert.equal(
        failure.error.message,
        'msg.inputs sets "Prompt", a title that 2 nodes carry (ids 6, 7): use the id of the one you mean, or give the nodes different titles',
      );
      assert.equal(submitted().length, 0);
    });

    it('refuses a key that is neither an id nor a title, listing the ids and titles', async () => {
      await loadSubmit();
      const failure = await failureOf('n', {
        payload: titled(),
        inputs: { 'Positive promt': { text: 'x' } },
      });
      assert.equal(failure.error.code, 'invalid_input');
      assert.equal(
        failure.error.message,
        'msg.inputs sets node "Positive promt", which is not in the workflow: neither a node id nor a node title ' +
          '(its nodes: 3 "Sampler", 4 (CheckpointLoaderSimple), 5 (EmptyLatentImage), 6 "Positive prompt", ' +
          '7 "Negative prompt", 8 (VAEDecode), 9 "Save")',
      );
      assert.equal(submitted().length, 0);
    });
  });

  describe('new seed each run', () => {
    it('gives every seed input a fresh value per msg, sends it, and says it in msg.seeds; the setting is never changed', async () => {
      await loadSubmit({ newSeed: true, workflow: JSON.stringify(titled()) }, { apiKey: API_KEY });
      const seen = [];
      for (let i = 0; i < 3; i++) {
        const msg = await outputOf('n', { payload: '' });
        const sent = lastJob().prompt[3].inputs.seed;
        assert.ok(Number.isSafeInteger(sent) && sent >= 0 && sent <= MAX_SEED, `seed ${sent}`);
        assert.deepEqual(msg.seeds, { 3: sent });
        assert.equal(msg.workflow[3].inputs.seed, sent);
        // Nothing else changed.
        assert.equal(lastJob().prompt[3].inputs.steps, 20);
        seen.push(sent);
      }
      assert.equal(new Set(seen).size, 3, `three different seeds: ${seen}`);
      // The definitions are read once, then cached.
      assert.equal(sandbox.counters.count('/api/object_info'), 1);
    });

    it('leaves a seed msg.inputs sets (by id or title) and reports it in msg.seeds', async () => {
      await loadSubmit({ newSeed: true });
      const byTitle = await outputOf('n', { payload: titled(), inputs: { Sampler: { seed: 42 } } });
      assert.equal(lastJob().prompt[3].inputs.seed, 42);
      assert.deepEqual(byTitle.seeds, { 3: 42 });
      const byId = await outputOf('n', { payload: titled(), inputs: { 3: { seed: 7 } } });
      assert.equal(lastJob().prompt[3].inputs.seed, 7);
      assert.deepEqual(byId.seeds, { 3: 7 });
    });

    it('a node with several seed inputs: msg.seeds[id] is input -> value, each within its range', async () => {
      await loadSubmit({ newSeed: true });
      const workflow = {
        1: { class_type: 'DualSeed', inputs: { noise_seed: 0, variation: 10, steps: 4 } },
        2: { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'dual' } },
      };
      const variations = new Set();
      for (let i = 0; i < 12; i++) {
        const msg = await outputOf('n', { payload: workflow });
        const sent = lastJob().prompt[1].inputs;
        assert.deepEqual(msg.seeds, { 1: { noise_seed: sent.noise_seed, variation: sent.variation } });
        assert.ok(sent.noise_seed >= 0 && sent.noise_seed <= MAX_SEED);
        assert.ok([10, 11, 12].includes(sent.variation), `variation ${sent.variation}`);
        assert.equal(sent.steps, 4);
        variations.add(sent.variation);
      }
      assert.ok(variations.size >= 2, 'the narrow range is drawn from, not fixed');
    });

    it('an input linked to another node is left linked', async () => {
      await loadSubmit({ newSeed: true });
      const workflow = titled();
      workflow[3].inputs.seed = ['10', 0];
      workflow[10] = { class_type: 'DualSeed', inputs: { noise_seed: 5, variation: 11, steps: 1 } };
      const msg = await outputOf('n', { payload: workflow });
      assert.deepEqual(lastJob().prompt[3].inputs.seed, ['10', 0]);
      assert.deepEqual(Object.keys(msg.seeds), ['10']);
    });

    it('a node saved before the setting existed keeps its seeds and reads no definitions', async () => {
      await loadSubmit({}, { apiKey: API_KEY });
      const msg = await outputOf('n', { payload: titled() });
      assert.equal(lastJob().prompt[3].inputs.seed, 1);
      assert.equal(msg.seeds, undefined);
      assert.equal(sandbox.counters.count('/api/object_info'), 0);
    });

    it('without the definitions: warns once, and inputs named seed or noise_seed still get new values', async () => {
      await loadSubmit({ newSeed: true }, { apiKey: API_KEY });
      const warnings = [];
      const node = helper.getNode('n');
      const warn = node.warn.bind(node);
      node.warn = (text) => {
        warnings.push(text);
        warn(text);
      };
      sandbox.faults.add({ path: '/api/object_info', status: 500, times: Infinity });
      const workflow = titled();
      workflow[10] = { class_type: 'DualSeed', inputs: { noise_seed: 5, variation: 11, steps: 1 } };
      const first = await outputOf('n', { payload: workflow }, 10000);
      const second = await outputOf('n', { payload: workflow }, 10000);
      for (const msg of [first, second]) {
        assert.deepEqual(Object.keys(msg.seeds).sort(), ['10', '3']);
        assert.equal(msg.workflow[10].inputs.variation, 11, 'not a seed by name');
        assert.notEqual(msg.workflow[3].inputs.seed, 1);
      }
      assert.notEqual(first.seeds[3], second.seeds[3]);
      assert.equal(warnings.length, 1);
      assert.match(
        warnings[0],
        /^The node definitions could not be read \(.*\), so seed inputs are told by name: number inputs named seed or noise_seed get new values$/,
      );
    });
  });

  describe('UI-format workflows', () => {
    const ui = () => structuredClone(require('../fixtures/ui/image-chain.json'));
    const expected = () => structuredClone(require('../fixtures/ui/image-chain.expected.json'));

    it('converts a UI-format msg.payload with the server definitions and submits the API format', async () => {
      await loadSubmit();
      const msg = await outputOf('n', { payload: ui() });
      assert.deepEqual(lastJob().prompt, expected());
      assert.deepEqual(msg.workflow, expected());
      assert.equal(msg.prompt_id, lastJob().id);
    });

    it('converts a UI-format workflow kept in the node, takes its titles in msg.inputs, and gives its seed a new value', async () => {
      await loadSubmit({ workflow: JSON.stringify(ui()), newSeed: true });
      const msg = await outputOf('n', { payload: 'go', inputs: { Soften: { blur_radius: 5 } } });
      const sent = lastJob().prompt;
      assert.equal(sent[3].inputs.blur_radius, 5);
      assert.equal(sent[3].class_type, 'ImageBlur');
      assert.notEqual(sent[2].inputs.seed, 42);
      assert.deepEqual(msg.seeds, { 2: sent[2].inputs.seed });
    });

    it('a UI-format workflow cannot be converted without the definitions: a sentence that says so, nothing sent', async () => {
      await loadSubmit();
      sandbox.faults.add({ path: '/api/object_info', status: 500, times: Infinity });
      const failure = await failureOf('n', { payload: ui() }, 10000);
      assert.equal(failure.error.code, 'server_error');
      assert.match(
        failure.error.message,
        /^The workflow is in UI format \(as the graph editor saves it\), and converting it needs the server's node definitions, which could not be read: .*Export it in API format instead, or try again$/,
      );
      assert.equal(submitted().length, 0);
    });

    it('a UI node of a type the server lacks is refused naming it, before sending', async () => {
      await loadSubmit();
      const workflow = ui();
      workflow.nodes.find((node) => node.id === 3).type = 'NoSuchBlur';
      const failure = await failureOf('n', { payload: workflow });
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, /node "3" \("Soften", NoSuchBlur\)/);
      assert.equal(submitted().length, 0);
    });
  });
});
