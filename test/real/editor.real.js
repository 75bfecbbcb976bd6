'use strict';
/* global RED, $ -- these run inside the editor page */
// The submit dialog against a real ComfyUI: a Node-RED whose config node points at the server, opened in
// Chromium. The form's dropdowns are the server's own lists (its samplers and schedulers, the images in its
// input/ folder), a model it lacks is marked, and the refresh button reads the lists again.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const start = require('../../scripts/start.js');
const { comfy } = require('./support/comfy');
const { prefix } = require('./support/server');
const { encodePng } = require('./support/png');
const { waitForEditor, openNodeDialog, dismissAll } = require('../browser/support/editor');

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

async function uploadImage(name) {
  const form = new FormData();
  form.append('image', new Blob([encodePng(8, 8, () => [20, 120, 220, 255])], { type: 'image/png' }), name);
  form.append('overwrite', 'true');
  const answer = await fetch(`${comfy.url}/api/upload/image`, { method: 'POST', body: form });
  const text = await answer.text();
  assert.equal(answer.status, 200, text);
  return JSON.parse(text).name;
}

/** A sampler graph (it cannot run here: there are no weights) that loads an image from input/. */
function workflowWith(image) {
  return {
    3: {
      class_type: 'KSampler',
      inputs: {
        seed: 7,
        steps: 20,
        cfg: 7,
        sampler_name: 'euler',
        scheduler: 'normal',
        denoise: 1,
        model: ['4', 0],
        positive: ['6', 0],
        negative: ['6', 0],
        latent_image: ['5', 0],
      },
      _meta: { title: 'KSampler' },
    },
    4: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'v1-5-pruned-emaonly.safetensors' } },
    5: { class_type: 'EmptyLatentImage', inputs: { width: 512, height: 512, batch_size: 1 } },
    6: { class_type: 'CLIPTextEncode', inputs: { text: 'a lighthouse', clip: ['4', 1] } },
    10: { class_type: 'LoadImage', inputs: { image }, _meta: { title: 'Input image' } },
  };
}

describe('real ComfyUI: the submit dialog shows the server’s choices', function () {
  this.timeout(120_000);
  const children = [];
  let tmp;
  let browser;
  let page;
  const problems = [];
  let firstImage;

  before(async () => {
    firstImage = await uploadImage(`${prefix('editor')}.png`);
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-real-editor-'));
    const userDir = path.join(tmp, 'user');
    const port = await start.freePort();
    start.prepareUserDir(userDir, { port, services: {}, flows: 'none' });
    // The flow a user deployed: a config node at the server (self-hosted, no key) and a submit node.
    const flows = [
      { id: 'tab', type: 'tab', label: 'real editor' },
      { id: 'cfg', type: 'graph-gen-config', name: 'real ComfyUI', baseUrl: comfy.url },
      {
        id: 'sub',
        z: 'tab',
        type: 'graph-gen-submit',
        server: 'cfg',
        workflow: JSON.stringify(workflowWith(firstImage), null, 2),
        newSeed: true,
        partner: 'auto',
        check: false,
        x: 200,
        y: 100,
        wires: [[]],
      },
    ];
    fs.writeFileSync(path.join(userDir, 'flows.json'), JSON.stringify(flows, null, 2));
    const nodeRed = await start.startNodeRed({ userDir, port, stdio: ['ignore', 'ignore', 'ignore'] });
    children.push(nodeRed.child);
    browser = await chromium.launchPersistentContext(path.join(tmp, 'chromium'), {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1400, height: 1200 },
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
    page = await browser.newPage();
    page.setDefaultTimeout(20_000);
    page.on('pageerror', (error) => problems.push(String(error)));
    await page.goto(nodeRed.url);
    await waitForEditor(page);
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await start.stopProcesses(children);
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  afterEach(async () => {
    await dismissAll(page);
    assert.deepEqual(problems.splice(0), [], 'the editor page threw');
  });

  const row = (id, input) =>
    `#graph-gen-submit-form .graph-gen-submit-section[data-node="${id}"] .graph-gen-submit-input[data-input="${input}"]`;

  async function definitionsRead() {
    await page.waitForFunction(() => /server's choices/.test($('#graph-gen-submit-definitions').text()));
  }

  it('lists the server’s samplers, schedulers and input images in the form, and marks the checkpoint it lacks', async () => {
    await openNodeDialog(page, 'sub');
    await definitionsRead();
    const samplers = await page.locator(`${row(3, 'sampler_name')} select option`).allInnerTexts();
    // The real server's list, not the sandbox's three.
    for (const sampler of ['euler', 'euler_ancestral', 'dpmpp_2m_sde', 'uni_pc_bh2']) {
      assert.ok(samplers.includes(sampler), `no ${sampler} among ${samplers.join(', ')}`);
    }
    assert.ok(samplers.length > 20, `only ${samplers.length} samplers`);
    assert.ok(
      (await page.locator(`${row(3, 'scheduler')} select option`).allInnerTexts()).includes('karras'),
    );
    const images = await page.locator(`${row(10, 'image')} select option`).allInnerTexts();
    assert.ok(images.includes(firstImage), `${firstImage} is not among the input images`);
    // No weights on this server: the checkpoint is not offered, and the dialog says so.
    assert.match(
      await page.locator(`${row(4, 'ckpt_name')} .graph-gen-submit-problem`).innerText(),
      /The server does not offer "v1-5-pruned-emaonly.safetensors"/,
    );
    await page.locator(`${row(3, 'sampler_name')} select`).selectOption({ label: 'dpmpp_2m_sde' });
    const stored = await page.evaluate(() => JSON.parse(RED.nodes.node('sub').editor.getValue()));
    assert.equal(stored['3'].inputs.sampler_name, 'dpmpp_2m_sde');
    await page.click('#node-dialog-cancel');
  });

  it('reads the lists again on refresh: an image uploaded since appears', async () => {
    await openNodeDialog(page, 'sub');
    await definitionsRead();
    const later = await uploadImage(`${prefix('editor-later')}.png`);
    assert.ok(!(await page.locator(`${row(10, 'image')} select option`).allInnerTexts()).includes(later));
    // A server's definitions are read again at most every 10 s, however often refresh is asked.
    await new Promise((resolve) => setTimeout(resolve, 10_500));
    await page.click('#graph-gen-submit-refresh');
    await page.waitForFunction(
      ([selector, name]) =>
        $(selector)
          .toArray()
          .some((option) => $(option).text() === name),
      [`${row(10, 'image')} select option`, later],
    );
    await page.click('#node-dialog-cancel');
  });
});
