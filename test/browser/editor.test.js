'use strict';
/* global RED, $ -- these run inside the editor page (page.evaluate / page.waitForFunction) */
// Every node type in a real editor: in the palette (flow nodes), its dialog opens with every label
// translated, refuses a bad value, and saves a good one. Config nodes: the key never comes back to the
// browser, and "test connection" says in words whether the key was accepted.
const assert = require('node:assert');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');

// For each type: a field the dialog validates, a value it must refuse and one it must accept.
const CONFIG_NODES = {
  'graph-gen-config': {
    field: 'baseUrl',
    bad: 'ftp://gen.example.com',
    good: (ctx) => ctx.sandboxUrl,
    fill: (ctx) => ({ apiKey: ctx.keys.generation }),
  },
  'automation-config': {
    field: 'port',
    bad: '70000',
    good: (ctx) => new URL(ctx.sandboxUrl).port,
    fill: (ctx) => ({ host: '127.0.0.1', apiKey: ctx.keys.automation }),
  },
};
// Every flow node refuses a missing config node; where it has a setting of its own to validate, that too.
const FLOW_NODES = {
  'graph-gen-upload': { config: 'graph-gen-config', field: 'name', good: 'upload here' },
  'graph-gen-submit': {
    config: 'graph-gen-config',
    field: 'workflow',
    code: true,
    bad: '{"3": {"inputs": ',
    good: '{"3":{"class_type":"SaveImage","inputs":{"filename_prefix":"x"}}}',
  },
  'graph-gen-await-job': { config: 'graph-gen-config', field: 'timeout', bad: '-5', good: '120' },
  'graph-gen-download': { config: 'graph-gen-config', field: 'name', good: 'fetch files' },
  'graph-gen-queue': { config: 'graph-gen-config', field: 'name', good: 'the queue' },
  'graph-gen-job-events': { config: 'graph-gen-config', field: 'name', good: 'every job' },
  'automation-list-workflows': { config: 'automation-config', field: 'limit', bad: '0', good: '250' },
};

describe('editor: every node type in a real browser', function () {
  this.timeout(60000);
  let ctx;
  let page;
  let problems;

  before(async function () {
    this.timeout(120000);
    ctx = await stack();
    ({ page, problems } = await openEditor(ctx));
  });

  after(async () => {
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  it('runs in the Node-RED under test (Node-RED 5 when NODE_RED_5_HOME is set)', async () => {
    const settings = await page.evaluate(() => fetch('settings').then((response) => response.json()));
    const home = process.env.NODE_RED_DIR || process.env.NODE_RED_5_HOME;
    const expected = home
      ? require(require.resolve('node-red/package.json', { paths: [home] })).version
      : require('node-red/package.json').version;
    assert.strictEqual(settings.version.replace(/-git$/, ''), expected.replace(/-git$/, ''));
  });

  for (const [type, spec] of Object.entries(CONFIG_NODES)) {
    it(`${type}: the dialog opens, translates its labels, refuses a bad ${spec.field}, saves`, async () => {
      assert.ok(await editor.typeRegistered(page, type), `${type} is not registered in the editor`);
      await editor.openConfigDialog(page, type);
      await editor.assertLabelsTranslated(page, type);
      await editor.setField(page, `node-config-input-${spec.field}`, spec.bad);
      assert.ok(
        await editor.fieldInvalid(page, `node-config-input-${spec.field}`),
        `${spec.bad} was accepted`,
      );
      await screenshot(page, `dialog-${type}`, page.locator('.red-ui-tray').last());
      await editor.setField(page, `node-config-input-${spec.field}`, spec.good(ctx));
      assert.ok(
        !(await editor.fieldInvalid(page, `node-config-input-${spec.field}`)),
        'the good value was refused',
      );
      for (const [field, value] of Object.entries(spec.fill(ctx))) {
        await editor.setField(page, `node-config-input-${field}`, value);
      }
      const saved = await editor.closeDialog(page, 'node-config-dialog-ok');
      const node = await editor.nodeOfType(page, type);
      assert.strictEqual(node[spec.field], spec.good(ctx));
      assert.ok(saved);
    });
  }

  for (const [type, spec] of Object.entries(FLOW_NODES)) {
    it(`${type}: in the palette; its dialog opens, translates its labels, refuses ${
      spec.bad === undefined ? 'a missing config node' : `a missing config node and a bad ${spec.field}`
    }, saves`, async () => {
      assert.ok(await editor.typeRegistered(page, type), `${type} is not registered in the editor`);
      const entry = page.locator(`.red-ui-palette-node[data-palette-type="${type}"]`);
      assert.strictEqual(await entry.count(), 1, `${type} is not in the palette`);
      assert.strictEqual(
        await entry.evaluate((element) =>
          $(element)
            .closest('.red-ui-palette-category')
            .find('.red-ui-palette-header span')
            .first()
            .text()
            .trim(),
        ),
        'graph gen',
        'not in the "graph gen" palette category',
      );
      const id = await editor.dropFromPalette(page, type);
      await editor.openNodeDialog(page, id);
      await editor.assertLabelsTranslated(page, type);

      await editor.setField(page, 'node-input-server', '_ADD_');
      assert.ok(await editor.fieldInvalid(page, 'node-input-server'), 'no config node was accepted');
      const configId = (await editor.nodeOfType(page, spec.config)).id;
      await editor.setField(page, 'node-input-server', configId);
      assert.ok(!(await editor.fieldInvalid(page, 'node-input-server')), 'the config node was refused');

      if (spec.code) {
        await editor.setCode(page, id, spec.bad);
        assert.match(await page.locator('#graph-gen-submit-notice').innerText(), /JSON/);
        await editor.setCode(page, id, spec.good);
        assert.strictEqual(await page.locator('#graph-gen-submit-notice').innerText(), '');
        assert.match(
          await page.locator('#graph-gen-submit-nodes').innerText(),
          /3\s*SaveImage: filename_prefix/,
        );
      } else {
        if (spec.bad !== undefined) {
          await editor.setField(page, `node-input-${spec.field}`, spec.bad);
          assert.ok(await editor.fieldInvalid(page, `node-input-${spec.field}`), `${spec.bad} was accepted`);
        }
        await editor.setField(page, `node-input-${spec.field}`, spec.good);
        assert.ok(
          !(await editor.fieldInvalid(page, `node-input-${spec.field}`)),
          'the good value was refused',
        );
      }
      await screenshot(page, `dialog-${type}`, page.locator('.red-ui-tray').last());
      await editor.closeDialog(page, 'node-dialog-ok');
      const saved = await page.evaluate(
        ([nodeId, field]) => {
          const node = RED.nodes.node(nodeId);
          return { value: node[field], server: node.server, valid: node.valid };
        },
        [id, spec.field],
      );
      assert.strictEqual(String(saved.value).replace(/\s+/g, ''), spec.good.replace(/\s+/g, ''));
      assert.strictEqual(saved.server, configId);
      assert.strictEqual(saved.valid, true, 'the saved node is marked invalid');
    });
  }

  it('graph-gen-job-events: the events checked are its setting, and none checked is refused', async () => {
    const id = await editor.dropFromPalette(page, 'graph-gen-job-events');
    await editor.openNodeDialog(page, id);
    await editor.setField(page, 'node-input-server', (await editor.nodeOfType(page, 'graph-gen-config')).id);
    const box = (value) => page.locator(`.graph-gen-job-events-event[value="${value}"]`);
    const checked = () =>
      page.evaluate(() =>
        $('.graph-gen-job-events-event:checked')
          .map((_, element) => element.value)
          .get(),
      );
    assert.deepStrictEqual(await checked(), ['completed', 'failed', 'cancelled'], 'the default events');
    for (const value of ['completed', 'failed', 'cancelled']) await box(value).uncheck();
    assert.ok(await editor.fieldInvalid(page, 'node-input-events'), 'no event chosen was accepted');
    await box('queued').check();
    await box('started').check();
    assert.ok(!(await editor.fieldInvalid(page, 'node-input-events')), 'two events were refused');
    await editor.closeDialog(page, 'node-dialog-ok');
    const saved = await page.evaluate((nodeId) => RED.nodes.node(nodeId), id);
    assert.strictEqual(saved.events, 'queued,started');
    assert.strictEqual(saved.valid, true);
  });

  it('graph-gen-pool: the dialog shows the filled slots and one more, adds a server, refuses none and a repeat, saves', async () => {
    assert.ok(
      await editor.typeRegistered(page, 'graph-gen-pool'),
      'graph-gen-pool is not registered in the editor',
    );
    const first = (await editor.nodeOfType(page, 'graph-gen-config')).id;
    const second = await editor.addGenerationConfig(
      page,
      'second server',
      ctx.sandboxUrl,
      ctx.keys.generation,
    );
    const shownSlots = () =>
      page.evaluate(() =>
        [1, 2, 3, 4, 5, 6, 7, 8].filter((slot) => $(`#node-config-input-server${slot}`).is(':visible')),
      );
    const hint = () => page.evaluate(() => $('.graph-gen-pool-strategy-hint:visible').text().trim());

    await editor.openConfigDialog(page, 'graph-gen-pool');
    await editor.assertLabelsTranslated(page, 'graph-gen-pool');
    assert.deepStrictEqual(await shownSlots(), [1], 'a new pool shows one empty slot');
    assert.deepStrictEqual(
      await page.evaluate(() =>
        $('#node-config-input-strategy option')
          .map((_, option) => option.value)
          .get(),
      ),
      ['soonest', 'turns', 'first'],
    );
    assert.strictEqual(await page.locator('#node-config-input-strategy').inputValue(), 'soonest');
    assert.match(await hint(), /fewest jobs ahead/);
    assert.ok(
      await editor.fieldInvalid(page, 'node-config-input-server1'),
      'a pool of no server was accepted',
    );
    await editor.setField(page, 'node-config-input-server1', first);
    assert.ok(!(await editor.fieldInvalid(page, 'node-config-input-server1')), 'the server was refused');

    await page.click('#graph-gen-pool-add');
    assert.deepStrictEqual(await shownSlots(), [1, 2], '"add a server" shows the next slot');
    await editor.setField(page, 'node-config-input-server2', first);
    assert.ok(
      await editor.fieldInvalid(page, 'node-config-input-server2'),
      'a server listed twice was accepted',
    );
    await editor.setField(page, 'node-config-input-server2', second);
    assert.ok(
      !(await editor.fieldInvalid(page, 'node-config-input-server2')),
      'the second server was refused',
    );
    await page.selectOption('#node-config-input-strategy', 'first');
    assert.match(await hint(), /first server in the list/);
    await screenshot(page, 'dialog-graph-gen-pool', page.locator('.red-ui-tray').last());
    await editor.closeDialog(page, 'node-config-dialog-ok');

    const pool = await editor.nodeOfType(page, 'graph-gen-pool');
    assert.deepStrictEqual(
      [pool.server1, pool.server2, pool.server3, pool.strategy],
      [first, second, '', 'first'],
    );
    const saved = await page.evaluate((id) => {
      const node = RED.nodes.node(id);
      return { label: RED.utils.getNodeLabel(node), valid: node.valid };
    }, pool.id);
    assert.deepStrictEqual(saved, { label: 'server pool (2 servers)', valid: true });
    await editor.openConfigDialog(page, 'graph-gen-pool', pool.id);
    assert.deepStrictEqual(await shownSlots(), [1, 2, 3], 'the filled slots and one empty one');
    await editor.closeDialog(page, 'node-config-dialog-cancel');
  });

  it('graph-gen-await-job through a pool: no server needed, the server row says it is not used, "run again" shows', async () => {
    const poolId = (await editor.nodeOfType(page, 'graph-gen-pool')).id;
    const id = await editor.dropFromPalette(page, 'graph-gen-await-job');
    await editor.openNodeDialog(page, id);
    const shown = (selector) => page.evaluate((query) => $(query).is(':visible'), selector);
    await editor.setField(page, 'node-input-server', '_ADD_');
    assert.ok(
      await editor.fieldInvalid(page, 'node-input-server'),
      'neither a server nor a pool was accepted',
    );
    assert.ok(!(await shown('.graph-gen-pool-hint')), 'the server row says it is unused without a pool');
    assert.ok(!(await shown('#node-input-runAgain')), '"run again" shows without a pool');

    await editor.setField(page, 'node-input-pool', poolId);
    assert.ok(!(await editor.fieldInvalid(page, 'node-input-server')), 'a pool without a server was refused');
    assert.strictEqual(
      await page.evaluate(() => $('.graph-gen-pool-hint:visible').text().trim()),
      '(not used when a pool is set)',
    );
    assert.ok(await shown('#node-input-runAgain'), '"run again" is hidden with a pool');
    await page.locator('#node-input-runAgain').check();
    await screenshot(page, 'dialog-graph-gen-await-job-pool', page.locator('.red-ui-tray').last());
    await editor.closeDialog(page, 'node-dialog-ok');
    const saved = await page.evaluate((nodeId) => {
      const node = RED.nodes.node(nodeId);
      return { server: node.server, pool: node.pool, runAgain: node.runAgain, valid: node.valid };
    }, id);
    assert.deepStrictEqual(saved, { server: '', pool: poolId, runAgain: true, valid: true });
  });

  it('deploys the nodes made in the dialogs without errors or warnings', async () => {
    await editor.deploy(page);
  });

  for (const type of Object.keys(CONFIG_NODES)) {
    it(`${type}: the key field shows no key after a reload`, async () => {
      await page.reload();
      await editor.waitForEditor(page);
      const id = (await editor.nodeOfType(page, type)).id;
      const held = await page.evaluate(
        (nodeId) => JSON.stringify(RED.nodes.node(nodeId).credentials ?? {}),
        id,
      );
      const key = type === 'graph-gen-config' ? ctx.keys.generation : ctx.keys.automation;
      assert.ok(!held.includes(key), 'the editor holds the key');
      const answer = await page.evaluate(
        (url) => fetch(url).then((response) => response.text()),
        `credentials/${type}/${id}`,
      );
      assert.ok(!answer.includes(key), 'the admin API sent the key back');
      assert.match(answer, /"has_apiKey":true/);
      await editor.openConfigDialog(page, type, id);
      const shown = await page.locator('#node-config-input-apiKey').inputValue();
      assert.ok(!shown.includes(key), `the key field shows the key (${shown.length} characters)`);
      await editor.closeDialog(page, 'node-config-dialog-cancel');
    });
  }

  const TESTS = {
    'graph-gen-config': { button: 'graph-gen-config-test', result: 'graph-gen-config-test-result' },
    'automation-config': { button: 'automation-config-test', result: 'automation-config-test-result' },
  };
  for (const [type, test] of Object.entries(TESTS)) {
    it(`${type}: "test connection" reports success with the stored key and a refused key in words`, async () => {
      const id = (await editor.nodeOfType(page, type)).id;
      await editor.openConfigDialog(page, type, id);
      const result = page.locator(`#${test.result}`);
      await page.click(`#${test.button}`);
      await page.waitForFunction(
        (selector) => !/…|\.\.\.$/.test($(selector).text()) && $(selector).text(),
        `#${test.result}`,
      );
      const success = await result.innerText();
      assert.match(success, /\w+ \w+/, 'no sentence');
      assert.doesNotMatch(success, /refused|unauthori[sz]ed|fail|error|could not/i, success);
      await editor.setField(page, 'node-config-input-apiKey', 'a-wrong-key');
      await page.click(`#${test.button}`);
      await page.waitForFunction(
        ([selector, before]) => $(selector).text() !== before && !/…|\.\.\.$/.test($(selector).text()),
        [`#${test.result}`, success],
      );
      const refused = await result.innerText();
      assert.match(refused, /refused|not accepted|unauthori[sz]ed|rejected/i, refused);
      assert.ok(!refused.includes('a-wrong-key'), 'the key appears in the message');
      await screenshot(page, `test-connection-${type}`, page.locator('.red-ui-tray').last());
      await editor.closeDialog(page, 'node-config-dialog-cancel');
    });
  }

  it('graph-gen-config: the authentication shows its own fields, and "test connection" sends the scheme chosen', async () => {
    const id = (await editor.nodeOfType(page, 'graph-gen-config')).id;
    await editor.openConfigDialog(page, 'graph-gen-config', id);
    const shown = () =>
      page.evaluate(() =>
        ['apiKey', 'username', 'password', 'authHeader', 'tokenInQuery'].filter((field) =>
          $(`#node-config-input-${field}`).is(':visible'),
        ),
      );
    assert.strictEqual(await page.locator('#node-config-input-authType').inputValue(), 'apiKey');
    assert.deepStrictEqual(await shown(), ['apiKey']);
    await page.selectOption('#node-config-input-authType', 'basic');
    assert.deepStrictEqual(await shown(), ['username', 'password']);
    await page.selectOption('#node-config-input-authType', 'header');
    assert.deepStrictEqual(await shown(), ['apiKey', 'authHeader', 'tokenInQuery']);
    assert.strictEqual(await page.locator('#graph-gen-config-secret-label').innerText(), 'Header value');
    await page.selectOption('#node-config-input-authType', 'bearer');
    assert.deepStrictEqual(await shown(), ['apiKey', 'tokenInQuery']);
    assert.strictEqual(await page.locator('#graph-gen-config-secret-label').innerText(), 'Token');
    await screenshot(page, 'graph-gen-config-bearer', page.locator('.red-ui-tray').last());
    // The sandbox takes only its API key: a bearer token is refused, and the answer names the scheme.
    await editor.setField(page, 'node-config-input-apiKey', 'a-bearer-token-123');
    const result = page.locator('#graph-gen-config-test-result');
    const before = await result.innerText();
    await page.click('#graph-gen-config-test');
    await page.waitForFunction(
      ([selector, earlier]) => $(selector).text() !== earlier && !/…|\.\.\.$/.test($(selector).text()),
      ['#graph-gen-config-test-result', before],
    );
    const refused = await result.innerText();
    assert.match(refused, /refused the bearer token: check the token\./, refused);
    assert.ok(!refused.includes('a-bearer-token-123'));
    await editor.closeDialog(page, 'node-config-dialog-cancel');
  });
});
