/**
 * Retrying with exponential backoff and full jitter, honouring a server's Retry-After. Only callers know
 * which failures are safe to repeat, so they say so through `retryable`.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { attempts: 4, baseDelayMs: 250, maxDelayMs: 8_000 };

/** Full jitter: a random wait between 0 and the capped exponential step. */
export function backoffDelay(
  attempt: number,
  policy: RetryPolicy,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** attempt);
  return Math.floor(random() * ceiling);
}

/** Retry-After in milliseconds, from seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(header: string | string[] | undefined, now = Date.now()): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

export interface RetryDecision {
  retry: boolean;
  /** The server's own wait (Retry-After), used instead of the backoff when longer. */
  afterMs?: number;
}

/**
 * Runs `operation` until it succeeds, `retryable` says no, or the attempts are spent; the last error is
 * thrown. An aborted signal ends the wait at once with the abort reason.
 */
export async function withRetry<T>(
  operation: (attempt: number) => Promise<T>,
  retryable: (error: unknown) => RetryDecision,
  policy: RetryPolicy = DEFAULT_RETRY_POLICY,
  signal?: AbortSignal,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await operation(attempt);
    } catch (error) {
      const decision = retryable(error);
      if (!decision.retry || attempt + 1 >= policy.attempts || signal?.aborted) throw error;
      const wait = Math.min(
        policy.maxDelayMs * 4,
        Math.max(decision.afterMs ?? 0, backoffDelay(attempt, policy)),
      );
      await sleep(wait, undefined, { signal });
    }
  }
}
