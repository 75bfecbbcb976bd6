/**
 * Every job of a config node's server, whoever submitted it (the server's own page, other programs, this
 * flow), told once per step: `queued`, `started`, and its end (`completed`, `failed`, `cancelled`, with the
 * result await-job gives). What the job-events node does: this file decides when to look at the server and
 * follows the cloud's socket; the steps are told by job-event-teller.ts. No Node-RED inside.
 *
 * How a server is watched (measured on ComfyUI v0.8.0 and v0.33.0):
 * - Self-hosted: a job's events go only to the socket of the client that submitted it, but the queue's
 *   `status` event goes to every socket, on every change (a job queued, started, ended, taken out). A `status`,
 *   and a socket that opens, make a look at the server's jobs (server-job-reader.ts) `settleMs` later, so that
 *   a burst of changes costs one look. Nothing is read while the queue is empty and nothing changes. While jobs
 *   wait or run and no `status` came for `activeCheckMs`, the jobs are looked at once more: a change found so,
 *   unannounced, means the server stopped sending to this socket (Comfy-Org/ComfyUI#16010), which is then
 *   opened again.
 * - The cloud: every event of the key reaches every socket. The tap on the socket (SocketManager.watchAll) sees
 *   a job start; from then the config node's job book follows it to its end (job-tracker.ts), so the result is
 *   await-job's. The queue is read on `status` only when `queued` is among the events chosen.
 * - No socket (refused, or down): the jobs are looked at every `pollMs`.
 * - A server that announces nothing to anyone (Comfy API v2: no socket, one event stream per job): looking every
 *   so often is how it is watched, as its reader says (JobWatchReader.pollMs, `unannouncedPollMs`); the node
 *   then shows "watching", not "polling".
 * What a look reads is the dialect's (ServerDialect.jobWatch: today's API's is server-job-reader.ts, Comfy API
 * v2's dialects/comfy-api-v2/v2-job-watch.ts); this file knows none of their routes.
 * A look that fails is tried again, ever slower, with one warning, and never counts as "no jobs".
 */
import type { GenerationConnection } from '../connection';
import type { Unreadable } from './job-lookup';
import { JobEventMemory, type MemoryStore } from './job-event-memory';
import {
  JobEventTeller,
  STEP_OF_PHASE,
  type JobEvent,
  type JobEventTopic,
  type SeenPhase,
} from './job-event-teller';
import { JobTracker } from './job-tracker';
import {
  ServerJobReader,
  type JobWatchParts,
  type JobWatchReader,
  type LookOutcome,
} from './server-job-reader';
import type { ConnectionState } from './socket-manager';
import { readJobId } from './job-ids';
import { errorText } from '../../boundary/outside';

export {
  JOB_EVENT_TOPICS,
  type JobEvent,
  type JobEventPayload,
  type JobEventTopic,
} from './job-event-teller';

/** What a node's status shows. */
export type WatchState = 'starting' | 'watching' | 'polling' | 'unreadable' | 'unauthorized';

export interface JobEventsOptions {
  /** The events to tell. */
  events: readonly JobEventTopic[];
  /** Every job, or only those another client submitted. */
  clients: 'all' | 'others';
  /** Where the memory of what was told is kept across restarts. */
  store: MemoryStore;
  /** Which server the memory is of (the config node and its address). */
  scope: string;
  emit(event: JobEvent): void;
  onState?(state: WatchState): void;
  log(level: 'debug' | 'warn', message: string): void;
}

export interface JobEventsTimings {
  /** A change is looked at this long after its `status`: one look for a burst. */
  settleMs: number;
  /** Without a socket, the jobs are looked at this often. */
  pollMs: number;
  /** While jobs wait or run and no `status` came for this long, the jobs are looked at (self-hosted). */
  activeCheckMs: number;
  /** A failed look is tried again after this, doubling up to `retryMaxMs`. */
  retryMs: number;
  retryMaxMs: number;
  /** Jobs per page of the list, and pages read at most per look. */
  pageSize: number;
  maxPages: number;
  /** Ended jobs read per look; more make another look at once. */
  endsPerRead: number;
  /** Failed reads of how a job ended before it is told with what the list said (or given up). */
  endReadsMax: number;
  /** A server that announces nothing to anyone (Comfy API v2) has its jobs looked at this often. */
  unannouncedPollMs: number;
}

/** Jobs the cloud's job book follows at once for one node. */
const MAX_FOLLOWED = 5_000;
/** How long the socket is given to open at start before the first look goes over REST alone. */
const SOCKET_WAIT_MS = 5_000;

export class JobEvents {
  static defaultTimings: JobEventsTimings = {
    settleMs: 150,
    pollMs: 30_000,
    activeCheckMs: 60_000,
    retryMs: 5_000,
    retryMaxMs: 60_000,
    pageSize: 50,
    maxPages: 20,
    endsPerRead: 50,
    endReadsMax: 3,
    unannouncedPollMs: 3_000,
  };

  private readonly timings: JobEventsTimings;
  private readonly teller: JobEventTeller;
  private readonly reader: JobWatchReader;
  private readonly chosen: Set<JobEventTopic>;
  /** A cloud service's key: each event of the key reaches every socket. */
  private readonly cloud: boolean;
  private readonly aborter = new AbortController();
  private tracker?: JobTracker;
  /** Cloud: jobs the job book follows; those followed from the memory at start are told their end only. */
  private readonly followed = new Set<string>();
  private readonly restored = new Set<string>();
  private deregister?: () => void;
  private unwatch?: () => void;
  private lookTimer?: NodeJS.Timeout;
  private followUpTimer?: NodeJS.Timeout;
  private followUpAt = 0;
  private looking = false;
  private again = false;
  private retryDelay = 0;
  /** A `status` came since the last look began. */
  private announced = false;
  private trouble?: Unreadable;
  private warned?: string;
  private state: WatchState = 'starting';
  private closed = false;

  constructor(
    private readonly connection: GenerationConnection,
    private readonly options: JobEventsOptions,
  ) {
    this.timings = { ...JobEvents.defaultTimings };
    this.chosen = new Set(options.events);
    this.teller = new JobEventTeller(new JobEventMemory(options.store, options.scope), {
      events: options.events,
      clients: options.clients,
      clientId: connection.clientId,
      submittedHere: (id) => connection.submittedHere(id),
      emit: options.emit,
      log: options.log,
    });
    const parts: JobWatchParts = { teller: this.teller, limits: this.timings, log: options.log };
    this.reader =
      connection.dialect.jobWatch?.(parts) ??
      new ServerJobReader(
        { http: connection.http, lookup: connection.dialect.lookup, listBytes: connection.limits.listBytes },
        parts,
      );
    // The cloud's tap is its socket's: a server watched by polling alone is not followed so, whatever its key.
    this.cloud = connection.credential.cloudKey !== undefined && this.reader.pollMs === undefined;
  }

  /** Starts watching: the socket is opened, and the jobs looked at once it is (or could not be). */
  start(): void {
    const sockets = this.connection.sockets();
    this.deregister = sockets.register({
      onQueueStatus: () => {
        this.announced = true;
        if (!this.cloud || this.chosen.has('queued')) this.request();
      },
      onConnectionState: (state) => this.socketChanged(state),
    });
    if (this.cloud) {
      this.tracker = new JobTracker(this.connection, {
        progress: false,
        log: (level, message) => this.options.log(level, message),
      });
      this.unwatch = sockets.watchAll((promptId) => this.cloudEvent(promptId));
      for (const [id] of this.teller.memory.active()) {
        this.restored.add(id);
        this.follow(id);
      }
    }
    void sockets.ready(SOCKET_WAIT_MS).then(() => this.request(0));
  }

  /** Stops: requests under way are aborted, every timer and registration freed. */
  close(): void {
    this.closed = true;
    this.teller.closed = true;
    this.aborter.abort();
    clearTimeout(this.lookTimer);
    clearTimeout(this.followUpTimer);
    this.lookTimer = this.followUpTimer = undefined;
    this.deregister?.();
    this.unwatch?.();
    this.tracker?.close();
  }

  private socketChanged(state: ConnectionState): void {
    if (state === 'open') this.request();
    else if (state === 'down' || state === 'unauthorized') this.followUp();
    this.showState();
  }

  /** A look in `delay` ms (one at a time: a change during a look makes another after it). */
  private request(delay = this.timings.settleMs, check = false): void {
    if (this.closed) return;
    if (this.looking) {
      this.again = true;
      return;
    }
    if (this.lookTimer) return;
    clearTimeout(this.followUpTimer);
    this.followUpTimer = undefined;
    this.lookTimer = setTimeout(() => {
      this.lookTimer = undefined;
      void this.look(check);
    }, delay);
  }

  /**
   * After a look, or when the socket goes: the next look without a change, when one is due (never while the
   * server is idle). One due sooner stands: a socket that keeps failing to reconnect must not put the poll off.
   */
  private followUp(): void {
    if (this.closed || this.looking || this.lookTimer) return;
    const open = this.connection.sockets().isOpen;
    const delay =
      this.reader.pollMs ??
      (!open
        ? this.timings.pollMs
        : !this.cloud && this.teller.memory.active().length > 0
          ? this.timings.activeCheckMs
          : undefined);
    if (delay === undefined) return;
    if (this.followUpTimer && this.followUpAt <= Date.now() + delay) return;
    clearTimeout(this.followUpTimer);
    this.followUpAt = Date.now() + delay;
    this.followUpTimer = setTimeout(() => {
      this.followUpTimer = undefined;
      this.request(0, this.connection.sockets().isOpen);
    }, delay);
  }

  private async look(check: boolean): Promise<void> {
    this.looking = true;
    this.again = false;
    const announced = this.announced;
    this.announced = false;
    let outcome: LookOutcome;
    try {
      outcome = this.cloud
        ? await this.lookAtQueue(this.aborter.signal)
        : await this.reader.look(this.aborter.signal);
    } catch (error) {
      // Only an abort rejects (the node closes); anything else is a fault of this code, reported.
      outcome = {
        kind: 'failed',
        trouble: { kind: 'unreadable', reason: 'failed', message: errorText(error) },
      };
    } finally {
      this.looking = false;
    }
    if (this.closed) return;
    if (outcome.kind === 'failed') {
      this.trouble = outcome.trouble;
      const delay = this.backOff();
      this.warnOnce(
        outcome.trouble.message,
        `graph-gen job events: the server's jobs cannot be read (${outcome.trouble.message}); trying again, ever slower, up to every ${Math.round(this.timings.retryMaxMs / 1000)} s`,
      );
      this.showState();
      this.request(Math.max(delay, outcome.trouble.retryAfterMs ?? 0));
      return;
    }
    this.trouble = undefined;
    this.warned = undefined;
    this.teller.fresh = false;
    this.showState();
    if (check && outcome.changed && !announced && this.connection.sockets().isOpen) {
      this.options.log(
        'debug',
        'graph-gen job events: jobs moved without a status event: reopening the socket',
      );
      this.connection.sockets().reopen();
    }
    if (outcome.incomplete) {
      this.request(this.backOff());
    } else {
      this.retryDelay = 0;
      if (this.again || outcome.more) this.request();
      else this.followUp();
    }
  }

  /** The wait before trying again: `retryMs`, doubling up to `retryMaxMs` (back to 0 after a full look). */
  private backOff(): number {
    this.retryDelay = Math.min(this.timings.retryMaxMs, this.retryDelay * 2 || this.timings.retryMs);
    return this.retryDelay;
  }

  /** The cloud: the jobs waiting and running (for `queued`, and for jobs whose start the socket missed). */
  private async lookAtQueue(signal: AbortSignal): Promise<LookOutcome> {
    const active = await this.connection.dialect.lookup.queue(signal);
    if (active.kind !== 'read') return { kind: 'failed', trouble: active };
    const seen = new Map<string, { phase: SeenPhase; ran: boolean }>();
    for (const id of active.pending) seen.set(id, { phase: 'pending', ran: false });
    for (const id of active.running) seen.set(id, { phase: 'running', ran: true });
    if (!this.teller.memory.begun) {
      this.teller.begin(seen, 0);
      for (const id of active.running) this.follow(id);
      return { kind: 'read', changed: false, more: false, incomplete: false };
    }
    let changed = false;
    for (const [id, job] of seen) {
      if (!this.teller.movedOn(id, job.phase)) continue;
      changed = true;
      const step = STEP_OF_PHASE[job.phase] as 'queued' | 'started';
      this.teller.advance(id, step, job, this.teller.ownerOf(id) ?? false);
      if (job.phase === 'running') this.follow(id);
    }
    // Remembered as waiting and gone from the queue without an event (taken out): the job book finds how.
    for (const [id] of this.teller.memory.active()) if (!seen.has(id)) this.follow(id);
    return { kind: 'read', changed, more: false, incomplete: false };
  }

  /**
   * The cloud: an event of any job. Its first makes it started (a job followed since it was seen waiting too),
   * and the job book follows it to its end.
   */
  private cloudEvent(promptId: string): void {
    if (this.closed || !this.teller.memory.begun || !readJobId(promptId).ok) return;
    if (!this.teller.movedOn(promptId, 'running')) return;
    this.teller.advance(promptId, 'started', { ran: true }, this.teller.ownerOf(promptId) ?? false, false);
    this.follow(promptId);
  }

  private follow(promptId: string): void {
    if (!this.tracker || this.followed.has(promptId)) return;
    if (this.followed.size >= MAX_FOLLOWED) {
      const message = `graph-gen job events: ${MAX_FOLLOWED} jobs are followed already; later ones are not told`;
      this.warnOnce(message, message);
      return;
    }
    this.followed.add(promptId);
    void this.tracker.track(promptId, {
      onEnd: (result) => {
        this.followed.delete(promptId);
        const fresh = this.restored.delete(promptId);
        const known = this.teller.memory.get(promptId);
        const own = this.teller.ownerOf(promptId) ?? false;
        const seen = { createdAt: known?.createdAt, ran: result.status !== 'cancelled' };
        this.teller.end(promptId, result, seen, own, fresh);
      },
    });
  }

  /** One warning per trouble, not one per retry. */
  private warnOnce(trouble: string, message: string): void {
    if (this.warned === trouble) return;
    this.warned = trouble;
    this.options.log('warn', message);
  }

  private showState(): void {
    const sockets = this.connection.sockets();
    const state: WatchState =
      sockets.state === 'unauthorized' || this.trouble?.reason === 'refused'
        ? 'unauthorized'
        : this.trouble
          ? 'unreadable'
          : this.teller.fresh
            ? 'starting'
            : sockets.isOpen || this.reader.pollMs !== undefined
              ? 'watching'
              : 'polling';
    if (state === this.state) return;
    this.state = state;
    this.options.onState?.(state);
  }
}
