/**
 * What an await-job node keeps of each job it awaits, so the await goes on after Node-RED restarts: the job's
 * config node, the msg it got (its JSON-able properties: Buffers up to 1 MiB are kept, larger ones and an HTTP
 * request's `req`/`res` are left out, as is a property JSON cannot hold), and when its time limit runs out. Kept in
 * a journal (persist/journal.ts) under Node-RED's user directory. No Node-RED inside.
 */
import { jsonProblemOf } from '../../boundary/json-values';

export interface KeptAwait {
  /** The config node the job was awaited through. */
  config: string;
  /** The msg, as `keptMessage` made it. */
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

/**
 * The msg as it can be kept: its own properties that JSON can hold, Buffers up to 1 MiB as base64; `omitted`
 * names what was left out.
 */
export function keptMessage(msg: Record<string, unknown>): {
  msg: Record<string, unknown>;
  omitted: string[];
} {
  const kept: Record<string, unknown> = {};
  const omitted: string[] = [];
  for (const [name, value] of Object.entries(msg)) {
    if (LIVE.has(name) || value === undefined || typeof value === 'function' || typeof value === 'symbol') {
      if (value !== undefined) omitted.push(name);
      continue;
    }
    if (Buffer.isBuffer(value) && value.length > KEPT_BUFFER_BYTES) {
      omitted.push(name);
      continue;
    }
    if (jsonProblemOf(value) !== undefined || holdsLargeBuffer(value)) {
      omitted.push(name);
      continue;
    }
    kept[name] = encodeBuffers(value);
  }
  return { msg: kept, omitted };
}

/** The kept msg as a msg again: its Buffers restored. */
export function restoredMessage(kept: Record<string, unknown>): Record<string, unknown> {
  return decodeBuffers(kept) as Record<string, unknown>;
}

function holdsLargeBuffer(value: unknown): boolean {
  let found = false;
  walk(value, (item) => {
    if (Buffer.isBuffer(item) && item.length > KEPT_BUFFER_BYTES) found = true;
    return found;
  });
  return found;
}

/** Visits every value below `value` (iteratively: a deep one cannot overflow the stack); stops when `visit` says. */
function walk(value: unknown, visit: (item: unknown) => boolean): void {
  const stack: unknown[] = [value];
  const seen = new Set<unknown>();
  while (stack.length > 0) {
    const item = stack.pop();
    if (visit(item)) return;
    if (item === null || typeof item !== 'object' || Buffer.isBuffer(item) || seen.has(item)) continue;
    seen.add(item);
    for (const inner of Object.values(item)) stack.push(inner);
  }
}

function encodeBuffers(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value, function (this: Record<string, unknown>, key: string, item: unknown) {
      const original = key === '' ? value : this[key];
      return Buffer.isBuffer(original) ? { [BUFFER_TAG]: original.toString('base64') } : item;
    }),
  ) as unknown;
}

function decodeBuffers(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value), (_key, item: unknown) => {
    if (item && typeof item === 'object' && !Array.isArray(item)) {
      const record = item as Record<string, unknown>;
      const keys = Object.keys(record);
      if (keys.length === 1 && keys[0] === BUFFER_TAG && typeof record[BUFFER_TAG] === 'string')
        return Buffer.from(record[BUFFER_TAG], 'base64');
    }
    return item;
  }) as unknown;
}
