/**
 * The one error type every client in this package raises. Node-RED copies `message`, `code` and `cause`
 * into a Catch node's `msg.error`, so all three must be free of keys, tokens and signed addresses.
 */
import { ownValue, setOwn, textOf } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';

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

/** Characters of an envelope's code word kept (the words are short: `upstream_unreachable`). */
const MAX_CODE_WORD = 100;

/**
 * The code word of an error envelope `{"error": {"code": "...", "message", "details"}}` (Comfy API v2 answers
 * every error so); undefined for any other body. Own properties and text only.
 */
export function envelopeCode(body: unknown): string | undefined {
  const error = isRecord(body) ? ownValue(body, 'error') : undefined;
  const code = isRecord(error) ? ownValue(error, 'code') : undefined;
  return typeof code === 'string' && code.length <= MAX_CODE_WORD ? code : undefined;
}

/** Envelope codes of a 429 that is a rate limit, with or without Retry-After (never a lapsed plan). */
const RATE_LIMIT_CODES = new Set(['rate_limited', 'too_many_streams', 'too_many_requests']);

/**
 * Maps an HTTP status (and its body, where it says more) to the contract's code. A 429 with Retry-After, or
 * whose envelope says it is one, is a rate limit, not a lapsed plan. A 503 whose envelope says
 * `upstream_unreachable` (a Comfy API v2 proxy that cannot reach the ComfyUI behind it) is a network failure:
 * not the request's fault, retried where that is safe, and for a POST its outcome is unknown (the proxy may
 * have passed it on before the link broke).
 */
export function codeForStatus(status: number, hasRetryAfter = false, body?: unknown): ErrorCode {
  if (status === 401 || status === 403) return 'unauthorized';
  if (status === 402) return 'insufficient_credits';
  if (status === 429)
    return hasRetryAfter || RATE_LIMIT_CODES.has(envelopeCode(body) ?? '')
      ? 'rate_limited'
      : 'subscription_inactive';
  if (status === 503 && envelopeCode(body) === 'upstream_unreachable') return 'network';
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
  } else if (isRecord(body)) {
    // Own properties only, and only text: `{"toString": 1}` or `{"message": {...}}` says nothing.
    const error = ownValue(body, 'error');
    if (typeof error === 'string') text = error;
    else if (isRecord(error)) {
      text = [ownValue(error, 'message'), ownValue(error, 'details')]
        .map((part) => textOf(part, MAX_MESSAGE_LENGTH + 1))
        .filter((part) => part)
        .join(': ');
    }
    text ||= textOf(ownValue(body, 'message'), MAX_MESSAGE_LENGTH + 1) || undefined;
    text ||= textOf(ownValue(body, 'detail'), MAX_MESSAGE_LENGTH + 1) || undefined;
  }
  if (!text) return undefined;
  return text.length > MAX_MESSAGE_LENGTH ? `${text.slice(0, MAX_MESSAGE_LENGTH)}…` : text;
}

/**
 * The forms a secret takes in text, longest first (a secret inside a longer one must not split it): as written,
 * URL-encoded, and JSON-escaped as common writers escape it (a JSON text inside a string; `\/` as PHP writes
 * `/`; `\u002B` as .NET writes `+`, `<`, `>`, `&`, quotes and non-ASCII). A parsed JSON value holds the plain
 * form; the others are for text that was not parsed (a gateway's page, a JSON text inside a string).
 */
function secretForms(secrets: ReadonlyArray<string | undefined>): string[] {
  const forms = new Set<string>();
  for (const secret of secrets) {
    if (typeof secret !== 'string' || secret === '') continue;
    const escaped = JSON.stringify(secret).slice(1, -1);
    forms.add(secret);
    forms.add(encodeURIComponent(secret));
    forms.add(escaped);
    forms.add(escaped.replace(/\//g, '\\/'));
    forms.add(
      escaped.replace(
        /\\"|[+<>&'`]|[^\x20-\x7e]/g,
        (char) =>
          `\\u${char
            .charCodeAt(char.length - 1)
            .toString(16)
            .toUpperCase()
            .padStart(4, '0')}`,
      ),
    );
  }
  return [...forms].sort((a, b) => b.length - a.length);
}

function holdsForm(text: string, forms: readonly string[]): boolean {
  for (const form of forms) if (text.includes(form)) return true;
  return false;
}

function withoutForms(text: string, forms: readonly string[]): string {
  let clean = text;
  for (const form of forms) if (clean.includes(form)) clean = clean.split(form).join('***');
  return clean;
}

/**
 * Plain objects and arrays are walked (JSON values, and msg values built in a Function node's own context,
 * whose Object.prototype is another one); anything else (a Buffer, a Date, a class instance) is kept as is.
 */
function isWalked(value: unknown): value is Record<string, unknown> | unknown[] {
  if (Array.isArray(value)) return true;
  if (value === null || typeof value !== 'object') return false;
  const prototype = Object.getPrototypeOf(value) as object | null;
  return prototype === null || Object.getPrototypeOf(prototype) === null;
}

/**
 * A copy of `value` with `change` applied to every string and property name, at any depth. Walked with a
 * list of its own, not by recursion: a value nested 50,000 deep (a service's answer, a socket frame) must not
 * overflow the stack. A container met twice is copied once, so shared parts and cycles stay as they were.
 */
function mapStrings<T>(value: T, change: (text: string) => string): T {
  if (typeof value === 'string') return change(value) as T;
  if (!isWalked(value)) return value;
  const copies = new Map<object, Record<string, unknown> | unknown[]>();
  const waiting: Array<Record<string, unknown> | unknown[]> = [];
  const converted = (inner: unknown): unknown => {
    if (typeof inner === 'string') return change(inner);
    if (!isWalked(inner)) return inner;
    let copy = copies.get(inner);
    if (!copy) {
      copy = Array.isArray(inner) ? new Array<unknown>(inner.length) : {};
      copies.set(inner, copy);
      waiting.push(inner);
    }
    return copy;
  };
  const root = converted(value);
  for (let source = waiting.pop(); source !== undefined; source = waiting.pop()) {
    const copy = copies.get(source)!;
    if (Array.isArray(source)) {
      const list = copy as unknown[];
      for (let index = 0; index < source.length; index++) list[index] = converted(source[index]);
      continue;
    }
    // A `__proto__` property name stays a property, the copy's prototype untouched.
    const record = copy as Record<string, unknown>;
    for (const [key, inner] of Object.entries(source)) setOwn(record, change(key), converted(inner));
  }
  return root as T;
}

/**
 * Whether a value holds one of the secrets (in a string or a property name, at any depth, in any form of
 * `secretForms`). Decided on the parsed value: a key a service echoes JSON-escaped (`\u002B`, `\/`) is plain
 * once parsed. Walked without recursion and without copying: a clean value costs one pass.
 */
export function holdsSecret(value: unknown, secrets: ReadonlyArray<string | undefined>): boolean {
  return new SecretSearch(secrets).inValue(value);
}

/**
 * Containers walked before the ones met are remembered. A JSON value is a tree, each container met once, so
 * nothing need be remembered (remembering costs a clean answer twice the walk). Past this many, a value with a
 * cycle, or parts shared many times over, has its containers remembered from then on, which ends the walk.
 */
const UNREMEMBERED_VISITS = 1_000_000;

function holdsAnyForm(value: unknown, forms: readonly string[]): boolean {
  if (typeof value === 'string') return holdsForm(value, forms);
  if (!isWalked(value)) return false;
  let visits = 0;
  let seen: Set<object> | undefined;
  const waiting: Array<Record<string, unknown> | unknown[]> = [value];
  /** Whether an inner value is a string holding a secret; a container is put on the list instead. */
  const holds = (inner: unknown): boolean => {
    if (typeof inner === 'string') return holdsForm(inner, forms);
    if (!isWalked(inner)) return false;
    if (++visits > UNREMEMBERED_VISITS) {
      seen ??= new Set();
      if (seen.has(inner)) return false;
      seen.add(inner);
    }
    waiting.push(inner);
    return false;
  };
  for (let source = waiting.pop(); source !== undefined; source = waiting.pop()) {
    if (Array.isArray(source)) {
      for (const inner of source) if (holds(inner)) return true;
      continue;
    }
    for (const key of Object.keys(source)) if (holdsForm(key, forms) || holds(source[key])) return true;
  }
  return false;
}

/**
 * The searches for a set of secrets, their forms worked out once (a socket reads thousands of frames a second):
 * in a text, in a parsed value, and in the JSON text a value was parsed from.
 */
export class SecretSearch {
  private readonly forms: string[];
  /** The forms a JSON text holds a secret in where no escape hides it: as written, and URL-encoded. */
  private readonly plainForms: string[];
  /** A secret holds a quote, a backslash or a control character: any escape might hide it. */
  private readonly unusual: boolean;

  constructor(secrets: ReadonlyArray<string | undefined>) {
    this.forms = secretForms(secrets);
    const present = secrets.filter((secret): secret is string => typeof secret === 'string' && secret !== '');
    this.plainForms = [...new Set(present.flatMap((secret) => [secret, encodeURIComponent(secret)]))];
    this.unusual = present.some((secret) =>
      [...secret].some((char) => char === '"' || char === '\\' || char < ' '),
    );
  }

  get none(): boolean {
    return this.forms.length === 0;
  }

  /** Whether a text holds a secret in any of its forms. */
  inText(text: string): boolean {
    return holdsForm(text, this.forms);
  }

  /** Whether a parsed value holds a secret (walked; see holdsSecret). */
  inValue(value: unknown): boolean {
    return this.forms.length > 0 && holdsAnyForm(value, this.forms);
  }

  /**
   * Whether the JSON text a value was parsed from may hold a secret, decided on the text without walking the
   * value: true when the text holds one as written or URL-encoded, or when it has an escape that could hide one.
   * JSON written without escapes holds each string as written, so a search of the text is exact there;
   * `\uXXXX` and `\/` can stand for any character of a key (and `\"`, `\\` or a control character's escape only
   * for a key holding one). Where this says false, the parsed value holds no secret: a large answer, or each of
   * thousands of frames a second, is searched, not walked.
   */
  mayBeInJson(text: string): boolean {
    if (this.forms.length === 0) return false;
    if (holdsForm(text, this.plainForms)) return true;
    if (!text.includes('\\')) return false;
    return this.unusual || HIDING_ESCAPE.test(text);
  }
}

/** The JSON escapes that can stand for a character of an ordinary key. */
const HIDING_ESCAPE = /\\(?:u|\/)/;

/**
 * `value` with every secret replaced by `***`, in strings and property names, at any depth, as written and
 * in the forms of `secretForms`. Addresses are left whole (an image address in a workflow is data). A value
 * that holds no secret is returned as it is; otherwise a copy (the value itself is never changed).
 */
export function removeSecrets<T>(value: T, secrets: ReadonlyArray<string | undefined>): T {
  const forms = secretForms(secrets);
  if (forms.length === 0 || !holdsAnyForm(value, forms)) return value;
  return mapStrings(value, (text) => withoutForms(text, forms));
}

/**
 * An address and its query, if any. Linear: the part before the query cannot hold `?`, so a text of
 * addresses without one is matched once, not tried again from every position.
 */
const ADDRESS_AND_QUERY = /((?:https?|wss?):\/\/[^\s"'?#]+)(\?[^\s"'#]*)?/gi;

/**
 * `text` with the query cut off every http(s) and ws(s) address (a signed address carries its signature
 * there), for what users are shown about a failure. Never for data: a workflow's image address stays whole.
 */
export function shortenSignedAddresses(text: string): string {
  return text.replace(ADDRESS_AND_QUERY, (whole, address: string, query?: string) =>
    query ? `${address}?…` : whole,
  );
}

/**
 * What an error, a log line or a status may carry (a sentence, or a service's body at any depth): secrets
 * removed, and signed addresses shortened in every string.
 */
export function cleanForReport<T>(value: T, secrets: ReadonlyArray<string | undefined>): T {
  const forms = secretForms(secrets);
  return mapStrings(value, (text) => shortenSignedAddresses(withoutForms(text, forms)));
}
