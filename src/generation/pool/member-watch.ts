/**
 * What a pool knows of one member, and how it learns it: its socket's state and queue reports (the pool keeps every
 * member's socket open), a queue read now and then for a member without an open socket, the answers and failures
 * of the pool's own requests, and its node definitions as it last gave them. From these: whether it is up, unknown
 * or down (pool-routing.ts's Reachability), how many jobs are ahead there, and what it lacks of a workflow (needs.ts).
 *
 * | heard                                   | then                                                           |
 * |-----------------------------------------|----------------------------------------------------------------|
 * | its socket is open                      | up                                                             |
 * | a request failed (a queue read got no   | down until it answers again (a socket that never opened says   |
 * | answer in its time), its open socket    | nothing, unless its try was refused: a proxy may pass only     |
 * | closed, or its socket's try reached     | REST); a submit waiting for its socket goes on at once         |
 * | nothing there, after its last answer    |                                                                |
 * | an answer within upWithinMs             | up                                                             |
 * | its socket is down or refused, no answer| down                                                           |
 * | nothing yet                             | unknown                                                        |
 *
 * No Node-RED inside; no timers of its own (the pool schedules the queue reads).
 */
import { abortable } from '../../abortable';
import type { ConnectionState } from '../jobs/socket-manager';
import type { NodeTypeDefinition } from '../workflows/workflow';
import { DIALOG_DEFINITIONS } from '../workflows/definitions-cache';
import { lacksOf, type WorkflowNeeds } from './needs';
import type { Reachability } from './pool-routing';
import type { GenerationConnection } from '../connection';

/** One server of a pool: its config node's id (kept across redeploys) and name, and its connection. */
export interface PoolMember {
  readonly id: string;
  readonly name: string;
  readonly connection: GenerationConnection;
}

/** What a member that can run a workflow lacks of it (shared: the hot path allocates nothing). */
const NOTHING: readonly string[] = [];

export interface WatchTimings {
  /** A member that answered within this is up. */
  upWithinMs: number;
  /** How long a submit waits for a member's socket (so no event of the job is missed). */
  socketWaitMs: number;
  /** How long a choice waits for a member's node definitions before it takes the member as able. */
  definitionsWaitMs: number;
}

export class MemberWatch {
  socketState: ConnectionState = 'idle';
  /** Jobs waiting or running there, as last reported (its socket's status, or a queue read). */
  reported = 0;
  /** Jobs the pool sent it (answered) since that report. */
  unseen = 0;
  /** Counts the changes to `reported` and `unseen`: a queue read asked before the last change is stale. */
  changes = 0;
  /** Jobs the pool chose it for whose submit is not answered yet. */
  inFlight = 0;
  heardAt = 0;
  failedAt = 0;
  /** Its node definitions as its connection last gave them here, and when. */
  private definitions?: Record<string, NodeTypeDefinition>;
  private definitionsAt = 0;
  private stopSocket?: () => void;
  /** Submits waiting for its socket (socketReady), woken when it is found down. */
  private readonly downWaiters = new Set<() => void>();

  constructor(
    readonly member: PoolMember,
    private readonly timings: WatchTimings,
  ) {}

  /** Jobs ahead of a new one there, as far as the pool knows. */
  get ahead(): number {
    return this.reported + this.unseen + this.inFlight;
  }

  heard(now = Date.now()): void {
    this.heardAt = now;
  }

  /** A request to it failed to reach it. */
  failed(now = Date.now()): void {
    this.failedAt = now;
    for (const wake of [...this.downWaiters]) wake();
  }

  /**
   * Waits (bounded) for its socket, so no event of a job sent there is missed; not for a member known down, and
   * no longer once it is (its socket's try was refused meanwhile: the submit goes on, and is refused, at once).
   */
  async socketReady(timeoutMs: number): Promise<void> {
    if (this.reachability() === 'down') return;
    let wake!: () => void;
    const down = new Promise<void>((resolve) => (wake = resolve));
    this.downWaiters.add(wake);
    try {
      await Promise.race([
        this.member.connection
          .sockets()
          .ready(timeoutMs)
          .catch(() => false),
        down,
      ]);
    } finally {
      this.downWaiters.delete(wake);
    }
  }

  reachability(now = Date.now()): Reachability {
    if (this.socketState === 'open') return 'up';
    // Its last request failed, or its open socket closed, and it has not answered since.
    if (this.failedAt > this.heardAt) return 'down';
    if (this.heardAt > 0 && now - this.heardAt < this.timings.upWithinMs) return 'up';
    if (this.socketState === 'down' || this.socketState === 'unauthorized') return 'down';
    return 'unknown';
  }

  /** Keeps the member's socket open and hears its state and queue reports; `changed` when its state changes. */
  watchSocket(changed: () => void): void {
    const sockets = this.member.connection.sockets();
    this.stopSocket = sockets.register({
      onConnectionState: (state) => {
        // An open socket that closed: the member stopped answering on it, and is down until it answers again. So
        // is one whose try reached nothing there (refused): heard by a read before, it would pass for up, and a
        // submit would wait for its socket (socketReady) while it was stopped.
        if (state === 'down' && (this.socketState === 'open' || sockets.unreachable === true)) this.failed();
        this.socketState = state;
        if (state === 'open') this.heard();
        changed();
      },
      onQueueStatus: (queueRemaining) => {
        if (queueRemaining !== undefined) this.report(queueRemaining);
        this.heard();
      },
    });
    this.socketState = sockets.state;
    void sockets.ready(this.timings.socketWaitMs).catch(() => false);
  }

  /**
   * Reads its queue (a member without an open socket reports none by itself). No answer within the read's time
   * is a failure too: a stopped member's refused connection is retried past it, and a member that does not
   * answer a read is not up (only a read stopped by the pool's close tells nothing).
   */
  async readQueue(signal: AbortSignal): Promise<void> {
    const changes = this.changes;
    const read = await this.member.connection.queue(signal).catch(() => undefined);
    if (read?.kind === 'read') {
      // A socket report or a submit came while it was read (the socket opened meanwhile): the read is older.
      if (this.changes === changes) this.report(read.running.size + read.pending.size);
      this.heard();
    } else if (!signal.aborted || isTimeout(signal.reason)) this.failed();
  }

  /** A submit it answered: one more job there, until its next report. */
  tookJob(): void {
    this.unseen += 1;
    this.changes += 1;
    this.heard();
  }

  stop(): void {
    this.stopSocket?.();
  }

  /**
   * What it lacks of `needs`, when that can be told now without asking it: nothing for a dialect without node
   * definitions (Comfy API v2: taken as able) or for definitions read within 10 minutes that have all; what they
   * lack, for a member known down (not asked again: each read would wait out its retries on every submit); else
   * undefined: ask (lacks), since it was never read, is older, or lacks something that may have been installed.
   */
  knownLacks(needs: WorkflowNeeds, now = Date.now()): readonly string[] | undefined {
    if (!this.member.connection.dialect.definitions) return NOTHING;
    if (this.reachability(now) === 'down')
      return this.definitions ? lacksOf(needs, this.definitions) : NOTHING;
    if (!this.definitions || now - this.definitionsAt >= DIALOG_DEFINITIONS.maxAgeMs) return undefined;
    const lacks = lacksOf(needs, this.definitions);
    return lacks.length === 0 ? NOTHING : undefined;
  }

  /** What it lacks of `needs`, its definitions read as the dialog's are (at most 10 minutes old, 10 s on a lack). */
  async lacks(needs: WorkflowNeeds, signal?: AbortSignal): Promise<readonly string[]> {
    const source = this.member.connection.dialect.definitions;
    if (!source) return NOTHING;
    const read = async (olderThanMs: number): Promise<Record<string, NodeTypeDefinition> | undefined> => {
      if (this.definitions && Date.now() - this.definitionsAt < olderThanMs) return this.definitions;
      // A member slow to answer holds no submit up longer than definitionsWaitMs: the read goes on for the next.
      const bounded = AbortSignal.any([
        AbortSignal.timeout(this.timings.definitionsWaitMs),
        ...(signal ? [signal] : []),
      ]);
      const definitions = await abortable(source.nodeDefinitions({ olderThanMs }), bounded).catch(
        () => undefined,
      );
      if (definitions && definitions !== this.definitions) {
        this.definitions = definitions;
        this.definitionsAt = Date.now();
      }
      return definitions;
    };
    let definitions = await read(DIALOG_DEFINITIONS.maxAgeMs);
    // Could not read is not "lacks": a member whose definitions cannot be read is tried (its submit will say).
    if (!definitions) return NOTHING;
    let lacks = lacksOf(needs, definitions);
    if (lacks.length > 0) {
      // A node or model installed since: read again, at most as often as a dialog's Refresh may.
      definitions = (await read(DIALOG_DEFINITIONS.refreshLimitMs)) ?? definitions;
      lacks = lacksOf(needs, definitions);
    }
    return lacks;
  }

  private report(queueRemaining: number): void {
    this.reported = queueRemaining;
    this.unseen = 0;
    this.changes += 1;
  }
}

/** Whether an abort's reason is a time limit's (AbortSignal.timeout), not a stop. */
function isTimeout(reason: unknown): boolean {
  return reason instanceof Error && reason.name === 'TimeoutError';
}
