'use strict';
/* global RED, $, document, getComputedStyle -- these run inside the editor page */
// The submit dialog knows the server: a loaded workflow shows as a form with the server's choices, edits
// change the stored workflow and survive a reload, "set by msg" shows the msg.inputs path, a model the
// server lacks is marked (in the dialog and on the node), a UI-format workflow is converted, and a server
// that cannot be reached is a sentence. Real Node-RED, the sandbox, Chromium.
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');

const DOCS_SCREENSHOT = path.join(__dirname, '..', '..', 'docs', 'submit-form.png');

/** The text-to-image workflow in API format, titled as a user titles nodes (two share the title "Output"). */
const WORKFLOW = {
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
      positive: ['6', 0],
      negative: ['7', 0],
      latent_image: ['5', 0],
    },
    _meta: { title: 'KSampler' },
  },
  4: {
    class_type: 'CheckpointLoaderSimple',
    inputs: { ckpt_name: 'sd_xl_base_1.0.safetensors' },
    _meta: { title: 'Load Checkpoint' },
  },
  5: { class_type: 'EmptyLatentImage', inputs: { width: 1024, height: 1024, batch_size: 1 } },
  6: {
    class_type: 'CLIPTextEncode',
    inputs: { text: 'a lighthouse on a cliff at dawn, oil painting', clip: ['4', 1] },
    _meta: { title: 'Positive prompt' },
  },
  7: {
    class_type: 'CLIPTextEncode',
    inputs: { text: 'blurry, low quality', clip: ['4', 1] },
    _meta: { title: 'Negative prompt' },
  },
  8: { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 2] }, _meta: { title: 'Output' } },
  9: {
    class_type: 'SaveImage',
    inputs: { filename_prefix: 'graph-gen', images: ['8', 0] },
    _meta: { title: 'Output' },
  },
};

/** The same kind of graph as the graph editor saves it (UI format): a checkpoint loader wired into a prompt. */
const UI_WORKFLOW = require('../fixtures/ui/checkpoint-prompt.json');

const FORM = '#graph-gen-submit-form';
const section = (id) => `${FORM} .graph-gen-submit-section[data-node="${id}"]`;
const row = (id, input) => `${section(id)} .graph-gen-submit-input[data-input="${input}"]`;

/** Waits until the dialog has the server's answer about its node definitions; returns the sentence. */
async function definitionsSentence(page) {
  const sentence = page.locator('#graph-gen-submit-definitions');
  await page.waitForFunction(() => !/Reading/.test($('#graph-gen-submit-definitions').text()));
  return sentence.innerText();
}

function editorWorkflow(page, id) {
  return page.evaluate((nodeId) => JSON.parse(RED.nodes.node(nodeId).editor.getValue()), id);
}

describe('submit dialog: the workflow as a form with the server’s choices', function () {
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
  });

  after(async () => {
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  it('shows a loaded workflow as a form: one section per node by title, value inputs with the server’s widgets (config not yet deployed)', async () => {
    configId = await editor.addGenerationConfig(page, 'form server', ctx.sandboxUrl, ctx.keys.generation);
    submitId = await editor.dropFromPalette(page, 'graph-gen-submit');
    await editor.openNodeDialog(page, submitId);
    await editor.setField(page, 'node-input-server', configId);
    await page.setInputFiles('#graph-gen-submit-file', {
      name: 'text-to-image.json',
      mimeType: 'application/json',
      buffer: Buffer.from(JSON.stringify(WORKFLOW)),
    });
    await page.locator(section(9)).waitFor();
    assert.match(await definitionsSentence(page), /server's choices \(\d+ node types\)/);
    assert.ok(await page.locator(FORM).isVisible(), 'the form view is not shown after loading a file');

    const titles = await page.locator(`${FORM} .graph-gen-submit-section-title b`).allInnerTexts();
    assert.deepStrictEqual(titles, [
      'KSampler',
      'Load Checkpoint',
      'EmptyLatentImage',
      'Positive prompt',
      'Negative prompt',
      'Output',
      'Output',
    ]);
    const inputs = await page
      .locator(`${section(3)} .graph-gen-submit-input`)
      .evaluateAll((rows) => rows.map((element) => element.getAttribute('data-input')));
    assert.deepStrictEqual(inputs, ['seed', 'steps', 'cfg', 'sampler_name', 'scheduler', 'denoise']);
    assert.match(await page.locator(section(8)).innerText(), /No values to set: its inputs are all links/);

    const checkpoints = await page.locator(`${row(4, 'ckpt_name')} select option`).allInnerTexts();
    assert.deepStrictEqual(checkpoints, ['sd_xl_base_1.0.safetensors', 'v1-5-pruned-emaonly.safetensors']);
    const steps = page.locator(`${row(3, 'steps')} input[type=number]`);
    assert.deepStrictEqual(await steps.evaluate((input) => [input.value, input.min, input.max, input.step]), [
      '20',
      '1',
      '10000',
      '1',
    ]);
    assert.strictEqual(
      await page.locator(`${row(6, 'text')} textarea`).inputValue(),
      'a lighthouse on a cliff at dawn, oil painting',
    );
    assert.ok(await page.locator(`${row(9, 'filename_prefix')} input[type=text]`).isVisible());
    // "New seed each run" is on for a new node: the seed says so.
    assert.ok(await page.locator('#node-input-newSeed').isChecked());
    assert.ok(await page.locator(`${row(3, 'seed')} .graph-gen-submit-seed`).isVisible());
    await editor.closeDialog(page, 'node-dialog-ok');
  });

  it('edits in the form change the stored workflow; "set by msg" shows the msg.inputs path; both survive a deploy and a reload', async () => {
    await editor.openNodeDialog(page, submitId);
    await page.locator(section(9)).waitFor();
    await page.locator(`${row(3, 'sampler_name')} select`).selectOption({ label: 'dpmpp_2m' });
    await page.locator(`${row(3, 'steps')} input.graph-gen-submit-widget`).fill('12');
    await page.locator(`${row(6, 'text')} textarea`).fill('a lighthouse in a storm');
    const stored = await editorWorkflow(page, submitId);
    assert.strictEqual(stored['3'].inputs.sampler_name, 'dpmpp_2m');
    assert.strictEqual(stored['3'].inputs.steps, 12);
    assert.strictEqual(stored['6'].inputs.text, 'a lighthouse in a storm');
    assert.deepStrictEqual(stored['3'].inputs.model, ['4', 0], 'a link was changed');

    await page.locator(`${row(6, 'text')} .graph-gen-submit-mark input`).check();
    await page.locator(`${row(9, 'filename_prefix')} .graph-gen-submit-mark input`).check();
    assert.strictEqual(
      await page.locator(`${row(6, 'text')} .graph-gen-submit-path code`).innerText(),
      'msg.inputs["Positive prompt"].text',
    );
    // Two nodes are titled "Output": the path names the node by its id.
    assert.strictEqual(
      await page.locator(`${row(9, 'filename_prefix')} .graph-gen-submit-path code`).innerText(),
      'msg.inputs["9"].filename_prefix',
    );
    assert.ok(!(await page.locator(`${row(3, 'steps')} .graph-gen-submit-path`).isVisible()));
    // A taller window shows the whole form in the screenshot (the tray follows the window's size).
    await page.setViewportSize({ width: 1400, height: 1500 });
    await page.waitForTimeout(500);
    const file = await screenshot(page, 'submit-form', page.locator('.red-ui-tray').last());
    await page.setViewportSize({ width: 1400, height: 900 });
    if (process.env.DOCS_SCREENSHOTS === '1') fs.copyFileSync(file, DOCS_SCREENSHOT);

    // The JSON view shows the same workflow.
    await page.click('#graph-gen-submit-view-json');
    assert.ok(await page.locator('#node-input-workflow-editor').isVisible());
    assert.match(
      await page.locator('#graph-gen-submit-nodes').innerText(),
      /6\s*CLIPTextEncode "Positive prompt": text/,
    );
    await editor.closeDialog(page, 'node-dialog-ok');

    const saved = await page.evaluate((id) => {
      const node = RED.nodes.node(id);
      return {
        workflow: JSON.parse(node.workflow),
        setByMsg: node.setByMsg,
        newSeed: node.newSeed,
        valid: node.valid,
      };
    }, submitId);
    assert.strictEqual(saved.workflow['3'].inputs.steps, 12);
    assert.deepStrictEqual(saved.setByMsg, { 6: ['text'], 9: ['filename_prefix'] });
    assert.strictEqual(saved.newSeed, true);
    assert.strictEqual(saved.valid, true);
    await editor.deploy(page);

    await page.reload();
    await editor.waitForEditor(page);
    await editor.openNodeDialog(page, submitId);
    // Deployed now: the definitions are read with the stored key, which never reached this page.
    assert.match(await definitionsSentence(page), /server's choices/);
    await page.locator(section(9)).waitFor();
    assert.strictEqual(
      await page.locator(`${row(3, 'steps')} input.graph-gen-submit-widget`).inputValue(),
      '12',
    );
    assert.strictEqual(
      await page.locator(`${row(3, 'sampler_name')} select option:checked`).innerText(),
      'dpmpp_2m',
    );
    assert.ok(await page.locator(`${row(6, 'text')} .graph-gen-submit-mark input`).isChecked());
    assert.strictEqual(
      await page.locator(`${row(6, 'text')} .graph-gen-submit-path code`).innerText(),
      'msg.inputs["Positive prompt"].text',
    );
    const checkpoints = await page.locator(`${row(4, 'ckpt_name')} select option`).allInnerTexts();
    assert.deepStrictEqual(checkpoints, ['sd_xl_base_1.0.safetensors', 'v1-5-pruned-emaonly.safetensors']);
    await editor.closeDialog(page, 'node-dialog-cancel');
  });

  it('marks a model the server does not offer in the dialog, and the node gets Node-RED’s invalid marker', async () => {
    await editor.openNodeDialog(page, submitId);
    await page.locator(section(4)).waitFor();
    const missing = structuredClone(WORKFLOW);
    missing['4'].inputs.ckpt_name = 'missing-model.safetensors';
    await editor.setCode(page, submitId, JSON.stringify(missing, null, 2));
    const checkpoint = page.locator(row(4, 'ckpt_name'));
    assert.match(await checkpoint.getAttribute('class'), /graph-gen-submit-missing/);
    assert.match(
      await checkpoint.locator('.graph-gen-submit-problem').innerText(),
      /The server does not offer "missing-model.safetensors"/,
    );
    assert.strictEqual(
      await checkpoint.locator('select option:checked').innerText(),
      'missing-model.safetensors (not on the server)',
    );
    await editor.closeDialog(page, 'node-dialog-ok');
    const marker = await page.evaluate((id) => {
      const node = RED.nodes.node(id);
      const badge = document.getElementById(id)?.querySelector('.red-ui-flow-node-error');
      let shown = Boolean(badge);
      for (let element = badge; shown && element && element.id !== id; element = element.parentElement)
        shown = getComputedStyle(element).display !== 'none';
      return { valid: node.valid, errors: node.validationErrors, shown };
    }, submitId);
    assert.strictEqual(marker.valid, false);
    assert.ok(marker.shown, 'the invalid marker is not shown on the node');
    assert.match(String(marker.errors), /does not offer missing-model.safetensors for ckpt_name/);

    // Picking a model the server has clears both.
    await editor.openNodeDialog(page, submitId);
    await page.locator(row(4, 'ckpt_name')).waitFor();
    await page
      .locator(`${row(4, 'ckpt_name')} select`)
      .selectOption({ label: 'v1-5-pruned-emaonly.safetensors' });
    assert.doesNotMatch(await page.locator(row(4, 'ckpt_name')).getAttribute('class'), /missing/);
    await editor.closeDialog(page, 'node-dialog-ok');
    assert.strictEqual(await page.evaluate((id) => RED.nodes.node(id).valid, submitId), true);
  });

  it('converts a pasted UI-format workflow, shows it as the form, and keeps the API format when asked', async () => {
    await editor.openNodeDialog(page, submitId);
    await page.click('#graph-gen-submit-view-json');
    await editor.setCode(page, submitId, JSON.stringify(UI_WORKFLOW, null, 2));
    await page.locator('#graph-gen-submit-keep-api').waitFor();
    assert.match(await page.locator('#graph-gen-submit-ui-text').innerText(), /UI-format workflow/);
    assert.ok(await page.locator(FORM).isVisible(), 'the converted workflow is not shown as the form');
    // Titled as the graph editor would: the node's own title, else its type's display name.
    assert.deepStrictEqual(await page.locator(`${FORM} .graph-gen-submit-section-title b`).allInnerTexts(), [
      'Checkpoint Loader Simple',
      'Positive prompt',
    ]);
    assert.strictEqual(await page.locator(`${row(2, 'text')} textarea`).inputValue(), 'a lighthouse at dusk');
    assert.ok(
      await page.locator(`${row(2, 'text')} textarea`).isDisabled(),
      'the UI format is edited in the form',
    );
    assert.ok(
      Array.isArray((await editorWorkflow(page, submitId)).nodes),
      'converted before the user agreed',
    );

    await page.click('#graph-gen-submit-keep-api');
    await page.waitForTimeout(600);
    const kept = await editorWorkflow(page, submitId);
    assert.deepStrictEqual(kept['2'].inputs, { text: 'a lighthouse at dusk', clip: ['1', 1] });
    assert.strictEqual(kept['1'].inputs.ckpt_name, 'v1-5-pruned-emaonly.safetensors');
    assert.ok(!(await page.locator('#graph-gen-submit-ui').isVisible()));
    await page.locator(`${row(2, 'text')} textarea`).fill('kept as API format');
    assert.strictEqual((await editorWorkflow(page, submitId))['2'].inputs.text, 'kept as API format');
    await editor.closeDialog(page, 'node-dialog-ok');
    const saved = await page.evaluate((id) => JSON.parse(RED.nodes.node(id).workflow), submitId);
    assert.strictEqual(saved['2'].inputs.text, 'kept as API format');
  });

  it('says in a sentence when the server cannot be reached, and the form still works from the values', async () => {
    const unreachable = await editor.addGenerationConfig(
      page,
      'closed server',
      'http://127.0.0.1:9',
      'any-key',
    );
    const id = await editor.dropFromPalette(page, 'graph-gen-submit');
    await editor.openNodeDialog(page, id);
    await editor.setField(page, 'node-input-server', unreachable);
    await page.setInputFiles('#graph-gen-submit-file', {
      name: 'text-to-image.json',
      mimeType: 'application/json',
      buffer: Buffer.from(JSON.stringify(WORKFLOW)),
    });
    assert.match(
      await definitionsSentence(page),
      /127\.0\.0\.1:9 could not be reached, so its node definitions cannot be shown: check the address/,
    );
    await page.locator(section(9)).waitFor();
    assert.strictEqual(await page.locator(`${FORM} .graph-gen-submit-section`).count(), 7);
    await page.locator(`${row(3, 'steps')} input[type=number]`).fill('30');
    assert.strictEqual((await editorWorkflow(page, id))['3'].inputs.steps, 30);
    // Without definitions nothing can be called missing.
    assert.strictEqual(await page.locator(`${FORM} .graph-gen-submit-missing`).count(), 0);
    await editor.closeDialog(page, 'node-dialog-cancel');
    await page.evaluate(
      (ids) => {
        for (const nodeId of ids) RED.nodes.remove(nodeId);
        RED.nodes.dirty(true);
        RED.view.redraw(true);
      },
      [id, unreachable],
    );
  });
});
