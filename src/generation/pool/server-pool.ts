/**
 * A pool of generation servers behind one name: a connection made of connections (each member is a
 * GenerationConnection with its own address, credential, TLS, proxy and dialect). It chooses a member per job
 * (pool-routing.ts: up, able to run the workflow (needs.ts), fewest jobs ahead, ties in turns), remembers which
 * member each job went to (job-homes.ts, across restarts), and hands each job's later calls (await, download,
 * cancel) to that member. It needs nothing of a member but its connection's face: its dialect's submit and
 * lookups, its events source's state and queue reports, its node definitions.
 *
 * What it knows of each member (MemberWatch): its socket's state and queue reports (a pool keeps every member's
 * socket open), and, for a member whose events source is not an open socket (Comfy API v2, or a socket that is
 * down), one queue read every `pollMs`. A member answered lately is up; one whose last request could not reach it,
 * or whose socket is down and has not answered since, is down; one not heard of yet is unknown.
 *
 * Failover: a submit that certainly did not reach a member (its connection was refused, it answered 5xx or 429) is
 * sent to the next member in the order; one that may have reached it (the body went, no answer came) is settled
 * by that member's dialect (asked for by its id or key) and never sent elsewhere: a job runs once. A submit pinned
 * to a member (msg.server: an upload went there first) goes there only. No Node-RED inside.
 */
import { mayHaveReachedService } from '../../http/client';
import { ServiceError, invalidInput } from '../../http/errors';
import { errorText, ownValue, textOf } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';
import type { CancelOutcome, GenerationConnection } from '../connection';
import type { ConnectionState } from '../jobs/socket-manager';
import type { QueueState, SubmitResult } from '../transfer/rest-client';
import { DIALOG_DEFINITIONS } from '../workflows/definitions-cache';
import type { NodeTypeDefinition, Workflow } from '../workflows/workflow';
import { JobHomes } from './job-homes';
import { lacksOf, needsOf, type WorkflowNeeds } from './needs';
import { orderToTry, type MemberView, type PoolStrategy, type Reachability } from './pool-routing';

/** One server of a pool: its config node's id (kept across redeploys) and name, and its connection. */
export interface PoolMember {
  readonly id: string;
  readonly name: string;
  readonly connection: GenerationConnection;
}

/** A member as a msg names it (`msg.server`). */
export interface ServerRef {
  id: string;
  name: string;
}

export interface PoolTimings {
  /** A member that answered within this is up. */
  upWithinMs: number;
  /** How often a member without an open socket is asked for its queue. */
  pollMs: number;
  /** How long a submit waits for the chosen member's socket (so no event of the job is missed). */
  socketWaitMs: number;
}

export const POOL_TIMINGS: PoolTimings = { upWithinMs: 30_000, pollMs: 5_000, socketWaitMs: 5_000 };

/**
 * How long a choice uses a member's node definitions as the pool last had them from its connection, without
 * asking again: asking took a promise, a race and an abort listener per member, and made a choice 26 µs; 4 µs
 * without (bench/fanout --pool). Its connection reads them again only every 10 minutes (10 s on a lack).
 */
const DEFINITIONS_REUSE_MS = 1_000;

/** What a member that can run a workflow lacks of it. */
const NOTHING: readonly string[] = [];

export interface PoolOptions {
  strategy: PoolStrategy;
  homes?: JobHomes;
  timings?: Partial<PoolTimings>;
  log?: (level: 'debug' | 'warn', message: string) => void;
}

/** What a pool's queue list holds: every member's jobs, each with its server, and how each member answered. */
export interface PoolQueueState extends QueueState {
  queue_running: unknown[];
  queue_pending: unknown[];
  servers: Array<ServerRef & { up: boolean; error?: string }>;
}

/** Whether a failed submit certainly did not reach the member, so another may be tried. */
function mayGoElsewhere(error: unknown): boolean {
  if (!(error instanceof ServiceError) || mayHaveReachedService(error)) return false;
  return error.code === 'network' || error.code === 'server_error' || error.code === 'rate_limited';
}

/** What the pool knows of one member. */
class MemberWatch {
  socketState: ConnectionState = 'idle';
  /** Jobs waiting or running there, as last reported (its socket's status, or a queue read). */
  reported = 0;
  /** Jobs this pool sent it (answered) since that report. */
  unseen = 0;
  /** Jobs this pool chose it for whose submit is not answered yet. */
  inFlight = 0;
  heardAt = 0;
  failedAt = 0;
  stopSocket?: () => void;
  /** Its node definitions as its connection last gave them to this pool, and when (DEFINITIONS_REUSE_MS). */
  definitions?: Record<string, NodeTypeDefinition>;
  definitionsAt = 0;

  constructor(readonly member: PoolMember) {}

  heard(now = Date.now()): void {
    this.heardAt = now;
  }
}

export class ServerPool {
  readonly members: readonly PoolMember[];
  readonly strategy: PoolStrategy;
  private readonly watches: MemberWatch[];
  private readonly timings: PoolTimings;
  private readonly log: (level: 'debug' | 'warn', message: string) => void;
  private homes: JobHomes;
  /** Where turns start: the member after the last chosen. */
  private turn = 0;
  private pollTimer?: NodeJS.Timeout;
  private polling?: AbortController;
  private readonly upListeners = new Set<() => void>();
  /** The members up and down when the listeners were last told. */
  private lastTold = '';
  private closed = false;

  constructor(members: readonly PoolMember[], options: PoolOptions) {
    this.members = members;
    this.strategy = options.strategy;
    this.homes = options.homes ?? JobHomes.inMemory();
    this.timings = { ...POOL_TIMINGS, ...options.timings };
    this.log = options.log ?? (() => undefined);
    this.watches = members.map((member) => new MemberWatch(member));
    for (const watch of this.watches) this.watchSocket(watch);
    this.schedulePoll(0);
  }

  /** The job homes kept on disk, once read (the node opens them after the pool is made). */
  useHomes(homes: JobHomes): void {
    // Jobs sent before the file was read are kept in it too.
    this.homes.moveInto(homes);
    this.homes = homes;
  }

  get size(): number {
    return this.members.length;
  }

  /** How many members are up now. */
  get upCount(): number {
    let up = 0;
    for (const watch of this.watches) if (this.reachabilityOf(watch) === 'up') up += 1;
    return up;
  }

  /** Hears when the number of members up or down changes (for statuses: "2 of 3 servers"). */
  onUpChange(listener: () => void): () => void {
    this.upListeners.add(listener);
    return () => this.upListeners.delete(listener);
  }

  refOf(member: PoolMember): ServerRef {
    return { id: member.id, name: member.name };
  }

  memberById(id: string): PoolMember | undefined {
    return this.members.find((member) => member.id === id);
  }

  /**
   * The member a msg names (`msg.server`: {id, name} or the id alone), or undefined when it names none; a refusal
   * when it names a server that is not in this pool.
   */
  pinnedBy(server: unknown): PoolMember | undefined {
    const id = isRecord(server) ? textOf(ownValue(server, 'id'), 200) : textOf(server, 200);
    if (id === undefined || id === '') return undefined;
    const member = this.memberById(id);
    if (!member)
      throw invalidInput(
        `msg.server names a server (${JSON.stringify(id)}) that is not in this pool: remove msg.server, or send the msg through the pool it came from`,
      );
    return member;
  }

  /** The member of a job: the one msg.server names, else the one the pool sent it to; a refusal when neither. */
  memberOfJob(promptId: string, server?: unknown): PoolMember {
    const pinned = this.pinnedBy(server);
    if (pinned) return pinned;
    const home = this.homes.get(promptId);
    const member = home === undefined ? undefined : this.memberById(home);
    if (member) return member;
    throw invalidInput(
      `the pool does not know which of its servers runs job ${promptId}: send msg.server along with it (the submit node sets it)`,
    );
  }

  /** The member a job went to, if the pool remembers it. */
  homeOf(promptId: string): PoolMember | undefined {
    const home = this.homes.get(promptId);
    return home === undefined ? undefined : this.memberById(home);
  }

  /** Remembers that a job is on `member` (its await, download and cancel go there). */
  remember(promptId: string, member: PoolMember): void {
    this.homes.set(promptId, member.id);
  }

  /**
   * The members to try for a job, best first. With `needs` (needs.ts's needsOf a workflow), only those able to run
   * it; a refusal naming what each member lacks when none is. `exclude`: members not to use (one that lost the job).
   */
  async order(
    needs?: WorkflowNeeds,
    exclude?: ReadonlySet<string>,
    signal?: AbortSignal,
  ): Promise<PoolMember[]> {
    return this.choose(needs, exclude, false, signal);
  }

  /**
   * `order`; with `reserve`, the first member is counted as having one more job at once, in the same turn of the
   * event loop as the choice: submits sent together then spread (each sees those chosen before it).
   */
  private async choose(
    needs: WorkflowNeeds | undefined,
    exclude: ReadonlySet<string> | undefined,
    reserve: boolean,
    signal?: AbortSignal,
  ): Promise<PoolMember[]> {
    // Each member's lacks from the definitions it gave lately, in this turn of the loop; asked of its connection
    // (a promise) only when older, never read, or lacking something (it may have been installed since).
    const now = Date.now();
    const lacks: (readonly string[])[] = [];
    let reads: Promise<void>[] | undefined;
    this.watches.forEach((watch, index) => {
      if (exclude?.has(watch.member.id) || !needs) lacks[index] = NOTHING;
      else {
        const known = this.knownLacks(watch, needs, now);
        if (known) lacks[index] = known;
        else
          (reads ??= []).push(
            this.lacksOf(watch, needs, signal).then((found) => {
              lacks[index] = found;
            }),
          );
      }
    });
    if (reads) await Promise.all(reads);
    const views: MemberView[] = this.watches.map((watch, index) => ({
      reachability: this.reachabilityOf(watch),
      able: !exclude?.has(watch.member.id) && lacks[index].length === 0,
      ahead: watch.reported + watch.unseen + watch.inFlight,
    }));
    const order = orderToTry(views, this.strategy, this.turn).map((index) => this.members[index]);
    if (order.length === 0) {
      const said = this.members
        .map((member, index) =>
          exclude?.has(member.id)
            ? `${member.name} lost the job before`
            : `${member.name} lacks ${lacks[index].join(', ')}`,
        )
        .join('; ');
      throw invalidInput(`no server of the pool can run this workflow: ${said}`);
    }
    if (reserve) this.reserve(order[0]);
    return order;
  }

  /**
   * Submits a workflow to the best member that takes it (failover as the header says), or to the member msg.server
   * names. `partner`: send each member's own partner key, where it has one.
   */
  async submit(
    prompt: Workflow,
    options: { partner?: boolean; server?: unknown; exclude?: ReadonlySet<string> },
    signal?: AbortSignal,
  ): Promise<{ result: SubmitResult; member: PoolMember }> {
    const pinned = this.pinnedBy(options.server);
    if (pinned) this.reserve(pinned);
    const order = pinned ? [pinned] : await this.choose(needsOf(prompt), options.exclude, true, signal);
    const refusals: string[] = [];
    let last: ServiceError | undefined;
    for (const [index, member] of order.entries()) {
      const watch = this.watchOf(member);
      // The first was reserved as it was chosen; a next one as the pool turns to it.
      if (index > 0) this.reserve(member);
      try {
        const result = await this.submitTo(member, prompt, options.partner === true, signal);
        watch.unseen += 1;
        watch.heard();
        this.homes.set(result.prompt_id, member.id);
        this.toldUp();
        return { result, member };
      } catch (error) {
        if (signal?.aborted || pinned || !mayGoElsewhere(error)) throw error;
        last = error as ServiceError;
        watch.failedAt = Date.now();
        this.toldUp();
        refusals.push(`${member.name}: ${last.message}`);
        this.log(
          'debug',
          `graph-gen pool: ${member.name} did not take the job (${last.message}); trying the next`,
        );
      }
    }
    throw new ServiceError(
      last?.code ?? 'network',
      `no server of the pool could take the job: ${refusals.join('; ')}`,
      last?.cause,
    );
  }

  /** One member's submit, its reservation released when it is answered (or not sent). */
  private async submitTo(
    member: PoolMember,
    prompt: Workflow,
    partner: boolean,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const watch = this.watchOf(member);
    const { connection } = member;
    try {
      // Wait (bounded) for its socket, so no event of the new job is missed; not for a member known down.
      if (this.reachabilityOf(watch) !== 'down')
        await connection
          .sockets()
          .ready(this.timings.socketWaitMs)
          .catch(() => false);
      signal?.throwIfAborted();
      return await connection.submit(prompt, connection.partnerExtra(partner), signal);
    } finally {
      watch.inFlight -= 1;
    }
  }

  /**
   * The member an upload goes to: the one msg.server names, else the best one now (an upload needs no workflow);
   * the job submitted after it follows it there (msg.server), so its inputs are where it runs.
   */
  async memberForUpload(server?: unknown, signal?: AbortSignal): Promise<PoolMember> {
    const pinned = this.pinnedBy(server);
    if (pinned) return pinned;
    const [member] = await this.order(undefined, undefined, signal);
    this.turn = this.members.indexOf(member) + 1;
    return member;
  }

  /** Every member's queue (read at once), each entry with its server; a member that could not be read says so. */
  async queueState(signal?: AbortSignal): Promise<PoolQueueState> {
    const reads = await Promise.allSettled(
      this.members.map((member) => member.connection.dialect.queueState(signal)),
    );
    const state: PoolQueueState = { queue_running: [], queue_pending: [], servers: [] };
    const failures: ServiceError[] = [];
    reads.forEach((read, index) => {
      const member = this.members[index];
      const server = this.refOf(member);
      if (read.status === 'rejected') {
        const error = read.reason instanceof ServiceError ? read.reason : undefined;
        failures.push(error ?? new ServiceError('network', errorText(read.reason)));
        state.servers.push({ ...server, up: false, error: error?.message ?? errorText(read.reason) });
        return;
      }
      this.watches[index].heard();
      state.servers.push({ ...server, up: true });
      for (const [field, into] of [
        ['queue_running', state.queue_running],
        ['queue_pending', state.queue_pending],
      ] as const) {
        const entries = read.value[field];
        if (Array.isArray(entries)) for (const entry of entries) into.push(withServer(entry, server));
      }
    });
    signal?.throwIfAborted();
    // Unreadable is never an empty queue: when no member answered, the read failed.
    if (failures.length === this.members.length && failures.length > 0) throw failures[0];
    return state;
  }

  /**
   * Cancels jobs on their members: those msg.server names go there, the others to the member each was sent to,
   * and those the pool does not know of to every member (a cancel of a job a server does not have changes nothing).
   */
  async cancel(promptIds: string[], server?: unknown, signal?: AbortSignal): Promise<CancelOutcome> {
    const pinned = this.pinnedBy(server);
    const byMember = new Map<PoolMember, string[]>();
    const unknown: string[] = [];
    for (const id of promptIds) {
      const member = pinned ?? this.homeOf(id);
      if (!member) unknown.push(id);
      else byMember.set(member, [...(byMember.get(member) ?? []), id]);
    }
    if (unknown.length > 0)
      for (const member of this.members) byMember.set(member, [...(byMember.get(member) ?? []), ...unknown]);
    const outcomes = await Promise.all(
      [...byMember].map(([member, ids]) => member.connection.cancel(ids, signal)),
    );
    return mergeCancels(outcomes);
  }

  /** Interrupts a job on its member; without a job, the running job of every member. */
  async interrupt(promptId?: string, server?: unknown, signal?: AbortSignal): Promise<unknown> {
    if (promptId) return this.memberOfJob(promptId, server).connection.interrupt(promptId, signal);
    const pinned = this.pinnedBy(server);
    const members = pinned ? [pinned] : this.members;
    const answers = await Promise.all(
      members.map((member) => member.connection.interrupt(undefined, signal)),
    );
    return pinned
      ? answers[0]
      : Object.fromEntries(members.map((member, index) => [member.id, answers[index]]));
  }

  /** Forgets where jobs went, on disk too (the pool was removed from the flows). Call after close. */
  async forgetJobs(): Promise<void> {
    await this.homes.destroy();
  }

  /** How many members are known down now (their socket is down, or their last request did not reach them). */
  get downCount(): number {
    let down = 0;
    for (const watch of this.watches) if (this.reachabilityOf(watch) === 'down') down += 1;
    return down;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.pollTimer);
    this.polling?.abort();
    for (const watch of this.watches) watch.stopSocket?.();
    this.upListeners.clear();
    await this.homes.close();
  }

  // --- what the pool knows of each member ---

  /** Counts a job on its way to `member` (until its submit is answered); the turns go on after it. */
  private reserve(member: PoolMember): void {
    this.watchOf(member).inFlight += 1;
    this.turn = this.members.indexOf(member) + 1;
  }

  private watchOf(member: PoolMember): MemberWatch {
    return this.watches[this.members.indexOf(member)];
  }

  private reachabilityOf(watch: MemberWatch, now = Date.now()): Reachability {
    if (watch.socketState === 'open') return 'up';
    if (watch.heardAt > 0 && watch.heardAt >= watch.failedAt && now - watch.heardAt < this.timings.upWithinMs)
      return 'up';
    if (watch.failedAt > watch.heardAt) return 'down';
    if (watch.socketState === 'down' || watch.socketState === 'unauthorized') return 'down';
    return 'unknown';
  }

  /** Keeps the member's socket open and hears its state and queue reports. */
  private watchSocket(watch: MemberWatch): void {
    const sockets = watch.member.connection.sockets();
    watch.stopSocket = sockets.register({
      onConnectionState: (state) => {
        watch.socketState = state;
        if (state === 'open') watch.heard();
        this.toldUp();
      },
      onQueueStatus: (queueRemaining) => {
        if (queueRemaining !== undefined) {
          watch.reported = queueRemaining;
          watch.unseen = 0;
        }
        watch.heard();
      },
    });
    watch.socketState = sockets.state;
    void sockets.ready(this.timings.socketWaitMs).catch(() => false);
  }

  /** Asks every member whose events source is not an open socket for its queue, every `pollMs`. */
  private schedulePoll(delayMs: number): void {
    if (this.closed) return;
    this.pollTimer = setTimeout(() => void this.poll(), delayMs);
    this.pollTimer.unref?.();
  }

  private async poll(): Promise<void> {
    const controller = new AbortController();
    this.polling = controller;
    const signal = AbortSignal.any([controller.signal, AbortSignal.timeout(this.timings.pollMs * 2)]);
    await Promise.all(
      this.watches
        .filter((watch) => watch.socketState !== 'open')
        .map(async (watch) => {
          const read = await watch.member.connection.queue(signal).catch(() => undefined);
          if (this.closed) return;
          if (read?.kind === 'read') {
            watch.reported = read.running.size + read.pending.size;
            watch.unseen = 0;
            watch.heard();
          } else if (!signal.aborted) watch.failedAt = Date.now();
        }),
    );
    if (this.closed) return;
    this.toldUp();
    this.schedulePoll(this.timings.pollMs);
  }

  /** Tells the listeners when the number of members up changed. */
  private toldUp(): void {
    const told = `${this.upCount}/${this.downCount}`;
    if (told === this.lastTold) return;
    this.lastTold = told;
    for (const listener of [...this.upListeners]) {
      try {
        listener();
      } catch (error) {
        this.log('warn', `graph-gen pool: a listener failed: ${errorText(error)}`);
      }
    }
  }

  /**
   * What a member lacks of `needs` from the definitions it gave within DEFINITIONS_REUSE_MS, when that is nothing
   * (or it has none to give: Comfy API v2); undefined when they must be asked for (lacksOf).
   */
  private knownLacks(watch: MemberWatch, needs: WorkflowNeeds, now: number): readonly string[] | undefined {
    if (!watch.member.connection.dialect.definitions) return NOTHING;
    if (!watch.definitions || now - watch.definitionsAt >= DEFINITIONS_REUSE_MS) return undefined;
    return lacksOf(needs, watch.definitions).length === 0 ? NOTHING : undefined;
  }

  /** What a member lacks of `needs` (its definitions read as the dialog's are: at most 10 minutes old). */
  private async lacksOf(watch: MemberWatch, needs: WorkflowNeeds, signal?: AbortSignal): Promise<string[]> {
    const source = watch.member.connection.dialect.definitions;
    // A dialect without node definitions (Comfy API v2) cannot say: taken as able.
    if (!source) return [];
    const read = async (olderThanMs: number): Promise<Record<string, NodeTypeDefinition> | undefined> => {
      const definitions = await abortable(source.nodeDefinitions({ olderThanMs }), signal).catch(
        () => undefined,
      );
      if (definitions) {
        watch.definitions = definitions;
        watch.definitionsAt = Date.now();
      }
      return definitions;
    };
    let definitions = await read(DIALOG_DEFINITIONS.maxAgeMs);
    // Could not read is not "lacks": a member whose definitions cannot be read is tried (its submit will say).
    if (!definitions) return [];
    let lacks = lacksOf(needs, definitions);
    if (lacks.length > 0) {
      // A node or model installed since: read again, at most as often as a dialog's Refresh may.
      definitions = (await read(DIALOG_DEFINITIONS.refreshLimitMs)) ?? definitions;
      lacks = lacksOf(needs, definitions);
    }
    return lacks;
  }
}

function abortable<T>(promise: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return promise;
  signal.throwIfAborted();
  return Promise.race([
    promise,
    new Promise<never>((_resolve, reject) =>
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
    ),
  ]);
}

/** A queue entry with its server: `server` added to an object entry; any other entry is wrapped. */
function withServer(entry: unknown, server: ServerRef): unknown {
  if (isRecord(entry) && !Array.isArray(entry)) return { ...entry, server };
  return { entry, server };
}

function mergeCancels(outcomes: CancelOutcome[]): CancelOutcome {
  const merged: CancelOutcome = {
    body: outcomes.map((outcome) => outcome.body),
    removed: [],
    interrupted: [],
    notQueued: [],
    unconfirmed: [],
  };
  for (const outcome of outcomes) {
    merged.removed.push(...outcome.removed);
    merged.interrupted.push(...outcome.interrupted);
    merged.unconfirmed.push(...outcome.unconfirmed);
    merged.notQueued.push(...outcome.notQueued);
  }
  // A job sent to every member is "not queued" only where no member removed or interrupted it.
  const done = new Set([...merged.removed, ...merged.interrupted]);
  const notQueued = new Set(merged.notQueued.filter((id) => !done.has(id)));
  merged.notQueued = [...notQueued];
  merged.unconfirmed = [...new Set(merged.unconfirmed.filter((id) => !done.has(id)))];
  return merged;
}
