'use strict';
// Workflows saved on the server from its own page (ComfyUI's user data, `workflows/`): the sandbox serves the
// routes as ComfyUI v0.8.0 and v0.33.0 answer them (measured), names are checked before they go into a path,
// lists are read sorted and bounded, the submit node runs a saved workflow by name (read for each msg, msg.inputs
// applied), and the submit dialog's endpoints list and read them. Real Node-RED runtime (test helper) and the
// sandbox over HTTP.
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../../dist/sandbox');
const {
  SAVED_WORKFLOW_LIMITS,
  checkedWorkflowName,
  savedWorkflowRoute,
  savedWorkflowsOf,
} = require('../../../dist/generation/workflows/saved-workflows');
const { API_KEY, flowWith, load, failureOf, outputOf, textOf } = require('../../support/generation-nodes');
const configNode = require('../../../dist/nodes/graph-gen-config.js');
const objectInfo = require('../../fixtures/object_info.json');

/** The image-chain graph as the server's page saves it (UI format), and what the server runs of it. */
const uiChain = () => structuredClone(require('../../fixtures/ui/image-chain.json'));
const apiChain = () => structuredClone(require('../../fixtures/ui/image-chain.expected.json'));
/** Node types of image-chain the sandbox's object_info lacks. */
const CHAIN_TYPES = {
  EmptyImage: objectInfo.EmptyImage,
  ImageAddNoise: objectInfo.ImageAddNoise,
  ImageBlur: objectInfo.ImageBlur,
};

/** Saves as ComfyUI's page does: the whole path URL-encoded, the body its JSON text, no content type set. */
async function saveLikeThePage(baseUrl, name, workflow, { headers = {}, overwrite = true } = {}) {
  const route = `/api/userdata/${encodeURIComponent(`workflows/${name}`)}`;
  const response = await fetch(`${baseUrl}${route}?overwrite=${overwrite}&full_info=true`, {
    method: 'POST',
    headers,
    body: typeof workflow === 'string' ? workflow : JSON.stringify(workflow),
  });
  const text = await response.text();
  return {
    status: response.status,
    body: response.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text,
  };
}

/** A GET to the sandbox: status, content type and body (parsed when JSON). */
async function get(baseUrl, route, headers = {}) {
  const response = await fetch(`${baseUrl}${route}`, { headers });
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  return {
    status: response.status,
    type,
    disposition: response.headers.get('content-disposition'),
    body: type.includes('json') && text ? JSON.parse(text) : text,
  };
}

describe('saved workflows', () => {
  before(async () => helper.startServer());
  after(async () => helper.stopServer());

  describe('sandbox: the user data routes as ComfyUI answers them', () => {
    let old;
    let current;
    before(async () => {
      old = await startSandbox({ generation: { serverVersion: '0.8.0' } });
      current = await startSandbox({ generation: { serverVersion: '0.33.0' } });
    });
    after(async () => {
      await old.close();
      await current.close();
    });

    it('answers the list 404 before anything is saved, saves as the page does, and lists in the order saved with sub-folders and times in seconds (v0.8.0)', async () => {
      const none = await get(old.url, '/api/userdata?dir=workflows&recurse=true&split=false&full_info=true');
      assert.deepEqual(
        [none.status, none.type, none.body],
        [404, 'text/plain; charset=utf-8', 'Directory not found'],
      );

      const saved = await saveLikeThePage(old.url, 'zebra.json', { nodes: [], links: [] });
      assert.equal(saved.status, 200);
      assert.equal(saved.body.path, 'workflows/zebra.json');
      assert.equal(saved.body.size, 23);
      assert.ok(saved.body.modified < 1e11 && saved.body.modified > 1e9, `seconds: ${saved.body.modified}`);
      await saveLikeThePage(old.url, 'sub/deep one.json', { nodes: [], links: [], x: 1 });
      await saveLikeThePage(old.url, 'alpha.json', { a: 1 });

      const full = await get(old.url, '/api/userdata?dir=workflows&recurse=true&split=false&full_info=true');
      assert.deepEqual(
        full.body.map((entry) => entry.path),
        ['zebra.json', 'sub/deep one.json', 'alpha.json'],
      );
      assert.ok(full.body.every((entry) => entry.modified < 1e11));
      const flat = await get(old.url, '/api/userdata?dir=workflows');
      assert.deepEqual(flat.body, ['zebra.json', 'alpha.json']);
      const split = await get(old.url, '/api/userdata?dir=workflows&recurse=true&split=true');
      assert.deepEqual(split.body[1], ['sub/deep one.json', 'sub', 'deep one.json']);
      assert.equal((await get(old.url, '/api/userdata?dir=')).status, 400);
      assert.equal((await get(old.url, '/api/userdata?dir=..%2F')).status, 403);
    });

    it('serves one file by its encoded path (decoded twice, as the server does); a missing one is an empty 404, one outside the folder 403', async () => {
      await saveLikeThePage(old.url, 'sub/deep one.json', { nodes: [], links: [], x: 1 });
      const file = await get(old.url, '/api/userdata/workflows%2Fsub%2Fdeep%20one.json');
      assert.deepEqual(
        [file.status, file.type, file.body],
        [200, 'application/json', { nodes: [], links: [], x: 1 }],
      );
      assert.equal(file.disposition, null);
      assert.equal((await get(old.url, '/api/userdata/workflows%252Fsub%252Fdeep%2520one.json')).status, 200);
      assert.equal((await get(old.url, '/api/userdata/workflows/sub/deep%20one.json')).status, 404);
      const missing = await get(old.url, '/api/userdata/workflows%2Fnothing.json');
      assert.deepEqual([missing.status, missing.body], [404, '']);
      assert.equal((await get(old.url, '/api/userdata/workflows%2F..%2F..%2Fsecret.json')).status, 403);
      // A name with %XX in it is decoded a second time: the page's save of "a%41.json" writes aA.json.
      assert.equal((await saveLikeThePage(old.url, 'a%41.json', { a: 1 })).body.path, 'workflows/aA.json');
      assert.equal(
        (await saveLikeThePage(old.url, 'alpha.json', { a: 2 }, { overwrite: false })).status,
        409,
      );
    });

    it('answers times in whole milliseconds, and a file as an attachment, from v0.33', async () => {
      const saved = await saveLikeThePage(current.url, 'one.json', { nodes: [], links: [] });
      assert.ok(
        Number.isInteger(saved.body.modified) && saved.body.modified > 1e12,
        `${saved.body.modified}`,
      );
      const file = await get(current.url, '/api/userdata/workflows%2Fone.json');
      assert.equal(file.disposition, 'attachment');
    });
  });

  describe('names and lists', () => {
    it('takes a name as it is under the workflows folder, with .json added when it has none', () => {
      assert.equal(checkedWorkflowName('portrait', 'The name'), 'portrait.json');
      assert.equal(checkedWorkflowName('  sub/studio light.JSON ', 'The name'), 'sub/studio light.JSON');
      assert.equal(checkedWorkflowName('Straße/猫', 'The name'), 'Straße/猫.json');
      assert.equal(savedWorkflowRoute('sub/a b?#.json'), '/api/userdata/workflows%2Fsub%2Fa%20b%3F%23.json');
    });

    const refused = [
      [
        '../comfy.settings',
        /"\.\.\/comfy\.settings\.json", cannot be used: it has an empty, "\." or "\.\." folder in it/,
      ],
      ['sub/../../x.json', /"\." or "\.\." folder/],
      ['a//b.json', /empty, "\." or "\.\." folder/],
      ['./a.json', /"\." or "\.\." folder/],
      ['/etc/passwd', /absolute path/],
      ['C:/Users/x.json', /absolute path/],
      ['a\\..\\b.json', /backslash/],
      ['', /it is empty/],
      ['   ', /it is empty/],
      ['a%41.json', /decodes a second time/],
      ['line\nbreak.json', /control character/],
      ['x'.repeat(600), /longer than 512 characters/],
      [42, /The name must be text/],
      [undefined, /The name must be text/],
    ];
    for (const [name, message] of refused) {
      it(`refuses ${JSON.stringify(name)?.slice(0, 40)} before it goes into a path`, () => {
        assert.throws(
          () => checkedWorkflowName(name, 'The name'),
          (error) => error.code === 'invalid_input' && message.test(error.message),
        );
      });
    }

    it('reads a list sorted by name, .json files with usable names only, times in milliseconds', () => {
      const list = savedWorkflowsOf([
        { path: '10 last.json', size: 5, modified: 1795643195.7358644, created: 1 },
        { path: '2 first.json', size: 7, modified: 1795643196907, created: 1 },
        'plain.json',
        { path: 'notes.txt', size: 1 },
        { path: '../outside.json' },
        { path: 'a%41.json' },
        { size: 3 },
        null,
        17,
      ]);
      assert.deepEqual(list, {
        workflows: [
          { name: '2 first.json', size: 7, modified: 1795643196907 },
          { name: '10 last.json', size: 5, modified: 1795643195736 },
          { name: 'plain.json' },
        ],
        leftOut: 0,
      });
      assert.throws(
        () => savedWorkflowsOf({ error: 'no' }),
        (error) => error.code === 'server_error' && /not a list/.test(error.message),
      );
    });

    it(`lists at most ${SAVED_WORKFLOW_LIMITS.listedNames} names and counts the rest`, () => {
      const many = Array.from({ length: SAVED_WORKFLOW_LIMITS.listedNames + 5 }, (_, index) => ({
        path: `w${index}.json`,
        size: 1,
      }));
      const list = savedWorkflowsOf(many.reverse());
      assert.equal(list.workflows.length, SAVED_WORKFLOW_LIMITS.listedNames);
      assert.equal(list.leftOut, 5);
      assert.equal(list.workflows[0].name, 'w0.json');
    });
  });

  describe('graph-gen-submit: a saved workflow read by name', () => {
    let sandbox;
    before(async () => {
      sandbox = await startSandbox({ generationApiKey: API_KEY });
      Object.assign(sandbox.generation.definitions, CHAIN_TYPES);
    });
    after(async () => sandbox.close());
    beforeEach(() => {
      sandbox.faults.clear();
      sandbox.counters.reset();
      sandbox.generation.userData.files.clear();
    });
    afterEach(async () => helper.unload());

    const save = (name, workflow) =>
      saveLikeThePage(sandbox.url, name, workflow, { headers: { 'x-api-key': API_KEY } });
    const lastJob = () => [...sandbox.jobs.jobs.values()].at(-1);
    const submitted = () => sandbox.counters.matching('/api/prompt', 'POST');
    const reads = () => sandbox.counters.matching(/^\/api\/userdata\//, 'GET');
    const loadSubmit = (settings, config = {}) =>
      load(
        flowWith({ type: 'graph-gen-submit', newSeed: false, ...settings }, { baseUrl: sandbox.url }).map(
          (node) => (node.id === 'c' ? { ...node, ...config } : node),
        ),
      );

    it('reads the named workflow for each msg, converts it with the server’s definitions, applies msg.inputs, and runs what is saved there now', async () => {
      assert.equal((await save('pipelines/image chain.json', uiChain())).status, 200);
      await loadSubmit({ savedWorkflow: 'pipelines/image chain', workflow: '' });
      const statuses = [];
      const node = helper.getNode('n');
      const original = node.status.bind(node);
      node.status = (status) => {
        statuses.push(status);
        return original(status);
      };

      const first = await outputOf('n', { payload: 'go', inputs: { Soften: { blur_radius: 5 } } });
      const expected = apiChain();
      expected[3].inputs.blur_radius = 5;
      assert.deepEqual(lastJob().prompt, expected);
      assert.deepEqual(first.workflow, expected);
      assert.equal(reads()[0].path, '/api/userdata/workflows%2Fpipelines%2Fimage%20chain.json');
      assert.equal(reads()[0].headers['x-api-key'], API_KEY);
      assert.deepEqual(statuses[0], { fill: 'yellow', shape: 'ring', text: 'reading workflow…' });

      // Changed in the server's page: the next msg runs the new version, no deploy.
      const changed = uiChain();
      changed.nodes.find((node) => node.id === 3).widgets_values[0] = 9;
      await save('pipelines/image chain.json', changed);
      await outputOf('n', { payload: 'again' });
      assert.equal(lastJob().prompt[3].inputs.blur_radius, 9);
      assert.equal(reads().length, 2, 'the saved workflow is read for each msg');
    });

    it('says clearly that a saved workflow has gone (invalid_request, status 404), and submits nothing', async () => {
      await loadSubmit({ savedWorkflow: 'gone' });
      const failure = await failureOf('n', { payload: 'go' });
      assert.equal(failure.error.code, 'invalid_request');
      assert.equal(failure.error.cause.status, 404);
      assert.match(
        failure.error.message,
        /^The saved workflow "gone\.json" is not on the generation service \(any more\): it was renamed, moved or deleted there\. Save it again under that name in the server's page, or pick another one in this node's dialog$/,
      );
      assert.equal(submitted().length, 0);
      assert.deepEqual(helper.getNode('n').status.lastCall.args[0], {
        fill: 'red',
        shape: 'ring',
        text: 'invalid request',
      });
      assert.ok(!textOf(failure).includes(API_KEY));
    });

    it('refuses a name that would leave the workflows folder, before any request', async () => {
      await loadSubmit({ savedWorkflow: '../comfy.settings' });
      const failure = await failureOf('n', { payload: 'go' });
      assert.equal(failure.error.code, 'invalid_input');
      assert.match(
        failure.error.message,
        /^The name of the saved workflow set in this node, "\.\.\/comfy\.settings\.json", cannot be used: it has an empty, "\." or "\.\." folder in it$/,
      );
      assert.equal(reads().length, 0);
    });

    it('refuses a saved file that is not JSON, not a workflow, or larger than the config node’s answer limit', async () => {
      await save('text.json', 'hello');
      await save('settings.json', { 'Comfy.Theme': 'dark' });
      await save('big.json', { ...uiChain(), extra: { padding: 'x'.repeat(20_000) } });
      await loadSubmit({ savedWorkflow: 'text.json' });
      const notJson = await failureOf('n', { payload: 'go' });
      assert.equal(notJson.error.code, 'invalid_input');
      assert.match(
        notJson.error.message,
        /^The saved workflow "text\.json" on the generation service is not JSON/,
      );
      await helper.unload();

      await loadSubmit({ savedWorkflow: 'settings.json' });
      const notWorkflow = await failureOf('n', { payload: 'go' });
      assert.equal(notWorkflow.error.code, 'invalid_input');
      assert.match(notWorkflow.error.message, /"settings\.json" on the generation service is not a workflow/);
      await helper.unload();

      await loadSubmit({ savedWorkflow: 'big.json' }, { answerLimitMiB: '0.01' });
      const tooBig = await failureOf('n', { payload: 'go' });
      assert.equal(tooBig.error.code, 'server_error');
      assert.match(tooBig.error.message, /reading the saved workflow "big\.json" with more than 10 KiB/);
      assert.equal(submitted().length, 0);
    });

    it('still takes a workflow in msg.payload first, without reading the saved one', async () => {
      await save('chain.json', uiChain());
      await loadSubmit({ savedWorkflow: 'chain.json' });
      await outputOf('n', { payload: apiChain() });
      assert.deepEqual(lastJob().prompt, apiChain());
      assert.equal(reads().length, 0);
    });
  });

  describe('submit dialog endpoints: saved workflows', () => {
    let sandbox;
    const asked = [];
    let granted;
    function configWithPermissions(RED) {
      RED.auth.needsPermission = (permission) => (req, res, next) => {
        asked.push(permission);
        if (granted.has(permission)) next();
        else res.status(401).json({ message: 'permission denied' });
      };
      return configNode(RED);
    }
    const deploy = (credentials = { apiKey: API_KEY }) =>
      helper.load([configWithPermissions], [{ id: 'c', type: 'graph-gen-config', baseUrl: sandbox.url }], {
        c: credentials,
      });
    const list = (body) => helper.request().post('/graph-gen/graph-gen-config/saved-workflows').send(body);
    const read = (body) => helper.request().post('/graph-gen/graph-gen-config/saved-workflow').send(body);
    /** Every answer a test reads goes through here: none may hold the key. */
    const checked = (response) => {
      assert.equal(response.status, 200);
      assert.ok(!JSON.stringify(response.body).includes(API_KEY), 'an answer holds the key');
      return response.body;
    };

    before(async () => {
      sandbox = await startSandbox({ generationApiKey: API_KEY });
    });
    after(async () => sandbox.close());
    beforeEach(() => {
      asked.length = 0;
      granted = new Set(['graph-gen-config.read', 'graph-gen-config.write']);
      sandbox.generation.userData.files.clear();
      sandbox.counters.reset();
    });
    afterEach(async () => helper.unload());

    it('lists a deployed config node’s saved workflows sorted by name, with read permission and its stored key, never sending the key back', async () => {
      await deploy();
      const none = checked(await list({ id: 'c', baseUrl: sandbox.url }));
      assert.deepEqual(none, { ok: true, workflows: [], leftOut: 0 });

      sandbox.generation.userData.save('workflows/zebra.json', JSON.stringify(uiChain()));
      sandbox.generation.userData.save('workflows/sub/alpha one.json', JSON.stringify(uiChain()));
      // A workflow whose content echoes the key: the answer still never carries it.
      sandbox.generation.userData.save(`workflows/${API_KEY}.json`, '{}');
      sandbox.generation.userData.save('comfy.settings.json', '{}');
      const answer = checked(await list({ id: 'c', baseUrl: sandbox.url }));
      assert.equal(answer.ok, true, answer.message);
      assert.deepEqual(
        answer.workflows.map((entry) => entry.name),
        ['***.json', 'sub/alpha one.json', 'zebra.json'],
      );
      assert.equal(answer.workflows[1].size, JSON.stringify(uiChain()).length);
      assert.ok(Math.abs(answer.workflows[1].modified - Date.now()) < 60_000, 'modified in milliseconds');
      assert.ok(
        asked.every((permission) => permission === 'graph-gen-config.read'),
        asked.join(),
      );
      assert.equal(sandbox.counters.matching('/api/userdata')[0].headers['x-api-key'], API_KEY);
    });

    it('reads one saved workflow by name for the form; one that has gone, or a bad name, is a sentence', async () => {
      await deploy();
      sandbox.generation.userData.save('workflows/sub/chain.json', JSON.stringify(uiChain()));
      const answer = checked(await read({ id: 'c', baseUrl: sandbox.url, name: 'sub/chain' }));
      assert.deepEqual(answer, { ok: true, name: 'sub/chain.json', workflow: uiChain() });

      const gone = checked(await read({ id: 'c', baseUrl: sandbox.url, name: 'gone.json' }));
      assert.equal(gone.ok, false);
      assert.equal(gone.code, 'invalid_request');
      assert.match(
        gone.message,
        /^The saved workflow "gone\.json" is not on the generation service \(any more\)/,
      );

      sandbox.counters.reset();
      const bad = checked(await read({ id: 'c', baseUrl: sandbox.url, name: '../../users.json' }));
      assert.deepEqual(bad, {
        ok: false,
        code: 'invalid_input',
        message:
          'The name of the saved workflow, "../../users.json", cannot be used: it has an empty, "." or ".." folder in it',
      });
      assert.equal(sandbox.counters.matching(/^\/api\/userdata\//).length, 0);
    });

    it('works for typed settings with the typed key, which needs write permission', async () => {
      await deploy({});
      sandbox.generation.userData.save('workflows/typed.json', JSON.stringify(uiChain()));
      granted = new Set(['graph-gen-config.read']);
      const refused = await list({ id: 'new', baseUrl: sandbox.url, apiKey: API_KEY });
      assert.equal(refused.status, 401);
      assert.deepEqual(asked, ['graph-gen-config.write']);
      assert.equal(sandbox.counters.matching('/api/userdata').length, 0);

      granted.add('graph-gen-config.write');
      const answer = checked(await list({ id: 'new', baseUrl: sandbox.url, apiKey: API_KEY }));
      assert.deepEqual(
        answer.workflows.map((entry) => entry.name),
        ['typed.json'],
      );
      const one = checked(await read({ id: 'new', baseUrl: sandbox.url, apiKey: API_KEY, name: 'typed' }));
      assert.deepEqual(one.workflow, uiChain());
      const wrongKey = checked(await list({ id: 'new', baseUrl: sandbox.url, apiKey: 'wrong-key' }));
      assert.equal(wrongKey.code, 'unauthorized');
      assert.match(wrongKey.message, /API key was refused/);
    });

    it('answers a server that cannot be reached, or a list that is not one, with a sentence', async () => {
      await deploy();
      const unreachable = checked(
        await list({ id: 'new', baseUrl: 'http://127.0.0.1:9', apiKey: 'closed-port-key' }),
      );
      assert.equal(unreachable.ok, false);
      assert.equal(unreachable.code, 'network');
      assert.match(unreachable.message, /did not answer listing the saved workflows/);

      sandbox.faults.add({ path: '/api/userdata', status: 200, body: { not: 'a list' }, times: 1 });
      const strange = checked(await list({ id: 'c', baseUrl: sandbox.url }));
      assert.equal(strange.code, 'server_error');
      assert.match(strange.message, /saved workflows with something that is not a list/);
    });
  });
});
