'use strict';
// The package as the Flow Library and Node-RED's loader see it: metadata, editor files beside each built
// node, editor HTML that a static parser reads, help text, a message catalog, and an example per flow node.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const pkg = require('../package.json');
const types = Object.keys(pkg['node-red'].nodes);
const flowTypes = types.filter((type) => !type.endsWith('-config'));

describe('the package', () => {
  it('has the metadata the Flow Library scorecard asks for', () => {
    assert.equal(pkg.name, '@graph-gen/node-red');
    assert.ok(pkg.keywords.includes('node-red'));
    assert.ok(pkg.license);
    assert.ok(pkg.repository && pkg.repository.url);
    assert.match(pkg['node-red'].version, /4\.1/);
    assert.match(pkg.engines.node, /^>=20\.18/);
    const runtime = Object.keys(pkg.dependencies);
    assert.ok(runtime.length <= 6, `${runtime.length} runtime dependencies`);
    assert.ok(!runtime.includes('node-red'), 'node-red is a dev dependency only');
    assert.deepEqual(types.sort(), [
      'automation-config',
      'automation-list-workflows',
      'graph-gen-await-job',
      'graph-gen-config',
      'graph-gen-download',
      'graph-gen-queue',
      'graph-gen-submit',
      'graph-gen-upload',
    ]);
  });

  for (const type of types) {
    it(`${type}: built .js with its editor HTML, message catalog and help beside it, parsable statically`, () => {
      const js = path.join(root, pkg['node-red'].nodes[type]);
      assert.ok(fs.existsSync(js), `${js} is built`);
      const html = fs.readFileSync(js.replace(/\.js$/, '.html'), 'utf8');
      const script = /<script type="text\/javascript">([\s\S]*?)<\/script>/.exec(html);
      assert.ok(script, 'a <script type="text/javascript"> block');
      const registration = new RegExp(
        `RED\\.nodes\\.registerType\\(\\s*'${type}',\\s*\\{[\\s\\S]*?category:\\s*'([^']+)'`,
      );
      const category = registration.exec(script[1]);
      assert.ok(category, 'a literal registerType with an inline category');
      assert.equal(category[1], type.endsWith('-config') ? 'config' : 'graph gen');
      assert.match(html, new RegExp(`data-template-name="${type}"`));
      // Help lives in the catalog (locales/en-US/<type>.html), where Node-RED looks for it per language.
      assert.doesNotMatch(html, /data-help-name/, 'no help left in the editor HTML');
      const helpFile = path.join(path.dirname(js), 'locales', 'en-US', `${type}.html`);
      const help = new RegExp(`data-help-name="${type}"[^>]*>([\\s\\S]*?)</script>`).exec(
        fs.readFileSync(helpFile, 'utf8'),
      );
      assert.ok(help, 'help text');
      if (!type.endsWith('-config')) {
        for (const section of ['Inputs', 'Outputs', 'Details'])
          assert.match(help[1], new RegExp(`<h3>${section}</h3>`));
      }
      const catalog = path.join(path.dirname(js), 'locales', 'en-US', `${type}.json`);
      assert.ok(fs.existsSync(catalog), 'a message catalog');
      assert.ok(JSON.parse(fs.readFileSync(catalog, 'utf8'))[type], 'the catalog is keyed by the type');
    });
  }

  it('has at least one example flow for every flow node', () => {
    const used = new Set();
    for (const file of fs.readdirSync(path.join(root, 'examples')).filter((name) => name.endsWith('.json'))) {
      for (const node of JSON.parse(fs.readFileSync(path.join(root, 'examples', file), 'utf8')))
        used.add(node.type);
    }
    for (const type of flowTypes) assert.ok(used.has(type), `no example uses ${type}`);
  });
});
