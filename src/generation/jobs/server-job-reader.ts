/**
 * One look at a self-hosted server's jobs, whoever submitted them, for the job-events watcher (job-events.ts
 * decides when to look): the jobs waiting and running (JobLookup.queue: `/api/jobs?status=pending,in_progress`),
 * the list of every job newest first down to the mark (job-list.ts; the mark is the newest `create_time` of the
 * last look, job-event-memory.ts), and for each job that ended since, `/api/jobs/{id}` (its outputs, error and
 * client_id; JobLookup.status). Each job further on than it was is told through the teller. A look that cannot
 * read the jobs fails whole: nothing is concluded from it, least of all that jobs are gone. One job's answer
 * never stops the others: a read of one job that fails is that job's failed read. An entry whose id is no job
 * id (job-ids.ts) is left out, with a warning (once).
 * It is today's API's reader; a dialect makes its own (ServerDialect.jobWatch: Comfy API v2's is
 * dialects/comfy-api-v2/v2-job-watch.ts), and every reader keeps the JobWatchReader contract below. No Node-RED
 * inside.
 */
import type { HttpClient } from '../../http/client';
import type { JobLookupPort } from './job-ports';
import { jobLostError, type JobResult } from './job-life';
import { unreadableOf, type LookupAnswer, type QueueRead, type Unreadable } from './job-lookup';
import { readJobsPage, readQueueOwners, type ListedJob, type QueueOwners } from './job-list';
import { JobEventTeller, resultOf, type SeenJob, type SeenPhase } from './job-event-teller';
import { Limiter } from './limiter';
import { isTerminal, type JobPhase, type TerminalPhase } from './status-words';
import type { Dropped } from './job-ids';

/** What a look made of it: whether it read the jobs, found changes, and left some for the next look. */
export type LookOutcome =
  | {
      kind: 'read';
      changed: boolean;
      /** More ended jobs than one look reads: another look at once. */
      more: boolean;
      /** Some could not be read (an end, who submitted a job): another look later. */
      incomplete: boolean;
    }
  | { kind: 'failed'; trouble: Unreadable };

export interface ServerReadLimits {
  /** Jobs per page of the list, and pages read at most per look. */
  pageSize: number;
  maxPages: number;
  /** Ended jobs read per look. */
  endsPerRead: number;
  /** Failed reads of how a job ended before it is told with what the list said (or given up). */
  endReadsMax: number;
  /** Where the server announces no change to anyone (Comfy API v2), the jobs are looked at this often. */
  unannouncedPollMs: number;
}

/** What the job-events watcher gives the reader a dialect makes (ServerDialect.jobWatch). */
export interface JobWatchParts {
  /** Tells each job's steps once, and remembers what was told. */
  teller: JobEventTeller;
  limits: ServerReadLimits;
  log(level: 'debug' | 'warn', message: string): void;
}

/**
 * One look at every job of a server at a time (job-events.ts decides when), each job's change told through the
 * teller. A look that cannot read the jobs fails whole: nothing is concluded from it (could not read is never
 * absent).
 */
export interface JobWatchReader {
  look(signal: AbortSignal): Promise<LookOutcome>;
  /**
   * Where the server announces no change to anyone (no socket: Comfy API v2), looking every so often is how its
   * jobs are watched, and this says how often (ms). Undefined: the socket's announcements decide.
   */
  readonly pollMs?: number;
}

/** What today's reader asks the server through. */
export interface ServerReadParts {
  http: HttpClient;
  lookup: JobLookupPort;
  /** The largest queue answer read (each entry carries its whole workflow). */
  listBytes: number;
}

interface Seen extends SeenJob {
  phase: SeenPhase;
  /** The list's word for an ended job. */
  word?: JobPhase;
  /** Among the jobs waiting or running: a job met for the first time, whatever its create_time. */
  active: boolean;
}

const SIMULTANEOUS_READS = 4;

/** The jobs a look met, each at the furthest it got: waiting and running (the queue read), and listed. */
function seenJobs(active: Extract<QueueRead, { kind: 'read' }>, listed: ListedJob[]): Map<string, Seen> {
  const seen = new Map<string, Seen>();
  const meet = (id: string, job: Seen) => {
    const before = seen.get(id);
    if (!before) {
      seen.set(id, job);
      return;
    }
    const later =
      job.phase === 'ended' || (job.phase === 'running' && before.phase === 'pending') ? job : before;
    seen.set(id, {
      ...later,
      createdAt: before.createdAt ?? job.createdAt,
      ran: before.ran || job.ran,
      active: before.active || job.active,
    });
  };
  for (const id of active.pending) meet(id, { phase: 'pending', ran: false, active: true });
  for (const id of active.running) meet(id, { phase: 'running', ran: true, active: true });
  for (const job of listed) {
    const ended = isTerminal(job.phase);
    meet(job.id, {
      phase: ended ? 'ended' : job.phase === 'pending' ? 'pending' : 'running',
      word: ended ? job.phase : undefined,
      createdAt: job.createdAt,
      ran: job.ran,
      active: false,
    });
  }
  return seen;
}

export class ServerJobReader implements JobWatchReader {
  private listAbsent = false;
  private readonly failedEndReads = new Map<string, number>();
  private readonly limiter = new Limiter(SIMULTANEOUS_READS);
  private warnedDropped = false;
  private readonly teller: JobEventTeller;
  private readonly limits: ServerReadLimits;
  private readonly log: JobWatchParts['log'];

  constructor(
    private readonly server: ServerReadParts,
    watch: JobWatchParts,
  ) {
    this.teller = watch.teller;
    this.limits = watch.limits;
    this.log = watch.log;
  }

  async look(signal: AbortSignal): Promise<LookOutcome> {
    const memory = this.teller.memory;
    const active = await this.server.lookup.queue(signal);
    if (active.kind !== 'read') return { kind: 'failed', trouble: active };
    this.noteDropped(active.dropped, 'the queue');
    let listed: ListedJob[] = [];
    if (!this.listAbsent) {
      const list = await this.readList(signal);
      if (list.kind === 'unreadable') return { kind: 'failed', trouble: list };
      if (list.kind === 'absent') this.listAbsent = true;
      else listed = list.jobs;
    }
    const seen = seenJobs(active, listed);
    const newest = listed.reduce((max, job) => Math.max(max, job.createdAt ?? 0), 0);
    if (!memory.begun) {
      this.teller.begin(seen, newest);
      return { kind: 'read', changed: false, more: false, incomplete: false };
    }

    const steps: Array<[string, Seen]> = [];
    const ends: Array<[string, Seen | undefined]> = [];
    for (const [id, job] of seen) {
      // An ended job older than the mark was told, or ended before the watching began.
      const old = job.createdAt === undefined || job.createdAt < memory.mark;
      if (!memory.get(id) && !job.active && old) continue;
      if (!this.teller.movedOn(id, job.phase)) continue;
      if (job.phase === 'ended') ends.push([id, job]);
      else steps.push([id, job]);
    }
    // Remembered as waiting or running, and now neither: ended, or gone.
    for (const [id] of memory.active()) if (!seen.has(id)) ends.push([id, undefined]);

    let incomplete = !(await this.tellSteps(steps, signal));
    const now = ends.slice(0, this.limits.endsPerRead);
    const answers = await Promise.all(now.map(([id]) => this.readEnd(id, active, signal)));
    for (const [index, [id, job]] of now.entries()) {
      if (!this.tellEnd(id, job, answers[index])) incomplete = true;
    }
    // Failed reads are counted for jobs still to be told only: one that left every list is not kept.
    const pending = new Set(ends.map(([id]) => id));
    for (const id of this.failedEndReads.keys()) if (!pending.has(id)) this.failedEndReads.delete(id);
    memory.closeLook(newest, seen);
    return {
      kind: 'read',
      changed: steps.length + now.length > 0,
      more: ends.length > now.length,
      incomplete,
    };
  }

  /**
   * How one job ended. JobLookup.status rejects only on an abort; should it fail otherwise, that is this job's
   * failed read, and the other jobs of the look are told all the same.
   */
  private async readEnd(
    id: string,
    active: Extract<QueueRead, { kind: 'read' }>,
    signal: AbortSignal,
  ): Promise<LookupAnswer> {
    try {
      return await this.limiter.run(() =>
        this.server.lookup.status(id, signal, () => Promise.resolve(active)),
      );
    } catch (error) {
      if (signal.aborted) throw error;
      return unreadableOf(error);
    }
  }

  /** Entries whose id is no job id, left out of a read: a warning the first time, then a debug line. */
  private noteDropped(dropped: Dropped | undefined, where: string): void {
    if (!dropped) return;
    const level = this.warnedDropped ? 'debug' : 'warn';
    this.warnedDropped = true;
    this.log(
      level,
      `graph-gen job events: ${where} of the server holds ${dropped.count} entr${dropped.count === 1 ? 'y' : 'ies'} that name no job (${dropped.reason}): left out`,
    );
  }

  /** Every job newest first, down to the mark (at most `maxPages` pages); at the very start, the first page. */
  private async readList(
    signal: AbortSignal,
  ): Promise<{ kind: 'list'; jobs: ListedJob[] } | { kind: 'absent' } | Unreadable> {
    const { pageSize, maxPages } = this.limits;
    const memory = this.teller.memory;
    const jobs: ListedJob[] = [];
    for (let page = 0; page < maxPages; page++) {
      const answer = await readJobsPage(this.server.http, page * pageSize, pageSize, signal);
      if (answer.kind !== 'page') return answer;
      this.noteDropped(answer.dropped, 'the list of jobs');
      jobs.push(...answer.jobs);
      const last = answer.jobs.at(-1);
      const pastMark = !last || last.createdAt === undefined || last.createdAt < memory.mark;
      if (!memory.begun || !answer.hasMore || pastMark) return { kind: 'list', jobs };
    }
    this.log(
      'warn',
      `graph-gen job events: more than ${pageSize * maxPages} jobs were submitted since the last look; the ones that ended further down the list are not told`,
    );
    return { kind: 'list', jobs };
  }

  /**
   * Tells the jobs that got to waiting or running. With "only others", a job's submitter must be known first:
   * the queue names it (read once, only then). False when it could not be read (those are told later).
   */
  private async tellSteps(steps: Array<[string, Seen]>, signal: AbortSignal): Promise<boolean> {
    steps.sort(([, a], [, b]) => (a.createdAt ?? Infinity) - (b.createdAt ?? Infinity));
    let owners: QueueOwners | undefined;
    let complete = true;
    for (const [id, job] of steps) {
      let own = this.teller.ownerOf(id);
      if (own === undefined && this.teller.needsOwner(['queued', 'started'])) {
        owners ??= await readQueueOwners(this.server.http, this.server.listBytes, signal);
        if (owners.kind === 'read' && owners.owners.has(id))
          own = owners.owners.get(id) === this.teller.clientId;
        else if (owners.kind !== 'read') complete = false;
        if (own === undefined) continue;
      }
      this.teller.advance(id, job.phase === 'running' ? 'started' : 'queued', job, own);
    }
    return complete;
  }

  /** Tells how a job ended, from its read; false when that could not be read (tried again later). */
  private tellEnd(id: string, job: Seen | undefined, answer: LookupAnswer): boolean {
    const known = this.teller.memory.get(id);
    const seen: SeenJob = { createdAt: job?.createdAt ?? known?.createdAt, ran: job?.ran ?? true };
    const owner = this.teller.ownerOf(id);
    if (answer.kind === 'phase' && !isTerminal(answer.phase)) {
      // It waits or runs after all (it moved between the reads): told as that.
      if (owner !== undefined || !this.teller.needsOwner(['queued', 'started']))
        this.teller.advance(id, answer.phase === 'running' ? 'started' : 'queued', seen, owner);
      return true;
    }
    if (answer.kind === 'phase') {
      this.failedEndReads.delete(id);
      const own = answer.clientId !== undefined ? answer.clientId === this.teller.clientId : (owner ?? false);
      this.teller.end(id, resultOf(id, answer.phase as TerminalPhase, answer), seen, own);
      return true;
    }
    const listedEnd = job?.word && isTerminal(job.word) ? job.word : undefined;
    if (answer.kind === 'unknown') {
      // No route knows it any more. The list said how it ended (its history was deleted since); else it was
      // taken out of the queue before it ran (a cancel), or it was running when the server restarted.
      const ran = listedEnd ? seen.ran : known?.step === 'started';
      const result: JobResult = listedEnd
        ? resultOf(id, listedEnd, {})
        : ran
          ? { prompt_id: id, status: 'failed', error: jobLostError(id) }
          : { prompt_id: id, status: 'cancelled' };
      this.teller.end(id, result, { ...seen, ran }, owner ?? false);
      return true;
    }
    const failures = (this.failedEndReads.get(id) ?? 0) + 1;
    if (failures < this.limits.endReadsMax) {
      this.failedEndReads.set(id, failures);
      return false;
    }
    this.failedEndReads.delete(id);
    if (listedEnd) {
      this.teller.end(id, resultOf(id, listedEnd, {}), seen, owner ?? false);
    } else {
      this.log(
        'warn',
        `graph-gen job events: job ${id} left the queue, but how it ended cannot be read (${answer.message}): it is not told`,
      );
      this.teller.giveUp(id);
    }
    return true;
  }
}
