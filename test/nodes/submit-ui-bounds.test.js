'use strict';
// A submit node given a UI-format workflow in msg.payload converts it in the runtime: a pathological one (a
// prompt of thousands of nested {a|...} groups, a chain of thousands of Reroutes) ends at a Catch node with a
// sentence, or converts, and never stalls the runtime or overflows its stack.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { flowWith, load, failureOf, outputOf } = require('../support/generation-nodes');

const UI_WORKFLOW = require('../fixtures/ui/checkpoint-prompt.json');

describe('submit: UI-format workflows from msgs are bounded', () => {
  let sandbox;
  let text;

  before(async () => {
    await helper.startServer();
    sandbox = await startSandbox();
    // As on a real server, the prompt's text asks for dynamic prompts.
    ({ text } = sandbox.generation.definitions.CLIPTextEncode.input.required);
    text[1].dynamicPrompts = true;
  });
  after(async () => {
    delete text[1].dynamicPrompts;
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => sandbox.counters.reset());
  afterEach(async () => helper.unload());

  const submits = () => sandbox.counters.matching('/api/prompt').length;

  it('refuses a prompt nested 16,000 groups deep in words, and sends nothing', async () => {
    await load(flowWith({ type: 'graph-gen-submit', workflow: '' }, { baseUrl: sandbox.url }), {});
    const workflow = structuredClone(UI_WORKFLOW);
    const prompt = workflow.nodes.find((node) => node.type === 'CLIPTextEncode');
    prompt.widgets_values = [`${'{a|'.repeat(16_000)}b${'}'.repeat(16_000)}`];
    const { error } = await failureOf('n', { payload: workflow });
    assert.equal(error.code, 'invalid_input');
    assert.match(error.message, /input "text" of node "2" .*the dynamic prompt nests .* more than 64 deep/);
    assert.equal(submits(), 0);
  });

  it('converts a prompt reached through 20,000 Reroutes, with its groups resolved', async () => {
    await load(flowWith({ type: 'graph-gen-submit', workflow: '' }, { baseUrl: sandbox.url }), {});
    const workflow = structuredClone(UI_WORKFLOW);
    const prompt = workflow.nodes.find((node) => node.type === 'CLIPTextEncode');
    prompt.widgets_values = ['a {lighthouse|lighthouse} at dusk'];
    // The loader's CLIP output reaches the prompt through a chain of Reroutes.
    const [link] = workflow.links;
    const [linkId, originId, originSlot, targetId, targetSlot, type] = link;
    workflow.links = [];
    let from = [originId, originSlot];
    for (let index = 0; index < 20_000; index++) {
      const id = 10_000 + index;
      workflow.links.push([id, from[0], from[1], id, 0, type]);
      workflow.nodes.push({ id, type: 'Reroute', mode: 0, inputs: [{ name: '', type: '*', link: id }] });
      from = [id, 0];
    }
    workflow.links.push([linkId, from[0], from[1], targetId, targetSlot, type]);
    // The fixture has no output node: the service's answer stands in for a run.
    sandbox.faults.add({
      path: '/api/prompt',
      method: 'POST',
      status: 200,
      body: { prompt_id: 'p-1' },
      times: 1,
    });
    const msg = await outputOf('n', { payload: workflow }, 10_000);
    assert.deepEqual(msg.workflow['2'].inputs, { text: 'a lighthouse at dusk', clip: ['1', 1] });
    assert.equal(submits(), 1);
  });
});
