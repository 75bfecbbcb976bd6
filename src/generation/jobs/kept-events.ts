/**
 * The events of jobs nobody awaits yet, kept for the await that comes (`submit -> delay -> await` loses nothing),
 * and replayed to every await of the job while it is awaited. Bounded in events per job (progress and previews
 * make room first), in jobs, in age (a timer forgets old jobs though no new event comes) and in bytes (the oldest
 * jobs make room). A job whose await ended is remembered, so its late events (`executing` null...) are dropped,
 * not kept. A job that lost an event its result depends on to a bound is remembered too, and its replay says so
 * (`eventsLost` on its first replayed event): its await reads the outputs over REST, or ends `outputs_incomplete`,
 * never whole from what is left. No Node-RED inside.
 */
import { RecentMap } from './recent-map';
import type { BufferLimits, SocketEvent, SocketStats } from './socket-events';

interface KeptJob {
  firstAt: number;
  events: SocketEvent[];
}

/** A replayed event; the first of a job that lost events to a bound says so. */
export interface ReplayedEvent extends SocketEvent {
  readonly eventsLost?: true;
}

/** Events dropped first when a kept job's buffer is full: the result does not depend on them. */
const LOSSY_EVENTS = new Set(['progress', 'progress_state', 'preview', 'text']);
/** At least this many of the latest ended prompt_ids are remembered (their late events are dropped). */
const ENDED_MEMORY = 4096;

/** What a kept event holds on to: its frame's size on the wire, or its binary frame's content. */
function eventBytes(event: SocketEvent | undefined): number {
  if (!event) return 0;
  if (event.bytes !== undefined) return event.bytes;
  const frame = event.frame;
  if (!frame) return 0;
  return frame.type === 3 ? Buffer.byteLength(frame.text) + frame.nodeId.length : frame.image.length;
}

export class KeptEvents {
  private readonly jobs = new Map<string, KeptJob>();
  private readonly ended = new RecentMap<string, true>(ENDED_MEMORY);
  /** Jobs that lost an event their result depends on (not a progress one) while nobody awaited them. */
  private readonly lost = new RecentMap<string, true>(ENDED_MEMORY);
  private size = 0;
  private ageTimer?: NodeJS.Timeout;

  constructor(
    private readonly limits: BufferLimits,
    private readonly stats: Pick<SocketStats, 'eventsBuffered' | 'bufferedEventsDropped'>,
  ) {}

  /** Bytes of the events kept. */
  get bytes(): number {
    return this.size;
  }

  /** prompt_ids whose events are kept. */
  get count(): number {
    return this.jobs.size;
  }

  has(promptId: string): boolean {
    return this.jobs.has(promptId);
  }

  /** Whether the job lost an event its result depends on while nobody awaited it. */
  lostEvents(promptId: string): boolean {
    return this.lost.has(promptId);
  }

  /**
   * The job's kept events, in order (a copy: a replay may keep more). When it lost an event to a bound, the
   * first says so (a copy of it: the kept one stays as it came). One that lost all it had is replayed none: its
   * await never saw it start, which alone makes its end come from REST.
   */
  eventsOf(promptId: string): ReplayedEvent[] {
    const events: ReplayedEvent[] = [...(this.jobs.get(promptId)?.events ?? [])];
    if (events.length > 0 && this.lost.has(promptId)) events[0] = { ...events[0], eventsLost: true };
    return events;
  }

  /** An await of the job began: its events are kept again, even if an earlier await of it ended. */
  awaited(promptId: string): void {
    this.ended.delete(promptId);
  }

  /**
   * An event that no await (`listened` false) or an await of a job whose events are kept already hears: kept.
   * A job awaited while nothing was kept needs none: its await hears it live.
   */
  offer(promptId: string, event: SocketEvent, listened: boolean): void {
    if (listened ? this.jobs.has(promptId) : !this.ended.has(promptId)) this.keep(promptId, event);
  }

  /** The job's last await left: its events go; `ended`: its later events are dropped, not kept. */
  release(promptId: string, ended: boolean): void {
    const kept = this.jobs.get(promptId);
    if (kept) this.forget(promptId, kept);
    this.lost.delete(promptId);
    if (ended) this.ended.set(promptId, true);
  }

  clear(): void {
    this.jobs.clear();
    this.size = 0;
    clearInterval(this.ageTimer);
    this.ageTimer = undefined;
  }

  private keep(promptId: string, event: SocketEvent): void {
    const size = eventBytes(event);
    const now = Date.now();
    let entry = this.jobs.get(promptId);
    // Map order is insertion order: the oldest kept jobs are at the front, and make room first.
    for (const [id, kept] of this.jobs) {
      const full = this.size + size > this.limits.keptBytes || (!entry && this.jobs.size >= this.limits.jobs);
      if (!full && now - kept.firstAt <= this.limits.maxAgeMs) break;
      if (id === promptId) break;
      this.forget(id, kept);
      this.lose(id, kept.events);
    }
    if (this.size + size > this.limits.keptBytes) {
      this.lose(promptId, [event]);
      return;
    }
    if (!entry) {
      entry = { firstAt: now, events: [] };
      this.jobs.set(promptId, entry);
      this.ageTimer ??= setInterval(() => this.forgetOld(), Math.max(1000, this.limits.maxAgeMs / 4));
      this.ageTimer.unref();
    }
    entry.events.push(event);
    this.size += size;
    this.stats.eventsBuffered += 1;
    if (entry.events.length > this.limits.eventsPerJob) {
      const lossy = entry.events.findIndex((kept) => LOSSY_EVENTS.has(kept.type));
      const dropped = entry.events.splice(lossy >= 0 ? lossy : 0, 1);
      this.size -= eventBytes(dropped[0]);
      this.lose(promptId, dropped);
    }
  }

  /** Drops kept jobs past their age, on a timer: no new event may come to push them out. */
  private forgetOld(): void {
    const now = Date.now();
    for (const [id, kept] of this.jobs) {
      if (now - kept.firstAt <= this.limits.maxAgeMs) break;
      this.forget(id, kept);
      this.lose(id, kept.events);
    }
    if (this.jobs.size === 0) {
      clearInterval(this.ageTimer);
      this.ageTimer = undefined;
    }
  }

  /** Counts dropped events; a job that lost one its result depends on is remembered for its replay. */
  private lose(promptId: string, events: SocketEvent[]): void {
    this.stats.bufferedEventsDropped += events.length;
    if (events.some((event) => !LOSSY_EVENTS.has(event.type))) this.lost.set(promptId, true);
  }

  private forget(promptId: string, kept: KeptJob): void {
    this.jobs.delete(promptId);
    for (const event of kept.events) this.size -= eventBytes(event);
  }
}
