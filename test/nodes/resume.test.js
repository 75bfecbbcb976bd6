'use strict';
// Awaits that outlive Node-RED (await-job's "resume after a restart") against the sandbox, and what they keep:
// the journal on disk, the msg as kept, a node removed from the flows. test/real/resume.real.js stops and kills
// a real Node-RED process against the real servers.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const helper = require('node-red-node-test-helper');
const { startSandbox } = require('../../dist/sandbox');
const { Journal } = require('../../dist/persist/journal');
const { keptMessage, restoredMessage, KEPT_BUFFER_BYTES } = require('../../dist/generation/jobs/kept-awaits');
const { MAX_LINE_BYTES } = require('../../dist/persist/journal');
const {
  workflow,
  sleep,
  until,
  fileNames,
  awaitFlow,
  collect,
  withFastSockets,
} = require('../support/sockets');
const { coreNode } = require('../support/node-red');

const configNode = require('../../dist/nodes/graph-gen-config.js');
const awaitNode = require('../../dist/nodes/graph-gen-await-job.js');
const catchNode = coreNode('common/25-catch.js');
const NODES = [configNode, awaitNode, catchNode];

describe('awaits that outlive Node-RED', () => {
  describe('the journal', () => {
    let folder;
    beforeEach(() => (folder = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-journal-'))));
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it('keeps sets and deletes across a reopen, a change a line, a burst in a few writes', async () => {
      const file = path.join(folder, 'j.jsonl');
      const journal = await Journal.open(file);
      for (let n = 0; n < 1000; n++) journal.set(`k${n}`, { n });
      journal.delete('k0');
      await journal.close();
      assert.ok(journal.writes <= 3, `${journal.writes} writes for 1,001 changes in one turn`);
      const again = await Journal.open(file);
      assert.equal(again.size, 999);
      assert.deepEqual(again.get('k999'), { n: 999 });
      assert.equal(again.get('k0'), undefined);
    });

    it('a line cut short by a kill is skipped, and the next write leaves the file whole', async () => {
      const file = path.join(folder, 'j.jsonl');
      fs.writeFileSync(file, '{"k":"a","v":1}\n{"k":"b","v":2}\n{"k":"c","v');
      const journal = await Journal.open(file);
      assert.deepEqual(journal.entries(), [
        ['a', 1],
        ['b', 2],
      ]);
      journal.set('d', 4);
      await journal.close();
      assert.deepEqual((await Journal.open(file)).entries(), [
        ['a', 1],
        ['b', 2],
        ['d', 4],
      ]);
    });

    it('is rewritten with the kept state once deletes outweigh it, and removed by destroy', async () => {
      const file = path.join(folder, 'j.jsonl');
      const journal = await Journal.open(file);
      for (let round = 0; round < 3; round++) {
        for (let n = 0; n < 1000; n++) journal.set(`k${n}`, n);
        await journal.flush();
        for (let n = 0; n < 1000; n++) journal.delete(`k${n}`);
        await journal.flush();
      }
      journal.set('last', 1);
      await journal.flush();
      assert.ok(
        fs.readFileSync(file, 'utf8').split('\n').length < 3000,
        'the history does not grow without end',
      );
      await journal.destroy();
      assert.equal(fs.existsSync(file), false);
    });
    it('a change larger than one entry may be is refused when set, with its size, and one as large is skipped when read (one rule)', async () => {
      const file = path.join(folder, 'j.jsonl');
      const logged = [];
      const journal = await Journal.open(file, { maxLineBytes: 100, log: (text) => logged.push(text) });
      assert.deepEqual(journal.set('small', 'x'), { ok: true });
      const refused = journal.set('large', 'x'.repeat(200));
      assert.equal(refused.ok, false);
      assert.match(refused.reason, /is 2\d\d bytes as JSON, more than 100 bytes/);
      assert.equal(journal.get('large'), undefined, 'what is refused is not kept, now either');
      await journal.close();
      assert.doesNotMatch(fs.readFileSync(file, 'utf8'), /xxxx/, 'nor written');
      // A line as large, written by another hand, is skipped by the same rule, said, and compacted away.
      fs.appendFileSync(file, `${JSON.stringify({ k: 'other', v: 'y'.repeat(200) })}\n{"k":"after","v":1}\n`);
      const again = await Journal.open(file, { maxLineBytes: 100, log: (text) => logged.push(text) });
      assert.deepEqual(again.entries(), [
        ['small', 'x'],
        ['after', 1],
      ]);
      assert.ok(
        logged.some((text) => /left out 1 entries larger than the 100 bytes/.test(text)),
        logged.join(),
      );
      assert.doesNotMatch(fs.readFileSync(file, 'utf8'), /yyyy/, 'the file is rewritten without it');
      assert.equal(MAX_LINE_BYTES, 16 * 1024 * 1024);
    });

    it('a file larger than the state it may keep is read, not refused: its newest entries kept, the file compacted', async () => {
      const file = path.join(folder, 'j.jsonl');
      const lines = [];
      for (let n = 0; n < 2000; n++) lines.push(JSON.stringify({ k: `k${n % 500}`, v: n }));
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      const size = fs.statSync(file).size;
      const logged = [];
      const journal = await Journal.open(file, { maxBytes: 4000, log: (text) => logged.push(text) });
      assert.ok(journal.size > 100 && journal.size < 500, `${journal.size} kept`);
      // The newest: the last set of each key, the oldest keys dropped first.
      assert.equal(journal.get('k499'), 1999);
      assert.equal(journal.get('k0'), undefined);
      const keptSize = fs.statSync(file).size;
      assert.ok(keptSize <= 4000 && keptSize < size, `rewritten: ${size} -> ${keptSize} bytes`);
      assert.ok(
        logged.some((text) => /oldest entries, past the 4000 bytes/.test(text)),
        logged.join(),
      );
      assert.deepEqual((await Journal.open(file, { maxBytes: 4000 })).entries(), journal.entries());
    });

    it('a line that is not a change, or whose value the owner cannot read, is passed over; the rest stands', async () => {
      const file = path.join(folder, 'j.jsonl');
      fs.writeFileSync(
        file,
        [
          '{"k":"a","v":1}',
          '[1,2]',
          '{"k":{"toString":1},"v":2}',
          '{"__proto__":{"k":"b"},"v":3}',
          `{"k":"deep","v":${'['.repeat(5000)}${']'.repeat(5000)}}`,
          '{"k":"b","v":"text"}',
          '{"k":"a","v":"not a number"}',
          '',
        ].join('\n'),
      );
      const readValue = (value) =>
        typeof value === 'number' || value === 'text' ? { ok: true, value } : { ok: false, reason: 'no' };
      const journal = await Journal.open(file, { readValue });
      assert.deepEqual(journal.entries(), [['b', 'text']]);
    });

    // Modes as POSIX systems keep them (Windows has none of these bits to check).
    it('files are its owner only (0600, folder 0700), those made before narrowed when opened', async () => {
      const inner = path.join(folder, 'state');
      fs.mkdirSync(inner, { mode: 0o755 });
      fs.chmodSync(inner, 0o755);
      const old = path.join(inner, 'old.jsonl');
      fs.writeFileSync(old, '{"k":"a","v":1}\n', { mode: 0o644 });
      fs.chmodSync(old, 0o644);
      const opened = await Journal.open(old);
      assert.equal(fs.statSync(old).mode & 0o777, 0o600);
      assert.equal(fs.statSync(inner).mode & 0o777, 0o700);
      opened.set('b', 2);
      await opened.close();
      assert.equal(fs.statSync(old).mode & 0o777, 0o600);
      const made = path.join(folder, 'new', 'deeper', 'j.jsonl');
      const fresh = await Journal.open(made);
      fresh.set('a', 1);
      await fresh.close();
      assert.equal(fs.statSync(made).mode & 0o777, 0o600);
      assert.equal(fs.statSync(path.dirname(made)).mode & 0o777, 0o700);
      // A rewrite (compaction) keeps the mode.
      const again = await Journal.open(made);
      for (let n = 0; n < 3000; n++) again.delete(`k${n}`);
      for (let n = 0; n < 3000; n++) again.set(`k${n}`, n);
      await again.close();
      assert.equal(fs.statSync(made).mode & 0o777, 0o600);
    });
  });

  describe('the msg as kept', () => {
    it('keeps what JSON can hold and Buffers up to 1 MiB; leaves out req/res, larger Buffers and what cannot be restored', () => {
      const loop = { name: 'loop' };
      loop.self = loop;
      const msg = {
        _msgid: 'm1',
        topic: 'fox',
        mine: { list: [1, 2, { small: Buffer.from('hi') }] },
        image: Buffer.alloc(16, 7),
        big: Buffer.alloc(KEPT_BUFFER_BYTES + 1),
        req: { socket: {} },
        res: { end() {} },
        loop,
        count: 10n,
        fn: () => 1,
        when: new Date(0),
        map: new Map([['a', 1]]),
        nested: { socket: new (class Socket {})(), keep: 'yes', nan: NaN, list: [() => 1, 2] },
        tags: { $buffer: 'not a buffer', $plain: { $buffer: 'nor this' } },
      };
      const { msg: kept, omitted } = keptMessage(msg);
      assert.deepEqual(omitted.sort(), [
        'big',
        'count',
        'fn',
        'loop.self',
        'map',
        'nested.list[0]',
        'nested.nan',
        'nested.socket',
        'req',
        'res',
        'when',
      ]);
      const restored = restoredMessage(JSON.parse(JSON.stringify(kept)));
      assert.deepEqual(restored, {
        _msgid: 'm1',
        topic: 'fox',
        mine: { list: [1, 2, { small: Buffer.from('hi') }] },
        image: Buffer.alloc(16, 7),
        loop: { name: 'loop' },
        nested: { keep: 'yes', list: [null, 2] },
        tags: { $buffer: 'not a buffer', $plain: { $buffer: 'nor this' } },
      });
      assert.ok(Buffer.isBuffer(restored.image));
    });
  });

  describe('the await-job node', () => {
    const open = withFastSockets();
    let sandbox;
    before(async () => helper.startServer());
    after(async () => helper.stopServer());
    beforeEach(async () => {
      sandbox = await startSandbox({ events: { autoRun: false, stepDelayMs: 1 } });
      open.push(sandbox);
    });
    afterEach(async () => helper.unload());

    const userDir = () => helper._settings?.userDir ?? helper._RED.settings.userDir;
    const keptFile = () => path.join(userDir(), 'graph-gen', 'await-job-await.jsonl');
    const load = (props = {}, extra = []) =>
      helper.load(NODES, awaitFlow(sandbox, props, extra), { cfg: {} });

    it('a job awaited when the flows stopped is awaited again when they start: sent once, its msg kept, msg.resumed', async () => {
      await load();
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({
        prompt_id: job.id,
        topic: 'fox',
        mine: 42,
        image: Buffer.from('small'),
        big: Buffer.alloc(KEPT_BUFFER_BYTES + 10),
      });
      await until(() => fs.existsSync(keptFile()), 'the await to be kept');
      // A restart: the flows stop (the await ends with nothing sent) and start again.
      await helper.unload();
      await load();
      const done = collect('done');
      sandbox.events.run(job.id);
      const msg = await done.next(1, 5000);
      assert.equal(msg.resumed, true);
      assert.equal(msg.payload.status, 'completed');
      assert.deepEqual(fileNames(msg.payload.outputs), fileNames(job.outputs));
      assert.equal(msg.topic, 'fox');
      assert.equal(msg.mine, 42);
      assert.ok(Buffer.isBuffer(msg.image) && msg.image.toString() === 'small');
      assert.equal(msg.big, undefined, 'a Buffer over 1 MiB is not kept');
      await sleep(300);
      assert.equal(done.received.length, 1, 'sent once');
      // Sent, then forgotten: a further restart sends nothing.
      await helper.unload();
      await load();
      await sleep(500);
      assert.equal(collect('done').received.length, 0);
    });

    it('a job that ended while the flows were stopped is read from the server at the start', async () => {
      await load();
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => fs.existsSync(keptFile()), 'the await to be kept');
      await helper.unload();
      sandbox.events.run(job.id);
      await until(() => job.state === 'completed', 'the job to end');
      await load();
      const msg = await collect('done').next(1, 5000);
      assert.equal(msg.resumed, true);
      assert.deepEqual(fileNames(msg.payload.outputs), fileNames(job.outputs));
    });

    it('a time limit that ran out while the flows were stopped ends the await at once, on output 2', async () => {
      await load({ timeout: '1' });
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => fs.existsSync(keptFile()), 'the await to be kept');
      await helper.unload();
      await sleep(1100);
      await load({ timeout: '1' });
      const msg = await collect('failed').next(1, 3000);
      assert.equal(msg.payload.status, 'timeout');
      assert.equal(msg.resumed, true);
    });

    it('resume off: nothing is kept, and nothing is awaited again', async () => {
      await load({ resume: false });
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({ prompt_id: job.id });
      await sleep(300);
      assert.equal(fs.existsSync(keptFile()), false);
      await helper.unload();
      await load({ resume: false });
      sandbox.events.run(job.id);
      await sleep(800);
      assert.equal(collect('done').received.length, 0);
    });

    it('a node removed from the flows drops what it kept; one gone while Node-RED was down too', async () => {
      await load();
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({ prompt_id: job.id });
      await until(() => fs.existsSync(keptFile()), 'the await to be kept');
      // Deleted (or disabled) and deployed: Node-RED closes it with `removed`.
      await new Promise((resolve) => helper.getNode('await').close(true).then(resolve));
      assert.equal(fs.existsSync(keptFile()), false);
      // A journal of a node that is no longer in the flows (removed while Node-RED was down) goes at the next start.
      const orphan = path.join(userDir(), 'graph-gen', 'await-job-gone.jsonl');
      fs.writeFileSync(orphan, `${JSON.stringify({ k: `${job.id}#x`, v: { config: 'cfg', msg: {} } })}\n`);
      await helper.unload();
      await load();
      await until(() => !fs.existsSync(orphan), 'the orphan journal to go');
    });

    const warnings = () =>
      helper
        .log()
        .args.map(([entry]) => entry)
        .filter((entry) => entry && entry.level === 30 && entry.type === 'graph-gen-await-job')
        .map((entry) => ({ id: entry.id, text: String(entry.msg) }));

    it('a msg too large to keep: awaited now, not kept, and a warning at once naming the node and the size', async () => {
      await load();
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      // Larger than a kept entry may be (MAX_LINE_BYTES), as one property.
      helper.getNode('await').receive({ prompt_id: job.id, payload: 'x'.repeat(MAX_LINE_BYTES + 10) });
      await until(() => warnings().length > 0, 'a warning', 3000);
      const [warning] = warnings();
      assert.equal(warning.id, 'await', "the warning is the node's own");
      assert.match(warning.text, /not kept for a restart/);
      assert.match(warning.text, new RegExp(`more than ${MAX_LINE_BYTES} bytes`));
      assert.equal(fs.existsSync(keptFile()) && /x{100}/.test(fs.readFileSync(keptFile(), 'utf8')), false);
      sandbox.events.run(job.id);
      const msg = await collect('done').next(1, 5000);
      assert.equal(msg.payload.status, 'completed', 'the await itself goes on');
    });

    it('keeps its files to its owner (0600, folder 0700) and of an http-in msg neither req, res nor their headers', async () => {
      // Made by an earlier release with the umask's modes: narrowed when the nodes start.
      const folder = path.join(userDir(), 'graph-gen');
      fs.mkdirSync(folder, { recursive: true, mode: 0o755 });
      fs.chmodSync(folder, 0o755);
      const idFile = path.join(folder, 'config-cfg.json');
      fs.writeFileSync(idFile, JSON.stringify({ clientId: '0b7d3c2e-4a51-4f0e-9a7b-2c1d0e9f8a76' }), {
        mode: 0o644,
      });
      fs.chmodSync(idFile, 0o644);
      await load();
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      helper.getNode('await').receive({
        prompt_id: job.id,
        topic: 'kept',
        req: { headers: { authorization: 'Bearer s3cret-token' }, socket: {} },
        res: { _res: { end() {} } },
        when: new Date(),
      });
      await until(() => fs.existsSync(keptFile()), 'the await to be kept');
      await helper.unload();
      const text = fs.readFileSync(keptFile(), 'utf8');
      assert.doesNotMatch(text, /s3cret|authorization|"req"|"res"/);
      assert.match(text, /"topic":"kept"/);
      assert.equal(fs.statSync(keptFile()).mode & 0o777, 0o600);
      assert.equal(fs.statSync(folder).mode & 0o777, 0o700);
      assert.equal(fs.statSync(idFile).mode & 0o777, 0o600);
    });

    /** The await node of awaitFlow three times, under ids that an earlier release gave one file name. */
    const threeIds = ['a:b', 'a/b', 'a_b'];
    const loadThree = () =>
      helper.load(
        NODES,
        awaitFlow(sandbox).flatMap((node) =>
          node.id === 'await' ? threeIds.map((id) => ({ ...node, id })) : [node],
        ),
        { cfg: {} },
      );

    it('node ids that differ only in odd characters keep separate files: each resumes its own awaits, each result once', async () => {
      await loadThree();
      const jobs = threeIds.map((id) => {
        const job = sandbox.jobs.submit(workflow(), 'another-client');
        helper.getNode(id).receive({ prompt_id: job.id, topic: id });
        return job;
      });
      const folder = path.join(userDir(), 'graph-gen');
      await until(
        () =>
          fs.existsSync(folder) &&
          fs.readdirSync(folder).filter((name) => name.startsWith('await-job-')).length === 3,
        'three kept files',
      );
      await helper.unload();
      await loadThree();
      const done = collect('done');
      for (const job of jobs) sandbox.events.run(job.id);
      await done.next(3, 5000);
      await sleep(500);
      assert.deepEqual(done.received.map((msg) => msg.topic).sort(), [...threeIds].sort(), 'each once');
      for (const msg of done.received) assert.equal(msg.resumed, true);
    });

    it('a file an earlier release kept under the old name is taken over and resumed once, by one of the nodes it could be of', async () => {
      const job = sandbox.jobs.submit(workflow(), 'another-client');
      const folder = path.join(userDir(), 'graph-gen');
      fs.mkdirSync(folder, { recursive: true });
      // The old name of all three ids: `a_b`.
      fs.writeFileSync(
        path.join(folder, 'await-job-a_b.jsonl'),
        `${JSON.stringify({ k: `${job.id}#m1abc`, v: { config: 'cfg', msg: { topic: 'old', _msgid: 'm1' } } })}\n`,
      );
      await loadThree();
      const done = collect('done');
      sandbox.events.run(job.id);
      const msg = await done.next(1, 5000);
      assert.equal(msg.topic, 'old');
      assert.equal(msg.resumed, true);
      await sleep(500);
      assert.equal(done.received.length, 1, 'resumed once');
      assert.equal(fs.existsSync(path.join(folder, 'await-job-a_b.jsonl')), false, 'the old name is gone');
    });
  });
});
