/**
 * The jobs a config node awaits, each with its life (job-life.ts), and when to ask the server about them. The
 * book owns the timers and the requests (the timers that find quiet, silent and swept jobs are its check timers,
 * check-timers.ts); a life decides what an event or an answer means. One book per connection, shared by every
 * await-job node of the config node, so a job awaited twice has one life, one subscription and one check, and an
 * await that comes after the job ended gets its result at once.
 *
 * When the server is asked (every check of the same moment shares one queue read, so thousands of waiting
 * jobs cost one request):
 * - once after a job is awaited (it may have ended before), unless its events already arrive on an unbroken
 *   socket, or it was submitted here on the socket still open (every event of it is kept or to come); after
 *   every reconnect, for every job (events may have been missed);
 * - when the queue count falls (a `status` event; a job deleted from the queue sends no event), or changes at all
 *   while an await shows queue places: every job with no event yet, waiting or running (another program's job
 *   that ends sends no event here either), in one read, at most every 2 s and further apart the more wait (the
 *   sweep, check-timers.ts);
 * - a job with no event for `quietCheckMs`: its events may never come (another client's job; the quiet check);
 * - a running job whose events stopped while the whole socket went silent for much longer than the job's
 *   events have been apart, or, for a running job none of whose events came yet, for `silentMaxMs` (a server
 *   that dropped the socket from its table, Comfy-Org/ComfyUI#16010; after a restart that may happen before a
 *   resumed job's first event): if the job moved on meanwhile, the socket is opened again (the silence watch);
 * - every job, when the whole socket has said nothing for `socketSilentMs` while it is open (a server sends a
 *   `status` as soon as a socket opens: one that never says a word may not be sending this client anything;
 *   the silence watch);
 * - while the socket is down: every job, at a growing interval;
 * - whenever a life asks (an answer to confirm, one that could not be read, a run that is over).
 * Past 400 lines: every reason to ask the server is asked here (the check timers only find the jobs), so "when
 * is a job checked" has one answer.
 * No Node-RED inside.
 */
import { setMaxListeners } from 'node:events';
import { copyJson, errorText } from '../../boundary/outside';
import type { CancelKind, CancelRegistry } from './cancels';
import { JobLife, type JobProgress, type JobResult, type LifeHost, type LifeState } from './job-life';
import { phaseInQueue, type LookupAnswer, type QueueRead } from './job-lookup';
import { Limiter } from './limiter';
import { itemsOf, withItem, withoutItem } from './one-or-many';
import { KeptResults } from './kept-results';
import type { ConnectionState } from './socket-manager';
import type { JobEventSource, JobLookupPort } from './job-ports';
import { askingOf, requestsOf, type JobAwait, type JobTimings, type Watch } from './job-watch';
import { CheckTimers } from './check-timers';

export type { JobAwait, JobTimings } from './job-watch';

/** What the book needs of a config node's connection. */
export interface BookConnection {
  readonly lookup: JobLookupPort;
  readonly cancels: Pick<CancelRegistry, 'kindOf' | 'listen' | 'isCancelled'>;
  sockets(): JobEventSource;
  /** Whether every event of the job is here already and to come (connection.ts): it needs no first check. */
  heardAll?(promptId: string): boolean;
  log?(level: 'debug' | 'warn', message: string): void;
}

/** Status checks in flight at once (after a reconnect every job is checked). */
const CHECKS_AT_ONCE = 25;
/** Recent run times (for wait estimates) are read again after this long. */
const RUN_TIME_FRESH_MS = 60_000;

/**
 * Jobs a sweep asks about alone when the queue could not be read (each a request or more): a few per sweep, never
 * every waiting job at once.
 */
const SWEEP_ALONE = 25;

export class JobBook implements LifeHost {
  static defaultTimings: JobTimings = {
    pollInitialMs: 2_000,
    pollMaxMs: 10_000,
    quietCheckMs: 60_000,
    firstCheckMs: 150,
    lostConfirmMs: 2_000,
    unknownGraceMs: 10_000,
    queueFreshMs: 1_000,
    unreadableMaxMs: 30_000,
    silentMinMs: 5_000,
    silentMaxMs: 15_000,
    socketSilentMs: 20_000,
  };

  readonly timings: JobTimings;
  /** By prompt_id. One map, not one of lives and one of their watches: 10,000 jobs make 10,000 entries. */
  private readonly watches = new Map<string, Watch>();
  /** Results of lately ended jobs (kept-results.ts). */
  private readonly results = new KeptResults();
  /**
   * How many jobs no event of which has come yet, waiting or running (as a read said; each its watch's `unheard`):
   * what a fall of the queue count may concern. A job deleted from the queue sends no event, nor does another
   * program's job when it ends. A mark and a count, not a set: 10,000 waiting jobs are all unheard.
   */
  private unheardCount = 0;
  /**
   * Unheard jobs a sweep over a queue that could not be read asked alone, the longest ago first: the next such
   * sweep asks the others first (`unheardLives`). Empty while the queue can be read.
   */
  private readonly askedAlone = new Set<JobLife>();
  /** Jobs running now: what the silence watch looks at. */
  private readonly running = new Set<JobLife>();
  private readonly firstChecks = new Set<JobLife>();
  private firstCheckTimer?: NodeJS.Timeout;
  private queueRead?: { at: number; read: Promise<QueueRead> };
  /** The server's recent run time of a job, for wait estimates: read at most once a minute, when wanted. */
  private runTime?: { at: number; ms: Promise<number | undefined> };
  /** The sweep after a queue change, the quiet checks and the silence watch (check-timers.ts). */
  private readonly timers: CheckTimers;
  private changeCount = 0;
  /** Lives an await of which wants progress (their queue places are told). */
  private progressLives = 0;
  private readonly checks = new Limiter(CHECKS_AT_ONCE);
  /**
   * Aborts the requests shared by the jobs (queue reads, run times) when the connection closes or the last job
   * leaves (an await node redeployed while its config node stays): nothing is left open for no one.
   */
  private aborter = sharedAborter();
  private deregister?: () => void;
  private stopListening?: () => void;
  private closed = false;

  constructor(
    private readonly connection: BookConnection,
    timings: Partial<JobTimings> = {},
  ) {
    this.timings = { ...JobBook.defaultTimings, ...timings };
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- read by the timers' getter
    const book = this;
    this.timers = new CheckTimers({
      timings: this.timings,
      get closed() {
        return book.closed;
      },
      get placesWanted() {
        return book.progressLives > 0;
      },
      watches: this.watches,
      get unheardCount() {
        return book.unheardCount;
      },
      unheardLives: () => this.unheardLives(),
      running: this.running,
      watchOf: (life) => this.watchOf(life),
      checkMany: (lives, sweep) => this.checkMany(lives, sweep),
      sockets: () => this.connection.sockets(),
      log: (level, message) => this.log(level, message),
    });
  }

  /** Jobs awaited now. */
  get size(): number {
    return this.watches.size;
  }

  /**
   * Adds an await of a job: it joins the job's life, or starts one. An await of a job that ended lately gets
   * its result at once (before this returns), as does one whose kept events end it.
   */
  attach(promptId: string, job: JobAwait): void {
    if (this.closed) return;
    const remembered = this.results.get(promptId);
    if (remembered !== undefined) {
      job.onEnd(remembered);
      return;
    }
    const present = this.watches.get(promptId);
    if (present) {
      const { life } = present;
      present.awaits = withItem(present.awaits, job);
      if (job.wantsProgress) this.setWantsProgress(life, true);
      job.onChange(life, life.state);
      return;
    }
    this.start();
    const life = new JobLife(promptId, this);
    this.setWantsProgress(life, job.wantsProgress);
    const watch: Watch = {
      life,
      awaits: job,
      quietEvents: 0,
      quietTicks: 0,
      unheard: false,
      // Made when needed: named here, so setting them fills a slot of the record (8 B per job) instead of
      // adding a property store of 40 B to each running or checked job.
      silence: undefined,
      asking: undefined,
    };
    this.watches.set(promptId, watch);
    life.watch = watch;
    const sockets = this.connection.sockets();
    // The life is the listener. Frames it does not need are skipped by the socket only while no await-job
    // node wants progress (each tracker says so when it registers), so it never asks for them itself.
    sockets.subscribe(promptId, life);
    // Taken out of the queue before it was awaited: it will never run.
    if (this.connection.cancels.kindOf(promptId) === 'removed') life.onCancel('removed');
    // Over already: by that, or by the kept events subscribe replayed (an ended life is released).
    if (life.isOver) return;
    if (life.firstEventEpoch === undefined) {
      watch.unheard = true;
      this.unheardCount += 1;
    }
    job.onChange(life, life.state);
    this.timers.armQuietChecks();
    this.timers.armSilenceWatch();
    // A job submitted here on the socket that is still open has every event here or to come: asking the server
    // would only read the list of every job again (a read per round while thousands are submitted). Unless an
    // await wants its progress: its place in the queue (a `queue` progress msg) comes from that read.
    if (job.wantsProgress || !this.connection.heardAll?.(promptId)) {
      this.firstChecks.add(life);
      this.firstCheckTimer ??= setTimeout(() => this.firstCheck(), this.timings.firstCheckMs);
    }
    if (!sockets.isOpen) this.check(life, this.timings.pollInitialMs);
  }

  /** Removes an await (its node closed, or its time ran out); a life with no await left is dropped. */
  detach(promptId: string, job: JobAwait): void {
    const watch = this.watches.get(promptId);
    if (!watch) return;
    const { found, rest } = withoutItem(watch.awaits, job);
    if (!found) return;
    if (rest === undefined) this.release(watch.life, false);
    else {
      watch.awaits = rest;
      this.setWantsProgress(
        watch.life,
        itemsOf(rest).some((other) => other.wantsProgress),
      );
    }
  }

  /**
   * Asks the server about a job now (its event stream said it ended, or stopped short). The queue read the
   * jobs share may be from before (it is kept up to `queueFreshMs`) and still say `running`: this check asks
   * about the job alone. Against the real comfy-api-proxy a check that reused it waited for the next poll,
   * 2.3 s later in 3 runs of 4; and one read of the job costs the proxy one ComfyUI call, a list one per job.
   */
  checkNow(promptId: string): void {
    const watch = this.watches.get(promptId);
    if (!watch) return;
    askingOf(watch, this.timings.pollInitialMs).askAlone = true;
    this.check(watch.life, 0);
  }

  /** Every job of one await's, for the tracker's summary in constant time. */
  lifeOf(promptId: string): JobLife | undefined {
    return this.watches.get(promptId)?.life;
  }

  /** Sets whether an await of a life wants progress, counting the lives that do. */
  private setWantsProgress(life: JobLife, wants: boolean): void {
    if (life.wantsProgress !== wants) this.progressLives += wants ? 1 : -1;
    life.wantsProgress = wants;
  }

  /** Stops following every job (their awaits are the trackers' to end) and leaves the socket. */
  close(): void {
    this.closed = true;
    this.aborter.abort();
    clearTimeout(this.firstCheckTimer);
    this.timers.stop();
    for (const watch of [...this.watches.values()]) this.release(watch.life, false);
    this.stopListening?.();
    this.deregister?.();
    this.stopListening = this.deregister = undefined;
  }

  // --- LifeHost: what lives ask of the book ---

  check(life: JobLife, delayMs: number): void {
    const watch = this.watchOf(life);
    if (!watch || this.closed) return;
    const asking = askingOf(watch, this.timings.pollInitialMs);
    const at = Date.now() + Math.max(0, delayMs);
    if (asking.checkTimer && asking.checkAt <= at) return;
    clearTimeout(asking.checkTimer);
    asking.checkAt = at;
    asking.checkTimer = setTimeout(() => {
      asking.checkTimer = undefined;
      asking.checkAt = 0;
      void this.checkOne(life);
    }, delayMs);
  }

  readEnded(life: JobLife, delayMs: number): void {
    const watch = this.watchOf(life);
    if (!watch || this.closed) return;
    const asking = askingOf(watch, this.timings.pollInitialMs);
    clearTimeout(asking.readTimer);
    asking.readTimer = setTimeout(() => {
      asking.readTimer = undefined;
      const signal = requestsOf(asking).signal;
      this.checks
        .run(() => this.connection.lookup.ended(life.promptId, signal))
        .then(
          (answer) => life.onEndedRead(answer),
          () => undefined,
        );
    }, delayMs);
  }

  changed(life: JobLife, previous: LifeState): void {
    const watch = this.watchOf(life);
    // The marks and sets change with the state (and the first event), not per event: a progress event moves on.
    if (previous !== life.state || watch?.unheard) {
      if (watch?.unheard && (life.firstEventEpoch !== undefined || life.isOver)) this.markHeard(watch);
      if (life.state === 'running') {
        if (!this.running.has(life)) {
          this.running.add(life);
          this.timers.armSilenceWatch();
        }
      } else this.running.delete(life);
    }
    life.lastChange = ++this.changeCount;
    if (!watch) return;
    const awaits = watch.awaits;
    // One await is the common case: no array, no iterator per event.
    if (!Array.isArray(awaits)) awaits.onChange(life, previous);
    else for (const job of awaits) job.onChange(life, previous);
  }

  progress(life: JobLife, progress: JobProgress): void {
    const watch = this.watchOf(life);
    if (!watch) return;
    for (const job of itemsOf(watch.awaits)) if (job.wantsProgress) job.onProgress(progress);
  }

  finished(life: JobLife, result: JobResult): void {
    const watch = this.watchOf(life);
    if (!watch) return;
    this.release(life, true);
    // Kept for later awaits; not a lost or refused end, which a later check may see otherwise.
    if (life.state === 'completed' || life.state === 'failed' || life.state === 'cancelled')
      this.results.keep(life.promptId, result);
    // Each await gets a result no other await shares, nor the one kept: a flow may change its msg's outputs
    // in place (a change node on msg.payload), which must not reach what another await of the job is given.
    itemsOf(watch.awaits).forEach((job, index) => job.onEnd(index === 0 ? result : copyJson(result)));
  }

  cancelledHere(promptId: string): boolean {
    return this.connection.cancels.isCancelled(promptId);
  }

  // --- asking the server ---

  /** Registers with the socket manager (without opening it) and with the cancels of the connection. */
  private start(): void {
    if (this.deregister || this.closed) return;
    this.stopListening = this.connection.cancels.listen((promptId, kind) => this.onCancel(promptId, kind));
    this.deregister = this.connection.sockets().register({
      onQueueStatus: (count, _data, previous) => {
        // The queue changed: the next check reads it anew.
        this.queueRead = undefined;
        this.timers.queueChanged(count, previous);
      },
      onConnectionState: (state, reconnected) => this.onConnectionState(state, reconnected),
    });
  }

  private onCancel(promptId: string, kind: CancelKind): void {
    this.watches.get(promptId)?.life.onCancel(kind);
  }

  private onConnectionState(state: ConnectionState, reconnected: boolean): void {
    // A queue read from before the reconnect may predate the jobs' ends.
    if (reconnected) this.queueRead = undefined;
    if (state === 'open') {
      for (const watch of this.watches.values())
        if (watch.asking) watch.asking.pollDelay = this.timings.pollInitialMs;
      if (!reconnected) return;
      // Whatever happened while the socket was down is only known over REST; a check already under way may
      // have asked before the job ended, so it does not count as this one.
      const lives = [...this.watches.values()].map((watch) => watch.life);
      for (const life of lives) life.onReconnect();
      void this.checkMany(lives);
    } else {
      for (const watch of this.watches.values())
        this.check(watch.life, watch.asking?.pollDelay ?? this.timings.pollInitialMs);
    }
  }

  /** The queue, read at most once per `queueFreshMs` (a reconnect or a queue change starts a new read). */
  private readQueue(): Promise<QueueRead> {
    const now = Date.now();
    if (!this.queueRead || now - this.queueRead.at >= this.timings.queueFreshMs) {
      const read = this.connection.lookup
        .queue(this.aborter.signal, this.watches.size)
        .then(async (answer) => {
          if (answer.kind === 'read') await this.placeWaiting(answer);
          return answer;
        })
        .catch((error: unknown): QueueRead => ({
          kind: 'unreadable',
          reason: 'failed',
          message: errorText(error),
        }));
      this.queueRead = { at: now, read };
    }
    return this.queueRead.read;
  }

  /**
   * Every waiting job's place from a queue read (how many jobs run before it), with an estimate of its wait
   * where an await wants progress and the server reports run times.
   */
  private async placeWaiting(read: Extract<QueueRead, { kind: 'read' }>): Promise<void> {
    if (this.unheardCount === 0) return;
    let perJobMs: number | undefined;
    for (const { life, unheard } of this.watches.values()) {
      if (!unheard || !life.wantsProgress) continue;
      const now = Date.now();
      if (!this.runTime || now - this.runTime.at >= RUN_TIME_FRESH_MS) {
        this.runTime = {
          at: now,
          ms: this.connection.lookup.runTimeMs(this.aborter.signal).catch(() => undefined),
        };
      }
      perJobMs = await this.runTime.ms;
      break;
    }
    // The jobs unheard now, after the wait: one awaited meanwhile is placed too, one heard meanwhile is not.
    for (const { life, unheard } of this.watches.values()) {
      const ahead = unheard ? read.ahead.get(life.promptId) : undefined;
      if (ahead === undefined) continue;
      life.onPlaced(ahead, perJobMs === undefined ? undefined : Math.round((ahead * perJobMs) / 1000));
    }
  }

  /** One job: the shared queue read answers for it when it lists it; else its own routes are asked. */
  private async checkOne(life: JobLife): Promise<void> {
    const watch = this.watchOf(life);
    if (!watch || life.isOver) return;
    const asking = askingOf(watch, this.timings.pollInitialMs);
    if (asking.checking) {
      asking.recheck = true;
      return;
    }
    asking.checking = true;
    const alone = asking.askAlone;
    asking.askAlone = false;
    const signal = requestsOf(asking).signal;
    let answer: LookupAnswer | undefined;
    try {
      answer = await this.checks.run(async (): Promise<LookupAnswer | undefined> => {
        if (life.isOver || signal.aborted) return undefined;
        if (alone) return this.connection.lookup.status(life.promptId, signal);
        const queued = phaseInQueue(await this.readQueue(), life.promptId);
        if (queued === 'running' || queued === 'pending') return { kind: 'phase', phase: queued };
        return this.connection.lookup.status(life.promptId, signal, () => this.readQueue());
      });
    } catch {
      answer = undefined; // stopped by the close, or the job's last await left
    }
    asking.checking = false;
    if (!answer || life.isOver || !this.watchOf(life)) return;
    if (asking.recheck) {
      asking.recheck = false;
      void this.checkOne(life);
      return;
    }
    if (answer.kind === 'unreadable')
      this.log('debug', `status check of ${life.promptId}: ${answer.message}`);
    life.onAnswer(answer);
    if (!life.isOver && !this.connection.sockets().isOpen) {
      this.check(life, asking.pollDelay);
      asking.pollDelay = Math.min(this.timings.pollMaxMs, Math.round(asking.pollDelay * 1.5));
    }
  }

  /**
   * Many jobs at once: one queue read answers for every job it lists (no request each); only the ones it does
   * not list (ended, unknown) or a queue that could not be read make a request each. A job whose check is under
   * way is checked again after it. Resolves when every check of the round is done.
   */
  private async checkMany(lives: JobLife[], sweep = false): Promise<number> {
    const due = lives.filter((life) => {
      const watch = this.watchOf(life);
      if (!watch || life.isOver) return false;
      if (!watch.asking?.checking) return true;
      watch.asking.recheck = true;
      return false;
    });
    if (due.length === 0 || this.closed) return 0;
    const reading = this.readQueue();
    const readAt = this.queueRead?.at ?? 0;
    const read = await reading;
    const alone: Array<Promise<void>> = [];
    let leftOut = 0;
    for (const life of due) {
      if (life.isOver || !this.watchOf(life)) continue;
      const queued = phaseInQueue(read, life.promptId);
      if (queued === 'running' || queued === 'pending') life.onQueued(queued);
      else if (sweep && read.kind === 'read' && life.awaitedAt >= readAt) leftOut += 1;
      else if (sweep && read.kind !== 'read' && alone.length >= SWEEP_ALONE) continue;
      else {
        // A sweep over a queue that could not be read asks a few jobs alone, those asked longest ago: to the back.
        if (sweep && read.kind !== 'read') {
          this.askedAlone.delete(life);
          this.askedAlone.add(life);
        }
        alone.push(this.checkOne(life));
      }
    }
    await Promise.all(alone);
    return leftOut;
  }

  /** The first check of the jobs awaited since the last round: the ones whose events are not arriving. */
  private firstCheck(): void {
    this.firstCheckTimer = undefined;
    const sockets = this.connection.sockets();
    const due = [...this.firstChecks].filter(
      (life) =>
        !(life.firstEventEpoch !== undefined && life.firstEventEpoch === sockets.epoch && sockets.isOpen),
    );
    this.firstChecks.clear();
    void this.checkMany(due);
  }

  /** Frees a life: its timers, its subscription (`ended`: its later events are dropped), its place in sets. */
  private release(life: JobLife, ended: boolean): void {
    const watch = this.watchOf(life);
    if (!watch) return;
    const asking = watch.asking;
    if (asking) {
      clearTimeout(asking.checkTimer);
      clearTimeout(asking.readTimer);
      asking.requests?.abort();
    }
    this.watches.delete(life.promptId);
    life.watch = undefined;
    if (life.wantsProgress) this.progressLives -= 1;
    if (watch.unheard) this.markHeard(watch);
    this.askedAlone.delete(life);
    this.running.delete(life);
    this.firstChecks.delete(life);
    this.connection.sockets().unsubscribe(life.promptId, life, { ended });
    if (this.watches.size === 0) {
      this.timers.stopQuietChecks();
      this.aborter.abort();
      if (!this.closed) this.aborter = sharedAborter();
      this.queueRead = this.runTime = undefined;
      // The socket may close once no user is left.
      this.stopListening?.();
      this.deregister?.();
      this.stopListening = this.deregister = undefined;
    }
  }

  /**
   * The jobs no event of which has come yet, in the order a sweep asks them: those no sweep asked alone in the
   * order they were awaited, then those asked alone, the longest ago first.
   */
  private unheardLives(): JobLife[] {
    const lives: JobLife[] = [];
    for (const watch of this.watches.values())
      if (watch.unheard && !this.askedAlone.has(watch.life)) lives.push(watch.life);
    for (const life of this.askedAlone) if (this.watchOf(life)?.unheard) lives.push(life);
    return lives;
  }

  private markHeard(watch: Watch): void {
    watch.unheard = false;
    this.unheardCount -= 1;
  }

  /** The watch of this life; none once it was released (a later life of the same prompt_id is another's). */
  private watchOf(life: JobLife): Watch | undefined {
    return life.watch as Watch | undefined;
  }

  private log(level: 'debug' | 'warn', message: string): void {
    this.connection.log?.(level, message);
  }
}

function sharedAborter(): AbortController {
  const aborter = new AbortController();
  // Each shared request in flight listens to the signal, and a burst of checks may wait on one queue read:
  // more listeners than Node's default of 10 are expected, not a leak.
  setMaxListeners(1000, aborter.signal);
  return aborter;
}
