/**
 * A job's life, from the moment it is awaited to its end: its states and every transition between them. This
 * is the one place that decides how a job ended; the socket only carries its events, lookups only answer, and
 * the book (job-book.ts) only decides when to ask and does the asking. One life per prompt_id and config node,
 * shared by every await of the job. Past 400 lines: its two tables below, and every transition beside them.
 * No Node-RED inside.
 *
 * States
 * | state     | what is known                                                   | awaits get            |
 * |-----------|-----------------------------------------------------------------|-----------------------|
 * | submitted | awaited; no event or answer has placed it yet                   |                       |
 * | pending   | it waits in the server's queue                                  |                       |
 * | running   | it runs                                                         |                       |
 * | ending    | it ended; its outputs or its error are being read over REST     |                       |
 * | completed | ended well                                                      | output 1              |
 * | failed    | ended with the server's error                                   | output 2, `failed`    |
 * | cancelled | cancelled or interrupted                                        | output 2, `cancelled` |
 * | lost      | no route of the server knows it any more (deleted, a restart)   | output 2, `JobLost`   |
 * | refused   | the server refused the key on every status check                | output 2, `unauthorized` |
 * A timeout is not the job's: it ends one await (job-tracker.ts), and the life goes on for the others.
 *
 * Transitions (in submitted, pending or running; an ended or ending life ignores them; "check" = the book asks
 * the server; "confirmed" = the same answer twice, `lostConfirmMs` apart)
 * | input                                          | then                                                       |
 * |------------------------------------------------|------------------------------------------------------------|
 * | execution_start, executing <node>, progress     | running (its node and step)                                |
 * | executed                                       | its output merged                                          |
 * | executed past 64 MiB of them                   | dropped as lost: the outputs from REST                     |
 * | `eventsLost` (an event dropped or unreadable)  | never ends whole from its events: the outputs from REST    |
 * | executing null                                 | the run is over: check now                                 |
 * | execution_success                              | completed; ending when events may have been missed         |
 * | execution_error                                | failed with the event's error                              |
 * | execution_interrupted                          | cancelled                                                  |
 * | answer or queue read: pending, running         | that state                                                 |
 * | queue read: n jobs ahead of it (waiting)       | its place, and a `queue` progress msg when it changed      |
 * | answer: completed, failed, cancelled           | that end; ending when the outputs or error are not in it   |
 * | answer: unknown                                | cancelled after a cancel the server confirmed (removed,    |
 * |                                                | interrupted); else lost once confirmed, and not before     |
 * |                                                | `unknownGraceMs` for a job never known                     |
 * | answer: unreadable (failed, 429, no queue)     | nothing concluded; check again later (429: Retry-After)    |
 * | answer: unreadable (401/403)                   | refused once confirmed                                     |
 * | answer: unreadable (no status route at all)    | after a run that is over: completed from its events        |
 * | answer: unreadable (a page without it)         | nothing; the book's next poll reads a new page             |
 * | cancel: removed from the queue                 | cancelled                                                  |
 * | cancel: interrupted, ended, not confirmed      | check soon (the server says how it ended)                  |
 * | reconnect                                      | events may be missed: the outputs come from REST; check    |
 * | socket silent while it runs, quiet for long    | check (the book reopens a socket that missed a change)     |
 * | in ending: result read                         | the end, with its outputs or error                         |
 * | in ending: none, or unreadable 3 times         | the end, `outputs_incomplete` / an unknown error           |
 * | close                                          | no end: every await resolves with nothing                  |
 */
import { textOf } from '../../boundary/outside';
import type { ImageType, PreviewMetadata } from './frames';
import { UNREADABLE_EVENT } from './frame-reader';
import {
  mergeEntryOutput,
  filesOf,
  outputsOfEntries,
  type FileReference,
  type JobOutputs,
  type OutputEntries,
} from './job-outputs';
import { executionError, type EndedAnswer, type ExecutionError, type LookupAnswer } from './job-lookup';
import { isTerminal } from './status-words';
import type { ReplayedEvent } from './kept-events';
import type { SocketEvent } from './socket-manager';

export type LifeState =
  'submitted' | 'pending' | 'running' | 'ending' | 'completed' | 'failed' | 'cancelled' | 'lost' | 'refused';

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

/** What a life needs of the book that holds it: asking the server, and telling the awaits. */
export interface LifeHost {
  readonly timings: { lostConfirmMs: number; unknownGraceMs: number; unreadableMaxMs: number };
  /** Ask the server about this job in `delayMs` (an earlier request stands). */
  check(life: JobLife, delayMs: number): void;
  /** Read the ended job's outputs and error over REST in `delayMs`; the answer comes to `onEndedRead`. */
  readEnded(life: JobLife, delayMs: number): void;
  /** The state, node or step changed; or the first event came. */
  changed(life: JobLife, previous: LifeState): void;
  /** A progress-only event or one that progress output shows (only called while an await wants progress). */
  progress(life: JobLife, progress: JobProgress): void;
  /** The life ended with this result. */
  finished(life: JobLife, result: JobResult): void;
  /**
   * Whether a cancel of this config node was confirmed by the server (then a job the server forgot was
   * cancelled, not lost).
   */
  cancelledHere(promptId: string): boolean;
}

/** By the event's type word, which the server wrote: a Map, so `constructor` or `__proto__` ends nothing. */
const END_EVENTS = new Map<string, 'completed' | 'failed' | 'cancelled'>([
  ['execution_success', 'completed'],
  ['execution_error', 'failed'],
  ['execution_interrupted', 'cancelled'],
]);

/** Attempts at reading an ended job's outputs or error before it ends without them. */
const ENDED_READS = 3;
/** After `executing` null, the server may not have filed the job yet: asked again this soon. */
const RUN_OVER_RECHECK_MS = 500;
/**
 * The most of a job's `executed` events (their frames' bytes) merged into its outputs, as much as a REST answer
 * that lists them may be (job-lookup.ts): each frame is bounded, their number is not, and a server that sends
 * outputs without end would grow one job's without end. Past it an `executed` is lost (see `eventsLost`).
 */
export const MAX_OUTPUT_BYTES = 64 * 1024 * 1024;

/** The error of a job that no route of the service knows any more. */
export function jobLostError(promptId: string): ExecutionError {
  return {
    exception_type: 'JobLost',
    exception_message: `the generation service no longer knows job ${promptId}: it was deleted from its queue elsewhere, or the server restarted; submit the workflow again`,
    traceback: [],
  };
}

function refusedError(promptId: string, refusal: string): ExecutionError {
  return {
    exception_type: 'unauthorized',
    // `refusal` is the client's sentence for the 401/403, which names what was sent (http/auth.ts).
    exception_message: `every status check of job ${promptId} was refused, so how it ends cannot be known (the job may still run on the server): ${refusal}`,
    traceback: [],
  };
}

/** The error of a job the service calls failed without saying how. */
export function unknownFailure(): ExecutionError {
  return {
    exception_type: 'unknown',
    exception_message: 'the service reports the job as failed',
    traceback: [],
  };
}

/* Bits of a life's `flags`: one small integer, where five booleans took five slots of every life. */
/** The server has known this job: an event came, or an answer placed it. */
const KNOWN = 1;
/** Events may have been missed (a reconnect, an event from another connection than the start). */
const GAP = 2;
/** An event of it was dropped (a bound on kept events, a frame that could not be read): see `eventsLost`. */
const LOST_EVENTS = 4;
/** `executing` null came: the run is over, and only REST can say how it ended. */
const RUN_OVER = 8;
/** An await of this job wants progress messages (the book keeps it current). */
const WANTS_PROGRESS = 16;

/**
 * `awaitedAt` is kept as milliseconds since this module loaded: a small integer, stored in the life itself,
 * where `Date.now()` (past 2^31) is a boxed number of 16 B more for every job.
 */
const CLOCK_BASE = Date.now();

/** What a life knows of its run: made at its first event that tells one, so a waiting job holds none. */
interface RunDetails {
  node?: string;
  step?: { value: number; max: number };
  /**
   * The outputs of its `executed` events, merged per node (job-outputs.ts says why entries, not JobOutputs); made
   * at the first and let go at the end (see `finish`).
   */
  outputs?: OutputEntries;
  /** The bytes of its `executed` events so far (see MAX_OUTPUT_BYTES). */
  outputBytes: number;
  /** The connection (socket epoch) that delivered execution_start. */
  startEpoch?: number;
}

/** What answers that concluded nothing yet have said: made at the first such answer. */
interface Doubts {
  /** When an answer first said no route knows the job; when one first refused the key. */
  unknownSince?: number;
  refusedSince?: number;
  /** Answers that could not be read since the last one that could. */
  unreadableStreak: number;
}

/**
 * A life is most of what each of 10,000 waiting jobs costs: what only a running job needs (`run`) and what only
 * doubtful answers need (`doubts`) are records made when needed, and its flags are bits of one integer.
 */
export class JobLife {
  state: LifeState = 'submitted';
  /**
   * The book's record of this life (job-watch.ts) while the book holds it: found per event without a lookup,
   * and gone once the life is released (a later life of the same prompt_id has its own).
   */
  watch?: object;
  /** KNOWN, GAP, LOST_EVENTS, RUN_OVER, WANTS_PROGRESS (above). */
  private flags = 0;
  private readonly awaitedMs = smallInteger(Date.now() - CLOCK_BASE);
  private run?: RunDetails;
  private doubts?: Doubts;
  /** The connection (socket epoch) that delivered the first event. */
  firstEventEpoch?: number;
  /** Events so far (the book reads it to see which jobs go silent). */
  events = 0;
  /** Orders changes across lives (set by the book): the latest change has the highest. */
  lastChange = 0;
  /** While it waits: how many jobs the server runs before it (from the latest queue read). */
  ahead?: number;
  private ending?: { result: JobResult; reads: number };

  constructor(
    readonly promptId: string,
    private readonly host: LifeHost,
    wantsProgress = false,
  ) {
    if (wantsProgress) this.flags = WANTS_PROGRESS;
  }

  /** Whether an await of this job wants progress messages (the book keeps it current). */
  get wantsProgress(): boolean {
    return (this.flags & WANTS_PROGRESS) !== 0;
  }

  set wantsProgress(wants: boolean) {
    this.flags = wants ? this.flags | WANTS_PROGRESS : this.flags & ~WANTS_PROGRESS;
  }

  /** When it was awaited (as Date.now()). */
  get awaitedAt(): number {
    return CLOCK_BASE + this.awaitedMs;
  }

  /** The node it runs now, and its step there (what a node's status shows). */
  get node(): string | undefined {
    return this.run?.node;
  }

  get step(): { value: number; max: number } | undefined {
    return this.run?.step;
  }

  /**
   * As a listener of the job's events: it needs progress-only events (previews, progress). v2's event source
   * opens a stream only for a job that does; today's socket reads such frames while any await wants them.
   */
  get progress(): boolean {
    return this.wantsProgress;
  }

  /** Ended, or ending (its outputs or error are being read). */
  get isOver(): boolean {
    return this.state !== 'submitted' && this.state !== 'pending' && this.state !== 'running';
  }

  /**
   * An event of this job was dropped before it reached the life (the bound on kept events, a frame that could
   * not be read): its outputs are never taken as whole from its events. A success then reads them over REST, and
   * ends `outputs_incomplete` when the server does not give them. Sticky: a later `execution_start` does not
   * clear it, as it clears a gap.
   */
  eventsLost(): void {
    this.flags |= LOST_EVENTS;
  }

  /** A socket event of this job. Runs for every frame: constant work, no clock reads. */
  onEvent(event: ReplayedEvent): void {
    if (this.isOver) return;
    this.flags |= event.eventsLost ? KNOWN | LOST_EVENTS : KNOWN;
    this.events += 1;
    if (this.doubts) this.doubts.unknownSince = undefined;
    const first = this.firstEventEpoch === undefined;
    if (first) this.firstEventEpoch = event.epoch;
    const { type, data } = event;
    const run = this.run;
    if (run?.startEpoch !== undefined && event.epoch !== run.startEpoch) this.flags |= GAP;
    const end = END_EVENTS.get(type);
    if (end) {
      if (type === 'execution_error') this.end('failed', { error: executionError(data) });
      else this.end(end, { eventEpoch: event.epoch });
      return;
    }
    const previous = this.state;
    switch (type) {
      case 'execution_start':
        this.runDetails().startEpoch = event.epoch;
        this.flags &= ~GAP;
        this.state = 'running';
        this.ahead = undefined;
        break;
      case 'executing': {
        const node = data.node;
        if (node === null || node === undefined || node === '') {
          this.emit(type, data);
          this.flags |= RUN_OVER;
          this.host.check(this, 0);
          return;
        }
        const nodeText = textOf(node, 200);
        const details = this.runDetails();
        if (nodeText !== undefined) setNode(details, nodeText);
        details.step = undefined;
        this.state = 'running';
        break;
      }
      case 'progress': {
        // Never Number() of an object: its own valueOf or toString may be anything (or throw).
        const value = Number(textOf(data.value));
        const max = Number(textOf(data.max));
        if (Number.isFinite(value) && Number.isFinite(max)) {
          // Changed in place: a new object per event, held by a long-lived job, would outlive the young
          // generation and make every scavenge copy one per job in flight.
          const details = this.runDetails();
          if (details.step) {
            details.step.value = value;
            details.step.max = max;
          } else details.step = { value, max };
        }
        if (typeof data.node === 'string') setNode(this.runDetails(), data.node);
        this.state = 'running';
        break;
      }
      case 'executed': {
        const node = textOf(data.node ?? data.display_node, 200);
        if (node === undefined) break;
        const details = this.runDetails();
        details.outputBytes += event.bytes ?? 0;
        if (details.outputBytes > MAX_OUTPUT_BYTES) this.eventsLost();
        else details.outputs = mergeEntryOutput(details.outputs, node, data.output);
        break;
      }
      case UNREADABLE_EVENT:
        // It may have been an `executed`: what the job made is asked of the server at its end.
        this.eventsLost();
        if (first) this.host.changed(this, previous);
        return;
      case 'preview':
        if (this.wantsProgress) this.preview(event);
        if (first) this.host.changed(this, previous);
        return;
      case 'text':
        if (this.wantsProgress && event.frame?.type === 3) {
          this.host.progress(this, {
            topic: 'text',
            payload: event.frame.text,
            node: event.frame.nodeId,
            prompt_id: this.promptId,
          });
        }
        if (first) this.host.changed(this, previous);
        return;
      default:
        break;
    }
    if (first || type === 'execution_start' || type === 'executing' || type === 'progress')
      this.host.changed(this, previous);
    this.emit(type, data);
  }

  /** A status answer for this job. */
  onAnswer(answer: LookupAnswer, now = Date.now()): void {
    if (this.isOver) return;
    if (answer.kind === 'phase') {
      this.flags |= KNOWN;
      this.doubts = undefined;
      if (isTerminal(answer.phase)) {
        this.end(answer.phase, { error: answer.error, fromRest: true, outputs: answer.outputs });
        return;
      }
      // Just after `executing` null the server may not have filed the job as ended yet.
      if (this.flags & RUN_OVER) this.host.check(this, RUN_OVER_RECHECK_MS);
      this.onQueued(answer.phase === 'running' ? 'running' : 'pending');
      return;
    }
    if (answer.kind === 'unknown') {
      const doubts = this.doubtsSoFar();
      doubts.unreadableStreak = 0;
      doubts.refusedSince = undefined;
      if (this.host.cancelledHere(this.promptId)) {
        this.end('cancelled', {});
        return;
      }
      const { unknownGraceMs, lostConfirmMs } = this.host.timings;
      // A service may list a job a moment after its submit answered: never known, not lost yet.
      if (!(this.flags & KNOWN) && now - this.awaitedAt < unknownGraceMs) {
        this.host.check(this, this.awaitedAt + unknownGraceMs - now);
        return;
      }
      doubts.unknownSince ??= now;
      if (now - doubts.unknownSince >= lostConfirmMs) this.finishFailed(jobLostError(this.promptId), 'lost');
      else this.host.check(this, doubts.unknownSince + lostConfirmMs - now);
      return;
    }
    // Could not be read: nothing is concluded from it.
    switch (answer.reason) {
      case 'refused': {
        const doubts = this.doubtsSoFar();
        doubts.refusedSince ??= now;
        const { lostConfirmMs } = this.host.timings;
        if (now - doubts.refusedSince >= lostConfirmMs)
          this.finishFailed(refusedError(this.promptId, answer.message), 'refused');
        else this.host.check(this, doubts.refusedSince + lostConfirmMs - now);
        return;
      }
      case 'no_route':
        // The server has no route that tells: its events are all there is.
        if (this.flags & RUN_OVER) this.end('completed', {});
        return;
      case 'unlisted':
        // Not on the page of active jobs read for all: the book's next poll reads a new page.
        return;
      default: {
        const streak = ++this.doubtsSoFar().unreadableStreak;
        const backoff = Math.min(this.host.timings.unreadableMaxMs, 1000 * 2 ** (streak - 1));
        this.host.check(this, Math.max(answer.retryAfterMs ?? 0, backoff));
      }
    }
  }

  /** A queue read lists the job: it waits, or runs. */
  onQueued(phase: 'pending' | 'running'): void {
    if (this.isOver) return;
    this.flags |= KNOWN;
    if (this.doubts) this.doubts.unknownSince = this.doubts.refusedSince = undefined;
    if (this.state === phase) return;
    const previous = this.state;
    this.state = phase;
    if (phase === 'running') this.ahead = undefined;
    this.host.changed(this, previous);
  }

  /**
   * A queue read placed the waiting job: `ahead` jobs run before it; `etaS` estimates its wait in seconds (from
   * the server's recent run times), when it can be told.
   */
  onPlaced(ahead: number, etaS?: number): void {
    if (this.isOver || this.state === 'running' || this.ahead === ahead) return;
    const previous = this.state;
    this.ahead = ahead;
    this.flags |= KNOWN;
    this.state = 'pending';
    this.host.changed(this, previous);
    if (this.wantsProgress) {
      const payload = etaS === undefined ? { ahead } : { ahead, eta_s: etaS };
      this.host.progress(this, { topic: 'queue', payload, prompt_id: this.promptId });
    }
  }

  /** This config node cancelled the job. Taken out of the queue: it will never run. Otherwise the server says. */
  onCancel(kind: 'removed' | 'interrupted' | 'ended' | 'unknown' | 'unconfirmed'): void {
    if (this.isOver) return;
    if (kind === 'removed') this.end('cancelled', {});
    else this.host.check(this, 300);
  }

  /** The socket reconnected: events may have been missed meanwhile. */
  onReconnect(): void {
    if (!this.isOver) this.flags |= GAP;
  }

  /** The read of an ended job's outputs or error (state ending). */
  onEndedRead(answer: EndedAnswer): void {
    const ending = this.ending;
    if (!ending) return;
    const { result } = ending;
    if (answer.kind === 'unreadable' && ++ending.reads < ENDED_READS) {
      this.host.readEnded(this, Math.max(answer.retryAfterMs ?? 0, 1000 * 2 ** (ending.reads - 1)));
      return;
    }
    const found = answer.kind === 'found' ? answer : undefined;
    if (result.status === 'failed') result.error = found?.error ?? unknownFailure();
    else {
      if (!found?.outputs) result.outputs_incomplete = true;
      setOutputs(result, found?.outputs ?? outputsOfEntries(this.run?.outputs));
    }
    this.ending = undefined;
    this.finish(result, result.status === 'failed' ? 'failed' : 'completed');
  }

  /**
   * The end of the job. Synchronous when the events told everything, which is the common end and may come for
   * 10,000 jobs at once; only an error or outputs that REST must give make it go through `ending`.
   */
  private end(
    status: 'completed' | 'failed' | 'cancelled',
    details: { error?: ExecutionError; fromRest?: boolean; eventEpoch?: number; outputs?: JobOutputs },
  ): void {
    const result: JobResult = { prompt_id: this.promptId, status };
    if (status === 'failed') {
      if (!details.error && details.fromRest) return this.readResult(result);
      result.error = details.error ?? unknownFailure();
    }
    if (status === 'completed') {
      const startEpoch = this.run?.startEpoch;
      const whole =
        !details.fromRest &&
        !(this.flags & (GAP | LOST_EVENTS)) &&
        startEpoch !== undefined &&
        (details.eventEpoch === undefined || details.eventEpoch === startEpoch);
      if (!whole && !details.outputs) return this.readResult(result);
      setOutputs(result, (!whole && details.outputs) || outputsOfEntries(this.run?.outputs));
    }
    this.finish(result, status);
  }

  private readResult(result: JobResult): void {
    const previous = this.state;
    this.state = 'ending';
    this.ending = { result, reads: 0 };
    this.host.changed(this, previous);
    this.host.readEnded(this, 0);
  }

  /**
   * The end. The life keeps neither the result nor its run details (the outputs): it was made long before and
   * lives in the old generation until a full collection, and what it points to would outlive every young
   * collection with it (10,000 jobs end at once in the fan-out bench; see the README's Fan-out).
   */
  private finish(result: JobResult, state: LifeState): void {
    this.state = state;
    this.run = this.doubts = undefined;
    this.host.finished(this, result);
  }

  /** Ends a job whose end no server said: it is no longer known, or its checks are refused. */
  private finishFailed(error: ExecutionError, state: 'lost' | 'refused'): void {
    this.finish({ prompt_id: this.promptId, status: 'failed', error }, state);
  }

  private runDetails(): RunDetails {
    return (this.run ??= {
      node: undefined,
      step: undefined,
      outputs: undefined,
      outputBytes: 0,
      startEpoch: undefined,
    });
  }

  private doubtsSoFar(): Doubts {
    return (this.doubts ??= { unknownSince: undefined, refusedSince: undefined, unreadableStreak: 0 });
  }

  private emit(topic: string, payload: Record<string, unknown>): void {
    if (this.wantsProgress) this.host.progress(this, { topic, payload, prompt_id: this.promptId });
  }

  private preview(event: SocketEvent): void {
    const frame = event.frame;
    if (!frame || frame.type === 3) return;
    const progress: JobProgress = {
      topic: 'preview',
      payload: frame.image,
      image_type: frame.imageType,
      prompt_id: this.promptId,
    };
    if (frame.type === 4) progress.metadata = frame.metadata;
    this.host.progress(this, progress);
  }
}

/**
 * A whole number as V8's small integer where it is one (below 2^31: 24 days after the module loaded), which a
 * field stores in place; a difference of two `Date.now()`s is otherwise a boxed double even when whole.
 */
function smallInteger(value: number): number {
  return value >= 0 && value < 2 ** 31 ? value | 0 : value;
}

/** The same node's string is kept: the old one is already old (no young object per event). */
function setNode(run: RunDetails, node: string): void {
  if (run.node !== node) run.node = node;
}

function setOutputs(result: JobResult, outputs: JobOutputs): void {
  result.outputs = outputs;
  result.files = filesOf(outputs);
}
