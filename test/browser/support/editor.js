'use strict';
/* global window, document, RED, $ -- these run inside the editor page (page.evaluate / page.waitForFunction) */
// Small steps a user takes in the Node-RED editor, driven through the page (clicks where a user would
// click, the editor's own API where a pixel position would make the test fragile).
const assert = require('node:assert');

async function waitForEditor(page) {
  await page.waitForFunction(
    () =>
      window.RED &&
      RED.nodes &&
      RED.workspaces &&
      RED.workspaces.active() &&
      document.querySelector('.red-ui-palette-node[data-palette-type="inject"]') !== null,
    null,
    { timeout: 30000 },
  );
}

function typeRegistered(page, type) {
  return page.evaluate((name) => Boolean(RED.nodes.getType(name)), type);
}

async function waitForTray(page, okButton) {
  await page.locator(`#${okButton}`).waitFor({ state: 'visible', timeout: 10000 });
  // The tray slides in; wait until it stops moving so screenshots and clicks land.
  await page.waitForTimeout(350);
}

/** Opens a config node's dialog: a new one, or the one with `id`. */
async function openConfigDialog(page, type, id) {
  await page.evaluate(([name, nodeId]) => RED.editor.editConfig('', name, nodeId || '_ADD_'), [type, id]);
  await waitForTray(page, 'node-config-dialog-ok');
}

/** Adds a graph-gen-config node through its dialog (typed address and key, not deployed); returns its id. */
async function addGenerationConfig(page, name, baseUrl, apiKey) {
  await openConfigDialog(page, 'graph-gen-config');
  await setField(page, 'node-config-input-name', name);
  await setField(page, 'node-config-input-baseUrl', baseUrl);
  await setField(page, 'node-config-input-apiKey', apiKey);
  await closeDialog(page, 'node-config-dialog-ok');
  return page.evaluate((label) => {
    let id;
    RED.nodes.eachConfig((config) => {
      if (config.type === 'graph-gen-config' && config.name === label) id = config.id;
    });
    return id;
  }, name);
}

/** Drags the type's palette entry onto the workspace, as a user does; returns the new node's id. */
async function dropFromPalette(page, type) {
  const before = await page.evaluate((name) => RED.nodes.filterNodes({ type: name }).map((n) => n.id), type);
  const entry = page.locator(`.red-ui-palette-node[data-palette-type="${type}"]`);
  await entry.scrollIntoViewIfNeeded();
  const box = await entry.boundingBox();
  const chart = await page.locator('#red-ui-workspace-chart').boundingBox();
  const count = before.length + (await page.evaluate(() => RED.nodes.filterNodes({}).length));
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(chart.x + 200, chart.y + 80 + (count % 12) * 50, { steps: 8 });
  await page.mouse.move(chart.x + 220, chart.y + 90 + (count % 12) * 50, { steps: 4 });
  await page.mouse.up();
  const ids = await page.evaluate((name) => RED.nodes.filterNodes({ type: name }).map((n) => n.id), type);
  const added = ids.filter((id) => !before.includes(id));
  assert.strictEqual(added.length, 1, `dragging ${type} from the palette did not add one node`);
  return added[0];
}

/** Opens a flow node's dialog the way a double click does. */
async function openNodeDialog(page, id) {
  await page.evaluate((nodeId) => RED.editor.edit(RED.nodes.node(nodeId)), id);
  await waitForTray(page, 'node-dialog-ok');
}

/** Every visible label of the open dialog has translated text (no message-catalog keys left showing). */
async function assertLabelsTranslated(page, type) {
  const texts = await page.evaluate(() =>
    $('.red-ui-tray')
      .last()
      .find(
        '.red-ui-tray-body label:visible, .red-ui-tray-body button:visible, .red-ui-tray-body span:visible',
      )
      .map((_, element) => $(element).text().trim())
      .get(),
  );
  const keys = texts.filter((text) =>
    new RegExp(`^${type}\\.|^[a-z-]+\\.(label|placeholder|message)\\.`).test(text),
  );
  assert.deepStrictEqual(keys, [], 'untranslated message-catalog keys in the dialog');
  const labels = await page.evaluate(
    () => $('.red-ui-tray').last().find('.red-ui-tray-body .form-row:visible > label:visible').length,
  );
  assert.ok(labels >= 2, `the dialog shows ${labels} labelled fields`);
}

/** Sets a dialog field as typing would (plain input, select, TypedInput or code editor). */
async function setField(page, id, value) {
  const kind = await page.evaluate((fieldId) => {
    const field = $(`#${fieldId}`);
    if (field.length === 0) return 'missing';
    if (field.data('noderedTypedInput')) return 'typed';
    if (field.is('div') && field.hasClass('red-ui-editor-text-container')) return 'code';
    return field.is(':visible') ? 'visible' : 'hidden';
  }, id);
  assert.notStrictEqual(kind, 'missing', `the dialog has no #${id}`);
  if (
    kind === 'visible' &&
    (await page.locator(`#${id}`).evaluate((element) => element.tagName)) === 'INPUT'
  ) {
    await page.locator(`#${id}`).fill(value);
    await page.locator(`#${id}`).dispatchEvent('change');
    return;
  }
  await page.evaluate(
    ([fieldId, text, fieldKind]) => {
      const field = $(`#${fieldId}`);
      if (fieldKind === 'typed') field.typedInput('value', text);
      else field.val(text);
      field.trigger('change').trigger('keyup');
    },
    [id, value, kind],
  );
}

/** Replaces the text of the code editor a node's dialog keeps on the node as `editor` (submit's workflow). */
async function setCode(page, id, text) {
  await page.evaluate(([nodeId, value]) => RED.nodes.node(nodeId).editor.setValue(value, -1), [id, text]);
  // The dialog re-reads the workflow after a short pause in typing.
  await page.waitForTimeout(600);
}

function fieldInvalid(page, id) {
  return page.evaluate((fieldId) => {
    const field = $(`#${fieldId}`);
    return (
      field.hasClass('input-error') ||
      field.next('.red-ui-typedInput-container').hasClass('input-error') ||
      field.closest('.red-ui-typedInput-container').hasClass('input-error')
    );
  }, id);
}

async function closeDialog(page, button) {
  await page.click(`#${button}`);
  await page.locator(`#${button}`).waitFor({ state: 'detached', timeout: 10000 });
  await page.waitForTimeout(300);
  return true;
}

/** The first node of a type in the workspace, as plain data. */
async function nodeOfType(page, type) {
  const node = await page.evaluate((name) => {
    const found =
      RED.nodes.filterNodes({ type: name })[0] ??
      (() => {
        let config;
        RED.nodes.eachConfig((candidate) => {
          if (!config && candidate.type === name) config = candidate;
        });
        return config;
      })();
    if (!found) return null;
    const plain = { id: found.id };
    for (const key of Object.keys(found._def.defaults ?? {})) plain[key] = found[key];
    return plain;
  }, type);
  assert.ok(node, `no ${type} node in the workspace`);
  return node;
}

/**
 * Clicks Deploy and waits for "Successfully deployed"; fails on any warning dialog (invalid, unknown or
 * unused config nodes) or error notification the editor shows instead.
 */
async function deploy(page) {
  await page.evaluate(() => $('.red-ui-notification').attr('data-seen', 'true'));
  await page.click('#red-ui-header-button-deploy');
  const outcome = await page.waitForFunction(
    () => {
      const notes = $('.red-ui-notification:visible:not([data-seen])');
      if (notes.length === 0) return false;
      return notes.map((_, note) => ({ text: $(note).text().trim(), classes: note.className })).get();
    },
    null,
    { timeout: 20000 },
  );
  const notes = await outcome.jsonValue();
  const texts = notes.map((note) => note.text).join(' / ');
  assert.ok(
    notes.every((note) => !/error|warning/.test(note.classes)),
    `the deploy showed a warning or an error: ${texts}`,
  );
  assert.match(texts, /Successfully deployed/);
  assert.doesNotMatch(texts, /unused|not properly configured|unknown/i, texts);
}

/**
 * Leaves the editor as a user would after a failed step: cancels any deploy question, import notice or
 * dialog, closes open trays. Used after each test so one failure does not cascade into the next.
 */
async function dismissAll(page) {
  await page.evaluate(() => {
    $('.red-ui-notification:visible button')
      .filter((_, button) => /^cancel$/i.test($(button).text().trim()))
      .click();
    $('.ui-dialog:visible .ui-dialog-buttonpane button')
      .filter((_, button) => /^cancel$/i.test($(button).text().trim()))
      .click();
    while ($('.red-ui-tray').length > 0 && RED.tray) {
      const before = $('.red-ui-tray').length;
      RED.tray.close();
      if ($('.red-ui-tray').length === before) break;
    }
  });
  await page.waitForTimeout(400);
}

module.exports = {
  dismissAll,
  waitForEditor,
  typeRegistered,
  openConfigDialog,
  addGenerationConfig,
  dropFromPalette,
  openNodeDialog,
  assertLabelsTranslated,
  setField,
  setCode,
  fieldInvalid,
  closeDialog,
  nodeOfType,
  deploy,
};
