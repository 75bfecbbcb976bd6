/**
 * The primitives every reader of outside values is built on (REST answers, socket frames, journal lines, msgs).
 * An outside value is anything a server, a file or a flow made: JSON can carry `{"toString": 1}`, prototype
 * words as keys (`constructor`, `__proto__`), nesting 100,000 deep, strings of megabytes. The rules, kept here
 * so that no reader defends itself by hand:
 * - text is taken from a value only through `textOf` (a string, a finite number or a boolean; never `String()`
 *   of an object, whose `toString` may be anything) and an error's words only through `errorText`;
 * - JSON text is parsed only through `readJsonText`, which refuses nesting past a bound before parsing (nothing
 *   downstream, Node-RED's msg clone included, walks a value by recursion deeper than that);
 * - a word from outside is never a key of a plain object: `Map`, or `ownValue` (Object.hasOwn) on a record.
 * A reader answers "could not read" (`Read` with `ok: false` and a reason) rather than a wrong fact.
 * No Node-RED inside.
 */
import { shownValue } from './json-values';

/** What a reader made of an outside value: the typed value, or why it could not be read. */
export type Read<T> = { ok: true; value: T } | { ok: false; reason: string };

export function readOk<T>(value: T): Read<T> {
  return { ok: true, value };
}

export function unreadable<T>(reason: string): Read<T> {
  return { ok: false, reason };
}

/**
 * Nesting deeper than this is refused before parsing. A ComfyUI answer or frame nests fewer than 20 levels (a
 * UI workflow kept in a job's `extra_pnginfo` the most); Node-RED clones a msg by recursion, which overflows
 * the stack some thousands of levels down.
 */
export const MAX_JSON_DEPTH = 256;

/** Characters of text kept from one outside value by `textOf` unless told otherwise. */
export const MAX_TEXT = 10_000;

/**
 * Whether a JSON text nests deeper than `max` (arrays and objects; brackets inside strings do not count).
 * One pass over the characters, no recursion. A text no longer than `max` cannot nest deeper, so short texts
 * (most frames) cost nothing.
 */
export function nestsDeeperThan(text: string, max: number): boolean {
  if (text.length <= max) return false;
  // A text with no more than `max` opening brackets (in strings or not) cannot nest deeper: counted with the
  // native indexOf, which skips the rest of a frame at memory speed (most frames hold a few dozen).
  let opening = 0;
  for (let at = text.indexOf('{'); at !== -1 && opening <= max; at = text.indexOf('{', at + 1)) opening++;
  for (let at = text.indexOf('['); at !== -1 && opening <= max; at = text.indexOf('[', at + 1)) opening++;
  if (opening <= max) return false;
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === 0x5c /* \ */) index++;
      else if (code === 0x22 /* " */) inString = false;
    } else if (code === 0x22) inString = true;
    else if (code === 0x7b /* { */ || code === 0x5b /* [ */) {
      if (++depth > max) return true;
    } else if (code === 0x7d /* } */ || code === 0x5d /* ] */) depth--;
  }
  return false;
}

/** JSON text as a value, or why it could not be read (not JSON, or nested past `maxDepth`). Never throws. */
export function readJsonText(text: string, maxDepth = MAX_JSON_DEPTH): Read<unknown> {
  if (nestsDeeperThan(text, maxDepth)) return unreadable(`it nests deeper than ${maxDepth} levels`);
  try {
    return readOk(JSON.parse(text) as unknown);
  } catch (error) {
    return unreadable(`it is not JSON (${errorText(error)})`);
  }
}

/**
 * A value as text when it is one: a string (cut to `max` characters), a finite number or a boolean; undefined
 * for anything else. Never calls a value's own `toString`.
 */
export function textOf(value: unknown, max = MAX_TEXT): string | undefined {
  if (typeof value === 'string') return value.length > max ? value.slice(0, max) : value;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : undefined;
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  return undefined;
}

/**
 * A number from a setting or a msg: a finite number, or text that reads as one (spaces around it allowed);
 * undefined for blank text and anything else. Never `Number()` of an object, whose own toString may throw.
 */
export function numberOf(value: unknown): number | undefined {
  const text = (textOf(value) ?? '').trim();
  if (text === '') return undefined;
  const number = Number(text);
  return Number.isFinite(number) ? number : undefined;
}

/** An RFC 3339 date-time: `2026-11-26T21:33:51.006331+00:00`, `...Z`, or without a zone (read as UTC). */
const RFC3339_TIME = /^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)([Zz]|[+-]\d{2}:\d{2})?$/;

/**
 * A date-time from outside in ms since the epoch, or undefined when it is not one. Only RFC 3339 is read:
 * `Date.parse` alone takes almost any text for some date (`"!6!$"` is June 2001), which would be a wrong fact.
 */
export function readTime(value: unknown): number | undefined {
  if (typeof value !== 'string' || value.length > 40) return undefined;
  const parts = RFC3339_TIME.exec(value);
  if (!parts) return undefined;
  const time = Date.parse(`${parts[1]}T${parts[2]}${parts[3] ?? 'Z'}`);
  return Number.isFinite(time) ? time : undefined;
}

/**
 * A thrown value's words for a sentence or a log line: an Error's message when it is a string, a text value as
 * it is, anything else by its kind. Never throws (an Error's `message` may be a getter that throws).
 */
export function errorText(error: unknown, max = MAX_TEXT): string {
  try {
    if (error instanceof Error) {
      const message = textOf(error.message, max);
      if (message !== undefined && message !== '') return message;
      return textOf(error.name, 100) ?? 'an error without a message';
    }
  } catch {
    return 'an error that cannot be shown';
  }
  return textOf(error, max) ?? shownValue(error);
}

/** A record's own property, never one of its prototype's (`constructor`, `toString`, `__proto__`). */
export function ownValue<T>(record: Readonly<Record<string, T>>, key: string): T | undefined;
export function ownValue(record: object, key: string): unknown;
export function ownValue(record: object, key: string): unknown {
  return Object.hasOwn(record, key) ? (record as Record<string, unknown>)[key] : undefined;
}

/**
 * Sets a record's own property, also for a word from outside: assigning `__proto__` would change the record's
 * prototype instead (and lose the value), so that one property is defined; any other is assigned (cheaper).
 */
export function setOwn<T>(record: Record<string, T>, key: string, value: T): void {
  if (key === '__proto__') {
    Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
  } else record[key] = value;
}

/**
 * A copy of a JSON value that shares no object with it, made without recursion (a value from a server may
 * nest deep); a part met twice is copied once. Keys are kept as own properties, `__proto__` included.
 */
export function copyJson<T>(value: T): T {
  if (value === null || typeof value !== 'object') return value;
  const copies = new Map<object, object>();
  const pending: Array<{ source: object; target: Record<string, unknown> | unknown[] }> = [];
  const copyOf = (part: unknown): unknown => {
    if (part === null || typeof part !== 'object') return part;
    const known = copies.get(part);
    if (known) return known;
    const target: Record<string, unknown> | unknown[] = Array.isArray(part) ? [] : {};
    copies.set(part, target);
    pending.push({ source: part, target });
    return target;
  };
  const root = copyOf(value);
  while (pending.length > 0) {
    const { source, target } = pending.pop() as (typeof pending)[number];
    if (Array.isArray(target)) {
      for (const item of source as unknown[]) target.push(copyOf(item));
      continue;
    }
    for (const key of Object.keys(source))
      setOwn(target, key, copyOf((source as Record<string, unknown>)[key]));
  }
  return root as T;
}
