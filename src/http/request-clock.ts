/**
 * The time limit of one JSON request (the config node's "request time limit"), in three parts:
 * - sending its body: an idle limit, started again whenever a chunk of the body is taken, so an upload that
 *   keeps moving, however long it takes, is never cut, and one the service stopped reading is;
 * - from the end of the body to the answer: the limit, plus the time the service needs to read what may still
 *   wait in the sockets' buffers. Nothing shows how fast those drain (the kernel holds megabytes that the body
 *   stream has already let go of), so that time is estimated from the rate the service was last seen reading
 *   at (a body taken at once tells no rate: then an assumed slow one), for at most what buffers can hold;
 * - the answer's body: a total limit from its headers, so one that trickles a byte at a time ends.
 * No Node-RED inside.
 */

/** The most a sender's and a receiver's socket buffers hold together (Linux grows each to a few MiB). */
const IN_FLIGHT_CAP = 8 * 1024 * 1024;
/** The rate assumed when the body was taken too fast to tell one: a slow line's. */
const ASSUMED_BYTES_PER_SECOND = 1024 * 1024;
/** The sending time over which a rate is told (its last half, past the first burst into the buffers). */
const SHORTEST_RATE_WINDOW_MS = 200;

export type ClockPhase = 'sending' | 'waiting' | 'answering';

export class RequestClock {
  /**
   * One timer per request however often the limit starts again: it is left to run when the new deadline is
   * later (each part of a request moves it later), and set again for what is left when it fires early. A timer
   * made and cleared per part cost a JSON request three of each (thousands of submits at once feel it).
   */
  private timer?: NodeJS.Timeout;
  /** When the limit runs out (ms since the epoch); the timer fires at this or before. */
  private deadline = 0;
  private timerAt = 0;
  private stopped = false;
  private currentPhase: ClockPhase = 'sending';
  private startedAt = 0;
  private bytes = 0;
  /** Progress samples of this attempt: [time, bytes taken so far]. Few: one per chunk of the body. */
  private readonly samples: Array<[number, number]> = [];

  constructor(
    readonly limitMs: number,
    private readonly expire: () => void,
  ) {}

  /** Which part of the request the limit ran out in (for the sentence). */
  get phase(): ClockPhase {
    return this.currentPhase;
  }

  /** An attempt starts sending: the idle limit runs. */
  sending(): void {
    this.currentPhase = 'sending';
    this.startedAt = Date.now();
    this.bytes = 0;
    this.samples.length = 0;
    this.arm(this.limitMs);
  }

  /** A chunk of the body was taken: the idle limit starts again. */
  moved(bytes: number): void {
    if (this.currentPhase !== 'sending') return;
    this.bytes += bytes;
    this.samples.push([Date.now(), this.bytes]);
    this.arm(this.limitMs);
  }

  /** The whole body has been handed to the connection (`size` bytes when no chunk was counted). */
  handedOver(size = 0): void {
    if (this.currentPhase !== 'sending') return;
    if (this.bytes === 0) this.bytes = size;
    this.currentPhase = 'waiting';
    this.arm(this.limitMs + this.drainAllowanceMs());
  }

  /** The answer's headers came: its body must end within the limit. */
  answering(): void {
    if (this.currentPhase === 'answering') return;
    this.currentPhase = 'answering';
    this.arm(this.limitMs);
  }

  /** An attempt failed: nothing is timed while the retry waits. */
  pause(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  stop(): void {
    this.stopped = true;
    this.pause();
  }

  /** How long the service may take to read what may still wait in buffers, at the rate last seen. */
  private drainAllowanceMs(): number {
    const buffered = Math.min(this.bytes, IN_FLIGHT_CAP);
    if (buffered === 0) return 0;
    const now = Date.now();
    const took = now - this.startedAt;
    let rate = ASSUMED_BYTES_PER_SECOND;
    if (took >= SHORTEST_RATE_WINDOW_MS) {
      const from = now - took / 2;
      let before = 0;
      for (const [time, bytes] of this.samples) {
        if (time > from) break;
        before = bytes;
      }
      const seen = ((this.bytes - before) * 1000) / (took / 2);
      if (seen > 0) rate = seen;
    }
    return Math.ceil((buffered * 1000) / rate);
  }

  private arm(ms: number): void {
    if (this.stopped) return;
    const now = Date.now();
    this.deadline = now + ms;
    if (this.timer && this.timerAt <= this.deadline) return;
    clearTimeout(this.timer);
    this.setTimer(now, ms);
  }

  private setTimer(now: number, ms: number): void {
    this.timerAt = now + ms;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const fired = Date.now();
      const left = this.deadline - fired;
      if (left > 0) this.setTimer(fired, left);
      else this.expire();
    }, ms);
  }
}
