/**
 * Who hears which job's events on the shared socket (socket-manager.ts carries the frames; this hands out what
 * they tell): the listeners of each prompt_id, the listeners of every job, and the events of jobs nobody awaits
 * yet (kept-events.ts), replayed in order to each new listener of the job. A listener that throws is logged and
 * never reaches the socket. Apart from the connection's life because who listens does not change with it: a
 * reconnect keeps every listener and every kept event. No Node-RED inside.
 */
import { errorText } from '../../boundary/outside';
import { KeptEvents } from './kept-events';
import { itemsOf, withItem, withoutItem, type OneOrMany } from './one-or-many';
import type {
  BufferLimits,
  EveryJobListener,
  JobListener,
  LogLevel,
  SocketEvent,
  SocketStats,
} from './socket-events';

export class SocketSubscriptions {
  /** By prompt_id. Nearly always one listener (the book's): the listener itself, no array (one-or-many.ts). */
  private readonly listeners = new Map<string, OneOrMany<JobListener>>();
  /** Listeners to every job's events; none: dispatch pays one size check. */
  private readonly everyJob = new Set<EveryJobListener>();
  /** Events of jobs nobody awaits yet, for the await that comes. */
  private readonly kept: KeptEvents;

  constructor(
    limits: BufferLimits,
    stats: SocketStats,
    private readonly log: (level: LogLevel, message: string) => void,
  ) {
    this.kept = new KeptEvents(limits, stats);
  }

  /** Jobs that have a listener now. */
  get size(): number {
    return this.listeners.size;
  }

  /** Adds a listener of this job; its kept events are replayed to it by `replay`. */
  add(promptId: string, listener: JobListener): void {
    this.listeners.set(promptId, withItem(this.listeners.get(promptId), listener));
    this.kept.awaited(promptId);
  }

  /**
   * Gives the listener the job's kept events, in order. They stay (and grow with live ones) while the job is
   * awaited, so a second await of the same job is replayed the same events; they go when its last await leaves.
   */
  replay(promptId: string, listener: JobListener): void {
    for (const event of this.kept.eventsOf(promptId)) this.deliver(listener, event);
  }

  /**
   * Removes one listening of this listener to this job; false when it did not listen. When it was the job's last,
   * `ended` also drops the job's later events instead of keeping them for a later await.
   */
  remove(promptId: string, listener: JobListener, ended: boolean): boolean {
    const { found, rest } = withoutItem(this.listeners.get(promptId), listener);
    if (!found) return false;
    if (rest !== undefined) this.listeners.set(promptId, rest);
    else {
      this.listeners.delete(promptId);
      this.kept.release(promptId, ended);
    }
    return true;
  }

  /** Adds a listener of every job's events, none kept from before; the returned function removes it. */
  watchAll(listener: EveryJobListener): () => void {
    this.everyJob.add(listener);
    return () => this.everyJob.delete(listener);
  }

  /** Forgets every listener and every kept event (the socket closes for good). */
  clear(): void {
    this.kept.clear();
    this.listeners.clear();
    this.everyJob.clear();
  }

  /** Whether other awaits already listen to this job (a new one has missed their earlier events). */
  isListened(promptId: string): boolean {
    return this.listeners.has(promptId);
  }

  /** Whether an event of this job was lost while nobody awaited it (kept-events.ts). */
  lostEvents(promptId: string): boolean {
    return this.kept.lostEvents(promptId);
  }

  /** Whether events of this job are kept (a new await is replayed them all). */
  isKept(promptId: string): boolean {
    return this.kept.has(promptId);
  }

  /** Bytes of the events kept for later awaits. */
  get keptBytes(): number {
    return this.kept.bytes;
  }

  /** Number of prompt_ids whose events are kept for a later await. */
  get keptJobs(): number {
    return this.kept.count;
  }

  /** One job's event, to its listeners and to every job's; kept for a later await. */
  dispatch(promptId: string, event: SocketEvent): void {
    if (this.everyJob.size > 0)
      for (const listener of [...this.everyJob]) this.safely(() => listener(promptId, event));
    const listeners = this.listeners.get(promptId);
    if (listeners) {
      // One listener is the common case: no array, no copy per event.
      if (!Array.isArray(listeners)) this.deliver(listeners, event);
      else for (const listener of itemsOf(listeners)) this.deliver(listener, event);
      // A job awaited after its events were kept keeps them all, for a further await of it.
      this.kept.offer(promptId, event, true);
      return;
    }
    this.kept.offer(promptId, event, false);
  }

  private deliver(listener: JobListener, event: SocketEvent): void {
    try {
      listener.onEvent(event);
    } catch (error) {
      this.log('warn', `graph-gen socket: a listener failed: ${errorText(error)}`);
    }
  }

  private safely(call: () => void): void {
    try {
      call();
    } catch (error) {
      this.log('warn', `graph-gen socket: a listener failed: ${errorText(error)}`);
    }
  }
}
