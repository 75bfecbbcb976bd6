'use strict';
// The readers of a server's answers about jobs, fed hostile values: status words, the error of a failed job,
// a job's lookup over every route, the queue and the list of jobs, who submitted a queued job, the job-events
// memory's store and a whole look of the job-events watcher. Each never throws (never rejects), keeps only
// bounded values (job ids of at most 200 characters, bounded text), and answers "could not read" rather than a
// wrong fact: a status that is not a word never ends a job.
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { phaseOfStatus } = require('../../dist/generation/jobs/status-words');
const { executionError, JobLookup } = require('../../dist/generation/jobs/job-lookup');
const { jobsPageOf, readQueueOwners, readJobsPage } = require('../../dist/generation/jobs/job-list');
const { JobEventMemory, MAX_JOBS } = require('../../dist/generation/jobs/job-event-memory');
const { JobEventTeller, JOB_EVENT_TOPICS } = require('../../dist/generation/jobs/job-event-teller');
const { ServerJobReader } = require('../../dist/generation/jobs/server-job-reader');
const { MAX_JOB_ID_LENGTH } = require('../../dist/generation/jobs/job-ids');

const PHASES = ['pending', 'running', 'completed', 'failed', 'cancelled'];
const TERMINAL = ['completed', 'failed', 'cancelled'];
/** Longer than any key hostileJson makes (12 characters): no hostile object is keyed by it by chance. */
const PROMPT_ID = 'a-job-id-of-twenty-six-chars';

function assertJobId(id) {
  assert.equal(typeof id, 'string');
  assert.ok(id.length > 0 && id.length <= MAX_JOB_ID_LENGTH, `an id of ${id.length} characters kept`);
}

/**
 * Anything but a string or null: what a status must never be read as a word from (history's null status is
 * ComfyUI's own record of a completed run).
 */
const notText = () => hostileJson().filter((value) => typeof value !== 'string' && value !== null);
const word = () =>
  fc.oneof(
    fc.constantFrom(...PROTOTYPE_WORDS, ...PHASES, 'in_progress', 'success', 'interrupted', 'x'.repeat(300)),
    fc.string({ maxLength: 20 }),
  );
const jobId = () =>
  fc.oneof(
    fc.uuid(),
    fc.constantFrom(...PROTOTYPE_WORDS, '', 'x'.repeat(201), 'x'.repeat(100_000)),
    fc.string({ maxLength: 30 }),
    hostileJson(),
  );

/** A list entry of the server's jobs: mostly job-shaped, with hostile fields, or anything at all. */
const listEntry = () =>
  fc.oneof(
    fc.record(
      {
        id: jobId(),
        status: fc.oneof(word(), hostileJson()),
        create_time: fc.oneof(fc.double(), hostileJson()),
      },
      { requiredKeys: ['id', 'status'] },
    ),
    hostileJson(),
  );
const jobsBody = () =>
  fc.oneof(
    fc.record({
      jobs: fc.array(listEntry(), { maxLength: 8 }),
      pagination: fc.oneof(fc.record({ has_more: fc.oneof(fc.boolean(), hostileJson()) }), hostileJson()),
    }),
    hostileJson(),
  );
const queueEntry = () =>
  fc.oneof(
    fc.tuple(fc.oneof(fc.integer(), hostileJson()), jobId(), hostileJson(), hostileJson()),
    fc.record({ prompt_id: jobId(), number: hostileJson(), client_id: hostileJson() }),
    hostileJson(),
  );
const queueBody = () =>
  fc.oneof(
    fc.record({
      queue_running: fc.oneof(fc.array(queueEntry(), { maxLength: 5 }), hostileJson()),
      queue_pending: fc.oneof(fc.array(queueEntry(), { maxLength: 5 }), hostileJson()),
    }),
    hostileJson(),
  );
/** A job's own answer (`/api/jobs/{id}`, the status route, history) with a status given by `status`. */
const jobBody = (status) =>
  fc.oneof(
    fc.record({
      id: jobId(),
      status,
      execution_error: hostileJson(),
      execution_status: fc.oneof(fc.record({ messages: hostileJson() }), hostileJson()),
      outputs: hostileJson(),
      workflow: hostileJson(),
    }),
    fc.record({ [PROMPT_ID]: fc.record({ status: fc.oneof(fc.record({ status_str: status }), status) }) }),
  );

/** An HTTP answer as HttpClient.json gives it: a JSON status and body, a framework's 404 page, or a failure. */
const answerOf = (body) =>
  fc.oneof(
    { weight: 4, arbitrary: body.map((value) => ({ status: 200, body: value, json: true })) },
    fc.constantFrom(
      { status: 404, body: { error: 'not found' }, json: true },
      { status: 404, body: '404: Not Found', json: false },
      { status: 405, body: 'Method Not Allowed', json: false },
      { status: 400, body: { toString: 1 }, json: true },
      { throws: new Error('connection reset') },
      { throws: { toString: 1 } },
    ),
  );

/** A stand-in for HttpClient whose answers come from `answers(path, options)`, read afresh per request. */
function fakeHttp(answers) {
  return {
    async json(path, options = {}) {
      const answer = answers(path, options);
      if (answer.throws !== undefined) throw answer.throws;
      return answer;
    },
  };
}

/** The route a request goes to, as the readers ask for it. */
function routeOf(path) {
  if (path.startsWith('/api/jobs?')) return 'active';
  if (path === '/api/jobs') return 'list';
  if (path === '/api/queue') return 'queue';
  return 'job';
}

describe('job answers (fuzzed)', () => {
  it('a status word maps onto a phase, and a prototype word or a value that is no word is running', () => {
    for (const protoWord of PROTOTYPE_WORDS) assert.equal(phaseOfStatus(protoWord), 'running', protoWord);
    fc.assert(
      fc.property(fc.oneof(word(), hostileJson()), (value) => {
        const phase = phaseOfStatus(value);
        assert.ok(PHASES.includes(phase), String(phase));
        if (typeof value !== 'string') assert.equal(phase, 'running');
      }),
      fuzzOptions(200),
    );
  });

  it("a failed job's error is bounded text, whatever it holds", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          hostileJson(),
          fc.record({
            exception_type: hostileJson(),
            exception_message: hostileJson(),
            traceback: hostileJson(),
          }),
          fc.record({ traceback: fc.array(hostileJson(), { maxLength: 300 }) }),
        ),
        (data) => {
          const error = executionError(data);
          assert.equal(typeof error.exception_type, 'string');
          assert.ok(error.exception_type.length <= 200);
          assert.equal(typeof error.exception_message, 'string');
          assert.ok(error.exception_message.length <= 10_000);
          assert.ok(error.traceback.length <= 200);
          for (const line of error.traceback) assert.ok(typeof line === 'string' && line.length <= 10_000);
        },
      ),
      fuzzOptions(100),
    );
  });

  it('a lookup never rejects, and a status that is not a word never ends a job', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(answerOf(jobBody(notText())), { minLength: 1, maxLength: 6 }),
        answerOf(queueBody()),
        answerOf(jobsBody()),
        async (jobAnswers, queue, active) => {
          let asked = 0;
          const lookup = new JobLookup(
            fakeHttp((path) => {
              const route = routeOf(path);
              if (route === 'queue') return queue;
              if (route === 'active') return active;
              return jobAnswers[asked++ % jobAnswers.length];
            }),
          );
          const answer = await lookup.status(PROMPT_ID);
          assert.ok(['phase', 'unknown', 'unreadable'].includes(answer.kind), answer.kind);
          if (answer.kind === 'unreadable') assert.equal(typeof answer.message, 'string');
          if (answer.kind !== 'phase') return;
          assert.ok(!TERMINAL.includes(answer.phase), `${answer.phase} from a status that is no word`);
          assert.ok(answer.word === undefined || answer.word.length <= 100);
          const ended = await lookup.ended(PROMPT_ID);
          assert.ok(['found', 'none', 'unreadable'].includes(ended.kind));
        },
      ),
      fuzzOptions(60),
    );
  });

  it('a lookup of words and values of any kind never rejects and gives a phase, unknown, or unreadable', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(answerOf(jobBody(fc.oneof(word(), hostileJson()))), { minLength: 1, maxLength: 6 }),
        answerOf(queueBody()),
        async (jobAnswers, queue) => {
          let asked = 0;
          const lookup = new JobLookup(
            fakeHttp((path) => (routeOf(path) === 'job' ? jobAnswers[asked++ % jobAnswers.length] : queue)),
          );
          const answer = await lookup.status(PROMPT_ID);
          assert.ok(['phase', 'unknown', 'unreadable'].includes(answer.kind), answer.kind);
          if (answer.kind === 'phase') {
            assert.ok(PHASES.includes(answer.phase));
            if (answer.error) assert.equal(typeof answer.error.exception_message, 'string');
          }
        },
      ),
      fuzzOptions(60),
    );
  });

  it('a queue read keeps only job ids, no more than the answer held, or is unreadable', async () => {
    await fc.assert(
      fc.asyncProperty(answerOf(jobsBody()), answerOf(queueBody()), async (active, queue) => {
        const lookup = new JobLookup(fakeHttp((path) => (routeOf(path) === 'active' ? active : queue)));
        const read = await lookup.queue();
        if (read.kind !== 'read') {
          assert.equal(read.kind, 'unreadable');
          return;
        }
        const lists = [active.body?.jobs, queue.body?.queue_running, queue.body?.queue_pending];
        const held = lists.reduce((sum, list) => sum + (Array.isArray(list) ? list.length : 0), 0);
        assert.ok(read.running.size + read.pending.size <= held);
        for (const id of [...read.running, ...read.pending]) assertJobId(id);
        for (const [id, ahead] of read.ahead) {
          assert.ok(read.pending.has(id));
          assert.ok(Number.isInteger(ahead) && ahead >= 0);
        }
        if (read.dropped) assert.ok(read.dropped.count > 0 && typeof read.dropped.reason === 'string');
      }),
      fuzzOptions(100),
    );
  });

  it('a page of the list of jobs keeps only jobs with job ids, and who submitted a queued job is bounded', async () => {
    await fc.assert(
      fc.asyncProperty(answerOf(jobsBody()), answerOf(queueBody()), async (list, queue) => {
        if (list.body !== undefined) {
          const page = jobsPageOf(list.body);
          if (page) {
            assert.equal(typeof page.hasMore, 'boolean');
            for (const job of page.jobs) {
              assertJobId(job.id);
              assert.ok(PHASES.includes(job.phase));
              assert.ok(job.createdAt === undefined || Number.isFinite(job.createdAt));
            }
          }
        }
        const http = fakeHttp((path) => (routeOf(path) === 'list' ? list : queue));
        const read = await readJobsPage(http, 0, 50);
        assert.ok(['page', 'absent', 'unreadable'].includes(read.kind));
        const owners = await readQueueOwners(http, 1_000_000);
        if (owners.kind !== 'read') return;
        for (const [id, owner] of owners.owners) {
          assertJobId(id);
          assert.ok(owner === undefined || (typeof owner === 'string' && owner.length <= 256));
        }
      }),
      fuzzOptions(100),
    );
  });

  it('the job-events memory reads any store: only job ids, only steps, at most MAX_JOBS', () => {
    const key = fc.oneof(
      fc.constantFrom(...PROTOTYPE_WORDS, 'mark', 'j:', `j:${'x'.repeat(300)}`),
      fc.constantFrom(...PROTOTYPE_WORDS).map((protoWord) => `j:${protoWord}`),
      fc.string({ maxLength: 20 }).map((text) => `j:${text}`),
      fc.string({ maxLength: 20 }),
    );
    const record = fc.oneof(
      fc.record({ s: fc.oneof(fc.constantFrom('q', 'r', 'e', ...PROTOTYPE_WORDS), hostileJson()) }),
      fc.record({ s: fc.constantFrom('q', 'r', 'e'), c: hostileJson(), o: hostileJson(), n: hostileJson() }),
      hostileJson(),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(key, record), { maxLength: 30 }), (entries) => {
        const map = new Map([['mark', { mark: 1, scope: 'cfg' }], ...entries]);
        const store = { entries: () => [...map], set: (k, v) => map.set(k, v), delete: (k) => map.delete(k) };
        const memory = new JobEventMemory(store, 'cfg');
        assert.ok(memory.size <= MAX_JOBS);
        for (const [id, job] of memory.active()) {
          assertJobId(id);
          assert.ok(['queued', 'started'].includes(job.step), String(job.step));
          assert.ok(job.createdAt === undefined || Number.isFinite(job.createdAt));
        }
      }),
      fuzzOptions(100),
    );
  });

  it("a look at a hostile server's jobs never rejects, and tells only job ids and known topics", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            active: answerOf(jobsBody()),
            list: answerOf(jobsBody()),
            queue: answerOf(queueBody()),
            job: answerOf(jobBody(fc.oneof(word(), hostileJson()))),
          }),
          { minLength: 2, maxLength: 3 },
        ),
        fc.constantFrom('all', 'others'),
        async (looks, clients) => {
          let now = looks[0];
          const http = fakeHttp((path) => now[routeOf(path)]);
          const told = [];
          const map = new Map();
          const store = {
            entries: () => [...map],
            set: (k, v) => map.set(k, v),
            delete: (k) => map.delete(k),
          };
          const teller = new JobEventTeller(new JobEventMemory(store, 'cfg'), {
            events: JOB_EVENT_TOPICS,
            clients,
            clientId: 'this-client',
            submittedHere: () => false,
            emit: (event) => told.push(event),
            log: () => {},
          });
          const server = { http, lookup: new JobLookup(http), listBytes: 1_000_000 };
          const limits = { pageSize: 5, maxPages: 2, endsPerRead: 5, endReadsMax: 2, unannouncedPollMs: 1 };
          const reader = new ServerJobReader(server, { teller, limits, log: () => {} });
          const signal = new AbortController().signal;
          for (const look of looks) {
            now = look;
            const outcome = await reader.look(signal);
            assert.ok(['read', 'failed'].includes(outcome.kind));
            if (outcome.kind === 'failed') assert.equal(typeof outcome.trouble.message, 'string');
            teller.fresh = false;
          }
          for (const event of told) {
            assertJobId(event.prompt_id);
            assert.ok(JOB_EVENT_TOPICS.includes(event.topic));
            assert.equal(event.payload.status, event.topic);
          }
          for (const key of map.keys()) if (key !== 'mark') assertJobId(key.slice(2));
        },
      ),
      fuzzOptions(30),
    );
  });
});
