'use strict';
/* global window, document, getComputedStyle, MutationObserver -- these run inside the dashboard page */
// The prompt-to-picture dashboard (example 08) as a user drives it: Node-RED prepared the way `npm start`
// prepares it (every example deployed, the dashboard package put into the user dir), the sandbox in this
// process as a self-hosted server (one job at a time, run times reported: waits can be estimated; slow enough
// steps to watch, its queue held still for the cancel), Chromium on /dashboard.
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const start = require('../../scripts/start.js');
const { startSandbox } = require('../../dist/sandbox');
const { fileKey } = require('../../dist/sandbox/generation-jobs');

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const DOCS_SCREENSHOT = path.join(__dirname, '..', '..', 'docs', 'dashboard.png');
const SCREENSHOTS = path.join(__dirname, '..', 'screenshots');
const DASHBOARD = '@flowfuse/node-red-dashboard';
const AUTOMATION_KEY = 'dashboard-automation-key-29';
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The bytes of a `data:` URL. */
function dataUrlBytes(url) {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  assert.ok(match, `not a base64 data URL: ${String(url).slice(0, 60)}`);
  return { type: match[1], bytes: Buffer.from(match[2], 'base64') };
}

/** A row of the form, by its field's key (the ui-form node marks each row with it). */
const field = (key) => `.nrdb-ui-form [data-form="form-row-${key}"]`;

/** Polls `predicate` until true, or fails with `what` after `ms`. */
async function until(predicate, what, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A workflow of another client's for the sandbox, with `extra` nodes (SandboxHang: runs until interrupted). */
const otherWorkflow = (extra = {}) => ({
  1: { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
  2: { class_type: 'KSampler', inputs: { steps: 3, seed: 1, model: ['1', 0] } },
  3: { class_type: 'SaveImage', inputs: { filename_prefix: 'other', images: ['2', 0] } },
  ...extra,
});

/** The text a widget shows, its white space as one space. */
const shownText = async (locator) => (await locator.textContent()).replace(/\s+/g, ' ').trim();

/** Fills the form and presses generate; without `size`, the size the form shows is kept. */
async function generate(page, { prompt, negative, size, newSeed }) {
  await page.locator(`${field('prompt')} textarea`).fill(prompt);
  await page.locator(`${field('negative')} input`).fill(negative);
  if (size !== undefined) {
    await page.locator(`${field('size')} .v-field`).click();
    await page.locator('.v-overlay .v-list-item', { hasText: size }).click();
    await page.locator('.v-overlay .v-list-item').first().waitFor({ state: 'hidden' });
  }
  const seedSwitch = page.locator(`${field('newSeed')} input[type="checkbox"]`);
  if ((await seedSwitch.isChecked()) !== newSeed) await seedSwitch.click();
  await page.getByRole('button', { name: 'generate' }).click();
}

describe('dashboard example: the prompt-to-picture page in a real browser', function () {
  this.timeout(60000);
  let tmp;
  let sandbox;
  let nodeRed;
  let browser;
  let page;
  const logs = [];
  const problems = [];

  before(async function () {
    this.timeout(120000);
    // Steps slow enough that previews and progress reach the page while a job runs (a job takes ~3 s).
    // Self-hosted (no generation key): one job at a time, and the job list with run times.
    sandbox = await startSandbox({
      automation: { apiKey: AUTOMATION_KEY, workflows: 3 },
      events: { stepDelayMs: 250 },
    });
    // A job of another client's ends before any of the page's: whenever Node-RED first reads the server's recent
    // run times (for a waiting job's estimate, then kept a minute), there is one.
    const earlier = sandbox.jobs.submit(otherWorkflow(), 'another-client');
    await until(() => earlier.state === 'completed', 'the earlier job to end');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-dashboard-'));
    const userDir = path.join(tmp, 'user');
    const port = await start.freePort();
    const services = {
      generation: { url: sandbox.url },
      automation: { url: sandbox.url, apiKey: AUTOMATION_KEY },
    };
    const prepared = start.prepareUserDir(userDir, { port, services });
    assert.strictEqual(prepared.count, start.readExamples().length);
    nodeRed = await start.startNodeRed({
      userDir,
      port,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        GRAPH_GEN_URL: sandbox.url,
        GRAPH_GEN_URL_2: sandbox.url, // example 10's server B, deployed with the other examples
        GRAPH_GEN_API_KEY: '',
        GRAPH_GEN_PARTNER_KEY: '',
        AUTOMATION_URL: sandbox.url,
        AUTOMATION_API_KEY: AUTOMATION_KEY,
      },
      onOutput: (line) => logs.push(line),
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.setDefaultTimeout(10000);
    page.on('pageerror', (error) => problems.push(String(error)));
  });

  after(async function () {
    this.timeout(30000);
    await browser?.close().catch(() => undefined);
    await start.stopProcesses([nodeRed?.child]);
    await sandbox?.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('npm start deploys it with the other examples, and Node-RED says nothing is wrong', async () => {
    const starting = logs.findIndex((line) => /Starting flows/.test(line));
    assert.ok(
      starting >= 0 && logs.some((line) => /Started flows/.test(line)),
      `Node-RED did not start the flows:\n${logs.join('\n')}`,
    );
    const flowLines = logs.slice(starting);
    const complaints = flowLines.filter((line) => /\[(error|warn)\]/.test(line));
    assert.deepStrictEqual(complaints, [], 'Node-RED logged errors or warnings when it started the examples');
    assert.ok(
      logs.some((line) => /Dashboard 2\.0 .* started at \/dashboard/.test(line)),
      'the dashboard did not start',
    );
  });

  it('starts each visitor\'s form with the first size: "generate" is enabled once a prompt is typed, no size picked', async () => {
    await page.goto(`${nodeRed.url}dashboard`);
    await page.waitForURL(/\/dashboard\/prompt-to-picture$/);
    const button = page.getByRole('button', { name: 'generate' });
    await page
      .locator(`${field('size')} .v-select__selection`, { hasText: '1024 × 1024 (square)' })
      .waitFor();
    await page.locator(`${field('prompt')} textarea`).fill('a quiet harbour at night');
    await page.locator(`${field('prompt')} textarea`).blur();
    assert.strictEqual(await button.isEnabled(), true, '"generate" stays disabled with a prompt typed');

    // Another visitor opening the page gets the defaults in their own form: this one's pick stays.
    await page.locator(`${field('size')} .v-field`).click();
    await page.locator('.v-overlay .v-list-item', { hasText: '512 × 512' }).click();
    await page.locator('.v-overlay .v-list-item').first().waitFor({ state: 'hidden' });
    const other = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      await other.goto(`${nodeRed.url}dashboard`);
      await other.locator(`${field('size')} .v-select__selection`, { hasText: '1024 × 1024' }).waitFor();
      await other.getByRole('button', { name: 'generate' }).waitFor();
    } finally {
      await other.close();
    }
    assert.strictEqual(
      await shownText(page.locator(`${field('size')} .v-select__selection`)),
      '512 × 512 (quick)',
    );
    assert.deepStrictEqual(problems, [], 'the dashboard page threw');
  });

  it("draws a typed prompt's first line below the field's label, where the field's fade at the top has ended (1400 × 900)", async () => {
    await page.goto(`${nodeRed.url}dashboard`);
    await page.waitForURL(/\/dashboard\/prompt-to-picture$/);
    const textarea = page.locator(`${field('prompt')} textarea`);
    await textarea.fill('a red fox in fresh snow, watercolour');
    const { line, label, fadeEnd } = await page.evaluate((selector) => {
      const row = document.querySelector(selector);
      const area = row.querySelector('textarea');
      const box = area.getBoundingClientRect();
      const style = getComputedStyle(area);
      const top = box.top + parseFloat(style.borderTopWidth) + parseFloat(style.paddingTop);
      const lineHeight = parseFloat(style.lineHeight);
      // Vuetify fades the top of a textarea (a mask, transparent to opaque) so text scrolled up passes under the
      // label: where it turns opaque, text is drawn whole.
      const opaque = /rgb\(0, 0, 0\) ([\d.]+)px/.exec(style.maskImage || style.webkitMaskImage || '');
      return {
        // The first line's box, and where its glyphs begin (the font's em box, centred in the line).
        line: { top, bottom: top + lineHeight, glyphs: top + (lineHeight - parseFloat(style.fontSize)) / 2 },
        label: row.querySelector('.v-field-label--floating').getBoundingClientRect().toJSON(),
        fadeEnd: opaque ? box.top + Number(opaque[1]) : box.top,
      };
    }, field('prompt'));
    // For a look: test/screenshots/ (not kept in git).
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    await page
      .locator('.nrdb-ui-form')
      .screenshot({ path: path.join(SCREENSHOTS, 'dashboard-prompt-field.png') });
    assert.ok(
      line.top >= label.bottom,
      `the first line (from y ${line.top}) starts under the label (down to y ${label.bottom})`,
    );
    assert.ok(
      line.glyphs >= fadeEnd - 0.5,
      `the first line's text (from y ${line.glyphs}) is drawn in the fade at the field's top (to y ${fadeEnd})`,
    );
    assert.deepStrictEqual(problems, [], 'the dashboard page threw');
  });

  it('runs a job from the form: previews change, the progress bar fills, the picture (a PNG) lands in the gallery', async () => {
    await page.goto(`${nodeRed.url}dashboard`);
    await page.waitForURL(/\/dashboard\/prompt-to-picture$/);
    await page.getByRole('button', { name: 'generate' }).waitFor();
    // Every preview src and progress value the page shows, however briefly.
    await page.evaluate(() => {
      window.seen = { previews: [], progress: [] };
      const record = () => {
        const image = document.querySelector('.gg-preview-image');
        const src = image ? image.getAttribute('src') : '';
        if (window.seen.previews.at(-1) !== src) window.seen.previews.push(src);
        const bar = document.querySelector('.nrdb-ui-progress-wrapper [role="progressbar"]');
        const value = bar ? Number(bar.getAttribute('aria-valuenow')) : NaN;
        if (window.seen.progress.at(-1) !== value) window.seen.progress.push(value);
      };
      record();
      new MutationObserver(record).observe(document.body, {
        subtree: true,
        childList: true,
        attributes: true,
        attributeFilter: ['src', 'aria-valuenow'],
      });
    });

    const prompt = 'a red fox in fresh snow, watercolour';
    await generate(page, { prompt, negative: 'text, watermark', size: '512 × 512', newSeed: true });
    const picture = page.locator('.gg-picture img').first();
    await picture.waitFor({ timeout: 20000 });

    const job = [...sandbox.jobs.jobs.values()].at(-1);
    assert.strictEqual(job.state, 'completed');
    assert.strictEqual(job.prompt['6'].inputs.text, prompt);
    assert.strictEqual(job.prompt['7'].inputs.text, 'text, watermark');
    assert.deepStrictEqual([job.prompt['5'].inputs.width, job.prompt['5'].inputs.height], [512, 512]);
    assert.notStrictEqual(job.prompt['3'].inputs.seed, 42, 'the "new seed" switch did not renew the seed');

    const seen = await page.evaluate(() => window.seen);
    const previews = seen.previews.filter((src) => src && src.startsWith('data:image/'));
    assert.ok(previews.length >= 1, `no preview image was shown: ${JSON.stringify(seen.previews)}`);
    assert.notStrictEqual(seen.previews[0], previews[0], 'the preview image did not change');
    assert.match(dataUrlBytes(previews[0]).type, /^image\/(jpeg|png)$/);
    await page.waitForFunction(() => window.seen.progress.at(-1) === 100);
    const progress = await page.evaluate(() => window.seen.progress);
    assert.ok(
      progress.some((value) => value > 0 && value < 100),
      `the progress bar jumped to the end without steps: ${progress}`,
    );

    const { type, bytes } = dataUrlBytes(await picture.getAttribute('src'));
    assert.strictEqual(type, 'image/png');
    assert.deepStrictEqual(bytes.subarray(0, 8), PNG_SIGNATURE, 'the gallery picture is not a PNG');
    const [file] = job.outputs['9'].images;
    const made = sandbox.jobs.files.get(fileKey(file)).content;
    assert.deepStrictEqual(bytes, Buffer.from(made), 'not the picture the job made');
    assert.match(await page.locator('.gg-picture figcaption').first().innerText(), /a red fox in fresh snow/);
    assert.deepStrictEqual(problems, [], 'the dashboard page threw');
  });

  it('cancels a second job from the queue list', async () => {
    // Held in the queue (the sandbox does not start it), as on a busy server.
    sandbox.events.options.autoRun = false;
    try {
      const prompt = 'a job that waits and is cancelled';
      await generate(page, { prompt, negative: '', size: '1024 × 1024', newSeed: false });
      const row = page.locator('.gg-job', { hasText: prompt });
      await row.waitFor();
      assert.match(await row.innerText(), /waiting/i);
      const id = await row.getAttribute('data-prompt-id');
      const job = sandbox.jobs.jobs.get(id);
      assert.strictEqual(job.state, 'pending');
      // "New seed" off: the seed of the last picture, not a new one.
      const last = [...sandbox.jobs.jobs.values()]
        .filter((other) => other.state === 'completed' && other.prompt['6'])
        .at(-1);
      assert.strictEqual(job.prompt['3'].inputs.seed, last.prompt['3'].inputs.seed);
      // Where the page shows the progress: its place in the queue (no job before it).
      const place = page.locator('.gg-place');
      await place.waitFor();
      assert.strictEqual(await shownText(place), 'waiting next in line');

      // The page after a run: the last job's preview, its full progress bar, its picture, a job waiting.
      assert.match(await page.locator('.gg-preview-image').getAttribute('src'), /^data:image\//);
      assert.strictEqual(
        await page.locator('.nrdb-ui-progress-wrapper [role="progressbar"]').getAttribute('aria-valuenow'),
        '100',
      );
      if (process.env.DOCS_SCREENSHOTS === '1') {
        await page.locator('body').click({ position: { x: 700, y: 860 } });
        await page.waitForTimeout(500);
        await page.screenshot({ path: DOCS_SCREENSHOT });
      }

      await row.getByRole('button', { name: 'cancel' }).click();
      await row.waitFor({ state: 'detached' });
      // Taken out of the queue: a self-hosted server forgets it.
      assert.strictEqual(sandbox.jobs.jobs.has(id), false, 'the job is still in the queue');
      await page.locator('.v-snackbar', { hasText: 'cancelled' }).waitFor();
      assert.match(await page.locator('.v-snackbar').innerText(), new RegExp(`${prompt}.*cancelled`));
      await page.getByText('No job running or waiting.').waitFor();
      await place.waitFor({ state: 'detached' });
      assert.strictEqual(await page.locator('.gg-picture').count(), 1, 'the cancelled job made a picture');
      assert.deepStrictEqual(problems, [], 'the dashboard page threw');
    } finally {
      sandbox.events.options.autoRun = true;
    }
  });

  it("shows the newest job's place in the queue and an estimate of its wait while it waits, and clears it once it runs", async () => {
    // The server runs one job at a time: another client's job holds it, and one more waits before ours.
    const running = sandbox.jobs.submit(
      otherWorkflow({ 9: { class_type: 'SandboxHang', inputs: {} } }),
      'another-client',
    );
    const before = sandbox.jobs.submit(otherWorkflow(), 'another-client');
    try {
      await until(() => running.state === 'in_progress', 'the other job to run');
      await page.goto(`${nodeRed.url}dashboard`);
      await page.waitForURL(/\/dashboard\/prompt-to-picture$/);
      await page.locator(`${field('size')} .v-select__selection`, { hasText: '1024 × 1024' }).waitFor();
      const place = page.locator('.gg-place');
      assert.strictEqual(await place.count(), 0, 'a place is shown before any job of the page waits');
      const prompt = 'a job that waits its turn';
      await generate(page, { prompt, negative: '', newSeed: true });

      await place.waitFor();
      assert.match(await shownText(place), /^waiting 2 ahead, about [1-9]\d* s \(an estimate\)$/);
      // The job before it leaves the queue: one ahead now.
      sandbox.jobs.remove(before.id);
      await page.locator('.gg-place', { hasText: '1 ahead' }).waitFor();
      assert.match(await shownText(place), /^waiting 1 ahead, about [1-9]\d* s \(an estimate\)$/);

      // Its turn: the place goes, the job runs and its picture lands (the size the form started with).
      sandbox.jobs.interrupt(running.id);
      await place.waitFor({ state: 'detached' });
      await page.locator('.gg-picture figcaption', { hasText: prompt }).waitFor({ timeout: 20000 });
      const job = [...sandbox.jobs.jobs.values()].find((each) => each.prompt['6']?.inputs.text === prompt);
      assert.strictEqual(job.state, 'completed');
      assert.deepStrictEqual([job.prompt['5'].inputs.width, job.prompt['5'].inputs.height], [1024, 1024]);
      assert.strictEqual(await place.count(), 0, 'the place came back after the job ran');
      assert.deepStrictEqual(problems, [], 'the dashboard page threw');
    } finally {
      sandbox.jobs.remove(before.id);
      sandbox.jobs.interrupt(running.id);
    }
  });
});

describe('npm start: the dashboard package in the user dir', () => {
  let tmp;
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-dashboard-dir-'));
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it('links the dev dependency copy when this repo has one', () => {
    const userDir = path.join(tmp, 'user');
    fs.mkdirSync(userDir);
    const calls = [];
    const result = start.ensureDashboard(userDir, { install: (...args) => calls.push(args) });
    assert.deepStrictEqual(result, { dashboard: 'linked' });
    assert.deepStrictEqual(calls, []);
    const linked = path.join(userDir, 'node_modules', DASHBOARD);
    assert.strictEqual(
      fs.realpathSync(linked),
      fs.realpathSync(path.dirname(require.resolve(`${DASHBOARD}/package.json`))),
    );
  });

  it('installs it with npm into the user dir when missing and there is no dev copy, once, keeping our package linked', () => {
    const userDir = path.join(tmp, 'user');
    const calls = [];
    // Stands in for npm (no network in a unit of this): writes what `npm install --prefix` would.
    const install = (command, args, options) => {
      calls.push({ command, args, cwd: options.cwd });
      const folder = path.join(userDir, 'node_modules', DASHBOARD);
      fs.mkdirSync(folder, { recursive: true });
      fs.writeFileSync(path.join(folder, 'package.json'), '{"name":"@flowfuse/node-red-dashboard"}');
      return { status: 0 };
    };
    const options = { port: 1880, services: {}, flows: 'none' };
    const dashboard = { devCopy: null, install, log: () => undefined };
    start.prepareUserDir(userDir, { ...options, dashboard });
    start.prepareUserDir(userDir, { ...options, dashboard });
    const range = require('../../package.json').devDependencies[DASHBOARD];
    assert.deepStrictEqual(calls, [
      {
        command: 'npm',
        args: ['install', '--prefix', userDir, '--no-audit', '--no-fund', '--save', `${DASHBOARD}@${range}`],
        cwd: userDir,
      },
    ]);
    assert.strictEqual(
      fs.realpathSync(path.join(userDir, 'node_modules', '@graph-gen', 'node-red')),
      fs.realpathSync(path.join(__dirname, '..', '..')),
    );
  });

  it('says how to fix it when npm cannot install it', () => {
    const userDir = path.join(tmp, 'user');
    fs.mkdirSync(userDir);
    assert.throws(
      () =>
        start.ensureDashboard(userDir, {
          devCopy: null,
          install: () => ({ status: 1 }),
          log: () => undefined,
        }),
      /npm could not install @flowfuse\/node-red-dashboard into .* \(exit 1\); install it there by hand/,
    );
  });
});
