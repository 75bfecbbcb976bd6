'use strict';
// The job-events reader of Comfy API v2 (dialects/comfy-api-v2/v2-job-watch.ts), fed hostile list and job
// answers over several looks: a look never rejects, tells only job ids and known topics, each step of a job at
// most once; and a look whose list cannot be read tells nothing and changes nothing it remembers (could not read
// is never absent).
const assert = require('node:assert/strict');
const { fc, fuzzOptions, hostileJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { V2JobWatch } = require('../../dist/generation/dialects/comfy-api-v2/v2-job-watch');
const { V2Lookup } = require('../../dist/generation/dialects/comfy-api-v2/v2-lookup');
const { JobEventMemory } = require('../../dist/generation/jobs/job-event-memory');
const { JobEventTeller, JOB_EVENT_TOPICS } = require('../../dist/generation/jobs/job-event-teller');
const { MAX_JOB_ID_LENGTH } = require('../../dist/generation/jobs/job-ids');

/** A few ids, so that the same jobs come back look after look. */
const IDS = [
  '0b7d3c2e-4a51-4f0e-9a7b-2c1d0e9f8a76',
  '5f2a9c1d-7e3b-4c8a-9d6e-1a2b3c4d5e6f',
  'c3d4e5f6-a7b8-4c9d-8e0f-1a2b3c4d5e6f',
];
const WORDS = ['queued', 'running', 'canceling', 'succeeded', 'failed', 'canceled', 'expired'];
/** The order of the topics of one job. */
const RANK = { queued: 0, started: 1, completed: 2, failed: 2, cancelled: 2 };

const text = () => fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom(...PROTOTYPE_WORDS), hostileJson());
/**
 * When each job of IDS was created: a server may say anything of a job but its creation time, which no real one
 * changes (the memory forgets told jobs older than the newest time read: one met again under a newer time is
 * a new job to it).
 */
const CREATED = new Map(IDS.map((id, index) => [id, `2026-11-26T21:33:5${index}.000000+00:00`]));

const jobBody = () =>
  fc.oneof(
    {
      weight: 5,
      arbitrary: fc
        .record(
          {
            id: fc.oneof(
              { weight: 6, arbitrary: fc.constantFrom(...IDS) },
              fc.constantFrom('x'.repeat(201), ''),
              text(),
            ),
            status: fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...WORDS) }, text()),
            // Its own time, or one that cannot be read (none).
            created_at: fc.oneof({ weight: 3, arbitrary: fc.constant('own') }, text()),
            outputs: fc.oneof(
              fc.constant([{ id: 'asset-1', node_id: '9', name: 'a.png', type: 'image' }]),
              fc.array(hostileJson(), { maxLength: 2 }),
              hostileJson(),
            ),
            error: fc.oneof(fc.record({ code: text(), message: text(), class_type: text() }), hostileJson()),
            metadata: fc.oneof(fc.constantFrom('graph-gen:key', 'other'), text()),
          },
          { requiredKeys: ['id', 'status'] },
        )
        .map((job) => {
          if (job.created_at !== 'own') return job;
          const created = typeof job.id === 'string' ? CREATED.get(job.id) : undefined;
          return { ...job, created_at: created ?? '2026-11-26T21:33:59.000000+00:00' };
        }),
    },
    hostileJson(),
  );
const listBody = () =>
  fc.oneof(
    {
      weight: 5,
      arbitrary: fc.record(
        {
          jobs: fc.oneof({ weight: 5, arbitrary: fc.array(jobBody(), { maxLength: 6 }) }, hostileJson()),
          truncated: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, hostileJson()),
        },
        { requiredKeys: ['jobs'] },
      ),
    },
    hostileJson(),
  );

/** An HTTP answer as HttpClient.json gives it: a JSON status and body, a framework's 404 page, or a failure. */
const answerOf = (body) =>
  fc.oneof(
    { weight: 5, arbitrary: body.map((value) => ({ status: 200, body: value, json: true })) },
    fc.constantFrom(
      { status: 404, body: { error: { code: 'not_found', message: 'No job.' } }, json: true },
      { status: 404, body: '404: Not Found', json: false },
      { throws: new Error('connection reset') },
      { throws: { toString: 1 } },
    ),
  );

/** A stand-in for HttpClient: the list route answers `list`, a job's route `job`, read afresh per request. */
function fakeHttp(now) {
  return {
    async json(path) {
      const answer = path === '/api/v2/jobs' ? now().list : now().job;
      if (answer.throws !== undefined) throw answer.throws;
      return answer;
    },
  };
}

function watchOf(http, clients) {
  const told = [];
  const map = new Map();
  const store = { entries: () => [...map], set: (k, v) => map.set(k, v), delete: (k) => map.delete(k) };
  const teller = new JobEventTeller(new JobEventMemory(store, 'cfg'), {
    events: JOB_EVENT_TOPICS,
    clients,
    clientId: 'this-client',
    submittedHere: (id) => id === IDS[0],
    emit: (event) => told.push(event),
    log: () => {},
  });
  const limits = { pageSize: 5, maxPages: 1, endsPerRead: 2, endReadsMax: 2, unannouncedPollMs: 1 };
  const watch = new V2JobWatch(
    { http, lookup: new V2Lookup(http), listBytes: 1_000_000 },
    { teller, limits, log: () => {} },
  );
  return { watch, teller, told, map };
}

describe('the v2 job-events reader (fuzzed)', () => {
  let savedReads;
  beforeEach(() => {
    savedReads = V2JobWatch.defaultReads;
    V2JobWatch.defaultReads = { firstJobs: 2, mostJobs: 4 };
  });
  afterEach(() => {
    V2JobWatch.defaultReads = savedReads;
    assert.deepEqual(Object.keys(Object.prototype), []);
  });

  it('a look at hostile answers never rejects, and tells only job ids, known topics, each step once and in order', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ list: answerOf(listBody()), job: answerOf(jobBody()) }), {
          minLength: 2,
          maxLength: 4,
        }),
        fc.constantFrom('all', 'others'),
        async (looks, clients) => {
          let now = looks[0];
          const { watch, teller, told, map } = watchOf(
            fakeHttp(() => now),
            clients,
          );
          const signal = new AbortController().signal;
          for (const look of looks) {
            now = look;
            const outcome = await watch.look(signal);
            assert.ok(['read', 'failed'].includes(outcome.kind));
            if (outcome.kind === 'failed') assert.equal(typeof outcome.trouble.message, 'string');
            teller.fresh = false;
          }
          const last = new Map();
          for (const event of told) {
            assert.equal(typeof event.prompt_id, 'string');
            assert.ok(event.prompt_id.length > 0 && event.prompt_id.length <= MAX_JOB_ID_LENGTH);
            assert.ok(JOB_EVENT_TOPICS.includes(event.topic));
            assert.equal(event.payload.status, event.topic);
            const before = last.get(event.prompt_id);
            assert.ok(
              before === undefined || RANK[event.topic] > RANK[before],
              `${before} then ${event.topic}`,
            );
            last.set(event.prompt_id, event.topic);
            // This connection's own job is never told to a node of others' jobs.
            if (clients === 'others') assert.notEqual(event.prompt_id, IDS[0]);
          }
          for (const key of map.keys())
            if (key !== 'mark') assert.ok(key.slice(2).length <= MAX_JOB_ID_LENGTH);
        },
      ),
      fuzzOptions(60),
    );
  });

  it('a created_at that is no date is no time: an ended job is not met again as new (found by the fuzz, run 1,360)', async () => {
    const [other, job, later] = IDS;
    const listed = (jobs) => ({
      list: { status: 200, body: { jobs, truncated: false }, json: true },
      job: {},
    });
    const looks = [
      listed([{ id: job, status: 'queued', created_at: CREATED.get(job) }]),
      // Date.parse reads "!6!$" as June 2001: the job ended looked older than anything, and was forgotten.
      listed([
        { id: other, status: 'queued', created_at: CREATED.get(other) },
        { id: job, status: 'succeeded', created_at: '!6!$', outputs: [] },
      ]),
      listed([
        { id: later, status: 'running', created_at: CREATED.get(later) },
        { id: job, status: 'canceling', created_at: CREATED.get(job) },
      ]),
    ];
    let now = looks[0];
    const { watch, teller, told } = watchOf(
      fakeHttp(() => now),
      'all',
    );
    for (const look of looks) {
      now = look;
      assert.equal((await watch.look(new AbortController().signal)).kind, 'read');
      teller.fresh = false;
    }
    const steps = told.filter((event) => event.prompt_id === job).map((event) => event.topic);
    assert.deepEqual(steps, ['started', 'completed']);
  });

  it('a look whose list cannot be read tells nothing and changes nothing remembered', async () => {
    const unreadableList = fc.oneof(
      fc.constantFrom(
        { status: 404, body: '404: Not Found', json: false },
        { throws: new Error('connection reset') },
        { status: 200, body: { jobs: 'none' }, json: true },
      ),
      hostileJson()
        .filter((value) => value === null || typeof value !== 'object' || !Array.isArray(value.jobs))
        .map((value) => ({ status: 200, body: value, json: true })),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ list: answerOf(listBody()), job: answerOf(jobBody()) }), {
          minLength: 1,
          maxLength: 3,
        }),
        unreadableList,
        answerOf(jobBody()),
        async (looks, list, job) => {
          let now = looks[0];
          const { watch, teller, told, map } = watchOf(
            fakeHttp(() => now),
            'all',
          );
          const signal = new AbortController().signal;
          for (const look of looks) {
            now = look;
            await watch.look(signal);
            teller.fresh = false;
          }
          const toldBefore = told.length;
          const kept = JSON.stringify([...map]);
          now = { list, job };
          const outcome = await watch.look(signal);
          assert.equal(outcome.kind, 'failed');
          assert.equal(told.length, toldBefore, 'nothing told');
          assert.equal(JSON.stringify([...map]), kept, 'nothing concluded');
        },
      ),
      fuzzOptions(60),
    );
  });
});
