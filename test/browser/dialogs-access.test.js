'use strict';
/* global RED, $, document, getComputedStyle -- these run inside the editor page */
// The dialogs for every user: the submit dialog's own buttons have accessible names (what a screen reader
// says; Playwright's getByRole finds a button by it), and the submit and config dialogs read well in Node-RED
// 5's dark theme, checked by the contrast of every text against what is behind it, with a screenshot of each
// in test/screenshots/ to look at. Node-RED 4.1 has no dark theme: there the same check runs in its light one.
const assert = require('node:assert');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');

const WORKFLOW = {
  4: {
    class_type: 'CheckpointLoaderSimple',
    inputs: { ckpt_name: 'sd_xl_base_1.0.safetensors' },
    _meta: { title: 'Load Checkpoint' },
  },
  6: {
    class_type: 'CLIPTextEncode',
    inputs: { text: 'a lighthouse on a cliff at dawn', clip: ['4', 1] },
    _meta: { title: 'Positive prompt' },
  },
  3: {
    class_type: 'KSampler',
    inputs: {
      seed: 42,
      steps: 20,
      cfg: 7,
      sampler_name: 'euler',
      scheduler: 'normal',
      denoise: 1,
      model: ['4', 0],
    },
  },
  9: { class_type: 'SaveImage', inputs: { filename_prefix: 'graph-gen', images: ['3', 0] } },
};

/**
 * Every text of the open dialog whose contrast with what is behind it is under WCAG's 4.5:1 (AA for normal
 * text): labels, sentences, buttons, the form's widgets and their values. Node-RED's own code editor is left
 * out (its theme is Node-RED's), and so are disabled controls (WCAG exempts them). A colour hard-coded for one
 * theme (dark grey text, a light background) fails this in the other.
 */
function lowContrastTexts(page) {
  return page.evaluate(() => {
    const parse = (colour) => {
      const match = /rgba?\(([^)]+)\)/.exec(colour);
      if (!match) return [0, 0, 0, 0];
      const parts = match[1]
        .split(/[ ,/]+/)
        .filter(Boolean)
        .map(Number);
      return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
    };
    const over = (top, bottom) => {
      const alpha = top[3];
      return [0, 1, 2].map((i) => top[i] * alpha + bottom[i] * (1 - alpha)).concat(1);
    };
    const backgroundOf = (element) => {
      const layers = [];
      for (let at = element; at && at.nodeType === 1; at = at.parentElement) {
        const colour = parse(getComputedStyle(at).backgroundColor);
        if (colour[3] > 0) layers.push(colour);
        if (colour[3] === 1) break;
      }
      let result = [255, 255, 255, 1];
      for (const layer of layers.reverse()) result = over(layer, result);
      return result;
    };
    const luminance = (rgb) => {
      const [r, g, b] = rgb.slice(0, 3).map((v) => {
        const c = v / 255;
        return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const ratio = (a, b) => {
      const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
      return (light + 0.05) / (dark + 0.05);
    };
    const tray = $('.red-ui-tray').last().find('.red-ui-tray-body')[0];
    // Node-RED's own colour for secondary text in this theme (its buttons, hints): #888 on white in 4.1's
    // light theme, 3.5:1. Text in exactly that colour follows Node-RED's choice and is held to it, not to 4.5.
    const probe = document.createElement('span');
    probe.style.color = 'var(--red-ui-secondary-text-color)';
    tray.appendChild(probe);
    const secondary = getComputedStyle(probe).color;
    probe.remove();
    const found = [];
    for (const element of tray.querySelectorAll('*')) {
      if (!element.getClientRects().length || getComputedStyle(element).visibility === 'hidden') continue;
      if (element.closest('.red-ui-editor-text-container, .monaco-editor, .ace_editor')) continue;
      if (element.disabled || element.closest('[disabled]')) continue;
      // Node-RED's own look of a selected toggle button (red on dark in its dark theme, about 4.1:1), as its
      // own sidebars show it: the button's border says "selected" too, and it is not ours to restyle.
      if (element.closest('.red-ui-button.toggle.selected')) continue;
      const isField = /^(INPUT|SELECT|TEXTAREA)$/.test(element.tagName) && element.type !== 'checkbox';
      const ownText = [...element.childNodes].some(
        (child) => child.nodeType === 3 && child.textContent.trim(),
      );
      if (!isField && !ownText) continue;
      if (isField && element.type === 'hidden') continue;
      const style = getComputedStyle(element);
      const text = parse(style.color);
      const behind = backgroundOf(element);
      const value = ratio(over(text, behind), behind);
      if (value < 4.5 && !(style.color === secondary && value >= 3)) {
        const label = isField
          ? `${element.tagName.toLowerCase()}#${element.id}`
          : element.textContent.trim().slice(0, 50);
        found.push(
          `${label} (${value.toFixed(2)}: ${style.color} on rgb(${behind.slice(0, 3).map(Math.round)}))`,
        );
      }
    }
    return found;
  });
}

describe('dialogs: accessible names and the dark theme', function () {
  this.timeout(60000);
  let ctx;
  let page;
  let problems;
  let configId;
  let submitId;

  before(async function () {
    this.timeout(120000);
    ctx = await stack();
    ({ page, problems } = await openEditor(ctx));
    await page.evaluate(() => RED.workspaces.add());
    configId = await editor.addGenerationConfig(page, 'access server', ctx.sandboxUrl, ctx.keys.generation);
    submitId = await editor.dropFromPalette(page, 'graph-gen-submit');
  });

  after(async () => {
    await page?.evaluate(() => localStorage.removeItem('view-dark-theme')).catch(() => undefined);
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  /** The submit dialog with the workflow shown as the form, "set by msg" marked on the prompt. */
  async function openSubmitForm() {
    await editor.openNodeDialog(page, submitId);
    await editor.setField(page, 'node-input-server', configId);
    await editor.setCode(page, submitId, JSON.stringify(WORKFLOW, null, 2));
    await page.click('#graph-gen-submit-view-form');
    await page.waitForFunction(() => /node types/.test($('#graph-gen-submit-definitions').text()));
    const mark = page.locator(
      '#graph-gen-submit-form .graph-gen-submit-section[data-node="6"] .graph-gen-submit-input[data-input="text"] .graph-gen-submit-mark input',
    );
    if (!(await mark.isChecked())) await mark.check();
  }

  it("the submit dialog's own buttons have accessible names from the catalog, and the view buttons say which is on", async () => {
    await openSubmitForm();
    const named = {
      form: /^Form: the workflow's values/,
      json: /^JSON: the workflow as text$/,
      load: /^Load workflow file from this computer$/,
      refresh: /^Refresh: read the server's node definitions and saved workflows again$/,
      copy: /^Copy the path msg\.inputs\["Positive prompt"\]\.text$/,
    };
    for (const [which, name] of Object.entries(named)) {
      const button = page.getByRole('button', { name });
      assert.strictEqual(await button.count(), 1, `one button named ${name} (${which})`);
      assert.ok(await button.isVisible(), `${which} is visible`);
      // The name is also the tooltip a mouse user sees (Refresh keeps its longer one).
      if (which !== 'refresh')
        assert.match(await button.getAttribute('title'), which === 'copy' ? /^Copy/ : name);
    }
    assert.strictEqual(await page.getByRole('group', { name: 'How the workflow is shown' }).count(), 1);
    const pressed = () =>
      page.evaluate(() => [
        $('#graph-gen-submit-view-form').attr('aria-pressed'),
        $('#graph-gen-submit-view-json').attr('aria-pressed'),
      ]);
    assert.deepStrictEqual(await pressed(), ['true', 'false']);
    await page.getByRole('button', { name: named.json }).click();
    assert.deepStrictEqual(await pressed(), ['false', 'true']);
    // Every button in our part of the dialog has a name, whatever it shows.
    const nameless = await page.evaluate(() =>
      $('.red-ui-tray')
        .last()
        .find('.red-ui-tray-body button:visible')
        .filter((_, button) => !(button.getAttribute('aria-label') || button.textContent).trim())
        .map((_, button) => button.outerHTML.slice(0, 80))
        .get(),
    );
    assert.deepStrictEqual(nameless, []);
  });

  it('the submit and config dialogs read well in the dark theme (Node-RED 5; on 4.1, which has none, in the light one)', async () => {
    const version = await page.evaluate(() => RED.settings.version);
    const dark = Number(version.split('.')[0]) >= 5;
    if (dark) {
      // A user's choice in Settings > View > Appearance, kept in the browser; read when the editor starts.
      await page.evaluate(() => localStorage.setItem('view-dark-theme', 'dark'));
      await page.reload();
      await editor.waitForEditor(page);
      assert.ok(await page.evaluate(() => document.documentElement.classList.contains('nr-theme-dark')));
      // The reload dropped what was not deployed: the config and submit nodes are made again.
      await page.evaluate(() => RED.workspaces.add());
      configId = await editor.addGenerationConfig(page, 'access server', ctx.sandboxUrl, ctx.keys.generation);
      submitId = await editor.dropFromPalette(page, 'graph-gen-submit');
    }
    const theme = dark ? 'dark' : 'light';
    await openSubmitForm();
    await screenshot(page, `submit-dialog-${theme}`, page.locator('.red-ui-tray').last());
    assert.deepStrictEqual(
      await lowContrastTexts(page),
      [],
      `texts of the submit dialog hard to read (${theme})`,
    );
    await page.click('#graph-gen-submit-view-json');
    await screenshot(page, `submit-dialog-json-${theme}`, page.locator('.red-ui-tray').last());
    assert.deepStrictEqual(
      await lowContrastTexts(page),
      [],
      `texts of the JSON view hard to read (${theme})`,
    );
    await editor.dismissAll(page);
    await editor.openConfigDialog(page, 'graph-gen-config', configId);
    await page.click('#graph-gen-config-test');
    await page.waitForFunction(() => /answered/.test($('#graph-gen-config-test-result').text()), null, {
      timeout: 15000,
    });
    // Away from the button, which shows Node-RED's hover colour while the pointer is on it.
    await page.mouse.move(5, 5);
    await screenshot(page, `config-dialog-${theme}`, page.locator('.red-ui-tray').last());
    assert.deepStrictEqual(
      await lowContrastTexts(page),
      [],
      `texts of the config dialog hard to read (${theme})`,
    );
  });

  it('the pool dialog, and the submit dialog through a pool, read well in the same theme', async () => {
    const dark = await page.evaluate(() => document.documentElement.classList.contains('nr-theme-dark'));
    const theme = dark ? 'dark' : 'light';
    await editor.openConfigDialog(page, 'graph-gen-pool');
    await editor.setField(page, 'node-config-input-server1', configId);
    await page.mouse.move(5, 5);
    await screenshot(page, `pool-dialog-${theme}`, page.locator('.red-ui-tray').last());
    assert.deepStrictEqual(
      await lowContrastTexts(page),
      [],
      `texts of the pool dialog hard to read (${theme})`,
    );
    await editor.closeDialog(page, 'node-config-dialog-ok');
    const poolId = await page.evaluate(() => {
      let id;
      RED.nodes.eachConfig((config) => {
        if (config.type === 'graph-gen-pool') id = config.id;
      });
      return id;
    });
    await editor.openNodeDialog(page, submitId);
    await editor.setField(page, 'node-input-pool', poolId);
    assert.ok(await page.locator('.graph-gen-pool-hint').isVisible(), 'no line says the server is not used');
    await screenshot(page, `submit-dialog-pool-${theme}`, page.locator('.red-ui-tray').last());
    assert.deepStrictEqual(
      await lowContrastTexts(page),
      [],
      `texts of the submit dialog through a pool hard to read (${theme})`,
    );
  });
});
