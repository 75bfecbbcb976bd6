/**
 * The one error type every client in this package raises. Node-RED copies `message`, `code` and `cause`
 * into a Catch node's `msg.error`, so all three must be free of keys, tokens and signed addresses.
 */

/** The codes of the package contract (CONTRACT.md, "Errors"). */
export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'insufficient_credits'
  | 'subscription_inactive'
  | 'rate_limited'
  | 'server_error'
  | 'network'
  | 'invalid_input'
  /** A failure the package did not foresee (a bug): not the user's input, not the service. */
  | 'internal_error';

export interface ErrorDetails {
  status?: number;
  body?: unknown;
}

export class ServiceError extends Error {
  readonly code: ErrorCode;
  override readonly cause: ErrorDetails;

  /** The sentence and the service's body are cut to a readable length (a service may send megabytes). */
  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}) {
    super(cutText(message, MAX_SENTENCE));
    this.name = 'ServiceError';
    this.code = code;
    this.cause = details.body === undefined ? details : { ...details, body: cutBody(details.body) };
  }

  /** Node-RED puts `toString()` into a Catch node's `msg.error.message`: the plain sentence, no class name. */
  override toString(): string {
    return this.message;
  }
}

/** The longest sentence a user is shown; the longest service body kept in `cause.body`, as JSON text. */
const MAX_SENTENCE = 1000;
const MAX_BODY = 4000;

/** `text` cut to `limit` characters, saying how much was left out. */
export function cutText(text: string, limit: number): string {
  if (text.length <= limit) return text;
  return `${text.slice(0, limit)}… (${text.length - limit} more characters left out)`;
}

/** A body as it is when small; else its JSON text, cut. */
function cutBody(body: unknown): unknown {
  if (typeof body === 'string') return cutText(body, MAX_BODY);
  if (body === null || typeof body !== 'object') return body;
  let text: string;
  try {
    text = JSON.stringify(body);
  } catch {
    return '(a body that cannot be shown)';
  }
  return text.length <= MAX_BODY ? body : cutText(text, MAX_BODY);
}

/** A refused input: raised before anything is sent. */
export function invalidInput(message: string): ServiceError {
  return new ServiceError('invalid_input', message);
}

/** Maps an HTTP status to the contract's code. A 429 with Retry-After is a rate limit, not a lapsed plan. */
export function codeForStatus(status: number, hasRetryAfter = false): ErrorCode {
  if (status === 401 || status === 403) return 'unauthorized';
  if (status === 402) return 'insufficient_credits';
  if (status === 429) return hasRetryAfter ? 'rate_limited' : 'subscription_inactive';
  if (status >= 500) return 'server_error';
  return 'invalid_request';
}

const MAX_MESSAGE_LENGTH = 300;

/**
 * The human part of a service's error body, whatever its shape: `{code, message}`, `{message}`,
 * `{error: {type, message, details}, node_errors}`, `{error: "..."}`, or plain text.
 */
export function messageFromBody(body: unknown): string | undefined {
  let text: string | undefined;
  if (typeof body === 'string') {
    text = body.trim();
  } else if (body && typeof body === 'object') {
    const record = body as Record<string, unknown>;
    const error = record.error;
    if (typeof error === 'string') text = error;
    else if (error && typeof error === 'object') {
      const inner = error as Record<string, unknown>;
      text = [inner.message, inner.details].filter((part) => typeof part === 'string' && part).join(': ');
    }
    if (!text && typeof record.message === 'string') text = record.message;
    if (!text && typeof record.detail === 'string') text = record.detail;
  }
  if (!text) return undefined;
  return text.length > MAX_MESSAGE_LENGTH ? `${text.slice(0, MAX_MESSAGE_LENGTH)}…` : text;
}

const URL_QUERY = /((?:https?|wss?):\/\/[^\s"'?#]+)\?[^\s"'#]*/g;

/**
 * Removes every secret from a string or a JSON-like value: each given secret is replaced, and the query of
 * any address is cut off (signed addresses carry their signature there).
 */
export function redact<T>(value: T, secrets: ReadonlyArray<string | undefined>): T {
  const present = secrets.filter(
    (secret): secret is string => typeof secret === 'string' && secret.length > 0,
  );
  const clean = (input: unknown): unknown => {
    if (typeof input === 'string') {
      let text = input.replace(URL_QUERY, '$1?…');
      for (const secret of present) {
        text = text.split(secret).join('***');
        const encoded = encodeURIComponent(secret);
        if (encoded !== secret) text = text.split(encoded).join('***');
      }
      return text;
    }
    if (Array.isArray(input)) return input.map(clean);
    if (input && typeof input === 'object') {
      // Keys too: a service may echo a key as a property name. fromEntries defines own properties, so a
      // `__proto__` key stays a key.
      return Object.fromEntries(
        Object.entries(input).map(([key, inner]) => [clean(key) as string, clean(inner)]),
      );
    }
    return input;
  };
  return clean(value) as T;
}
