/**
 * A pool of generation servers behind one name: a connection made of connections (each member is a
 * GenerationConnection with its own address, credential, TLS, proxy and dialect). It chooses a member per job
 * (pool-routing.ts: up, able to run the workflow (needs.ts), fewest jobs ahead, ties in turns), remembers which
 * member each job went to (job-homes.ts, across restarts), and hands each job's later calls (await, download,
 * cancel) to that member. It needs nothing of a member but its connection's face: its dialect's submit and
 * lookups, its events source's state and queue reports, its node definitions. What it knows of each member, and
 * how it learns it, is member-watch.ts; its joined lists, pool-lists.ts.
 *
 * Failover: a submit that certainly did not reach a member (its connection was refused, it answered 5xx or 429) is
 * sent to the next member in the order; one that may have reached it (the body went, no answer came) is settled
 * by that member's dialect (asked for by its id or key) and never sent elsewhere: a job runs once. A submit pinned
 * to a member (msg.server: an upload went there first) goes there only. No Node-RED inside. A little past 400
 * lines: the choice, failover, job homes and the members' queue, cancel and interrupt are the one face the nodes use.
 */
import { mayHaveReachedService } from '../../http/client';
import { ServiceError, invalidInput } from '../../http/errors';
import { errorText, ownValue, textOf } from '../../boundary/outside';
import { isRecord } from '../../boundary/json-values';
import type { CancelOutcome } from '../connection';
import type { SubmitResult } from '../transfer/rest-client';
import type { Workflow } from '../workflows/workflow';
import { JobHomes } from './job-homes';
import { MemberWatch, type PoolMember, type WatchTimings } from './member-watch';
import { needsOf, type WorkflowNeeds } from './needs';
import { joinCancels, joinQueues, type PoolQueueState, type ServerRef } from './pool-lists';
import { orderToTry, type MemberView, type PoolStrategy } from './pool-routing';

export type { PoolQueueState, ServerRef } from './pool-lists';
export type { PoolMember } from './member-watch';

export interface PoolTimings extends WatchTimings {
  /** How often a member without an open socket is asked for its queue. */
  pollMs: number;
}

export const POOL_TIMINGS: PoolTimings = {
  upWithinMs: 30_000,
  pollMs: 5_000,
  socketWaitMs: 5_000,
  definitionsWaitMs: 5_000,
};

export interface PoolOptions {
  strategy: PoolStrategy;
  homes?: JobHomes;
  timings?: Partial<PoolTimings>;
  log?: (level: 'debug' | 'warn', message: string) => void;
}

/** Whether a failed submit certainly did not reach the member, so another may be tried. */
function mayGoElsewhere(error: unknown): boolean {
  if (!(error instanceof ServiceError) || mayHaveReachedService(error)) return false;
  return error.code === 'network' || error.code === 'server_error' || error.code === 'rate_limited';
}

export class ServerPool {
  readonly members: readonly PoolMember[];
  readonly strategy: PoolStrategy;
  private readonly watches: MemberWatch[];
  private readonly timings: PoolTimings;
  private readonly log: (level: 'debug' | 'warn', message: string) => void;
  private homes: JobHomes;
  /** Settles once the job homes kept on disk are read: a job's member is looked up after that. */
  private homesRead: Promise<void> = Promise.resolve();
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
    this.watches = members.map((member) => new MemberWatch(member, this.timings));
    for (const watch of this.watches) watch.watchSocket(() => this.toldUp());
    this.schedulePoll(0);
  }

  /**
   * The job homes kept on disk are being read (`reading`): until it settles, a job's member (jobMember, cancel,
   * interrupt) is looked up after it, so a msg that comes right after a start finds a job sent before it.
   */
  readingHomes(reading: Promise<unknown>): void {
    this.homesRead = reading.then(
      () => undefined,
      () => undefined,
    );
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
    return this.count('up');
  }

  /** How many members are known down now (their socket closed, or their last request did not reach them). */
  get downCount(): number {
    return this.count('down');
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
    let id: string | undefined;
    try {
      id = isRecord(server) ? textOf(ownValue(server, 'id'), 200) : textOf(server, 200);
    } catch (error) {
      // A flow's own object whose getter (or proxy) throws when its id is read.
      throw invalidInput(
        `msg.server cannot be read (${errorText(error, 200)}): remove msg.server, or set it as the submit node does`,
      );
    }
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
    const member = this.homeOf(promptId);
    if (member) return member;
    throw invalidInput(
      promptId === ''
        ? 'the msg names no job (msg.prompt_id) nor server (msg.server), so the pool cannot tell which of its servers to ask: send them along (the submit node sets both)'
        : `the pool does not know which of its servers runs job ${promptId}: send msg.server along with it (the submit node sets it)`,
    );
  }

  /** memberOfJob, once the job homes kept on disk are read. */
  async jobMember(promptId: string, server?: unknown): Promise<PoolMember> {
    const pinned = this.pinnedBy(server);
    if (pinned) return pinned;
    await this.homesRead;
    return this.memberOfJob(promptId);
  }

  /** The member a job went to, if the pool remembers it. */
  homeOf(promptId: string): PoolMember | undefined {
    const home = this.homes.get(promptId);
    return home === undefined ? undefined : this.memberById(home);
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
    return this.choose(needs, exclude, 'look', signal);
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
    const order = pinned ? [pinned] : await this.choose(needsOf(prompt), options.exclude, 'reserve', signal);
    const refusals: string[] = [];
    let last: ServiceError | undefined;
    for (const [index, member] of order.entries()) {
      const watch = this.watchOf(member);
      // The first was reserved as it was chosen; a next one as the pool turns to it.
      if (index > 0) this.reserve(member);
      try {
        const result = await this.submitTo(watch, prompt, options.partner === true, signal);
        watch.tookJob();
        this.homes.set(result.prompt_id, member.id);
        this.toldUp();
        return { result, member };
      } catch (error) {
        if (signal?.aborted || pinned || !mayGoElsewhere(error)) throw error;
        last = error as ServiceError;
        watch.failed();
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

  /**
   * The member an upload goes to: the one msg.server names, else the best one now (an upload needs no workflow);
   * the job submitted after it follows it there (msg.server), so its inputs are where it runs.
   */
  async memberForUpload(server?: unknown, signal?: AbortSignal): Promise<PoolMember> {
    const pinned = this.pinnedBy(server);
    if (pinned) return pinned;
    // The turns move on as it is chosen: uploads sent together go to members in turn, not all to the first.
    const [member] = await this.choose(undefined, undefined, 'turn', signal);
    return member;
  }

  /** Every member's queue (read at once), each entry with its server; a member that could not be read says so. */
  async queueState(signal?: AbortSignal): Promise<PoolQueueState> {
    const reads = await Promise.allSettled(
      this.members.map((member) => member.connection.dialect.queueState(signal)),
    );
    reads.forEach((read, index) => {
      if (read.status === 'fulfilled') this.watches[index].heard();
    });
    signal?.throwIfAborted();
    return joinQueues(reads.map((read, index) => ({ server: this.refOf(this.members[index]), read })));
  }

  /**
   * Cancels jobs on their members: those msg.server names go there, the others to the member each was sent to,
   * and those the pool does not know of to every member (a cancel of a job a server does not have changes nothing).
   */
  async cancel(promptIds: string[], server?: unknown, signal?: AbortSignal): Promise<CancelOutcome> {
    const pinned = this.pinnedBy(server);
    if (!pinned) await this.homesRead;
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
    return joinCancels(outcomes);
  }

  /** Interrupts a job on its member; without a job, the running job of every member. */
  async interrupt(promptId?: string, server?: unknown, signal?: AbortSignal): Promise<unknown> {
    if (promptId) return (await this.jobMember(promptId, server)).connection.interrupt(promptId, signal);
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

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.pollTimer);
    this.polling?.abort();
    for (const watch of this.watches) watch.stop();
    this.upListeners.clear();
    await this.homes.close();
  }

  /**
   * `order`; with `reserve`, the first member is counted as having one more job at once, in the same turn of the
   * event loop as the choice: submits sent together then spread (each sees those chosen before it). With `turn`,
   * only the turns move on past the first (an upload: no job yet), also in that turn of the event loop.
   */
  private async choose(
    needs: WorkflowNeeds | undefined,
    exclude: ReadonlySet<string> | undefined,
    take: 'look' | 'reserve' | 'turn',
    signal?: AbortSignal,
  ): Promise<PoolMember[]> {
    // Each member's lacks as known now (the hot path: no promise); asked of its connection only where not known.
    const now = Date.now();
    const lacks: (readonly string[])[] = [];
    let asking: Array<Promise<void>> | undefined;
    this.watches.forEach((watch, index) => {
      const known = exclude?.has(watch.member.id) || !needs ? [] : watch.knownLacks(needs, now);
      if (known) lacks[index] = known;
      else
        (asking ??= []).push(
          watch.lacks(needs!, signal).then((found) => {
            lacks[index] = found;
          }),
        );
    });
    if (asking) await Promise.all(asking);
    const views: MemberView[] = this.watches.map((watch, index) => ({
      reachability: watch.reachability(),
      able: !exclude?.has(watch.member.id) && lacks[index].length === 0,
      ahead: watch.ahead,
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
    if (take === 'reserve') this.reserve(order[0]);
    else if (take === 'turn') this.turn = this.members.indexOf(order[0]) + 1;
    return order;
  }

  /** One member's submit, its reservation released when it is answered (or not sent). */
  private async submitTo(
    watch: MemberWatch,
    prompt: Workflow,
    partner: boolean,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const { connection } = watch.member;
    try {
      // Wait (bounded) for its socket, so no event of the new job is missed; not for a member known down.
      await watch.socketReady(this.timings.socketWaitMs);
      signal?.throwIfAborted();
      return await connection.submit(prompt, connection.partnerExtra(partner), signal);
    } finally {
      watch.inFlight -= 1;
    }
  }

  /** Counts a job on its way to `member` (until its submit is answered); the turns go on after it. */
  private reserve(member: PoolMember): void {
    this.watchOf(member).inFlight += 1;
    this.turn = this.members.indexOf(member) + 1;
  }

  private watchOf(member: PoolMember): MemberWatch {
    return this.watches[this.members.indexOf(member)];
  }

  private count(reachability: 'up' | 'down'): number {
    const now = Date.now();
    let count = 0;
    for (const watch of this.watches) if (watch.reachability(now) === reachability) count += 1;
    return count;
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
      this.watches.filter((watch) => watch.socketState !== 'open').map((watch) => watch.readQueue(signal)),
    );
    if (this.closed) return;
    this.toldUp();
    this.schedulePoll(this.timings.pollMs);
  }

  /** Tells the listeners when the number of members up or down changed. */
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
}
