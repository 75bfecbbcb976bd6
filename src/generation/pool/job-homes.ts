/**
 * Which member of a pool each job went to (job id -> the member config node's id), so a msg that lost
 * `msg.server` still finds its job's server, also after Node-RED restarts: kept in a journal file
 * (persist/journal.ts: one small line per job, written in batches) when the pool has a file, else in memory only.
 * At least the most recent MAX_JOB_HOMES jobs are kept, in two generations; older ones are forgotten (their msgs
 * carry msg.server). A line read back is outside data: only a job id and a member id of sane length are taken.
 * No Node-RED inside.
 */
import { Journal } from '../../persist/journal';
import { readOk, type Read } from '../../boundary/outside';
import { MAX_JOB_ID_LENGTH } from '../jobs/job-ids';

/**
 * Jobs remembered at least: the most recent this many, and at most twice as many (two generations of this many;
 * a line is about 100 bytes: one to two megabytes on disk).
 */
export const MAX_JOB_HOMES = 10_000;

/** A Node-RED node id is 16 hex digits; anything up to this length is taken. */
const MAX_MEMBER_ID_LENGTH = 200;

function readMemberId(value: unknown): Read<string> {
  if (typeof value !== 'string' || value === '' || value.length > MAX_MEMBER_ID_LENGTH)
    return { ok: false, reason: 'not a member id' };
  return readOk(value);
}

export class JobHomes {
  /**
   * Two generations: the jobs set since the last turn, and those of the one before. When the newer holds
   * MAX_JOB_HOMES the older is forgotten, all at once. One map that deleted its oldest entry on each set walked
   * past the deleted slots at its start to find it: 11-13 µs a submit once full (bench/fanout --pool).
   */
  private newer = new Map<string, string>();
  private older = new Map<string, string>();

  private constructor(private readonly journal: Journal<string> | undefined) {
    for (const [job, member] of journal?.entries() ?? [])
      if (job.length <= MAX_JOB_ID_LENGTH) this.older.set(job, member);
  }

  /** In memory only (tests, a pool without a user dir). */
  static inMemory(): JobHomes {
    return new JobHomes(undefined);
  }

  /** Kept in `file` (read back now; what cannot be read is said through `log` and skipped). */
  static async open(file: string, log: (message: string) => void): Promise<JobHomes> {
    const journal = await Journal.open<string>(file, { log, readValue: readMemberId });
    return new JobHomes(journal);
  }

  get(promptId: string): string | undefined {
    return this.newer.get(promptId) ?? this.older.get(promptId);
  }

  set(promptId: string, memberId: string): void {
    if (this.get(promptId) === memberId) return;
    this.older.delete(promptId);
    this.newer.set(promptId, memberId);
    this.journal?.set(promptId, memberId);
    if (this.newer.size >= MAX_JOB_HOMES) {
      for (const job of this.older.keys()) this.journal?.delete(job);
      this.older = this.newer;
      this.newer = new Map();
    }
  }

  /** Hands every job kept here to `other` (the file, once read), oldest first. */
  moveInto(other: JobHomes): void {
    for (const homes of [this.older, this.newer]) for (const [job, member] of homes) other.set(job, member);
    this.older = new Map();
    this.newer = new Map();
  }

  get size(): number {
    return this.newer.size + this.older.size;
  }

  async close(): Promise<void> {
    await this.journal?.close();
  }

  /** Forgets every job and removes the file (the pool was removed from the flows). */
  async destroy(): Promise<void> {
    this.older = new Map();
    this.newer = new Map();
    await this.journal?.destroy();
  }
}
