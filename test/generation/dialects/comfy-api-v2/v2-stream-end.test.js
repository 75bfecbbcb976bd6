'use strict';
// What the real comfy-api-proxy showed about a v2 job's end (test/real-v2, ../shared/peers/comfy-v2/README.md),
// over real HTTP on 127.0.0.1 against a stub that answers as the proxy does: the event stream's final status
// comes a moment after a list read the jobs share; the result must not wait for the next poll (against the real
// proxy it waited 2.3 s in 3 runs of 4), and the check asks about the job alone (one ComfyUI call for the proxy,
// where its list makes one per job). And the streams the server opened are counted.
const assert = require('node:assert/strict');
const http = require('node:http');
const { setTimeout: delay } = require('node:timers/promises');
const { GenerationConnection } = require('../../../../dist/generation/connection');
const { JobTracker } = require('../../../../dist/generation/jobs/job-tracker');

const TOKEN = 'v2-stream-end-token';
const JOB = '6f1c2d3e-0000-4000-8000-00000000a001';
const ASSET_ID = 'eyJqIjoiNmYxYyJ9.c2lnbmF0dXJl';

function frame(event, data) {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The job as the proxy answers it: running, then succeeded with its output. */
function jobBody(url, ended) {
  return {
    id: JOB,
    status: ended ? 'succeeded' : 'running',
    created_at: '2026-11-26T21:33:51.006331+00:00',
    started_at: null,
    completed_at: null,
    queue_position: null,
    progress: ended ? null : { value: 0.0, nodes_done: 0, nodes_total: 0 },
    outputs: ended
      ? [
          {
            node_id: '9',
            name: 'end_00001_.png',
            type: 'image',
            content_type: 'image/png',
            size_bytes: 0,
            id: ASSET_ID,
            hash: null,
            url: `${url}/api/v2/assets/${ASSET_ID}/content`,
            job_id: JOB,
          },
        ]
      : [],
    error: null,
    outputs_reused: false,
  };
}

/** A stub of the proxy's job routes: the list, one job, its event stream (held open until `end()`). */
async function startStub() {
  const stub = { ended: false, requests: [], stream: undefined };
  const server = http.createServer((req, res) => {
    stub.requests.push({ method: req.method, path: req.url, at: Date.now() });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'unauthorized', message: 'Invalid token.', details: null } }));
      return;
    }
    const json = (body) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.url.startsWith('/api/v2/jobs?'))
      return json({ jobs: [jobBody(stub.url, stub.ended)], truncated: false });
    if (req.url === `/api/v2/jobs/${JOB}`) return json(jobBody(stub.url, stub.ended));
    if (req.url === `/api/v2/jobs/${JOB}/events`) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(frame('status', { status: 'running' }));
      res.write(frame('progress', { value: 0.0, nodes_done: 0, nodes_total: 0 }));
      stub.stream = res;
      return undefined;
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('404: Not Found');
    return undefined;
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  stub.url = `http://127.0.0.1:${server.address().port}`;
  /** The job ends: its final status on the stream, then its output, then the stream closes (as the proxy). */
  stub.end = () => {
    stub.ended = true;
    stub.endedAt = Date.now();
    const item = jobBody(stub.url, true).outputs[0];
    stub.stream.write(frame('status', { status: 'succeeded' }));
    stub.stream.end(frame('output', item));
  };
  stub.close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return stub;
}

describe('a v2 job whose event stream says it ended', () => {
  let stub;
  let connection;
  let tracker;

  beforeEach(async () => {
    stub = await startStub();
    connection = new GenerationConnection({
      baseUrl: stub.url,
      dialect: 'comfy-api-v2',
      auth: { scheme: 'bearer', secret: TOKEN },
      partnerKeyField: 'api_key_comfy_org',
    });
    tracker = new JobTracker(connection, {});
  });

  afterEach(async () => {
    tracker.close?.();
    await connection.close();
    await stub.close();
  });

  it('ends its await at once, asking about the job alone, though a shared list read said running a moment before', async () => {
    const topics = [];
    const result = tracker.track(JOB, {
      progress: true,
      onProgress: (progress) => topics.push(progress.topic),
    });
    // The book's first check reads the list (the job runs); the job ends 100 ms after that read.
    const listed = () => stub.requests.filter((request) => request.path.startsWith('/api/v2/jobs?'));
    const deadline = Date.now() + 5_000;
    while (listed().length === 0 || !stub.stream) {
      assert.ok(Date.now() < deadline, 'the first list read and the stream');
      await delay(10);
    }
    await delay(100);
    stub.end();
    const ended = await result;
    const tookMs = Date.now() - stub.endedAt;

    assert.equal(ended.status, 'completed');
    assert.deepEqual(
      ended.files.map((file) => [file.filename, file.asset_id]),
      [['end_00001_.png', ASSET_ID]],
    );
    assert.ok(
      tookMs < 500,
      `the result came ${tookMs} ms after the final status (the next poll is 1 s or more)`,
    );
    const after = stub.requests.filter((request) => request.at >= stub.endedAt);
    assert.deepEqual(
      after.map((request) => `${request.method} ${request.path}`),
      [`GET /api/v2/jobs/${JOB}`],
      'one read of the job alone, no list',
    );
    assert.ok(topics.includes('progress_state'), topics.join(' '));
  });

  it('counts the streams the server opened', async () => {
    const result = tracker.track(JOB, { progress: true, onProgress: () => undefined });
    const events = connection.dialect.events();
    const deadline = Date.now() + 5_000;
    while (!stub.stream) {
      assert.ok(Date.now() < deadline, 'the stream');
      await delay(10);
    }
    await delay(50);
    assert.equal(events.stats.streamsOpened, 1);
    assert.equal(events.openStreams, 1);
    stub.end();
    await result;
    assert.equal(events.stats.streamsOpened, 1, 'one stream for the job');
    assert.equal(events.stats.streamsRefused, 0);
  });
});
