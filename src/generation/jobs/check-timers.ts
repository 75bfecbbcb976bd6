/**
 * The job book's timers (job-book.ts) that find jobs to check without an answer asking for it: the sweep of jobs with
 * no event yet after the queue count fell (a job deleted from the queue sends no event, nor does another program's job
 * when it ends), the quiet check of jobs with no event for long, and the silence watch (a socket the server no longer
 * sends to, Comfy-Org/ComfyUI#16010; a whole socket that says nothing). Each is one timer for all jobs, so their checks
 * share one queue read (the book's checkMany). Apart from the book because they only read its jobs and ask it to check
 * some; what a check asks and what an answer means stay the book's and the lives'. No Node-RED inside.
 */
import type { JobLife } from './job-life';
import type { JobEventSource } from './job-ports';
import type { JobTimings, Watch } from './job-watch';

/** What the timers read of the book, and what they ask of it. */
export interface TimedBook {
  readonly timings: JobTimings;
  /** Closed for good: no timer is armed again. */
  readonly closed: boolean;
  /** Every job awaited, by prompt_id. */
  readonly watches: ReadonlyMap<string, Watch>;
  /** How many jobs no event of which has come yet, waiting or running (a sweep checks them). */
  readonly unheardCount: number;
  /** Those jobs, in the order a sweep asks them. */
  unheardLives(): JobLife[];
  /** An await of a job wants progress: its queue place is told, and changes with any change of the queue. */
  readonly placesWanted: boolean;
  /** Jobs running now. */
  readonly running: ReadonlySet<JobLife>;
  watchOf(life: JobLife): Watch | undefined;
  /**
   * Checks these jobs (one queue read for all); resolves when every check is done. `sweep`: a job awaited after
   * the shared read began is left out (the read cannot list it; asking for it alone is a request each), and the
   * count of those left out is what it resolves to.
   */
  checkMany(lives: JobLife[], sweep?: boolean): Promise<number>;
  sockets(): JobEventSource;
  log(level: 'debug' | 'warn', message: string): void;
}

const SWEEP_SETTLE_MS = 300;
const SWEEP_INTERVAL_MS = 2_000;
/** How much further apart sweeps come per waiting job (10,000 waiting: every 5 s). */
const SWEEP_MS_PER_WAITING_JOB = 0.5;
const SILENCE_TICK_MS = 1_000;

export class CheckTimers {
  private sweepTimer?: NodeJS.Timeout;
  private lastSweep = 0;
  private quietTimer?: NodeJS.Timeout;
  private silenceTimer?: NodeJS.Timeout;
  private lastFrames = -1;
  private lastFrameAt = 0;
  /** When every job was last checked because the whole socket was silent. */
  private socketSilenceCheckedAt = 0;

  constructor(private readonly book: TimedBook) {}

  /** Stops every timer (the book closes). */
  stop(): void {
    clearTimeout(this.sweepTimer);
    clearInterval(this.quietTimer);
    clearInterval(this.silenceTimer);
    this.quietTimer = this.silenceTimer = undefined;
  }

  /** Stops the quiet checks (the book's last job left). */
  stopQuietChecks(): void {
    clearInterval(this.quietTimer);
    this.quietTimer = undefined;
  }

  /**
   * A `status` frame: the queue changed. A self-hosted server sends one per change, in order, with the count at that
   * change (ComfyUI's PromptQueue, v0.8.0 to v0.33.0: a submit adds one, a start leaves it, an end or a deletion takes
   * one off). A deleted job sends no event of its own, nor does another program's job when it ends, but each lowers the
   * count, so a count that did not fall asks for no sweep: 10,000 submits made 2-3 reads of a list of up to 10,000 jobs
   * for nothing, each holding the event loop for 30-70 ms. A count not given, or one with none to compare (the first on
   * a socket, or after a frame that could not be read; frame-reader.ts) sweeps as any change did. A server that sent
   * one frame for several changes could hide a deletion behind more submits: the next end or deletion, or the quiet
   * check (`quietCheckMs`), finds it. While an await shows queue places, every change sweeps as before: a job put
   * before the others (ComfyUI's `front`) moves every place.
   */
  queueChanged(count: number | undefined, previous: number | undefined): void {
    const fell = count === undefined || previous === undefined || count < previous;
    if (fell || this.book.placesWanted) this.scheduleSweep();
  }

  /**
   * The queue changed: a job with no event yet may have been deleted, or (another program's, seen running by a
   * read) may have ended. One queue read answers for every such job, so a sweep checks them all (one awaited
   * after the read began, at the next sweep, even if the queue says nothing more). Sweeps come at most every
   * 2 s, and further apart the more jobs wait (SWEEP_MS_PER_WAITING_JOB): the read lists them all, and a read of
   * 30,000 held the event loop for up to 150 ms.
   */
  scheduleSweep(): void {
    if (this.sweepTimer || this.book.closed || this.book.unheardCount === 0) return;
    const interval = Math.max(SWEEP_INTERVAL_MS, this.book.unheardCount * SWEEP_MS_PER_WAITING_JOB);
    const wait = Math.max(SWEEP_SETTLE_MS, this.lastSweep + interval - Date.now());
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      this.lastSweep = Date.now();
      void this.book.checkMany(this.book.unheardLives(), true).then((leftOut) => {
        if (leftOut) this.scheduleSweep();
      });
    }, wait);
  }

  /** Jobs silent for a long while with the socket up: one timer for all, so their checks share a queue read. */
  armQuietChecks(): void {
    if (this.quietTimer || this.book.closed) return;
    const interval = Math.max(50, this.book.timings.quietCheckMs / 4);
    // Silent for at least quietCheckMs: the tick of its last event may have been nearly over.
    const ticksQuiet = Math.ceil(this.book.timings.quietCheckMs / interval) + 1;
    this.quietTimer = setInterval(() => {
      if (this.book.watches.size === 0) {
        clearInterval(this.quietTimer);
        this.quietTimer = undefined;
        return;
      }
      const quiet: JobLife[] = [];
      for (const watch of this.book.watches.values()) {
        const { life } = watch;
        if (life.events !== watch.quietEvents) {
          watch.quietEvents = life.events;
          watch.quietTicks = 0;
        } else if (++watch.quietTicks >= ticksQuiet) {
          watch.quietTicks = 0;
          quiet.push(life);
        }
      }
      void this.book.checkMany(quiet);
    }, interval);
  }

  /**
   * Once a second while jobs are awaited: every job when the whole socket has been silent for socketSilentMs
   * (one queue read answers for the ones it lists). And while jobs run: a running job whose events have
   * stopped while the whole socket is silent
   * for 4x the widest gap between its events so far (within silentMinMs..silentMaxMs; silentMaxMs for a job
   * known to run from a check but with no event yet) is checked. If it moved
   * on without a frame arriving meanwhile, the server no longer sends to this socket: it is opened again. A job
   * still running (a long node) doubles its wait, up to the quiet period.
   */
  armSilenceWatch(): void {
    if (this.silenceTimer || this.book.closed) return;
    this.lastFrameAt = Date.now();
    this.silenceTimer = setInterval(() => this.silenceTick(), SILENCE_TICK_MS);
    this.silenceTimer.unref();
  }

  private silenceTick(): void {
    if (this.book.watches.size === 0) {
      clearInterval(this.silenceTimer);
      this.silenceTimer = undefined;
      return;
    }
    const now = Date.now();
    const sockets = this.book.sockets();
    const frames = sockets.stats.framesReceived;
    if (frames !== this.lastFrames || !sockets.isOpen) {
      this.lastFrames = frames;
      this.lastFrameAt = now;
    }
    const suspects: JobLife[] = [];
    for (const life of this.book.running) {
      const watch = this.book.watchOf(life);
      if (!watch) continue;
      const silence = (watch.silence ??= {
        seenEvents: 0,
        lastEventAt: life.awaitedAt,
        widestGap: 0,
        checkedAt: 0,
        backoff: 1,
      });
      if (life.events !== silence.seenEvents) {
        if (silence.seenEvents > 0)
          silence.widestGap = Math.max(silence.widestGap, now - silence.lastEventAt);
        silence.seenEvents = life.events;
        silence.lastEventAt = now;
        silence.backoff = 1;
      }
      const { silentMinMs, silentMaxMs, quietCheckMs } = this.book.timings;
      // Known to run from a check with no event seen (a resumed await, another client's job), silent since it
      // was attached: no gap to go by, so the longest usual wait.
      const usual =
        silence.seenEvents > 0
          ? Math.min(silentMaxMs, Math.max(silentMinMs, 4 * silence.widestGap))
          : silentMaxMs;
      const limit = Math.min(quietCheckMs, usual * silence.backoff);
      if (
        now - this.lastFrameAt >= limit &&
        now - silence.lastEventAt >= limit &&
        now - silence.checkedAt >= limit
      ) {
        silence.checkedAt = now;
        suspects.push(life);
      }
    }
    if (suspects.length > 0) void this.silenceCheck(suspects, frames);
    const { socketSilentMs } = this.book.timings;
    if (
      sockets.isOpen &&
      now - this.lastFrameAt >= socketSilentMs &&
      now - this.socketSilenceCheckedAt >= socketSilentMs
    ) {
      this.socketSilenceCheckedAt = now;
      void this.book.checkMany([...this.book.watches.values()].map((watch) => watch.life));
    }
  }

  private async silenceCheck(lives: JobLife[], frames: number): Promise<void> {
    const before = lives.map((life) => life.state);
    await this.book.checkMany(lives);
    const sockets = this.book.sockets();
    let movedOn = false;
    lives.forEach((life, index) => {
      if (life.state !== before[index]) movedOn = true;
      const watch = this.book.watchOf(life);
      if (watch?.silence) watch.silence.backoff *= 2;
    });
    if (movedOn && sockets.isOpen && sockets.stats.framesReceived === frames) {
      this.book.log(
        'warn',
        'graph-gen: a job moved on while the socket stayed silent; opening the socket again',
      );
      sockets.reopen();
    }
  }
}
