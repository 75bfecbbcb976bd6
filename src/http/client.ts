/**
 * A small JSON-over-HTTP client on one undici keep-alive Agent, shared by both services' clients. It adds
 * the service's headers, maps every failure to a ServiceError with the contract's code and a sentence that
 * says what to fix, removes secrets from everything it reports, and retries what is safe to retry:
 * idempotent requests on network failure, 5xx and a 429 with Retry-After; any request whose connection
 * failed before a byte was sent. What a failure tells beyond its code (it may have reached the service, it failed
 * on the way) is marked by request-failures.ts; bodies are read and sent within bounds by bounded-bodies.ts.
 * Past 400 lines: a request, its retries, its limits and the mapping of its failures are one path, read best in
 * one place.
 */
import { EventEmitter } from 'node:events';
import { Readable } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import type { Credential } from './auth';
import {
  ServiceError,
  cleanForReport,
  codeForStatus,
  cutText,
  messageFromBody,
  SecretSearch,
  removeSecrets,
  type ErrorCode,
} from './errors';
import { RequestClock } from './request-clock';
import { DEFAULT_RETRY_POLICY, parseRetryAfter, withRetry, type RetryPolicy } from './retry';
import { errorText, readJsonText, textOf } from '../boundary/outside';
import { Transport, transportFailure, transportSecrets, type TransportSettings } from './transport';
import { TooLarge, bodySize, counted, formatBytes, readText } from './bounded-bodies';
import {
  NetworkFailure,
  failsForGood,
  isNotSent,
  markedOnTheWay,
  mayHaveReached,
  mayHaveReachedService,
  type RetryableServiceError,
} from './request-failures';

/**
 * What cuts one JSON request: its time limit or the caller's signal. An EventEmitter, which undici takes as a
 * request's signal, rather than an AbortController: one is made per request, and an AbortSignal (an
 * EventTarget) costs several times as much to make and to listen to (a tenth of a submit's own CPU when
 * thousands are sent at once).
 */
class RequestAbort extends EventEmitter {
  aborted = false;
  reason: unknown;

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.emit('abort');
  }
}

export { failedOnTheWay, mayHaveReached, mayHaveReachedService, outcomeUnknown } from './request-failures';

export interface HttpClientOptions {
  /** Base address; request paths are appended to it (its own path prefix kept). */
  baseUrl: string;
  /** Headers on every request to the service (auth, accept). Never sent to any other host. */
  headers?: Record<string, string>;
  /** Values that must never appear in an error (keys, tokens). */
  secrets?: Array<string | undefined>;
  /**
   * How requests prove who sends them: its headers are sent on every request, its secrets never reported, and
   * a 401 or 403 says which scheme was refused. Absent: `headers` and `secrets` only, and a refusal speaks of
   * the API key.
   */
  credential?: Credential;
  /** TLS settings for the service's host and the proxy rule (transport.ts); absent: direct, the system's CAs. */
  transport?: TransportSettings;
  /** The service's name in error sentences, e.g. "the generation service". */
  serviceName: string;
  retry?: RetryPolicy;
  /** Per-request time limit for headers and between body chunks. */
  timeoutMs?: number;
  /**
   * The time limit of a JSON request (request-clock.ts): while its body is sent, the longest time nothing of it
   * is taken (an upload that keeps moving is never cut); then the answer must come, and its body end (one that
   * trickles a byte at a time is cut), each within it.
   */
  totalTimeoutMs?: number;
  /** The largest JSON answer read, unless a request says otherwise (a larger one is a server_error). */
  maxJsonBytes?: number;
}

/** Defaults: an answer is read whole into memory, so it is bounded; a request must end. */
export const DEFAULT_MAX_JSON_BYTES = 8 * 1024 * 1024;
export const DEFAULT_TOTAL_TIMEOUT_MS = 120_000;

export interface RequestOptions {
  method?: Dispatcher.HttpMethod;
  query?: Record<string, string | number | boolean | undefined>;
  /** A JSON body (serialised here) or a stream/buffer sent as is with the given headers. */
  json?: unknown;
  /**
   * A body sent as is; a function makes a fresh one for each attempt (a stream is spent, or destroyed by a
   * failed connection, so a retried request needs a new one).
   */
  body?: Dispatcher.DispatchOptions['body'] | (() => Dispatcher.DispatchOptions['body']);
  headers?: Record<string, string>;
  /**
   * Whether repeating the request is harmless. Defaults to true for GET and HEAD. When false, the request
   * is repeated only if the connection failed before it was sent.
   */
  idempotent?: boolean;
  signal?: AbortSignal;
  /** Statuses returned to the caller instead of raised (e.g. 404 for an optional endpoint). */
  acceptStatus?: number[];
  /** What the request is for, in error sentences: "listing workflows". */
  action?: string;
  /** For a JSON request: the largest answer read (default: the client's `maxJsonBytes`). */
  maxBytes?: number;
}

export interface JsonAnswer<T> {
  status: number;
  body: T;
  /** Whether the body was JSON (false for an empty body or an accepted error page in plain text). */
  json: boolean;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

export class HttpClient {
  /** The pool of the service's host. */
  readonly agent: Dispatcher;
  /** The pools (service and other hosts), the proxy rule and the TLS settings. */
  readonly transport: Transport;
  private readonly base: URL;
  private readonly options: HttpClientOptions;
  /** Every secret this client must never report: the options', the credential's and the transport's. */
  private readonly secrets: string[];
  private readonly secretSearch: SecretSearch;
  /** Requests whose answer is not read to its end yet, and what waits for none to be left. */
  private inFlight = 0;
  private readonly idleWaiters: Array<() => void> = [];
  private closing = false;

  constructor(options: HttpClientOptions) {
    this.options = options;
    this.base = new URL(options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
    this.secrets = [
      ...(options.secrets ?? []),
      ...(options.credential?.secrets ?? []),
      ...transportSecrets(options.transport),
    ].filter((secret): secret is string => typeof secret === 'string' && secret.length > 0);
    this.secretSearch = new SecretSearch(this.secrets);
    this.transport = new Transport(options.transport, {
      keepAliveTimeout: 30_000,
      connections: 16,
      headersTimeout: options.timeoutMs ?? 60_000,
      bodyTimeout: options.timeoutMs ?? 60_000,
    });
    this.agent = this.transport.service(this.base);
  }

  /** The absolute address of a service path (`/api/...`), keeping the base's own prefix. */
  url(path: string, query?: RequestOptions['query']): URL {
    const url = new URL(path.replace(/^\//, ''), this.base);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url;
  }

  /** The secrets this client never reports, for what else reports on its behalf (the socket's log lines). */
  secretsForReports(): string[] {
    return [...this.secrets];
  }

  /** A value (an answer passed on to msgs) without this client's secrets; addresses left whole. */
  removeSecrets<T>(value: T): T {
    return removeSecrets(value, this.secrets);
  }

  /**
   * What an error, log line or status may carry: without this client's secrets (and `also`, e.g. a signed
   * address's signature), signed addresses shortened.
   */
  cleanForReport<T>(value: T, also: ReadonlyArray<string> = []): T {
    return cleanForReport(value, [...this.secrets, ...also]);
  }

  /**
   * An error answer's body, read for its message: bounded like any answer (a larger one is dropped, not
   * cut, so no part of a secret is left at the cut), parsed when it is JSON, cleaned for an error.
   */
  async errorBody(body: RawResponse['body'], also: ReadonlyArray<string> = []): Promise<unknown> {
    const text = await readText(body, this.options.maxJsonBytes ?? DEFAULT_MAX_JSON_BYTES).catch(() => '');
    if (!text) return undefined;
    // A plain-text error body (or JSON nested past the bound) is kept as text.
    const parsed = readJsonText(text);
    return this.cleanForReport(parsed.ok ? parsed.value : text, also);
  }

  /**
   * A request whose JSON answer is returned (undefined for an empty body); errors are raised. An accepted
   * error status (`acceptStatus`) need not come with JSON: a framework's own "404: Not Found" page for a
   * route the server lacks is an answer, with `json: false` and no body. The answer is read within the
   * attempt (a connection that breaks mid-body is a network failure, retried where safe), up to a size
   * limit, and within the total time limit, counted from when the request's body has been sent.
   */
  async json<T>(path: string, options: RequestOptions = {}): Promise<JsonAnswer<T>> {
    const limit = options.maxBytes ?? this.options.maxJsonBytes ?? DEFAULT_MAX_JSON_BYTES;
    const total = this.options.totalTimeoutMs ?? DEFAULT_TOTAL_TIMEOUT_MS;
    // One abort per request, freed when it ends: the caller's signal may live as long as its node.
    const abort = new RequestAbort();
    const clock = new RequestClock(total, () => abort.abort(new Error('time limit')));
    const stop = () => abort.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', stop, { once: true });
    if (options.signal?.aborted) stop();
    let response: RawResponse & { text: string };
    try {
      response = await this.send(
        path,
        options,
        async (raw) => ({ ...raw, text: await readText(raw.body, limit) }),
        clock,
        abort,
      );
    } catch (error) {
      if (error instanceof TooLarge) {
        throw new ServiceError(
          'server_error',
          `${this.options.serviceName} answered ${this.what(options)} with more than ${formatBytes(error.limit)}: check the base address in the config node (the limit is a setting)`,
        );
      }
      if (abort.aborted && !options.signal?.aborted) {
        const failure = new ServiceError('network', this.outOfTime(clock, options));
        // Out of time once the body had left: the service may have acted on it (a submit whose answer is late
        // is asked for by its id, never taken for one that was not sent).
        if (mayHaveReachedService(error) || clock.phase !== 'sending') mayHaveReached(failure);
        throw failure;
      }
      throw error;
    } finally {
      clock.stop();
      options.signal?.removeEventListener('abort', stop);
    }
    const text = response.text;
    if (text.trim() === '') return { status: response.status, body: undefined as T, json: false };
    const parsed = readJsonText(text);
    if (!parsed.ok) {
      if (response.status >= 400) return { status: response.status, body: undefined as T, json: false };
      // Cleaned whole, then cut: a key that straddles the cut is still found.
      throw new ServiceError(
        'server_error',
        `${this.options.serviceName} answered ${this.what(options)} with something that is not JSON (${parsed.reason}): check the base address in the config node`,
        { status: response.status, body: cutText(this.cleanForReport(text), 300) },
      );
    }
    // The caller's type is a promise of shape, checked by the caller's own reader.
    const body = parsed.value as T;
    // What the service sends is passed on to msgs: a key it echoes is removed. Looked for in the parsed
    // value, where a key the service wrote JSON-escaped (`\u002B`, `\/`) is plain again, whenever the text
    // holds one or an escape that could hide one; a text with neither is searched only (a 10 MB queue list is
    // not walked for nothing).
    const holds = this.secretSearch.mayBeInJson(text);
    return { status: response.status, body: holds ? this.removeSecrets(body) : body, json: true };
  }

  /** The sentence of a JSON request whose time limit ran out, by where it ran out. */
  private outOfTime(clock: RequestClock, options: RequestOptions): string {
    const service = this.options.serviceName;
    const seconds = Math.max(1, Math.round(clock.limitMs / 1000));
    switch (clock.phase) {
      case 'sending':
        return `${service} stopped taking ${this.what(options)}: nothing of it was taken for ${seconds} s (the request time limit, counted while nothing moves): check that the service is healthy`;
      case 'waiting':
        return `${service} took ${this.what(options)} but did not answer within ${seconds} s of reading it: check that the service is healthy`;
      default:
        return `${service} did not finish answering ${this.what(options)} within ${seconds} s: check that the service is healthy`;
    }
  }

  /** A request whose answer is left for the caller to stream (the caller must consume or dump the body). */
  async stream(path: string, options: RequestOptions = {}): Promise<RawResponse> {
    return this.send(path, options, async (raw) => raw);
  }

  /**
   * A GET to an address outside the service (a signed download address): no service headers, no cookies,
   * no redirects followed, nothing retried but a connection that failed.
   */
  async fetchForeign(address: string, signal?: AbortSignal): Promise<RawResponse> {
    return withRetry(
      async () => {
        try {
          const response = await this.dispatch(address, { method: 'GET', signal }, true);
          return { status: response.statusCode, headers: response.headers, body: response.body };
        } catch (error) {
          throw this.networkError(error, 'downloading a file from its signed address', address);
        }
      },
      (error) => ({
        retry: error instanceof ServiceError && error.code === 'network' && !failsForGood(error),
      }),
      this.options.retry ?? DEFAULT_RETRY_POLICY,
      signal,
    );
  }

  /**
   * Closes the pool. Requests still under way (a status check, a download's body) get `graceMs` to finish, then
   * the pool is destroyed, which cuts them off: a redeploy must not wait for a service that does not answer
   * (Node-RED waits 15 s at most), and nothing may go on after the config node closed. (undici's own close
   * would first empty the pool's list of connections, leaving a later destroy nothing to cut.)
   */
  async close(graceMs = 250): Promise<void> {
    this.closing = true;
    if (this.inFlight > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => this.idleWaiters.push(resolve)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
      ]);
      clearTimeout(timer);
    }
    if (this.inFlight > 0) await this.transport.destroy();
    else await this.transport.close();
  }

  /**
   * One undici request on the pool, counted as under way until its answer's body is closed (read to its end,
   * dumped or destroyed), so `close` knows what it cuts off.
   */
  private async dispatch(
    address: string | URL,
    options: Omit<Dispatcher.RequestOptions, 'origin' | 'path' | 'dispatcher'> & {
      signal?: AbortSignal | RequestAbort;
    },
    foreign = false,
  ): Promise<Dispatcher.ResponseData> {
    if (this.closing) throw new Error('the config node is closing');
    this.inFlight += 1;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      this.inFlight -= 1;
      if (this.inFlight === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    };
    try {
      const response = (await request(address, {
        ...options,
        dispatcher: foreign ? this.transport.foreign(new URL(address)) : this.agent,
      } as Parameters<typeof request>[1])) as Dispatcher.ResponseData;
      if (response.body.closed || response.body.destroyed) end();
      else response.body.once('close', end);
      return response;
    } catch (error) {
      end();
      throw error;
    }
  }

  /**
   * One request, retried as the options allow; `consume` reads the answer within the attempt, so a
   * connection that breaks while the body is read counts as a network failure of that attempt. `abort`, when
   * given, cuts the request instead of the caller's signal (which it follows: see `json`); the caller's ends
   * the wait between attempts.
   */
  private async send<R>(
    path: string,
    options: RequestOptions,
    consume: (response: RawResponse) => Promise<R>,
    clock?: RequestClock,
    abort?: RequestAbort,
  ): Promise<R> {
    const method = options.method ?? 'GET';
    const idempotent = options.idempotent ?? (method === 'GET' || method === 'HEAD');
    const headers: Record<string, string> = {
      ...this.options.headers,
      ...this.options.credential?.headers,
      ...options.headers,
    };
    let body = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers['content-type'] = 'application/json';
    }
    const address = this.url(path, options.query);
    return withRetry(
      async () => {
        let response: Dispatcher.ResponseData;
        let attemptBody = typeof body === 'function' ? body() : body;
        clock?.sending();
        // The clock learns each chunk of a stream as the connection takes it, and its end; anything else is
        // handed over at once. An answer that comes before (a refusal) is an answer all the same.
        if (clock && attemptBody instanceof Readable) attemptBody = counted(attemptBody, clock);
        else clock?.handedOver(bodySize(attemptBody));
        try {
          response = await this.dispatch(address, {
            method,
            headers,
            body: attemptBody,
            signal: abort ?? options.signal,
          });
        } catch (error) {
          clock?.pause();
          // A TLS handshake that failed (a certificate not trusted) or a proxy that refused the tunnel: no byte
          // of the request left, so it is not "maybe sent" (a submit need not ask the server whether it got it).
          const unsent = isNotSent(error) || this.failedOnTheWay(error)?.permanent === true;
          throw new NetworkFailure(!unsent, error);
        }
        clock?.answering();
        if (options.acceptStatus?.includes(response.statusCode) || response.statusCode < 300) {
          try {
            return await consume({
              status: response.statusCode,
              headers: response.headers,
              body: response.body,
            });
          } catch (error) {
            clock?.pause();
            if (error instanceof TooLarge || error instanceof ServiceError) throw error;
            throw new NetworkFailure(true, error);
          }
        }
        // The error's body is read within the limit; the retry's wait is not timed.
        const failure =
          response.statusCode < 400
            ? await this.redirectError(response, options)
            : await this.httpError(response, options);
        clock?.pause();
        throw failure;
      },
      (error) => {
        // Cut (its time limit, or the caller): never tried again.
        if (abort?.aborted) return { retry: false };
        if (error instanceof NetworkFailure) {
          if (this.failedOnTheWay(error.original)?.permanent) return { retry: false };
          return { retry: idempotent || !error.sent };
        }
        if (error instanceof ServiceError && idempotent) {
          const retryAfter = (error as RetryableServiceError).retryAfterMs;
          // `network` from an answer: a proxy that could not reach the server behind it (errors.ts).
          if (error.code === 'server_error' || error.code === 'rate_limited' || error.code === 'network')
            return { retry: true, afterMs: retryAfter };
        }
        return { retry: false };
      },
      this.options.retry ?? DEFAULT_RETRY_POLICY,
      options.signal,
    ).catch((error: unknown) => {
      if (error instanceof NetworkFailure) {
        const failure = this.networkError(error.original, this.what(options));
        if (error.sent) mayHaveReached(failure);
        throw failure;
      }
      throw error;
    });
  }

  /** What failed on the way to the service's host (its certificate, a proxy), when it is that. */
  private failedOnTheWay(error: unknown): ReturnType<typeof transportFailure> {
    return transportFailure(error, this.base.host, this.transport.proxyFor(this.base));
  }

  private what(options: RequestOptions): string {
    return options.action ?? 'the request';
  }

  /**
   * A request that got no answer, as a sentence: what failed on the way (a certificate, a proxy) when it is
   * that, else the failure's code. `address` is a host's other than the service's (a signed address).
   */
  private networkError(original: unknown, action: string, address?: string): ServiceError {
    if (original instanceof ServiceError) return original;
    // undici's refused tunnel is an AbortError too: only a stop is said to be one.
    if (
      original instanceof Error &&
      original.name === 'AbortError' &&
      !/^Proxy response/.test(original.message)
    ) {
      return new ServiceError('network', `${action} was stopped before ${this.options.serviceName} answered`);
    }
    const target = address ? new URL(address) : this.base;
    const onTheWay = transportFailure(original, target.host, this.transport.proxyFor(target));
    if (onTheWay) {
      const failure = new ServiceError(
        'network',
        this.cleanForReport(
          `${this.options.serviceName} could not be reached while ${action}: ${onTheWay.sentence}`,
        ),
      );
      return markedOnTheWay(failure, onTheWay.permanent);
    }
    const code = textOf((original as { code?: unknown } | null | undefined)?.code, 100);
    const reason = code ?? errorText(original, 300);
    return new ServiceError(
      'network',
      this.cleanForReport(
        `${this.options.serviceName} did not answer ${action} (${reason}): check the address in the config node and that the service is reachable`,
      ),
    );
  }

  /**
   * A redirect where the API answers directly (only downloads follow one, by hand): the base address is
   * not the API's. The sentence names where it points, scheme and host only (never its path or query).
   */
  private async redirectError(
    response: Dispatcher.ResponseData,
    options: RequestOptions,
  ): Promise<ServiceError> {
    await response.body.dump().catch(() => undefined);
    const location = response.headers.location;
    let where = '';
    try {
      const target = new URL(textOf(Array.isArray(location) ? location[0] : location) ?? '', this.base);
      where = ` to ${target.protocol}//${target.host}`;
    } catch {
      // no address, or one that cannot be read: say so without it
    }
    return new ServiceError(
      'invalid_request',
      this.cleanForReport(
        `${this.options.serviceName} redirected ${this.what(options)} (HTTP ${response.statusCode})${where}: set the base address in the config node to the address it redirects to`,
      ),
      { status: response.statusCode },
    );
  }

  private async httpError(response: Dispatcher.ResponseData, options: RequestOptions): Promise<ServiceError> {
    const body = await this.errorBody(response.body);
    const retryAfterMs = parseRetryAfter(response.headers['retry-after']);
    const code = codeForStatus(response.statusCode, retryAfterMs !== undefined, body);
    const detail = messageFromBody(body);
    const message = `${this.sentenceFor(code, response.statusCode, this.what(options))}${detail ? ` (the service said: ${detail})` : ''}`;
    const error = new ServiceError(code, this.cleanForReport(message), {
      status: response.statusCode,
      body,
    }) as RetryableServiceError;
    error.retryAfterMs = retryAfterMs;
    // A proxy that took the request but could not reach the server behind it: the server may have it.
    if (code === 'network') mayHaveReached(error);
    return error;
  }

  private sentenceFor(code: ErrorCode, status: number, action: string): string {
    const service = this.options.serviceName;
    switch (code) {
      case 'unauthorized':
        if (this.options.credential) return this.options.credential.refusal(service, action, status);
        return `the API key was refused by ${service} while ${action}: check the key in the config node`;
      case 'insufficient_credits':
        return `not enough credits on ${service} for ${action}: add credits to the account`;
      case 'subscription_inactive':
        return `the subscription is not active on ${service}: renew it before ${action}`;
      case 'rate_limited':
        return `${service} is limiting the rate of requests (${action}): send fewer requests or wait`;
      case 'server_error':
        return `${service} failed with HTTP ${status} while ${action}: try again later`;
      case 'network':
        return `${service} could not reach the server behind it (HTTP ${status}) while ${action}: check that the server is running, then try again`;
      default:
        return `${service} refused ${action} with HTTP ${status}: check the message's input`;
    }
  }
}
