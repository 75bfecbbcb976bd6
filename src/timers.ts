/**
 * Timers whose duration a user or a service chose (a node's time limit, a Retry-After). Node keeps a timer's
 * delay in 32 bits: one of 2^31 ms (about 24.8 days) or more is taken as 1 ms, with only a warning, so a
 * "very long" limit would fire at once. Every timer with such a duration is set through here. No Node-RED inside.
 */

/** The longest delay a Node timer keeps as given, in ms (about 24.8 days). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Whether a Node timer keeps `ms` as given: a finite number from 0 to MAX_TIMER_MS. */
export function fitsTimer(ms: number): boolean {
  return Number.isFinite(ms) && ms >= 0 && ms <= MAX_TIMER_MS;
}

/**
 * `ms` as a delay a Node timer keeps: a longer one (Infinity too) waits as long as a timer can, about 24.8
 * days, which for a time limit is as good as none; a negative one or NaN is 0.
 */
export function timerDelay(ms: number): number {
  if (Number.isNaN(ms) || ms <= 0) return 0;
  return Math.min(ms, MAX_TIMER_MS);
}

/** `setTimeout` with a user- or service-given delay. */
export function startTimer(callback: () => void, ms: number): NodeJS.Timeout {
  return setTimeout(callback, timerDelay(ms));
}

/** A signal that aborts after a user- or service-given time (`AbortSignal.timeout`). */
export function timeLimitSignal(ms: number): AbortSignal {
  return AbortSignal.timeout(timerDelay(ms));
}
