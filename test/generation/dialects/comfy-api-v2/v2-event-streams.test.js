'use strict';
// The v2 event source (dialects/comfy-api-v2/v2-event-streams.ts) over real HTTP on 127.0.0.1, against a stub
// of comfy-api-proxy's `GET /api/v2/jobs/{id}/events` that writes what the real one was measured to write
// (../shared/peers/comfy-v2/README.md, "Event stream", "Stream cap"): `event: <name>\ndata: <compact JSON>\n\n`
// frames, `: keepalive` comments, the final `status` before the `output` items, 429 `too_many_streams` with
// `Retry-After`, streams that end early; each frame written in pieces cut anywhere (inside a UTF-8 character,
// between CR and LF). What a job's life and the book see: its events in order, "ask now", and streams opened
// only as the server's cap allows, aborted when nobody wants them, with no timer left behind.
const assert = require('node:assert/strict');
const http = require('node:http');
const { setTimeout: delay } = require('node:timers/promises');
const { HttpClient } = require('../../../../dist/http/client');
const { Credential } = require('../../../../dist/http/auth');
const { V2EventStreams } = require('../../../../dist/generation/dialects/comfy-api-v2/v2-event-streams');
const { JobLife } = require('../../../../dist/generation/jobs/job-life');

const TOKEN = 'comfy-v2-test-key-5f0e';
const JPEG = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01]);
const ASSET_ID = 'eyJqIjoiam9iIiwiZiI6ImJpbGQifQ.c2lnbmF0dXJl';

/** One SSE frame as the proxy writes it. */
function frame(event, data) {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** An output item as the proxy sends one (its name has a two-byte character, to be cut in half). */
function outputItem(jobId, name = 'bild_ü_00001_.png') {
  return {
    node_id: '9',
    name,
    type: 'image',
    content_type: 'image/png',
    size_bytes: 0,
    id: ASSET_ID,
    hash: null,
    url: `http://127.0.0.1:8300/api/v2/assets/${ASSET_ID}/content`,
    url_expires_at: '2026-11-27T21:33:51.006331+00:00',
    job_id: jobId,
  };
}

/** A stub of the proxy's event route: each request is a call that the test answers (`stub.answer`). */
class StubV2 {
  constructor() {
    this.calls = [];
    this.answer = (call) => call.open();
    this.server = http.createServer((req, res) => this.onRequest(req, res));
  }

  async listen() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }

  onRequest(req, res) {
    const match = /^\/api\/v2\/jobs\/([^/]+)\/events$/.exec(req.url);
    const call = {
      jobId: match ? decodeURIComponent(match[1]) : undefined,
      path: req.url,
      headers: req.headers,
      at: Date.now(),
      socketClosed: false,
      lastWriteAt: 0,
      open() {
        res.writeHead(200, {
          'content-type': 'text/event-stream',
          'cache-control': 'no-cache',
          'x-accel-buffering': 'no',
        });
        res.flushHeaders();
      },
      /** Writes `text` in pieces cut at the given byte offsets, a moment apart. */
      async send(text, cuts = []) {
        const bytes = Buffer.from(text, 'utf8');
        let start = 0;
        for (const cut of [...cuts, bytes.length]) {
          if (res.destroyed || res.writableEnded) return;
          res.write(bytes.subarray(start, cut));
          call.lastWriteAt = Date.now();
          start = cut;
          if (cut < bytes.length) await delay(5);
        }
      },
      error(status, body, headers = {}) {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify(body));
      },
      end() {
        if (!res.writableEnded) res.end();
      },
    };
    call.closed = new Promise((resolve) =>
      req.socket.once('close', () => {
        call.socketClosed = true;
        resolve();
      }),
    );
    this.calls.push(call);
    Promise.resolve(this.answer(call)).catch(() => undefined);
  }

  callsOf(jobId) {
    return this.calls.filter((call) => call.jobId === jobId);
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** Waits until `condition()` holds, at most `ms`. */
async function until(condition, ms = 5_000, what = 'the condition') {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(10);
  }
}

function listener(progress = true) {
  const events = [];
  return { progress, events, onEvent: (event) => events.push(event) };
}

function timeouts() {
  return process.getActiveResourcesInfo().filter((type) => type === 'Timeout').length;
}

describe('v2 event streams (Comfy API v2)', () => {
  let stub;
  let made;

  /** A source on a client that sends the bearer token; what it asked and logged is recorded. */
  function source(options = {}) {
    const client = new HttpClient({
      baseUrl: stub.url,
      serviceName: 'the v2 test server',
      credential: Credential.from({ scheme: 'bearer', secret: TOKEN }),
      retry: { attempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
    });
    const asked = [];
    const logs = [];
    const streams = new V2EventStreams({
      http: client,
      askNow: (promptId) => asked.push({ promptId, at: Date.now() }),
      log: (level, message) => logs.push({ level, message }),
      ...options,
    });
    made.push({ client, streams, logs });
    return { streams, asked, logs };
  }

  beforeEach(async () => {
    made = [];
    stub = new StubV2();
    await stub.listen();
  });

  afterEach(async () => {
    for (const { client, streams, logs } of made) {
      await streams.close();
      await client.close();
      for (const { message } of logs)
        assert.ok(!message.includes(TOKEN), `the token in a log line: ${message}`);
    }
    await stub.close();
  });

  it("gives a job's life its events in order, and asks for the job once its final status comes", async () => {
    const job = 'a1b2c3d4-0000-4000-8000-000000000001';
    const output = frame('output', outputItem(job));
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
      await call.send(frame('progress', { value: 0.0, nodes_done: 0, nodes_total: 0 }));
      await call.send(
        frame('progress', {
          value: 0.25,
          nodes_done: 0,
          nodes_total: 1,
          current_node: '3',
          step: 5,
          steps: 20,
        }),
        [3, 9, 40],
      );
      await call.send(
        frame('preview', { node_id: '3', content_type: 'image/jpeg', data_base64: JPEG.toString('base64') }),
        [30],
      );
      await call.send(frame('status', { status: 'succeeded' }));
      // Cut inside the ü of the file's name (its two bytes apart), and between the two final LFs.
      const inside = Buffer.from(output).indexOf(Buffer.from('ü')) + 1;
      await call.send(output, [inside, Buffer.byteLength(output) - 1]);
      call.end();
    };
    const { streams, asked } = source();
    // The end is told by asking about the job alone (the book then bypasses its shared list read), not as a
    // queue change: that made every job's end cost a list read of its own.
    const moved = [];
    streams.register({ onQueueStatus: (queue, data) => moved.push({ queue, data }) });
    const shown = [];
    const host = {
      timings: { lostConfirmMs: 2_000, unknownGraceMs: 10_000, unreadableMaxMs: 30_000 },
      check: () => undefined,
      readEnded: () => undefined,
      changed: () => undefined,
      progress: (_life, progress) => shown.push(progress),
      finished: () => assert.fail('the stream ended the job: only REST may'),
      cancelledHere: () => false,
    };
    const life = new JobLife(job, host, true);
    const events = [];
    let seenWhenAsked;
    const streamsAsked = asked.push.bind(asked);
    asked.push = (entry) => {
      seenWhenAsked = events.map((event) => event.type);
      return streamsAsked(entry);
    };
    streams.subscribe(job, {
      progress: true,
      onEvent: (event) => {
        events.push(event);
        life.onEvent(event);
      },
    });
    await until(() => events.length === 5, 5_000, 'five events');
    const [call] = stub.calls;
    assert.equal(call.path, `/api/v2/jobs/${job}/events`);
    assert.equal(call.headers.authorization, `Bearer ${TOKEN}`);
    assert.equal(call.headers.accept, 'text/event-stream');
    assert.deepEqual(
      events.map((event) => event.type),
      ['execution_start', 'progress_state', 'progress', 'preview', 'executed'],
    );
    assert.deepEqual(events[0].data, { prompt_id: job });
    assert.deepEqual(events[1].data, { prompt_id: job, value: 0, nodes_done: 0, nodes_total: 0 });
    assert.deepEqual(events[2].data, { value: 5, max: 20, node: '3', prompt_id: job });
    assert.deepEqual(events[3].frame.image, JPEG);
    assert.equal(events[3].frame.imageType, 'jpeg');
    assert.equal(events[3].frame.metadata.node_id, '3');
    assert.equal(events[4].data.node, '9');
    assert.deepEqual(events[4].data.output, {
      images: [
        {
          filename: 'bild_ü_00001_.png',
          subfolder: '',
          type: 'output',
          asset_id: ASSET_ID,
          content_type: 'image/png',
        },
      ],
    });
    for (const event of events) {
      assert.equal(event.epoch, 1);
      assert.ok(event.bytes > 0, `${event.type} carries its size`);
    }
    // The life runs node 3 at step 5 of 20; its progress output showed each event; nothing ended it.
    assert.equal(life.state, 'running');
    assert.equal(life.node, '3');
    assert.deepEqual(life.step, { value: 5, max: 20 });
    assert.deepEqual(
      shown.map((progress) => progress.topic),
      ['execution_start', 'progress_state', 'progress', 'preview', 'executed'],
    );
    // Asked once, when the final status came (before the outputs that follow it).
    await until(() => call.socketClosed || call.lastWriteAt > 0, 2_000);
    await delay(200);
    assert.deepEqual(
      asked.map((entry) => entry.promptId),
      [job],
    );
    assert.deepEqual(seenWhenAsked, ['execution_start', 'progress_state', 'progress', 'preview']);
    assert.deepEqual(moved, []);
    assert.equal(streams.stats.framesReceived, 6);
    // The job ended: no stream again, no slot held.
    assert.equal(stub.calls.length, 1);
    assert.equal(streams.openStreams, 0);
  });

  it('opens no stream for a listener that does not want progress', async () => {
    const job = 'job-quiet';
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
    };
    const { streams } = source();
    const quiet = listener(false);
    streams.subscribe(job, quiet);
    await delay(300);
    assert.equal(stub.calls.length, 0);
    assert.equal(streams.openStreams, 0);
    // One that wants progress opens it, and every listener of the job hears it.
    const loud = listener(true);
    streams.subscribe(job, loud);
    await until(() => loud.events.length === 1 && quiet.events.length === 1);
    assert.equal(stub.calls.length, 1);
    // When it leaves, nobody wants the stream: it is aborted.
    streams.unsubscribe(job, loud);
    await until(() => stub.calls[0].socketClosed, 2_000, 'the socket to close');
    assert.equal(streams.openStreams, 0);
  });

  it('opens at most 8 streams: the 9th waits, and opens when one ends', async () => {
    const ending = new Map();
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
      ending.set(call.jobId, async () => {
        await call.send(frame('status', { status: 'succeeded' }));
        call.end();
      });
    };
    const { streams, asked } = source();
    const jobs = Array.from({ length: 9 }, (_, index) => `job-cap-${index + 1}`);
    for (const job of jobs) streams.subscribe(job, listener());
    await until(() => stub.calls.length === 8 && ending.size === 8, 5_000, 'eight streams');
    await delay(300);
    assert.equal(stub.calls.length, 8);
    assert.deepEqual(stub.calls.map((call) => call.jobId).sort(), jobs.slice(0, 8).sort());
    assert.equal(streams.openStreams, 8);
    await ending.get('job-cap-3')();
    await until(() => stub.calls.length === 9, 5_000, 'the ninth stream');
    assert.equal(stub.calls[8].jobId, 'job-cap-9');
    assert.ok(asked.some((entry) => entry.promptId === 'job-cap-3'));
    assert.equal(streams.openStreams, 8);
  });

  it("waits out a 429's Retry-After without an error, polling meanwhile, then opens the stream", async () => {
    let answered = 0;
    stub.answer = async (call) => {
      if (answered++ === 0) {
        call.error(
          429,
          {
            error: {
              code: 'too_many_streams',
              message: 'Maximum concurrent event streams reached; poll GET /jobs/{id} instead.',
              details: null,
            },
          },
          { 'retry-after': '1' },
        );
        return;
      }
      call.open();
      await call.send(frame('status', { status: 'running' }));
    };
    const { streams, asked, logs } = source();
    const first = listener();
    const second = listener();
    streams.subscribe('job-busy-a', first);
    await until(() => stub.calls.length === 1);
    await delay(100);
    // Another job wanting a stream meanwhile waits too (the server's slots are taken, whoever asks).
    streams.subscribe('job-busy-b', second);
    await delay(300);
    assert.equal(stub.calls.length, 1);
    await until(() => stub.calls.length === 3, 5_000, 'both streams after the wait');
    const [refused, retried, other] = stub.calls;
    assert.ok(retried.at - refused.at >= 950, `tried again after ${retried.at - refused.at} ms`);
    assert.ok(other.at - refused.at >= 950);
    // The job refused first keeps its place.
    assert.equal(retried.jobId, 'job-busy-a');
    await until(() => first.events.length === 1 && second.events.length === 1);
    assert.equal(first.events[0].type, 'execution_start');
    assert.equal(streams.stats.streamsRefused, 1);
    assert.deepEqual(asked, []);
    assert.deepEqual(
      logs.filter((line) => line.level === 'warn'),
      [],
    );
  });

  it('asks for a job whose stream ended without its final status, and opens another only after a wait', async () => {
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
      await call.send(frame('progress', { value: 0.5, nodes_done: 1, nodes_total: 2, current_node: null }));
      call.end();
    };
    const { streams, asked } = source({ timings: { retryBaseMs: 400 } });
    const heard = listener();
    streams.subscribe('job-early', heard);
    await until(() => stub.calls.length === 3, 5_000, 'three streams');
    const [one, two, three] = stub.calls;
    assert.ok(asked.length >= 2);
    assert.equal(asked[0].promptId, 'job-early');
    assert.ok(asked[0].at - one.at < 1_000);
    // Never a tight loop: about 400 ms, then about 800 (each at least half).
    assert.ok(two.at - one.at >= 200, `second after ${two.at - one.at} ms`);
    assert.ok(three.at - two.at >= 400, `third after ${three.at - two.at} ms`);
    // A new stream's snapshot does not start the job again.
    assert.equal(heard.events.filter((event) => event.type === 'execution_start').length, 1);
    streams.unsubscribe('job-early', heard);
  });

  it('ignores keepalive comments, and reads CRLF frames cut between CR and LF', async () => {
    stub.answer = async (call) => {
      call.open();
      await call.send(': keepalive\r\n\r\n');
      const running = frame('status', { status: 'running' }).replace(/\n/g, '\r\n');
      await call.send(running, [running.indexOf('\r') + 1, running.length - 1]);
      await call.send(': keepalive\n\n');
      await call.send(
        frame('progress', { value: 0, nodes_done: 0, nodes_total: 1, current_node: '1', step: 0, steps: 1 }),
      );
      await call.send(':keepalive\r\r');
    };
    const { streams } = source();
    const heard = listener();
    streams.subscribe('job-keepalive', heard);
    await until(() => heard.events.length === 2);
    await delay(100);
    assert.deepEqual(
      heard.events.map((event) => event.type),
      ['execution_start', 'progress'],
    );
    assert.deepEqual(heard.events[1].data, { value: 0, max: 1, node: '1', prompt_id: 'job-keepalive' });
    assert.equal(streams.stats.framesReceived, 2);
  });

  it('drops a stream idle past the limit and asks for its job; keepalives keep one open', async () => {
    const beats = [];
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
      if (call.jobId === 'job-alive') {
        const beat = setInterval(() => call.send(': keepalive\n\n'), 100);
        beats.push(beat);
        call.closed.then(() => clearInterval(beat));
      }
    };
    const { streams, asked, logs } = source({ timings: { idleMs: 300, retryBaseMs: 60_000 } });
    streams.subscribe('job-idle', listener());
    streams.subscribe('job-alive', listener());
    await until(() => stub.calls.length === 2);
    const idle = stub.callsOf('job-idle')[0];
    const alive = stub.callsOf('job-alive')[0];
    await until(() => idle.socketClosed, 3_000, 'the idle stream to be dropped');
    const quietFor = Date.now() - idle.lastWriteAt;
    assert.ok(quietFor >= 280, `dropped after ${quietFor} ms of quiet`);
    await until(() => asked.length === 1);
    assert.equal(asked[0].promptId, 'job-idle');
    assert.ok(logs.some((line) => /nothing came for/.test(line.message)));
    await delay(500);
    assert.equal(alive.socketClosed, false);
    for (const beat of beats) clearInterval(beat);
  });

  it('aborts the request on unsubscribe and on close, and leaves no timer', async () => {
    // Counted once mocha's own timer for this test is set (after the test's first turn).
    await delay(1);
    const before = timeouts();
    stub.answer = async (call) => {
      if (call.jobId === 'job-down') {
        call.error(503, { error: { code: 'upstream_unreachable', message: 'Could not reach ComfyUI.' } });
        return;
      }
      call.open();
      await call.send(frame('status', { status: 'running' }));
    };
    const { streams, logs } = source({ timings: { retryBaseMs: 30_000 } });
    const first = listener();
    streams.subscribe('job-a', first);
    streams.subscribe('job-b', listener());
    streams.subscribe('job-c', listener());
    // One waiting for its next try (a timer), one behind a 429 would be the same: close clears them.
    streams.subscribe('job-down', listener());
    await until(() => stub.calls.length === 4);
    await until(() => logs.some((line) => /no stream for job job-down/.test(line.message)));
    assert.ok(timeouts() > before, 'the streams and the wait hold timers');
    streams.unsubscribe('job-a', first);
    await until(() => stub.callsOf('job-a')[0].socketClosed, 2_000, 'job-a to close');
    assert.equal(streams.openStreams, 2);
    await streams.close();
    await until(
      () => stub.callsOf('job-b')[0].socketClosed && stub.callsOf('job-c')[0].socketClosed,
      2_000,
      'the streams to close',
    );
    assert.equal(streams.openStreams, 0);
    assert.equal(streams.state, 'closed');
    assert.equal(timeouts(), before, process.getActiveResourcesInfo().join(', '));
    // Nothing opens after close.
    streams.subscribe('job-late', listener());
    await delay(100);
    assert.equal(stub.callsOf('job-late').length, 0);
  });

  it('sends the token and never logs it; a 503 is tried again after growing waits, a 401 never', async () => {
    stub.answer = async (call) => {
      if (call.jobId === 'job-echo') {
        call.open();
        await call.send(frame('status', { status: 'succeeded' }));
        await call.send(frame('output', outputItem(call.jobId, `leak-${TOKEN}.png`)));
        call.end();
      } else if (call.jobId === 'job-503') {
        call.error(503, {
          error: { code: 'upstream_unreachable', message: `Could not reach ComfyUI (token ${TOKEN})` },
        });
      } else call.error(401, { error: { code: 'unauthorized', message: 'Invalid token.', details: null } });
    };
    const { streams, logs } = source({ timings: { retryBaseMs: 200 } });
    const echo = listener();
    streams.subscribe('job-echo', echo);
    await until(() => echo.events.length === 1);
    assert.equal(echo.events[0].type, 'executed');
    assert.ok(!JSON.stringify(echo.events[0].data).includes(TOKEN), 'the token passed on in an event');
    streams.subscribe('job-503', listener());
    await until(() => stub.callsOf('job-503').length === 3, 5_000, 'three tries');
    const [one, two, three] = stub.callsOf('job-503');
    assert.ok(two.at - one.at >= 100, `second try after ${two.at - one.at} ms`);
    assert.ok(three.at - two.at >= 200, `third try after ${three.at - two.at} ms`);
    assert.ok(logs.some((line) => line.message.includes('HTTP 503: Could not reach ComfyUI (token ***)')));
    for (const call of stub.calls) assert.equal(call.headers.authorization, `Bearer ${TOKEN}`);
    // A 401: said once, and no stream is tried again, for this job or any other.
    streams.subscribe('job-401', listener());
    await until(() => logs.some((line) => line.level === 'warn'));
    const tries = stub.calls.length;
    streams.subscribe('job-after', listener());
    await delay(600);
    assert.equal(stub.calls.length, tries);
    assert.equal(stub.callsOf('job-after').length, 0);
    const warnings = logs.filter((line) => line.level === 'warn');
    assert.equal(warnings.length, 1);
    assert.match(
      warnings[0].message,
      /refused the event stream of job job-401 \(HTTP 401: Invalid token\.\)/,
    );
    assert.match(warnings[0].message, /polling/);
  });

  it('asks for a job the server does not know (404), and tries its stream again only after a wait', async () => {
    stub.answer = (call) =>
      call.error(404, { error: { code: 'not_found', message: `No job ${call.jobId}.`, details: null } });
    const { streams, asked } = source({ timings: { retryBaseMs: 400 } });
    streams.subscribe('job-gone', listener());
    await until(() => asked.length === 1);
    assert.equal(asked[0].promptId, 'job-gone');
    await delay(150);
    assert.equal(stub.calls.length, 1);
  });

  it('drops what it cannot read: a bad preview, an output without its id (a lost event), an oversized line', async () => {
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
      await call.send(
        frame('preview', { node_id: '3', content_type: 'image/jpeg', data_base64: '!!not base64' }),
      );
      const withoutId = outputItem(call.jobId);
      delete withoutId.id;
      await call.send(frame('output', withoutId));
      await call.send(`data: ${'x'.repeat(2_000)}\n\n`);
      await call.send(frame('status', { status: 'succeeded' }));
    };
    const { streams, asked, logs } = source({ maxEventBytes: 1_024, timings: { retryBaseMs: 60_000 } });
    const heard = listener();
    streams.subscribe('job-bad', heard);
    await until(() => asked.length === 1);
    await until(() => stub.calls[0].socketClosed, 2_000, 'the unreadable stream to be dropped');
    assert.deepEqual(
      heard.events.map((event) => event.type),
      ['execution_start', 'unreadable_frame'],
    );
    assert.equal(streams.stats.framesDropped, 2);
    assert.ok(logs.some((line) => /unreadable: a line longer than 1024 bytes/.test(line.message)));
  });

  it('tells users it is idle and ready at once, and taps every passing event for watchAll', async () => {
    stub.answer = async (call) => {
      call.open();
      await call.send(frame('status', { status: 'running' }));
    };
    const { streams } = source();
    const states = [];
    const remove = streams.register({ onConnectionState: (state, again) => states.push([state, again]) });
    assert.deepEqual(states, [['idle', false]]);
    assert.equal(await streams.ready(10), true);
    assert.equal(streams.isOpen, false);
    assert.equal(streams.epoch, 1);
    assert.equal(streams.state, 'idle');
    const tapped = [];
    const stopTap = streams.watchAll((promptId, event) => tapped.push([promptId, event.type]));
    streams.subscribe('job-tap', listener());
    await until(() => tapped.length === 1);
    assert.deepEqual(tapped, [['job-tap', 'execution_start']]);
    stopTap();
    remove();
    await streams.close();
    assert.equal(await streams.ready(10), false);
    assert.deepEqual(states, [['idle', false]]);
  });
});
