'use strict';
// The package's pages and the links between them: README.md (the user's guide, the one page npm and the Flow
// Library show), docs/ (the reference, a page per node or topic), CONTRIBUTING.md and bench/README.md. Every link
// to a file of the repository reaches a file that exists, and every #anchor a heading of its target as GitHub
// names it (lower case, punctuation dropped, spaces to '-', a repeated heading numbered).
//
// README.md links to the other pages by absolute address on the repository's default branch, never relatively:
// docs/ is not in the tarball (the tests of the tarball hold it to what users run), and the Flow Library, which
// shows the README from the tarball, resolves a relative link against the repository's 'master' branch, as raw
// text when the link has an anchor (node-red/flow-library, routes/nodes.js). npm would rewrite a relative link to
// the repository's blob/HEAD; an absolute one reads the same on npm, on the Flow Library and on GitHub. The other
// pages are read on GitHub or in a clone, where a relative link is the one that follows a branch.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const pkg = require('../package.json');

/** https://github.com/<owner>/<name>, from package.json's repository (git+https://github.com/x/y.git). */
const repository = /github\.com[/:]([^/]+\/[^/]+?)(?:\.git)?$/.exec(pkg.repository.url);
const repoName = repository && repository[1];
/** The branch the README's absolute links and images name (the images' raw addresses use it too). */
const branch = 'main';
const blob = `https://github.com/${repoName}/blob/${branch}/`;
const tree = `https://github.com/${repoName}/tree/${branch}/`;
const raw = `https://raw.githubusercontent.com/${repoName}/${branch}/`;

const pages = [
  'README.md',
  'CONTRIBUTING.md',
  'bench/README.md',
  ...fs
    .readdirSync(path.join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The text of a page with fenced code blocks blanked (a '# comment' in a shell block is no heading). */
function prose(file) {
  let fence = null;
  return fs
    .readFileSync(path.join(root, file), 'utf8')
    .split('\n')
    .map((line) => {
      const marker = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
      if (fence) {
        if (marker && marker[1][0] === fence[0] && marker[1].length >= fence.length) fence = null;
        return '';
      }
      if (marker) {
        fence = marker[1];
        return '';
      }
      return line;
    });
}

/** A heading's text as GitHub renders it: code spans' text kept, links' text kept, emphasis marks dropped. */
function headingText(markdown) {
  return markdown
    .split(/(`[^`]*`)/)
    .map((part) =>
      part.startsWith('`')
        ? part.slice(1, -1)
        : part
            .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
            .replace(/<[^>]+>/g, '')
            .replace(/\*+/g, '')
            .replace(/(^|[^\p{L}\p{N}])_+|_+(?=[^\p{L}\p{N}]|$)/gu, '$1'),
    )
    .join('');
}

/** GitHub's anchor for a heading (github-slugger): lower case, all but letters, digits, '_', '-' and spaces dropped. */
function slug(text) {
  return headingText(text)
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

const anchorCache = new Map();
/** Every anchor a page has: one per ATX heading, a repeated one numbered -1, -2, ... as GitHub does. */
function anchorsOf(file) {
  if (!anchorCache.has(file)) {
    const anchors = new Set();
    for (const line of prose(file)) {
      const heading = /^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
      if (!heading) continue;
      const base = slug(heading[1]);
      let anchor = base;
      for (let n = 1; anchors.has(anchor); n++) anchor = `${base}-${n}`;
      anchors.add(anchor);
    }
    anchorCache.set(file, anchors);
  }
  return anchorCache.get(file);
}

/**
 * The links of a page: inline ones ([text](target), images too), reference definitions ([label]: target) and the
 * links that use them ([text][label], [label][]), each with its target; `undefined` lists labels used, never defined.
 */
function linksOf(file) {
  const links = [];
  const uses = [];
  const definitions = new Map();
  prose(file).forEach((line, index) => {
    const where = `${file}:${index + 1}`;
    const text = line.replace(/(`+)[\s\S]*?\1/g, (code) => code.replace(/[[\]()]/g, ' '));
    const definition = /^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+.*)?$/.exec(text);
    if (definition) {
      definitions.set(definition[1].toLowerCase(), definition[2]);
      links.push({ where, target: definition[2] });
      return;
    }
    for (const match of text.matchAll(/!?\[((?:[^[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+[^)]*)?\)/g))
      links.push({
        where,
        text: line.slice(match.index + 1, match.index + 1 + match[1].length),
        target: match[2],
      });
    for (const match of text.matchAll(/\[((?:[^[\]]|\[[^\]]*\])*)\]\[([^\]]*)\]/g))
      uses.push({
        where,
        text: line.slice(match.index + 1, match.index + 1 + match[1].length),
        label: (match[2] || match[1]).toLowerCase(),
      });
  });
  const undefinedLabels = [];
  for (const use of uses) {
    if (definitions.has(use.label)) links.push({ ...use, target: definitions.get(use.label) });
    else undefinedLabels.push(`${use.where}: [${use.label}] is used but not defined`);
  }
  return { links, undefinedLabels };
}

/**
 * Where a link leads in the repository: `{file, anchor}` for a page or file of it (by a relative path, or an
 * absolute address on the repository's branch), `{external}` for anything else.
 */
function resolve(file, target) {
  const hash = target.indexOf('#');
  const address = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  if (address === '') return { file, anchor, kind: 'page' };
  for (const [base, kind] of [
    [blob, 'file'],
    [tree, 'folder'],
    [raw, 'file'],
  ]) {
    if (address.startsWith(base))
      return { file: decodeURIComponent(address.slice(base.length)), anchor, kind };
  }
  if (/^[a-z][a-z0-9+.-]*:/i.test(address)) return { external: true };
  const relative = path.posix.normalize(
    path.posix.join(path.posix.dirname(file), decodeURIComponent(address)),
  );
  return { file: relative.replace(/\/$/, ''), anchor, kind: 'relative', relative: true };
}

describe('the pages and their links', () => {
  it('the repository address comes from package.json', () => {
    assert.equal(repoName, 'graph-gen/node-red', pkg.repository.url);
  });

  for (const file of pages) {
    it(`${file}: every link to the repository reaches a file that exists, every #anchor a heading there`, () => {
      const { links, undefinedLabels } = linksOf(file);
      const broken = [];
      for (const { where, target } of links) {
        const to = resolve(file, target);
        if (to.external) continue;
        if (to.relative && file === 'README.md') {
          broken.push(`${where}: ${target} is relative; the README links by absolute address (${blob}...)`);
          continue;
        }
        if (to.file.startsWith('..') || path.isAbsolute(to.file)) {
          broken.push(`${where}: ${target} leads out of the repository`);
          continue;
        }
        const full = path.join(root, to.file);
        if (!fs.existsSync(full)) {
          broken.push(`${where}: ${target}: no ${to.file} in the repository`);
          continue;
        }
        const folder = fs.statSync(full).isDirectory();
        if (to.kind === 'file' && folder) broken.push(`${where}: ${target} is a folder (use ${tree})`);
        if (to.kind === 'folder' && !folder) broken.push(`${where}: ${target} is a file (use ${blob})`);
        if (to.anchor !== null) {
          if (!to.file.endsWith('.md'))
            broken.push(`${where}: ${target}: an anchor into a file that is not a page`);
          else if (!anchorsOf(to.file).has(to.anchor))
            broken.push(`${where}: ${target}: ${to.file} has no heading #${to.anchor}`);
        }
      }
      assert.deepEqual([...broken, ...undefinedLabels], []);
    });
  }

  it('the README links each node type of package.json to its page in docs/', () => {
    const { links } = linksOf('README.md');
    for (const type of Object.keys(pkg['node-red'].nodes)) {
      const link = links.find(({ text }) => text === `\`${type}\``);
      assert.ok(link, `the README's nodes table has no link on \`${type}\``);
      const to = resolve('README.md', link.target);
      assert.ok(!to.external && /^docs\/[^/]+\.md$/.test(to.file), `${type} links to ${link.target}`);
    }
  });

  it('the README reaches every other page: the reference index, CONTRIBUTING.md and bench/README.md', () => {
    const targets = new Set(
      linksOf('README.md')
        .links.map(({ target }) => resolve('README.md', target))
        .filter((to) => !to.external)
        .map((to) => to.file),
    );
    for (const page of ['docs/README.md', 'CONTRIBUTING.md', 'bench/README.md'])
      assert.ok(targets.has(page), `the README does not link to ${page}`);
  });

  it('the reference index links every page of docs/', () => {
    const targets = new Set(
      linksOf('docs/README.md')
        .links.map(({ target }) => resolve('docs/README.md', target))
        .filter((to) => !to.external)
        .map((to) => to.file),
    );
    for (const page of pages.filter((file) => file.startsWith('docs/') && file !== 'docs/README.md'))
      assert.ok(targets.has(page), `docs/README.md does not link to ${page}`);
  });

  it("reads headings as GitHub names them, so the anchors above are GitHub's", () => {
    assert.equal(
      slug('`graph-gen-queue` (palette: queue; the label shows the action)'),
      'graph-gen-queue-palette-queue-the-label-shows-the-action',
    );
    assert.equal(slug("A job's life"), 'a-jobs-life');
    assert.equal(
      slug('Retries, limits and secrets (all generation nodes)'),
      'retries-limits-and-secrets-all-generation-nodes',
    );
    assert.equal(
      slug('Protected servers: a login, TLS and a proxy'),
      'protected-servers-a-login-tls-and-a-proxy',
    );
    assert.equal(slug('The `msg_id` of _a_ [link](x.md)'), 'the-msg_id-of-a-link');
    assert.equal(slug('Über 2 × 3'), 'über-2--3');
  });
});
