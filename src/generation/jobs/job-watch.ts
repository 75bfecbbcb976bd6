/**
 * What the job book (job-book.ts) keeps of each job it awaits, its Watch (the life, its awaits, what the quiet and
 * silence checks count, and its Asking: the timers and requests of its checks, made at the first), what it tells
 * each await (JobAwait), and when it asks the server about jobs (JobTimings): the book's records, in a module of
 * their own so what shares them with the book (its timers) need not import the book. No Node-RED inside.
 */
import type { JobLife, JobProgress, JobResult, LifeState } from './job-life';
import type { OneOrMany } from './one-or-many';

export interface JobTimings {
  /** While the socket is down, each job is checked after this, growing by half each time up to `pollMaxMs`. */
  pollInitialMs: number;
  pollMaxMs: number;
  /** A job that has had no event this long while the socket is up gets its status checked. */
  quietCheckMs: number;
  /** The check after a job is awaited waits this long (one round for the jobs awaited in the same moment). */
  firstCheckMs: number;
  /** A job no route knows (or whose checks are refused) ends once two answers this far apart agree. */
  lostConfirmMs: number;
  /** A job the service has never known is not counted lost before this long after it was awaited. */
  unknownGraceMs: number;
  /** A queue read answers for every check made this long after it. */
  queueFreshMs: number;
  /** The longest wait before asking again after an answer that could not be read. */
  unreadableMaxMs: number;
  /** A silent socket gets a running job checked after 4x the job's widest gap between events, in these bounds. */
  silentMinMs: number;
  silentMaxMs: number;
  /** Every job is checked when the whole socket has been silent this long while open (and again as often). */
  socketSilentMs: number;
}

/** One await of a job (job-tracker.ts makes them): what it is told. */
export interface JobAwait {
  readonly wantsProgress: boolean;
  onChange(life: JobLife, previous: LifeState): void;
  onProgress(progress: JobProgress): void;
  onEnd(result: JobResult): void;
}

/**
 * What the book keeps of a job: its life (subscribed to the socket itself), its awaits, what the quiet check
 * counts. What only a job the book asks about needs is its `asking`, made at the first check: most jobs end on
 * their events alone, and 10,000 waiting jobs hold none.
 */
export interface Watch {
  readonly life: JobLife;
  /** Nearly always one: the await itself, no array (one-or-many.ts). */
  awaits: OneOrMany<JobAwait>;
  /** For the quiet check: the life's event count at the last tick, and ticks since it changed. */
  quietEvents: number;
  quietTicks: number;
  /** No event of the job has come yet, and it is not over (the book counts these: a sweep checks them). */
  unheard: boolean;
  /** What the silence watch counts: made when it first finds the job running, so a waiting job has none. */
  silence?: SilenceCount;
  asking?: Asking;
}

/** The book's checks of one job: their timers, their requests, how often while the socket is down. */
export interface Asking {
  checking: boolean;
  /** A check under way may predate something that changes its answer: check again after it. */
  recheck: boolean;
  /** The next check asks about this job alone: the events source saw it move on since the shared read. */
  askAlone: boolean;
  checkTimer?: NodeJS.Timeout;
  /** When `checkTimer` fires; read only while it is set (0 otherwise: a small integer, no boxed number). */
  checkAt: number;
  readTimer?: NodeJS.Timeout;
  /** While the socket is down, the wait before the next check (growing to `pollMaxMs`). */
  pollDelay: number;
  /** Aborts the job's own requests (its status checks, its result reads) when its last await leaves. */
  requests?: AbortController;
}

/** What the silence watch (check-timers.ts) counts of a running job. */
export interface SilenceCount {
  /** Events seen, when the last came (the await, before the first), the widest gap, the last silence check. */
  seenEvents: number;
  lastEventAt: number;
  widestGap: number;
  checkedAt: number;
  /** Doubles each time a silence check finds the job still running (a long node), back to 1 on an event. */
  backoff: number;
}

/** What the book keeps of its checks of a job, made at the first (see `Watch`). */
export function askingOf(watch: Watch, pollInitialMs: number): Asking {
  return (watch.asking ??= {
    checking: false,
    recheck: false,
    askAlone: false,
    checkTimer: undefined,
    checkAt: 0,
    readTimer: undefined,
    pollDelay: pollInitialMs,
    requests: undefined,
  });
}

/** The job's own requests' controller, made at its first request (most jobs end on their events alone). */
export function requestsOf(asking: Asking): AbortController {
  return (asking.requests ??= new AbortController());
}
