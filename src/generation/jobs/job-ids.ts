/**
 * What a job id from a server's answer may be before it is kept anywhere (a queue read, the list of jobs, the
 * job-events memory and its journal): text of at most MAX_JOB_ID_LENGTH characters, not empty. A server's
 * ids are UUIDs (36 characters) or a cloud's job ids (shorter still); anything else is not a job id: it is
 * dropped with a reason, never kept as a key of a set, a map or a journal line. One place, so every reader of
 * ids agrees. No Node-RED inside.
 */
import { ownValue, readOk, unreadable, type Read } from '../../boundary/outside';
import { isRecord, shownValue } from '../../boundary/json-values';

/** The longest job id kept. */
export const MAX_JOB_ID_LENGTH = 200;

/** A job id, or why the value is none. Never throws. */
export function readJobId(value: unknown): Read<string> {
  if (typeof value !== 'string') return unreadable(`a job id that is not text (${shownValue(value)})`);
  if (value === '') return unreadable('an empty job id');
  if (value.length > MAX_JOB_ID_LENGTH)
    return unreadable(`a job id of ${value.length} characters (at most ${MAX_JOB_ID_LENGTH} are kept)`);
  return readOk(value);
}

/** A job id, or undefined for a value that is none (where the reason is not told). */
export function jobIdOf(value: unknown): string | undefined {
  const read = readJobId(value);
  return read.ok ? read.value : undefined;
}

/** The job id of a queue entry (`[number, id, prompt, extra_data, ...]`, or `{prompt_id}` / `{id}`). */
export function readQueueEntryId(entry: unknown): Read<string> {
  if (Array.isArray(entry)) return readJobId(entry[1]);
  if (isRecord(entry)) return readJobId(ownValue(entry, 'prompt_id') ?? ownValue(entry, 'id'));
  return unreadable(`a queue entry that is neither a list nor an object (${shownValue(entry)})`);
}

/** What a reader left out of a list: how many entries, and the first one's reason. */
export interface Dropped {
  count: number;
  reason: string;
}

/** Counts one entry left out, keeping the first reason. */
export function dropOne(dropped: Dropped | undefined, reason: string): Dropped {
  return dropped ? { count: dropped.count + 1, reason: dropped.reason } : { count: 1, reason };
}
