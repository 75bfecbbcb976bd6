'use strict';
/* global RED -- this runs inside the editor page (page.evaluate) */
// Config versions in the real editor: a flow each earlier release saved (test/fixtures/flows/) imports as
// valid and deploys without a warning, its settings saved as they were (the editor adds none, not even a
// version: the runtime fills what it lacks, config-versions.ts); a node made in today's editor is saved with
// its type's configVersion. The flows deployed before are put back afterwards.
const assert = require('node:assert');
const { stack, openEditor } = require('./support/stack');
const editor = require('./support/editor');
const { CONFIG_VERSIONS } = require('../../dist/nodes/config-versions');
const { RELEASES, readFixture } = require('../support/config-versions');

/** The runtime's flows, as deployed (admin API, from the editor page). */
function deployedFlows(page) {
  return page.evaluate(() =>
    fetch('flows', { headers: { 'Node-RED-API-Version': 'v1' } }).then((response) => response.json()),
  );
}

/** A saved node's settings: what is left without its id, tab, position and wires. */
function settingsOf(node) {
  const settings = { ...node };
  for (const name of ['id', 'z', 'x', 'y', 'wires']) delete settings[name];
  return settings;
}

describe('editor: flows saved by earlier releases, and the version a new node is saved with', function () {
  this.timeout(60000);
  let ctx;
  let page;
  let problems;
  /** The flows deployed before this file. */
  let kept;

  before(async function () {
    this.timeout(120000);
    ctx = await stack();
    ({ page, problems } = await openEditor(ctx));
    kept = await deployedFlows(page);
  });

  after(async () => {
    if (page) {
      // The flows deployed before this file, back as they were (other files share this Node-RED).
      const status = await page.evaluate(
        (flows) =>
          fetch('flows', {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              'Node-RED-API-Version': 'v1',
              'Node-RED-Deployment-Type': 'full',
            },
            body: JSON.stringify(flows),
          }).then((response) => response.status),
        kept,
      );
      await page.close();
      assert.ok(status === 200 || status === 204, `the earlier flows were not put back (${status})`);
    }
  });

  afterEach(async () => {
    await editor.dismissAll(page);
    assert.deepStrictEqual(problems.splice(0), [], 'the editor page threw');
  });

  it('each node type’s editor saves its current configVersion', async () => {
    const versions = await page.evaluate(
      (types) =>
        Object.fromEntries(
          types.map((type) => [type, RED.nodes.getType(type).defaults.configVersion?.value]),
        ),
      Object.keys(CONFIG_VERSIONS),
    );
    assert.deepStrictEqual(versions, CONFIG_VERSIONS);
  });

  for (const release of RELEASES.filter(({ file }) => !file.startsWith('0-'))) {
    it(`a flow made with ${release.label} imports as valid, deploys without a warning, its settings as saved`, async () => {
      const flow = readFixture(release.file);
      const port = new URL(ctx.sandboxUrl).port;
      for (const node of flow) {
        if (node.type === 'graph-gen-config') node.baseUrl = ctx.sandboxUrl;
        if (node.type === 'automation-config') Object.assign(node, { host: '127.0.0.1', port });
      }
      const tabLabel = flow.find((node) => node.type === 'tab').label;
      // As Import does with a pasted flow: new ids, nothing added.
      const invalid = await page.evaluate((nodes) => {
        RED.view.importNodes(nodes, { generateIds: true });
        const bad = [];
        RED.nodes.eachNode((node) => {
          if (node.valid === false) bad.push(`${node.type} ${node.id}`);
        });
        RED.nodes.eachConfig((node) => {
          if (node.valid === false) bad.push(`${node.type} ${node.id}`);
        });
        return bad;
      }, flow);
      assert.deepStrictEqual(invalid, [], 'nodes the editor marks invalid');
      await editor.deploy(page);

      const deployed = await deployedFlows(page);
      const tab = deployed.find((node) => node.type === 'tab' && node.label === tabLabel);
      assert.ok(tab, 'the flow’s tab is deployed');
      const onTab = deployed.filter((node) => node.z === tab.id);
      const configIds = new Set(onTab.map((node) => node.server).filter(Boolean));
      const saved = [...onTab, ...deployed.filter((node) => configIds.has(node.id))];
      for (const original of flow.filter((node) => node.type !== 'tab')) {
        const node = saved.find((candidate) => candidate.type === original.type);
        assert.ok(node, `${original.type} is deployed`);
        const settings = settingsOf(node);
        assert.strictEqual(settings.configVersion, undefined, `${original.type}: no version added`);
        // Its config node has a new id, as Import gives.
        const expected = { ...settingsOf(original), ...(original.server ? { server: settings.server } : {}) };
        assert.deepStrictEqual(settings, expected, `${original.type}: its settings as saved`);
      }
    });
  }

  it('a node made in today’s editor is saved with its type’s configVersion', async () => {
    const configId = await editor.addGenerationConfig(
      page,
      'config versions',
      ctx.sandboxUrl,
      ctx.keys.generation,
    );
    const id = await editor.dropFromPalette(page, 'graph-gen-queue');
    await editor.openNodeDialog(page, id);
    await editor.setField(page, 'node-input-server', configId);
    await editor.closeDialog(page, 'node-dialog-ok');
    await editor.deploy(page);
    const deployed = await deployedFlows(page);
    const byId = (nodeId) => deployed.find((node) => node.id === nodeId);
    assert.strictEqual(byId(id).configVersion, CONFIG_VERSIONS['graph-gen-queue']);
    assert.strictEqual(byId(configId).configVersion, CONFIG_VERSIONS['graph-gen-config']);
  });
});
