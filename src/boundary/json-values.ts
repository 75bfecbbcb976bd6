/**
 * Values that came in with a message, as a sentence shows them and as JSON would carry them. A msg property
 * may be anything a flow built: an object that refers to itself, a BigInt, a huge array. JSON.stringify
 * throws on the first two ("Converting circular structure to JSON") and costs as much as the third is large,
 * so neither is called on such a value for a sentence. Also the one check that a value is an object (not null,
 * not an array) that readers of answers and msgs share. No Node-RED inside.
 */

/** A JSON object (not null, not an array): what an answer's or a msg's object-shaped parts are checked with. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Text values are shown up to this many characters. */
const SHOWN_TEXT = 60;

/**
 * A value for a sentence: text and numbers as JSON writes them (text cut short), anything else by its kind
 * (`an object`, `an array of 3 items`, `a Buffer of 12 bytes`), never by walking it.
 */
export function shownValue(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value.length > SHOWN_TEXT ? `${value.slice(0, SHOWN_TEXT)}…` : value);
    case 'number':
    case 'boolean':
      return String(value);
    case 'bigint':
      return `${value}n`;
    case 'undefined':
      return 'undefined';
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
  }
  if (value === null) return 'null';
  if (Buffer.isBuffer(value)) return `a Buffer of ${value.length} bytes`;
  if (Array.isArray(value)) return `an array of ${value.length} item${value.length === 1 ? '' : 's'}`;
  return 'an object';
}

export interface JsonProblem {
  /** Where in the value, e.g. `3.inputs.text` or `list[2]`; empty for the value itself. */
  path: string;
  /** What is wrong there, e.g. `refers to itself (a circular structure)`. */
  problem: string;
}

/** Deeper than this is refused (JSON.stringify itself runs out of stack somewhere past it). */
const MAX_DEPTH = 1000;
/** Values looked at, at most, to find the problem (shared parts are looked at once per path). */
const MAX_VISITS = 100_000;

interface Frame {
  value: object;
  key: string;
  isIndex: boolean;
  parent?: Frame;
  depth: number;
}

function pathOf(frame: Frame): string {
  const parts: string[] = [];
  for (let at: Frame | undefined = frame; at?.parent; at = at.parent) {
    parts.push(at.isIndex ? `[${at.key}]` : at.parent.parent ? `.${at.key}` : at.key);
  }
  return parts.reverse().join('');
}

/**
 * Why a value cannot be sent as JSON, and where: a part that refers to itself, a BigInt, nesting deeper
 * than MAX_DEPTH, or a `toJSON` that throws; undefined when JSON.stringify takes it.
 */
export function jsonProblemOf(value: unknown): JsonProblem | undefined {
  try {
    JSON.stringify(value);
    return undefined;
  } catch (error) {
    return locate(value) ?? { path: '', problem: `cannot be written as JSON (${(error as Error).message})` };
  }
}

/** Walks the value without recursion (it may be deep), keeping the objects on the current path. */
function locate(root: unknown): JsonProblem | undefined {
  if (typeof root === 'bigint') return { path: '', problem: 'is a BigInt, which JSON cannot hold' };
  if (root === null || typeof root !== 'object') return undefined;
  const onPath = new Set<object>();
  const stack: Array<{ frame: Frame; leaving: boolean }> = [
    { frame: { value: root, key: '', isIndex: false, depth: 0 }, leaving: false },
  ];
  let visits = 0;
  while (stack.length > 0 && visits++ < MAX_VISITS) {
    const { frame, leaving } = stack.pop() as { frame: Frame; leaving: boolean };
    if (leaving) {
      onPath.delete(frame.value);
      continue;
    }
    if (onPath.has(frame.value))
      return { path: pathOf(frame), problem: 'refers to itself (a circular structure)' };
    if (frame.depth > MAX_DEPTH)
      return { path: pathOf(frame), problem: `nests deeper than ${MAX_DEPTH} levels` };
    // A value with its own toJSON (a Date, a Buffer) is written as that: not walked.
    if (typeof (frame.value as { toJSON?: unknown }).toJSON === 'function') continue;
    onPath.add(frame.value);
    stack.push({ frame, leaving: true });
    const isArray = Array.isArray(frame.value);
    for (const [key, child] of Object.entries(frame.value)) {
      const childFrame = { key, isIndex: isArray, parent: frame, depth: frame.depth + 1 };
      if (typeof child === 'bigint') {
        return { path: pathOf({ ...childFrame, value: {} }), problem: 'is a BigInt, which JSON cannot hold' };
      }
      if (child !== null && typeof child === 'object') {
        stack.push({ frame: { ...childFrame, value: child }, leaving: false });
      }
    }
  }
  return undefined;
}
