'use strict';
// The house's shape, read from src/ as text (no build needed): no file so long a newcomer cannot hold it (past
// ~400 lines only with a reason in its header, never past 600), and no import circle, type-only imports included,
// because a circle means two modules that cannot be read, tested or moved one without the other.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const src = path.join(root, 'src');
const SAYS_WHY_PAST = 400;
const NEVER_PAST = 600;

function sourceFiles(dir) {
  const found = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...sourceFiles(full));
    else if (entry.name.endsWith('.ts')) found.push(full);
  }
  return found.sort();
}

const named = (file) => path.relative(root, file).split(path.sep).join('/');

/** Lines as an editor numbers them: a final newline ends the last line, it does not start another. */
function lineCount(text) {
  if (text === '') return 0;
  const lines = text.split('\n').length;
  return text.endsWith('\n') ? lines - 1 : lines;
}

/** The file's first comment: a block comment, or a run of line comments, before any code. */
function headerComment(text) {
  const block = /^\s*(\/\*[\s\S]*?\*\/)/.exec(text);
  if (block) return block[1];
  const lines = /^\s*((?:\/\/.*\n\s*)+)/.exec(text);
  return lines ? lines[1] : '';
}

/** Every relative module a file names in an `import` or `export ... from`, type-only ones included. */
function relativeSpecifiers(text) {
  const specifiers = [];
  const statement =
    /^[ \t]*(?:import|export)\b[^;]*?\bfrom\s*['"]([^'"]+)['"]|^[ \t]*import\s*['"]([^'"]+)['"]/gm;
  for (const match of text.matchAll(statement)) {
    const specifier = match[1] ?? match[2];
    if (specifier.startsWith('.')) specifiers.push(specifier);
  }
  return specifiers;
}

function resolveRelative(from, specifier) {
  const base = path.resolve(path.dirname(from), specifier);
  for (const candidate of [base + '.ts', path.join(base, 'index.ts'), base.replace(/\.js$/, '.ts')]) {
    if (fs.existsSync(candidate) && fs.statSync(candidate).isFile()) return candidate;
  }
  return undefined;
}

/** Tarjan's strongly connected components: each with more than one file (or a file importing itself) is a circle. */
function circles(graph) {
  let index = 0;
  const indexOf = new Map();
  const lowOf = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  const visit = (file) => {
    indexOf.set(file, index);
    lowOf.set(file, index);
    index += 1;
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file)) {
      if (!indexOf.has(next)) {
        visit(next);
        lowOf.set(file, Math.min(lowOf.get(file), lowOf.get(next)));
      } else if (onStack.has(next)) {
        lowOf.set(file, Math.min(lowOf.get(file), indexOf.get(next)));
      }
    }
    if (lowOf.get(file) === indexOf.get(file)) {
      const component = [];
      let member;
      do {
        member = stack.pop();
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      if (component.length > 1 || graph.get(file).has(file)) found.push(component.sort());
    }
  };
  for (const file of graph.keys()) if (!indexOf.has(file)) visit(file);
  return found;
}

/** One concrete way round a circle, from its first file back to it, for the failure message. */
function wayRound(graph, component) {
  const members = new Set(component);
  const start = component[0];
  const seen = new Set();
  const walk = (file, trail) => {
    for (const next of graph.get(file)) {
      if (next === start) return [...trail, start];
      if (members.has(next) && !seen.has(next)) {
        seen.add(next);
        const way = walk(next, [...trail, next]);
        if (way) return way;
      }
    }
    return undefined;
  };
  return walk(start, [start]);
}

describe('the house: file sizes and imports under src/', () => {
  const files = sourceFiles(src);
  const texts = new Map(files.map((file) => [file, fs.readFileSync(file, 'utf8')]));

  it('reads the TypeScript under src/', () => {
    assert.ok(files.length > 50, `only ${files.length} files found under src/`);
  });

  it(`has no file past ${NEVER_PAST} lines`, () => {
    const tooLong = files
      .map((file) => ({ file, lines: lineCount(texts.get(file)) }))
      .filter(({ lines }) => lines > NEVER_PAST)
      .map(({ file, lines }) => `${named(file)} (${lines} lines)`);
    assert.deepEqual(tooLong, [], `files past ${NEVER_PAST} lines: ${tooLong.join(', ')}`);
  });

  it(`says in its header why a file is past ${SAYS_WHY_PAST} lines`, () => {
    const unexplained = files
      .map((file) => ({ file, lines: lineCount(texts.get(file)) }))
      .filter(({ file, lines }) => lines > SAYS_WHY_PAST && !headerComment(texts.get(file)).includes('400'))
      .map(({ file, lines }) => `${named(file)} (${lines} lines)`);
    assert.deepEqual(
      unexplained,
      [],
      `files past ${SAYS_WHY_PAST} lines whose header does not say why ("Past 400 lines: ..."): ${unexplained.join(', ')}`,
    );
  });

  it('has no import circle (relative imports, type-only ones included)', () => {
    const graph = new Map();
    const unresolved = [];
    for (const file of files) {
      const targets = new Set();
      for (const specifier of relativeSpecifiers(texts.get(file))) {
        const target = resolveRelative(file, specifier);
        if (target) targets.add(target);
        else unresolved.push(`${named(file)} -> ${specifier}`);
      }
      graph.set(file, targets);
    }
    assert.deepEqual(
      unresolved,
      [],
      `relative imports that name no file under src/: ${unresolved.join(', ')}`,
    );
    const found = circles(graph).map(
      (component) =>
        `${wayRound(graph, component).map(named).join(' -> ')}` +
        (component.length > 2 ? ` (all in the circle: ${component.map(named).join(', ')})` : ''),
    );
    assert.deepEqual(found, [], `import circles:\n  ${found.join('\n  ')}`);
  });

  it('sees a circle, a long file and a header without a reason when there is one', () => {
    const a = path.join(src, 'a.ts');
    const b = path.join(src, 'b.ts');
    const c = path.join(src, 'c.ts');
    const graph = new Map([
      [a, new Set([b])],
      [b, new Set([c])],
      [c, new Set([a])],
    ]);
    assert.deepEqual(circles(graph), [[a, b, c]]);
    assert.deepEqual(wayRound(graph, [a, b, c]), [a, b, c, a]);
    assert.deepEqual(
      circles(
        new Map([
          [a, new Set([b])],
          [b, new Set()],
        ]),
      ),
      [],
    );
    assert.deepEqual(
      relativeSpecifiers(
        "import type { X } from './x';\nimport {\n  Y,\n  Z,\n} from '../y';\nexport { W } from './w';\n" +
          "export type { V } from './v';\nimport './side';\nimport { request } from 'undici';\n" +
          " * import { Q } from './not-code';\n",
      ),
      ['./x', '../y', './w', './v', './side'],
    );
    assert.equal(lineCount('a\nb\n'), 2);
    assert.equal(lineCount('a\nb'), 2);
    assert.match(headerComment('/**\n * Past 400 lines: one story.\n */\nexport const x = 1;\n'), /400/);
    assert.match(headerComment('// What it is.\n// Past 400 lines: why.\nconst x = 1;\n'), /400/);
    assert.doesNotMatch(headerComment('/** What it is. */\n/** Past 400 lines: too late. */\n'), /400/);
  });
});
