'use strict';
// The REST side of the Comfy API v2 dialect (src/generation/dialects/comfy-api-v2: v2-jobs, v2-files), over
// real HTTP on 127.0.0.1 against a stub that answers as ../shared/peers/comfy-v2/README.md measured the real
// proxy: bearer token, the error envelope, single-use Idempotency-Keys, jobs newest first with `truncated`,
// cancel of a waiting job answering `expired`, assets deduplicated by BLAKE3, content with Range.
const assert = require('node:assert/strict');
const http = require('node:http');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { createBLAKE3 } = require('hash-wasm');
const { HttpClient } = require('../../../../dist/http/client');
const { Credential } = require('../../../../dist/http/auth');
const { V2Jobs, V2_METADATA_PREFIX } = require('../../../../dist/generation/dialects/comfy-api-v2/v2-jobs');
const { V2Lookup } = require('../../../../dist/generation/dialects/comfy-api-v2/v2-lookup');
const { V2Files, blake3Of } = require('../../../../dist/generation/dialects/comfy-api-v2/v2-files');
const { promptIdsOf } = require('../../../../dist/generation/transfer/rest-client');

const TOKEN = 'v2-token-Zq81-secret';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function blake3Hex(bytes) {
  const hasher = await createBLAKE3();
  hasher.init();
  hasher.update(bytes);
  return hasher.digest('hex');
}

/** The parts of a multipart/form-data body: `{name: {filename?, contentType?, data}}`. */
function multipartParts(req, body) {
  const boundary = /boundary=(.+)$/.exec(req.headers['content-type'] ?? '')?.[1];
  const parts = {};
  if (!boundary) return parts;
  const marker = Buffer.from(`--${boundary}`);
  let at = body.indexOf(marker);
  while (at >= 0) {
    const start = at + marker.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(marker, start);
    const part = body.subarray(start + 2, next - 2);
    const split = part.indexOf('\r\n\r\n');
    const head = part.subarray(0, split).toString();
    const name = /name="([^"]*)"/.exec(head)?.[1];
    parts[name] = {
      filename: /filename="([^"]*)"/.exec(head)?.[1],
      contentType: /content-type: (.*)/i.exec(head)?.[1]?.trim(),
      data: part.subarray(split + 4),
    };
    at = next;
  }
  return parts;
}

function envelope(code, message, details = null) {
  return { error: { code, message, details } };
}

/**
 * A v2 server as the real proxy answers. `server.jobs` newest first; `server.hook(req, body, res)` may answer
 * first (true: handled); `server.requests` records every request.
 */
async function startV2() {
  const sockets = new Set();
  const server = {
    jobs: [],
    keys: new Set(),
    assets: new Map(),
    contents: new Map(),
    requests: [],
    hook: () => false,
    url: '',
  };
  const base = () => server.url;
  const jobUrls = (id) => ({
    self: `${base()}/api/v2/jobs/${id}`,
    events: `${base()}/api/v2/jobs/${id}/events`,
    cancel: `${base()}/api/v2/jobs/${id}/cancel`,
  });
  server.addJob = (fields = {}) => {
    const id = fields.id ?? randomUUID();
    const job = {
      id,
      status: 'queued',
      created_at: new Date(Date.now() + server.jobs.length).toISOString(),
      started_at: null,
      completed_at: null,
      expires_at: new Date(Date.now() + 86_400_000).toISOString(),
      queue_position: null,
      progress: null,
      outputs: [],
      error: null,
      outputs_reused: false,
      urls: jobUrls(id),
      ...fields,
    };
    server.jobs.unshift(job);
    return job;
  };
  server.job = (id) => server.jobs.find((job) => job.id === id);
  const send = (res, status, value, headers = {}) => {
    const text = JSON.stringify(value);
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
      ...headers,
    });
    res.end(text);
  };
  const httpServer = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      const url = new URL(req.url, 'http://stub');
      server.requests.push({
        method: req.method,
        path: url.pathname,
        url: req.url,
        headers: req.headers,
        body,
      });
      if (await server.hook(req, body, res, url)) return;
      if (req.headers.authorization !== `Bearer ${TOKEN}`)
        return send(res, 401, envelope('unauthorized', 'Missing or malformed Authorization header.'));
      const route = `${req.method} ${url.pathname}`;
      let match;
      if (route === 'POST /api/v2/jobs') {
        const given = JSON.parse(body.toString());
        const key = req.headers['idempotency-key'];
        if (key !== undefined) {
          if (server.keys.has(key))
            return send(
              res,
              422,
              envelope(
                'idempotency_key_reuse',
                'This Idempotency-Key has already been used. Keys are single-use; poll or list your jobs instead of resubmitting with the same key.',
              ),
            );
          server.keys.add(key);
        }
        const fields = { metadata: given.metadata };
        if (given.metadata === undefined) delete fields.metadata;
        return send(res, 201, server.addJob(fields));
      }
      if (route === 'GET /api/v2/jobs') {
        const limit = Number(url.searchParams.get('limit') ?? 50);
        if (!(limit >= 1 && limit <= 100))
          return send(res, 400, envelope('invalid_request', "'limit' must be between 1 and 100."));
        const wanted = url.searchParams.get('status')?.split(',');
        const jobs = server.jobs.filter((job) => !wanted || wanted.includes(job.status)).slice(0, limit);
        return send(res, 200, { jobs, truncated: false });
      }
      if ((match = /^GET \/api\/v2\/jobs\/([^/]+)$/.exec(route))) {
        const job = server.job(decodeURIComponent(match[1]));
        return job ? send(res, 200, job) : send(res, 404, envelope('not_found', `No job ${match[1]}.`));
      }
      if ((match = /^POST \/api\/v2\/jobs\/([^/]+)\/cancel$/.exec(route))) {
        const job = server.job(decodeURIComponent(match[1]));
        if (!job) return send(res, 404, envelope('not_found', `No job ${match[1]}.`));
        // A waiting job is dropped by ComfyUI, which keeps no history of it: the proxy says `expired`.
        if (job.status === 'queued') Object.assign(job, { status: 'expired', queue_position: null });
        else if (job.status === 'running') job.status = 'canceling';
        return send(res, 200, job);
      }
      if ((match = /^HEAD \/api\/v2\/assets\/by-hash\/(.+)$/.exec(route))) {
        res.writeHead(server.assets.has(decodeURIComponent(match[1])) ? 200 : 404).end();
        return;
      }
      if (route === 'POST /api/v2/assets/from-hash') {
        const asset = server.assets.get(JSON.parse(body.toString()).hash);
        return asset
          ? send(res, 200, { ...asset, created_new: false })
          : send(res, 404, envelope('blob_not_found', 'No blob the caller may mint from.'));
      }
      if (route === 'POST /api/v2/assets') {
        const parts = multipartParts(req, body);
        if (!parts.file) return send(res, 422, envelope('invalid_request', "Missing 'file' part."));
        const hash = `blake3:${await blake3Hex(parts.file.data)}`;
        const expected = parts.expected_hash?.data.toString();
        if (expected && expected !== hash)
          return send(
            res,
            409,
            envelope('hash_mismatch', 'Client-declared hash does not match the received bytes.'),
          );
        const known = server.assets.get(hash);
        if (known) return send(res, 200, { ...known, created_new: false });
        const asset = {
          id: randomUUID(),
          hash,
          size_bytes: parts.file.data.length,
          content_type: parts.file.contentType,
          file_path: parts.file_path?.data.toString(),
          created_at: new Date().toISOString(),
          url: '',
        };
        asset.url = `${base()}/api/v2/assets/${asset.id}/content`;
        server.assets.set(hash, asset);
        server.contents.set(asset.id, parts.file.data);
        return send(res, 201, { ...asset, created_new: true });
      }
      if ((match = /^GET \/api\/v2\/assets\/([^/]+)\/content$/.exec(route))) {
        const bytes = server.contents.get(decodeURIComponent(match[1]));
        if (!bytes) return send(res, 404, envelope('not_found', 'Unknown asset id.'));
        const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
        const from = range ? Number(range[1]) : 0;
        res.writeHead(range ? 206 : 200, {
          'content-type': 'image/png',
          'content-length': bytes.length - from,
          'accept-ranges': 'bytes',
          ...(range ? { 'content-range': `bytes ${from}-${bytes.length - 1}/${bytes.length}` } : {}),
        });
        res.end(bytes.subarray(from));
        return;
      }
      res.writeHead(404, { 'content-type': 'text/plain' }).end('404: Not Found');
    });
  });
  httpServer.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
  server.url = `http://127.0.0.1:${httpServer.address().port}`;
  server.send = send;
  server.requestsTo = (method, pathname) =>
    server.requests.filter((request) => request.method === method && request.path === pathname);
  server.close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      httpServer.close(() => resolve());
    });
  return server;
}

function clientFor(server) {
  return new HttpClient({
    baseUrl: server.url,
    credential: Credential.from({ scheme: 'bearer', secret: TOKEN }),
    serviceName: 'the generation service',
    retry: { attempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
    totalTimeoutMs: 10_000,
  });
}

const WORKFLOW = {
  1: { class_type: 'EmptyImage', inputs: { width: 64, height: 64, batch_size: 1, color: 0 } },
  9: { class_type: 'SaveImage', inputs: { images: ['1', 0], filename_prefix: 'v2' } },
};
const FAST = { lostAnswerWaitsMs: [10, 10, 10], lostAnswerAskMs: 2000 };

function outputItem(jobId, nodeId, name, fields = {}) {
  const id = `${Buffer.from(JSON.stringify({ j: jobId, f: name, s: '', t: 'output' })).toString('base64url')}.sig`;
  return {
    node_id: nodeId,
    name,
    type: 'image',
    content_type: 'image/png',
    size_bytes: 0,
    id,
    hash: null,
    url: `http://127.0.0.1/api/v2/assets/${id}/content`,
    url_expires_at: new Date().toISOString(),
    job_id: jobId,
    ...fields,
  };
}

describe('Comfy API v2 REST client', () => {
  let server;
  let client;
  beforeEach(async () => {
    server = await startV2();
    client = clientFor(server);
  });
  afterEach(async () => {
    await client.close();
    await server.close();
  });

  describe('submit', () => {
    it('sends the workflow with a fresh Idempotency-Key, the key in its metadata and the bearer token', async () => {
      const jobs = new V2Jobs(client, FAST);
      const first = await jobs.submit(WORKFLOW, { api_key_comfy_org: 'partner' });
      const second = await jobs.submit(WORKFLOW);
      const posts = server.requestsTo('POST', '/api/v2/jobs');
      assert.equal(posts.length, 2);
      const keys = posts.map((post) => post.headers['idempotency-key']);
      assert.match(keys[0], UUID);
      assert.notEqual(keys[0], keys[1]);
      const sent = JSON.parse(posts[0].body.toString());
      assert.deepEqual(sent.workflow, WORKFLOW);
      assert.equal(sent.metadata, `${V2_METADATA_PREFIX}${keys[0]}`);
      assert.ok(Buffer.byteLength(sent.metadata) <= 1024);
      assert.deepEqual(sent.extra_data, { api_key_comfy_org: 'partner' });
      assert.equal(JSON.parse(posts[1].body.toString()).extra_data, undefined);
      assert.equal(posts[0].headers.authorization, `Bearer ${TOKEN}`);
      assert.equal(first.prompt_id, server.jobs[1].id);
      assert.equal(second.prompt_id, server.jobs[0].id);
      assert.equal(first.status, 'queued');
    });

    it('finds a submit whose answer was lost by its key, and never sends it again', async () => {
      let cut = false;
      server.hook = (req, body, res, url) => {
        if (req.method !== 'POST' || url.pathname !== '/api/v2/jobs' || cut) return false;
        cut = true;
        // The job is made, then the connection breaks before the answer.
        server.keys.add(req.headers['idempotency-key']);
        server.addJob({ metadata: JSON.parse(body.toString()).metadata });
        res.socket.destroy();
        return true;
      };
      server.addJob({ status: 'succeeded', metadata: 'someone else' });
      const result = await new V2Jobs(client, FAST).submit(WORKFLOW);
      assert.equal(server.requestsTo('POST', '/api/v2/jobs').length, 1);
      assert.equal(result.prompt_id, server.jobs[0].id);
      assert.ok(server.requestsTo('GET', '/api/v2/jobs').length >= 1);
    });

    it('sends anew, with a new key, a submit two reads said the server does not have', async () => {
      let cut = false;
      server.hook = (req, body, res, url) => {
        if (req.method !== 'POST' || url.pathname !== '/api/v2/jobs' || cut) return false;
        cut = true;
        res.socket.destroy();
        return true;
      };
      const result = await new V2Jobs(client, FAST).submit(WORKFLOW);
      const posts = server.requestsTo('POST', '/api/v2/jobs');
      assert.equal(posts.length, 2);
      assert.notEqual(posts[0].headers['idempotency-key'], posts[1].headers['idempotency-key']);
      assert.equal(server.requestsTo('GET', '/api/v2/jobs').length, 2);
      assert.equal(result.prompt_id, server.jobs[0].id);
      assert.equal(server.jobs.length, 1);
    });

    it('takes a full list without the job for "cannot tell", unless it reaches a job made before the submit', async () => {
      const jobs = new V2Jobs(client, FAST);
      for (let n = 0; n < 150; n++) server.addJob({ status: 'succeeded' });
      let cuts = 0;
      server.hook = (req, body, res, url) => {
        if (req.method !== 'POST' || url.pathname !== '/api/v2/jobs' || cuts >= 1) return false;
        cuts++;
        res.socket.destroy();
        return true;
      };
      // No job of this client's known: a list of the 100 newest cannot say the job is not among the rest.
      await assert.rejects(jobs.submit(WORKFLOW), (error) => {
        assert.equal(error.code, 'network');
        assert.match(error.message, /could not tell whether it took the workflow, so it was not sent again/);
        return true;
      });
      assert.equal(server.requestsTo('POST', '/api/v2/jobs').length, 1);
      // Now a job of its own is known: a list that holds it lists every newer one.
      cuts = 1;
      const made = await jobs.submit(WORKFLOW);
      cuts = 0;
      const again = await jobs.submit(WORKFLOW);
      assert.equal(server.requestsTo('POST', '/api/v2/jobs').length, 4);
      assert.notEqual(again.prompt_id, made.prompt_id);
      assert.equal(server.jobs[0].id, again.prompt_id);
    });

    it('treats a 503 upstream_unreachable on submit as uncertain: looked for, then sent anew with a new key', async () => {
      let down = true;
      server.hook = (req, body, res, url) => {
        if (req.method !== 'POST' || url.pathname !== '/api/v2/jobs' || !down) return false;
        down = false;
        // The proxy keeps the key claimed: the same key again would be refused.
        server.keys.add(req.headers['idempotency-key']);
        server.send(res, 503, envelope('upstream_unreachable', 'Could not reach ComfyUI to submit the job.'));
        return true;
      };
      const result = await new V2Jobs(client, FAST).submit(WORKFLOW);
      const posts = server.requestsTo('POST', '/api/v2/jobs');
      assert.equal(posts.length, 2);
      assert.notEqual(posts[0].headers['idempotency-key'], posts[1].headers['idempotency-key']);
      assert.equal(result.prompt_id, server.jobs[0].id);
    });

    it('fails in a sentence when a lost submit cannot be told (the list cannot be read)', async () => {
      server.hook = (req, body, res, url) => {
        if (url.pathname !== '/api/v2/jobs') return false;
        if (req.method === 'POST') res.socket.destroy();
        else server.send(res, 503, envelope('upstream_unreachable', 'Could not reach ComfyUI.'));
        return true;
      };
      await assert.rejects(new V2Jobs(client, FAST).submit(WORKFLOW), (error) => {
        assert.equal(error.code, 'network');
        assert.match(error.message, /did not answer submitting the workflow/);
        assert.match(error.message, /so it was not sent again: list the jobs/);
        return true;
      });
      assert.equal(server.requestsTo('POST', '/api/v2/jobs').length, 1);
    });

    it('refuses a 422 invalid_workflow as today refuses a 400: the nodes in the sentence, node_errors in cause.body', async () => {
      const nodeErrors = {
        1: {
          errors: [
            {
              type: 'value_smaller_than_min',
              message: 'Value -5 smaller than min of 1',
              details: 'width',
              extra_info: { input_name: 'width' },
            },
          ],
          dependent_outputs: ['9'],
          class_type: 'EmptyImage',
        },
      };
      server.hook = (req, body, res, url) => {
        if (req.method !== 'POST' || url.pathname !== '/api/v2/jobs') return false;
        server.send(
          res,
          422,
          envelope('invalid_workflow', 'Prompt outputs failed validation', { node_errors: nodeErrors }),
        );
        return true;
      };
      await assert.rejects(new V2Jobs(client, FAST).submit(WORKFLOW), (error) => {
        assert.equal(error.code, 'invalid_request');
        assert.match(
          error.message,
          /^the generation service refused the workflow: Prompt outputs failed validation/,
        );
        assert.match(error.message, /node "1" \(EmptyImage\): Value -5 smaller than min of 1 "width"/);
        assert.equal(error.cause.status, 422);
        assert.deepEqual(error.cause.body.node_errors, nodeErrors);
        assert.equal(error.cause.body.error.type, 'invalid_workflow');
        return true;
      });
      assert.equal(server.requestsTo('POST', '/api/v2/jobs').length, 1);
    });

    it('says what the service said for other refusals (409, 413, a UI-format graph)', async () => {
      const answers = [
        [
          422,
          envelope(
            'workflow_format_ui',
            'This is a UI-export graph. Export the workflow in API format instead.',
          ),
        ],
        [409, envelope('conflict', 'It conflicts.')],
        [413, envelope('payload_too_large', 'Upload exceeds 104857600 bytes.')],
      ];
      for (const [status, answer] of answers) {
        server.hook = (req, body, res, url) => {
          if (url.pathname !== '/api/v2/jobs') return false;
          server.send(res, status, answer);
          return true;
        };
        await assert.rejects(new V2Jobs(client, FAST).submit(WORKFLOW), (error) => {
          assert.equal(error.code, 'invalid_request');
          assert.ok(error.message.includes(answer.error.message), error.message);
          assert.equal(error.cause.status, status);
          return true;
        });
      }
    });
  });

  describe('lookups', () => {
    it('reads each status word as the job lives read answers', async () => {
      const lookup = new V2Lookup(client);
      const queued = server.addJob({ status: 'queued', queue_position: 2 });
      const running = server.addJob({
        status: 'running',
        progress: { value: 0, nodes_done: 0, nodes_total: 0 },
      });
      const canceling = server.addJob({ status: 'canceling' });
      const succeeded = server.addJob({ status: 'succeeded' });
      succeeded.outputs = [
        outputItem(succeeded.id, '9', 'v2_00001_.png'),
        outputItem(succeeded.id, '9', 'v2_00002_.png'),
      ];
      const failed = server.addJob({
        status: 'failed',
        error: {
          code: 'node_execution_error',
          message: "cannot identify image file '/x/input/junk.png'\n",
          node_id: '1',
          class_type: 'LoadImage',
          traceback: null,
        },
      });
      const canceled = server.addJob({ status: 'canceled' });
      const expired = server.addJob({ status: 'expired' });
      const novel = server.addJob({ status: 'paused_for_review' });

      assert.deepEqual(await lookup.status(queued.id), { kind: 'phase', phase: 'pending', word: 'queued' });
      assert.deepEqual(await lookup.status(running.id), { kind: 'phase', phase: 'running', word: 'running' });
      assert.deepEqual(await lookup.status(canceling.id), {
        kind: 'phase',
        phase: 'running',
        word: 'canceling',
      });
      const done = await lookup.status(succeeded.id);
      assert.equal(done.phase, 'completed');
      assert.deepEqual(done.outputs, {
        9: {
          images: [
            {
              filename: 'v2_00001_.png',
              subfolder: '',
              type: 'output',
              asset_id: succeeded.outputs[0].id,
              content_type: 'image/png',
            },
            {
              filename: 'v2_00002_.png',
              subfolder: '',
              type: 'output',
              asset_id: succeeded.outputs[1].id,
              content_type: 'image/png',
            },
          ],
        },
      });
      const broken = await lookup.status(failed.id);
      assert.equal(broken.phase, 'failed');
      assert.deepEqual(broken.error, {
        exception_type: 'LoadImage',
        exception_message: "cannot identify image file '/x/input/junk.png'\n",
        traceback: [],
      });
      assert.equal((await lookup.status(canceled.id)).phase, 'cancelled');
      assert.deepEqual(await lookup.status(expired.id), { kind: 'unknown' });
      // A word the package does not know never ends a job.
      assert.deepEqual(await lookup.status(novel.id), {
        kind: 'phase',
        phase: 'running',
        word: 'paused_for_review',
      });
      assert.deepEqual(await lookup.status(randomUUID()), { kind: 'unknown' });
      assert.deepEqual(await lookup.status('not-a-uuid/../x'), { kind: 'unknown' });
    });

    it('takes a refused token, a rate limit and a failure for unreadable, never unknown', async () => {
      const lookup = new V2Lookup(client);
      const job = server.addJob({ status: 'running' });
      let answer = [401, envelope('unauthorized', 'Invalid token.')];
      const headers = {};
      server.hook = (req, body, res, url) => {
        if (!url.pathname.startsWith('/api/v2/jobs/')) return false;
        server.send(res, answer[0], answer[1], headers);
        return true;
      };
      const refused = await lookup.status(job.id);
      assert.equal(refused.kind, 'unreadable');
      assert.equal(refused.reason, 'refused');
      assert.match(refused.message, /the bearer token was refused by the generation service \(HTTP 401\)/);

      answer = [429, envelope('rate_limited', 'Slow down.')];
      headers['retry-after'] = '0';
      const limited = await lookup.status(job.id);
      assert.equal(limited.reason, 'rate_limited');
      assert.equal(limited.retryAfterMs, 0);
      // An envelope that names a rate limit is one without Retry-After too (not a lapsed subscription).
      delete headers['retry-after'];
      answer = [429, envelope('too_many_streams', 'Maximum concurrent event streams reached.')];
      assert.equal((await lookup.status(job.id)).reason, 'rate_limited');

      answer = [200, { id: job.id, status: { toString: 'running' } }];
      const notAWord = await lookup.status(job.id);
      assert.equal(notAWord.kind, 'unreadable');
      assert.equal(notAWord.reason, 'failed');

      answer = [503, envelope('upstream_unreachable', 'Could not reach ComfyUI.')];
      const before = server.requests.length;
      const down = await lookup.status(job.id);
      assert.equal(down.kind, 'unreadable');
      assert.equal(down.reason, 'failed');
      assert.match(down.message, /could not reach the server behind it \(HTTP 503\)/);
      // Retried (a network failure, not the job's): the client's three attempts.
      assert.equal(server.requests.length - before, 3);
    });

    it('retries a 503 upstream_unreachable and reads the answer that follows', async () => {
      const lookup = new V2Lookup(client);
      const job = server.addJob({ status: 'succeeded' });
      let failures = 2;
      server.hook = (req, body, res) => {
        if (failures-- <= 0) return false;
        server.send(res, 503, envelope('upstream_unreachable', 'Could not reach ComfyUI.'));
        return true;
      };
      assert.equal((await lookup.status(job.id)).phase, 'completed');
    });

    it('reads the list of jobs as a queue read: running, waiting with the jobs ahead, ended answers', async () => {
      const lookup = new V2Lookup(client);
      const done = server.addJob({ status: 'succeeded' });
      done.outputs = [outputItem(done.id, '9', 'a.png')];
      const failed = server.addJob({
        status: 'failed',
        error: { code: 'node_execution_error', message: 'boom', node_id: '3', class_type: 'KSampler' },
      });
      const gone = server.addJob({ status: 'expired' });
      const cancelled = server.addJob({ status: 'canceled' });
      const second = server.addJob({ status: 'queued', queue_position: 2 });
      const first = server.addJob({ status: 'queued', queue_position: 1 });
      const running = server.addJob({ status: 'running' });
      const stopping = server.addJob({ status: 'canceling' });

      const read = await lookup.queue();
      assert.equal(read.kind, 'read');
      assert.deepEqual([...read.running].sort(), [running.id, stopping.id].sort());
      assert.deepEqual([...read.pending].sort(), [first.id, second.id].sort());
      assert.equal(read.ahead.get(first.id), 2);
      assert.equal(read.ahead.get(second.id), 3);
      assert.equal(read.partial, undefined);
      assert.equal(read.ended.get(done.id).phase, 'completed');
      assert.deepEqual(Object.keys(read.ended.get(done.id).outputs), ['9']);
      assert.equal(read.ended.get(failed.id).error.exception_type, 'KSampler');
      assert.deepEqual(read.ended.get(gone.id), { kind: 'unknown' });
      assert.equal(read.ended.get(cancelled.id).phase, 'cancelled');
      // One page of the newest jobs, all statuses: a list filtered by status costs the proxy a ComfyUI request
      // for every job it knows; the page, one for each job on it. Sized by the jobs awaited (none here: 10).
      assert.deepEqual(
        server.requestsTo('GET', '/api/v2/jobs').map((request) => request.url),
        ['/api/v2/jobs?limit=10'],
      );

      // Given the shared read, a job it names is answered with no request of its own.
      const before = server.requests.length;
      assert.equal((await lookup.status(done.id, undefined, async () => read)).phase, 'completed');
      assert.deepEqual(await lookup.status(gone.id, undefined, async () => read), { kind: 'unknown' });
      assert.equal((await lookup.status(first.id, undefined, async () => read)).phase, 'pending');
      assert.equal(server.requests.length, before);
      // One it does not name is asked about.
      assert.deepEqual(await lookup.status(randomUUID(), undefined, async () => read), { kind: 'unknown' });
      assert.equal(server.requests.length, before + 1);
    });

    it('says a list is only a page when it is full or truncated, and asks a job a full page leaves out by id only after a wait', async () => {
      const lookup = new V2Lookup(client);
      for (let n = 0; n < 30; n++) server.addJob({ status: 'succeeded' });
      const old = server.jobs[29];
      // 5 jobs awaited: a page of 20, full.
      const page = await lookup.queue(undefined, 5);
      assert.equal(server.requests.at(-1).url, '/api/v2/jobs?limit=20');
      assert.equal(page.partial, true);
      // A job a full page does not name is not asked about at once: newer jobs may have pushed it off.
      let before = server.requests.length;
      const answer = await lookup.status(old.id, undefined, async () => page);
      assert.equal(answer.reason, 'unlisted');
      assert.equal(server.requests.length, before);
      // A page large enough for every job: not partial.
      assert.equal((await lookup.queue(undefined, 20)).partial, undefined);
      assert.equal(server.requests.at(-1).url, '/api/v2/jobs?limit=50');
      before = server.requests.length;
      assert.equal((await lookup.status(old.id, undefined, async () => page)).reason, 'unlisted');
      assert.equal(server.requests.length, before);
      server.hook = (req, body, res, url) => {
        if (url.pathname !== '/api/v2/jobs') return false;
        server.send(res, 200, { jobs: server.jobs.slice(0, 10), truncated: true });
        return true;
      };
      assert.equal((await lookup.queue()).partial, true);
      server.hook = (req, body, res, url) => {
        if (url.pathname !== '/api/v2/jobs') return false;
        server.send(res, 200, { jobs: 'none' });
        return true;
      };
      const unreadable = await lookup.queue();
      assert.equal(unreadable.kind, 'unreadable');
    });

    it('reads an ended job: outputs and error found, none once the service forgot it', async () => {
      const lookup = new V2Lookup(client);
      const done = server.addJob({ status: 'succeeded' });
      done.outputs = [
        outputItem(done.id, '9', 'a.png', { type: 'video', name: 'a.mp4', content_type: 'video/mp4' }),
      ];
      const failed = server.addJob({
        status: 'failed',
        error: { code: 'node_execution_error', message: 'boom', node_id: '3', class_type: null },
      });
      const gone = server.addJob({ status: 'expired' });
      const found = await lookup.ended(done.id);
      assert.equal(found.kind, 'found');
      assert.equal(found.outputs['9'].gifs[0].filename, 'a.mp4');
      assert.deepEqual((await lookup.ended(failed.id)).error, {
        exception_type: 'node_execution_error',
        exception_message: 'boom',
        traceback: [],
      });
      assert.deepEqual(await lookup.ended(gone.id), { kind: 'none' });
      assert.deepEqual(await lookup.ended(randomUUID()), { kind: 'none' });
      assert.equal(await lookup.runTimeMs(), undefined);
    });
  });

  describe('cancel and the queue node', () => {
    it('says what a cancel did to each job, from the job it answers', async () => {
      const jobs = new V2Jobs(client, FAST);
      const waiting = server.addJob({ status: 'queued', queue_position: 1 });
      const running = server.addJob({ status: 'running' });
      const done = server.addJob({ status: 'succeeded' });
      const failed = server.addJob({ status: 'failed' });
      const stopped = server.addJob({ status: 'canceled' });
      const stuck = server.addJob({ status: 'running' });
      server.hook = (req, body, res, url) => {
        if (url.pathname !== `/api/v2/jobs/${stuck.id}/cancel`) return false;
        server.send(res, 503, envelope('upstream_unreachable', 'Could not reach ComfyUI to cancel.'));
        return true;
      };
      const unknown = randomUUID();
      const outcome = await jobs.cancel([
        waiting.id,
        running.id,
        done.id,
        failed.id,
        stopped.id,
        unknown,
        stuck.id,
      ]);
      assert.deepEqual(outcome.removed, [waiting.id]);
      assert.deepEqual(outcome.interrupted, [running.id, stopped.id]);
      assert.deepEqual(outcome.notQueued, [done.id, failed.id, unknown]);
      assert.deepEqual(outcome.unconfirmed, [stuck.id]);
      assert.equal(outcome.body[waiting.id].status, 'expired');
      assert.equal(outcome.body[running.id].status, 'canceling');
      // The 503 was retried, as a cancel is safe to repeat.
      assert.equal(server.requestsTo('POST', `/api/v2/jobs/${stuck.id}/cancel`).length, 3);
    });

    it('raises a refused token on cancel', async () => {
      const job = server.addJob({ status: 'running' });
      server.hook = (req, body, res) => {
        server.send(res, 401, envelope('unauthorized', 'Invalid token.'));
        return true;
      };
      await assert.rejects(new V2Jobs(client, FAST).cancel([job.id]), { code: 'unauthorized' });
    });

    it('lists the queue as the queue node shows it: running and waiting ids, waiting in the order they run', async () => {
      server.addJob({ status: 'succeeded' });
      const later = server.addJob({ status: 'queued', queue_position: 2 });
      const next = server.addJob({ status: 'queued', queue_position: 1 });
      const running = server.addJob({ status: 'running' });
      const state = await new V2Jobs(client, FAST).queueState();
      assert.deepEqual(promptIdsOf(state.queue_running), [running.id]);
      assert.deepEqual(promptIdsOf(state.queue_pending), [next.id, later.id]);
      assert.deepEqual(state.queue_pending[0], { prompt_id: next.id, status: 'queued', queue_position: 1 });
      assert.equal(state.truncated, undefined);
      const [request] = server.requestsTo('GET', '/api/v2/jobs');
      assert.equal(new URL(request.url, 'http://x').searchParams.get('status'), 'queued,running,canceling');
    });
  });

  describe('files', () => {
    let dir;
    beforeEach(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'v2-files-'));
    });
    afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

    it('hashes with BLAKE3 (the spec vector for "abc")', async () => {
      assert.equal(
        await blake3Of(Buffer.from('abc')),
        'blake3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85',
      );
      const file = path.join(dir, 'abc.bin');
      fs.writeFileSync(file, 'abc');
      assert.equal(await blake3Of(file), await blake3Of(Buffer.from('abc')));
    });

    it('uploads the bytes once, then sends none when the server has them', async () => {
      const files = new V2Files(client);
      const bytes = Buffer.from(`a picture ${randomUUID()}`);
      const file = path.join(dir, 'cat.png');
      fs.writeFileSync(file, bytes);
      const first = await files.upload({ source: file });
      const posts = server.requestsTo('POST', '/api/v2/assets');
      assert.equal(posts.length, 1);
      const parts = multipartParts(posts[0], posts[0].body);
      assert.deepEqual(parts.file.data, bytes);
      assert.equal(parts.file.filename, 'cat.png');
      assert.equal(parts.file.contentType, 'image/png');
      const hash = `blake3:${await blake3Hex(bytes)}`;
      // In a folder named by the hash: a name taken by other bytes would make ComfyUI store these under another.
      const place = `graph-gen/${hash.slice(7, 23)}/cat.png`;
      assert.equal(parts.file_path.data.toString(), `input/${place}`);
      assert.equal(parts.expected_hash.data.toString(), hash);
      assert.deepEqual(first, {
        name: place,
        subfolder: '',
        type: 'input',
        asset_id: first.asset_id,
        hash,
        file_path: `input/${place}`,
        created_new: true,
      });
      assert.match(first.asset_id, UUID);

      // The same bytes under another name: asked by hash, no bytes sent, the server's record (and name) kept.
      const second = await files.upload({ source: bytes, filename: 'dog.png' });
      assert.equal(server.requestsTo('POST', '/api/v2/assets').length, 1);
      assert.equal(server.requestsTo('HEAD', `/api/v2/assets/by-hash/${hash}`).length, 2);
      assert.equal(JSON.parse(server.requestsTo('POST', '/api/v2/assets/from-hash')[0].body).hash, hash);
      assert.equal(second.asset_id, first.asset_id);
      assert.equal(second.name, place);
      assert.equal(second.created_new, false);
      for (const request of server.requests) assert.equal(request.headers.authorization, `Bearer ${TOKEN}`);
    });

    it('stores in input/<hash> itself when told no subfolder, and names the file as a workflow input takes it', async () => {
      const result = await new V2Files(client, { subfolder: '' }).upload({
        source: Buffer.from('flat'),
        filename: 'flat.png',
      });
      const folder = (await blake3Hex(Buffer.from('flat'))).slice(0, 16);
      const [post] = server.requestsTo('POST', '/api/v2/assets');
      assert.equal(multipartParts(post, post.body).file_path.data.toString(), `input/${folder}/flat.png`);
      assert.equal(result.name, `${folder}/flat.png`);
      assert.equal(result.subfolder, '');
    });

    it('stores a file named with its folders (a file-in node sets msg.filename to a path) under its base name', async () => {
      const files = new V2Files(client);
      const bytes = Buffer.from('from a file-in node');
      const folder = (await blake3Hex(bytes)).slice(0, 16);
      const result = await files.upload({ source: bytes, filename: '/data/pictures/in.png' });
      const [post] = server.requestsTo('POST', '/api/v2/assets');
      const parts = multipartParts(post, post.body);
      assert.equal(parts.file_path.data.toString(), `input/graph-gen/${folder}/in.png`);
      assert.equal(parts.file.filename, 'in.png');
      assert.equal(result.name, `graph-gen/${folder}/in.png`);
      const windows = await files.upload({ source: Buffer.from('w'), filename: 'C:\\pictures\\w.png' });
      assert.match(windows.name, /^graph-gen\/[0-9a-f]{16}\/w\.png$/);
    });

    it('refuses a mask, a name that is no file name and another type in a sentence, sending nothing', async () => {
      const files = new V2Files(client);
      await assert.rejects(
        files.upload({ source: Buffer.from('x'), filename: 'm.png', originalRef: { filename: 'a.png' } }),
        (error) =>
          error.code === 'invalid_input' && /Comfy API v2 has no route for mask uploads/.test(error.message),
      );
      await assert.rejects(files.upload({ source: Buffer.from('x'), filename: 'm.png', mask: true }), {
        code: 'invalid_input',
      });
      for (const filename of ['pictures/..', 'pictures/', '.', 'a\nb.png'])
        await assert.rejects(
          files.upload({ source: Buffer.from('x'), filename }),
          (error) => error.code === 'invalid_input' && /is not a plain file name/.test(error.message),
          JSON.stringify(filename),
        );
      await assert.rejects(files.upload({ source: Buffer.from('x'), filename: 'a.png', type: 'temp' }), {
        code: 'invalid_input',
      });
      await assert.rejects(files.upload({ source: path.join(dir, 'missing.png') }), (error) =>
        /does not exist/.test(error.message),
      );
      assert.equal(server.requests.length, 0);
    });

    it('downloads an output by its asset id, resuming by Range where the transfer broke off', async () => {
      const bytes = Buffer.alloc(300_000);
      for (let n = 0; n < bytes.length; n++) bytes[n] = (n * 7) % 251;
      server.contents.set('out-1.sig', bytes);
      let cuts = 2;
      server.hook = (req, body, res, url) => {
        if (!url.pathname.endsWith('/content') || cuts === 0) return false;
        cuts--;
        const from = Number(/^bytes=(\d+)-$/.exec(req.headers.range ?? '')?.[1] ?? 0);
        res.writeHead(from ? 206 : 200, {
          'content-type': 'image/png',
          'content-length': bytes.length - from,
          ...(from ? { 'content-range': `bytes ${from}-${bytes.length - 1}/${bytes.length}` } : {}),
        });
        res.write(bytes.subarray(from, from + 70_000), () => setTimeout(() => res.socket.destroy(), 20));
        return true;
      };
      const file = await new V2Files(client).openFile({
        filename: 'o.png',
        subfolder: '',
        type: 'output',
        asset_id: 'out-1.sig',
      });
      assert.equal(file.contentLength, bytes.length);
      assert.equal(file.contentType, 'image/png');
      const chunks = [];
      for await (const chunk of file.body) chunks.push(chunk);
      assert.ok(Buffer.concat(chunks).equals(bytes));
      const gets = server.requestsTo('GET', '/api/v2/assets/out-1.sig/content');
      assert.deepEqual(
        gets.map((request) => request.headers.range),
        [undefined, 'bytes=70000-', 'bytes=140000-'],
      );
      assert.equal(gets[1].headers.authorization, `Bearer ${TOKEN}`);
    });

    it('fails in a sentence when the server does not resume from where the transfer broke off', async () => {
      const bytes = Buffer.alloc(200_000, 1);
      server.contents.set('out-2', bytes);
      server.hook = (req, body, res, url) => {
        if (!url.pathname.endsWith('/content')) return false;
        // Range ignored: the whole file again, and cut again.
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': bytes.length });
        res.write(bytes.subarray(0, 50_000), () => setTimeout(() => res.socket.destroy(), 20));
        return true;
      };
      const file = await new V2Files(client).openFile({
        filename: 'o.png',
        subfolder: '',
        type: 'output',
        asset_id: 'out-2',
      });
      await assert.rejects(
        (async () => {
          for await (const chunk of file.body) assert.ok(chunk.length > 0);
        })(),
        (error) => {
          assert.equal(error.code, 'network');
          assert.match(
            error.message,
            /the download of "o.png" broke off after 50000 of 200000 bytes, and the server did not send the rest from there \(HTTP 200/,
          );
          return true;
        },
      );
    });

    it('closes the answer of a download destroyed before it was read', async () => {
      let closed;
      const answerClosed = new Promise((resolve) => (closed = resolve));
      server.hook = (req, body, res, url) => {
        if (!url.pathname.endsWith('/content')) return false;
        res.once('close', closed);
        res.writeHead(200, { 'content-type': 'image/png', 'content-length': 10_000_000 });
        res.write(Buffer.alloc(65_536));
        return true;
      };
      const file = await new V2Files(client).openFile({
        filename: 'big.png',
        subfolder: '',
        type: 'output',
        asset_id: 'big',
      });
      assert.equal(file.contentLength, 10_000_000);
      file.body.destroy();
      await answerClosed;
    });

    it('refuses a file that has no asset id (not made by a v2 server), asking nothing', async () => {
      await assert.rejects(
        new V2Files(client).openFile({ filename: 'x.png', subfolder: '', type: 'output' }),
        (error) =>
          error.code === 'invalid_input' &&
          /this file was not made by a Comfy API v2 server/.test(error.message),
      );
      assert.equal(server.requests.length, 0);
    });
  });

  it('never lets the token into an error message or its cause', async () => {
    server.hook = (req, body, res, url) => {
      const echoed = req.headers.authorization;
      if (url.pathname === '/api/v2/jobs' && req.method === 'POST')
        server.send(
          res,
          422,
          envelope('invalid_workflow', `bad graph for ${echoed}`, {
            node_errors: { [echoed]: { errors: [{ message: echoed }], class_type: echoed } },
          }),
        );
      else if (url.pathname.endsWith('/content'))
        server.send(res, 404, envelope('not_found', `no asset for ${echoed}`));
      else server.send(res, 401, envelope('unauthorized', `Invalid token ${echoed}.`));
      return true;
    };
    const failures = [];
    await new V2Jobs(client, FAST).submit(WORKFLOW).catch((error) => failures.push(error));
    await new V2Jobs(client, FAST).cancel([randomUUID()]).catch((error) => failures.push(error));
    await new V2Jobs(client, FAST).queueState().catch((error) => failures.push(error));
    await new V2Files(client)
      .openFile({ filename: 'o.png', subfolder: '', type: 'output', asset_id: 'a' })
      .catch((error) => failures.push(error));
    await new V2Files(client)
      .upload({ source: Buffer.from('x'), filename: 'x.png' })
      .catch((error) => failures.push(error));
    const unreadable = await new V2Lookup(client).status(randomUUID());
    assert.equal(failures.length, 5);
    for (const failure of [...failures, unreadable]) {
      const shown = `${failure.message} ${JSON.stringify(failure.cause ?? null)} ${String(failure)}`;
      assert.ok(!shown.includes(TOKEN), shown);
    }
    assert.match(failures[0].message, /\*\*\*/);
  });
});
