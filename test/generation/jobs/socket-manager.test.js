'use strict';
const assert = require('node:assert/strict');
const net = require('node:net');
const path = require('node:path');
const { fork } = require('node:child_process');
const { startSandbox } = require('../../../dist/sandbox');
const { SocketManager, socketAddress } = require('../../../dist/generation/jobs/socket-manager');
const {
  encodePreview,
  encodeText,
  encodePreviewWithMetadata,
} = require('../../../dist/generation/jobs/frames');
const { KEY, workflow, sleep, until } = require('../../support/sockets');

const fast = { backoffBaseMs: 20, backoffMaxMs: 200, stableMs: 60_000, pingIntervalMs: 30_000, graceMs: 50 };

describe('socket manager', () => {
  let sandbox;
  const managers = [];
  const logs = [];

  function manager(options = {}) {
    const created = new SocketManager({
      baseUrl: sandbox.url,
      apiKey: KEY,
      clientId: `client-${managers.length}`,
      timings: fast,
      logger: (level, message) => logs.push(`${level}: ${message}`),
      ...options,
    });
    managers.push(created);
    return created;
  }

  /**
   * Subscribes `onEvent` to one prompt_id's events (wanting progress-only ones unless told not); returns
   * what unsubscribes it.
   */
  function follow(sockets, promptId, onEvent, { progress = true } = {}) {
    const listener = { onEvent, progress };
    sockets.subscribe(promptId, listener);
    return (options) => sockets.unsubscribe(promptId, listener, options);
  }

  /** Collects every event of one prompt_id. */
  function listen(sockets, promptId) {
    const events = [];
    const unsubscribe = follow(sockets, promptId, (event) => events.push(event));
    return { events, unsubscribe, types: () => events.map((e) => e.type) };
  }

  before(async () => {
    sandbox = await startSandbox({ generationApiKey: KEY, events: { stepDelayMs: 1 } });
  });
  after(async () => {
    await Promise.all(managers.map((m) => m.close()));
    await sandbox.close();
  });
  beforeEach(() => {
    sandbox.faults.clear();
    sandbox.counters.reset();
    sandbox.events.options.concurrency = undefined;
    logs.length = 0;
  });
  afterEach(async () => {
    await Promise.all(managers.splice(0).map((m) => m.close()));
    await until(() => sandbox.counters.socketsOpen === 0, 'the sockets to close');
    for (const line of logs) assert.equal(line.includes(KEY), false, `the key appears in a log: ${line}`);
  });

  it('opens one socket at /ws with clientId and token and announces preview metadata support', async () => {
    const sockets = manager({ clientId: 'abc-123' });
    assert.equal(await sockets.ready(5000), true);
    assert.equal(await sockets.ready(5000), true);
    const [handshake] = sandbox.counters.handshakes;
    assert.equal(handshake.path, '/ws');
    assert.equal(handshake.query.get('clientId'), 'abc-123');
    assert.equal(handshake.query.get('token'), KEY);
    assert.equal(sandbox.counters.socketsOpened, 1);
    const job = sandbox.jobs.submit(workflow(), 'abc-123');
    const { events } = listen(sockets, job.id);
    await until(() => events.some((e) => e.type === 'execution_success'), 'the job to end');
    const previews = events.filter((e) => e.type === 'preview');
    assert.equal(previews.length, 3);
    assert.equal(previews[0].frame.type, 4, 'type-4 previews after feature_flags');
    assert.equal(previews[0].data.prompt_id, job.id);
  });

  it('builds the socket address: ws/wss from http/https, the base path + /ws, clientId, token only with a key', () => {
    assert.equal(
      socketAddress('https://gen.example.com', 'id-1', 'k+y/=!'),
      'wss://gen.example.com/ws?clientId=id-1&token=k%2By%2F%3D%21',
    );
    assert.equal(socketAddress('http://10.0.0.5:8188/', 'id-2'), 'ws://10.0.0.5:8188/ws?clientId=id-2');
    assert.equal(
      socketAddress('https://host/prefix/?x=1#frag', 'id-3', 'key'),
      'wss://host/prefix/ws?clientId=id-3&token=key',
    );
    const token = new URL(socketAddress('https://h', 'c', 'k+y/=!')).searchParams.get('token');
    assert.equal(token, 'k+y/=!', 'the key survives the encoding');
  });

  it('says false within the time when the service cannot be reached', async () => {
    const port = await new Promise((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address();
        probe.close(() => resolve(free));
      });
    });
    const sockets = manager({ baseUrl: `http://127.0.0.1:${port}` });
    const started = Date.now();
    assert.equal(await sockets.ready(300), false);
    assert.ok(Date.now() - started < 1500);
  });

  it('sends each job only its own events, and status and notification to every user', async () => {
    const sockets = manager();
    const queue = [];
    const notes = [];
    const leave = sockets.register({
      onQueueStatus: (n) => queue.push(n),
      onNotification: (t) => notes.push(t),
    });
    const otherQueue = [];
    const otherNotes = [];
    const leaveOther = sockets.register({
      onQueueStatus: (n) => otherQueue.push(n),
      onNotification: (t) => otherNotes.push(t),
    });
    await sockets.ready(5000);
    const a = sandbox.jobs.submit(workflow({}, { prefix: 'a' }));
    const b = sandbox.jobs.submit(workflow({}, { prefix: 'b' }));
    const la = listen(sockets, a.id);
    const lb = listen(sockets, b.id);
    sandbox.events.broadcast('notification', { value: 'maintenance at noon' });
    await until(
      () => la.types().includes('execution_success') && lb.types().includes('execution_success'),
      'both jobs',
    );
    for (const [listener, job] of [
      [la, a],
      [lb, b],
    ]) {
      assert.ok(listener.events.every((e) => e.data.prompt_id === job.id));
    }
    assert.ok(
      queue.some((n) => typeof n === 'number'),
      'queue counts reach users',
    );
    assert.deepEqual(notes, ['maintenance at noon']);
    assert.deepEqual(otherQueue, queue, 'every user gets every status');
    assert.deepEqual(otherNotes, notes, 'every user gets every notification');
    leave();
    leaveOther();
  });

  it('keeps the events of a job nobody awaits yet and replays them in order', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    // Another job's await wants progress: progress-only frames are read, and kept for this job too.
    listen(sockets, 'another job');
    const job = sandbox.jobs.submit(workflow());
    await until(() => job.state === 'completed', 'the job to end');
    await sleep(30);
    const { types } = listen(sockets, job.id);
    // As a real server: a progress_state before and after each node, and one per sampler step.
    assert.deepEqual(types(), [
      'execution_start',
      'execution_cached',
      'progress_state',
      'executing',
      'progress_state',
      'progress_state',
      'executing',
      'progress',
      'progress_state',
      'preview',
      'progress',
      'progress_state',
      'preview',
      'progress',
      'progress_state',
      'preview',
      'progress_state',
      'progress_state',
      'executing',
      'executed',
      'progress_state',
      'execution_success',
      'executing',
    ]);
  });

  it('bounds what it keeps: events per job, number of jobs, age', async () => {
    const sockets = manager({ limits: { eventsPerJob: 5, jobs: 3, maxAgeMs: 60_000 } });
    await sockets.ready(5000);
    // An await of another job wants progress: every progress frame is read (none thinned), and kept.
    follow(sockets, 'another-job', () => undefined, { progress: true });
    for (let i = 0; i < 5; i++)
      sandbox.events.sendRaw(
        JSON.stringify({ type: 'executing', data: { node: String(i), prompt_id: `kept-${i}` } }),
      );
    const many = Array.from({ length: 9 }, (_, i) => ({
      type: 'progress',
      data: { value: i, max: 9, prompt_id: 'kept-4' },
    }));
    for (const event of many) sandbox.events.sendRaw(JSON.stringify(event));
    sandbox.events.sendRaw(JSON.stringify({ type: 'execution_success', data: { prompt_id: 'kept-4' } }));
    await until(() => sockets.stats.framesReceived >= 16, 'the frames');
    assert.equal(sockets.keptJobs, 3, 'only the newest three jobs are kept');
    assert.deepEqual(listen(sockets, 'kept-0').events, [], 'the oldest job was dropped');
    const kept = listen(sockets, 'kept-4').types();
    assert.equal(kept.length, 5);
    assert.equal(kept[0], 'executing', 'progress is dropped first');
    assert.equal(kept.at(-1), 'execution_success', 'the end is kept');

    const aged = manager({ limits: { maxAgeMs: 30 } });
    await aged.ready(5000);
    sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: '1', prompt_id: 'old' } }));
    await sleep(60);
    sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: '1', prompt_id: 'new' } }));
    await until(() => aged.keptJobs >= 1 && aged.stats.framesReceived >= 3, 'the frames');
    await sleep(20);
    assert.deepEqual(listen(aged, 'old').events, [], 'an old kept job was dropped');
  });

  it('reads a flood of frames a turn of the event loop at a time: what waits for the next turn is not held up behind it', async () => {
    // The flood comes from another process, as a server's does, so it arrives while this one reads.
    const total = 30_000;
    const server = fork(path.join(__dirname, '..', '..', 'support', 'flood-server.js'), [String(total)]);
    const port = await new Promise((resolve) => server.once('message', resolve));
    try {
      const sockets = manager({ baseUrl: `http://127.0.0.1:${port}` });
      let received = 0;
      let lastTurn = 0;
      let mostInOneTurn = 0;
      // Node-RED delivers the msgs a node sends on the next turn (setImmediate), and timers run then too.
      const turn = () => {
        mostInOneTurn = Math.max(mostInOneTurn, received - lastTurn);
        lastTurn = received;
        if (received < total) setImmediate(turn);
      };
      follow(sockets, 'flood', () => {
        received += 1;
        // A reader slower than the server (a flow's work per event): the frames pile up in the socket.
        const busyUntil = process.hrtime.bigint() + 20_000n;
        while (process.hrtime.bigint() < busyUntil);
        if (received === 1) setImmediate(turn);
      });
      await until(() => received === total, 'every frame of the flood', 20_000);
      // A pause's worth (FRAMES_PER_TURN, then the rest of the chunk being parsed) per turn, not thousands.
      assert.ok(mostInOneTurn < 2500, `${mostInOneTurn} of ${total} frames were read in one turn`);
      assert.equal(sockets.stats.framesDropped, 0);
    } finally {
      server.kill();
    }
  });

  it('bounds the bytes it keeps for jobs nobody awaits, text and binary, the oldest jobs making room', async () => {
    const sockets = manager({ limits: { keptBytes: 2000 } });
    await sockets.ready(5000);
    // A user whose jobs want progress: previews are read and kept.
    sockets.register({ progress: true });
    const preview = (id) => encodePreviewWithMetadata({ prompt_id: id }, Buffer.alloc(400, 1));
    const start = (id) => JSON.stringify({ type: 'execution_start', data: { prompt_id: id } });
    sandbox.events.sendRaw(start('old'));
    sandbox.events.sendRaw(preview('old'));
    sandbox.events.sendRaw(start('big'));
    for (let i = 0; i < 3; i++) sandbox.events.sendRaw(preview('big'));
    sandbox.events.sendRaw(
      JSON.stringify({ type: 'progress', data: { prompt_id: 'big', text: 'x'.repeat(900) } }),
    );
    await until(() => sockets.stats.framesReceived >= 8, 'the frames');
    assert.ok(sockets.keptBytes <= 2000, `${sockets.keptBytes} bytes kept`);
    assert.equal(sockets.isKept('old'), false, 'the oldest job made room');
    assert.deepEqual(listen(sockets, 'big').types().slice(0, 4), [
      'execution_start',
      'preview',
      'preview',
      'preview',
    ]);
    assert.ok(sockets.stats.bufferedEventsDropped >= 1);
  });

  it('forgets kept jobs past their age on a timer, with no new event to push them out', async () => {
    const sockets = manager({ limits: { maxAgeMs: 50 } });
    await sockets.ready(5000);
    sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: '1', prompt_id: 'stale' } }));
    await until(() => sockets.keptJobs === 1, 'the kept job');
    await until(() => sockets.keptJobs === 0, 'the kept job to be forgotten', 3000);
    assert.equal(sockets.keptBytes, 0);
  });

  it('skips progress-only frames unread while no await wants progress, and reads them again once one does', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    const quiet = sandbox.jobs.submit(workflow());
    const events = [];
    const unsubscribe = follow(sockets, quiet.id, (event) => events.push(event.type), { progress: false });
    await until(() => quiet.state === 'completed' && events.includes('execution_success'), 'the job to end');
    await sleep(30);
    // Its three progress frames (1 ms apart) are read at most one per 100 ms: the first, for the step the
    // await node's status shows.
    const steps = events.filter((type) => type === 'progress').length;
    assert.ok(steps >= 1 && steps <= 3, `${steps} progress events`);
    assert.deepEqual(
      events.filter((type) => type !== 'progress'),
      [
        'execution_start',
        'execution_cached',
        'executing',
        'executing',
        'executing',
        'executed',
        'execution_success',
        'executing',
      ],
    );
    assert.equal(events.indexOf('progress'), 4, 'the first step is read, in its place');
    // Three nodes, three steps: nine progress_state frames and three previews, none parsed; the steps not read.
    const skipped = 12 + (3 - steps);
    assert.equal(sockets.stats.progressFramesSkipped, skipped);
    assert.equal(sockets.stats.framesDropped, 0);
    unsubscribe({ ended: true });

    // An await that wants progress: the next job's previews and step states reach it.
    const watched = sandbox.jobs.submit(workflow());
    const { types } = listen(sockets, watched.id);
    await until(() => types().includes('execution_success'), 'the second job to end');
    assert.equal(types().filter((type) => type === 'preview').length, 3);
    assert.equal(types().filter((type) => type === 'progress_state').length, 9);
    assert.equal(types().filter((type) => type === 'progress').length, 3);
    assert.equal(sockets.stats.progressFramesSkipped, skipped);
  });

  it('replays kept events to every await of a job, the same events; they go when the last await leaves', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    const send = (type, data = {}) =>
      sandbox.events.sendRaw(JSON.stringify({ type, data: { prompt_id: 'twice', ...data } }));
    send('execution_start');
    send('executed', { node: '9', output: { images: [{ filename: 'a.png' }] } });
    await until(() => sockets.keptJobs === 1 && sockets.stats.framesReceived >= 3, 'the kept events');
    const first = listen(sockets, 'twice');
    send('executed', { node: '9', output: { images: [{ filename: 'b.png' }] } });
    send('execution_success');
    await until(() => first.events.length === 4, 'the live events');
    const second = listen(sockets, 'twice');
    assert.deepEqual(second.types(), first.types());
    assert.deepEqual(
      second.events.map((event) => event.data.output?.images?.[0]?.filename),
      first.events.map((event) => event.data.output?.images?.[0]?.filename),
    );
    first.unsubscribe();
    assert.equal(sockets.isKept('twice'), true, 'kept while one await is left');
    second.unsubscribe({ ended: true });
    assert.equal(sockets.isKept('twice'), false);
    assert.equal(sockets.keptBytes, 0);
  });

  it('a listener that throws during the replay does not escape subscribe, and gets live events after', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    sandbox.events.sendRaw(JSON.stringify({ type: 'execution_start', data: { prompt_id: 'throws' } }));
    await until(() => sockets.keptJobs === 1, 'the kept event');
    const seen = [];
    let unsubscribe;
    assert.doesNotThrow(() => {
      unsubscribe = follow(sockets, 'throws', (event) => {
        seen.push(event.type);
        throw new Error('listener bug');
      });
    });
    sandbox.events.sendRaw(JSON.stringify({ type: 'execution_success', data: { prompt_id: 'throws' } }));
    await until(() => seen.length === 2, 'the live event');
    assert.deepEqual(seen, ['execution_start', 'execution_success']);
    assert.ok(logs.some((line) => /a listener failed: listener bug/.test(line)));
    unsubscribe();
  });

  it('drops prompt-less previews while two jobs execute at once, counting them', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    const a = listen(sockets, 'job-a');
    const b = listen(sockets, 'job-b');
    const start = (id) => JSON.stringify({ type: 'execution_start', data: { prompt_id: id } });
    sandbox.events.sendRaw(start('job-a'));
    sandbox.events.sendRaw(start('job-b'));
    sandbox.events.sendRaw(encodePreview('png', Buffer.from('89504e47', 'hex')));
    sandbox.events.sendRaw(JSON.stringify({ type: 'execution_success', data: { prompt_id: 'job-a' } }));
    sandbox.events.sendRaw(encodePreview('png', Buffer.from('89504e47', 'hex')));
    await until(() => sockets.stats.framesReceived >= 6, 'the frames');
    assert.deepEqual(a.types(), ['execution_start', 'execution_success']);
    assert.deepEqual(b.types(), ['execution_start', 'preview'], 'only the one running job gets the second');
    assert.equal(sockets.stats.unattributedFrames, 1);
  });

  it('gives prompt-less binary frames (types 1 and 3) to the job that is executing', async () => {
    const sockets = manager();
    await sockets.ready(5000);
    sandbox.events.sendRaw(encodePreview('jpeg', Buffer.from([0xff, 0xd8, 0xff, 1])), 'client-0');
    const { events } = listen(sockets, 'p-exec');
    const other = listen(sockets, 'p-other');
    sandbox.events.sendRaw(JSON.stringify({ type: 'execution_start', data: { prompt_id: 'p-exec' } }));
    sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: '5', prompt_id: 'p-exec' } }));
    sandbox.events.sendRaw(encodePreview('png', Buffer.from('89504e47', 'hex')));
    sandbox.events.sendRaw(encodeText('5', 'step text'));
    sandbox.events.sendRaw(
      encodePreviewWithMetadata({ prompt_id: 'p-other', node_id: '2' }, Buffer.from('89504e47', 'hex')),
    );
    sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: null, prompt_id: 'p-exec' } }));
    sandbox.events.sendRaw(encodePreview('png', Buffer.from('89504e47', 'hex')));
    await until(() => sockets.stats.framesReceived >= 8, 'the frames');
    assert.deepEqual(
      events.map((e) => e.type),
      ['execution_start', 'executing', 'preview', 'text', 'executing'],
    );
    assert.equal(events[2].frame.imageType, 'png');
    assert.equal(events[3].data.text, 'step text');
    assert.equal(events[3].data.node, '5');
    assert.deepEqual(other.types(), ['preview']);
    assert.equal(sockets.stats.framesDropped, 2, 'the previews while nothing executed are dropped');
  });

  it('drops garbage, truncated, oversized and unknown frames with a debug log and stays open', async () => {
    const sockets = manager({ limits: { maxFrameBytes: 4096 } });
    await sockets.ready(5000);
    sockets.register({ progress: true });
    const frames = [
      'not json',
      '[1,2]',
      '{"data":{}}',
      '{"type":"executing","data":"x"}',
      Buffer.from([0, 0, 0, 1]),
      Buffer.from([0, 0, 0, 3, 0, 0, 0, 99, 0x41]),
      Buffer.from([0, 0, 0, 4, 0, 0, 0, 2, 0x7b]),
      Buffer.from([0, 0, 0, 9, 0, 0, 0, 0]),
      encodePreviewWithMetadata({ prompt_id: 'p' }, Buffer.alloc(8192)),
      encodePreviewWithMetadata({ node_id: '1' }, Buffer.from('89504e47', 'hex')),
    ];
    for (const frame of frames) sandbox.events.sendRaw(frame);
    await until(() => sockets.stats.framesReceived >= frames.length + 1, 'the frames');
    assert.equal(sockets.stats.framesDropped, 9);
    assert.equal(sockets.stats.unknownBinaryFrames, 1);
    assert.ok(logs.some((line) => /debug: .*dropped a frame: oversized/.test(line)));
    assert.equal(sockets.state, 'open');
    assert.equal(sandbox.counters.socketsOpened, 1);
    const job = sandbox.jobs.submit(workflow());
    const { types } = listen(sockets, job.id);
    await until(() => types().includes('execution_success'), 'a job after the garbage');
  });

  it('reconnects after a drop, the old socket fully closed before the new one opens', async () => {
    const sockets = manager();
    const states = [];
    sockets.register({
      onConnectionState: (state, reconnected) => states.push(`${state}${reconnected ? '+' : ''}`),
    });
    await sockets.ready(5000);
    const openAtHandshake = [];
    const handshakes = sandbox.counters.handshakes;
    const push = handshakes.push.bind(handshakes);
    handshakes.push = (...seen) => {
      openAtHandshake.push(sandbox.counters.socketsOpen);
      return push(...seen);
    };
    for (let i = 0; i < 3; i++) {
      sandbox.events.dropSockets();
      await until(() => sockets.stats.socketsOpened === i + 2 && sockets.isOpen, 'a reconnect');
    }
    assert.deepEqual(openAtHandshake, [0, 0, 0]);
    assert.deepEqual(
      handshakes.map((h) => h.query.get('clientId')),
      ['client-0', 'client-0', 'client-0', 'client-0'],
      'the same clientId on every reconnect',
    );
    assert.deepEqual(
      states.filter((s) => s.startsWith('open')),
      ['open', 'open+', 'open+', 'open+'],
    );
    assert.ok(states.includes('down'));
    const job = sandbox.jobs.submit(workflow(), 'client-0');
    const { events } = listen(sockets, job.id);
    await until(() => events.some((e) => e.type === 'execution_success'), 'a job on the new socket');
    const previews = events.filter((e) => e.type === 'preview');
    assert.ok(previews.length > 0 && previews.every((e) => e.frame.type === 4), 'feature_flags sent again');
  });

  it('reconnects with full-jitter backoff doubling to the cap, reset after a stable connection', async () => {
    const sockets = manager({
      timings: { ...fast, backoffBaseMs: 20, backoffMaxMs: 100, stableMs: 300 },
    });
    sockets.register({});
    const delays = () =>
      logs
        .map((line) => /reconnecting in (\d+) ms/.exec(line)?.[1])
        .filter(Boolean)
        .map(Number);
    const random = Math.random;
    let draw = 0.999;
    Math.random = () => draw;
    try {
      sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 503, times: 4 });
      assert.equal(await sockets.ready(5000), true);
      assert.deepEqual(delays(), [19, 39, 79, 99], 'a random wait below a ceiling that doubles to the cap');
      // Dropped before it was stable: the backoff goes on from the cap.
      draw = 0.5;
      sandbox.events.dropSockets();
      await until(() => sockets.stats.socketsOpened === 2 && sockets.isOpen, 'a reconnect');
      assert.equal(delays().at(-1), 50, 'half the capped ceiling for a draw of 0.5');
      // Open longer than stableMs: the backoff starts again from the base.
      await sleep(450);
      draw = 0.999;
      sandbox.events.dropSockets();
      await until(() => sockets.stats.socketsOpened === 3 && sockets.isOpen, 'a reconnect');
      assert.equal(delays().at(-1), 19);
    } finally {
      Math.random = random;
    }
  });

  it('closes a socket that answers no ping, then reconnects', async () => {
    const sockets = manager({ timings: { ...fast, pingIntervalMs: 60 } });
    sockets.register({});
    await sockets.ready(5000);
    const deaf = [...sandbox.server.sockets];
    for (const client of deaf) client._socket.pause();
    await until(
      () => sockets.stats.socketsOpened === 2 && sockets.isOpen,
      'a reconnect after a dead socket',
      5000,
    );
    for (const client of deaf) client._socket.resume();
    assert.ok(logs.some((line) => /no pong/.test(line)));
  });

  it('backs off to the cap on a refused key, shows unauthorized and never spins', async () => {
    const sockets = manager({ apiKey: 'wrong-key-123', timings: { ...fast, backoffMaxMs: 30_000 } });
    const states = [];
    const otherStates = [];
    sockets.register({ onConnectionState: (state) => states.push(state) });
    sockets.register({ onConnectionState: (state) => otherStates.push(state) });
    assert.equal(await sockets.ready(2000), false);
    await sleep(600);
    assert.equal(sandbox.counters.handshakes.length, 1, 'one refused handshake, no spinning');
    assert.equal(sockets.state, 'unauthorized');
    assert.ok(states.includes('unauthorized'));
    assert.deepEqual(otherStates, states, 'every user is told');
    assert.equal(await sockets.ready(1000), false, 'ready answers at once while backing off');
    for (const line of logs) assert.equal(line.includes('wrong-key-123'), false, line);

    sandbox.faults.add({ method: 'UPGRADE', path: '/ws', status: 403, times: Infinity });
    const forbidden = manager({ timings: { ...fast, backoffMaxMs: 30_000 } });
    forbidden.register({});
    assert.equal(await forbidden.ready(2000), false);
    assert.equal(forbidden.state, 'unauthorized', 'a 403 handshake is a refusal too');
  });

  it('opens a new socket when it is used while its idle close is still under way', async () => {
    const sockets = manager();
    const leave = sockets.register({});
    await sockets.ready(5000);
    // The server stops reading, so the close handshake hangs until the manager gives up on it.
    const deaf = [...sandbox.server.sockets];
    for (const client of deaf) client._socket.pause();
    try {
      leave();
      await until(() => sockets.state === 'idle', 'the idle close to start');
      const events = [];
      follow(sockets, 'late', (event) => events.push(event.type));
      const waited = sockets.ready(5000);
      await until(() => sockets.isOpen && sockets.stats.socketsOpened === 2, 'a new socket', 5000);
      assert.equal(await waited, true);
      sandbox.events.sendRaw(JSON.stringify({ type: 'executing', data: { node: '1', prompt_id: 'late' } }));
      await until(() => events.length === 1, 'the event on the new socket');
    } finally {
      for (const client of deaf) client._socket.resume();
    }
  });

  it('closes after a grace time when its last user and subscription leave, and opens again on use', async () => {
    const sockets = manager();
    const leave = sockets.register({});
    const unsubscribe = follow(sockets, 'nobody', () => undefined);
    await sockets.ready(5000);
    leave();
    await sleep(100);
    assert.equal(sockets.isOpen, true, 'a subscription keeps it open');
    unsubscribe();
    const leave2 = sockets.register({});
    await sleep(100);
    assert.equal(sockets.isOpen, true, 'a user arriving within the grace time keeps it');
    leave2();
    await until(() => sockets.state === 'idle' && sandbox.counters.socketsOpen === 0, 'the idle close');
    assert.equal(await sockets.ready(5000), true);
    assert.equal(sandbox.counters.socketsOpened, 2);
    await sockets.close();
    assert.equal(sockets.state, 'closed');
    assert.equal(await sockets.ready(100), false);
  });
});
