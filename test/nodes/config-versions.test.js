'use strict';
// Config versions (src/nodes/config-versions.ts), as a unit: each version's migration, nodes of unknown or newer
// versions, defs of any kind (never a throw), and that the table agrees with the editors (the hidden
// `configVersion` each saves) and with the flows each release saved (test/fixtures/flows/, from git history).
// test/nodes/config-versions-flows.test.js deploys those flows in a real Node-RED against the sandbox.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { CONFIG_VERSIONS, configVersionsOf, migrateConfig } = require('../../dist/nodes/config-versions');
const { RELEASES, readFixture } = require('../support/config-versions');

const root = path.join(__dirname, '..', '..');
const types = Object.keys(require('../../package.json')['node-red'].nodes);

/** The settings a node type's versions up to `version` added, with their old defaults. */
function addedUpTo(type, version) {
  return Object.assign(
    {},
    ...configVersionsOf(type)
      .slice(0, version)
      .map((step) => step.added),
  );
}

/** A def as the editor of `version` saved it: every setting of that version, none set to its old default. */
function savedAt(type, version) {
  const def = { id: 'n1', type, name: 'mine' };
  for (const [name, value] of Object.entries(addedUpTo(type, version))) {
    def[name] =
      typeof value === 'boolean'
        ? !value
        : typeof value === 'number'
          ? value + 1
          : `${JSON.stringify(value)}!`;
  }
  return def;
}

describe('config versions', () => {
  describe('the table', () => {
    it('has every node type of the package, each at a version of 1 or more, one version per migration', () => {
      assert.deepEqual(Object.keys(CONFIG_VERSIONS).sort(), [...types].sort());
      for (const type of types) {
        assert.ok(CONFIG_VERSIONS[type] >= 1, type);
        assert.equal(configVersionsOf(type).length, CONFIG_VERSIONS[type], type);
      }
      assert.deepEqual(configVersionsOf('not-ours'), []);
      assert.deepEqual(configVersionsOf('__proto__'), []);
    });

    it('each editor saves its type’s current version as a hidden configVersion (no input for it)', () => {
      for (const type of types) {
        const html = fs.readFileSync(path.join(root, 'nodes', `${type}.html`), 'utf8');
        const saved = /\n\s*configVersion: \{ value: (\d+) \},\n/.exec(html);
        assert.ok(saved, `${type}.html has a configVersion default`);
        assert.equal(Number(saved[1]), CONFIG_VERSIONS[type], `${type}.html saves the current version`);
        assert.doesNotMatch(html, /node-(config-)?input-configVersion/, `${type}.html shows no input for it`);
      }
    });

    it('a setting is added by one version only, and each version adds at least one', () => {
      for (const type of types) {
        const seen = new Set();
        for (const [index, step] of configVersionsOf(type).entries()) {
          const names = Object.keys(step.added);
          assert.ok(names.length > 0, `${type} version ${index + 1} adds nothing`);
          for (const name of names) {
            assert.ok(!seen.has(name), `${type}: ${name} added twice`);
            seen.add(name);
          }
        }
      }
    });

    for (const release of RELEASES) {
      it(`agrees with the flow ${release.label} saved (${release.file}): each node has the settings of its version, none later`, () => {
        const flow = readFixture(release.file);
        for (const [type, version] of Object.entries(release.versions)) {
          const node = flow.find((item) => item.type === type);
          assert.ok(node, `${release.file} has a ${type}`);
          assert.equal(node.configVersion, undefined, 'saved before versions existed');
          for (const name of Object.keys(addedUpTo(type, version))) {
            assert.ok(
              Object.hasOwn(node, name),
              `${type} of ${release.file} lacks ${name} (version ${version})`,
            );
          }
          for (const step of configVersionsOf(type).slice(version)) {
            for (const name of Object.keys(step.added)) {
              assert.ok(!Object.hasOwn(node, name), `${type} of ${release.file} has ${name}, added later`);
            }
          }
        }
        const listed = new Set(Object.keys(release.versions));
        for (const node of flow) {
          if (node.type !== 'tab') assert.ok(listed.has(node.type), `${node.type} is given its version`);
        }
      });
    }
  });

  describe('migrateConfig', () => {
    it('each version step fills what the later versions added, at its old default, and keeps what the node has', () => {
      let steps = 0;
      for (const type of types) {
        const current = CONFIG_VERSIONS[type];
        for (let version = 0; version <= current; version++) {
          const def = { ...savedAt(type, version), configVersion: version };
          const before = structuredClone(def);
          const migrated = migrateConfig(type, def);
          assert.deepEqual(def, before, 'the def itself is left as it was');
          assert.deepEqual(
            migrated,
            { ...addedUpTo(type, current), ...savedAt(type, version), configVersion: current },
            `${type} from version ${version}`,
          );
          steps++;
        }
      }
      assert.equal(
        steps,
        types.reduce((sum, type) => sum + CONFIG_VERSIONS[type] + 1, 0),
      );
    });

    it('the old defaults: what a node of each release lacks is read as before there was a choice', () => {
      const r1 = (type, def = {}) => migrateConfig(type, { id: 'n', type, ...def });
      // A config node: today's API, the key as an API key, no TLS or proxy node, the limits' defaults.
      assert.deepEqual(
        { ...r1('graph-gen-config', { baseUrl: 'http://h', partnerKeyField: 'f' }), id: undefined },
        {
          id: undefined,
          type: 'graph-gen-config',
          baseUrl: 'http://h',
          partnerKeyField: 'f',
          answerLimitMiB: '8',
          listLimitMiB: '64',
          requestTimeout: '120',
          keptEventsMiB: '64',
          authType: 'apiKey',
          authHeader: '',
          tokenInQuery: false,
          tls: '',
          proxy: '',
          dialect: 'comfyui',
          configVersion: 4,
        },
      );
      // A submit node keeps its seeds; an await node resumes after a restart; an upload refuses local URLs.
      assert.equal(r1('graph-gen-submit').newSeed, false);
      assert.equal(r1('graph-gen-await-job').resume, true);
      assert.equal(r1('graph-gen-await-job').runAgain, false);
      assert.equal(r1('graph-gen-upload').urlLocal, false);
      assert.equal(r1('graph-gen-upload').overwrite, true);
      assert.equal(r1('graph-gen-download').bufferLimit, 512);
      assert.equal(r1('graph-gen-queue').action, 'list');
      assert.equal(r1('graph-gen-queue').pool, '');
      assert.equal(r1('graph-gen-pool').strategy, 'soonest');
      assert.equal(r1('automation-config').pageLimitMiB, '64');
    });

    it('a node saved before versions by a later release keeps every setting it has (only what it lacks is filled)', () => {
      const submit = migrateConfig('graph-gen-submit', { newSeed: true, savedWorkflow: 'mine', pool: 'p' });
      assert.deepEqual(
        {
          newSeed: submit.newSeed,
          savedWorkflow: submit.savedWorkflow,
          pool: submit.pool,
          check: submit.check,
        },
        { newSeed: true, savedWorkflow: 'mine', pool: 'p', check: false },
      );
      const config = migrateConfig('graph-gen-config', {
        authType: 'bearer',
        tls: 't1',
        dialect: 'comfy-api-v2',
      });
      assert.deepEqual(
        [config.authType, config.tls, config.dialect, config.proxy],
        ['bearer', 't1', 'comfy-api-v2', ''],
      );
      // A setting saved as undefined (JSON has none; a def made in code may) is absent; null and '' are values.
      const awaitJob = migrateConfig('graph-gen-await-job', { resume: undefined, fileNodes: null, pool: '' });
      assert.deepEqual([awaitJob.resume, awaitJob.fileNodes, awaitJob.pool], [true, null, '']);
    });

    it('a node at the current version is not filled, and each object default is a copy of its own', () => {
      const current = CONFIG_VERSIONS['graph-gen-submit'];
      assert.deepEqual(migrateConfig('graph-gen-submit', { configVersion: current }), {
        configVersion: current,
      });
      const one = migrateConfig('graph-gen-submit', {});
      const two = migrateConfig('graph-gen-submit', {});
      assert.deepEqual(one.setByMsg, {});
      assert.notEqual(one.setByMsg, two.setByMsg);
      one.setByMsg.x = 1;
      assert.deepEqual(migrateConfig('graph-gen-submit', {}).setByMsg, {});
    });

    it('reads a saved configVersion as a whole number from 0; anything else as 0 (saved before versions)', () => {
      const current = CONFIG_VERSIONS['graph-gen-queue'];
      const actionOf = (configVersion) => migrateConfig('graph-gen-queue', { configVersion }).action;
      assert.equal(actionOf(current), undefined, 'current: nothing filled');
      assert.equal(actionOf(String(current)), undefined, 'the same as text');
      assert.equal(actionOf(` ${current} `), undefined);
      for (const unreadable of [-1, 1.5, NaN, Infinity, '', 'two', '1e1', {}, [], null, true, 2 ** 60]) {
        const migrated = migrateConfig('graph-gen-queue', { configVersion: unreadable });
        assert.equal(migrated.action, 'list', `${String(unreadable)} reads as 0`);
        assert.equal(migrated.configVersion, current);
      }
    });

    it('a node of a newer version is left as it is, and said once per type and version, not per node', () => {
      const said = [];
      const warn = (newer) => said.push(newer);
      const newer = { id: 'a', type: 'graph-gen-await-job', configVersion: 1001, somethingNew: { x: 1 } };
      for (let node = 0; node < 5; node++) {
        assert.deepEqual(migrateConfig('graph-gen-await-job', newer, warn), newer);
      }
      assert.deepEqual(said, [{ version: 1001, known: CONFIG_VERSIONS['graph-gen-await-job'] }]);
      // Another type, or another newer version: said once more each.
      migrateConfig('graph-gen-submit', { configVersion: 1001 }, warn);
      migrateConfig('graph-gen-await-job', { configVersion: '1002' }, warn);
      migrateConfig('graph-gen-await-job', { configVersion: 1002 }, warn);
      assert.deepEqual(
        said.map(({ version }) => version),
        [1001, 1001, 1002],
      );
      // A warn that throws does not stop the node being read.
      assert.deepEqual(
        migrateConfig('graph-gen-queue', { configVersion: 1003, action: 'cancel' }, () => {
          throw new Error('log down');
        }),
        { configVersion: 1003, action: 'cancel' },
      );
    });

    it('an unknown type is copied as it is: no version, nothing filled', () => {
      const def = { id: 'x', type: 'something-else', a: 1 };
      const copy = migrateConfig('something-else', def);
      assert.deepEqual(copy, def);
      assert.notEqual(copy, def);
      assert.deepEqual(migrateConfig('constructor', {}), {});
      assert.deepEqual(migrateConfig('__proto__', { a: 1 }), { a: 1 });
    });

    it('never throws on hostile defs: not objects, prototype words, getters and proxies that throw', () => {
      const current = CONFIG_VERSIONS['graph-gen-download'];
      const filled = migrateConfig('graph-gen-download', {});
      const notObjects = [undefined, null, 0, 42, 'text', true, Symbol('s'), 10n, [], ['a'], () => 1];
      for (const def of notObjects) {
        assert.deepEqual(migrateConfig('graph-gen-download', def), filled, `${typeof def}`);
      }
      // Prototype words are the node's own settings, never its prototype's.
      const words = JSON.parse(
        '{"__proto__": {"mode": "file", "polluted": 1}, "constructor": {"prototype": {"polluted": 1}}, "prototype": 5, "hasOwnProperty": 1}',
      );
      const read = migrateConfig('graph-gen-download', words);
      assert.equal(Object.getPrototypeOf(read), Object.prototype);
      assert.equal(read.mode, 'buffer', 'a mode in __proto__ is not the mode');
      assert.deepEqual(Object.keys(read).slice(0, 4), [
        '__proto__',
        'constructor',
        'prototype',
        'hasOwnProperty',
      ]);
      assert.equal(read.prototype, 5);
      assert.equal({}.polluted, undefined);
      assert.equal(Object.prototype.polluted, undefined);
      // A def without a prototype, one with inherited settings (not its own: filled), a type that is a word.
      const bare = Object.assign(Object.create(null), { mode: 'file' });
      assert.equal(migrateConfig('graph-gen-download', bare).mode, 'file');
      const inherited = Object.create({ mode: 'file' });
      assert.equal(migrateConfig('graph-gen-download', inherited).mode, 'buffer');
      // A getter that throws leaves its setting out (then filled); a configVersion getter that throws reads as 0.
      const getters = {
        get mode() {
          throw new Error('no');
        },
        get configVersion() {
          throw new Error('no');
        },
        directory: '/tmp/x',
      };
      assert.deepEqual(migrateConfig('graph-gen-download', getters), { ...filled, directory: '/tmp/x' });
      // Proxies: keys that cannot be listed, a property that cannot be read, a revoked one.
      const noKeys = new Proxy(
        {},
        {
          ownKeys() {
            throw new Error('no keys');
          },
        },
      );
      assert.deepEqual(migrateConfig('graph-gen-download', noKeys), filled);
      const noValues = new Proxy(
        { mode: 'file', directory: 'd' },
        {
          get(target, key) {
            if (key === 'mode') throw new Error('no');
            return target[key];
          },
        },
      );
      assert.deepEqual(migrateConfig('graph-gen-download', noValues), { ...filled, directory: 'd' });
      const { proxy, revoke } = Proxy.revocable({ mode: 'file' }, {});
      revoke();
      assert.deepEqual(migrateConfig('graph-gen-download', proxy), filled);
      assert.equal(filled.configVersion, current);
    });
  });
});
