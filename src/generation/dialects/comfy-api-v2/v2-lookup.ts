/**
 * The job lookups the book asks of a Comfy API v2 server (its JobLookupPort): one page of the newest jobs for
 * every awaited job at once, and `GET /api/v2/jobs/{id}` for a job the page does not name. Every answer is read
 * by v2-answers.ts; this file only asks, and decides when a job off the page is asked by its id. No Node-RED
 * inside.
 */
import type { HttpClient } from '../../../http/client';
import {
  unreadableOf,
  type EndedAnswer,
  type LookupAnswer,
  type QueueRead,
  type Unreadable,
} from '../../jobs/job-lookup';
import { isTerminal } from '../../jobs/status-words';
import type { JobLookupPort } from '../dialect';
import { answerOfJobBody, endedAnswerOfBody, queueReadOfBody } from './v2-answers';
import { DEFAULT_LIST_BYTES, V2_LIST_LIMIT, type V2JobsOptions } from './v2-jobs';

/** A route that answers a framework's 404 page: the server speaks no v2 there. */
const NO_V2_ROUTE: Unreadable = {
  kind: 'unreadable',
  reason: 'no_route',
  message:
    'the service has no /api/v2/jobs route: check that the config node points at a Comfy API v2 server',
};

type JobGet = { kind: 'body'; body: unknown } | { kind: 'missing' } | Unreadable;

/** `GET /api/v2/jobs/{id}`: its body, `missing` (the service's own 404: no such job), or why not. */
async function getJob(
  http: HttpClient,
  promptId: string,
  signal: AbortSignal | undefined,
  action: string,
): Promise<JobGet> {
  try {
    const answer = await http.json<unknown>(`/api/v2/jobs/${encodeURIComponent(promptId)}`, {
      acceptStatus: [404],
      signal,
      action,
    });
    if (answer.status === 404) return answer.json ? { kind: 'missing' } : NO_V2_ROUTE;
    return { kind: 'body', body: answer.body };
  } catch (error) {
    if (signal?.aborted) throw error;
    return unreadableOf(error);
  }
}

/** How long a job no page names waits before it is first asked by id; the wait doubles up to the longest. */
const UNLISTED_ASK_MS = 2_000;
const UNLISTED_ASK_MAX_MS = 60_000;
const MAX_UNLISTED = 100_000;
/** The page of newest jobs read for the awaited ones: twice their number and ten more, within 10..100. */
const PAGE_MIN = 10;

/** A job no page named: when it may next be asked by id, and the wait after that. */
interface Unlisted {
  askAt: number;
  waitMs: number;
}

/**
 * The JobLookupPort of a v2 server. One list read of the newest jobs (`GET /api/v2/jobs?limit=<page>`, all
 * statuses, newest first) answers for every awaited job it names, ended ones with their outputs. Not a list
 * filtered by status: the proxy reads every job it knows (up to 500, one ComfyUI request each) to answer one,
 * whatever its limit, where an unfiltered page costs one ComfyUI request per job on it (measured: `limit=100`
 * took 0.1-0.2 s idle, 1 s busy; one job by id about 5 ms). So the page is as small as the awaited jobs allow.
 */

export class V2Lookup implements JobLookupPort {
  private readonly listBytes: number;
  /**
   * Jobs a full page did not name (newer jobs, ours or others', pushed them off it): asked by id `UNLISTED_ASK_MS`
   * after they were first missed, then at doubling waits up to `UNLISTED_ASK_MAX_MS`. A job must still be asked
   * (a page may never name it again), but not at once nor at every poll: a job just submitted is known to
   * exist, and thousands awaited at once would each cost a request a poll. A job asked and found, or named by a
   * page again, starts over.
   */
  private readonly unlisted = new Map<string, Unlisted>();

  constructor(
    private readonly http: HttpClient,
    options: Pick<V2JobsOptions, 'listBytes'> = {},
  ) {
    this.listBytes = options.listBytes ?? DEFAULT_LIST_BYTES;
  }

  /**
   * Where the job stands: from the shared list read when it names the job (no request of its own), else from
   * `GET /api/v2/jobs/{id}` (404: unknown). Never rejects, but with the signal's reason when it aborts.
   */
  async status(
    promptId: string,
    signal?: AbortSignal,
    readQueue?: () => Promise<QueueRead>,
  ): Promise<LookupAnswer> {
    if (readQueue) {
      const read = await readQueue().catch((error: unknown) => {
        if (signal?.aborted) throw error;
        return undefined;
      });
      if (read?.kind === 'read') {
        if (read.running.has(promptId)) return { kind: 'phase', phase: 'running' };
        if (read.pending.has(promptId)) return { kind: 'phase', phase: 'pending' };
        const ended = read.ended?.get(promptId);
        if (ended) return ended;
        // Not on a full page of the newest jobs: newer ones pushed it off. Asked by its id, but not at every poll.
        if (read.partial && this.waitUnlisted(promptId)) {
          return {
            kind: 'unreadable',
            reason: 'unlisted',
            message: `job ${promptId} is not on the page of the newest jobs`,
          };
        }
      }
    }
    const got = await getJob(this.http, promptId, signal, `checking job ${promptId}`);
    const answer: LookupAnswer =
      got.kind === 'body' ? answerOfJobBody(got.body) : got.kind === 'missing' ? { kind: 'unknown' } : got;
    // Still to end: its wait (if a page missed it) goes on growing. Ended or unknown: it is not asked again.
    if (answer.kind === 'unknown' || (answer.kind === 'phase' && isTerminal(answer.phase)))
      this.unlisted.delete(promptId);
    return answer;
  }

  /** Whether a job no page named waits longer before it is asked by id (see `unlisted`). */
  private waitUnlisted(promptId: string, now = Date.now()): boolean {
    const mark = this.unlisted.get(promptId);
    if (mark === undefined) {
      // Bounded: the oldest marks go first (a job whose await left never comes back to clear its own).
      const oldest = this.unlisted.keys().next();
      if (this.unlisted.size >= MAX_UNLISTED && !oldest.done) this.unlisted.delete(oldest.value);
      this.unlisted.set(promptId, { askAt: now + UNLISTED_ASK_MS, waitMs: UNLISTED_ASK_MS });
      return true;
    }
    if (now < mark.askAt) return true;
    mark.waitMs = Math.min(UNLISTED_ASK_MAX_MS, mark.waitMs * 2);
    mark.askAt = now + mark.waitMs;
    return false;
  }

  /**
   * The newest jobs in one request, for every awaited job at once (`jobs` of them: the page holds twice as many
   * and ten more, at most 100), waiting, running and ended, with outputs and errors. `partial` when the page is
   * full: a job it does not name may be older. Unreadable when it cannot be read (never an empty queue).
   */
  async queue(signal?: AbortSignal, jobs = 0): Promise<QueueRead> {
    const limit = Math.min(V2_LIST_LIMIT, Math.max(PAGE_MIN, 2 * jobs + PAGE_MIN));
    let body: unknown;
    try {
      ({ body } = await this.http.json<unknown>('/api/v2/jobs', {
        query: { limit },
        signal,
        action: 'listing the jobs',
        maxBytes: this.listBytes,
      }));
    } catch (error) {
      if (signal?.aborted) throw error;
      return unreadableOf(error);
    }
    const read = queueReadOfBody(body, limit);
    if (read.kind === 'read') {
      for (const id of read.running) this.unlisted.delete(id);
      for (const id of read.pending) this.unlisted.delete(id);
      if (read.ended) for (const id of read.ended.keys()) this.unlisted.delete(id);
    }
    return read;
  }

  /** An ended job's outputs and error, from `GET /api/v2/jobs/{id}`; none for a job the service forgot. */
  async ended(promptId: string, signal?: AbortSignal): Promise<EndedAnswer> {
    const got = await getJob(this.http, promptId, signal, `reading the outputs of job ${promptId}`);
    if (got.kind === 'body') return endedAnswerOfBody(got.body);
    return got.kind === 'missing' ? { kind: 'none' } : got;
  }

  /** v2 gives no run times (`started_at` and `completed_at` are always null on the proxy). */
  runTimeMs(): Promise<number | undefined> {
    return Promise.resolve(undefined);
  }
}
