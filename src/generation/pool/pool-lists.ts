/**
 * A pool's lists, made of its members' (server-pool.ts reads them): every member's queue as one list, each entry
 * naming its server, and the outcomes of a cancel sent to several members as one. Pure functions, no I/O.
 */
import { ServiceError } from '../../http/errors';
import { errorText } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';
import type { CancelOutcome } from '../connection';
import { readQueueEntryId } from '../jobs/job-ids';
import type { QueueState } from '../transfer/rest-client';

/** A member as a msg names it (`msg.server`). */
export interface ServerRef {
  id: string;
  name: string;
}

/** What a pool's queue list holds: every member's jobs, each with its server, and how each member answered. */
export interface PoolQueueState extends QueueState {
  queue_running: unknown[];
  queue_pending: unknown[];
  servers: Array<ServerRef & { up: boolean; error?: string }>;
}

/**
 * The members' queues (each read or its failure, in the members' order) as one list. Unreadable is never an empty
 * queue: when no member answered, the first failure is thrown.
 */
export function joinQueues(
  reads: Array<{ server: ServerRef; read: PromiseSettledResult<QueueState> }>,
): PoolQueueState {
  const state: PoolQueueState = { queue_running: [], queue_pending: [], servers: [] };
  const failures: ServiceError[] = [];
  for (const { server, read } of reads) {
    if (read.status === 'rejected') {
      const error = read.reason instanceof ServiceError ? read.reason : undefined;
      failures.push(error ?? new ServiceError('network', errorText(read.reason)));
      state.servers.push({ ...server, up: false, error: error?.message ?? errorText(read.reason) });
      continue;
    }
    state.servers.push({ ...server, up: true });
    for (const [field, into] of [
      ['queue_running', state.queue_running],
      ['queue_pending', state.queue_pending],
    ] as const) {
      const entries = read.value[field];
      if (Array.isArray(entries)) for (const entry of entries) into.push(withServer(entry, server));
    }
  }
  if (failures.length > 0 && failures.length === reads.length) throw failures[0];
  return state;
}

/**
 * A queue entry with its server: `server` added to an object entry; any other entry (a self-hosted server's
 * `[number, prompt_id, prompt, extra_data, outputs]`) is wrapped, with its job's id as an object entry has it, so
 * msg.running and msg.pending list it and a flow finds it as `entry.prompt_id`.
 */
function withServer(entry: unknown, server: ServerRef): unknown {
  if (isRecord(entry) && !Array.isArray(entry)) return { ...entry, server };
  const id = readQueueEntryId(entry);
  return id.ok ? { prompt_id: id.value, entry, server } : { entry, server };
}

/** The outcomes of one cancel sent to several members, as one: a job counts as done where any member did it. */
export function joinCancels(outcomes: CancelOutcome[]): CancelOutcome {
  const merged: CancelOutcome = {
    body: outcomes.map((outcome) => outcome.body),
    removed: [],
    interrupted: [],
    notQueued: [],
    unconfirmed: [],
  };
  for (const outcome of outcomes) {
    merged.removed.push(...outcome.removed);
    merged.interrupted.push(...outcome.interrupted);
    merged.unconfirmed.push(...outcome.unconfirmed);
    merged.notQueued.push(...outcome.notQueued);
  }
  // A job sent to every member is "not queued" only where no member removed or interrupted it.
  const done = new Set([...merged.removed, ...merged.interrupted]);
  merged.notQueued = [...new Set(merged.notQueued.filter((id) => !done.has(id)))];
  merged.unconfirmed = [...new Set(merged.unconfirmed.filter((id) => !done.has(id)))];
  return merged;
}
