/**
 * What a failed request tells beyond its ServiceError, kept in weak sets beside the error so a ServiceError stays
 * the contract's shape: whether it may have reached the service (a submit whose answer was lost is settled, never
 * sent again elsewhere), whether it failed on the way to the host (a certificate, a proxy) and for good; and,
 * within one attempt, whether a network failure came before a byte left (safe to repeat even a POST). Apart from
 * the client (client.ts), which marks them, because what reads the marks (the dialects, the pool) needs no client;
 * client.ts re-exports what they read.
 */
import { errors as undiciErrors } from 'undici';
import { ServiceError } from './errors';

/** undici codes that mean the request never left: safe to repeat even for a POST. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** Failures that trying again cannot mend (a certificate not trusted, a proxy that refuses the host). */
const permanentFailures = new WeakSet<object>();
/** Failures on the way to a host (TLS, a proxy), whose sentence says what to fix. */
const onTheWayFailures = new WeakSet<object>();

/** Whether a request failed on the way (its certificate, a proxy): its message then says what to fix. */
export function failedOnTheWay(error: unknown): boolean {
  return typeof error === 'object' && error !== null && onTheWayFailures.has(error);
}

/** Marks a failure as one on the way to a host (its sentence says what to fix), and `permanent` as one for good. */
export function markedOnTheWay<E extends object>(failure: E, permanent: boolean): E {
  if (permanent) permanentFailures.add(failure);
  onTheWayFailures.add(failure);
  return failure;
}

/** Whether trying again cannot mend this failure (a certificate not trusted, a proxy that refuses the host). */
export function failsForGood(error: object): boolean {
  return permanentFailures.has(error);
}

/** Network failures of requests whose body may have reached the service (the connection broke after it left). */
const maybeSent = new WeakSet<object>();

/**
 * Whether a failed request may have reached the service: its connection broke after the request left, so the
 * service may have acted on it (a submit whose answer was lost); or a proxy took it and answered that it could
 * not reach the server behind it (a v2 proxy's 503 `upstream_unreachable`). False for one that never left.
 */
export function mayHaveReachedService(error: unknown): boolean {
  return typeof error === 'object' && error !== null && maybeSent.has(error);
}

/**
 * Marks a failure as one whose request may have reached the service (a submit the service could not be asked
 * about afterwards): whoever reads it must not send the request anywhere else (a pool's failover).
 */
export function mayHaveReached<E extends object>(error: E): E {
  maybeSent.add(error);
  return error;
}

/**
 * Whether a submit that failed so must be settled before anything else is done: it may have reached the service
 * (mayHaveReachedService), it was the first attempt, and the caller did not stop it. Each dialect settles it its
 * own way (by the job's id, or by its key among the jobs); none sends it blindly again.
 */
export function outcomeUnknown(error: unknown, attempt: number, signal?: AbortSignal): error is ServiceError {
  return !signal?.aborted && attempt === 0 && error instanceof ServiceError && mayHaveReachedService(error);
}

/** One attempt's network failure, and whether its request may have left (then only an idempotent one is repeated). */
export class NetworkFailure extends Error {
  constructor(
    readonly sent: boolean,
    readonly original: unknown,
  ) {
    super('network failure');
  }
}

/** An error answer, with the wait its Retry-After asked for. */
export interface RetryableServiceError extends ServiceError {
  retryAfterMs?: number;
}

/** Whether a failure came before a byte of the request left: safe to repeat even a POST. */
export function isNotSent(error: unknown): boolean {
  const code = (error as { code?: string } | undefined)?.code;
  if (code && NOT_SENT_CODES.has(code)) return true;
  // A proxy that refused the tunnel never passed the request on.
  if (error instanceof undiciErrors.RequestAbortedError && /^Proxy response/.test(error.message)) return true;
  return error instanceof undiciErrors.ConnectTimeoutError;
}
