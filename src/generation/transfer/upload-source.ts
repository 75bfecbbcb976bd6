/**
 * What an upload's `msg.payload` holds, turned into what the REST client uploads (bytes or a local file):
 * a Buffer, a local file path, a `data:` URL, base64 text, or an `http(s)` URL. A URL is streamed into a
 * temporary file (so the upload knows its length and a retried attempt can read it again), through a
 * connection pool of its own, with no key or service header, a size limit and a time limit. No Node-RED inside.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Agent, request, type Dispatcher } from 'undici';
import { ServiceError, invalidInput } from '../../http/errors';
import { timeLimitSignal } from '../../timers';
import { checkAddress, checkResolved, guardedLookup, hostOf, isLocalAddress } from './local-address';
import { sizeText } from './size-text';

/** The "payload is" setting: `auto` tells the kinds apart; `path` and `base64` take any text as that. */
export type PayloadSetting = 'auto' | 'path' | 'base64';

/** What a payload was read as. */
export type PayloadKind = 'bytes' | 'data-url' | 'url' | 'path' | 'base64';

export interface UrlLimits {
  /** The largest file fetched from a URL, in bytes. */
  maxBytes: number;
  /** The whole fetch (redirects and body) must end within this (a longer time than a timer holds: ~24.8 days). */
  timeoutMs: number;
  /**
   * Whether the URL, and every address it redirects to, may reach loopback, private and link-local
   * addresses (see local-address.ts). Off, they are refused before anything is sent to them.
   */
  allowLocal: boolean;
}

export const DEFAULT_URL_LIMITS: UrlLimits = {
  maxBytes: 100 * 1024 * 1024,
  timeoutMs: 60_000,
  allowLocal: false,
};

/** Redirects followed from an image URL, at most. */
export const MAX_URL_REDIRECTS = 5;

export interface UploadSource {
  kind: PayloadKind;
  /** The bytes, or the path of a local file (a URL's temporary copy). */
  source: Buffer | string;
  /** The stored name: msg.filename when given, else a URL's last path segment (a path's is the client's). */
  name?: string;
  /** Removes the temporary copy of a URL; nothing for the other kinds. */
  release(): Promise<void>;
}

/** Fewer characters than this are not taken for base64 by `auto` (a short word is more likely a file name). */
const MIN_AUTO_BASE64 = 64;
const BASE64_TEXT = /^[A-Za-z0-9+/_-]+={0,2}$/;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

const nothingToRelease = async (): Promise<void> => undefined;

function isBase64(compact: string): boolean {
  return compact.length % 4 !== 1 && BASE64_TEXT.test(compact);
}

/** The kind `auto` reads a string as (a file that exists is a path before it could be base64). */
async function kindOfText(text: string): Promise<PayloadKind> {
  if (/^data:/i.test(text)) return 'data-url';
  if (/^https?:\/\//i.test(text)) return 'url';
  const isFile = await stat(text).then(
    () => true,
    () => false,
  );
  if (isFile) return 'path';
  const compact = text.replace(/\s+/g, '');
  return compact.length >= MIN_AUTO_BASE64 && isBase64(compact) ? 'base64' : 'path';
}

function decodeBase64(text: string, what: string): Buffer {
  const compact = text.replace(/\s+/g, '');
  if (!isBase64(compact)) {
    throw invalidInput(
      `${what} is not base64 text (only A-Z, a-z, 0-9, +, /, - and _ with = at the end): check msg.payload or the "payload is" setting`,
    );
  }
  return Buffer.from(compact, 'base64');
}

const PERCENT = 0x25;

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1;
}

/**
 * Percent-decoding as URLs do it: each `%XX` is the byte XX (any byte, not only UTF-8 text), every other
 * character its UTF-8 bytes, a `%` without two hex digits itself.
 */
export function percentDecode(text: string): Buffer {
  const bytes = Buffer.from(text, 'utf8');
  if (!bytes.includes(PERCENT)) return bytes;
  let length = 0;
  for (let index = 0; index < bytes.length; index++) {
    const high = bytes[index] === PERCENT ? hexValue(bytes[index + 1]) : -1;
    const low = high >= 0 ? hexValue(bytes[index + 2]) : -1;
    if (low >= 0) {
      bytes[length++] = (high << 4) | low;
      index += 2;
    } else {
      bytes[length++] = bytes[index];
    }
  }
  return bytes.subarray(0, length);
}

/**
 * The bytes of a `data:` URL (`data:[<type>][;base64],<data>`), as the Fetch standard reads one: the data
 * percent-decoded, then, with `;base64`, base64-decoded.
 */
export function decodeDataUrl(text: string): Buffer {
  const comma = text.indexOf(',');
  if (comma < 0) throw invalidInput('msg.payload is a data: URL without a comma before its data');
  const meta = text.slice(5, comma);
  const data = text.slice(comma + 1);
  if (/;\s*base64\s*$/i.test(meta)) {
    const base64 = data.includes('%') ? percentDecode(data).toString('latin1') : data;
    return decodeBase64(base64, 'The data of the data: URL in msg.payload');
  }
  return percentDecode(data);
}

/**
 * Reads msg.payload as the setting says. `auto`: a Buffer is the bytes; text that starts with `data:` is a
 * data URL and with `http://` or `https://` a URL to fetch; text naming a file that exists is that file;
 * other text of 64 or more base64 characters (white space ignored) is base64; anything else is a path (so a
 * missing file is reported as one). `path` and `base64` read any text as that; a Buffer is bytes in every mode.
 */
export async function readUploadSource(
  payload: unknown,
  setting: PayloadSetting,
  options: {
    filename?: string;
    limits?: UrlLimits;
    signal?: AbortSignal;
    /** Called when a URL is about to be fetched (the node says so in its status). */
    onFetch?: () => void;
    /**
     * Which addresses count as local (default: `isLocalAddress`). Tests, which stand in for the internet
     * on 127.0.0.1, narrow it.
     */
    isLocal?: (address: string) => boolean;
    /** The proxy's pool for a URL when the config node's proxy rule sends it through one (http/transport.ts). */
    proxied?: (url: URL) => Dispatcher | undefined;
  } = {},
): Promise<UploadSource> {
  const { filename, limits = DEFAULT_URL_LIMITS, signal } = options;
  if (Buffer.isBuffer(payload))
    return { kind: 'bytes', source: payload, name: filename, release: nothingToRelease };
  if (typeof payload !== 'string') {
    throw invalidInput(
      'msg.payload must be a Buffer (the file) or a string (a local file path, a data: URL, base64 text or an http(s) URL) to upload',
    );
  }
  const text = payload.trim();
  if (text === '') throw invalidInput('msg.payload is empty text: give the file, its path or its URL');
  const kind: PayloadKind =
    setting === 'path' ? 'path' : setting === 'base64' ? 'base64' : await kindOfText(text);
  if ((kind === 'data-url' || kind === 'base64') && !filename) {
    throw invalidInput(
      `msg.filename is needed to upload ${kind === 'base64' ? 'base64 text' : 'a data: URL'}: give the stored file name`,
    );
  }
  switch (kind) {
    case 'data-url':
      return { kind, source: decodeDataUrl(text), name: filename, release: nothingToRelease };
    case 'base64':
      return { kind, source: decodeBase64(text, 'msg.payload'), name: filename, release: nothingToRelease };
    case 'url':
      options.onFetch?.();
      return fetchToTemporaryFile(
        text,
        filename,
        limits,
        signal,
        options.isLocal ?? isLocalAddress,
        options.proxied,
      );
    default:
      return { kind: 'path', source: payload, name: filename, release: nothingToRelease };
  }
}

/** The stored name a URL gives: its last path segment, decoded, if that is a plain file name. */
export function nameFromUrl(url: URL): string | undefined {
  const segment = url.pathname.split('/').pop() ?? '';
  let name: string;
  try {
    name = decodeURIComponent(segment);
  } catch {
    return undefined;
  }
  if (name === '' || name === '.' || name === '..' || /[/\\\0]/.test(name)) return undefined;
  return name;
}

function tooLarge(host: string, limits: UrlLimits, size?: number): ServiceError {
  return invalidInput(
    `The file at ${host} is ${size === undefined ? 'larger than' : `${sizeText(size)}, more than`} the upload node's URL limit of ${sizeText(limits.maxBytes)}: raise "URL limit" in the node, or fetch it another way`,
  );
}

function header(headers: Dispatcher.ResponseData['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Streams a URL's file into a temporary directory: redirects followed up to MAX_URL_REDIRECTS (http and
 * https only, never from https to http), each address checked before it is connected to (see
 * `checkAddress`, `guardedLookup`), the size checked against Content-Length and again while the bytes
 * arrive, the whole fetch bounded by `timeoutMs`. Errors name the host that failed, never a path or query.
 */
async function fetchToTemporaryFile(
  address: string,
  filename: string | undefined,
  limits: UrlLimits,
  signal: AbortSignal | undefined,
  isLocal: (address: string) => boolean,
  proxied?: (url: URL) => Dispatcher | undefined,
): Promise<UploadSource> {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    throw invalidInput('msg.payload starts like a URL but is not one that can be read: check the address');
  }
  const name = filename || nameFromUrl(url);
  if (!name) {
    throw invalidInput(
      `msg.filename is needed to upload from ${hostOf(url)}: the URL names no file to store it as`,
    );
  }
  const firstUrl = url;
  const timeout = timeLimitSignal(limits.timeoutMs);
  const stop = signal ? AbortSignal.any([signal, timeout]) : timeout;
  let refusal: ServiceError | undefined;
  // A pool of its own: the service's pool carries the service's key, and a slow image host must not hold
  // the service's connections.
  const agent = new Agent({
    connections: 1,
    connect: limits.allowLocal ? {} : { lookup: guardedLookup(isLocal, (error) => (refusal = error)) },
  });
  let directory: string | undefined;
  const release = async (): Promise<void> => {
    if (directory) await rm(directory, { recursive: true, force: true });
    directory = undefined;
  };
  try {
    let response: Dispatcher.ResponseData;
    checkAddress(url, undefined, limits.allowLocal, isLocal);
    for (let redirects = 0; ; redirects++) {
      const viaProxy = proxied?.(url);
      // Through a proxy the host is resolved there, past the pool's guarded lookup: checked here first.
      if (viaProxy && !limits.allowLocal) await checkResolved(url, isLocal);
      response = await request(url, {
        method: 'GET',
        dispatcher: viaProxy ?? agent,
        signal: stop,
        headers: { accept: 'image/*, */*;q=0.8' },
      });
      if (!REDIRECTS.has(response.statusCode)) break;
      await response.body.dump();
      const location = header(response.headers, 'location');
      if (redirects >= MAX_URL_REDIRECTS) {
        throw invalidInput(
          `The file at ${hostOf(firstUrl)} redirects more than ${MAX_URL_REDIRECTS} times: give its final address`,
        );
      }
      let next: URL | undefined;
      try {
        next = location ? new URL(location, url) : undefined;
      } catch {
        next = undefined;
      }
      if (!next || (next.protocol !== 'http:' && next.protocol !== 'https:')) {
        throw invalidInput(
          `${hostOf(url)} redirected the file to ${next ? `a ${next.protocol} address` : 'no readable address'}; only http and https are followed`,
        );
      }
      checkAddress(next, url, limits.allowLocal, isLocal);
      url = next;
    }
    const host = hostOf(url);
    if (response.statusCode >= 400) {
      await response.body.dump();
      throw invalidInput(
        `${host} answered HTTP ${response.statusCode} for the file in msg.payload: check the URL (it is fetched without any key)`,
      );
    }
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw invalidInput(
        `${host} answered HTTP ${response.statusCode} instead of the file in msg.payload: check the URL`,
      );
    }
    const length = Number(header(response.headers, 'content-length'));
    if (Number.isFinite(length) && length > limits.maxBytes) {
      await response.body.dump();
      throw tooLarge(host, limits, length);
    }
    directory = await mkdtemp(path.join(os.tmpdir(), 'graph-gen-upload-'));
    const file = path.join(directory, 'file');
    let received = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        received += chunk.length;
        if (received > limits.maxBytes) callback(tooLarge(host, limits));
        else callback(null, chunk);
      },
    });
    await pipeline(response.body, counter, createWriteStream(file), { signal: stop });
    if (received === 0) throw invalidInput(`The file at ${host} is empty`);
    return { kind: 'url', source: file, name, release };
  } catch (error) {
    await release();
    throw refusal ?? fetchError(error, hostOf(url), limits, signal, timeout);
  } finally {
    void agent.destroy().catch(() => undefined);
  }
}

/** A fetch failure as a sentence naming the host; a stop by the node's close passes through as is. */
function fetchError(
  error: unknown,
  host: string,
  limits: UrlLimits,
  signal: AbortSignal | undefined,
  timeout: AbortSignal,
): unknown {
  if (error instanceof ServiceError) return error;
  if (signal?.aborted) return error;
  if (timeout.aborted) {
    return new ServiceError(
      'network',
      `The file at ${host} did not arrive within ${limits.timeoutMs / 1000} s: check that the host answers, or raise "URL timeout" in the node`,
    );
  }
  const code = (error as { code?: unknown })?.code;
  return new ServiceError(
    'network',
    `The file at ${host} could not be fetched (${typeof code === 'string' ? code : 'no answer'}): check the URL and that the host can be reached from Node-RED`,
  );
}
