'use strict';
/* global RED, $ -- these run inside the editor page (page.evaluate / page.waitForFunction) */
// What the message catalogs and icons give a user of the real editor: every flow node with its own icon in
// the palette, every node's help (from locales/en-US/<type>.html) in the help sidebar, and, with the editor
// set to German, the palette and dialogs in German with the help falling back to English.
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');

const root = path.join(__dirname, '..', '..');
const types = Object.keys(require('../../package.json')['node-red'].nodes);
const ICONS = {
  'graph-gen-upload': 'graph-gen-upload.svg',
  'graph-gen-submit': 'graph-gen-submit.svg',
  'graph-gen-await-job': 'graph-gen-await.svg',
  'graph-gen-download': 'graph-gen-download.svg',
  'graph-gen-queue': 'graph-gen-queue.svg',
  'automation-list-workflows': 'automation-list.svg',
};
const flowTypes = Object.keys(ICONS);

function catalog(lang, type) {
  return JSON.parse(fs.readFileSync(path.join(root, 'nodes', 'locales', lang, `${type}.json`), 'utf8'))[type];
}

/** The first sentence of a node's English help, as text. */
function firstHelpSentence(type) {
  const html = fs.readFileSync(path.join(root, 'nodes', 'locales', 'en-US', `${type}.html`), 'utf8');
  const paragraph = /<p>([\s\S]*?)<\/p>/.exec(html)[1];
  return paragraph
    .replace(/<[^>]+>/g, '')
    .replace(/\s+/g, ' ')
    .split(/[.:]/)[0]
    .trim();
}

function paletteEntries(page) {
  return page.evaluate((names) => {
    const entries = {};
    for (const name of names) {
      const entry = $(`.red-ui-palette-node[data-palette-type="${name}"]`);
      entries[name] = {
        label: entry.find('.red-ui-palette-label').text().replace(/\s+/g, ' ').trim(),
        icon: entry.find('.red-ui-palette-icon').css('background-image') || '',
      };
    }
    return entries;
  }, flowTypes);
}

describe('editor: icons, help and the German catalog', function () {
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
    // The language is kept per browser profile, which the other browser test files share.
    await page?.evaluate(() => localStorage.removeItem('editor-language')).catch(() => undefined);
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  it('every flow node has its own icon in the palette, and Node-RED serves it as SVG', async () => {
    const entries = await paletteEntries(page);
    for (const type of flowTypes) {
      assert.ok(entries[type].icon.includes(`/${ICONS[type]}`), `${type} shows ${entries[type].icon}`);
      const url = /url\("?([^")]+)"?\)/.exec(entries[type].icon)[1];
      const answer = await page.evaluate(async (address) => {
        const response = await fetch(address);
        return {
          status: response.status,
          type: response.headers.get('content-type'),
          body: await response.text(),
        };
      }, url);
      assert.strictEqual(answer.status, 200, `${url}`);
      assert.match(answer.type, /svg/);
      assert.match(answer.body, /viewBox="0 0 40 60"/);
    }
    assert.strictEqual(new Set(flowTypes.map((type) => entries[type].icon)).size, flowTypes.length);
    const category = page.locator('.red-ui-palette-category', {
      has: page.locator('[data-palette-type="graph-gen-upload"]'),
    });
    await screenshot(page, 'palette-graph-gen', category);
  });

  for (const type of types) {
    it(`${type}: the help sidebar shows the help from locales/en-US/${type}.html`, async () => {
      const sentence = firstHelpSentence(type);
      const shown = await page.evaluate((name) => {
        RED.sidebar.help.show(name);
        return $('.red-ui-help').last().text().replace(/\s+/g, ' ');
      }, type);
      assert.ok(shown.includes(sentence), `the help sidebar does not show "${sentence}"`);
    });
  }

  it('in German: palette labels, node labels and dialog labels from the de catalog; help in English', async () => {
    await page.evaluate(() => localStorage.setItem('editor-language', 'de'));
    await page.reload();
    await editor.waitForEditor(page);
    const entries = await paletteEntries(page);
    for (const type of flowTypes) {
      assert.strictEqual(entries[type].label, catalog('de', type).paletteLabel, `${type} in the palette`);
    }
    const category = page.locator('.red-ui-palette-category', {
      has: page.locator('[data-palette-type="graph-gen-upload"]'),
    });
    await screenshot(page, 'palette-graph-gen-de', category);

    const id = await editor.dropFromPalette(page, 'graph-gen-queue');
    const label = await page.evaluate((nodeId) => RED.utils.getNodeLabel(RED.nodes.node(nodeId)), id);
    assert.strictEqual(label, catalog('de', 'graph-gen-queue').label.listQueue);
    await editor.openNodeDialog(page, id);
    await editor.assertLabelsTranslated(page, 'graph-gen-queue');
    const labels = await page.evaluate(() =>
      $('.red-ui-tray')
        .last()
        .find('.form-row > label')
        .map((_, element) => $(element).text().trim())
        .get(),
    );
    const german = catalog('de', 'graph-gen-queue').label;
    assert.ok(labels.includes(german.server) && labels.includes(german.action), `dialog labels: ${labels}`);
    await editor.dismissAll(page);
    await page.evaluate((nodeId) => {
      RED.nodes.remove(nodeId);
      RED.view.redraw(true);
    }, id);

    const help = await page.evaluate(() => {
      RED.sidebar.help.show('graph-gen-upload');
      return $('.red-ui-help').last().text();
    });
    assert.ok(help.includes(firstHelpSentence('graph-gen-upload')), 'the English help as the fallback');
  });
});
