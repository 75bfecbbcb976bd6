'use strict';
// The generation sandbox's REST side behaves as real deployments do: the other tests (and the socket work)
// rely on these shapes.
const assert = require('node:assert/strict');
const { startSandbox } = require('../../dist/sandbox');
const { API_KEY, textToImage } = require('../support/generation-nodes');

describe('generation sandbox REST service', () => {
  let cloud;
  let selfHosted;
  const headers = { 'x-api-key': API_KEY };
  const get = (sandbox, path, init = {}) =>
    fetch(`${sandbox.url}${path}`, { redirect: 'manual', ...init, headers: { ...headers, ...init.headers } });

  before(async () => {
    cloud = await startSandbox({ generationApiKey: API_KEY, events: { autoRun: false } });
    selfHosted = await startSandbox({ events: { autoRun: false } });
  });
  after(async () => {
    await cloud.close();
    await selfHosted.close();
  });
  afterEach(() => {
    Object.assign(cloud.generation.options, {
      statusWords: 'spec',
      jobsEndpoint: true,
      historyV2Endpoint: true,
      historyEndpoint: true,
    });
  });

  it('refuses a missing or wrong key with 401 {code, message}', async () => {
    for (const key of [undefined, 'nope']) {
      const answer = await fetch(`${cloud.url}/api/queue`, { headers: key ? { 'x-api-key': key } : {} });
      assert.equal(answer.status, 401);
      assert.deepEqual(await answer.json(), { code: 'unauthorized', message: 'Invalid or missing API key' });
    }
  });

  it('serves object_info with the usual nodes and a partner node marked api_node', async () => {
    const info = await (await get(cloud, '/api/object_info')).json();
    for (const name of [
      'CheckpointLoaderSimple',
      'CLIPTextEncode',
      'EmptyLatentImage',
      'KSampler',
      'VAEDecode',
      'SaveImage',
      'LoadImage',
      'LoadImageMask',
    ]) {
      assert.ok(info[name].input.required, name);
    }
    assert.equal(info.PartnerImageGenerate.api_node, true);
    assert.equal(info.SaveImage.output_node, true);
  });

  it('validates a prompt like a self-hosted server: unknown class_type, missing input', async () => {
    const post = (prompt) =>
      get(cloud, '/api/prompt', {
        method: 'POST',
        body: JSON.stringify({ prompt }),
        headers: { 'content-type': 'application/json' },
      });
    const unknown = textToImage();
    unknown[5].class_type = 'Nope';
    const first = await post(unknown);
    assert.equal(first.status, 400);
    const body = await first.json();
    assert.equal(body.error.type, 'invalid_prompt');
    assert.match(body.error.message, /node Nope does not exist/);
    const missing = textToImage();
    delete missing[3].inputs.cfg;
    const second = await (await post(missing)).json();
    assert.deepEqual(second.node_errors[3], {
      errors: [{ type: 'required_input_missing', message: 'Required input is missing', details: 'cfg' }],
      class_type: 'KSampler',
    });
    const ok = await post(textToImage());
    const accepted = await ok.json();
    assert.deepEqual(Object.keys(accepted).sort(), ['node_errors', 'number', 'prompt_id']);
  });

  it('status: spec words, raw words on request, and 404 on a self-hosted server', async () => {
    const job = cloud.jobs.submit(textToImage(), 'c');
    assert.deepEqual(await (await get(cloud, `/api/job/${job.id}/status`)).json(), { status: 'pending' });
    cloud.generation.options.statusWords = 'raw';
    job.state = 'completed';
    assert.deepEqual(await (await get(cloud, `/api/job/${job.id}/status`)).json(), { status: 'success' });
    const own = selfHosted.jobs.submit(textToImage(), 'c');
    assert.equal((await fetch(`${selfHosted.url}/api/job/${own.id}/status`)).status, 404);
  });

  it('jobs and history endpoints give outputs once terminal, and can each be switched off', async () => {
    const job = cloud.jobs.submit(textToImage(), 'c');
    assert.deepEqual(await (await get(cloud, `/api/jobs/${job.id}`)).json(), {
      id: job.id,
      status: 'pending',
    });
    assert.deepEqual(await (await get(cloud, `/api/history/${job.id}`)).json(), {});
    job.state = 'completed';
    job.outputs = { 9: { images: [{ filename: 'a.png', subfolder: '', type: 'output' }] } };
    const detail = await (await get(cloud, `/api/jobs/${job.id}`)).json();
    assert.deepEqual(detail.outputs, job.outputs);
    for (const path of [`/api/history_v2/${job.id}`, `/api/history/${job.id}`]) {
      const history = await (await get(cloud, path)).json();
      assert.deepEqual(history[job.id].outputs, job.outputs);
      const status = history[job.id].status;
      assert.equal(status.status_str, 'success');
      assert.equal(status.completed, true);
      assert.deepEqual(
        status.messages.map(([event]) => event),
        ['execution_start', 'execution_success'],
      );
    }
    Object.assign(cloud.generation.options, {
      jobsEndpoint: false,
      historyV2Endpoint: false,
      historyEndpoint: false,
    });
    for (const path of [`/api/jobs/${job.id}`, `/api/history_v2/${job.id}`, `/api/history/${job.id}`]) {
      assert.equal((await get(cloud, path)).status, 404, path);
    }
  });

  it('view: 302 to a signed storage address that refuses a key header and a forged signature', async () => {
    cloud.generation.addFile({ filename: 'big.bin', subfolder: 'x', type: 'output' }, { size: 3_000_000 });
    const view = await get(cloud, '/api/view?filename=big.bin&subfolder=x&type=output');
    assert.equal(view.status, 302);
    assert.match(view.headers.get('set-cookie'), /^session=/, 'a cookie a careless client would carry on');
    const location = view.headers.get('location');
    assert.ok(location.startsWith(cloud.generation.storageUrl));
    const file = await fetch(location);
    assert.equal(file.status, 200);
    assert.equal((await file.arrayBuffer()).byteLength, 3_000_000);
    assert.equal((await fetch(location, { headers })).status, 400);
    assert.equal(cloud.generation.storageLeaks().length, 1, 'the request with the key is reported');
    // Forged by changing its first character: a fixed "00" was the real signature once in 256 runs.
    const forged = location.replace(/signature=(.)/, (_, first) => `signature=${first === '0' ? '1' : '0'}`);
    assert.notEqual(forged, location);
    assert.equal((await fetch(forged)).status, 403);
    cloud.generation.storage.counters.reset();
  });

  it('self-hosted: view answers 200 with the file, every route also without /api', async () => {
    selfHosted.generation.addFile(
      { filename: 'a.txt', subfolder: '', type: 'output' },
      { content: Buffer.from('hello') },
    );
    const answer = await fetch(`${selfHosted.url}/view?filename=a.txt&type=output`);
    assert.equal(answer.status, 200);
    assert.equal(await answer.text(), 'hello');
    assert.equal((await fetch(`${selfHosted.url}/object_info`)).status, 200);
  });

  it('queue elements are [number, id, prompt, extra, outputs] without secret extra_data; interrupt answers empty', async () => {
    const job = selfHosted.jobs.submit(textToImage(), 'client-1', { api_key_service_org: 'partner-secret' });
    job.state = 'in_progress';
    const queue = await (await fetch(`${selfHosted.url}/api/queue`)).json();
    const [number, id, prompt, extra, outputs] = queue.queue_running[0];
    assert.equal(typeof number, 'number');
    assert.equal(id, job.id);
    assert.deepEqual(prompt, textToImage());
    // As v0.8.0 and v0.33.0 list it: the submitter's client_id and the server's create_time.
    assert.deepEqual(extra, { client_id: 'client-1', create_time: job.createdAt });
    assert.deepEqual(outputs, ['9']);
    const interrupt = await fetch(`${selfHosted.url}/api/interrupt`, { method: 'POST' });
    assert.equal(interrupt.status, 200);
    assert.equal(await interrupt.text(), '');
    assert.equal(job.state, 'cancelled');
  });

  it('refuses a POST whose Origin is another host (403), as self-hosted servers do', async () => {
    const answer = await fetch(`${selfHosted.url}/api/interrupt`, {
      method: 'POST',
      headers: { origin: 'http://evil.example.com' },
    });
    assert.equal(answer.status, 403);
  });
});
