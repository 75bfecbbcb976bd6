/**
 * What the jobs (the job book, the job-events watcher) need of a server, whichever its dialect: a lookup of jobs
 * over REST (JobLookupPort) and a source of their events (JobEventSource). Each dialect implements both
 * (dialects/dialect.ts gives them with the rest of a dialect); here, beside the jobs, so the jobs never import
 * the dialects that import them. No Node-RED inside.
 */
import type { EndedAnswer, LookupAnswer, QueueRead } from './job-lookup';
import type { ConnectionState, EveryJobListener, JobListener, LogLevel, SocketUser } from './socket-events';

/** What the job book asks the server about jobs (jobs/job-book.ts decides when). */
export interface JobLookupPort {
  /**
   * One job's status. `readQueue` is the book's shared read of the jobs waiting and running: a dialect whose
   * list read also carries ended jobs answers from it without a request of its own.
   */
  status(promptId: string, signal?: AbortSignal, readQueue?: () => Promise<QueueRead>): Promise<LookupAnswer>;
  /**
   * The jobs waiting and running, in one read for all; unreadable is never an empty queue. `jobs`: how many
   * awaited jobs the read answers for (a dialect that reads a page of jobs sizes it by that).
   */
  queue(signal?: AbortSignal, jobs?: number): Promise<QueueRead>;
  /** An ended job's outputs and error. */
  ended(promptId: string, signal?: AbortSignal): Promise<EndedAnswer>;
  /** A recent job's run time, for wait estimates; undefined where the server does not say. */
  runTimeMs(signal?: AbortSignal): Promise<number | undefined>;
}

/**
 * Where the events of jobs come from: today's shared WebSocket (jobs/socket-manager.ts), or v2's event
 * streams. Events reach a job's listener as `SocketEvent`s of today's API (execution_start, progress, executed,
 * executing null, ...), each dialect translating its own. A source that is not `isOpen` leaves every job to
 * the book's polling; its events only come sooner.
 */
export interface JobEventSource {
  readonly state: ConnectionState;
  readonly isOpen: boolean;
  /** Which connection (counted from 1) is open: a change between two events of a job means a gap. */
  readonly epoch: number;
  readonly stats: { readonly framesReceived: number };
  /**
   * Down because its last try reached nothing at the address (refused, no route, no such host): no server runs
   * there now. A source that cannot tell leaves it out.
   */
  readonly unreachable?: boolean;
  /** Waits (bounded) until events flow, so none of a job submitted next is missed; false if they do not. */
  ready(timeoutMs: number): Promise<boolean>;
  register(user: SocketUser): () => void;
  subscribe(promptId: string, listener: JobListener): void;
  unsubscribe(promptId: string, listener: JobListener, options?: { ended?: boolean }): void;
  /** Every job's events, whichever job (the job-events node's tap); a source without one never calls it. */
  watchAll(listener: EveryJobListener): () => void;
  /**
   * Whether every event of the job since connection `epoch` is here (kept or heard live); a source that cannot
   * tell leaves it out, and the book asks the server.
   */
  heardAllSince?(promptId: string, epoch: number): boolean;
  /** Opens the connection again (the book saw a job move on while it stayed silent). */
  reopen(): void;
  log(level: LogLevel, message: string): void;
  close(): Promise<void>;
}
