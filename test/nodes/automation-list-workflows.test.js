'use strict';
const assert = require('node:assert/strict');
const helper = require('node-red-node-test-helper');
const configNode = require('../../dist/nodes/automation-config.js');
const listNode = require('../../dist/nodes/automation-list-workflows.js');
const { AutomationClient, RepeatFilter } = require('../../dist/automation/client');
const {
  KEY,
  coreNode,
  startAutomationSandbox,
  listRequests,
  flow,
  collect,
  statuses,
} = require('../support/automation');

const catchNode = coreNode('common/25-catch.js');
const joinNode = coreNode('sequence/17-split.js');
const credentials = { cfg: { apiKey: KEY } };

describe('automation-list-workflows', () => {
  let sandbox;

  before(async () => {
    await helper.startServer();
    sandbox = await startAutomationSandbox({ workflows: 250 });
  });
  after(async () => {
    await sandbox.close();
    await helper.stopServer();
  });
  beforeEach(() => {
    sandbox.service.seed(250);
    sandbox.service.reset();
    sandbox.faults.clear();
    sandbox.counters.reset();
  });
  afterEach(async () => helper.unload());

  async function load(listProps, configProps, creds = credentials) {
    await helper.load(
      [configNode, listNode, catchNode, joinNode],
      flow(sandbox, listProps, configProps),
      creds,
    );
    return { out: collect('out'), caught: collect('caught'), status: statuses('list') };
  }

  /** Sends msg and waits for the failure a Catch node sees. */
  async function failure(listProps, msg = { payload: 'go' }, configProps, creds) {
    const { out, caught, status } = await load(listProps, configProps, creds);
    helper.getNode('list').receive(msg);
    const caughtMsg = await caught.next();
    assert.equal(out.received.length, 0, 'nothing is sent on failure');
    return { error: caughtMsg.error, msg: caughtMsg, status };
  }

  describe('page mode', () => {
    it('sends the first page with the key and accept headers, and passes the msg through', async () => {
      const { out, status } = await load();
      helper.getNode('list').receive({ payload: 'go', topic: 'nightly', mine: { keep: true } });
      const msg = await out.next();
      assert.equal(msg.payload.length, 100);
      assert.deepEqual(
        msg.payload.map((wf) => wf.id),
        sandbox.service.workflows.slice(0, 100).map((wf) => wf.id),
      );
      assert.equal(typeof msg.nextCursor, 'string');
      assert.equal(msg.topic, 'nightly');
      assert.deepEqual(msg.mine, { keep: true });
      const [request] = listRequests(sandbox);
      assert.equal(request.path, '/api/v1/workflows');
      assert.equal(request.headers['x-automation-api-key'], KEY);
      assert.equal(request.headers.accept, 'application/json');
      assert.equal(request.query.get('limit'), '100');
      assert.equal(request.query.has('active'), false, 'active "any" sends no active');
      assert.deepEqual(status.at(-1), { fill: 'green', shape: 'dot', text: '100 workflows, more' });
    });

    it('walks to the end when the output is looped back, with no nextCursor on the last page', async () => {
      const { out } = await load({ limit: '100' });
      const list = helper.getNode('list');
      list.receive({ payload: 'go' });
      let msg = await out.next(1);
      const ids = msg.payload.map((wf) => wf.id);
      // Looped back as it is: msg.cursor was removed, msg.nextCursor picks the next page.
      list.receive(msg);
      msg = await out.next(2);
      ids.push(...msg.payload.map((wf) => wf.id));
      // The cursor can also come as msg.cursor (taken first) or msg.payload.nextCursor; it is consumed.
      list.receive({ cursor: msg.nextCursor, nextCursor: 'ignored', payload: { nextCursor: 'ignored' } });
      msg = await out.next(3);
      assert.equal('cursor' in msg, false);
      ids.push(...msg.payload.map((wf) => wf.id));
      assert.equal(msg.payload.length, 50);
      assert.equal('nextCursor' in msg, false, 'the last page has no nextCursor');
      assert.deepEqual(
        ids,
        sandbox.service.workflows.map((wf) => wf.id),
      );
      for (const request of listRequests(sandbox)) {
        assert.equal(request.headers['x-automation-api-key'], KEY);
        assert.equal(request.query.get('limit'), '100');
      }
    });

    it('reads the cursor from msg.payload.nextCursor', async () => {
      const { out } = await load({ limit: '200' });
      const list = helper.getNode('list');
      list.receive({});
      const first = await out.next(1);
      list.receive({ payload: { nextCursor: first.nextCursor } });
      const second = await out.next(2);
      assert.deepEqual(
        second.payload.map((wf) => wf.id),
        sandbox.service.workflows.slice(200).map((wf) => wf.id),
      );
      assert.equal('nextCursor' in second, false);
    });

    it('takes msg.cursor first and refuses a cursor the service does not know', async () => {
      const { error, status, msg } = await failure({}, { cursor: 'not-a-cursor' });
      assert.equal(msg.cursor, 'not-a-cursor', 'the failed msg keeps the cursor it asked for');
      assert.equal(error.code, 'invalid_request');
      assert.match(error.message, /the cursor is not valid for this service/);
      assert.equal(error.cause.status, 400);
      assert.equal(listRequests(sandbox)[0].query.get('cursor'), 'not-a-cursor');
      assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'invalid request' });
    });
  });

  describe('all mode', () => {
    it('follows every page with the same active and limit, and shows the pages in its status', async () => {
      sandbox.service.seed(1000);
      const { out, status } = await load({ mode: 'all', limit: '250', active: 'true' });
      helper.getNode('list').receive({ payload: 'go', topic: 't' });
      const msg = await out.next();
      const active = sandbox.service.workflows.filter((wf) => wf.active);
      assert.ok(active.length > 600 && active.length < 1000);
      assert.deepEqual(
        msg.payload.map((wf) => wf.id),
        active.map((wf) => wf.id),
      );
      assert.equal(msg.topic, 't');
      const requests = listRequests(sandbox);
      assert.equal(requests.length, Math.ceil(active.length / 250));
      for (const request of requests) {
        assert.equal(request.query.get('active'), 'true', 'active on every page');
        assert.equal(request.query.get('limit'), '250', 'limit on every page');
        assert.equal(request.headers['x-automation-api-key'], KEY, 'key on every page');
        assert.equal(request.headers.accept, 'application/json');
      }
      const texts = status.map((s) => s.text);
      assert.deepEqual(texts.slice(0, 3), ['page 1…', 'page 2…', 'page 3…']);
      assert.deepEqual(status.at(-1), { fill: 'green', shape: 'dot', text: `${active.length} workflows` });
      assert.ok(texts.every((text) => text.length < 20));
    });

    it('takes active and limit from the msg (booleans or words) over the settings', async () => {
      const { out } = await load({ mode: 'all', limit: '250', active: 'true' });
      const list = helper.getNode('list');
      list.receive({ active: 'false', limit: 40 });
      const inactive = await out.next(1);
      assert.ok(inactive.payload.length > 0 && inactive.payload.every((wf) => wf.active === false));
      assert.equal(inactive.payload.length, sandbox.service.workflows.filter((wf) => !wf.active).length);
      assert.ok(
        listRequests(sandbox).every(
          (r) => r.query.get('active') === 'false' && r.query.get('limit') === '40',
        ),
      );
      sandbox.counters.reset();
      list.receive({ active: 'any', limit: '250' });
      assert.equal((await out.next(2)).payload.length, 250);
      assert.ok(listRequests(sandbox).every((r) => !r.query.has('active')));
      list.receive({ active: false });
      assert.ok((await out.next(3)).payload.every((wf) => wf.active === false));
    });

    it('reads active and limit from TypedInput msg and flow properties', async () => {
      await helper.load(
        [configNode, listNode, catchNode],
        flow(sandbox, {
          mode: 'all',
          limit: 'pageSize',
          limitType: 'msg',
          active: 'onlyActive',
          activeType: 'flow',
        }),
        credentials,
      );
      const out = collect('out');
      const list = helper.getNode('list');
      list.context().flow.set('onlyActive', true);
      list.receive({ pageSize: 30 });
      const msg = await out.next();
      assert.ok(msg.payload.every((wf) => wf.active === true));
      assert.ok(
        listRequests(sandbox).every((r) => r.query.get('limit') === '30' && r.query.get('active') === 'true'),
      );
    });

    it('ends the list on a nextCursor that is absent, null or empty', async () => {
      for (const ending of [{}, { nextCursor: null }, { nextCursor: '' }]) {
        sandbox.counters.reset();
        sandbox.faults.add({
          path: '/api/v1/workflows',
          status: 200,
          body: { data: [{ id: 'a' }], ...ending },
        });
        const { out } = await load({ mode: 'all' });
        helper.getNode('list').receive({});
        assert.deepEqual((await out.next()).payload, [{ id: 'a' }], JSON.stringify(ending));
        assert.equal(listRequests(sandbox).length, 1);
        await helper.unload();
      }
    });

    it('sends each workflow id once when the list changes between pages', async () => {
      sandbox.service.seed(300);
      const original = sandbox.service.workflows.map((wf) => wf.id);
      // A workflow added at the front after page 1 shifts the offsets: page 2 repeats page 1's last one.
      sandbox.service.events.once('listed', () => sandbox.service.prepend(1));
      const { out } = await load({ mode: 'all', limit: '100' });
      helper.getNode('list').receive({});
      const ids = (await out.next()).payload.map((wf) => wf.id);
      assert.equal(listRequests(sandbox).length, 4, 'the walk saw the repeat (4 pages for 301)');
      assert.equal(new Set(ids).size, ids.length, 'no id twice');
      assert.deepEqual(ids, original);
    });

    it('split: page drops repeats too: no id twice across the page messages', async () => {
      sandbox.service.seed(300);
      const original = sandbox.service.workflows.map((wf) => wf.id);
      sandbox.service.events.once('listed', () => sandbox.service.prepend(1));
      const { out } = await load({ mode: 'all', split: 'page', limit: '100' });
      helper.getNode('list').receive({});
      const pages = [];
      for (let n = 1; n <= 4; n++) pages.push(await out.next(n));
      assert.equal(pages.at(-1).parts.count, 4);
      assert.deepEqual(
        pages.flatMap((m) => m.payload.map((wf) => wf.id)),
        original,
      );
    });

    it('stops with an error when the service repeats a cursor', async () => {
      sandbox.service.misbehave = 'repeat-cursor';
      const { error, status } = await failure({ mode: 'all', limit: '10' });
      assert.equal(error.code, 'server_error');
      assert.match(error.message, /nextCursor it had already sent .* would never end/);
      assert.equal(listRequests(sandbox).length, 2);
      assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'server error' });
    });

    it('stops with an error after ceil(total/limit)+1 pages when the service gives a total', async () => {
      sandbox.service.seed(30);
      sandbox.service.misbehave = 'endless';
      sandbox.service.reportTotal = true;
      const { error } = await failure({ mode: 'all', limit: '10' });
      assert.equal(error.code, 'server_error');
      assert.match(error.message, /more than its 30 workflows need at 10 a page/);
      assert.equal(listRequests(sandbox).length, 4);
    });

    it('stops with an error at the page cap when pages never end', async () => {
      sandbox.service.misbehave = 'endless';
      const { error } = await failure({ mode: 'all', limit: '10', maxPages: '7' });
      assert.equal(error.code, 'invalid_input');
      assert.match(error.message, /more pages after 7 \(the node's page cap\)/);
      assert.equal(listRequests(sandbox).length, 7);
    });

    it('sends one msg per page with msg.parts, and a join node puts them back together', async () => {
      const nodes = flow(sandbox, { mode: 'all', split: 'page', limit: '100', wires: [['out', 'join']] });
      nodes.push(
        { id: 'join', z: 'f1', x: 1, y: 1, type: 'join', mode: 'auto', wires: [['joined']] },
        { id: 'joined', z: 'f1', x: 1, y: 1, type: 'helper' },
      );
      await helper.load([configNode, listNode, catchNode, joinNode], nodes, credentials);
      const out = collect('out');
      const joined = collect('joined');
      helper.getNode('list').receive({ topic: 'pages', parts: { id: 'outer', index: 2, count: 5 } });
      const pages = [await out.next(1), await out.next(2), await out.next(3)];
      assert.deepEqual(
        pages.map((m) => [m.payload.length, m.parts.index, m.parts.count, m.topic]),
        [
          [100, 0, undefined, 'pages'],
          [100, 1, undefined, 'pages'],
          [50, 2, 3, 'pages'],
        ],
      );
      assert.equal(new Set(pages.map((m) => m.parts.id)).size, 1);
      assert.deepEqual(pages[0].parts.parts, { id: 'outer', index: 2, count: 5 }, 'an outer split is kept');
      const whole = await joined.next();
      assert.deepEqual(
        whole.payload.map((wf) => wf.id),
        sandbox.service.workflows.map((wf) => wf.id),
      );
    });

    it('when a page fails after others were sent, a msg.reset closes the join group and the error says how many went', async () => {
      const completeNode = coreNode('common/24-complete.js');
      const nodes = flow(sandbox, { mode: 'all', split: 'page', limit: '50', wires: [['out', 'join']] });
      nodes.push(
        { id: 'join', z: 'f1', x: 1, y: 1, type: 'join', mode: 'auto', wires: [['joined']] },
        { id: 'joined', z: 'f1', x: 1, y: 1, type: 'helper' },
        // Told when the join node lets go of a msg it held.
        { id: 'released', z: 'f1', x: 1, y: 1, type: 'complete', scope: ['join'], wires: [['done']] },
        { id: 'done', z: 'f1', x: 1, y: 1, type: 'helper' },
      );
      await helper.load([configNode, listNode, catchNode, joinNode, completeNode], nodes, credentials);
      const out = collect('out');
      const caught = collect('caught');
      const joined = collect('joined');
      const released = collect('done');
      let listed = 0;
      const failThird = () => {
        if (++listed === 2) {
          sandbox.faults.add({
            path: '/api/v1/workflows',
            status: 500,
            body: { message: 'down' },
            times: 10,
          });
          sandbox.service.events.off('listed', failThird);
        }
      };
      sandbox.service.events.on('listed', failThird);
      helper.getNode('list').receive({ topic: 'pages' });
      const { error } = await caught.next();
      assert.equal(error.code, 'server_error');
      const partsId = out.received[0].parts.id;
      assert.match(
        error.message,
        new RegExp(
          `\\. Pages of this list sent before: 2 \\(msg\\.parts\\.id ${partsId}\\); a msg with msg\\.reset followed them, so a join node drops them instead of waiting for the rest$`,
        ),
      );
      assert.deepEqual(
        out.received.map((msg) => [msg.payload.length, msg.parts.id, msg.parts.index, msg.reset, msg.topic]),
        [
          [50, partsId, 0, undefined, 'pages'],
          [50, partsId, 1, undefined, 'pages'],
          [0, partsId, 2, true, 'pages'],
        ],
      );
      // The join node dropped the two pages it held (and the reset msg itself), and sent no partial list.
      await released.next(3);
      assert.equal(joined.received.length, 0);
    });

    it('reuses keep-alive connections instead of opening one per page', async () => {
      sandbox.service.seed(2000);
      const { out } = await load({ mode: 'all', limit: '100' });
      helper.getNode('list').receive({});
      assert.equal((await out.next()).payload.length, 2000);
      assert.equal(listRequests(sandbox).length, 20);
      // undici may open a second socket while the first is being released; never one per page.
      assert.ok(sandbox.service.connectionsSeen <= 2, `${sandbox.service.connectionsSeen} connections`);
    });

    it('remembers a digest of each cursor, not the cursor: 20,000 pages with 4 KiB cursors hold a few MiB', async () => {
      const v8 = require('node:v8');
      const vm = require('node:vm');
      const crypto = require('node:crypto');
      v8.setFlagsFromString('--expose-gc');
      const gc = vm.runInNewContext('gc');
      const client = new AutomationClient({ deployment: 'self-hosted', host: '127.0.0.1', port: '1' });
      // Each page's cursor is a new, flat 4 KiB string, as a service's opaque cursors are.
      client.listPage = async () => ({ data: [], nextCursor: crypto.randomBytes(3072).toString('base64') });
      const walk = client.walk({ limit: 10 }, { maxPages: 100_000 });
      try {
        await walk.next();
        gc();
        const before = process.memoryUsage().heapUsed;
        for (let page = 0; page < 20_000; page++) await walk.next();
        gc();
        const grown = process.memoryUsage().heapUsed - before;
        assert.ok(grown < 16 * 2 ** 20, `the walk holds ${Math.round(grown / 2 ** 20)} MiB more`);
      } finally {
        await walk.return();
        await client.close();
      }
    });

    it('keeps memory linear: a page with no repeats is used as it is, not copied', () => {
      const filter = new RepeatFilter();
      const page = [{ id: 1 }, { id: 2 }];
      assert.equal(filter.fresh(page), page);
      assert.deepEqual(filter.fresh([{ id: 2 }, { id: 3 }, { name: 'no id' }]), [
        { id: 3 },
        { name: 'no id' },
      ]);
    });
  });

  describe('redeploy', () => {
    it('stops a walk in progress at once, without an error or an unhandled rejection', async () => {
      sandbox.service.events.once('listed', () =>
        sandbox.faults.add({ path: '/api/v1/workflows', delayMs: 3000 }),
      );
      const { out, caught } = await load({ mode: 'all', limit: '50' });
      helper.getNode('list').receive({});
      while (listRequests(sandbox).length < 2) await new Promise((resolve) => setTimeout(resolve, 10));
      const started = Date.now();
      await helper.unload();
      assert.ok(Date.now() - started < 1000, `closing took ${Date.now() - started} ms`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(out.received.length + caught.received.length, 0);
    });
  });

  describe('bad input', () => {
    const table = [
      [{ limit: 0 }, /limit 0 is not a whole number from 1 to 250/],
      [{ limit: -5 }, /limit -5/],
      [{ limit: 251 }, /limit 251/],
      [{ limit: 2.5 }, /limit 2.5/],
      [{ limit: 'ten' }, /limit "ten"/],
      [{ active: 'yes' }, /active "yes" is not true, false or any/],
      [{ active: 1 }, /active 1/],
      [{ cursor: 42 }, /cursor is a number, not a string/],
      [{ cursor: { next: 'x' } }, /cursor is a object, not a string/],
      [{ payload: { nextCursor: ['x'] } }, /cursor is a array, not a string/],
    ];
    for (const mode of ['page', 'all']) {
      it(`is refused in ${mode} mode before any request, with invalid_input`, async () => {
        const { out, caught, status } = await load({ mode });
        const list = helper.getNode('list');
        for (const [index, [msg, message]] of table.entries()) {
          list.receive({ ...msg, topic: `case ${index}` });
          const caughtMsg = await caught.next(index + 1);
          assert.equal(caughtMsg.error.code, 'invalid_input', JSON.stringify(msg));
          assert.match(caughtMsg.error.message, message);
          assert.equal(caughtMsg.topic, `case ${index}`);
        }
        assert.equal(listRequests(sandbox).length, 0, 'no request was sent');
        assert.equal(out.received.length, 0);
        assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'invalid input' });
      });
    }

    for (const cap of ['100001', '1e9', '0', '2.5', 'many']) {
      it(`refuses the page cap ${cap} (not a whole number from 1 to 100,000) before any request`, async () => {
        const { error } = await failure({ mode: 'all', maxPages: cap });
        assert.equal(error.code, 'invalid_input');
        assert.equal(
          error.message,
          `the page cap "${cap}" is not a whole number from 1 to 100,000: set the node's page cap to one (a longer list is better read page by page)`,
        );
        assert.equal(listRequests(sandbox).length, 0);
      });
    }

    it('takes the highest page cap, 100,000', async () => {
      const { out } = await load({ mode: 'all', maxPages: 100000 });
      helper.getNode('list').receive({});
      assert.equal((await out.next()).payload.length, 250);
    });

    it('refuses a limit setting outside 1-250 before any request', async () => {
      const { error } = await failure({ limit: '300' });
      assert.equal(error.code, 'invalid_input');
      assert.equal(listRequests(sandbox).length, 0);
    });
  });

  describe('service errors', () => {
    it('says the API key was refused (401) without showing the key', async () => {
      const wrong = 'wrong-key-456';
      const { error, msg, status } = await failure(
        { mode: 'all' },
        { payload: 'go' },
        {},
        { cfg: { apiKey: wrong } },
      );
      assert.equal(error.code, 'unauthorized');
      assert.match(error.message, /the API key was refused/);
      assert.equal(error.cause.status, 401);
      assert.deepEqual(error.cause.body, { message: 'Unauthorized' });
      assert.doesNotMatch(JSON.stringify({ msg, status }), new RegExp(`${wrong}|${KEY}`));
      assert.deepEqual(status.at(-1), { fill: 'red', shape: 'ring', text: 'unauthorized' });
      assert.equal(listRequests(sandbox)[0].headers['x-automation-api-key'], wrong);
    });

    it('is refused (401) with no key at all, and sends no key header', async () => {
      const { error } = await failure({}, { payload: 'go' }, {}, {});
      assert.equal(error.code, 'unauthorized');
      assert.equal('x-automation-api-key' in listRequests(sandbox)[0].headers, false);
    });

    it('gets a 401 on a later page as an error too (the key goes on every page)', async () => {
      sandbox.service.events.once('listed', () =>
        sandbox.faults.add({ path: '/api/v1/workflows', status: 401, body: { message: 'Unauthorized' } }),
      );
      const { error } = await failure({ mode: 'all', limit: '100' });
      assert.equal(error.code, 'unauthorized');
      assert.equal(listRequests(sandbox).length, 2);
    });

    it('retries a 5xx and a dropped connection with backoff, then succeeds', async () => {
      sandbox.faults.add({ path: '/api/v1/workflows', status: 503, times: 1 });
      sandbox.faults.add({ path: '/api/v1/workflows', drop: true, times: 1 });
      const { out } = await load({ mode: 'all', limit: '250' });
      helper.getNode('list').receive({});
      assert.equal((await out.next()).payload.length, 250);
      assert.equal(listRequests(sandbox).length, 3);
    });

    it('waits as long as Retry-After asks before retrying (503, and a 429 rate limit)', async () => {
      sandbox.faults.add({ path: '/api/v1/workflows', status: 503, retryAfter: '0.3', times: 1 });
      const { out } = await load();
      const started = Date.now();
      helper.getNode('list').receive({});
      await out.next();
      assert.ok(Date.now() - started >= 280, `waited ${Date.now() - started} ms`);
      assert.equal(listRequests(sandbox).length, 2);
      sandbox.faults.add({ path: '/api/v1/workflows', status: 429, retryAfter: '0.2', times: 1 });
      const again = Date.now();
      helper.getNode('list').receive({});
      await out.next(2);
      assert.ok(Date.now() - again >= 180, `waited ${Date.now() - again} ms`);
      assert.equal(listRequests(sandbox).length, 4);
    });

    it('gives up after the retries with server_error, then network, without the key', async () => {
      sandbox.faults.add({
        path: '/api/v1/workflows',
        status: 500,
        body: { message: `boom ${KEY}` },
        times: 3,
      });
      const { error, msg, status } = await failure({ mode: 'all' });
      assert.equal(error.code, 'server_error');
      assert.equal(listRequests(sandbox).length, 3, 'the first try and 2 retries');
      assert.doesNotMatch(JSON.stringify({ msg, status }), new RegExp(KEY));
      await helper.unload();
      sandbox.counters.reset();
      sandbox.faults.add({ path: '/api/v1/workflows', drop: true, times: 3 });
      const dropped = await failure({});
      assert.equal(dropped.error.code, 'network');
      assert.equal(listRequests(sandbox).length, 3);
    });

    it('reports a service that cannot be reached as network', async () => {
      const { error } = await failure({}, { payload: 'go' }, { port: '1', retries: '0' });
      assert.equal(error.code, 'network');
      assert.match(error.message, /did not answer listing workflows/);
    });
  });
});
