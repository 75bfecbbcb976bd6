'use strict';
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { GenerationRestClient } = require('../../dist/generation/transfer/rest-client');
const {
  API_KEY,
  PARTNER_KEY,
  textToImage,
  flowWith,
  load,
  failureOf,
  outputOf,
  textOf,
} = require('../support/generation-nodes');

describe('graph-gen-submit', () => {
  let sandbox;

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
  afterEach(async () => helper.unload());

  const submitted = () => sandbox.counters.matching('/api/prompt', 'POST');
  const lastJob = () => [...sandbox.jobs.jobs.values()].at(-1);

  it('submits msg.payload with client_id and the key, and sends prompt_id, payload and workflow on', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const msg = await outputOf('n', { payload: textToImage(), topic: 'fox', mine: 42 });
    const job = lastJob();
    assert.equal(msg.prompt_id, job.id);
    assert.equal(msg.payload.prompt_id, job.id);
    assert.equal(typeof msg.payload.number, 'number');
    assert.deepEqual(msg.workflow, textToImage());
    assert.equal(msg.topic, 'fox');
    assert.equal(msg.mine, 42);
    assert.equal(job.clientId, helper.getNode('c').connection.clientId);
    assert.equal(submitted()[0].headers['x-api-key'], API_KEY);
    // No partner node in the workflow: no partner key sent.
    assert.equal(job.extraData, undefined);
    const status = helper.getNode('n').status.lastCall?.args[0];
    assert.ok(status === undefined || status.text === `submitted ${job.id.slice(0, 8)}`);
  });

  it('shows "submitted <8 chars>" as its status', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const node = helper.getNode('n');
    const statuses = [];
    const original = node.status.bind(node);
    node.status = (status) => {
      statuses.push(status);
      return original(status);
    };
    const msg = await outputOf('n', { payload: textToImage() });
    assert.deepEqual(statuses.at(-1), {
      fill: 'green',
      shape: 'dot',
      text: `submitted ${msg.prompt_id.slice(0, 8)}`,
    });
  });

  it('takes JSON text, and the node setting when msg.payload is not a workflow', async () => {
    await load(
      flowWith(
        { type: 'graph-gen-submit', workflow: JSON.stringify(textToImage()) },
        { baseUrl: sandbox.url },
      ),
    );
    const fromSetting = await outputOf('n', { payload: 1700000000000 });
    assert.deepEqual(lastJob().prompt, textToImage());
    assert.ok(fromSetting.prompt_id);
    const changed = textToImage();
    changed[6].inputs.text = 'from text';
    await outputOf('n', { payload: JSON.stringify(changed) });
    assert.equal(lastJob().prompt[6].inputs.text, 'from text');
  });

  it('applies msg.inputs to a copy: the template setting is never changed', async () => {
    await load(
      flowWith(
        { type: 'graph-gen-submit', workflow: JSON.stringify(textToImage()) },
        { baseUrl: sandbox.url },
      ),
    );
    const first = await outputOf('n', {
      payload: '',
      inputs: { 6: { text: 'a blue owl' }, 3: { seed: 99 } },
    });
    assert.equal(lastJob().prompt[6].inputs.text, 'a blue owl');
    assert.equal(lastJob().prompt[3].inputs.seed, 99);
    assert.equal(first.workflow[6].inputs.text, 'a blue owl');
    await outputOf('n', { payload: '' });
    assert.equal(lastJob().prompt[6].inputs.text, 'a red fox');
    assert.equal(lastJob().prompt[3].inputs.seed, 1);
  });

  it('does not change the msg.payload workflow it was given', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const workflow = textToImage();
    await outputOf('n', { payload: workflow, inputs: { 6: { text: 'changed' } } });
    assert.equal(workflow[6].inputs.text, 'a red fox');
    assert.equal(lastJob().prompt[6].inputs.text, 'changed');
  });

  const refusals = [
    [
      'a workflow that is not an object',
      () => ({ payload: '[1,2]' }),
      /No workflow: msg.payload is not a workflow \(an object or JSON text\)/,
    ],
    [
      'a node that is not an object',
      () => ({ payload: { 1: 'x' } }),
      /Node "1" of the workflow is not an object/,
    ],
    [
      'a node without inputs',
      () => ({ payload: { 1: { class_type: 'SaveImage' } } }),
      /Node "1" \(SaveImage\) has no inputs/,
    ],
    [
      'a link to a node that is not there',
      () => {
        const workflow = textToImage();
        workflow[8].inputs.samples = ['42', 0];
        return { payload: workflow };
      },
      /Input "samples" of node "8" links to node "42", which is not in the workflow/,
    ],
    [
      'an override for a node that is not there',
      () => ({ payload: textToImage(), inputs: { 77: { text: 'x' } } }),
      /msg.inputs sets node "77", which is not in the workflow/,
    ],
    [
      'an override that links to a node that is not there',
      () => ({ payload: textToImage(), inputs: { 8: { samples: ['99', 0] } } }),
      /Input "samples" of node "8" links to node "99", which is not in the workflow/,
    ],
    ['JSON text that does not parse', () => ({ payload: '{"1": ' }), /not valid JSON/],
    ['no workflow at all', () => ({ payload: 5 }), /No workflow/],
  ];
  for (const [what, makeMsg, message] of refusals) {
    it(`refuses ${what} before sending, naming the node and input`, async () => {
      await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
      const failure = await failureOf('n', makeMsg());
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(failure.error.message, message);
      assert.equal(submitted().length, 0);
    });
  }

  it('refuses a workflow setting that is not an object of nodes before sending', async () => {
    await load(flowWith({ type: 'graph-gen-submit', workflow: '[1, 2]' }, { baseUrl: sandbox.url }));
    const failure = await failureOf('n', { payload: 'go' });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /The workflow is not an object of nodes/);
    assert.equal(submitted().length, 0);
  });

  it('checks against node definitions when asked: unknown type and missing required input, before sending', async () => {
    await load(flowWith({ type: 'graph-gen-submit', check: true }, { baseUrl: sandbox.url }));
    const workflow = textToImage();
    workflow[5].class_type = 'NoSuchNode';
    delete workflow[3].inputs.steps;
    const failure = await failureOf('n', { payload: workflow });
    assert.equal(failure.error.code, 'invalid_input');
    assert.match(failure.error.message, /node "5" is of type NoSuchNode, which the service does not have/);
    assert.match(failure.error.message, /node "3" \(KSampler\) lacks required input "steps"/);
    assert.equal(submitted().length, 0);
    assert.equal(sandbox.counters.count('/api/object_info'), 1);
  });

  it('caches object_info; a missing node type reads it again at most once a minute', async () => {
    await load(flowWith({ type: 'graph-gen-submit', check: true }, { baseUrl: sandbox.url }));
    await outputOf('n', { payload: textToImage() });
    await outputOf('n', { payload: textToImage() });
    assert.equal(sandbox.counters.count('/api/object_info'), 1);
    // A class the server lacks: refused, and within the minute no second download of every definition.
    const unknown = textToImage();
    unknown[10] = { class_type: 'UpscaleImage', inputs: { image: ['8', 0] } };
    for (let i = 0; i < 3; i++) await failureOf('n', { payload: unknown });
    assert.equal(sandbox.counters.count('/api/object_info'), 1);
    GenerationRestClient.definitionsRefreshMs = 0;
    // The service gains a node type after the cache was filled: a miss refreshes it and the submit goes.
    sandbox.generation.definitions.UpscaleImage = {
      input: { required: { image: ['IMAGE'] } },
      output: ['IMAGE'],
      name: 'UpscaleImage',
      display_name: 'Upscale Image',
      category: 'image',
      output_node: false,
    };
    const workflow = textToImage();
    workflow[10] = { class_type: 'UpscaleImage', inputs: { image: ['8', 0] } };
    try {
      await outputOf('n', { payload: workflow });
      assert.equal(sandbox.counters.count('/api/object_info'), 2);
    } finally {
      GenerationRestClient.definitionsRefreshMs = 60_000;
      delete sandbox.generation.definitions.UpscaleImage;
    }
  });

  it('auto with a partner key: object_info unavailable means an ordinary workflow, with one warning', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const warnings = [];
    const node = helper.getNode('n');
    const warn = node.warn.bind(node);
    node.warn = (text) => {
      warnings.push(text);
      warn(text);
    };
    sandbox.faults.add({ path: '/api/object_info', status: 500, times: Infinity });
    try {
      await outputOf('n', { payload: partnerWorkflow() }, 10000);
      assert.equal(lastJob().extraData, undefined);
      await outputOf('n', { payload: partnerWorkflow(), partner: true }, 10000);
      assert.deepEqual(lastJob().extraData, { api_key_service_org: PARTNER_KEY });
      assert.equal(warnings.length, 1);
      assert.match(warnings[0], /node definitions could not be read .* unless msg.partner is true/);
    } finally {
      sandbox.faults.clear();
    }
  });

  const partnerWorkflow = () => ({
    1: { class_type: 'PartnerImageGenerate', inputs: { prompt: 'a cat', size: '1024x1024' } },
    2: { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'cat' } },
  });

  it('auto: sends the partner key in extra_data when object_info marks a node api_node', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const msg = await outputOf('n', { payload: partnerWorkflow() });
    assert.deepEqual(lastJob().extraData, { api_key_service_org: PARTNER_KEY });
    assert.ok(!textOf(msg).includes(PARTNER_KEY), 'the partner key is not in the msg');
    assert.ok(!textOf(msg).includes(API_KEY));
  });

  it('auto: sends it when msg.partner is true; never: not even then; always: every time', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    await outputOf('n', { payload: textToImage(), partner: true });
    assert.deepEqual(lastJob().extraData, { api_key_service_org: PARTNER_KEY });
    await helper.unload();
    await load(flowWith({ type: 'graph-gen-submit', partner: 'never' }, { baseUrl: sandbox.url }));
    await outputOf('n', { payload: partnerWorkflow(), partner: true });
    assert.equal(lastJob().extraData, undefined);
    await helper.unload();
    await load(flowWith({ type: 'graph-gen-submit', partner: 'always' }, { baseUrl: sandbox.url }));
    await outputOf('n', { payload: textToImage() });
    assert.deepEqual(lastJob().extraData, { api_key_service_org: PARTNER_KEY });
  });

  it('puts the partner key under the field the config names', async () => {
    const flow = flowWith({ type: 'graph-gen-submit', partner: 'always' }, { baseUrl: sandbox.url });
    flow[0].partnerKeyField = 'partner_token';
    await load(flow);
    await outputOf('n', { payload: textToImage() });
    assert.deepEqual(lastJob().extraData, { partner_token: PARTNER_KEY });
  });

  it('a 400 with node_errors fails naming the failing nodes and inputs', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const workflow = textToImage();
    delete workflow[3].inputs.steps;
    delete workflow[6].inputs.text;
    const failure = await failureOf('n', { payload: workflow });
    assert.equal(failure.error.code, 'invalid_request');
    assert.equal(failure.error.cause.status, 400);
    assert.match(failure.error.message, /Prompt outputs failed validation/);
    assert.match(failure.error.message, /node "3" \(KSampler\): Required input is missing "steps"/);
    assert.match(failure.error.message, /node "6" \(CLIPTextEncode\): Required input is missing "text"/);
    assert.ok(failure.error.cause.body.node_errors[3]);
  });

  it('a 200 answer carrying error or node_errors is a failure too', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    sandbox.faults.add({
      path: '/api/prompt',
      status: 200,
      body: {
        error: 'Workflow contains banned node',
        node_errors: { 9: { errors: [{ message: 'banned', details: 'images' }], class_type: 'SaveImage' } },
      },
    });
    const failure = await failureOf('n', { payload: textToImage() });
    assert.equal(failure.error.code, 'invalid_request');
    assert.match(failure.error.message, /Workflow contains banned node/);
    assert.match(failure.error.message, /node "9" \(SaveImage\): banned "images"/);
    sandbox.faults.add({
      path: '/api/prompt',
      status: 200,
      body: { error: { type: 'x', message: 'no credits left for partner nodes' } },
    });
    const second = await failureOf('n', { payload: textToImage() });
    assert.match(second.error.message, /no credits left for partner nodes/);
  });

  it('never repeats a submit the server answered (5xx)', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    sandbox.faults.add({ path: '/api/prompt', status: 503, body: { message: 'overloaded' } });
    const failure = await failureOf('n', { payload: textToImage() });
    assert.equal(failure.error.code, 'server_error');
    assert.equal(submitted().length, 1);
  });

  it('a submit whose answer was lost is asked for by its own job id, and sent again only if the server lacks it: it runs once', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    sandbox.jobs.jobs.clear();
    // The server takes the job, and the connection breaks before its answer.
    sandbox.faults.add({ method: 'POST', path: '/api/prompt', breakAfterBytes: 0 });
    const taken = await outputOf('n', { payload: textToImage() }, 15000);
    assert.match(taken.prompt_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(submitted().length, 1, 'not sent again: the server has it');
    assert.deepEqual([...sandbox.jobs.jobs.keys()], [taken.prompt_id]);
    assert.ok(
      sandbox.counters.requests.some((seen) => seen.method === 'GET' && seen.path.includes(taken.prompt_id)),
      'asked for by its id',
    );
    // The connection breaks before the server took it: asked twice, then sent again under the same id.
    sandbox.jobs.jobs.clear();
    sandbox.counters.reset();
    sandbox.faults.add({ method: 'POST', path: '/api/prompt', drop: true });
    const resent = await outputOf('n', { payload: textToImage() }, 15000);
    assert.equal(submitted().length, 2);
    assert.deepEqual([...sandbox.jobs.jobs.keys()], [resent.prompt_id], 'one job, under the id first sent');
  }).timeout(30000);

  it('a submit whose answer comes after the time limit is asked for by its id, not failed: it runs once', async () => {
    const flow = flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url });
    flow[0].requestTimeout = 1;
    await load(flow);
    sandbox.jobs.jobs.clear();
    // The server takes the job at once and holds its answer past the 1 s limit.
    sandbox.faults.add({ method: 'POST', path: '/api/prompt', holdMs: 4000 });
    const taken = await outputOf('n', { payload: textToImage() }, 15000);
    assert.equal(submitted().length, 1, 'not sent again: the server has it');
    assert.deepEqual([...sandbox.jobs.jobs.keys()], [taken.prompt_id]);
  }).timeout(30000);

  it('waits for the shared socket before posting, and still submits when it is not up', async () => {
    await load(flowWith({ type: 'graph-gen-submit' }, { baseUrl: sandbox.url }));
    const connection = helper.getNode('c').connection;
    const sockets = connection.sockets();
    const order = [];
    const original = sockets.ready.bind(sockets);
    sockets.ready = async (ms) => {
      order.push(`ready(${ms})`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      order.push(`posts so far: ${submitted().length}`);
      return false;
    };
    try {
      const msg = await outputOf('n', { payload: textToImage() });
      assert.ok(msg.prompt_id);
      assert.deepEqual(order, ['ready(5000)', 'posts so far: 0']);
      assert.equal(submitted().length, 1);
    } finally {
      sockets.ready = original;
    }
  });
});
