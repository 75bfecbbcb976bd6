'use strict';
// One real Node-RED (its own temporary user dir, this package linked in) and one sandbox process, shared by
// every browser test file, plus one Chromium. Started by the first file that asks, stopped after the run.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const start = require('../../../scripts/start.js');
const { waitForEditor } = require('./editor');

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SCREENSHOTS = path.join(__dirname, '..', '..', 'screenshots');

async function startStack() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-browser-'));
  const userDir = path.join(tmp, 'user');
  const keys = { generation: 'browser-generation-key-0123', automation: 'browser-automation-key-4567' };
  const children = [];
  try {
    const sandbox = await start.startSandboxProcess({
      generationKey: keys.generation,
      automationKey: keys.automation,
      workflows: 23,
    });
    children.push(sandbox.child);
    const port = await start.freePort();
    const services = {
      generation: { url: sandbox.url, apiKey: keys.generation },
      automation: { url: sandbox.url, apiKey: keys.automation },
    };
    start.prepareUserDir(userDir, { port, services, flows: 'none' });
    const logs = [];
    const nodeRed = await start.startNodeRed({
      userDir,
      port,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        GRAPH_GEN_URL: sandbox.url,
        // Example 10's server B: the same sandbox here (its test deploys it against two: examples-pool.test.js).
        GRAPH_GEN_URL_2: sandbox.url,
        GRAPH_GEN_API_KEY: keys.generation,
        GRAPH_GEN_PARTNER_KEY: '',
        AUTOMATION_URL: sandbox.url,
        AUTOMATION_API_KEY: keys.automation,
        // The sandbox's storage host is on 127.0.0.1, which a download's redirect may reach only when trusted.
        ...(sandbox.storageUrl ? { GRAPH_GEN_TRUSTED_ORIGINS: sandbox.storageUrl } : {}),
      },
      onOutput: (line) => logs.push(line),
    });
    children.push(nodeRed.child);
    const browser = await chromium.launchPersistentContext(path.join(tmp, 'chromium'), {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1400, height: 900 },
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    return {
      url: nodeRed.url,
      sandboxUrl: sandbox.url,
      keys,
      userDir,
      logs,
      browser,
      async stop() {
        await browser.close().catch(() => undefined);
        await start.stopProcesses(children);
        fs.rmSync(tmp, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await start.stopProcesses(children);
    fs.rmSync(tmp, { recursive: true, force: true });
    throw error;
  }
}

let running;
/** The shared stack, started on first use. */
function stack() {
  running ??= startStack();
  return running;
}

// A root hook: runs once after every test file of the run.
after(async function () {
  this.timeout(30000);
  if (running) await (await running).stop();
});

/** A new tab with the editor loaded and ready (palette filled, a workspace active). */
async function openEditor(context) {
  const page = await context.browser.newPage();
  // A step that cannot happen should fail the test soon, not after Playwright's 30 s.
  page.setDefaultTimeout(10000);
  const problems = [];
  page.on('pageerror', (error) => problems.push(String(error)));
  page.on('dialog', (dialog) => dialog.accept());
  await page.goto(context.url);
  await waitForEditor(page);
  return { page, problems };
}

async function screenshot(page, name, locator, clip) {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, `${name}.png`);
  await (locator ?? page).screenshot({ path: file, ...(clip ? { clip } : {}) });
  return file;
}

module.exports = { stack, openEditor, screenshot, SCREENSHOTS };
