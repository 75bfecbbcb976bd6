'use strict';
// The pool's two readers of outside values against hostile input (src/generation/pool/): msg.server as a msg may
// hold it (anything a flow put there), read by ServerPool.pinnedBy, names one of the pool's members, names none,
// or is refused with a ServiceError invalid_input in a bounded sentence, and nothing else is ever thrown; and the
// job homes journal (job-homes.ts) read back from a file of any lines never throws, keeps only a job id and a
// member id of sane length per line, exactly as a line-by-line reading of the file says, and is left whole by the
// next write.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { fc, fuzzOptions, hostileJson, deepJson, PROTOTYPE_WORDS } = require('../support/fuzz');
const { ServerPool } = require('../../dist/generation/pool/server-pool');
const { JobHomes } = require('../../dist/generation/pool/job-homes');
const { MAX_JOB_ID_LENGTH } = require('../../dist/generation/jobs/job-ids');
const { ServiceError } = require('../../dist/http/errors');
const { readJsonText } = require('../../dist/boundary/outside');

const MEMBER_IDS = ['ca', 'cb', '5f1c0e2a9b3d7e61'];

/** A member's connection as far as the pool's constructor and pinnedBy touch it: a socket never open, no queue. */
function idleConnection() {
  return {
    sockets: () => ({ register: () => () => undefined, state: 'idle', ready: async () => false }),
    queue: async () => ({ kind: 'unreadable', reason: 'failed', message: 'not asked in this test' }),
    dialect: {},
  };
}

/** Values a msg may hold under msg.server that no generator makes: getters, proxies, boxed and inherited ids. */
function oddValues() {
  const throwingId = {};
  Object.defineProperty(throwingId, 'id', {
    enumerable: true,
    get() {
      throw new Error('a getter that throws');
    },
  });
  const { proxy: revoked, revoke } = Proxy.revocable({}, {});
  revoke();
  const trap = () => {
    throw new TypeError('a trap that throws');
  };
  const trapping = new Proxy({}, { get: trap, has: trap, getOwnPropertyDescriptor: trap, ownKeys: trap });
  return [
    throwingId,
    revoked,
    trapping,
    Object.create({ id: 'ca' }),
    Object.assign(Object.create(null), { id: 'cb' }),
    new String('ca'),
    { id: new String('ca') },
    ['ca'],
    { id: ['ca'] },
    { id: 'ca', name: { toString: 1 } },
    { id: { toString: () => 'ca' } },
    { id: 'x'.repeat(200_000) },
    { id: `ca${'\u0000'.repeat(300)}` },
    JSON.parse('{"__proto__": {"id": "ca"}}'),
    JSON.parse('{"id": "cb", "__proto__": null}'),
    Symbol('ca'),
    () => 'ca',
    10n ** 30n,
    new Date(0),
    new Map([['id', 'ca']]),
    Buffer.from('ca'),
    NaN,
    Infinity,
    -0,
  ];
}

/** Whether `value` names member `id` as pinnedBy is to read it: the value itself, or its own `id`, as text. */
function names(value, id) {
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean')
    return String(value) === id;
  try {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
    const own = Object.getOwnPropertyDescriptor(value, 'id');
    return own !== undefined && 'value' in own && own.value === id;
  } catch {
    // A proxy that cannot be looked into names nothing.
    return false;
  }
}

describe('server pool boundaries (fuzzed)', () => {
  describe('msg.server (ServerPool.pinnedBy)', () => {
    let pool;
    before(() => {
      pool = new ServerPool(
        MEMBER_IDS.map((id, index) => ({ id, name: `server ${index}`, connection: idleConnection() })),
        { strategy: 'soonest' },
      );
    });
    after(() => pool.close());

    /** pinnedBy's answer: a member, none, or a refusal; anything else thrown fails the property. */
    function pinned(value) {
      try {
        return { member: pool.pinnedBy(value) };
      } catch (error) {
        assert.ok(error instanceof ServiceError, `threw ${String(error)}, not a ServiceError`);
        assert.equal(error.code, 'invalid_input');
        assert.match(error.message, /^msg\.server (names a server|cannot be read)/);
        // The id is shown up to 200 characters, each at most 6 as JSON (\u0000).
        assert.ok(error.message.length < 200 * 6 + 200, `a refusal of ${error.message.length} characters`);
        return { refused: error };
      }
    }

    /** The property: pinnedBy pins the member the value names by its id, and only then. */
    function answersAsNamed(value) {
      const answer = pinned(value);
      const named = MEMBER_IDS.filter((member) => names(value, member));
      if (answer.member !== undefined) {
        assert.ok(pool.members.includes(answer.member));
        assert.deepEqual(named, [answer.member.id], 'a member is pinned only when named by its id');
      } else if (named.length > 0) assert.fail(`${named[0]} was named and not pinned`);
    }

    it('names a member, names none, or is refused as invalid input; never throws anything else', () => {
      const id = fc.oneof(
        fc.constantFrom(...MEMBER_IDS, ...PROTOTYPE_WORDS, '', ' ca', 'CA', 'ca ', 'c'),
        fc.string({ maxLength: 30 }),
        hostileJson(),
        fc.anything({
          withBigInt: true,
          withDate: true,
          withMap: true,
          withSet: true,
          withNullPrototype: true,
        }),
      );
      const server = fc.oneof(
        id,
        fc.record({ id, name: fc.oneof(fc.string(), hostileJson()) }, { requiredKeys: [] }),
        fc.dictionary(fc.constantFrom('id', 'name', ...PROTOTYPE_WORDS), id, { maxKeys: 4 }),
        fc.anything({
          withBigInt: true,
          withBoxedValues: true,
          withDate: true,
          withMap: true,
          withSet: true,
          withTypedArray: true,
          withSparseArray: true,
          withNullPrototype: true,
        }),
      );
      fc.assert(fc.property(server, answersAsNamed), fuzzOptions(3000));
    });

    it('values no generator makes (getters and proxies that throw, boxed and inherited ids) too', () => {
      // Checked one by one: fast-check could not print a getter that throws as a counterexample.
      for (const [index, value] of oddValues().entries()) {
        try {
          answersAsNamed(value);
        } catch (error) {
          throw new Error(`odd value #${index}: ${error.message}`);
        }
      }
      assert.match(
        pinned(oddValues()[0]).refused.message,
        /^msg\.server cannot be read \(a getter that throws\)/,
      );
    });

    it('reads each member by its id, as a value or as its own `id`, and nothing inherited or boxed', () => {
      for (const [index, id] of MEMBER_IDS.entries()) {
        assert.equal(pinned(id).member, pool.members[index]);
        assert.equal(pinned({ id, name: 'whatever' }).member, pool.members[index]);
      }
      for (const value of [
        undefined,
        null,
        '',
        {},
        { id: '' },
        { name: 'server 0' },
        [],
        ['ca'],
        new String('ca'),
      ])
        assert.deepEqual(pinned(value), { member: undefined }, String(value));
      assert.deepEqual(pinned(Object.create({ id: 'ca' })), { member: undefined }, 'an inherited id');
      assert.ok(pinned('elsewhere').refused);
      assert.ok(pinned({ id: 'x'.repeat(200_000) }).refused);
    });
  });

  describe('the job homes file (JobHomes)', () => {
    let folder;
    before(() => (folder = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-pool-homes-fuzz-'))));
    after(() => fs.rmSync(folder, { recursive: true, force: true }));

    const jobId = fc.oneof(
      fc.uuid(),
      fc.constantFrom(
        ...PROTOTYPE_WORDS,
        '',
        'x'.repeat(MAX_JOB_ID_LENGTH),
        'x'.repeat(MAX_JOB_ID_LENGTH + 1),
      ),
      fc.string({ maxLength: 12 }),
    );
    const memberId = fc.oneof(
      fc.constantFrom(...MEMBER_IDS, ...PROTOTYPE_WORDS, '', 'm'.repeat(200), 'm'.repeat(201)),
      fc.string({ maxLength: 12 }),
      hostileJson(),
    );
    /** One line of a job homes file as anything may have written it. */
    const line = fc.oneof(
      fc.record({ k: jobId, v: memberId }).map((change) => JSON.stringify(change)),
      fc.record({ k: jobId, v: memberId }).map((change) => JSON.stringify(change)),
      jobId.map((k) => JSON.stringify({ k })),
      fc.record({ k: hostileJson(), v: memberId }).map((change) => JSON.stringify(change)),
      hostileJson().map((value) => JSON.stringify(value)),
      fc.string({ maxLength: 60 }),
      fc.integer({ min: 200, max: 3000 }).map((depth) => `{"k":"deep","v":${deepJson(depth, '"ca"')}}`),
      fc.constantFrom(
        '{"__proto__":{"k":"x","v":"ca"}}',
        '{"k":"x","v":{"__proto__":"ca"}}',
        '{"k":"__proto__","v":"ca"}',
        '{"k":"constructor","v":"cb"}',
        '{"k":"x","v":"ca","k":"y"}',
        '\u0000\u0000',
        '{"k":"x","v":"ca"',
      ),
    );

    /** What the file says, read line by line as the journal reads it: the homes it must give, by job. */
    function homesOf(lines) {
      const homes = new Map();
      for (const text of lines) {
        if (text.length === 0) continue;
        const change = readJsonText(text);
        const record = change.ok ? change.value : undefined;
        if (record === null || typeof record !== 'object' || Array.isArray(record)) continue;
        if (!Object.hasOwn(record, 'k') || typeof record.k !== 'string') continue;
        homes.delete(record.k);
        const member = record.v;
        if (Object.hasOwn(record, 'v') && typeof member === 'string' && member !== '' && member.length <= 200)
          homes.set(record.k, member);
      }
      for (const job of [...homes.keys()]) if (job.length > MAX_JOB_ID_LENGTH) homes.delete(job);
      return homes;
    }

    it('a file of hostile lines is read without throwing, into the homes its lines say, and one write leaves it whole', async () => {
      let run = 0;
      let withHomes = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.array(line, { maxLength: 12 }),
          fc.boolean(),
          fc.array(jobId, { maxLength: 4 }),
          async (lines, cutLast, asked) => {
            const file = path.join(folder, `pool-${run++}.jsonl`);
            // Lines with a newline inside are several lines, as the file holds them.
            const fileLines = lines.join('\n').split('\n');
            let text = lines.length > 0 ? `${lines.join('\n')}\n` : '';
            if (cutLast && text.length > 2) {
              text = text.slice(0, -2);
              fileLines[fileLines.length - 1] = fileLines.at(-1).slice(0, -1);
            }
            fs.writeFileSync(file, text);
            const logged = [];
            const homes = await JobHomes.open(file, (message) => logged.push(message));
            const expected = homesOf(fileLines);
            if (expected.size > 0) withHomes += 1;
            assert.equal(homes.size, expected.size);
            for (const [job, member] of expected) assert.equal(homes.get(job), member, `job ${job}`);
            for (const job of [...asked, ...PROTOTYPE_WORDS])
              assert.equal(homes.get(job), expected.get(job), `job ${JSON.stringify(job).slice(0, 40)}`);
            for (const message of logged) assert.equal(typeof message, 'string');
            homes.set('added-job', 'cb');
            await homes.close();
            const again = await JobHomes.open(file, () => undefined);
            assert.equal(again.size, expected.size + (expected.has('added-job') ? 0 : 1));
            for (const [job, member] of expected)
              if (job !== 'added-job') assert.equal(again.get(job), member);
            assert.equal(again.get('added-job'), 'cb');
            await again.close();
            fs.rmSync(file, { force: true });
          },
        ),
        fuzzOptions(150),
      );
      assert.ok(withHomes > run / 4, `only ${withHomes} of ${run} files gave homes`);
    });

    it('a file that is not a file (a folder), or not there, is an empty memory, said, not a crash', async () => {
      const logged = [];
      const dir = path.join(folder, 'a-folder.jsonl');
      fs.mkdirSync(dir);
      const homes = await JobHomes.open(dir, (message) => logged.push(message));
      assert.equal(homes.size, 0);
      assert.equal(homes.get('x'), undefined);
      assert.ok(logged.length > 0, 'the unreadable file is said');
      const missing = await JobHomes.open(path.join(folder, 'missing', 'pool.jsonl'), (message) =>
        logged.push(message),
      );
      assert.equal(missing.size, 0);
      missing.set('job', 'ca');
      await missing.close();
      assert.equal(
        (await JobHomes.open(path.join(folder, 'missing', 'pool.jsonl'), () => undefined)).get('job'),
        'ca',
      );
    });
  });
});
