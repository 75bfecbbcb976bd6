'use strict';
/* global RED, $, document -- these run inside the editor page */
// The picture under a node in a real editor: an await-job node with "Picture" on shows its job's last image
// under itself (one with it off shows none), and keeps it across a tab switch and a reload; a download node
// shows a large PNG scaled to 160 px, and says so when an image is too large to show. Real Node-RED, the
// sandbox, Chromium; screenshots in test/screenshots/.
const assert = require('node:assert');
const crypto = require('node:crypto');
const { stack, openEditor, screenshot } = require('./support/stack');
const editor = require('./support/editor');
const { encodePng } = require('../real/support/png');
const { textToImage, pressInject } = require('../support/node-red');

/** An await-job node as its dialog saves one (the settings Node-RED checks before a deploy). */
const AWAIT_SETTINGS = {
  timeout: '0',
  timeoutType: 'num',
  cancelOnTimeout: false,
  filesFrom: 'all',
  fileNodes: '',
  progress: false,
  previewRate: 2,
};

/** A text-to-image workflow the sandbox accepts (it checks workflows as the service does). */
const WORKFLOW = textToImage();

/** The picture drawn under node `id`: its image's size and address, or a note's text; null when none. */
function pictureUnder(page, id) {
  return page.evaluate((nodeId) => {
    const group = document.getElementById(nodeId)?.querySelector(':scope > .graph-gen-picture');
    if (!group) return null;
    const image = group.querySelector('image');
    if (!image) return { note: group.textContent };
    return {
      width: Number(image.getAttribute('width')),
      height: Number(image.getAttribute('height')),
      href: image.getAttribute('href').slice(0, 30),
      label: image.getAttribute('aria-label'),
    };
  }, id);
}

async function waitForPicture(page, id, timeout = 20000) {
  await page.waitForFunction(
    (nodeId) => Boolean(document.getElementById(nodeId)?.querySelector(':scope > .graph-gen-picture')),
    id,
    { timeout },
  );
  return pictureUnder(page, id);
}

describe('editor: the picture under an await-job or download node', function () {
  this.timeout(60000);
  let ctx;
  let page;
  let problems;
  let configId;

  before(async function () {
    this.timeout(120000);
    ctx = await stack();
    ({ page, problems } = await openEditor(ctx));
    await page.evaluate(() => RED.workspaces.add());
    configId = await editor.addGenerationConfig(page, 'picture server', ctx.sandboxUrl, ctx.keys.generation);
  });

  // The stack's Node-RED is shared by every browser test file: what this file deployed goes again.
  after(async () => {
    if (page && configId) {
      await editor.dismissAll(page);
      await page.evaluate((config) => {
        const ours = RED.nodes.filterNodes({}).filter((node) => /^pic[01]/.test(node.id));
        for (const node of ours) RED.nodes.remove(node.id);
        RED.nodes.remove(config);
        RED.nodes.dirty(true);
        RED.view.redraw(true);
      }, configId);
      await editor.deploy(page);
    }
    await page?.close();
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  /** Imports `nodes` (ids given) onto the active tab, deploys, and returns the tab's id. */
  async function importAndDeploy(nodes) {
    const tab = await page.evaluate((flow) => {
      const z = RED.workspaces.active();
      RED.view.importNodes(
        flow.map((node) => ({ ...node, z })),
        { generateIds: false },
      );
      return z;
    }, nodes);
    await editor.deploy(page);
    return tab;
  }

  /** What the inject node's button does (its admin endpoint), wherever the view has scrolled the node. */
  async function clickInject(id) {
    const press = () =>
      page.evaluate(
        (nodeId) =>
          new Promise((resolve) =>
            $.ajax({ url: `inject/${nodeId}`, type: 'POST', complete: (xhr) => resolve(xhr.status) }),
          ),
        id,
      );
    // The editor says "deployed" once the flows are saved; the runtime may still be starting them (CI saw it once).
    assert.strictEqual(await pressInject(press), 200);
  }

  it('await job with "Picture" on draws the last image under itself, one with it off nothing; the picture stays after a tab switch and a reload', async () => {
    const ids = { inject: 'pic0inject', submit: 'pic0submit', on: 'pic0awaiton', off: 'pic0awaitoff' };
    const tab = await importAndDeploy([
      {
        id: ids.inject,
        type: 'inject',
        name: 'go',
        props: [],
        repeat: '',
        once: false,
        x: 120,
        y: 80,
        wires: [[ids.submit]],
      },
      {
        id: ids.submit,
        type: 'graph-gen-submit',
        server: configId,
        workflow: JSON.stringify(WORKFLOW),
        newSeed: false,
        check: false,
        partner: 'auto',
        setByMsg: {},
        savedWorkflow: '',
        x: 300,
        y: 80,
        wires: [[ids.on, ids.off]],
      },
      {
        id: ids.on,
        type: 'graph-gen-await-job',
        name: 'with picture',
        server: configId,
        ...AWAIT_SETTINGS,
        picture: true,
        x: 520,
        y: 80,
        wires: [[], [], []],
      },
      {
        id: ids.off,
        type: 'graph-gen-await-job',
        name: 'without',
        server: configId,
        ...AWAIT_SETTINGS,
        x: 780,
        y: 80,
        wires: [[], [], []],
      },
    ]);
    assert.strictEqual(await pictureUnder(page, ids.on), null, 'no picture before a job');
    await clickInject(ids.inject);
    const picture = await waitForPicture(page, ids.on);
    // The sandbox's outputs are 1 x 1 PNGs: drawn to fill the 160 px box.
    assert.deepStrictEqual(picture, {
      width: 160,
      height: 160,
      href: 'data:image/png;base64,iVBORw0K',
      label: 'last image',
    });
    await page.waitForFunction((id) => /done/.test(RED.nodes.node(id).status?.text || ''), ids.off);
    assert.strictEqual(await pictureUnder(page, ids.off), null, 'the node with the setting off shows none');
    await page.evaluate(() => $('.red-ui-notification').remove());
    const box = await page.locator(`[id="${ids.on}"]`).boundingBox();
    await screenshot(page, 'await-job-picture', undefined, {
      x: Math.max(0, box.x - 300),
      y: Math.max(0, box.y - 60),
      width: 700,
      height: 300,
    });

    // Another tab and back: the view makes the node's element anew, and the picture is drawn again.
    await page.evaluate(() => RED.workspaces.add());
    await page.evaluate((z) => RED.workspaces.show(z), tab);
    assert.deepStrictEqual(await waitForPicture(page, ids.on, 5000), picture);

    // A reload: the picture is retained by Node-RED for editors that connect later.
    await page.reload();
    await editor.waitForEditor(page);
    await page.evaluate((z) => RED.workspaces.show(z), tab);
    assert.deepStrictEqual(await waitForPicture(page, ids.on, 10000), picture);
    assert.strictEqual(await pictureUnder(page, ids.off), null);
  });

  it('download with "Picture" on shows a large PNG scaled to 160 px, and says so when an image is too large to show', async () => {
    // A 640 x 480 picture with noise in it (too large to send as it is), uploaded as the service's input.
    const noise = crypto.randomBytes(640 * 480);
    const png = encodePng(640, 480, (x, y) => [
      Math.round((x / 639) * 255),
      Math.round((y / 479) * 255),
      160 + (noise[y * 640 + x] >> 3),
      255,
    ]);
    const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), crypto.randomBytes(400 * 1024)]);
    const upload = async (name, bytes, type) => {
      const form = new FormData();
      form.append('image', new Blob([bytes], { type }), name);
      form.append('type', 'input');
      const response = await fetch(`${ctx.sandboxUrl}/api/upload/image`, {
        method: 'POST',
        headers: { 'x-api-key': ctx.keys.generation },
        body: form,
      });
      const text = await response.text();
      assert.strictEqual(response.status, 200, text);
      return JSON.parse(text);
    };
    const uploadedPng = await upload('gradient.png', png, 'image/png');
    const uploadedJpeg = await upload('photo.jpg', jpeg, 'image/jpeg');
    const ids = {
      png: 'pic1injectpng',
      jpeg: 'pic1injectjpg',
      download: 'pic1download',
      other: 'pic1download2',
    };
    const reference = (file) =>
      JSON.stringify({ filename: file.name, subfolder: file.subfolder || '', type: 'input' });
    const inject = (id, file, y, target) => ({
      id,
      type: 'inject',
      props: [{ p: 'payload' }],
      payload: reference(file),
      payloadType: 'json',
      repeat: '',
      once: false,
      x: 120,
      y,
      wires: [[target]],
    });
    await page.evaluate(() => RED.workspaces.add());
    await importAndDeploy([
      inject(ids.png, uploadedPng, 80, ids.download),
      inject(ids.jpeg, uploadedJpeg, 360, ids.other),
      {
        id: ids.download,
        type: 'graph-gen-download',
        server: configId,
        mode: 'buffer',
        bufferLimit: 512,
        picture: true,
        x: 340,
        y: 80,
        wires: [[]],
      },
      {
        id: ids.other,
        type: 'graph-gen-download',
        server: configId,
        mode: 'buffer',
        bufferLimit: 512,
        picture: true,
        x: 340,
        y: 360,
        wires: [[]],
      },
    ]);
    await clickInject(ids.png);
    const picture = await waitForPicture(page, ids.download);
    assert.deepStrictEqual(
      { width: picture.width, height: picture.height, href: picture.href },
      { width: 160, height: 120, href: 'data:image/png;base64,iVBORw0K' },
    );
    await clickInject(ids.jpeg);
    assert.deepStrictEqual(await waitForPicture(page, ids.other), { note: 'image too large to show here' });
    // The deploy's notice would cover the nodes in the picture.
    await page.evaluate(() => $('.red-ui-notification').remove());
    const box = await page.locator(`[id="${ids.download}"]`).boundingBox();
    await screenshot(page, 'download-picture', undefined, {
      x: Math.max(0, box.x - 200),
      y: Math.max(0, box.y - 40),
      width: 600,
      height: 420,
    });
  });
});
