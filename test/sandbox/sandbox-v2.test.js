'use strict';
// The sandbox's Comfy API v2 mode answers as comfy-api-proxy does in front of a ComfyUI (peers/comfy-v2/README.md
// measured it): over real HTTP on 127.0.0.1, what a client sees.
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { startSandbox } = require('../../dist/sandbox');
const { parseCliOptions } = require('../../dist/sandbox/cli');

const TOKEN = 'v2-sandbox-token';
const AUTH = { authorization: `Bearer ${TOKEN}` };
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$/;
const BLAKE3_ABC = 'blake3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85';
// b3sum of bytes (i * 7) % 251 for i < 5000 (checked against the proxy kit's own BLAKE3): several chunks.
const BLAKE3_5000 = 'blake3:7784cd98429d397eb64c7520bf62724a99496fb6efc294787c3f51a0307a1537';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check, what, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

function v2Sandbox({ v2 = {}, events = {} } = {}) {
  return startSandbox({
    dialect: 'comfy-api-v2',
    v2: { token: TOKEN, keepaliveMs: 200, throttleMs: 0, ...v2 },
    events,
  });
}

/** A request; `json` is the parsed body when it is JSON. */
async function call(sandbox, method, route, { body, headers = {}, auth = true } = {}) {
  const init = { method, headers: { ...(auth ? AUTH : {}), ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' || body instanceof FormData ? body : JSON.stringify(body);
    if (typeof body !== 'string' && !(body instanceof FormData))
      init.headers['content-type'] = 'application/json';
  }
  const answer = await fetch(`${sandbox.url}${route}`, init);
  const text = await answer.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: answer.status, headers: answer.headers, text, json };
}

/** A request with headers fetch will not send as given (Host, Origin). */
function rawRequest(sandbox, method, route, headers) {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: '127.0.0.1', port: sandbox.server.port, method, path: route, headers },
      (answer) => {
        let text = '';
        answer.on('data', (chunk) => (text += chunk));
        answer.on('end', () => resolve({ status: answer.statusCode, headers: answer.headers, text }));
      },
    );
    request.on('error', reject);
    request.end();
  });
}

/** An API-format graph: an empty latent (node 1) saved by node 9, plus `extra` nodes. */
function graph(extra = {}, latentInputs = {}) {
  return {
    1: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1, ...latentInputs } },
    9: { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'v2probe' } },
    ...extra,
  };
}
const HANG = { 5: { class_type: 'SandboxHang', inputs: {} } };
/**
 * Lets the job held by SandboxHang go on, once one is held: a release before the run reaches that node would
 * be lost, and the job would hang for good (it did, once, under CI's load).
 */
const releaseHang = (sandbox) => until(() => sandbox.events.releaseHangs() > 0, 'a job held by SandboxHang');

async function submit(sandbox, workflow, { headers = {}, ...rest } = {}) {
  const answer = await call(sandbox, 'POST', '/api/v2/jobs', { body: { workflow, ...rest }, headers });
  assert.equal(answer.status, 201, answer.text);
  return answer.json;
}

const statusOf = async (sandbox, id) => (await call(sandbox, 'GET', `/api/v2/jobs/${id}`)).json;
const settled = (sandbox, id, status) =>
  until(async () => {
    const job = await statusOf(sandbox, id);
    return job.status === status && job;
  }, `job ${id} to be ${status}`);

function parseBlock(block) {
  if (block.startsWith(':')) return { comment: block.slice(1).trim(), raw: block };
  const frame = { raw: block };
  for (const line of block.split('\n')) {
    if (line.startsWith('event: ')) frame.event = line.slice(7);
    else if (line.startsWith('data: ')) frame.data = JSON.parse(line.slice(6));
  }
  return frame;
}

/** Opens an event stream and collects its frames as they come; `ended` once the server ends it. */
async function openStream(url, headers = AUTH) {
  const controller = new AbortController();
  const answer = await fetch(url, { headers, signal: controller.signal });
  const stream = {
    status: answer.status,
    headers: answer.headers,
    frames: [],
    raw: '',
    ended: false,
    controller,
  };
  if (answer.status !== 200) {
    stream.body = await answer.json();
    stream.ended = true;
    return stream;
  }
  const reader = answer.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  stream.done = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const text = decoder.decode(value, { stream: true });
      stream.raw += text;
      buffer += text;
      let at;
      while ((at = buffer.indexOf('\n\n')) >= 0) {
        stream.frames.push(parseBlock(buffer.slice(0, at)));
        buffer = buffer.slice(at + 2);
      }
    }
    stream.ended = true;
  })().catch((error) => {
    stream.error = error;
    stream.ended = true;
  });
  stream.events = () => stream.frames.filter((frame) => frame.event);
  return stream;
}

function multipart(fields, file) {
  const form = new FormData();
  if (file)
    form.append('file', new Blob([file.bytes], { type: file.type ?? 'image/png' }), file.name ?? 'up.png');
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  return form;
}

const upload = (sandbox, fields, file) =>
  call(sandbox, 'POST', '/api/v2/assets', { body: multipart(fields, file) });

describe('sandbox in Comfy API v2 mode', function () {
  let sandbox;
  before(async () => {
    sandbox = await v2Sandbox();
  });
  after(async () => {
    await sandbox.close();
  });
  afterEach(() => {
    sandbox.v2.faults.clear();
    sandbox.events.releaseHangs();
  });

  it('answers health without a token and every other /api/v2 route only with the bearer token', async () => {
    const health = await call(sandbox, 'GET', '/api/v2/health', { auth: false });
    assert.equal(health.status, 200);
    assert.equal(health.headers.get('content-type'), 'application/json; charset=utf-8');
    assert.deepEqual(health.json, { status: 'healthy', upstream: sandbox.upstream.url });
    const missing = {
      error: { code: 'unauthorized', message: 'Missing or malformed Authorization header.', details: null },
    };
    for (const headers of [
      {},
      { 'x-api-key': TOKEN },
      { authorization: TOKEN },
      { authorization: 'Bearer ' },
    ]) {
      const refused = await call(sandbox, 'GET', '/api/v2/jobs', { auth: false, headers });
      assert.equal(refused.status, 401);
      assert.deepEqual(refused.json, missing);
      assert.equal(refused.headers.get('www-authenticate'), null);
    }
    const wrong = await call(sandbox, 'GET', '/api/v2/jobs', {
      auth: false,
      headers: { authorization: 'Bearer no' },
    });
    assert.equal(wrong.status, 401);
    assert.deepEqual(wrong.json, {
      error: { code: 'unauthorized', message: 'Invalid token.', details: null },
    });
    assert.equal(wrong.text.includes(TOKEN), false);
    const lowerScheme = await call(sandbox, 'GET', '/api/v2/jobs', {
      auth: false,
      headers: { authorization: `bearer ${TOKEN}` },
    });
    assert.equal(lowerScheme.status, 200);
    // Downloads need it too, and an unknown /api/v2 path is refused before it is found missing.
    assert.equal((await call(sandbox, 'GET', '/api/v2/assets/x/content', { auth: false })).status, 401);
    assert.equal((await call(sandbox, 'GET', '/api/v2/nothing', { auth: false })).status, 401);
  });

  it("answers only /api/v2: today's routes, the socket and unknown paths are aiohttp's plain 404", async () => {
    for (const [method, route] of [
      ['POST', '/api/prompt'],
      ['GET', '/api/queue'],
      ['GET', '/ws'],
      ['GET', '/api/object_info'],
      ['GET', '/api/v2/nothing'],
      ['GET', '/api/v1/workflows'],
    ]) {
      const answer = await call(sandbox, method, route);
      assert.equal(answer.status, 404, route);
      assert.equal(answer.text, '404: Not Found');
      assert.equal(answer.headers.get('content-type'), 'text/plain; charset=utf-8');
    }
    const wrongMethod = await call(sandbox, 'DELETE', '/api/v2/jobs');
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.text, '405: Method Not Allowed');
    assert.equal(wrongMethod.headers.get('allow'), 'GET,HEAD,POST');
    // The engine behind still speaks today's API on its own address.
    assert.equal((await fetch(`${sandbox.upstream.url}/api/queue`)).status, 200);
  });

  it('refuses a browser cross-site request with 403 forbidden_origin, as its origin guard', async () => {
    const host = `127.0.0.1:${sandbox.server.port}`;
    const foreign = await rawRequest(sandbox, 'GET', '/api/v2/health', {
      host,
      origin: 'http://evil.example',
    });
    assert.equal(foreign.status, 403);
    assert.deepEqual(JSON.parse(foreign.text), {
      error: {
        code: 'forbidden_origin',
        message: `Origin 'http://evil.example' does not match request host '${host}'.`,
        details: null,
      },
    });
    const crossSite = await rawRequest(sandbox, 'GET', '/api/v2/health', {
      host,
      'sec-fetch-site': 'cross-site',
    });
    assert.equal(crossSite.status, 403);
    const same = await rawRequest(sandbox, 'GET', '/api/v2/health', { host, origin: `http://${host}` });
    assert.equal(same.status, 200);
  });

  it('submits: 201 with a server-minted job, metadata and priority echoed, links built from the Host header', async () => {
    const answer = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: { workflow: graph(), metadata: 'probe-1', priority: 5 },
    });
    assert.equal(answer.status, 201);
    const job = answer.json;
    assert.match(job.id, UUID4);
    assert.deepEqual(Object.keys(job), [
      'id',
      'status',
      'created_at',
      'started_at',
      'completed_at',
      'expires_at',
      'queue_position',
      'progress',
      'outputs',
      'error',
      'outputs_reused',
      'urls',
      'metadata',
      'priority',
    ]);
    assert.equal(job.status, 'queued');
    assert.equal(job.queue_position, null, 'the 201 names no position, as measured');
    assert.equal(job.progress, null);
    assert.deepEqual(job.outputs, []);
    assert.equal(job.started_at, null);
    assert.equal(job.completed_at, null);
    assert.match(job.created_at, ISO);
    assert.equal(Date.parse(job.expires_at) - Date.parse(job.created_at), 24 * 3600 * 1000);
    assert.deepEqual(job.urls, {
      self: `${sandbox.url}/api/v2/jobs/${job.id}`,
      events: `${sandbox.url}/api/v2/jobs/${job.id}/events`,
      cancel: `${sandbox.url}/api/v2/jobs/${job.id}/cancel`,
    });
    assert.equal(job.metadata, 'probe-1');
    assert.equal(job.priority, 5);
    // The engine runs it under the same id.
    assert.equal(sandbox.jobs.jobs.get(job.id).clientId, job.id);
    const plain = await submit(sandbox, graph());
    assert.equal('metadata' in plain || 'priority' in plain, false, 'absent when not given');
    const elsewhere = await new Promise((resolve, reject) => {
      const body = JSON.stringify({ workflow: graph() });
      const request = http.request(
        {
          host: '127.0.0.1',
          port: sandbox.server.port,
          method: 'POST',
          path: '/api/v2/jobs',
          headers: { ...AUTH, host: 'gen.example.test:8443', 'content-type': 'application/json' },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk) => (text += chunk));
          res.on('end', () => resolve(JSON.parse(text)));
        },
      );
      request.on('error', reject);
      request.end(body);
    });
    assert.equal(elsewhere.urls.self, `http://gen.example.test:8443/api/v2/jobs/${elsewhere.id}`);
  });

  it("refuses bad submits in the proxy's words: 400 for a malformed request, 422 for a bad workflow", async () => {
    const jobsBefore = sandbox.v2.jobs.size;
    const refusal = async (body, status, code, message) => {
      const answer = await call(sandbox, 'POST', '/api/v2/jobs', { body });
      assert.equal(answer.status, status, answer.text);
      assert.equal(answer.json.error.code, code);
      if (message) assert.equal(answer.json.error.message, message);
      return answer.json.error;
    };
    await refusal('{"workflow": ', 400, 'invalid_request', 'Body must be JSON.');
    await refusal({ nothing: 1 }, 422, 'invalid_workflow', "Missing 'workflow' (API-format graph).");
    await refusal(
      { workflow: { nodes: [], links: [] } },
      422,
      'workflow_format_ui',
      'This is a UI-export graph. Export the workflow in API format instead.',
    );
    await refusal(
      { workflow: graph(), webhook_url: 'http://x' },
      422,
      'invalid_workflow',
      "'webhook_url' and 'inputs' are reserved and not accepted.",
    );
    await refusal(
      { workflow: graph(), metadata: 'x'.repeat(1025) },
      422,
      'invalid_request',
      "'metadata' exceeds 1024 UTF-8 bytes.",
    );
    await refusal(
      { workflow: graph(), priority: 2e6 },
      422,
      'invalid_request',
      "'priority' must be between -1000000 and 1000000.",
    );
    await refusal(
      { workflow: graph(), extra_data: { client_id: 'x' } },
      400,
      'invalid_request',
      "'extra_data' accepts only the 'api_key_comfy_org' field.",
    );
    // In the words of the ComfyUI behind the real proxy (v0.33.0, as its kit measured), in v2's envelope.
    const unknownNode = await refusal(
      { workflow: graph({ 3: { class_type: 'NoSuchNode', inputs: {} } }) },
      422,
      'invalid_workflow',
      "Node 'NoSuchNode' not found. The custom node may not be installed.",
    );
    assert.deepEqual(unknownNode.details, { node_errors: {} });
    const missingInput = graph();
    delete missingInput[1].inputs.width;
    const invalid = await refusal(
      { workflow: missingInput },
      422,
      'invalid_workflow',
      'Prompt outputs failed validation',
    );
    assert.deepEqual(invalid.details.node_errors['1'].errors, [
      { type: 'required_input_missing', message: 'Required input is missing', details: 'width' },
    ]);
    await refusal({ workflow: { 1: graph()[1] } }, 422, 'invalid_workflow', 'Prompt has no outputs');
    // JSON that is not an object makes the proxy's handler raise: aiohttp's own 500.
    const notObject = await call(sandbox, 'POST', '/api/v2/jobs', { body: '[]' });
    assert.equal(notObject.status, 500);
    assert.equal(notObject.text, '500 Internal Server Error\n\nServer got itself in trouble');
    assert.equal(sandbox.v2.jobs.size, jobsBefore, 'no refused submit made a job');
  });

  it('walks a job queued → running → succeeded: 1-based positions, the zero progress, outputs', async () => {
    const first = await submit(sandbox, graph(HANG));
    const second = await submit(sandbox, graph());
    const third = await submit(sandbox, graph());
    const running = await settled(sandbox, first.id, 'running');
    assert.deepEqual(running.progress, { value: 0, nodes_done: 0, nodes_total: 0 });
    assert.equal(running.queue_position, null);
    const raw = await call(sandbox, 'GET', `/api/v2/jobs/${first.id}`);
    assert.match(raw.text, /"progress": \{"value": 0\.0, "nodes_done": 0, "nodes_total": 0\}/);
    assert.equal((await statusOf(sandbox, second.id)).queue_position, 1);
    const waiting = await statusOf(sandbox, third.id);
    assert.equal(waiting.status, 'queued');
    assert.equal(waiting.queue_position, 2);
    assert.equal(waiting.progress, null);
    await releaseHang(sandbox);
    const done = await settled(sandbox, third.id, 'succeeded');
    assert.equal(done.queue_position, null);
    assert.equal(done.error, null);
    assert.equal(done.outputs_reused, false);
    assert.equal(done.started_at, null, 'never filled in, as measured');
    assert.equal(done.outputs.length, 1);
    const [output] = done.outputs;
    assert.deepEqual(Object.keys(output), [
      'node_id',
      'name',
      'type',
      'content_type',
      'size_bytes',
      'id',
      'hash',
      'url',
      'url_expires_at',
      'job_id',
    ]);
    assert.equal(output.node_id, '9');
    assert.match(output.name, /^v2probe_.*\.png$/);
    assert.equal(output.type, 'image');
    assert.equal(output.content_type, 'image/png');
    assert.equal(output.size_bytes, 0);
    assert.equal(output.hash, null);
    assert.match(output.id, /^[\w-]+\.[\w-]+$/);
    assert.equal(output.url, `${sandbox.url}/api/v2/assets/${output.id}/content`);
    assert.equal(output.job_id, third.id);
    assert.equal((await statusOf(sandbox, first.id)).status, 'succeeded');
    const workflow = await call(sandbox, 'GET', `/api/v2/jobs/${third.id}/workflow`);
    assert.deepEqual(workflow.json, { workflow: graph(), format: 'api' });
    const unknown = '00000000-0000-4000-8000-000000000000';
    assert.deepEqual((await call(sandbox, 'GET', `/api/v2/jobs/${unknown}`)).json, {
      error: { code: 'not_found', message: `No job ${unknown}.`, details: null },
    });
    assert.equal(
      (await call(sandbox, 'GET', '/api/v2/jobs/not-a-uuid')).json.error.message,
      'No job not-a-uuid.',
    );
  });

  it('reports a failed run with error {code: node_execution_error, message, node_id, class_type, traceback: null}', async () => {
    const job = await submit(
      sandbox,
      graph({ 5: { class_type: 'SandboxFail', inputs: { message: 'cannot identify image file' } } }),
    );
    const failed = await settled(sandbox, job.id, 'failed');
    assert.deepEqual(failed.error, {
      code: 'node_execution_error',
      message: 'cannot identify image file',
      node_id: '5',
      class_type: 'SandboxFail',
      traceback: null,
    });
  });

  it('takes an Idempotency-Key once: reuse is 422, a refused submit frees it, a 503 keeps it', async () => {
    const key = { 'idempotency-key': 'k-1' };
    await submit(sandbox, graph(), { headers: key });
    for (const body of [{ workflow: graph() }, { workflow: graph(), metadata: 'other' }]) {
      const again = await call(sandbox, 'POST', '/api/v2/jobs', { body, headers: key });
      assert.equal(again.status, 422);
      assert.deepEqual(again.json, {
        error: {
          code: 'idempotency_key_reuse',
          message:
            'This Idempotency-Key has already been used. Keys are single-use; poll or list your jobs instead of resubmitting with the same key.',
          details: null,
        },
      });
    }
    for (const value of ['', 'x'.repeat(256)]) {
      const bad = await call(sandbox, 'POST', '/api/v2/jobs', {
        body: { workflow: graph() },
        headers: { 'idempotency-key': value },
      });
      assert.equal(bad.status, 400);
      assert.equal(bad.json.error.message, 'Idempotency-Key must be 1-255 characters.');
    }
    await submit(sandbox, graph(), { headers: { 'idempotency-key': 'x'.repeat(255) } });
    const rejected = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: { workflow: graph({ 3: { class_type: 'NoSuchNode', inputs: {} } }) },
      headers: { 'idempotency-key': 'k-2' },
    });
    assert.equal(rejected.status, 422);
    await submit(sandbox, graph(), { headers: { 'idempotency-key': 'k-2' } });
    sandbox.v2.faults.upstreamReachable = false;
    const unknownOutcome = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: { workflow: graph() },
      headers: { 'idempotency-key': 'k-3' },
    });
    assert.equal(unknownOutcome.status, 503);
    sandbox.v2.faults.upstreamReachable = true;
    const retry = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: { workflow: graph() },
      headers: { 'idempotency-key': 'k-3' },
    });
    assert.equal(retry.status, 422);
    assert.equal(retry.json.error.code, 'idempotency_key_reuse');
  });

  it('lists jobs newest first with limit and status filters, stopping at its scan cap with truncated', async () => {
    const own = await v2Sandbox({ v2: { listScanCap: 4 }, events: { autoRun: false } });
    try {
      const ids = [];
      for (let n = 0; n < 6; n++) ids.push((await submit(own, graph(), { metadata: `n${n}` })).id);
      const three = await call(own, 'GET', '/api/v2/jobs?limit=3');
      assert.equal(three.status, 200);
      assert.deepEqual(Object.keys(three.json), ['jobs', 'truncated']);
      assert.deepEqual(
        three.json.jobs.map((job) => job.metadata),
        ['n5', 'n4', 'n3'],
      );
      assert.equal(three.json.truncated, false);
      assert.deepEqual(
        three.json.jobs.map((job) => job.queue_position),
        [6, 5, 4],
      );
      const all = (await call(own, 'GET', '/api/v2/jobs')).json;
      assert.equal(all.jobs.length, 4, 'the scan stopped at its cap');
      assert.equal(all.truncated, true);
      const none = (await call(own, 'GET', '/api/v2/jobs?status=succeeded,failed')).json;
      assert.deepEqual(none, { jobs: [], truncated: true });
      const queued = (await call(own, 'GET', '/api/v2/jobs?status=queued&limit=2')).json;
      assert.deepEqual(
        queued.jobs.map((job) => job.id),
        [ids[5], ids[4]],
      );
      for (const [query, message] of [
        ['limit=0', "'limit' must be between 1 and 100."],
        ['limit=101', "'limit' must be between 1 and 100."],
        ['limit=x', "'limit' must be an integer."],
        ['status=bogus,queued,alsobad', 'Unknown status filter value(s): alsobad, bogus.'],
      ]) {
        const refused = await call(own, 'GET', `/api/v2/jobs?${query}`);
        assert.equal(refused.status, 400, query);
        assert.deepEqual(refused.json.error, { code: 'invalid_request', message, details: null });
      }
    } finally {
      await own.close();
    }
  });

  it('cancels a waiting job: it leaves the queue and is expired from then on', async () => {
    const running = await submit(sandbox, graph(HANG));
    await settled(sandbox, running.id, 'running');
    const waiting = await submit(sandbox, graph());
    const answer = await call(sandbox, 'POST', `/api/v2/jobs/${waiting.id}/cancel`);
    assert.equal(answer.status, 200);
    assert.equal(answer.json.status, 'expired');
    assert.equal((await statusOf(sandbox, waiting.id)).status, 'expired');
    assert.equal(sandbox.jobs.jobs.has(waiting.id), false, 'the engine dropped it');
    const stream = await openStream(waiting.urls.events);
    await until(() => stream.ended, 'the stream to end');
    assert.deepEqual(
      stream.events().map((frame) => frame.data),
      [{ status: 'expired' }],
    );
    await releaseHang(sandbox);
    await settled(sandbox, running.id, 'succeeded');
    assert.equal((await statusOf(sandbox, waiting.id)).status, 'expired');
  });

  it('cancels a running job: canceling at once, canceled once the run stops; ended or unknown jobs as measured', async () => {
    const job = await submit(sandbox, {
      1: { class_type: 'SandboxSlow', inputs: { ms: 800 } },
      2: { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } },
      9: { class_type: 'SaveImage', inputs: { images: ['2', 0], filename_prefix: 'v2slow' } },
    });
    await settled(sandbox, job.id, 'running');
    await sleep(100);
    const answer = await call(sandbox, 'POST', `/api/v2/jobs/${job.id}/cancel`);
    assert.equal(answer.status, 200);
    assert.equal(answer.json.status, 'canceling');
    assert.deepEqual(answer.json.progress, { value: 0, nodes_done: 0, nodes_total: 0 });
    assert.equal(
      (await statusOf(sandbox, job.id)).status,
      'running',
      'polled running until the interrupt lands',
    );
    const canceled = await settled(sandbox, job.id, 'canceled');
    assert.deepEqual(canceled.outputs, []);
    assert.equal(canceled.error, null);
    const again = await call(sandbox, 'POST', `/api/v2/jobs/${job.id}/cancel`);
    assert.equal(again.status, 200);
    assert.equal(again.json.status, 'canceled', 'an ended job: no-op, its status');
    const unknown = 'b6c1e2a4-0000-4000-8000-000000000000';
    const missing = await call(sandbox, 'POST', `/api/v2/jobs/${unknown}/cancel`);
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.message, `No job ${unknown}.`);
    assert.equal((await call(sandbox, 'POST', '/api/v2/jobs/nope/cancel')).status, 404);
  });

  it('streams events: a snapshot on connect, live progress and previews, the final status, then one output each', async () => {
    const blocker = await submit(sandbox, graph(HANG));
    await settled(sandbox, blocker.id, 'running');
    const running = await openStream(blocker.urls.events);
    assert.equal(running.status, 200);
    assert.equal(running.headers.get('content-type'), 'text/event-stream');
    assert.equal(running.headers.get('cache-control'), 'no-cache');
    assert.equal(running.headers.get('x-accel-buffering'), 'no');
    await until(() => running.frames.length >= 2, 'the running snapshot');
    assert.deepEqual(
      running.frames.slice(0, 2).map(({ event, data }) => ({ event, data })),
      [
        { event: 'status', data: { status: 'running' } },
        { event: 'progress', data: { value: 0, nodes_done: 0, nodes_total: 0 } },
      ],
    );
    assert.match(
      running.raw,
      /^event: status\ndata: \{"status":"running"\}\n\nevent: progress\ndata: \{"value":0\.0,/,
    );
    await until(() => running.frames.some((frame) => frame.comment === 'keepalive'), 'a keepalive comment');

    const job = await submit(sandbox, graph({}, { steps: 3 }));
    const stream = await openStream(job.urls.events);
    await until(() => stream.frames.length >= 1, 'the queued snapshot');
    assert.deepEqual(stream.frames[0].data, { status: 'queued', queue_position: 1 });
    await releaseHang(sandbox);
    await until(() => stream.ended, 'the stream to end');
    const events = stream.events();
    assert.equal(
      events.filter((frame) => frame.event === 'status').length,
      2,
      'no status when it starts running',
    );
    const steps = events.filter(
      (frame) => frame.event === 'progress' && frame.data.steps === 3 && frame.data.nodes_total === 0,
    );
    assert.deepEqual(
      steps.map((frame) => frame.data),
      [1, 2, 3].map((step) => ({
        value: step / 3,
        nodes_done: 0,
        nodes_total: 0,
        current_node: '1',
        step,
        steps: 3,
      })),
    );
    assert.ok(
      events.some((frame) => frame.event === 'progress' && frame.data.nodes_total > 0),
      'progress_state read as nodes done / total',
    );
    const previews = events.filter((frame) => frame.event === 'preview');
    assert.equal(previews.length, 3);
    assert.deepEqual(Object.keys(previews[0].data), ['node_id', 'content_type', 'data_base64']);
    assert.equal(previews[0].data.node_id, '1');
    assert.equal(previews[0].data.content_type, 'image/png');
    assert.equal(Buffer.from(previews[0].data.data_base64, 'base64').subarray(1, 4).toString(), 'PNG');
    const finished = await statusOf(sandbox, job.id);
    assert.deepEqual(events.at(-2).data, { status: 'succeeded' });
    assert.equal(events.at(-1).event, 'output');
    const withoutExpiry = ({ url_expires_at: _, ...item }) => item;
    assert.deepEqual(withoutExpiry(events.at(-1).data), withoutExpiry(finished.outputs[0]));
    assert.equal(/^(id|retry):/m.test(stream.raw), false, 'no id: or retry: lines');
    await until(() => running.ended, 'the blocker stream to end');
    assert.equal(running.events().at(-2).data.status, 'succeeded');

    const late = await openStream(job.urls.events);
    await until(() => late.ended, 'the late stream to end at once');
    assert.deepEqual(
      late.events().map((frame) => frame.event),
      ['status', 'output'],
    );
  });

  it('throttles live progress: at most one per period, the rest dropped', async () => {
    const own = await v2Sandbox({ v2: { throttleMs: 60_000 } });
    try {
      const job = await submit(own, graph({}, { steps: 3 }));
      const stream = await openStream(job.urls.events);
      await until(() => stream.ended, 'the stream to end');
      const events = stream.events();
      const live = events.filter(
        (frame) => frame.event === 'progress' && frame.data.current_node !== undefined,
      );
      assert.equal(live.length, 1, JSON.stringify(events));
      assert.ok(events.filter((frame) => frame.event === 'preview').length <= 1);
      assert.deepEqual(events.at(-2).data, { status: 'succeeded' });
    } finally {
      await own.close();
    }
  });

  it('caps event streams at 8: the 9th is 429 with Retry-After 5, and a gone client keeps its slot until the next write', async () => {
    const own = await v2Sandbox({ v2: { keepaliveMs: 60_000 } });
    try {
      const job = await submit(own, graph(HANG));
      await settled(own, job.id, 'running');
      const streams = [];
      for (let n = 0; n < 8; n++) streams.push(await openStream(job.urls.events));
      await until(() => streams.every((stream) => stream.frames.length >= 2), 'eight snapshots');
      assert.equal(own.v2.counters.streams.open, 8);
      const ninth = await openStream(job.urls.events);
      assert.equal(ninth.status, 429);
      assert.deepEqual(ninth.body, {
        error: {
          code: 'too_many_streams',
          message: 'Maximum concurrent event streams reached; poll GET /jobs/{id} instead.',
          details: null,
        },
      });
      assert.equal(ninth.headers.get('retry-after'), '5');
      assert.equal((await call(own, 'GET', `/api/v2/jobs/${job.id}`)).status, 200, 'polling still answers');
      streams[0].controller.abort();
      await sleep(200);
      assert.equal((await openStream(job.urls.events)).status, 429, 'nothing written yet: the slot is held');
      await releaseHang(own);
      await until(() => streams.slice(1).every((stream) => stream.ended), 'the streams to end with the job');
      await until(() => own.v2.counters.streams.open === 0, 'every slot back');
      assert.equal(own.v2.counters.streams.mostOpen, 8);
      assert.equal(own.v2.counters.streams.refused, 2);
      const after = await openStream(job.urls.events);
      assert.equal(after.status, 200);
    } finally {
      await own.close();
    }
  });

  it('ends streams early on request: closed without a final status, or with a stale `running` one', async () => {
    const job = await submit(sandbox, graph(HANG));
    await settled(sandbox, job.id, 'running');
    const stream = await openStream(job.urls.events);
    await until(() => stream.frames.length >= 2, 'the snapshot');
    assert.equal(sandbox.v2.faults.closeStreams(job.id), 1);
    await until(() => stream.ended, 'the stream to end');
    assert.equal(stream.error, undefined, 'a clean end of the body');
    assert.deepEqual(
      stream.events().filter((frame) => frame.event !== 'progress'),
      [stream.frames[0]],
      'its only status is the snapshot, and no output',
    );
    const stale = await openStream(job.urls.events);
    await until(() => stale.frames.length >= 2, 'the snapshot');
    sandbox.v2.faults.endStreamsStale(1);
    await releaseHang(sandbox);
    await until(() => stale.ended, 'the stale stream to end');
    const statuses = stale.events().filter((frame) => frame.event !== 'progress');
    assert.deepEqual(
      statuses.map((frame) => frame.data),
      [{ status: 'running' }, { status: 'running' }],
      'the last status is running, and no output',
    );
    assert.equal((await settled(sandbox, job.id, 'succeeded')).outputs.length, 1, 'polling has the truth');
  });

  it('takes uploads: BLAKE3-deduplicated, stored as the engine input file, findable by hash, deletable', async () => {
    const bytes = Buffer.from('abc');
    const first = await upload(sandbox, { file_path: 'input/v2probe/up.png' }, { bytes });
    assert.equal(first.status, 201, first.text);
    const asset = first.json;
    assert.match(asset.id, UUID4);
    assert.deepEqual(
      { ...asset, created_at: 'x', url_expires_at: 'x' },
      {
        id: asset.id,
        hash: BLAKE3_ABC,
        size_bytes: 3,
        content_type: 'image/png',
        file_path: 'input/v2probe/up.png',
        created_at: 'x',
        url: `${sandbox.url}/api/v2/assets/${asset.id}/content`,
        url_expires_at: 'x',
        created_new: true,
      },
    );
    assert.match(asset.created_at, ISO);
    assert.deepEqual(sandbox.jobs.files.get('input/v2probe/up.png').content, bytes);
    const again = await upload(sandbox, { file_path: 'input/other/name.png' }, { bytes });
    assert.equal(again.status, 200);
    assert.equal(again.json.id, asset.id);
    assert.equal(again.json.file_path, 'input/v2probe/up.png', 'the first record');
    assert.equal(again.json.created_new, false);
    assert.equal(sandbox.jobs.files.has('input/other/name.png'), false, 'the new name is not written');
    const head = await call(sandbox, 'HEAD', `/api/v2/assets/by-hash/${BLAKE3_ABC}`);
    assert.equal(head.status, 200);
    assert.equal(head.text, '');
    assert.equal(
      (await call(sandbox, 'HEAD', `/api/v2/assets/by-hash/blake3:${'0'.repeat(64)}`)).status,
      404,
    );
    const fromHash = await call(sandbox, 'POST', '/api/v2/assets/from-hash', { body: { hash: BLAKE3_ABC } });
    assert.equal(fromHash.status, 200);
    assert.equal(fromHash.json.created_new, false);
    const noBlob = await call(sandbox, 'POST', '/api/v2/assets/from-hash', { body: { hash: 'blake3:00' } });
    assert.equal(noBlob.status, 404);
    assert.equal(noBlob.json.error.code, 'blob_not_found');
    const record = await call(sandbox, 'GET', `/api/v2/assets/${asset.id}`);
    assert.equal('created_new' in record.json, false);
    assert.equal(record.json.hash, BLAKE3_ABC);

    const long = Buffer.alloc(5000);
    for (let i = 0; i < long.length; i++) long[i] = (i * 7) % 251;
    const checked = await upload(
      sandbox,
      {
        file_path: 'input/v2probe/long.bin',
        expected_hash: BLAKE3_5000.toUpperCase().replace('BLAKE3', 'blake3'),
      },
      { bytes: long, type: 'application/octet-stream' },
    );
    assert.equal(checked.status, 201, checked.text);
    assert.equal(checked.json.hash, BLAKE3_5000);
    const mismatch = await upload(
      sandbox,
      { file_path: 'input/v2probe/x.png', expected_hash: BLAKE3_ABC },
      { bytes: Buffer.from('not abc') },
    );
    assert.equal(mismatch.status, 409);
    assert.deepEqual(mismatch.json.error, {
      code: 'hash_mismatch',
      message: 'Client-declared hash does not match the received bytes.',
      details: null,
    });
    // Other bytes under a taken name: renamed as ComfyUI does; the record keeps the path the client gave.
    const renamed = await upload(
      sandbox,
      { file_path: 'input/v2probe/up.png' },
      { bytes: Buffer.from('xyz') },
    );
    assert.equal(renamed.status, 201);
    assert.equal(renamed.json.file_path, 'input/v2probe/up.png');
    assert.deepEqual(sandbox.jobs.files.get('input/v2probe/up (1).png').content, Buffer.from('xyz'));

    for (const [fields, file, message] of [
      [{}, { bytes }, "Missing 'file_path'."],
      [{ file_path: 'input/v2probe/a.png' }, undefined, "Missing 'file' part."],
      [
        { file_path: 'input/../x.png' },
        { bytes: Buffer.from('q') },
        "file_path must not contain '..': 'input/../x.png'",
      ],
    ]) {
      const refused = await upload(sandbox, fields, file);
      assert.equal(refused.status, 422, message);
      assert.deepEqual(refused.json.error, { code: 'invalid_request', message, details: null });
    }
    const notMultipart = await call(sandbox, 'POST', '/api/v2/assets', { body: { file_path: 'x' } });
    assert.equal(notMultipart.status, 422);
    assert.equal(notMultipart.json.error.message, 'Expected multipart/form-data.');

    const deleted = await call(sandbox, 'DELETE', `/api/v2/assets/${asset.id}`);
    assert.equal(deleted.status, 204);
    assert.equal((await call(sandbox, 'DELETE', `/api/v2/assets/${asset.id}`)).status, 404);
    assert.equal((await call(sandbox, 'GET', `/api/v2/assets/${asset.id}`)).status, 404);
    assert.equal((await call(sandbox, 'HEAD', `/api/v2/assets/by-hash/${BLAKE3_ABC}`)).status, 404);
    const reupload = await upload(sandbox, { file_path: 'input/v2probe/up.png' }, { bytes });
    assert.equal(reupload.status, 201);
    assert.notEqual(reupload.json.id, asset.id);
    assert.equal(reupload.json.created_new, true);
  });

  it('resolves core/ASSET references in a workflow to the stored file name, and refuses unresolvable ones', async () => {
    const bytes = Buffer.from('asset for a workflow');
    const asset = (await upload(sandbox, { file_path: 'input/refs/in.png' }, { bytes })).json;
    const loading = (info) =>
      graph({ 4: { class_type: 'LoadImage', inputs: { image: { __type: 'core/ASSET', info } } } });
    for (const info of [{ id: asset.id }, { hash: asset.hash }]) {
      const job = await submit(sandbox, loading(info));
      const workflow = (await call(sandbox, 'GET', `/api/v2/jobs/${job.id}/workflow`)).json.workflow;
      assert.equal(workflow[4].inputs.image, 'refs/in.png');
      assert.equal(
        sandbox.jobs.jobs.get(job.id).prompt[4].inputs.image,
        'refs/in.png',
        'what the engine got',
      );
    }
    const missing = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: {
        workflow: graph({
          4: { class_type: 'LoadImage', inputs: { image: { __type: 'core/ASSET', info: { id: 'nope' } } } },
        }),
      },
    });
    assert.equal(missing.status, 422);
    assert.deepEqual(missing.json.error, {
      code: 'missing_asset',
      message: 'Unresolvable core/ASSET reference(s): nope',
      details: { missing_ids: ['nope'] },
    });
  });

  it('serves content of outputs and uploads with its length, Accept-Ranges, and 206 for a Range', async () => {
    const job = await submit(sandbox, graph());
    const [output] = (await settled(sandbox, job.id, 'succeeded')).outputs;
    const stored = sandbox.jobs.files.get(`output//${output.name}`).content;
    const whole = await fetch(output.url, { headers: AUTH });
    assert.equal(whole.status, 200);
    assert.equal(whole.headers.get('content-type'), 'image/png');
    assert.equal(whole.headers.get('content-length'), String(stored.length));
    assert.equal(whole.headers.get('accept-ranges'), 'bytes');
    assert.deepEqual(Buffer.from(await whole.arrayBuffer()), stored);
    const part = await fetch(output.url, { headers: { ...AUTH, range: 'bytes=0-15' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), `bytes 0-15/${stored.length}`);
    assert.deepEqual(Buffer.from(await part.arrayBuffer()), stored.subarray(0, 16));
    const described = (await call(sandbox, 'GET', `/api/v2/assets/${output.id}`)).json;
    assert.deepEqual(
      { ...described, created_at: 'x', url_expires_at: 'x' },
      {
        id: output.id,
        hash: null,
        size_bytes: 0,
        content_type: 'image/png',
        file_path: output.name,
        created_at: 'x',
        url: output.url,
        url_expires_at: 'x',
        job_id: job.id,
      },
    );

    const bytes = Buffer.from('0123456789abcdef-uploaded');
    const asset = (await upload(sandbox, { file_path: 'input/ranges/r.png' }, { bytes })).json;
    const tail = await fetch(asset.url, { headers: { ...AUTH, range: 'bytes=-5' } });
    assert.equal(tail.status, 206);
    assert.equal(
      tail.headers.get('content-range'),
      `bytes ${bytes.length - 5}-${bytes.length - 1}/${bytes.length}`,
    );
    assert.equal(await tail.text(), 'oaded');
    const from = await fetch(asset.url, { headers: { ...AUTH, range: 'bytes=10-' } });
    assert.equal(await from.text(), 'abcdef-uploaded');
    const beyond = await call(sandbox, 'GET', `/api/v2/assets/${asset.id}/content`, {
      headers: { range: 'bytes=999-' },
    });
    assert.equal(beyond.status, 502, 'ComfyUI 416 reaches the client as an upstream error');
    assert.equal(beyond.json.error.code, 'upstream_error');
    const forged = `${output.id.slice(0, -2)}AA`;
    const unknown = await call(sandbox, 'GET', `/api/v2/assets/${forged}/content`);
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.message, 'Unknown asset id.');
    assert.equal(
      (await call(sandbox, 'DELETE', `/api/v2/assets/${output.id}`)).status,
      404,
      'outputs cannot be deleted',
    );
  });

  it('plays ComfyUI unreachable: 503 upstream_unreachable with the measured messages, health still 200, then as before', async () => {
    const job = await submit(sandbox, graph(HANG));
    await settled(sandbox, job.id, 'running');
    const stream = await openStream(job.urls.events);
    await until(() => stream.frames.length >= 2, 'the snapshot');
    sandbox.v2.faults.upstreamReachable = false;
    await until(() => stream.ended, 'the open stream to end');
    assert.deepEqual(
      stream.events().filter((frame) => frame.event !== 'progress'),
      [stream.frames[0]],
      'it just ends after what it had: no final status',
    );
    assert.equal((await call(sandbox, 'GET', '/api/v2/health', { auth: false })).status, 200);
    const expectations = [
      ['GET', `/api/v2/jobs/${job.id}`, undefined, 'Could not reach ComfyUI.'],
      ['GET', '/api/v2/jobs', undefined, 'Could not reach ComfyUI.'],
      ['GET', `/api/v2/jobs/${job.id}/events`, undefined, 'Could not reach ComfyUI.'],
      ['POST', `/api/v2/jobs/${job.id}/cancel`, undefined, 'Could not reach ComfyUI to cancel.'],
      ['POST', '/api/v2/jobs', { workflow: graph() }, 'Could not reach ComfyUI to submit the job.'],
    ];
    for (const [method, route, body, message] of expectations) {
      const answer = await call(sandbox, method, route, { body });
      assert.equal(answer.status, 503, route);
      assert.deepEqual(answer.json, { error: { code: 'upstream_unreachable', message, details: null } });
    }
    const uploadDown = await upload(
      sandbox,
      { file_path: 'input/down/d.png' },
      { bytes: Buffer.from('down') },
    );
    assert.equal(uploadDown.status, 500);
    assert.equal(uploadDown.json.error.code, 'upstream_error');
    assert.equal(sandbox.jobs.jobs.get(job.id).state, 'in_progress', 'the cancel never reached the engine');
    sandbox.v2.faults.upstreamReachable = true;
    assert.equal((await statusOf(sandbox, job.id)).status, 'running');
    await releaseHang(sandbox);
    await settled(sandbox, job.id, 'succeeded');
  });

  it('plays a submit whose answer is lost: the job exists, the connection is destroyed before the answer', async () => {
    sandbox.v2.faults.loseSubmitAnswers(1);
    await assert.rejects(
      call(sandbox, 'POST', '/api/v2/jobs', {
        body: { workflow: graph(), metadata: 'lost-answer' },
        headers: { 'idempotency-key': 'lost-1' },
      }),
    );
    const listed = (await call(sandbox, 'GET', '/api/v2/jobs?limit=1')).json.jobs[0];
    assert.equal(listed.metadata, 'lost-answer');
    await settled(sandbox, listed.id, 'succeeded');
    const retry = await call(sandbox, 'POST', '/api/v2/jobs', {
      body: { workflow: graph() },
      headers: { 'idempotency-key': 'lost-1' },
    });
    assert.equal(retry.status, 422, 'the key was used by the job that was made');
    assert.equal((await submit(sandbox, graph())).status, 'queued', 'the next answer arrives');
  });

  it('plays a job the engine forgot: expired everywhere, its outputs still downloadable', async () => {
    const job = await submit(sandbox, graph());
    const [output] = (await settled(sandbox, job.id, 'succeeded')).outputs;
    assert.equal(sandbox.v2.faults.forgetJob(job.id), true);
    const forgotten = await statusOf(sandbox, job.id);
    assert.equal(forgotten.status, 'expired');
    assert.deepEqual(forgotten.outputs, []);
    const stream = await openStream(job.urls.events);
    await until(() => stream.ended, 'the stream to end');
    assert.deepEqual(
      stream.events().map((frame) => frame.data),
      [{ status: 'expired' }],
    );
    const cancel = await call(sandbox, 'POST', `/api/v2/jobs/${job.id}/cancel`);
    assert.equal(cancel.status, 200);
    assert.equal(cancel.json.status, 'expired');
    assert.equal((await fetch(output.url, { headers: AUTH })).status, 200);

    const running = await submit(sandbox, graph(HANG));
    await settled(sandbox, running.id, 'running');
    const live = await openStream(running.urls.events);
    await until(() => live.frames.length >= 2, 'the snapshot');
    sandbox.v2.faults.forgetJob(running.id);
    await until(() => live.ended, 'the stream of the forgotten run to end');
    assert.deepEqual(live.events().at(-1).data, { status: 'expired' });
  });

  it('counts requests per route and per job, and streams open now and at most', async () => {
    const own = await v2Sandbox();
    try {
      const job = await submit(own, graph());
      await settled(own, job.id, 'succeeded');
      await call(own, 'GET', `/api/v2/jobs/${job.id}`);
      const stream = await openStream(job.urls.events);
      await until(() => stream.ended, 'the stream to end');
      await call(own, 'GET', '/api/v2/nothing');
      const counters = own.v2.counters;
      assert.equal(counters.route('POST /api/v2/jobs'), 1);
      assert.ok(counters.route('GET /api/v2/jobs/{id}') >= 2);
      assert.equal(counters.route('GET /api/v2/jobs/{id}/events'), 1);
      assert.equal(counters.route('other'), 1);
      assert.equal(
        counters.job(job.id),
        counters.route('GET /api/v2/jobs/{id}') + counters.route('GET /api/v2/jobs/{id}/events'),
      );
      assert.deepEqual(counters.streams, { open: 0, mostOpen: 1, opened: 1, refused: 0 });
      assert.equal(own.counters.count(`/api/v2/jobs/${job.id}/events`), 1, "the server's own counters too");
      counters.reset();
      assert.equal(counters.job(job.id), 0);
      assert.equal(counters.streams.opened, 0);
    } finally {
      await own.close();
    }
  });

  it('starts from the command line with --dialect comfy-api-v2 and the token from the environment', async () => {
    assert.deepEqual(parseCliOptions(['--dialect', 'comfy-api-v2'], { SANDBOX_TOKEN: 't' }), {
      port: 0,
      workflows: 42,
      generationKey: undefined,
      automationKey: undefined,
      dialect: 'comfy-api-v2',
      token: 't',
    });
    assert.throws(
      () => parseCliOptions(['--dialect', 'v3'], {}),
      /--dialect must be one of comfyui, comfy-api-v2/,
    );
    const child = spawn(
      process.execPath,
      [path.join(__dirname, '..', '..', 'dist', 'sandbox', 'cli.js'), '--dialect', 'comfy-api-v2'],
      { env: { ...process.env, SANDBOX_TOKEN: TOKEN }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      let output = '';
      child.stdout.on('data', (data) => (output += data));
      const url = await until(() => /listening at (http:\/\/\S+)/.exec(output)?.[1], 'the sandbox to listen');
      const own = { url };
      assert.equal((await call(own, 'GET', '/api/v2/health', { auth: false })).status, 200);
      assert.equal((await call(own, 'GET', '/api/v2/jobs', { auth: false })).status, 401);
      assert.equal((await call(own, 'GET', '/api/v2/jobs')).status, 200);
      assert.equal((await call(own, 'GET', '/api/prompt')).status, 404);
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGINT');
      await exited;
    }
  });
});
