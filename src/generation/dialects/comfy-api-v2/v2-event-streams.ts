/**
 * Where a Comfy API v2 server's job events come from: one event stream per job (`GET /api/v2/jobs/{id}/events`,
 * Server-Sent Events), read by sse-reader.ts and told in today's words by v2-stream-events.ts, so job lives
 * (job-life.ts) act on them as on the socket's. It implements the book's JobEventSource.
 * A v2 job never depends on its stream: this source is never `isOpen` (state `idle`, epoch 1), so the book polls
 * every job whatever the streams do. A stream only brings progress and previews sooner, and an early "ask now"
 * (`askNow`: the book asks about that job alone, not a shared list read from before) when it sees the job
 * end, when it ends before the job did (the proxy may end one with `status
 * running`, or when the ComfyUI behind it goes away), or when the server no longer knows the job (404).
 * Streams are scarce: the proxy allows 8 for all its callers together (a 9th gets 429 `too_many_streams`), so a
 * stream is opened only for a job one of whose listeners wants progress (`listener.progress`, read on
 * subscribe), at most `maxStreams` at once; the others wait for a slot, oldest first. A 429 holds every new
 * stream back for its Retry-After (other callers hold the slots; meanwhile jobs are polled). A stream that failed
 * (503, a network failure) or ended early is tried again only after a wait that grows per failure, never in a
 * tight loop; a stream idle past `idleMs` (the proxy sends a keepalive each 15 s) is dropped as dead. A 401 or 403
 * is said once and ends all streaming of this source (the same token would be refused again).
 * Nothing is kept for later subscribers (the socket's kept events): a stream starts with the job's snapshot.
 * No secret reaches a log line (the client's secrets, removed from each). Past 400 lines: the slots, the waits and the
 * dispatch of one source, whose every rule says when a stream opens or ends (one stream's own request is
 * v2-job-stream.ts's, the translation v2-stream-events.ts's). No Node-RED inside.
 */
import { errorText } from '../../../boundary/outside';
import { SecretSearch } from '../../../http/errors';
import type { HttpClient } from '../../../http/client';
import { startTimer } from '../../../timers';
import type {
  ConnectionState,
  EveryJobListener,
  JobListener,
  LogLevel,
  SocketEvent,
  SocketUser,
} from '../../jobs/socket-manager';
import type { JobEventSource } from '../dialect';
import { DEFAULT_MAX_EVENT_BYTES, type SseEvent } from './sse-reader';
import { JobStream, type StreamEnd } from './v2-job-stream';
import {
  lostOutputEvent,
  readV2StreamEvent,
  translateV2Event,
  type TranslationState,
} from './v2-stream-events';

export interface V2StreamTimings {
  /** No byte (the answer's head or its body) for this long: the stream is dropped as dead. */
  idleMs: number;
  /** The wait after a 429 whose Retry-After cannot be read. */
  busyMs: number;
  /** The longest Retry-After honoured: a server's word is bounded. */
  busyMaxMs: number;
  /** A job's next stream after one that failed or ended early: about this, doubling per failure up to the max. */
  retryBaseMs: number;
  retryMaxMs: number;
  /** A stream open this long starts its job's waits anew. */
  stableMs: number;
}

export interface V2EventStreamsOptions {
  /** The v2 server's client: it sends the bearer token, and its secrets are kept out of every log line. */
  http: Pick<HttpClient, 'stream' | 'errorBody' | 'cleanForReport' | 'secretsForReports'>;
  /** "Check this job now" (the job book): the stream saw its end, ended early, or the job is unknown. */
  askNow(promptId: string): void;
  /** Streams open at once (default 8: the proxy's cap for all its callers together). */
  maxStreams?: number;
  timings?: Partial<V2StreamTimings>;
  /** The longest SSE line, and the most data of one event (sse-reader.ts; default 16 MiB). */
  maxEventBytes?: number;
  /** Receives every log line (already cleaned); otherwise the first user with `onLog` does. */
  log?: (level: LogLevel, message: string) => void;
}

export interface V2StreamStats {
  /** SSE events read (comments not counted). */
  framesReceived: number;
  /** Streams the server opened (200). */
  streamsOpened: number;
  /** 429 answers: the server's streams were all taken. */
  streamsRefused: number;
  /** Events that could not be read. */
  framesDropped: number;
}

/** The connection number every event carries: streams come and go, but no job hears a gap from it. */
const EPOCH = 1;
/** How long close waits for the aborted requests to be let go. */
const CLOSE_WAIT_MS = 1_000;

/** A job with listeners, and its stream when it has one. */
interface Follow {
  readonly promptId: string;
  /** Each listener with whether it wanted progress when it subscribed (so its leaving counts the same). */
  listeners: Array<{ listener: JobListener; progress: boolean }>;
  wanting: number;
  readonly translation: TranslationState;
  /** Holds one of the slots while set. */
  stream?: JobStream;
  /** Waiting before its next stream. */
  restTimer?: NodeJS.Timeout;
  /** Streams in a row that failed or ended early (the next wait grows with it). */
  failures: number;
  /** Its final status came: it never gets a stream again. */
  ended: boolean;
}

export class V2EventStreams implements JobEventSource {
  static defaultTimings: V2StreamTimings = {
    idleMs: 45_000,
    busyMs: 5_000,
    busyMaxMs: 60_000,
    retryBaseMs: 2_000,
    retryMaxMs: 30_000,
    stableMs: 60_000,
  };

  readonly stats: V2StreamStats = {
    framesReceived: 0,
    streamsOpened: 0,
    streamsRefused: 0,
    framesDropped: 0,
  };
  readonly isOpen = false;
  readonly epoch = EPOCH;

  private readonly timings: V2StreamTimings;
  private readonly maxStreams: number;
  private readonly maxEventBytes: number;
  private readonly secrets: string[];
  private readonly secretSearch: SecretSearch;
  private readonly follows = new Map<string, Follow>();
  /** Jobs that want a stream and wait for a slot, oldest first. */
  private waiting = new Set<Follow>();
  private streamsOpen = 0;
  /** Set while a 429's Retry-After holds every new stream back. */
  private busyTimer?: NodeJS.Timeout;
  private busyUntil = 0;
  /** Why the server refused streams (401/403): none is tried again. */
  private refusal?: string;
  private readonly users = new Set<SocketUser>();
  private readonly everyJob = new Set<EveryJobListener>();
  /** Each stream's request until it is let go, for close to wait on. */
  private readonly runs = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly options: V2EventStreamsOptions) {
    this.timings = { ...V2EventStreams.defaultTimings, ...options.timings };
    this.maxStreams = Math.max(1, options.maxStreams ?? 8);
    this.maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
    this.secrets = options.http.secretsForReports();
    this.secretSearch = new SecretSearch(this.secrets);
  }

  get state(): ConnectionState {
    return this.closed ? 'closed' : 'idle';
  }

  /** Streams open now (each holds one of the server's slots). */
  get openStreams(): number {
    return this.streamsOpen;
  }

  /** Nothing to wait for: a stream opened later starts with the job's snapshot, so no event is missed. */
  ready(_timeoutMs: number): Promise<boolean> {
    return Promise.resolve(!this.closed);
  }

  /** Adds a user, told once that the state is `idle` (it never changes while open). */
  register(user: SocketUser): () => void {
    this.users.add(user);
    this.safely(() => user.onConnectionState?.('idle', false));
    return () => void this.users.delete(user);
  }

  subscribe(promptId: string, listener: JobListener): void {
    if (this.closed) return;
    let follow = this.follows.get(promptId);
    if (!follow) {
      follow = {
        promptId,
        listeners: [],
        wanting: 0,
        translation: { started: false },
        failures: 0,
        ended: false,
      };
      this.follows.set(promptId, follow);
    }
    const progress = listener.progress === true;
    follow.listeners.push({ listener, progress });
    if (progress) follow.wanting += 1;
    this.want(follow);
  }

  unsubscribe(promptId: string, listener: JobListener, _options?: { ended?: boolean }): void {
    const follow = this.follows.get(promptId);
    const index = follow ? follow.listeners.findIndex((entry) => entry.listener === listener) : -1;
    if (!follow || index < 0) return;
    const [entry] = follow.listeners.splice(index, 1);
    if (entry.progress) follow.wanting -= 1;
    if (follow.listeners.length === 0) this.follows.delete(promptId);
    if (follow.wanting === 0) {
      this.stop(follow);
      this.pump();
    }
  }

  /** Every event that passes (of jobs with a stream open), whichever job; it opens no stream itself. */
  watchAll(listener: EveryJobListener): () => void {
    this.everyJob.add(listener);
    return () => void this.everyJob.delete(listener);
  }

  /** Nothing to open again: the book calls it only for a source that is open, which this never is. */
  reopen(): void {}

  /** Aborts every stream and clears every timer; resolves once the requests are let go (at most 1 s). */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.busyTimer);
    this.busyTimer = undefined;
    for (const follow of this.follows.values()) this.stop(follow);
    this.follows.clear();
    this.waiting.clear();
    this.everyJob.clear();
    this.users.clear();
    if (this.runs.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.runs]),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS))),
    ]);
    clearTimeout(timer);
  }

  /** Logs through the logger, or the first user that takes logs; always cleaned of secrets. */
  log(level: LogLevel, message: string): void {
    const clean = this.options.http.cleanForReport(message);
    if (this.options.log) {
      this.options.log(level, clean);
      return;
    }
    for (const user of this.users) {
      if (user.onLog) {
        this.safely(() => user.onLog?.(level, clean));
        return;
      }
    }
  }

  // --- slots ---

  /** Queues the job for a stream when it wants one and has none, nor a wait before its next. */
  private want(follow: Follow): void {
    if (this.closed || this.refusal !== undefined || follow.ended || follow.wanting === 0) return;
    if (follow.stream || follow.restTimer || this.waiting.has(follow)) return;
    this.waiting.add(follow);
    this.pump();
  }

  /** Opens streams for the oldest waiting jobs while slots are free and no 429 holds them back. */
  private pump(): void {
    while (
      !this.closed &&
      this.busyTimer === undefined &&
      this.streamsOpen < this.maxStreams &&
      this.waiting.size > 0
    ) {
      const [next] = this.waiting;
      this.waiting.delete(next);
      this.open(next);
    }
  }

  /** Ends a job's stream here (its request aborted, its slot freed) and any wait for its next. */
  private stop(follow: Follow): void {
    this.waiting.delete(follow);
    clearTimeout(follow.restTimer);
    follow.restTimer = undefined;
    const stream = follow.stream;
    if (!stream) return;
    follow.stream = undefined;
    this.streamsOpen -= 1;
    stream.stop();
  }

  private open(follow: Follow): void {
    const { idleMs, busyMs, busyMaxMs } = this.timings;
    const stream: JobStream = new JobStream({
      http: this.options.http,
      promptId: follow.promptId,
      idleMs,
      busyMs,
      busyMaxMs,
      maxEventBytes: this.maxEventBytes,
      onEvent: (event) => this.onSseEvent(follow, stream, event),
      onOpen: () => {
        this.stats.streamsOpened += 1;
      },
    });
    follow.stream = stream;
    this.streamsOpen += 1;
    const run = stream
      .read()
      .then((outcome) => this.settle(follow, stream, outcome))
      .catch((error: unknown) => this.log('warn', `graph-gen v2 events: ${errorText(error)}`))
      .finally(() => this.runs.delete(run));
    this.runs.add(run);
  }

  /** What became of a stream that ended, unless it was stopped here: the job's next stream, or none. */
  private settle(follow: Follow, stream: JobStream, outcome: StreamEnd): void {
    if (this.closed || follow.stream !== stream) return;
    follow.stream = undefined;
    this.streamsOpen -= 1;
    const job = `the event stream of job ${follow.promptId}`;
    if (stream.final) {
      // The job ended (and was asked about then): however its stream ends, it needs no other.
      follow.ended = true;
      this.pump();
      return;
    }
    switch (outcome.kind) {
      case 'ended':
        this.log('debug', `graph-gen v2 events: ${job} ended before the job did; asking for its status`);
        this.ask(follow);
        this.rest(follow, stream);
        break;
      case 'dropped':
        this.log(
          'debug',
          `graph-gen v2 events: ${job} was dropped (${outcome.reason}); asking for its status`,
        );
        this.ask(follow);
        this.rest(follow, stream);
        break;
      case 'unknown':
        this.log('debug', `graph-gen v2 events: the server does not know job ${follow.promptId} (404)`);
        this.ask(follow);
        this.rest(follow, stream);
        break;
      case 'busy':
        this.stats.streamsRefused += 1;
        this.log(
          'debug',
          `graph-gen v2 events: the server's event streams are all taken; the next in ${Math.ceil(outcome.afterMs / 1000)} s, the jobs are polled meanwhile`,
        );
        this.busy(outcome.afterMs);
        // It keeps its place: first when the wait is over.
        if (follow.wanting > 0 && this.follows.get(follow.promptId) === follow)
          this.waiting = new Set([follow, ...this.waiting]);
        break;
      case 'refused':
        this.refuse(outcome.sentence);
        break;
      default:
        this.log(
          'debug',
          `graph-gen v2 events: no stream for job ${follow.promptId} (${endReason(outcome)})`,
        );
        this.rest(follow, stream);
    }
    this.pump();
  }

  /** The wait before the job's next stream: about retryBaseMs, doubling per failure in a row. */
  private rest(follow: Follow, stream: JobStream): void {
    if (this.closed || follow.ended || follow.wanting === 0 || this.follows.get(follow.promptId) !== follow)
      return;
    const { retryBaseMs, retryMaxMs, stableMs } = this.timings;
    if (stream.openedAt > 0 && Date.now() - stream.openedAt >= stableMs) follow.failures = 0;
    follow.failures += 1;
    const ceiling = Math.min(retryMaxMs, retryBaseMs * 2 ** Math.min(follow.failures - 1, 30));
    // Half fixed, half random: never sooner than half the ceiling, and jobs that failed together part.
    const wait = Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    follow.restTimer = startTimer(() => {
      follow.restTimer = undefined;
      this.want(follow);
    }, wait);
  }

  /** Holds every new stream back for `ms` (another caller's streams take the server's slots). */
  private busy(ms: number): void {
    const until = Date.now() + ms;
    if (this.busyTimer && this.busyUntil >= until) return;
    clearTimeout(this.busyTimer);
    this.busyUntil = until;
    this.busyTimer = startTimer(() => {
      this.busyTimer = undefined;
      this.pump();
    }, ms);
  }

  /** The server refused the token: said once, and no stream is tried again (jobs are polled). */
  private refuse(sentence: string): void {
    if (this.refusal !== undefined) return;
    this.refusal = sentence;
    this.log(
      'warn',
      `graph-gen v2 events: ${sentence}; progress and previews will not come live, jobs are followed by polling`,
    );
    this.waiting.clear();
    for (const follow of this.follows.values()) this.stop(follow);
  }

  // --- a stream's events ---

  /** One SSE event of a job's stream: read, translated, handed to its listeners; its final status asks now. */
  private onSseEvent(follow: Follow, stream: JobStream, sse: SseEvent): void {
    if (follow.stream !== stream) return;
    this.stats.framesReceived += 1;
    const read = readV2StreamEvent(sse.type, sse.data, this.secretSearch, this.secrets);
    if (!read.ok) {
      this.stats.framesDropped += 1;
      this.log(
        'debug',
        `graph-gen v2 events: dropped a ${sse.type.slice(0, 100)} event of job ${follow.promptId}: ${read.reason}`,
      );
      // It may have named one of the job's outputs: the job's end then never takes its events' as whole.
      if (sse.type === 'output') this.dispatch(follow, lostOutputEvent(follow.promptId, EPOCH, sse.bytes));
      return;
    }
    const { events, final } = translateV2Event(
      read.value,
      follow.promptId,
      follow.translation,
      EPOCH,
      sse.bytes,
    );
    for (const event of events) {
      if (follow.stream !== stream) return;
      this.dispatch(follow, event);
    }
    if (final && !stream.final) {
      stream.final = true;
      this.ask(follow);
    }
  }

  private dispatch(follow: Follow, event: SocketEvent): void {
    if (this.everyJob.size > 0)
      for (const listener of [...this.everyJob]) this.safely(() => listener(follow.promptId, event));
    const { listeners } = follow;
    if (listeners.length === 1) this.safely(() => listeners[0].listener.onEvent(event));
    else for (const { listener } of [...listeners]) this.safely(() => listener.onEvent(event));
  }

  private ask(follow: Follow): void {
    this.safely(() => this.options.askNow(follow.promptId));
  }

  private safely(call: () => void): void {
    try {
      call();
    } catch (error) {
      this.log('warn', `graph-gen v2 events: a listener failed: ${errorText(error)}`);
    }
  }
}

function endReason(end: StreamEnd): string {
  return end.kind === 'failed' || end.kind === 'dropped' ? end.reason : end.kind;
}
