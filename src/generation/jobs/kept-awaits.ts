/**
 * What an await-job node keeps of each job it awaits, so the await goes on after Node-RED restarts: the job's
 * config node, the msg it got, and when its time limit runs out. Kept in a journal (persist/journal.ts) under
 * Node-RED's user directory, readable by its owner only.
 *
 * Of the msg, only what the resumed msg can be again: text, finite numbers, booleans, null, arrays and plain
 * objects of those, and Buffers up to 1 MiB (as base64). Left out, wherever in the msg: an HTTP request's
 * `req`/`res` (a live request cannot be answered after a restart, and its headers may hold a password),
 * functions, symbols, BigInts, NaN and infinities, a part that refers to itself, nesting past MAX_JSON_DEPTH,
 * and instances of classes other than Buffer (a Date, a Map, a socket). The msg is walked without recursion, and
 * the walk stops once what it kept passes the largest entry a journal keeps (`maxBytes`).
 *
 * Reading back is a boundary (the file is outside data): `readKeptAwait` checks an entry's shape, and
 * `restoredMessage` makes Buffers again from their tags only. A kept plain object that has a key `$buffer` or
 * `$plain` of its own is wrapped as `{"$plain": {...}}`, so no msg is read back as something it was not.
 * No Node-RED inside.
 */
import { MAX_JSON_DEPTH, ownValue, readOk, setOwn, unreadable, type Read } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';

export interface KeptAwait {
  /** The config node the job was awaited through. */
  config: string;
  /** The msg, as `keptMessage` made it (Buffers tagged). */
  msg: Record<string, unknown>;
  /** When its time limit runs out (ms since the epoch); absent: no limit. */
  deadline?: number;
}

/** A Buffer larger than this is not kept. */
export const KEPT_BUFFER_BYTES = 1024 * 1024;
/** Properties of an HTTP request's msg that are live objects, never kept. */
const LIVE = new Set(['req', 'res']);
/** A kept Buffer is written as `{"$buffer": "<base64>"}`. */
const BUFFER_TAG = '$buffer';
/** A kept plain object that has a tag's key of its own is written as `{"$plain": {...}}`. */
const PLAIN_TAG = '$plain';
/** Paths named in `omitted` at most, and characters of each. */
const OMITTED_SHOWN = 20;
const PATH_SHOWN = 200;
/** A kept msg's properties sit this deep in a journal line: `{"k": .., "v": {"msg": {..}}}`. */
const LINE_NESTING = 3;

/** The msg as it can be kept, `omitted` naming the paths left out; or why it is not kept at all. */
export type KeptMessage =
  { ok: true; msg: Record<string, unknown>; omitted: string[] } | { ok: false; reason: string };

interface Frame {
  source: object;
  target: Record<string, unknown> | unknown[];
  path: string;
  /** Levels of the journal line around its copy's entries. */
  nesting: number;
  /** It has a tag's key of its own: its copy is wrapped. */
  tagged: boolean;
  leaving: boolean;
}

/**
 * The msg as it can be kept (see the header); refused when what would be kept passes `maxBytes` as JSON (a
 * lower bound is counted as it walks, so a huge msg costs no more than `maxBytes` of walking). Never throws.
 */
export function keptMessage(msg: Record<string, unknown>, maxBytes = Infinity): KeptMessage {
  const kept: Record<string, unknown> = {};
  const omitted: string[] = [];
  const omit = (path: string): void => {
    if (omitted.length < OMITTED_SHOWN) omitted.push(path.slice(0, PATH_SHOWN));
  };
  const budget = { bytes: 2, max: maxBytes };
  let names: string[];
  try {
    names = Object.keys(msg);
  } catch {
    return { ok: false, reason: 'its properties cannot be listed' };
  }
  for (const name of names) {
    if (LIVE.has(name)) {
      omit(name);
      continue;
    }
    try {
      const value = keptValue(msg[name], name, omit, budget);
      if (value !== undefined) setOwn(kept, name, value);
    } catch {
      // A getter or a proxy that throws: the property is not kept.
      omit(name);
    }
    if (budget.bytes > budget.max)
      return { ok: false, reason: `it is more than ${budget.max} bytes as JSON (${name} and before)` };
  }
  return { ok: true, msg: kept, omitted };
}

/**
 * One value as kept (undefined: left out; `omit` is told the path unless JSON would have dropped it silently
 * too). Iterative, with the objects on the current path in `onPath`: a part that refers to itself is left out,
 * one that is merely shared is kept twice, as JSON would.
 */
function keptValue(
  root: unknown,
  rootPath: string,
  omit: (path: string) => void,
  budget: { bytes: number; max: number },
): unknown {
  const onPath = new Set<object>();
  const stack: Frame[] = [];
  /** `nesting`: levels of the journal line around the value; `keyBytes`: what its key costs there. */
  const leaf = (value: unknown, path: string, nesting: number, keyBytes: number): unknown => {
    budget.bytes += keyBytes + 1;
    switch (typeof value) {
      case 'string':
        budget.bytes += value.length + 1;
        return value;
      case 'boolean':
        return value;
      case 'number':
        if (Number.isFinite(value)) return value === 0 ? 0 : value;
        omit(path);
        return undefined;
      case 'undefined':
        return undefined;
      case 'object':
        break;
      default:
        // function, symbol, bigint
        omit(path);
        return undefined;
    }
    if (value === null) return null;
    if (Buffer.isBuffer(value)) {
      if (value.length > KEPT_BUFFER_BYTES || nesting + 1 > MAX_JSON_DEPTH) {
        omit(path);
        return undefined;
      }
      budget.bytes += Math.ceil(value.length / 3) * 4 + 13;
      return { [BUFFER_TAG]: value.toString('base64') };
    }
    const isArray = Array.isArray(value);
    const prototype: unknown = isArray ? undefined : Object.getPrototypeOf(value);
    if (!isArray && prototype !== Object.prototype && prototype !== null) {
      omit(path);
      return undefined;
    }
    const tagged = !isArray && (Object.hasOwn(value, BUFFER_TAG) || Object.hasOwn(value, PLAIN_TAG));
    const levels = nesting + (tagged ? 2 : 1);
    if (onPath.has(value) || levels > MAX_JSON_DEPTH) {
      omit(path);
      return undefined;
    }
    const target: Record<string, unknown> | unknown[] = isArray ? [] : {};
    stack.push({ source: value, target, path, nesting: levels, tagged, leaving: false });
    return target;
  };
  const top = leaf(root, rootPath, LINE_NESTING, rootPath.length + 3);
  while (stack.length > 0 && budget.bytes <= budget.max) {
    const frame = stack.pop() as Frame;
    if (frame.leaving) {
      onPath.delete(frame.source);
      continue;
    }
    onPath.add(frame.source);
    stack.push({ ...frame, leaving: true });
    if (Array.isArray(frame.source)) {
      const target = frame.target as unknown[];
      for (let index = 0; index < frame.source.length; index++) {
        // What JSON cannot hold in an array becomes null there, as JSON writes it.
        target.push(leaf(frame.source[index], `${frame.path}[${index}]`, frame.nesting, 0) ?? null);
      }
      continue;
    }
    const target = frame.target as Record<string, unknown>;
    // A tagged object's copy goes inside `{"$plain": ...}`: the parent already holds the wrapper.
    const copy: Record<string, unknown> = frame.tagged ? {} : target;
    if (frame.tagged) setOwn(target, PLAIN_TAG, copy);
    for (const key of Object.keys(frame.source)) {
      const value = leaf(
        (frame.source as Record<string, unknown>)[key],
        `${frame.path}.${key}`,
        frame.nesting,
        key.length + 3,
      );
      if (value !== undefined) setOwn(copy, key, value);
    }
  }
  return top;
}

/** A journal entry as a kept await, or why it is not one. Its msg stays as kept (`restoredMessage` makes it). */
export function readKeptAwait(value: unknown): Read<KeptAwait> {
  if (!isRecord(value)) return unreadable('a kept await is not an object');
  const config = ownValue(value, 'config');
  const msg = ownValue(value, 'msg');
  const deadline = ownValue(value, 'deadline');
  if (typeof config !== 'string') return unreadable('a kept await names no config node');
  if (!isRecord(msg)) return unreadable('a kept await has no msg');
  if (deadline !== undefined && (typeof deadline !== 'number' || !Number.isFinite(deadline)))
    return unreadable('a kept await has a deadline that is not a time');
  return readOk(deadline === undefined ? { config, msg } : { config, msg, deadline });
}

/**
 * The kept msg as a msg again: its Buffers made from their tags, `$plain` wrappers taken off. Iterative (what
 * the journal read is at most MAX_JSON_DEPTH deep, but no reader of outside data recurses). Never throws.
 */
export function restoredMessage(kept: Record<string, unknown>): Record<string, unknown> {
  const restored: Record<string, unknown> = {};
  const stack: Array<{ source: unknown; target: Record<string, unknown> | unknown[] }> = [
    { source: kept, target: restored },
  ];
  const restore = (value: unknown): unknown => {
    if (value === null || typeof value !== 'object') return value;
    if (isRecord(value)) {
      const keys = Object.keys(value);
      const only = keys.length === 1 ? value[keys[0]] : undefined;
      if (keys[0] === BUFFER_TAG && typeof only === 'string') return Buffer.from(only, 'base64');
      const target = {};
      stack.push({ source: keys[0] === PLAIN_TAG && isRecord(only) ? only : value, target });
      return target;
    }
    const target: unknown[] = [];
    stack.push({ source: value, target });
    return target;
  };
  while (stack.length > 0) {
    const { source, target } = stack.pop() as (typeof stack)[number];
    if (Array.isArray(target)) {
      for (const item of source as unknown[]) target.push(restore(item));
      continue;
    }
    for (const [key, item] of Object.entries(source as Record<string, unknown>))
      setOwn(target, key, restore(item));
  }
  return restored;
}
