/**
 * What the job-events watcher (job-events.ts) remembers of a server's jobs, kept across restarts in a store
 * (a persist/journal.ts Journal under the user dir): how far each job got when last seen (so no event is sent
 * twice, and a job that ended while Node-RED was down is told once), who submitted it when known, and the
 * mark: the newest `create_time` read from the server's list, below which an ended job needs no remembering
 * (the list is read down to the mark, and a job older than it is looked at only while remembered as waiting
 * or running). Bounded: ended jobs older than the mark are forgotten; ended jobs without a `create_time` (the
 * cloud, servers without a list) are kept up to ENDED_KEPT, the oldest forgotten first; MAX_JOBS in all.
 * What the store gives back is read as untrusted (a journal line may be anything): a key whose id is no job id
 * (job-ids.ts) or a record that is no job is dropped, and no more than MAX_JOBS are read. No Node-RED inside.
 */
import { readJobId } from './job-ids';

/** How far a job got: waiting (queued told), running (started told), ended (its end told). */
export type JobStep = 'queued' | 'started' | 'ended';

export interface RememberedJob {
  step: JobStep;
  /** `create_time` where the list gives it. */
  createdAt?: number;
  /** Submitted by this config node's client (true), by another (false); undefined: not known yet. */
  own?: boolean;
  /** Reads of how it ended that failed. */
  failedReads?: number;
}

/** The store's record of a job: short keys, one line each in the journal. */
interface KeptJob {
  s: 'q' | 'r' | 'e';
  c?: number;
  o?: 0 | 1;
  n?: number;
}

interface KeptMark {
  /** The newest create_time read from the list (0: none yet). */
  mark: number;
  /** Which server the jobs are of: the memory of another is not this one's. */
  scope: string;
}

export type KeptRecord = KeptJob | KeptMark;

/** What the memory is kept in: a Journal<KeptRecord> (persist/journal.ts), or a Map in tests. */
export interface MemoryStore {
  entries(): Array<[string, KeptRecord]>;
  set(key: string, value: KeptRecord): void;
  delete(key: string): void;
}

const MARK_KEY = 'mark';
/** Job keys are prefixed: a server may name a job anything, "mark" too. */
const JOB_PREFIX = 'j:';
const STEP_CODES: Record<JobStep, KeptJob['s']> = { queued: 'q', started: 'r', ended: 'e' };
/** A Map: a kept code is a word from outside (`constructor` is no step). */
const CODE_STEPS = new Map<unknown, JobStep>([
  ['q', 'queued'],
  ['r', 'started'],
  ['e', 'ended'],
]);

/** Ended jobs without a create_time kept at most (the newest). */
export const ENDED_KEPT = 2_000;
/** Jobs remembered at most: past it, the oldest ended ones go first. */
export const MAX_JOBS = 20_000;

export const STEP_RANK: Record<JobStep, number> = { queued: 1, started: 2, ended: 3 };

function jobOf(kept: KeptRecord | undefined): RememberedJob | undefined {
  if (!kept || typeof kept !== 'object' || !Object.hasOwn(kept, 's')) return undefined;
  const record = kept as KeptJob;
  const step = CODE_STEPS.get(record.s);
  if (!step) return undefined;
  const job: RememberedJob = { step };
  if (typeof record.c === 'number' && Number.isFinite(record.c)) job.createdAt = record.c;
  if (record.o === 0 || record.o === 1) job.own = record.o === 1;
  if (typeof record.n === 'number' && Number.isFinite(record.n) && record.n > 0) job.failedReads = record.n;
  return job;
}

function recordOf(job: RememberedJob): KeptJob {
  const record: KeptJob = { s: STEP_CODES[job.step] };
  if (job.createdAt !== undefined) record.c = job.createdAt;
  if (job.own !== undefined) record.o = job.own ? 1 : 0;
  if (job.failedReads) record.n = job.failedReads;
  return record;
}

export class JobEventMemory {
  /** In the order they were last written: the first ended ones are the oldest. */
  private readonly jobs = new Map<string, RememberedJob>();
  private markValue?: number;
  private endedWithoutTime = 0;

  /**
   * Reads what `store` kept for `scope` (the config node and its address); what was kept for another scope is
   * dropped: the memory starts new.
   */
  constructor(
    private readonly store: MemoryStore,
    private readonly scope: string,
  ) {
    const entries = store.entries();
    const mark = entries.find(([key]) => key === MARK_KEY)?.[1] as KeptMark | undefined;
    if (!mark || mark.scope !== scope || typeof mark.mark !== 'number' || !Number.isFinite(mark.mark)) {
      for (const [key] of entries) store.delete(key);
      return;
    }
    this.markValue = mark.mark;
    for (const [key, record] of entries) {
      if (key === MARK_KEY) continue;
      const id =
        typeof key === 'string' && key.startsWith(JOB_PREFIX)
          ? readJobId(key.slice(JOB_PREFIX.length))
          : undefined;
      const job = id?.ok && this.jobs.size < MAX_JOBS ? jobOf(record) : undefined;
      if (id?.ok && job) this.put(id.value, job, false);
      else store.delete(key);
    }
  }

  /** Whether the memory has begun: false before the first read of the server (nothing to tell yet). */
  get begun(): boolean {
    return this.markValue !== undefined;
  }

  /** The newest create_time read from the list; 0 when none was. */
  get mark(): number {
    return this.markValue ?? 0;
  }

  get size(): number {
    return this.jobs.size;
  }

  get(id: string): RememberedJob | undefined {
    return this.jobs.get(id);
  }

  /** The jobs remembered as waiting or running. */
  active(): Array<[string, RememberedJob]> {
    return [...this.jobs].filter(([, job]) => job.step !== 'ended');
  }

  /** Begins the memory (the first read of the server), or moves the mark up. */
  setMark(mark: number): void {
    if (this.markValue !== undefined && mark <= this.markValue) return;
    this.markValue = Math.max(mark, this.markValue ?? 0);
    this.store.set(MARK_KEY, { mark: this.markValue, scope: this.scope });
  }

  /**
   * Ends a look: the mark moves up to `newest`, but stays at the oldest job the look met as new and left
   * untold (its owner not known yet, a read that failed, more ends than a look reads), so the next look meets it
   * again; then what no look can meet again is forgotten.
   */
  closeLook(newest: number, met: Iterable<[string, { createdAt?: number }]>): void {
    let mark = newest;
    for (const [id, job] of met) {
      if (job.createdAt !== undefined && job.createdAt >= this.mark && !this.get(id))
        mark = Math.min(mark, job.createdAt);
    }
    this.setMark(mark);
    this.forgetOld();
  }

  /** Remembers a job; false when the memory is full of waiting and running jobs (nothing ended to forget). */
  remember(id: string, job: RememberedJob): boolean {
    if (!this.jobs.has(id) && this.jobs.size >= MAX_JOBS && !this.forgetOldestEnded()) return false;
    this.put(id, job, true);
    return true;
  }

  /**
   * Forgets ended jobs that no read can meet again: those older than the mark (the list is read down to it),
   * and those without a create_time past the newest ENDED_KEPT.
   */
  forgetOld(): void {
    for (const [id, job] of this.jobs) {
      if (job.step === 'ended' && job.createdAt !== undefined && job.createdAt < this.mark) this.drop(id);
    }
    while (this.endedWithoutTime > ENDED_KEPT && this.forgetOldestEnded(true)) {
      // one at a time, oldest first
    }
  }

  private put(id: string, job: RememberedJob, write: boolean): void {
    const previous = this.jobs.get(id);
    if (previous) this.count(previous, -1);
    // Written last: the Map's order is the order of writes, so the oldest ended job comes first.
    this.jobs.delete(id);
    this.jobs.set(id, job);
    this.count(job, 1);
    if (write) this.store.set(JOB_PREFIX + id, recordOf(job));
  }

  private drop(id: string): void {
    const job = this.jobs.get(id);
    if (!job) return;
    this.count(job, -1);
    this.jobs.delete(id);
    this.store.delete(JOB_PREFIX + id);
  }

  private count(job: RememberedJob, delta: number): void {
    if (job.step === 'ended' && job.createdAt === undefined) this.endedWithoutTime += delta;
  }

  private forgetOldestEnded(withoutTimeOnly = false): boolean {
    for (const [id, job] of this.jobs) {
      if (job.step !== 'ended' || (withoutTimeOnly && job.createdAt !== undefined)) continue;
      this.drop(id);
      return true;
    }
    return false;
  }
}
