/**
 * What a self-hosted server lists of its jobs, whoever submitted them: `GET /api/jobs` (ComfyUI 0.8 and later:
 * the queue and the history together, newest first by `create_time`, paged with `limit` and `offset`), read a
 * page at a time; and who submitted the jobs that wait or run: only `/api/queue` names that (its entries'
 * `extra_data.client_id`; `/api/jobs/{id}` of a waiting or running job does not, measured on v0.8.0 and
 * v0.33.0). Every answer is untrusted: bounded in bytes by the HTTP client, entries that are not jobs skipped,
 * a body of another shape unreadable, never "no jobs"; an id that is no job id (job-ids.ts) left out with its
 * reason. No Node-RED inside.
 */
import type { HttpClient } from '../../http/client';
import { clientIdOf, lacksRoute, unreadableOf, type Unreadable } from './job-lookup';
import { dropOne, readJobId, readQueueEntryId, type Dropped } from './job-ids';
import { phaseOfStatus, type JobPhase } from './status-words';
import { isRecord } from '../../boundary/json-values';

/** One job of the list: its id, where it stands, when it was submitted, and whether it ever ran. */
export interface ListedJob {
  id: string;
  phase: JobPhase;
  /** `create_time` (ms since the epoch, the server's clock); undefined when the entry has none. */
  createdAt?: number;
  /** It started running (an `execution_start_time`, or it runs now). */
  ran: boolean;
}

export type JobsPage =
  | { kind: 'page'; jobs: ListedJob[]; hasMore: boolean; dropped?: Dropped }
  /** The server has no list (before ComfyUI 0.8; a cloud service): a 405 or a framework's 404 page. */
  | { kind: 'absent' }
  | Unreadable;

/** Who submitted each waiting or running job: its `client_id`, or undefined when it was sent without one. */
export type QueueOwners = { kind: 'read'; owners: Map<string, string | undefined> } | Unreadable;

/** A list entry as a job; undefined for an entry that is not one, or the reason its id is none. */
function listedJobOf(entry: unknown): ListedJob | undefined | { dropped: string } {
  if (!isRecord(entry) || typeof entry.status !== 'string') return undefined;
  const id = readJobId(entry.id);
  if (!id.ok) return { dropped: id.reason };
  const phase = phaseOfStatus(entry.status);
  const created = entry.create_time;
  const started = entry.execution_start_time;
  return {
    id: id.value,
    phase,
    createdAt: typeof created === 'number' && Number.isFinite(created) ? created : undefined,
    ran: phase === 'running' || (typeof started === 'number' && Number.isFinite(started)),
  };
}

/** A `/api/jobs` answer `{jobs: [...], pagination: {has_more}}` as a page; undefined for another shape. */
export function jobsPageOf(body: unknown): Extract<JobsPage, { kind: 'page' }> | undefined {
  if (!isRecord(body) || !Array.isArray(body.jobs) || !isRecord(body.pagination)) return undefined;
  const hasMore = body.pagination.has_more;
  if (typeof hasMore !== 'boolean') return undefined;
  const jobs: ListedJob[] = [];
  let dropped: Dropped | undefined;
  for (const entry of body.jobs) {
    const job = listedJobOf(entry);
    if (job && 'dropped' in job) dropped = dropOne(dropped, job.dropped);
    else if (job) jobs.push(job);
  }
  return dropped ? { kind: 'page', jobs, hasMore, dropped } : { kind: 'page', jobs, hasMore };
}

/** One page of every job, newest first: `limit` jobs from `offset`. Rejects only when `signal` aborts. */
export async function readJobsPage(
  http: HttpClient,
  offset: number,
  limit: number,
  signal?: AbortSignal,
): Promise<JobsPage> {
  let answer: { status: number; body: unknown; json: boolean };
  try {
    answer = await http.json<unknown>('/api/jobs', {
      query: { limit, offset },
      acceptStatus: [404, 405],
      signal,
      action: 'listing the jobs',
    });
  } catch (error) {
    if (signal?.aborted) throw error;
    return unreadableOf(error);
  }
  if (lacksRoute(answer)) return { kind: 'absent' };
  const page = answer.status < 300 ? jobsPageOf(answer.body) : undefined;
  return (
    page ?? {
      kind: 'unreadable',
      reason: 'failed',
      message: `the list of jobs answered HTTP ${answer.status} without a list of jobs`,
      status: answer.status,
    }
  );
}

/** The `client_id` of a queue entry: `[number, id, prompt, extra_data, ...]` or `{client_id | extra_data}`. */
function ownerOf(element: unknown): string | undefined {
  const extra = Array.isArray(element)
    ? element[3]
    : isRecord(element)
      ? Object.hasOwn(element, 'client_id')
        ? element
        : element.extra_data
      : undefined;
  return clientIdOf(extra);
}

/**
 * Who submitted the jobs waiting and running now, from `GET /api/queue`. Each entry carries its whole workflow
 * (tens of kilobytes on a real server), so this is read only when an owner is needed, up to `maxBytes`.
 */
export async function readQueueOwners(
  http: HttpClient,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<QueueOwners> {
  let body: unknown;
  try {
    body = (await http.json<unknown>('/api/queue', { signal, maxBytes, action: 'listing the queue' })).body;
  } catch (error) {
    if (signal?.aborted) throw error;
    return unreadableOf(error);
  }
  if (!isRecord(body) || (!Array.isArray(body.queue_running) && !Array.isArray(body.queue_pending)))
    return { kind: 'unreadable', reason: 'failed', message: 'the queue answer has no queue in it' };
  const owners = new Map<string, string | undefined>();
  for (const list of [body.queue_running, body.queue_pending]) {
    if (!Array.isArray(list)) continue;
    for (const element of list) {
      const id = readQueueEntryId(element);
      if (id.ok) owners.set(id.value, ownerOf(element));
    }
  }
  return { kind: 'read', owners };
}
