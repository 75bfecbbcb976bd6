/**
 * The job-events node's reader on Comfy API v2 (ServerDialect.jobWatch; the contract is jobs/server-job-reader.ts's
 * JobWatchReader, as today's reader keeps it): one look reads `GET /api/v2/jobs` (newest first by `created_at`,
 * every status, each job with its outputs and error), and each job further on than it was is told through the
 * same teller, so the msgs are today's. v2 announces nothing to anyone (no socket; an event stream is of one job
 * and the proxy has 8 for all its callers), so looking every `unannouncedPollMs` is how the server is watched.
 *
 * What the list cannot do: it has no cursor (offset and cursor are ignored), so there is no paging: a look sees
 * at most the newest V2_LIST_LIMIT (100) jobs. A look first reads the newest `firstJobs` (a look at an idle
 * server stays small: the proxy asks ComfyUI about every job it lists), and reads the newest 100 when those do
 * not reach back to the mark (the newest `created_at` of the last look) or leave out a job remembered as
 * waiting or running. Consequences:
 * - More than 100 jobs created between two looks: the older ones are never seen, so never told (a warning says
 *   so). The mark moves on past them.
 * - A job seen before (remembered as waiting or running) that fell out of the window, ended or not, is read by
 *   its id (`GET /api/v2/jobs/{id}`), `endsPerRead` a look, the longest unread first.
 * - The list holds only the jobs this proxy submitted, whoever asked it (every caller shares the proxy): the
 *   server's own page, or programs that speak today's API to the ComfyUI behind it, are not seen at all.
 *
 * Who submitted a job: v2 has no client id, and the list names no caller. A job is this config node's when its
 * connection submitted it (`submittedHere`, this run's record), when the memory says so (a job seen before a
 * restart keeps its owner), or when its metadata names this node's client id (v2-jobs.ts writes
 * `graph-gen:<client id>:<key>`; the id is kept across restarts, so a job submitted just before one is still
 * ours); any other is another's. The race: a job another graph-gen submits carries graph-gen's metadata with its
 * own client id, and one of ours is on the list before its 201 answer arrives here, so a graph-gen job of no
 * known client is decided only after SUBMIT_ANSWER_GRACE_MS since it was first met (its steps are then told at
 * once, in order); one without graph-gen's metadata is never ours.
 *
 * Status words, as the job lives read them (v2-answers.ts lookupAnswerOf): queued waits; running and canceling
 * run; succeeded, failed (with its error) and canceled end; expired is a job ComfyUI forgot: a cancel of a
 * waiting job on the proxy, or a restart of ComfyUI: told cancelled, or failed (lost) when it was seen running.
 * "Could not read" is never "absent": a list that cannot be read fails the whole look (nothing is told, nothing
 * concluded), a job whose read fails is read again (`endReadsMax` times, then told with what the list said, or
 * given up with a warning), a job whose outputs could not all be read is read by its id before it is told (at
 * last with `outputs_incomplete`). Past 400 lines: every reason a look reads a job, and whose a job is, in one
 * place. No Node-RED inside.
 */
import type { HttpClient } from '../../../http/client';
import type { JobOutputs } from '../../jobs/job-outputs';
import { jobLostError, type JobResult } from '../../jobs/job-life';
import { unreadableOf, type ExecutionError, type LookupAnswer, type Unreadable } from '../../jobs/job-lookup';
import { JOB_EVENT_TOPICS, resultOf, type SeenJob, type SeenPhase } from '../../jobs/job-event-teller';
import type {
  JobWatchParts,
  JobWatchReader,
  LookOutcome,
  ServerReadLimits,
} from '../../jobs/server-job-reader';
import type { JobEventTeller } from '../../jobs/job-event-teller';
import type { Dropped } from '../../jobs/job-ids';
import { Limiter } from '../../jobs/limiter';
import { isTerminal } from '../../jobs/status-words';
import type { JobLookupPort } from '../dialect';
import { lookupAnswerOf, readV2JobList, unreadableJob, type V2Job, type V2JobList } from './v2-answers';
import { V2_LIST_LIMIT, V2_METADATA_PREFIX, submittedBy } from './v2-jobs';

/** How long a job with graph-gen's metadata may be this connection's whose submit answer is on its way. */
export const SUBMIT_ANSWER_GRACE_MS = 2_000;

const SIMULTANEOUS_READS = 4;

/** What the reader asks the server through. */
export interface V2WatchParts {
  http: HttpClient;
  /** The dialect's lookups (`GET /api/v2/jobs/{id}`). */
  lookup: JobLookupPort;
  /** The largest list answer read (each job carries its outputs). */
  listBytes: number;
  /** The config node's client id: a job whose metadata names it is this node's, before a restart or after. */
  clientId?: string;
}

export interface V2WatchReads {
  /** Jobs a look reads first. */
  firstJobs: number;
  /** Jobs a look reads at most: the most one v2 list gives. */
  mostJobs: number;
}

/** A job as a look met it on the list. */
interface Seen extends SeenJob {
  phase: SeenPhase;
  /** What the list says of it (an ended job's outputs and error included; expired: unknown). */
  answer: LookupAnswer;
  /** Some of its outputs could not be read from the list: it is read by its id before it is told. */
  partialOutputs: boolean;
  /** Its metadata: this config node's (`ours`), graph-gen's of another or unknown client id, or neither. */
  mark: 'ours' | 'graph-gen' | undefined;
}

type ListRead = { kind: 'list'; list: V2JobList; limit: number } | Unreadable;

/** Where a listed job stands. An expired job (`unknown`) has ended; whether it ran is the memory's to say. */
function seenOf(job: V2Job, clientId: string | undefined): Seen {
  const answer = lookupAnswerOf(job);
  const phase: SeenPhase =
    answer.kind !== 'phase' || isTerminal(answer.phase)
      ? 'ended'
      : answer.phase === 'pending'
        ? 'pending'
        : 'running';
  return {
    phase,
    answer,
    createdAt: job.createdAt,
    // v2 says nothing of a start (started_at is always null): a job that ended other than expired ran (a
    // cancel of a waiting job makes it expired, never canceled).
    ran: phase === 'running' || (phase === 'ended' && answer.kind === 'phase'),
    partialOutputs: job.droppedOutputs !== undefined,
    mark: submittedBy(job.metadata, clientId)
      ? 'ours'
      : job.metadata?.startsWith(V2_METADATA_PREFIX) === true
        ? 'graph-gen'
        : undefined,
  };
}

/** The jobs of a list by id, the first (newest) entry of an id standing. */
function seenJobs(list: V2JobList, clientId: string | undefined): Map<string, Seen> {
  const seen = new Map<string, Seen>();
  for (const job of list.jobs) if (!seen.has(job.id)) seen.set(job.id, seenOf(job, clientId));
  return seen;
}

/** The newest `created_at` of a list; 0 for none. */
function newestOf(seen: Map<string, Seen>): number {
  let newest = 0;
  for (const job of seen.values()) newest = Math.max(newest, job.createdAt ?? 0);
  return newest;
}

export class V2JobWatch implements JobWatchReader {
  /** Tests make them small. */
  static defaultReads: V2WatchReads = { firstJobs: 10, mostJobs: V2_LIST_LIMIT };

  readonly pollMs: number;
  private readonly reads: V2WatchReads;
  private readonly teller: JobEventTeller;
  private readonly limits: ServerReadLimits;
  private readonly log: JobWatchParts['log'];
  private readonly limiter = new Limiter(SIMULTANEOUS_READS);
  /** Failed reads of a job still to be told. */
  private readonly failedReads = new Map<string, number>();
  /** Jobs remembered as waiting or running, off the list: the look that last read each by its id. */
  private readonly readAt = new Map<string, number>();
  /** Jobs with graph-gen's metadata whose owner is not known yet: when each was first met. */
  private readonly undecided = new Map<string, number>();
  private looks = 0;
  private warnedDropped = false;

  constructor(
    private readonly server: V2WatchParts,
    watch: JobWatchParts,
  ) {
    this.teller = watch.teller;
    this.limits = watch.limits;
    this.log = watch.log;
    this.pollMs = watch.limits.unannouncedPollMs;
    const reads = V2JobWatch.defaultReads;
    const mostJobs = Math.min(V2_LIST_LIMIT, Math.max(1, reads.mostJobs));
    this.reads = { firstJobs: Math.min(mostJobs, Math.max(1, reads.firstJobs)), mostJobs };
  }

  async look(signal: AbortSignal): Promise<LookOutcome> {
    const memory = this.teller.memory;
    this.looks += 1;
    const read = await this.readWindow(signal);
    if (read.kind !== 'list') return { kind: 'failed', trouble: read };
    this.noteDropped(read.list.dropped);
    const seen = seenJobs(read.list, this.server.clientId);
    const newest = newestOf(seen);
    if (!memory.begun) {
      this.teller.begin(seen, newest);
      return { kind: 'read', changed: false, more: false, incomplete: false };
    }
    if (!this.reachesMark(read.list, read.limit)) {
      this.log(
        'warn',
        `graph-gen job events: more than ${read.limit} jobs were submitted since the last look, and a Comfy API v2 list shows the newest ${read.limit} only: the older ones are not told`,
      );
    }

    const steps: Array<[string, Seen]> = [];
    const ends: Array<[string, Seen]> = [];
    for (const [id, job] of seen) {
      // A job older than the mark that is not remembered was told to its end (and forgotten), or was there
      // before the watching began: whatever the list says of it now, there is nothing to tell.
      const old = job.createdAt === undefined || job.createdAt < memory.mark;
      if (!memory.get(id) && old) continue;
      if (!this.teller.movedOn(id, job.phase)) continue;
      (job.phase === 'ended' ? ends : steps).push([id, job]);
    }
    for (const id of this.undecided.keys()) if (!seen.has(id)) this.undecided.delete(id);

    let incomplete = false;
    let told = 0;
    steps.sort(([, a], [, b]) => (a.createdAt ?? Infinity) - (b.createdAt ?? Infinity));
    for (const [id, job] of steps) {
      const own = this.ownerOf(id, job.mark);
      if (own === 'undecided') continue;
      this.teller.advance(id, job.phase === 'running' ? 'started' : 'queued', job, own);
      told += 1;
    }
    // Ends whose outputs the list could not give whole are read by their id, with the jobs off the list.
    const whole = ends.filter(([, job]) => !job.partialOutputs || job.answer.kind !== 'phase');
    const partial = ends.filter(([, job]) => job.partialOutputs && job.answer.kind === 'phase');
    whole.sort(([, a], [, b]) => (a.createdAt ?? Infinity) - (b.createdAt ?? Infinity));
    for (const [id, job] of whole) {
      const own = this.ownerOf(id, job.mark);
      if (own === 'undecided') continue;
      this.failedReads.delete(id);
      this.tellAnswer(id, job.createdAt, job.answer, own ?? false);
      told += 1;
    }

    const offList = memory
      .active()
      .map(([id]) => id)
      .filter((id) => !seen.has(id));
    const off = new Set(offList);
    for (const id of this.readAt.keys()) if (!off.has(id)) this.readAt.delete(id);
    // The longest unread first: a queue longer than a look reads is read in turns.
    offList.sort((a, b) => (this.readAt.get(a) ?? 0) - (this.readAt.get(b) ?? 0));
    const byId: Array<[string, Seen | undefined]> = [
      ...partial,
      ...offList.map((id): [string, undefined] => [id, undefined]),
    ].slice(0, this.limits.endsPerRead);
    const answers = await Promise.all(byId.map(([id]) => this.readJob(id, signal)));
    for (const [index, [id, job]] of byId.entries()) {
      if (!job) this.readAt.set(id, this.looks);
      const own = job ? this.ownerOf(id, job.mark) : this.teller.ownerOf(id);
      if (own === 'undecided') continue;
      if (!this.tellRead(id, job, answers[index], own)) incomplete = true;
      else told += 1;
    }

    // Failed reads are counted for jobs still to be told only.
    const pending = new Set([...ends.map(([id]) => id), ...offList]);
    for (const id of this.failedReads.keys()) if (!pending.has(id)) this.failedReads.delete(id);
    memory.closeLook(newest, seen);
    return { kind: 'read', changed: told > 0, more: false, incomplete };
  }

  /**
   * The newest `firstJobs`; the newest `mostJobs` when those do not reach back to the mark, or leave out a job
   * remembered as waiting or running (at the very first look, the most: what waits or runs is remembered).
   */
  private async readWindow(signal: AbortSignal): Promise<ListRead> {
    const memory = this.teller.memory;
    const { firstJobs, mostJobs } = this.reads;
    if (!memory.begun || firstJobs >= mostJobs) return this.readList(mostJobs, signal);
    const first = await this.readList(firstJobs, signal);
    if (first.kind !== 'list') return first;
    const listed = new Set(first.list.jobs.map((job) => job.id));
    const leavesOut = memory.active().some(([id]) => !listed.has(id));
    if (this.reachesMark(first.list, firstJobs) && !leavesOut) return first;
    return this.readList(mostJobs, signal);
  }

  /** `GET /api/v2/jobs?limit=`: every status, newest first. Rejects only when `signal` aborts. */
  private async readList(limit: number, signal: AbortSignal): Promise<ListRead> {
    let body: unknown;
    try {
      ({ body } = await this.server.http.json<unknown>('/api/v2/jobs', {
        query: { limit },
        signal,
        action: 'listing the jobs',
        maxBytes: this.server.listBytes,
      }));
    } catch (error) {
      if (signal.aborted) throw error;
      return unreadableOf(error);
    }
    const list = readV2JobList(body);
    return list.ok
      ? { kind: 'list', list: list.value, limit }
      : unreadableJob('GET /api/v2/jobs', list.reason);
  }

  /**
   * Whether a list holds every job newer than the mark: it is the whole list (fewer than asked, and the server
   * did not say it stopped looking), or it reaches a job older than the mark (the list is newest first).
   */
  private reachesMark(list: V2JobList, limit: number): boolean {
    if (list.count < limit && !list.truncated) return true;
    const mark = this.teller.memory.mark;
    return list.jobs.some((job) => job.createdAt !== undefined && job.createdAt < mark);
  }

  /**
   * Whose a job is: this config node's (true: this connection submitted it, the memory says so, or its metadata
   * names this node's client id), another's (false), or `undecided` while it may be one this connection
   * submitted whose answer is on its way (graph-gen's metadata of no known client, first met under
   * SUBMIT_ANSWER_GRACE_MS ago). Decided only where it decides what is told ("only others' jobs").
   */
  private ownerOf(id: string, mark: Seen['mark']): boolean | undefined | 'undecided' {
    const known = this.teller.ownerOf(id);
    if (known !== undefined) {
      this.undecided.delete(id);
      return known;
    }
    if (!this.teller.needsOwner([...JOB_EVENT_TOPICS])) return undefined;
    // Its metadata names this config node's client id (kept across restarts): ours, whenever it was submitted.
    if (mark === 'ours') return true;
    if (mark === undefined) return false;
    const now = Date.now();
    const first = this.undecided.get(id) ?? now;
    if (now - first >= SUBMIT_ANSWER_GRACE_MS) {
      this.undecided.delete(id);
      return false;
    }
    this.undecided.set(id, first);
    return 'undecided';
  }

  /** `GET /api/v2/jobs/{id}` through the dialect's lookup; a failure is this job's failed read, never absent. */
  private async readJob(id: string, signal: AbortSignal): Promise<LookupAnswer> {
    try {
      return await this.limiter.run(() => this.server.lookup.status(id, signal));
    } catch (error) {
      if (signal.aborted) throw error;
      return unreadableOf(error);
    }
  }

  /**
   * Tells what a read by id says of a job (one off the list, or an end whose outputs the list did not give
   * whole); false when it could not be read (read again at the next look).
   */
  private tellRead(
    id: string,
    job: Seen | undefined,
    answer: LookupAnswer,
    own: boolean | undefined,
  ): boolean {
    const createdAt = job?.createdAt ?? this.teller.memory.get(id)?.createdAt;
    if (answer.kind === 'phase' && !isTerminal(answer.phase)) {
      // Still waiting or running (off the list: a queue longer than the list): told as that when further on.
      const phase = answer.phase === 'pending' ? 'pending' : 'running';
      if (this.teller.movedOn(id, phase))
        this.teller.advance(id, phase === 'running' ? 'started' : 'queued', { createdAt, ran: false }, own);
      return true;
    }
    const whole = answer.kind !== 'phase' || answer.phase !== 'completed' || answer.outputs !== undefined;
    if (answer.kind !== 'unreadable' && whole) {
      this.failedReads.delete(id);
      this.tellAnswer(id, createdAt, answer, own ?? false);
      return true;
    }
    const failures = (this.failedReads.get(id) ?? 0) + 1;
    if (failures < this.limits.endReadsMax) {
      this.failedReads.set(id, failures);
      return false;
    }
    this.failedReads.delete(id);
    if (answer.kind === 'phase') {
      // Ended, some outputs never readable: told with what could be read, said incomplete.
      this.tellAnswer(id, createdAt, answer, own ?? false);
    } else if (job) {
      this.tellAnswer(id, createdAt, job.answer, own ?? false);
    } else {
      this.log(
        'warn',
        `graph-gen job events: job ${id} left the list of the newest jobs, and how it ended cannot be read (${answer.kind === 'unreadable' ? answer.message : 'no answer'}): it is not told`,
      );
      this.teller.giveUp(id);
    }
    return true;
  }

  /**
   * Tells an ended job: its answer's end (it ran: v2 cancels a waiting job as expired), or for a job the server
   * forgot, cancelled or lost.
   */
  private tellAnswer(id: string, createdAt: number | undefined, answer: LookupAnswer, own: boolean): void {
    if (answer.kind === 'phase' && isTerminal(answer.phase)) {
      const ended: { outputs?: JobOutputs; error?: ExecutionError } = {};
      if (answer.outputs) ended.outputs = answer.outputs;
      if (answer.error) ended.error = answer.error;
      this.teller.end(id, resultOf(id, answer.phase, ended), { createdAt, ran: true }, own);
      return;
    }
    // Expired or gone: ComfyUI forgot it. Taken out of the queue before it ran (a cancel on the proxy), or it
    // was running when ComfyUI restarted.
    const ran = this.teller.memory.get(id)?.step === 'started';
    const result: JobResult = ran
      ? { prompt_id: id, status: 'failed', error: jobLostError(id) }
      : { prompt_id: id, status: 'cancelled' };
    this.teller.end(id, result, { createdAt, ran }, own);
  }

  /** Entries that could not be read, left out of a list: a warning the first time, then a debug line. */
  private noteDropped(dropped: Dropped | undefined): void {
    if (!dropped) return;
    const level = this.warnedDropped ? 'debug' : 'warn';
    this.warnedDropped = true;
    this.log(
      level,
      `graph-gen job events: the list of jobs of the server holds ${dropped.count} entr${dropped.count === 1 ? 'y' : 'ies'} that cannot be read (${dropped.reason}): left out`,
    );
  }
}
