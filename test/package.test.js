'use strict';
// The package as the Flow Library and Node-RED's loader see it: metadata, editor files beside each built
// node, editor HTML that a static parser reads, help text, a message catalog, and an example per flow node;
// the tarball npm would publish (what users run, nothing else), the graph-gen-sandbox command it ships, the
// Node versions its engines field promises, and a README that reads right on the Flow Library's page.
const assert = require('node:assert/strict');
const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.join(__dirname, '..');
const pkg = require('../package.json');
const types = Object.keys(pkg['node-red'].nodes);
/** Config nodes: each service's settings, and the pool of generation servers (POOL.md). */
const isConfig = (type) => type.endsWith('-config') || type === 'graph-gen-pool';
const flowTypes = types.filter((type) => !isConfig(type));

describe('the package', () => {
  it('has the metadata the Flow Library scorecard asks for', () => {
    assert.equal(pkg.name, '@graph-gen/node-red');
    assert.ok(pkg.keywords.includes('node-red'));
    assert.ok(pkg.license);
    assert.ok(pkg.repository && pkg.repository.url);
    assert.match(pkg['node-red'].version, /4\.1/);
    assert.equal(pkg.engines.node, '>=20.18.1');
    const runtime = Object.keys(pkg.dependencies);
    assert.ok(runtime.length <= 6, `${runtime.length} runtime dependencies`);
    assert.ok(!runtime.includes('node-red'), 'node-red is a dev dependency only');
    assert.deepEqual(types.sort(), [
      'automation-config',
      'automation-list-workflows',
      'graph-gen-await-job',
      'graph-gen-config',
      'graph-gen-download',
      'graph-gen-job-events',
      'graph-gen-pool',
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
      assert.equal(category[1], isConfig(type) ? 'config' : 'graph gen');
      assert.match(html, new RegExp(`data-template-name="${type}"`));
      // Help lives in the catalog (locales/en-US/<type>.html), where Node-RED looks for it per language.
      assert.doesNotMatch(html, /data-help-name/, 'no help left in the editor HTML');
      const helpFile = path.join(path.dirname(js), 'locales', 'en-US', `${type}.html`);
      const help = new RegExp(`data-help-name="${type}"[^>]*>([\\s\\S]*?)</script>`).exec(
        fs.readFileSync(helpFile, 'utf8'),
      );
      assert.ok(help, 'help text');
      if (!isConfig(type)) {
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

/** The lowest Node version a `>=x[.y[.z]]` engines range admits; any other form fails the test (not skipped). */
function lowestNode(range, owner) {
  const match = /^>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(range.trim());
  assert.ok(match, `${owner}: engines.node "${range}" is not a ">=x.y.z" range this test can read`);
  return [Number(match[1]), Number(match[2] ?? 0), Number(match[3] ?? 0)];
}

function compareVersions(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

describe('the published tarball', function () {
  this.timeout(60000);
  let packed;

  before(() => {
    // --ignore-scripts: the tests run after a build; packing must not build again under them.
    const json = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    packed = JSON.parse(json)[0];
  });

  it('holds what users run: the built nodes, their editor files, the sandbox and the examples', () => {
    const files = new Set(packed.files.map((file) => file.path));
    for (const type of types) {
      const js = pkg['node-red'].nodes[type];
      assert.ok(files.has(js), `${js} is in the tarball`);
      assert.ok(files.has(js.replace(/\.js$/, '.html')), `${type}'s editor HTML is in the tarball`);
      assert.ok(
        files.has(`dist/nodes/locales/en-US/${type}.json`),
        `${type}'s message catalog is in the tarball`,
      );
    }
    for (const example of fs
      .readdirSync(path.join(root, 'examples'))
      .filter((name) => name.endsWith('.json')))
      assert.ok(files.has(`examples/${example}`), `examples/${example} is in the tarball`);
    for (const file of ['package.json', 'README.md', 'LICENSE', 'dist/sandbox/cli.js'])
      assert.ok(files.has(file), `${file} is in the tarball`);
  });

  it('holds nothing else: no source maps, sources, tests, benchmarks, scripts or images', () => {
    for (const { path: file } of packed.files) {
      assert.ok(!file.endsWith('.map'), `${file}: source maps do not ship`);
      assert.ok(
        /^(dist|examples)\//.test(file) || ['package.json', 'README.md', 'LICENSE'].includes(file),
        `${file} is not something a user runs or reads`,
      );
      assert.ok(!/\.ts$/.test(file) || file.endsWith('.d.ts'), `${file}: TypeScript sources do not ship`);
    }
    // A budget that catches a folder shipped by mistake: the source maps alone were 287 kB of 837 kB. The code
    // itself was 557 kB at that time; 838 kB once jobs had a life of their own, every input was bounded, and
    // servers behind a login, TLS and a proxy and their saved workflows were reached (the README 93 kB of it);
    // the job-events node added 66 kB (its code, help, example and README section), which with the pictures in the
    // editor and resumed awaits came to 953 kB; one boundary for outside values (bounded readers, one address
    // policy, private journals) to 1,048 kB; Comfy API v2 (its dialect, its event streams and its sandbox mode,
    // about 200 kB with their declarations) to 1,257 kB; the server pool (its core, node, editor, help in two
    // languages, example and README section) to about 1,365 kB.
    assert.ok(packed.unpackedSize < 1_450_000, `unpacked size ${packed.unpackedSize} bytes`);
  });

  it('ships the sandbox as the graph-gen-sandbox command: a node script that answers --help', async () => {
    assert.deepEqual(pkg.bin, { 'graph-gen-sandbox': 'dist/sandbox/cli.js' });
    const target = path.join(root, pkg.bin['graph-gen-sandbox']);
    assert.equal(fs.readFileSync(target, 'utf8').split('\n')[0], '#!/usr/bin/env node');
    // Run it as npm links it into node_modules/.bin: through a symlink named after the command.
    const binDir = fs.mkdtempSync(path.join(os.tmpdir(), 'graph-gen-bin-'));
    const command = path.join(binDir, 'graph-gen-sandbox');
    fs.symlinkSync(target, command);
    try {
      const help = execFileSync(process.execPath, [command, '--help'], { encoding: 'utf8', timeout: 10000 });
      assert.match(help, /^usage: graph-gen-sandbox \[options\]/);
      for (const flag of ['--port', '--workflows', '--generation-key', '--automation-key'])
        assert.match(help, new RegExp(`  ${flag} <`));
    } finally {
      fs.rmSync(binDir, { recursive: true, force: true });
    }
  });

  it('graph-gen-sandbox starts on port 0, serves both services, and stops on SIGTERM', async () => {
    const child = spawn(process.execPath, [path.join(root, pkg.bin['graph-gen-sandbox']), '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const url = await new Promise((resolve, reject) => {
        let output = '';
        child.stdout.on('data', (chunk) => {
          output += chunk;
          const match = /graph-gen sandbox listening at (http:\/\/\S+)/.exec(output);
          if (match) resolve(match[1]);
        });
        child.stderr.on('data', (chunk) => (output += chunk));
        child.on('exit', (code) =>
          reject(new Error(`the sandbox exited (${code}) before it listened: ${output}`)),
        );
      });
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      // No key given: a self-hosted generation server, and an automation service that takes any key.
      const queue = await fetch(`${url}/api/queue`);
      assert.equal(queue.status, 200);
      assert.ok(Array.isArray((await queue.json()).queue_running));
      const workflows = await fetch(`${url}/api/v1/workflows?limit=250`, {
        headers: { 'X-AUTOMATION-API-KEY': 'any' },
      });
      assert.equal(workflows.status, 200);
      assert.equal((await workflows.json()).data.length, 42);
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0, 'the sandbox did not stop cleanly on SIGTERM');
  });
});

describe('the Node versions the package promises', () => {
  it('every runtime dependency runs on the lowest Node that engines.node admits (undici 8 needs 22.19)', () => {
    const ours = lowestNode(pkg.engines.node, pkg.name);
    for (const name of Object.keys(pkg.dependencies)) {
      const dependency = require(`${name}/package.json`);
      if (!dependency.engines || !dependency.engines.node) continue;
      const theirs = lowestNode(dependency.engines.node, `${name}@${dependency.version}`);
      assert.ok(
        compareVersions(ours, theirs) >= 0,
        `${name}@${dependency.version} needs Node ${dependency.engines.node}, but engines.node says ${pkg.engines.node}`,
      );
    }
  });

  it('the README names the supported Node and Node-RED versions that engines and node-red.version say', () => {
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
    assert.match(readme, /Node\.js 20\.18\.1/);
    assert.match(readme, /Node-RED 4\.1/);
    assert.match(readme, /undici 7/);
  });
});

describe('the README as the Flow Library shows it', () => {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');

  it('links images by absolute address to files that exist in docs/', () => {
    const images = [...readme.matchAll(/!\[[^\]]*\]\(([^)\s]+)\)/g)].map((match) => match[1]);
    assert.ok(images.length >= 2, `${images.length} images`);
    const base = 'https://raw.githubusercontent.com/graph-gen/node-red/main/';
    for (const image of images) {
      assert.ok(image.startsWith(base), `${image} is not an absolute address under ${base}`);
      assert.ok(
        fs.existsSync(path.join(root, image.slice(base.length))),
        `${image}: no such file in the repository`,
      );
    }
  });

  it('has no relative link to a repository file (it would break outside the repository)', () => {
    for (const [, target] of readme.matchAll(/\]\(([^)\s]+)\)/g))
      assert.match(target, /^(https?:\/\/|#)/, `relative link ${target}`);
  });

  it('puts installing and the first flow before anything for contributors', () => {
    const headings = [...readme.matchAll(/^## (.+)$/gm)].map((match) => match[1]);
    const at = (pattern) => headings.findIndex((heading) => pattern.test(heading));
    assert.ok(at(/^Install/) >= 0 && at(/^Your first flow/) >= 0, headings.join(' | '));
    const contributors = at(/^For contributors/);
    assert.ok(contributors > at(/^Install/) && contributors > at(/^Your first flow/), headings.join(' | '));
    const userPart = readme.slice(0, readme.indexOf('## For contributors'));
    assert.doesNotMatch(userPart, /npm (test|run (test|bench|build))/, 'developer commands in the user part');
  });
});
