'use strict';
// The message catalogs are complete: every key the editor HTML and the node files ask for is in en-US, and the
// German catalog has exactly the en-US keys of the groups it translates (labels, options, placeholders,
// statuses, dialog texts), with the same placeholders. Runtime sentences (errors, warnings, test answers) are
// English in every language. Also: the runtime texts come through Node-RED's i18next in German, and in
// English from the files when no catalog is loaded.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const i18next = require('i18next');
const { catalogTexts } = require('../../dist/nodes/node-helpers');

const root = path.join(__dirname, '..', '..');
const types = Object.keys(require('../../package.json')['node-red'].nodes);
const nodesDir = path.join(root, 'nodes');

/** Groups of runtime sentences, kept English in every language (they reach msg.error and logs). */
const ENGLISH_ONLY = new Set(['errors', 'warnings', 'test']);

/**
 * Keys src/nodes/node-helpers.ts asks for in the catalog of the node that calls the helper. Listed here so a
 * key added to the helpers without telling this test fails below.
 */
const HELPER_KEYS = {
  showSocketTrouble: ['status.unauthorized', 'status.reconnecting'],
  generationConnection: ['errors.no-config'],
  connectionTestTarget: ['errors.env-in-settings'],
};

function catalog(lang, type) {
  const file = path.join(nodesDir, 'locales', lang, `${type}.json`);
  const json = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.ok(json[type], `${lang}/${type}.json is keyed by the type`);
  return json[type];
}

/** `group.key` (or a top-level `paletteLabel`) -> text. */
function flatten(object, prefix = '') {
  const out = {};
  for (const [key, value] of Object.entries(object)) {
    if (typeof value === 'string') out[prefix + key] = value;
    else Object.assign(out, flatten(value, `${prefix}${key}.`));
  }
  return out;
}

const translated = (key) => !ENGLISH_ONLY.has(key.split('.')[0]);
const placeholders = (text) => [...text.matchAll(/__(\w+)__/g)].map((match) => match[1]).sort();

/** Catalog keys an editor file names: data-i18n attributes and this._/node._/RED._ calls. */
function editorKeys(html, type) {
  const keys = new Set();
  for (const [, attribute] of html.matchAll(/data-i18n="([^"]+)"/g)) {
    for (const part of attribute.split(';')) keys.add(part.replace(/^\[[^\]]+\]/, ''));
  }
  for (const [, key] of html.matchAll(/\b(?:this|node|RED)\._\(\s*'([^']+)'/g)) keys.add(key);
  // `this._(cond ? 'a' : 'b')` and similar: every quoted `<type>.x.y` in the file.
  for (const [, key] of html.matchAll(new RegExp(`'(${type}\\.[\\w.-]+)'`, 'g'))) keys.add(key);
  // Keys of other namespaces (node-red:common...) are Node-RED's own; `<type>.svg` is an icon.
  return [...keys].filter((key) => !key.includes(':') && !key.endsWith('.svg'));
}

/** Catalog keys a node file asks for: every quoted `status.x`, `errors.x`, `warnings.x`, `test.x`. */
function runtimeKeys(source) {
  return [...source.matchAll(/'((?:status|errors|warnings|test)\.[\w-]+)'/g)].map((match) => match[1]);
}

describe('message catalogs', () => {
  const helpers = fs.readFileSync(path.join(root, 'src', 'nodes', 'node-helpers.ts'), 'utf8');

  it('the helper keys listed here are the ones node-helpers.ts asks for', () => {
    assert.deepEqual(new Set(runtimeKeys(helpers)), new Set(Object.values(HELPER_KEYS).flat()));
  });

  for (const type of types) {
    describe(type, () => {
      const en = flatten(catalog('en-US', type));
      const de = flatten(catalog('de', type));

      it('de has every en-US key of the translated groups, and no key en-US lacks', () => {
        const missing = Object.keys(en).filter((key) => translated(key) && !(key in de));
        const extra = Object.keys(de).filter((key) => !(key in en));
        assert.deepEqual({ missing, extra }, { missing: [], extra: [] });
      });

      it('de keeps each text’s placeholders, and translates no runtime sentence', () => {
        for (const key of Object.keys(de)) {
          assert.deepEqual(placeholders(de[key]), placeholders(en[key]), `${key}: placeholders`);
          assert.ok(translated(key), `${key} is a runtime sentence, English in every language`);
        }
      });

      it('statuses fit under the node, in both languages (under 20 characters with one-digit values)', () => {
        for (const [key, text] of [...Object.entries(en), ...Object.entries(de)]) {
          if (!key.startsWith('status.')) continue;
          const sample = text.replace(/__\w+__/g, '1');
          assert.ok(sample.length < 20, `${key}: "${text}" is cut off under the node`);
        }
      });

      it('every key its editor HTML names is in en-US', () => {
        const html = fs.readFileSync(path.join(nodesDir, `${type}.html`), 'utf8');
        const keys = editorKeys(html, type);
        assert.ok(keys.length > 5, `${keys.length} keys found in ${type}.html`);
        const missing = keys.filter((key) => !(key.slice(type.length + 1) in en));
        assert.deepEqual(missing, [], `keys of ${type}.html missing in en-US/${type}.json`);
        if (!type.endsWith('-config')) {
          assert.ok('paletteLabel' in en && 'paletteLabel' in de, 'a palette label in both languages');
        }
      });

      it('every key its node file, and the files named after it (<type>-*.ts), asks for is in en-US', () => {
        const sourceDir = path.join(root, 'src', 'nodes');
        const source = fs
          .readdirSync(sourceDir)
          .filter((file) => file === `${type}.ts` || (file.startsWith(`${type}-`) && file.endsWith('.ts')))
          .map((file) => fs.readFileSync(path.join(sourceDir, file), 'utf8'))
          .join('\n');
        const keys = runtimeKeys(source);
        for (const [helper, helperKeys] of Object.entries(HELPER_KEYS)) {
          if (source.includes(`${helper}(`)) keys.push(...helperKeys);
        }
        assert.ok(keys.length > 0, `${type}.ts asks for no catalog text`);
        const missing = keys.filter((key) => !(key in en));
        assert.deepEqual(missing, [], `keys of ${type}.ts missing in en-US/${type}.json`);
      });

      it('has its help in en-US/<type>.html', () => {
        const help = fs.readFileSync(path.join(nodesDir, 'locales', 'en-US', `${type}.html`), 'utf8');
        assert.match(help, new RegExp(`^<script type="text/html" data-help-name="${type}">`));
      });
    });
  }
});

describe('runtime texts (catalogTexts)', () => {
  /** A RED whose `_` is Node-RED's i18next set up as the runtime sets it up, in `lang`. */
  async function redIn(lang) {
    const instance = i18next.createInstance();
    const resources = {};
    for (const language of ['en-US', 'de']) {
      resources[language] = {};
      for (const type of types) {
        resources[language][type] = JSON.parse(
          fs.readFileSync(path.join(root, 'dist', 'nodes', 'locales', language, `${type}.json`), 'utf8'),
        );
      }
    }
    await instance.init({
      lng: lang,
      fallbackLng: 'en-US',
      resources,
      keySeparator: '.',
      nsSeparator: ':',
      interpolation: { unescapeSuffix: 'HTML', escapeValue: false, prefix: '__', suffix: '__' },
    });
    const calls = [];
    return {
      calls,
      // A node file's RED._ prefixes its namespace (the node set), as Node-RED's registry does.
      namespaced: (type) => ({
        _: (key, values) => {
          calls.push(key);
          return instance.t(`${type}:${key}`, values);
        },
      }),
    };
  }

  it('in German: statuses from the de catalog, error sentences in English, placeholders filled', async () => {
    const red = await redIn('de');
    const upload = catalogTexts(red.namespaced('graph-gen-upload'), 'graph-gen-upload');
    assert.equal(upload('status.uploading'), 'lade hoch…');
    assert.equal(upload('status.uploaded', { name: 'fox.png' }), 'hochgeladen: fox.png');
    assert.equal(upload('status.uploaded', { name: 'cat.png' }), 'hochgeladen: cat.png');
    assert.equal(
      upload('errors.bad-type', { type: 'output' }),
      'msg.type must be "input" or "temp", not "output"',
    );
    const queue = catalogTexts(red.namespaced('graph-gen-queue'), 'graph-gen-queue');
    assert.equal(queue('status.listed', { running: 1, queued: 2 }), '1 laufen, 2 warten');
    // Each key is looked up once, whatever the values.
    assert.equal(red.calls.filter((key) => key === 'graph-gen-upload.status.uploaded').length, 1);
  });

  it('in English when Node-RED has no catalog loaded (the test helper): read from the en-US file', () => {
    const notLoaded = { _: (key) => key };
    const download = catalogTexts(notLoaded, 'graph-gen-download');
    assert.equal(download('status.file-of', { number: 2, count: 3 }), 'file 2/3…');
    assert.equal(download('errors.no-file'), 'msg.payload names no file to download');
    // A key no catalog has shows as itself rather than throwing out of a handler.
    assert.equal(download('status.nothing-like-this'), 'status.nothing-like-this');
  });
});
