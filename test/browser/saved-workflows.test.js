'use strict';
/* global RED, $ -- these run inside the editor page */
// The submit dialog lists the workflows saved on the server from its own page: picking one loads it,
// converts it with the server's definitions and shows the form; "read it from the server at each run" keeps
// its name instead of a copy (the form still shows it, msg.inputs marks open); one that has gone says so.
// Real Node-RED, the sandbox (saved to through the route the server's page uses), Chromium.
const assert = require('node:assert');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');

/** A checkpoint loader wired into a prompt titled "Positive prompt", as the graph editor saves it (UI format). */
const UI_WORKFLOW = require('../fixtures/ui/checkpoint-prompt.json');

const FORM = '#graph-gen-submit-form';
const row = (id, input) =>
  `${FORM} .graph-gen-submit-section[data-node="${id}"] .graph-gen-submit-input[data-input="${input}"]`;

describe('submit dialog: workflows saved on the server', function () {
  this.timeout(60000);
  let ctx;
  let page;
  let problems;
  let configId;
  let submitId;

  /** Saves as the server's page does: the whole path URL-encoded, the workflow's JSON text as the body. */
  async function saveOnServer(name, workflow) {
    const route = `/api/userdata/${encodeURIComponent(`workflows/${name}`)}?overwrite=true&full_info=true`;
    const response = await fetch(`${ctx.sandboxUrl}${route}`, {
      method: 'POST',
      headers: { 'x-api-key': ctx.keys.generation },
      body: JSON.stringify(workflow),
    });
    assert.strictEqual(response.status, 200, await response.text());
  }

  async function deleteOnServer(name) {
    const route = `/api/userdata/${encodeURIComponent(`workflows/${name}`)}`;
    const response = await fetch(`${ctx.sandboxUrl}${route}`, {
      method: 'DELETE',
      headers: { 'x-api-key': ctx.keys.generation },
    });
    assert.strictEqual(response.status, 204);
  }

  /** Waits until the dialog has listed the saved workflows; returns the sentence and the names offered. */
  async function savedList() {
    await page.waitForFunction(
      () =>
        !/Listing|Loading/.test($('#graph-gen-submit-saved-text').text()) &&
        !$('#graph-gen-submit-saved').prop('disabled'),
    );
    return {
      sentence: await page.locator('#graph-gen-submit-saved-text').innerText(),
      options: await page.locator('#graph-gen-submit-saved option').allInnerTexts(),
    };
  }

  const titles = () => page.locator(`${FORM} .graph-gen-submit-section-title b`).allInnerTexts();

  before(async function () {
    this.timeout(120000);
    ctx = await stack();
    ({ page, problems } = await openEditor(ctx));
    await page.evaluate(() => RED.workspaces.add());
    await saveOnServer('portraits/lighthouse.json', UI_WORKFLOW);
    await saveOnServer('alpha.json', { ...UI_WORKFLOW, extra: { note: 'another' } });
  });

  after(async () => {
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  it('lists the saved workflows; picking one loads it, converts it and shows the form (config not yet deployed)', async () => {
    await editor.openConfigDialog(page, 'graph-gen-config');
    await editor.setField(page, 'node-config-input-name', 'saved server');
    await editor.setField(page, 'node-config-input-baseUrl', ctx.sandboxUrl);
    await editor.setField(page, 'node-config-input-apiKey', ctx.keys.generation);
    await editor.closeDialog(page, 'node-config-dialog-ok');
    configId = await page.evaluate(() => {
      let id;
      RED.nodes.eachConfig((config) => {
        if (config.type === 'graph-gen-config' && config.name === 'saved server') id = config.id;
      });
      return id;
    });
    submitId = await editor.dropFromPalette(page, 'graph-gen-submit');
    await editor.openNodeDialog(page, submitId);
    await editor.setField(page, 'node-input-server', configId);

    const listed = await savedList();
    assert.match(listed.sentence, /2 workflows saved on the server/);
    assert.deepStrictEqual(listed.options.slice(1), ['alpha.json', 'portraits/lighthouse.json']);
    // Saved in the server's page while the dialog is open: Refresh lists it.
    await saveOnServer('beta.json', UI_WORKFLOW);
    await page.click('#graph-gen-submit-refresh');
    const refreshed = await savedList();
    assert.match(refreshed.sentence, /3 workflows saved on the server/);
    assert.deepStrictEqual(refreshed.options.slice(1), [
      'alpha.json',
      'beta.json',
      'portraits/lighthouse.json',
    ]);

    await page.locator('#graph-gen-submit-saved').selectOption('portraits/lighthouse.json');
    await page.locator('#graph-gen-submit-keep-api').waitFor();
    assert.match(
      await page.locator('#graph-gen-submit-saved-text').innerText(),
      /Loaded a copy of portraits\/lighthouse\.json/,
    );
    assert.ok(await page.locator(FORM).isVisible(), 'the form is not shown');
    assert.deepStrictEqual(await titles(), ['Checkpoint Loader Simple', 'Positive prompt']);
    assert.strictEqual(await page.locator(`${row(2, 'text')} textarea`).inputValue(), 'a lighthouse at dusk');
    const held = await page.evaluate((id) => JSON.parse(RED.nodes.node(id).editor.getValue()), submitId);
    assert.deepStrictEqual(held, UI_WORKFLOW, 'the copy is not the saved workflow as it is');
    await editor.closeDialog(page, 'node-dialog-ok');

    const saved = await page.evaluate((id) => {
      const node = RED.nodes.node(id);
      return { workflow: JSON.parse(node.workflow), savedWorkflow: node.savedWorkflow };
    }, submitId);
    assert.deepStrictEqual(saved, { workflow: UI_WORKFLOW, savedWorkflow: '' });
  });

  it('"read it from the server at each run" keeps the name, not a copy; the form still shows it with msg.inputs marks; it survives a deploy and a reload', async () => {
    await editor.openNodeDialog(page, submitId);
    await savedList();
    await page.locator('#graph-gen-submit-saved').selectOption('portraits/lighthouse.json');
    await page.locator('#graph-gen-submit-saved-live').check();
    await page.locator(row(2, 'text')).waitFor();
    await page.waitForFunction(() =>
      /read from the server at each run/.test($('#graph-gen-submit-ui-text').text()),
    );
    await page.waitForFunction(() =>
      /This node reads portraits\/lighthouse\.json from the server at each run/.test(
        $('#graph-gen-submit-saved-text').text(),
      ),
    );
    assert.ok(!(await page.locator('#graph-gen-submit-keep-api').isVisible()), 'a copy can still be kept');
    assert.ok(await page.locator('#graph-gen-submit-load').isDisabled(), 'a file can still be loaded');
    assert.ok(await page.locator(`${row(2, 'text')} textarea`).isDisabled(), 'its values are edited here');
    const mark = page.locator(`${row(2, 'text')} .graph-gen-submit-mark input`);
    assert.ok(await mark.isEnabled(), 'msg.inputs cannot be marked');
    await mark.check();
    assert.strictEqual(
      await page.locator(`${row(2, 'text')} .graph-gen-submit-path code`).innerText(),
      'msg.inputs["Positive prompt"].text',
    );
    await screenshot(page, 'submit-saved-workflow', page.locator('.red-ui-tray').last());
    await editor.closeDialog(page, 'node-dialog-ok');
    const kept = await page.evaluate((id) => {
      const node = RED.nodes.node(id);
      return { workflow: node.workflow, savedWorkflow: node.savedWorkflow, setByMsg: node.setByMsg };
    }, submitId);
    assert.deepStrictEqual(kept, {
      workflow: '',
      savedWorkflow: 'portraits/lighthouse.json',
      setByMsg: { 2: ['text'] },
    });
    assert.match(
      await page.locator(`[id="${submitId}"] .red-ui-flow-node-label`).textContent(),
      /portraits\/lighthouse/,
    );
    await editor.deploy(page);

    await page.reload();
    await editor.waitForEditor(page);
    await editor.openNodeDialog(page, submitId);
    // Deployed now: read with the stored key, which never reached this page.
    await page.locator(row(2, 'text')).waitFor();
    assert.strictEqual(
      await page.locator('#graph-gen-submit-saved').inputValue(),
      'portraits/lighthouse.json',
    );
    assert.ok(await page.locator('#graph-gen-submit-saved-live').isChecked());
    assert.deepStrictEqual(await titles(), ['Checkpoint Loader Simple', 'Positive prompt']);
    assert.ok(await page.locator(`${row(2, 'text')} .graph-gen-submit-mark input`).isChecked());
    await editor.closeDialog(page, 'node-dialog-cancel');
  });

  it('says so when the saved workflow the node reads has gone from the server', async () => {
    await deleteOnServer('portraits/lighthouse.json');
    await editor.openNodeDialog(page, submitId);
    const listed = await savedList();
    assert.match(
      listed.sentence,
      /portraits\/lighthouse\.json is not on the server any more \(renamed, moved or deleted there\)/,
    );
    assert.strictEqual(
      await page.locator('#graph-gen-submit-saved option:checked').innerText(),
      'portraits/lighthouse.json (not on the server)',
    );
    await editor.closeDialog(page, 'node-dialog-cancel');
  });
});
