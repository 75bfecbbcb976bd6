'use strict';
/* global RED, $ -- these run inside the editor page (page.evaluate / page.waitForFunction) */
// Every example, imported the way a user finds it (menu > Import > Examples), deploys without an error or a
// warning; the text-to-image example then runs against the sandbox and its result shows in the debug sidebar.
const assert = require('node:assert');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');
const { readExamples } = require('../../scripts/start.js');

const PACKAGE = '@graph-gen/node-red';
// The examples read their keys from the environment once a user types these into the config node (as the
// examples' comments say): credentials are never part of an exported flow.
const KEYS = { 'graph-gen-config': '${GRAPH_GEN_API_KEY}', 'automation-config': '${AUTOMATION_API_KEY}' };

/** Imports an example as a user does; returns the id of the flow tab it arrived on, shown. */
async function importExample(page, name) {
  const tabsBefore = await page.evaluate(() => RED.nodes.getWorkspaceOrder());
  await page.click('#red-ui-header-button-sidemenu');
  await page.click('#menu-item-import');
  await page.click('#red-ui-tab-red-ui-clipboard-dialog-import-tab-examples a');
  const tree = page.locator('#red-ui-clipboard-dialog-import-tab-examples');
  const entry = tree.locator('.red-ui-treeList-label', { hasText: name });
  if (!(await entry.isVisible())) {
    await tree.locator('.red-ui-treeList-label', { hasText: PACKAGE }).click();
  }
  // The dialog fetches the example's flow before it enables Import. A click while the tree was still drawing its
  // entries selected nothing once in CI (Import stayed off for 10 s): the entry is clicked again then.
  const enabled = page.locator('#red-ui-clipboard-dialog-ok:not([disabled])');
  for (let attempt = 1; ; attempt++) {
    await entry.click();
    try {
      await enabled.waitFor({ timeout: 5_000 });
      break;
    } catch (error) {
      if (attempt === 4) throw error;
    }
  }
  await page.click('#red-ui-clipboard-dialog-ok');
  await page.locator('#red-ui-clipboard-dialog-ok').waitFor({ state: 'hidden' });
  // The examples share one config node per service (same id), so from the second import on Node-RED says
  // some nodes already exist; "Import copy" keeps the existing config node, key and all.
  await page.waitForFunction(
    (before) =>
      RED.nodes.getWorkspaceOrder().some((id) => !before.includes(id)) ||
      $('.red-ui-notification:visible:contains("already exist")').length > 0,
    tabsBefore,
  );
  const conflict = page.locator('.red-ui-notification', { hasText: 'already exist' });
  if (await conflict.isVisible()) {
    await conflict.locator('button', { hasText: /import copy/i }).click();
  }
  const tab = await page.waitForFunction(
    (before) => RED.nodes.getWorkspaceOrder().find((id) => !before.includes(id)),
    tabsBefore,
  );
  const id = await tab.jsonValue();
  // The example arrives on a tab of its own (which a user clicks once the import notices fade).
  await page.evaluate((tabId) => RED.workspaces.show(tabId), id);
  await page.waitForFunction((tabId) => RED.workspaces.active() === tabId, id);
  return id;
}

describe('examples in a real browser', function () {
  this.timeout(60000);
  const examples = readExamples();
  const keysSet = new Set();
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

  for (const example of examples) {
    it(`${example.name}: imports through Import > Examples and deploys without errors or warnings`, async () => {
      const flowNodes = example.nodes.filter((node) => node.x !== undefined);
      const title = example.nodes.find((node) => node.type === 'tab').label;
      const workspace = await importExample(page, example.name);
      assert.strictEqual(await page.evaluate((tab) => RED.nodes.workspace(tab).label, workspace), title);
      const imported = await page.evaluate((tab) => RED.nodes.filterNodes({ z: tab }).length, workspace);
      assert.strictEqual(imported, flowNodes.length, 'not every node of the example was imported');

      for (const config of example.nodes.filter((node) => KEYS[node.type] && !keysSet.has(node.id))) {
        await editor.openConfigDialog(page, config.type, config.id);
        await editor.setField(page, 'node-config-input-apiKey', KEYS[config.type]);
        await editor.closeDialog(page, 'node-config-dialog-ok');
        keysSet.add(config.id);
      }

      const invalid = await page.evaluate(() => {
        const found = [];
        const check = (node) => {
          if (node.valid === false) found.push(`${node.type} ${node.name || node.id}`);
        };
        RED.nodes.eachNode(check);
        RED.nodes.eachConfig(check);
        return found;
      });
      assert.deepStrictEqual(invalid, [], 'the editor marks nodes of the example as not properly configured');
      const logged = ctx.logs.length;
      await editor.deploy(page);
      await page.waitForTimeout(500);
      const complaints = ctx.logs.slice(logged).filter((line) => /\[(error|warn)\]/.test(line));
      assert.deepStrictEqual(complaints, [], 'Node-RED logged errors or warnings on deploy');
    });
  }

  it('01-text-to-image runs against the sandbox and its result appears in the debug sidebar', async () => {
    const inject = await page.evaluate(() => {
      const node = RED.nodes
        .filterNodes({ type: 'inject' })
        .find((candidate) => candidate.name === 'generate');
      RED.workspaces.show(node.z);
      RED.sidebar.show('debug');
      return node.id;
    });
    await page.waitForTimeout(300);
    await page.locator(`[id="${inject}"] .red-ui-flow-node-button`).click();
    // The job-events example, deployed beside it, saves the same job's picture too: its debug node is another.
    const message = page
      .locator('.red-ui-debug-msg', { hasText: 'saved file' })
      .filter({ hasText: 'graph-gen-output/' })
      .first();
    await message.waitFor({ timeout: 30000 });
    const text = await message.innerText();
    assert.match(text, /saved file/);
    assert.match(text, /graph-gen-output\/\S+\.png/);
    const errors = await page.locator('.red-ui-debug-msg-level-20, .red-ui-debug-msg-level-30').count();
    assert.strictEqual(errors, 0, 'the debug sidebar shows errors or warnings');
    await page.evaluate(() => {
      $('#red-ui-notifications').hide();
      RED.actions.invoke('core:zoom-out');
      RED.actions.invoke('core:zoom-out');
      // For the picture only: our palette category alone beside the flow.
      $('.red-ui-palette-category').not('#red-ui-palette-container-graph_gen').hide();
      $('#red-ui-workspace-chart').scrollLeft(0).scrollTop(0);
    });
    await page.waitForTimeout(300);
    await screenshot(page, 'text-to-image-run', undefined, { x: 0, y: 0, width: 1400, height: 440 });
    await page.evaluate(() => {
      RED.actions.invoke('core:zoom-reset');
      $('.red-ui-palette-category').show();
    });

    // The submit dialog of the example: the workflow in the code editor, the ids and titles msg.inputs sets.
    const submit = await page.evaluate(
      (tab) => RED.nodes.filterNodes({ type: 'graph-gen-submit', z: tab })[0].id,
      await page.evaluate(() => RED.workspaces.active()),
    );
    await editor.openNodeDialog(page, submit);
    assert.match(
      await page.locator('#graph-gen-submit-nodes').innerText(),
      /6\s*CLIPTextEncode "Positive prompt": text/,
    );
    await screenshot(page, 'submit-dialog-text-to-image', page.locator('.red-ui-tray').last());
    await editor.closeDialog(page, 'node-dialog-cancel');
    await page.evaluate(() => $('#red-ui-notifications').show());
  });
});
