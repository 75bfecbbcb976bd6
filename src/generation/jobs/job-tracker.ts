/**
 * Following jobs to their end over the config node's shared socket, with REST as the safety net: a status
 * check after subscribing (a job may have ended before it was awaited) and after every reconnect, polling
 * while the socket is down, and the outputs fetched over REST when events may have been missed. One tracker
 * per await-job node; it follows any number of jobs at once. No Node-RED inside.
 */
import { setMaxListeners } from 'node:events';
import type { CancelKind } from './cancels';
import type { GenerationConnection } from '../connection';
import type { ImageType, PreviewMetadata } from './frames';
import { filesOf, mergeOutput, type FileReference, type JobOutputs } from './job-outputs';
import { executionError, phaseInQueue, type ExecutionError, type StatusAnswer } from './job-status';
import { Limiter } from './limiter';
import { isTerminal } from './status-words';
import type { ConnectionState, SocketEvent, SocketUser } from './socket-manager';

/** What a tracker uses of a config node's connection. */
export type JobConnection = Pick<
  GenerationConnection,
  'http' | 'lookup' | 'cancels' | 'cancel' | 'queueIds' | 'sockets'
>;

export type JobEndStatus = 'completed' | 'failed' | 'cancelled' | 'timeout';

export interface JobResult {
  prompt_id: string;
  status: JobEndStatus;
  outputs?: JobOutputs;
  files?: FileReference[];
  error?: ExecutionError;
  /** Events were missed and no endpoint of the server had the outputs: `outputs` may lack some. */
  outputs_incomplete?: true;
}

/** One progress message: the event type as topic, its data (or a preview's bytes / a text) as payload. */
export interface JobProgress {
  topic: string;
  payload: unknown;
  prompt_id: string;
  image_type?: ImageType;
  metadata?: PreviewMetadata;
  node?: string;
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
  pollInitialMs?: number;
  pollMaxMs?: number;
  /** A job that has had no event this long while the socket is up gets its status checked. */
  quietCheckMs?: number;
  /**
   * The status check after subscribing waits this long, and is skipped when the job's events are arriving
   * on an unbroken connection meanwhile: then its end will arrive too.
   */
  firstCheckMs?: number;
  /**
   * A job no route of the service knows ends as lost (`JobLost`) once it has been unknown this long, checked
   * twice: a forgotten job (deleted elsewhere, a restart) must not be confused with a moment between routes.
   */
  lostConfirmMs?: number;
  /**
   * A job the service has never known (no event, no answer) is not counted lost before this long after it
   * was awaited: a service may list a job a moment after its submit answered.
   */
  unknownGraceMs?: number;
  /**
   * A queue read answers for every check made this long after it: one request for thousands of waiting
   * jobs. A reconnect or a queue change starts a new one.
   */
  queueFreshMs?: number;
  /**
   * Jobs of this tracker may be given an onProgress (default true). False: the shared socket may skip
   * progress-only frames unread while no other tracker wants them, since none of these jobs will.
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
}

const SWEEP_SETTLE_MS = 300;
const SWEEP_INTERVAL_MS = 2_000;
const SWEEP_JOBS = 25;
/** Status checks of one tracker in flight at once (after a reconnect every job is checked). */
const CHECKS_AT_ONCE = 25;

/** The error of a job that no route of the service knows any more. */
export function jobLostError(promptId: string): ExecutionError {
  return {
    exception_type: 'JobLost',
    exception_message: `the generation service no longer knows job ${promptId}: it was deleted from its queue elsewhere, or the server restarted; submit the workflow again`,
    traceback: [],
  };
}

const TERMINAL_EVENTS: Record<string, JobEndStatus> = {
  execution_success: 'completed',
  execution_error: 'failed',
  execution_interrupted: 'cancelled',
};

function unknownFailure(): ExecutionError {
  return {
    exception_type: 'unknown',
    exception_message: 'the service reports the job as failed',
    traceback: [],
  };
}

/** Keeps the job's node string when the event names the same node (the old string is already old). */
function setNode(job: TrackedJob, node: string): void {
  if (job.node !== node) job.node = node;
}

function setOutputs(result: JobResult, outputs: JobOutputs): void {
  result.outputs = outputs;
  result.files = filesOf(outputs);
}

class TrackedJob implements JobView {
  phase: 'pending' | 'running' = 'pending';
  node?: string;
  step?: { value: number; max: number };
  lastChange = 0;
  /** The quiet-check tick in which this job's last event came (a count of ticks, not a time). */
  lastEventTick = 0;
  outputs: JobOutputs = {};
  ending = false;
  readonly trackedAt = Date.now();
  /** The service has known this job: an event came, or a status check found it. */
  known = false;
  /** When a status check first found no route that knows the job. */
  unknownSince?: number;
  /** A check under way began before a reconnect: its answer may be stale, so check again after it. */
  recheck = false;
  recheckTimer?: NodeJS.Timeout;
  /** The connection that delivered execution_start; a later event from another one means a gap. */
  startEpoch?: number;
  /** The connection that delivered this job's first event. */
  firstEventEpoch?: number;
  gap = false;
  checking = false;
  pollDelay: number;
  pollTimer?: NodeJS.Timeout;
  timeoutTimer?: NodeJS.Timeout;
  previewWindowStart = 0;
  previewsInWindow = 0;
  unsubscribe: (options?: { ended?: boolean }) => void = () => undefined;

  constructor(
    readonly promptId: string,
    readonly options: TrackOptions,
    readonly resolve: (result: JobResult | undefined) => void,
    pollInitialMs: number,
  ) {
    this.pollDelay = pollInitialMs;
  }
}

export class JobTracker {
  private readonly jobs = new Set<TrackedJob>();
  private readonly options: Required<
    Pick<
      JobTrackerOptions,
      | 'previewsPerSecond'
      | 'pollInitialMs'
      | 'pollMaxMs'
      | 'quietCheckMs'
      | 'firstCheckMs'
      | 'lostConfirmMs'
      | 'unknownGraceMs'
      | 'queueFreshMs'
    >
  > &
    JobTrackerOptions;
  private deregister?: () => void;
  private stopListening?: () => void;
  /** Aborts every request this tracker started when it closes: a redeploy must not wait for them. */
  private readonly aborter = new AbortController();
  private readonly checks = new Limiter(CHECKS_AT_ONCE);
  private closed = false;
  private sweepTimer?: NodeJS.Timeout;
  private lastSweep = 0;
  /** Jobs still pending with no event yet, least recently swept first: what a queue change may concern. */
  private readonly waiting = new Set<TrackedJob>();
  /** Jobs running now, and the one that changed last: a node's status in constant time. */
  private readonly running = new Set<TrackedJob>();
  private latestRunning?: TrackedJob;
  /** One timer checks every quiet job, so their checks share one queue read. */
  private quietTimer?: NodeJS.Timeout;
  /** Ticks of that timer so far: a job is quiet when enough ticks passed since its last event. */
  private quietTick = 0;
  /** Changes of phase so far: orders the running jobs for latestRunning. */
  private changeCount = 0;
  /** Jobs awaited since the last first-check round, and its timer. */
  private readonly firstChecks = new Set<TrackedJob>();
  private firstCheckTimer?: NodeJS.Timeout;
  /** The latest queue read, shared by the checks made within `queueFreshMs` of it. */
  private queueRead?: { at: number; ids: ReturnType<JobConnection['queueIds']> };
  queueRemaining?: number;
  connectionState: ConnectionState = 'idle';

  constructor(
    private readonly connection: JobConnection,
    options: JobTrackerOptions = {},
  ) {
    this.options = {
      previewsPerSecond: 0,
      pollInitialMs: 2_000,
      pollMaxMs: 10_000,
      quietCheckMs: 60_000,
      firstCheckMs: 150,
      lostConfirmMs: 2_000,
      unknownGraceMs: 10_000,
      queueFreshMs: 1_000,
      progress: true,
      ...options,
    };
    // Each request in flight listens to the signal: up to CHECKS_AT_ONCE checks, and the outputs of jobs
    // ending at once; more listeners than Node's default of 10 are expected, not a leak.
    setMaxListeners(1000, this.aborter.signal);
  }

  /** The jobs followed now (a copy: tests and tools; a node's status uses `summary`). */
  views(): JobView[] {
    return [...this.jobs];
  }

  /**
   * For a node's status, every 150 ms while jobs change: constant work, not a walk over 10,000 jobs. Only
   * when the latest running job has ended are the running ones looked through for the next latest.
   */
  summary(): TrackerSummary {
    if (!this.latestRunning && this.running.size > 0) {
      for (const job of this.running) {
        if (!this.latestRunning || job.lastChange > this.latestRunning.lastChange) this.latestRunning = job;
      }
    }
    return { jobs: this.jobs.size, running: this.running.size, latestRunning: this.latestRunning };
  }

  get size(): number {
    return this.jobs.size;
  }

  /**
   * Follows one job to its end. Resolves with its result, or undefined when the tracker is closed first.
   * Never rejects.
   */
  track(promptId: string, options: TrackOptions = {}): Promise<JobResult | undefined> {
    if (this.closed) return Promise.resolve(undefined);
    this.start();
    return new Promise<JobResult | undefined>((resolve) => {
      const job = new TrackedJob(promptId, options, resolve, this.options.pollInitialMs);
      job.lastEventTick = this.quietTick;
      this.jobs.add(job);
      // A timer past 2^31 - 1 ms would fire at once: a longer limit is no limit in practice.
      if (options.timeoutMs && options.timeoutMs > 0 && options.timeoutMs <= 2 ** 31 - 1) {
        job.timeoutTimer = setTimeout(() => this.timeout(job), options.timeoutMs);
      }
      const sockets = this.connection.sockets();
      job.unsubscribe = sockets.subscribe(promptId, (event) => this.onEvent(job, event), {
        progress: options.onProgress !== undefined,
      });
      // The kept events replayed by subscribe may have ended the job before the unsubscribe was known.
      if (job.ending) {
        if (!this.jobs.has(job)) job.unsubscribe({ ended: true });
        return;
      }
      // Taken out of the queue before it was awaited: it will never run.
      if (this.connection.cancels.kindOf(promptId) === 'removed') {
        void this.end(job, 'cancelled', {});
        return;
      }
      if (job.firstEventEpoch === undefined && job.phase === 'pending') this.waiting.add(job);
      this.armQuietChecks();
      this.changed();
      // The job may have ended before it was awaited, with its events gone: ask once, unless its events
      // are arriving on an unbroken connection (then its end will come the same way). One timer for all
      // the jobs awaited in the same moment, so one queue read answers for them.
      this.firstChecks.add(job);
      this.firstCheckTimer ??= setTimeout(() => this.firstCheck(), this.options.firstCheckMs);
      if (!sockets.isOpen) this.schedulePoll(job);
    });
  }

  /** Stops following every job (their promises resolve with undefined) and leaves the socket. */
  close(): void {
    this.closed = true;
    this.aborter.abort();
    clearTimeout(this.sweepTimer);
    clearTimeout(this.firstCheckTimer);
    clearInterval(this.quietTimer);
    this.quietTimer = undefined;
    this.stopListening?.();
    this.stopListening = undefined;
    for (const job of [...this.jobs]) this.release(job, false);
    this.deregister?.();
    this.deregister = undefined;
  }

  /** Registers with the socket manager (without opening it), so the socket state shows at once. */
  start(): void {
    if (this.deregister || this.closed) return;
    this.stopListening = this.connection.cancels.listen((promptId, kind) => this.onCancel(promptId, kind));
    this.deregister = this.connection.sockets().register({
      onQueueStatus: (queue, data) => {
        this.queueRemaining = queue;
        // The queue changed: the next check reads it anew.
        this.queueRead = undefined;
        this.options.onQueueStatus?.(queue, data);
        this.scheduleSweep();
        this.changed();
      },
      onNotification: this.options.onNotification,
      onConnectionState: (state, reconnected) => this.onConnectionState(state, reconnected),
      onLog: this.options.log,
      progress: this.options.progress,
    });
  }

  private onConnectionState(state: ConnectionState, reconnected: boolean): void {
    this.connectionState = state;
    // A queue read from before the reconnect may predate the jobs' ends.
    if (reconnected) this.queueRead = undefined;
    if (state === 'open') {
      for (const job of this.jobs) {
        clearTimeout(job.pollTimer);
        job.pollTimer = undefined;
        job.pollDelay = this.options.pollInitialMs;
        if (reconnected) job.gap = true;
      }
      // Whatever happened while the socket was down is only known over REST; a check already under way
      // may have asked before the job ended, so it does not count as this one.
      if (reconnected) void this.checkMany([...this.jobs]);
    } else {
      for (const job of this.jobs) this.schedulePoll(job);
    }
    this.changed();
  }

  /** A queue node of this config cancelled a job: one taken out of the queue ends now. */
  private onCancel(promptId: string, kind: CancelKind): void {
    if (kind !== 'removed') return;
    for (const job of this.jobs) if (job.promptId === promptId) void this.end(job, 'cancelled', {});
  }

  private onEvent(job: TrackedJob, event: SocketEvent): void {
    if (job.ending) return;
    job.known = true;
    job.unknownSince = undefined;
    // Counters, not clock reads: this runs for every frame, and Date.now() is a call into the runtime.
    job.lastEventTick = this.quietTick;
    // Only a job with no event yet is in `waiting`: the set is touched once per job, not per event.
    if (job.firstEventEpoch === undefined) {
      job.firstEventEpoch = event.epoch;
      this.waiting.delete(job);
    }
    const { type, data } = event;
    if (job.startEpoch !== undefined && event.epoch !== job.startEpoch) job.gap = true;
    const terminal = TERMINAL_EVENTS[type];
    if (terminal) {
      if (type === 'execution_error') void this.end(job, 'failed', { error: executionError(data) });
      else void this.end(job, terminal, { eventEpoch: event.epoch });
      return;
    }
    switch (type) {
      case 'execution_start':
        job.startEpoch = event.epoch;
        job.gap = false;
        this.setPhase(job, 'running');
        break;
      case 'executing': {
        const node = data.node;
        if (node === null || node === undefined || node === '') {
          this.progress(job, type, data);
          void this.endedWithoutResult(job);
          return;
        }
        setNode(job, String(node));
        job.step = undefined;
        this.setPhase(job, 'running');
        break;
      }
      case 'progress': {
        const value = Number(data.value);
        const max = Number(data.max);
        if (Number.isFinite(value) && Number.isFinite(max)) {
          // Changed in place: a new object per event, held by a long-lived job, would outlive the young
          // generation and make every scavenge copy one per job in flight.
          if (job.step) {
            job.step.value = value;
            job.step.max = max;
          } else job.step = { value, max };
        }
        if (typeof data.node === 'string') setNode(job, data.node);
        this.setPhase(job, 'running');
        break;
      }
      case 'executed': {
        const node = data.node ?? data.display_node;
        if (node !== undefined && node !== null) mergeOutput(job.outputs, String(node), data.output);
        break;
      }
      case 'preview':
        this.preview(job, event);
        return;
      case 'text': {
        const frame = event.frame;
        if (frame?.type === 3) {
          job.options.onProgress?.({
            topic: 'text',
            payload: frame.text,
            node: frame.nodeId,
            prompt_id: job.promptId,
          });
        }
        return;
      }
      default:
        break;
    }
    this.progress(job, type, data);
  }

  private progress(job: TrackedJob, topic: string, payload: Record<string, unknown>): void {
    job.options.onProgress?.({ topic, payload, prompt_id: job.promptId });
  }

  private preview(job: TrackedJob, event: SocketEvent): void {
    const frame = event.frame;
    if (!job.options.onProgress || !frame || frame.type === 3) return;
    const limit = this.options.previewsPerSecond;
    if (limit > 0) {
      const now = Date.now();
      if (now - job.previewWindowStart >= 1000) {
        job.previewWindowStart = now;
        job.previewsInWindow = 0;
      }
      if (job.previewsInWindow >= limit) return;
      job.previewsInWindow += 1;
    }
    const progress: JobProgress = {
      topic: 'preview',
      payload: frame.image,
      image_type: frame.imageType,
      prompt_id: job.promptId,
    };
    if (frame.type === 4) progress.metadata = frame.metadata;
    job.options.onProgress(progress);
  }

  private setPhase(job: TrackedJob, phase: 'pending' | 'running'): void {
    // A running job is in `running` and nowhere else: the sets change with the phase, not per event.
    if (phase === 'running') {
      if (job.phase !== 'running') {
        this.waiting.delete(job);
        this.running.add(job);
      }
      this.latestRunning = job;
    } else if (job.phase === 'running') {
      this.running.delete(job);
      if (this.latestRunning === job) this.latestRunning = undefined;
    }
    job.phase = phase;
    job.lastChange = ++this.changeCount;
    this.changed();
  }

  /** `executing` with no node: the end of the job's run. Only REST can say how it ended. */
  private async endedWithoutResult(job: TrackedJob): Promise<void> {
    const answer = await this.ask(job);
    if (job.ending) return;
    if (answer && answer.phase !== 'unknown' && isTerminal(answer.phase)) {
      await this.end(job, answer.phase, { error: answer.error, fromRest: true, outputs: answer.outputs });
    } else {
      await this.end(job, 'completed', {});
    }
  }

  private async ask(job: TrackedJob): Promise<StatusAnswer | undefined> {
    try {
      return await this.connection.lookup.status(job.promptId, this.aborter.signal);
    } catch (error) {
      if (!this.closed)
        this.log('debug', `graph-gen: status check of ${job.promptId} failed: ${String(error)}`);
      return undefined;
    }
  }

  private async check(job: TrackedJob): Promise<void> {
    if (job.checking || job.ending) return;
    job.checking = true;
    const answer = await this.checks.run(async () => {
      if (job.ending || this.closed) return undefined;
      // A job the queue lists is waiting or running: one queue read answers for all of them.
      const queued = phaseInQueue(await this.readQueue(), job.promptId);
      return queued ? { phase: queued, word: queued } : this.ask(job);
    });
    job.checking = false;
    if (job.ending || !this.jobs.has(job)) return;
    if (job.recheck) {
      job.recheck = false;
      void this.check(job);
      return;
    }
    if (!answer) return;
    if (answer.phase === 'unknown') {
      await this.unknown(job);
      return;
    }
    job.known = true;
    job.unknownSince = undefined;
    if (isTerminal(answer.phase)) {
      await this.end(job, answer.phase, { error: answer.error, fromRest: true, outputs: answer.outputs });
      return;
    }
    if (answer.phase !== job.phase) this.setPhase(job, answer.phase === 'running' ? 'running' : 'pending');
  }

  /**
   * No route of the service knows the job. One this config cancelled ends `cancelled`. Otherwise, once the
   * service has known it (or the grace time has passed) and a second check a moment later agrees, it ends
   * `failed` with JobLost: nothing would ever end it.
   */
  private async unknown(job: TrackedJob): Promise<void> {
    if (this.connection.cancels.kindOf(job.promptId)) {
      await this.end(job, 'cancelled', {});
      return;
    }
    const now = Date.now();
    if (!job.known && now - job.trackedAt < this.options.unknownGraceMs) {
      this.recheckIn(job, job.trackedAt + this.options.unknownGraceMs - now);
      return;
    }
    job.unknownSince ??= now;
    if (now - job.unknownSince >= this.options.lostConfirmMs) {
      await this.end(job, 'failed', { error: jobLostError(job.promptId) });
      return;
    }
    this.recheckIn(job, job.unknownSince + this.options.lostConfirmMs - now);
  }

  private recheckIn(job: TrackedJob, ms: number): void {
    clearTimeout(job.recheckTimer);
    job.recheckTimer = setTimeout(() => {
      job.recheckTimer = undefined;
      void this.check(job);
    }, ms);
  }

  private schedulePoll(job: TrackedJob): void {
    if (job.pollTimer || job.ending || this.closed) return;
    job.pollTimer = setTimeout(() => {
      job.pollTimer = undefined;
      if (job.ending || this.connection.sockets().isOpen) return;
      job.gap = true;
      void this.check(job).then(() => {
        job.pollDelay = Math.min(this.options.pollMaxMs, Math.round(job.pollDelay * 1.5));
        if (!this.connection.sockets().isOpen) this.schedulePoll(job);
      });
    }, job.pollDelay);
  }

  /** The first check of the jobs awaited since the last round: the ones whose events are not arriving. */
  private firstCheck(): void {
    this.firstCheckTimer = undefined;
    const sockets = this.connection.sockets();
    const due = [...this.firstChecks].filter(
      (job) =>
        !(job.firstEventEpoch !== undefined && job.firstEventEpoch === sockets.epoch && sockets.isOpen),
    );
    this.firstChecks.clear();
    void this.checkMany(due);
  }

  /**
   * Checks many jobs at once: one queue read answers for every job it lists (constant work each, no
   * request); only the jobs it does not list (ended, or unknown) are asked about one by one. A job whose
   * check is under way is checked again after it, as its answer may be older than this round.
   */
  private async checkMany(jobs: TrackedJob[]): Promise<void> {
    const due = jobs.filter((job) => {
      if (job.ending) return false;
      if (job.checking) job.recheck = true;
      return !job.checking;
    });
    if (due.length === 0 || this.closed) return;
    for (const job of due) job.checking = true;
    const ids = await this.readQueue();
    const alone: TrackedJob[] = [];
    for (const job of due) {
      job.checking = false;
      if (job.ending || !this.jobs.has(job)) continue;
      const queued = phaseInQueue(ids, job.promptId);
      if (!queued || job.recheck) {
        job.recheck = false;
        alone.push(job);
        continue;
      }
      job.known = true;
      job.unknownSince = undefined;
      if (queued !== job.phase) this.setPhase(job, queued);
    }
    for (const job of alone) void this.check(job);
  }

  /** The queue, read at most once per `queueFreshMs` (a reconnect or a queue change starts a new read). */
  private readQueue(): ReturnType<JobConnection['queueIds']> {
    const now = Date.now();
    if (!this.queueRead || now - this.queueRead.at >= this.options.queueFreshMs) {
      const ids = this.connection.queueIds(this.aborter.signal).catch(() => undefined);
      this.queueRead = { at: now, ids };
    }
    return this.queueRead.ids;
  }

  /**
   * The queue changed: a job still waiting in it may have been deleted, which sends no job event. Check the
   * waiting jobs checked longest ago, a few at a time and at most every 2 s. Constant work per `status`
   * event, however many jobs are followed.
   */
  private scheduleSweep(): void {
    if (this.sweepTimer || this.closed || this.waiting.size === 0) return;
    const wait = Math.max(SWEEP_SETTLE_MS, this.lastSweep + SWEEP_INTERVAL_MS - Date.now());
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      this.lastSweep = Date.now();
      const oldest: TrackedJob[] = [];
      for (const job of this.waiting) {
        if (oldest.length >= SWEEP_JOBS) break;
        oldest.push(job);
      }
      for (const job of oldest) {
        // To the back of the line: the next sweep takes the next ones.
        this.waiting.delete(job);
        this.waiting.add(job);
      }
      void this.checkMany(oldest);
    }, wait);
  }

  /**
   * Jobs silent for a long while with the socket up: their events may never come (another client's id).
   * One timer for all of them, so the checks of a quiet minute share one queue read.
   */
  private armQuietChecks(): void {
    if (this.quietTimer || this.closed) return;
    const interval = Math.max(50, this.options.quietCheckMs / 4);
    // Silent for at least quietCheckMs: the tick of its last event may have been nearly over.
    const ticksQuiet = Math.ceil(this.options.quietCheckMs / interval) + 1;
    this.quietTimer = setInterval(() => {
      if (this.jobs.size === 0) {
        clearInterval(this.quietTimer);
        this.quietTimer = undefined;
        return;
      }
      this.quietTick += 1;
      const quiet: TrackedJob[] = [];
      for (const job of this.jobs) {
        if (job.ending || this.quietTick - job.lastEventTick < ticksQuiet) continue;
        job.lastEventTick = this.quietTick;
        quiet.push(job);
      }
      void this.checkMany(quiet);
    }, interval);
  }

  private timeout(job: TrackedJob): void {
    if (job.ending) return;
    if (job.options.cancelOnTimeout) {
      this.connection
        .cancel([job.promptId], this.aborter.signal)
        .catch((error: unknown) =>
          this.log(
            'warn',
            `graph-gen: cancelling ${job.promptId} after its timeout failed: ${String(error)}`,
          ),
        );
    }
    void this.end(job, 'timeout', {});
  }

  /**
   * Ends a job with its result. Synchronous when the events told everything, which is the common end and
   * may come for 10,000 jobs at once: no promise per job. Only an error or outputs that REST must give make
   * it wait (then the returned promise settles when the job has ended; it never rejects).
   */
  private end(
    job: TrackedJob,
    status: JobEndStatus,
    details: { error?: ExecutionError; fromRest?: boolean; eventEpoch?: number; outputs?: JobOutputs },
  ): Promise<void> | undefined {
    if (job.ending) return undefined;
    job.ending = true;
    const result: JobResult = { prompt_id: job.promptId, status };
    if (status === 'failed') {
      if (!details.error && details.fromRest) return this.endAfterLookup(job, result);
      result.error = details.error ?? unknownFailure();
    }
    if (status === 'completed') {
      const complete =
        !details.fromRest &&
        !job.gap &&
        job.startEpoch !== undefined &&
        (details.eventEpoch === undefined || details.eventEpoch === job.startEpoch);
      if (!complete && !details.outputs) return this.endAfterLookup(job, result);
      setOutputs(result, complete ? job.outputs : (details.outputs ?? job.outputs));
    }
    this.finish(job, result);
    return undefined;
  }

  /** The end of a failed job whose error, or a completed job whose outputs, only REST can give. */
  private async endAfterLookup(job: TrackedJob, result: JobResult): Promise<void> {
    if (result.status === 'failed') {
      result.error =
        (await this.connection.lookup.executionError(job.promptId, this.aborter.signal)) ?? unknownFailure();
    } else {
      const fetched = await this.connection.lookup.outputs(job.promptId, this.aborter.signal, (message) =>
        this.log('debug', `graph-gen: ${message}`),
      );
      if (!fetched) result.outputs_incomplete = true;
      setOutputs(result, fetched ?? job.outputs);
    }
    this.finish(job, result);
  }

  private finish(job: TrackedJob, result: JobResult): void {
    if (!this.jobs.has(job)) return;
    this.release(job, true);
    try {
      job.options.onEnd?.(result);
    } catch (error) {
      this.log('warn', `graph-gen: handing on the result of ${job.promptId} failed: ${String(error)}`);
    }
    job.resolve(result);
    this.changed();
  }

  private release(job: TrackedJob, ended: boolean): void {
    job.ending = true;
    clearTimeout(job.timeoutTimer);
    clearTimeout(job.pollTimer);
    clearTimeout(job.recheckTimer);
    job.timeoutTimer = job.pollTimer = job.recheckTimer = undefined;
    this.waiting.delete(job);
    this.running.delete(job);
    if (this.latestRunning === job) this.latestRunning = undefined;
    this.firstChecks.delete(job);
    job.unsubscribe({ ended });
    this.jobs.delete(job);
    if (!ended) job.resolve(undefined);
  }

  private changed(): void {
    this.options.onChange?.();
  }

  private log(level: 'debug' | 'warn', message: string): void {
    this.options.log?.(level, this.connection.http.cleanForReport(message));
  }
}
