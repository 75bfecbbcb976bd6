/**
 * The awaits of one await-job node: each msg's job joined to its life in the config node's book
 * (job-book.ts, job-life.ts decide how it ends), its time limit, the rate of its previews, and what the
 * node's status shows. Any number of jobs at once; the summary costs constant work however many. No
 * Node-RED inside.
 */
import type { JobAwait, JobBook } from './job-book';
import type { JobLife, JobProgress, JobResult, LifeState } from './job-life';
import type { ConnectionState, SocketUser } from './socket-manager';
import type { JobEventSource } from './job-ports';
import { errorText } from '../../boundary/outside';

export type { JobEndStatus, JobProgress, JobResult } from './job-life';

/** What a tracker uses of a config node's connection. */
export interface JobConnection {
  readonly jobs: JobBook;
  sockets(): JobEventSource;
  cancel(promptIds: string[], signal?: AbortSignal): Promise<unknown>;
}

export interface TrackOptions {
  /** 0 or undefined = no limit. */
  timeoutMs?: number;
  /** On timeout, also cancel the job on the service (as a queue node's cancel does). */
  cancelOnTimeout?: boolean;
  onProgress?: (progress: JobProgress) => void;
  /** Called with the result the moment the job ends, before the promise settles (no microtask delay). */
  onEnd?: (result: JobResult) => void;
}

export interface JobTrackerOptions {
  /** Previews passed on per job and second; more are dropped. 0 = all. */
  previewsPerSecond?: number;
  /**
   * Jobs of this tracker are likely given an onProgress (an await-job node with its progress output): the shared
   * socket then reads progress-only frames (previews, step states) of every job, also of jobs not awaited yet, so
   * an await replays them. Default false: such frames are skipped unread while no tracker and no awaited job wants
   * them (most of a busy server's frames); a job tracked with an onProgress has its own read from its track() on.
   */
  progress?: boolean;
  /** Something a node shows in its status changed (a job's phase, node, step; the queue; the socket). */
  onChange?: () => void;
  onQueueStatus?: SocketUser['onQueueStatus'];
  onNotification?: SocketUser['onNotification'];
  log?: (level: 'debug' | 'warn', message: string) => void;
}

export interface JobView {
  promptId: string;
  phase: 'pending' | 'running';
  node?: string;
  step?: { value: number; max: number };
  /** Orders the jobs' changes (a sequence number, not a time): the latest change has the highest. */
  lastChange: number;
}

/** What a node's status shows, read in constant time however many jobs are followed. */
export interface TrackerSummary {
  jobs: number;
  running: number;
  /** The running job that changed last (its node and step make the status text). */
  latestRunning?: JobView;
  /** Of the waiting jobs whose place is known, the fewest jobs ahead of one. */
  nearestAhead?: number;
}

/** The longest a Node.js timer waits (2^31 - 1 ms, about 24.8 days); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** One msg's wait for its job. */
class Await implements JobAwait, JobView {
  life?: JobLife;
  timeoutTimer?: NodeJS.Timeout;
  /** The previews passed on in the current second (previewsPerSecond): made at the first, most awaits see none. */
  previews?: { windowStart: number; count: number };

  constructor(
    private readonly tracker: JobTracker,
    readonly promptId: string,
    readonly options: TrackOptions,
    readonly resolve: (result: JobResult | undefined) => void,
  ) {}

  get wantsProgress(): boolean {
    return this.options.onProgress !== undefined;
  }

  get phase(): 'pending' | 'running' {
    const state = this.life?.state;
    return state === 'running' || state === 'ending' ? 'running' : 'pending';
  }

  get node(): string | undefined {
    return this.life?.node;
  }

  get step(): { value: number; max: number } | undefined {
    return this.life?.step;
  }

  get lastChange(): number {
    return this.life?.lastChange ?? 0;
  }

  /** While its job waits: how many jobs run before it, when a queue read told. */
  get ahead(): number | undefined {
    return this.phase === 'pending' ? this.life?.ahead : undefined;
  }

  onChange(life: JobLife, previous: LifeState): void {
    this.life = life;
    this.tracker.changed(this, previous);
  }

  onProgress(progress: JobProgress): void {
    if (progress.topic === 'preview' && !this.tracker.previewAllowed(this)) return;
    this.options.onProgress?.(progress);
  }

  onEnd(result: JobResult): void {
    this.tracker.ended(this, result);
  }
}

export class JobTracker {
  private readonly awaits = new Set<Await>();
  /** Awaits whose job runs now, and the one that changed last: a node's status in constant time. */
  private readonly running = new Set<Await>();
  private latestRunning?: Await;
  /** The waiting await with the fewest jobs ahead; undefined when it must be looked for again. */
  private nearest?: Await;
  private readonly options: JobTrackerOptions & { previewsPerSecond: number };
  private deregister?: () => void;
  private closed = false;
  queueRemaining?: number;
  connectionState: ConnectionState = 'idle';

  constructor(
    private readonly connection: JobConnection,
    options: JobTrackerOptions = {},
  ) {
    this.options = { previewsPerSecond: 0, progress: false, ...options };
  }

  /** The jobs followed now (a copy: tests and tools; a node's status uses `summary`). */
  views(): JobView[] {
    return [...this.awaits];
  }

  /**
   * For a node's status, every 150 ms while jobs change: constant work, not a walk over 10,000 jobs. Only when
   * the latest running job has ended are the running ones looked through for the next latest.
   */
  summary(): TrackerSummary {
    if (!this.latestRunning && this.running.size > 0) {
      for (const job of this.running) {
        if (!this.latestRunning || job.lastChange > this.latestRunning.lastChange) this.latestRunning = job;
      }
    }
    // Looked for only when no job runs (the status shows a running one first) and the nearest is not known.
    if (this.running.size === 0 && this.nearest?.ahead === undefined) {
      this.nearest = undefined;
      for (const job of this.awaits) {
        const ahead = job.ahead;
        if (ahead !== undefined && (this.nearest === undefined || ahead < (this.nearest.ahead as number)))
          this.nearest = job;
      }
    }
    return {
      jobs: this.awaits.size,
      running: this.running.size,
      latestRunning: this.latestRunning,
      nearestAhead: this.nearest?.ahead,
    };
  }

  get size(): number {
    return this.awaits.size;
  }

  /**
   * Follows one job to its end. Resolves with its result, or undefined when the tracker is closed first.
   * Never rejects.
   */
  track(promptId: string, options: TrackOptions = {}): Promise<JobResult | undefined> {
    if (this.closed) return Promise.resolve(undefined);
    this.start();
    return new Promise<JobResult | undefined>((resolve) => {
      const job = new Await(this, promptId, options, resolve);
      this.awaits.add(job);
      if (options.timeoutMs && options.timeoutMs > 0 && options.timeoutMs <= MAX_TIMER_MS) {
        job.timeoutTimer = setTimeout(() => this.timeout(job), options.timeoutMs);
      }
      this.connection.jobs.attach(promptId, job);
    });
  }

  /** Stops following every job (their promises resolve with undefined) and leaves the socket. */
  close(): void {
    this.closed = true;
    for (const job of [...this.awaits]) {
      this.forget(job);
      this.connection.jobs.detach(job.promptId, job);
      job.resolve(undefined);
    }
    this.deregister?.();
    this.deregister = undefined;
  }

  /** Registers with the socket manager (without opening it), so the socket state shows at once. */
  start(): void {
    if (this.deregister || this.closed) return;
    this.deregister = this.connection.sockets().register({
      onQueueStatus: (queue, data) => {
        this.queueRemaining = queue;
        this.options.onQueueStatus?.(queue, data);
        this.notify();
      },
      onNotification: this.options.onNotification,
      onConnectionState: (state) => {
        this.connectionState = state;
        this.notify();
      },
      onLog: this.options.log,
      progress: this.options.progress,
    });
  }

  /** An await's job changed state, node or step. */
  changed(job: Await, previous: LifeState): void {
    if (!this.awaits.has(job)) return;
    const state = job.life?.state;
    if (state === 'running' || state === 'ending') {
      // The common change, once per progress event: only the latest running job moves.
      this.latestRunning = job;
      if (previous !== state) {
        this.running.add(job);
        if (job === this.nearest) this.nearest = undefined;
      }
    } else {
      if (previous === 'running' || previous === 'ending') {
        this.running.delete(job);
        if (this.latestRunning === job) this.latestRunning = undefined;
      }
      const ahead = job.ahead;
      if (ahead !== undefined && (this.nearest?.ahead === undefined || ahead <= this.nearest.ahead))
        this.nearest = job;
      else if (job === this.nearest) this.nearest = undefined;
    }
    this.notify();
  }

  /** Whether one more preview of this job may pass now (previewsPerSecond, per job). */
  previewAllowed(job: Await): boolean {
    const limit = this.options.previewsPerSecond;
    if (limit <= 0) return true;
    const now = Date.now();
    const previews = (job.previews ??= { windowStart: now, count: 0 });
    if (now - previews.windowStart >= 1000) {
      previews.windowStart = now;
      previews.count = 0;
    }
    if (previews.count >= limit) return false;
    previews.count += 1;
    return true;
  }

  /** The job ended: its result goes to the caller the moment it is known. */
  ended(job: Await, result: JobResult): void {
    if (!this.awaits.has(job)) return;
    this.forget(job);
    try {
      job.options.onEnd?.(result);
    } catch (error) {
      this.log('warn', `graph-gen: handing on the result of ${job.promptId} failed: ${errorText(error)}`);
    }
    job.resolve(result);
    this.notify();
  }

  private timeout(job: Await): void {
    if (!this.awaits.has(job)) return;
    this.connection.jobs.detach(job.promptId, job);
    if (job.options.cancelOnTimeout) {
      this.connection
        .cancel([job.promptId])
        .catch((error: unknown) =>
          this.log(
            'warn',
            `graph-gen: cancelling ${job.promptId} after its timeout failed: ${errorText(error)}`,
          ),
        );
    }
    this.ended(job, { prompt_id: job.promptId, status: 'timeout' });
  }

  private forget(job: Await): void {
    clearTimeout(job.timeoutTimer);
    job.timeoutTimer = undefined;
    this.awaits.delete(job);
    this.running.delete(job);
    if (this.latestRunning === job) this.latestRunning = undefined;
    if (this.nearest === job) this.nearest = undefined;
  }

  private notify(): void {
    this.options.onChange?.();
  }

  private log(level: 'debug' | 'warn', message: string): void {
    this.options.log?.(level, message);
  }
}
