/**
 * How the Comfy API v2 proxy (comfy-api-proxy, Python + aiohttp) writes what it answers, so the sandbox's v2
 * mode answers byte for byte alike where a client could tell: JSON as Python's `json.dumps` writes it (`", "` and
 * `": "` in answers, compact in event frames, floats with their `.0`, non-ASCII escaped), times as Python's
 * `datetime.isoformat()` (microseconds, `+00:00`), the error envelope `{"error": {code, message, details}}`,
 * aiohttp's own plain-text answers (404, 405, 500), and the few Python spellings that reach messages (a string's
 * `repr`, a sorted list's `repr`). Shared by the v2 files of the sandbox (v2-service.ts and its parts).
 */
import type http from 'node:http';
import { isRecord } from '../boundary/json-values';

/** A number Python holds as a float: written `0.0`, not `0`. */
export class PyFloat {
  constructor(readonly value: number) {}
}

function pyString(text: string): string {
  let out = '"';
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code === 0x22) out += '\\"';
    else if (code === 0x5c) out += '\\\\';
    else if (code === 0x0a) out += '\\n';
    else if (code === 0x0d) out += '\\r';
    else if (code === 0x09) out += '\\t';
    else if (code === 0x08) out += '\\b';
    else if (code === 0x0c) out += '\\f';
    else if (code < 0x20 || code > 0x7e) out += `\\u${code.toString(16).padStart(4, '0')}`;
    else out += text[index];
  }
  return `${out}"`;
}

function pyFloatText(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return value > 0 ? 'Infinity' : '-Infinity';
  if (Number.isInteger(value) && Math.abs(value) < 1e16) return `${value}.0`;
  // Both print the shortest text that reads back the same; only the exponent is spelled differently.
  return String(value).replace(/e([+-])(\d)$/, 'e$10$2');
}

/**
 * A value as Python's `json.dumps` writes it: `compact` as the proxy's event frames (`separators=(",", ":")`),
 * else as its answers. Walks by recursion: the values are the sandbox's own, or a request's JSON read with a
 * bounded depth (v2-service.ts).
 */
export function pyJson(value: unknown, compact = false): string {
  const comma = compact ? ',' : ', ';
  const colon = compact ? ':' : ': ';
  const write = (part: unknown): string => {
    if (part === null || part === undefined) return 'null';
    if (part instanceof PyFloat) return pyFloatText(part.value);
    switch (typeof part) {
      case 'boolean':
        return part ? 'true' : 'false';
      case 'number':
        return Number.isFinite(part) ? String(part) : pyFloatText(part);
      case 'string':
        return pyString(part);
      default:
        break;
    }
    if (Array.isArray(part)) return `[${part.map(write).join(comma)}]`;
    if (isRecord(part)) {
      return `{${Object.keys(part)
        .map((key) => `${pyString(key)}${colon}${write(part[key])}`)
        .join(comma)}}`;
    }
    return 'null';
  };
  return write(value);
}

export const MICROS_PER_DAY = 86_400_000_000;

/** Now, in microseconds since the epoch (sub-millisecond from the performance clock). */
export function nowMicros(): number {
  return Math.floor((performance.timeOrigin + performance.now()) * 1000);
}

/** A UTC time as Python's `datetime.isoformat()` writes it: microseconds unless zero, then `+00:00`. */
export function pyIso(micros: number): string {
  const seconds = new Date(Math.floor(micros / 1000)).toISOString().slice(0, 19);
  const fraction = ((micros % 1_000_000) + 1_000_000) % 1_000_000;
  return `${seconds}${fraction ? `.${String(fraction).padStart(6, '0')}` : ''}+00:00`;
}

/** A string as Python's `repr` writes it (the proxy puts a client's `file_path` into messages that way). */
export function pyRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const char of text) {
    const code = char.codePointAt(0) ?? 0;
    if (char === '\\') out += '\\\\';
    else if (char === quote) out += `\\${quote}`;
    else if (char === '\n') out += '\\n';
    else if (char === '\r') out += '\\r';
    else if (char === '\t') out += '\\t';
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, '0')}`;
    else out += char;
  }
  return out + quote;
}

/** The proxy's error envelope; `details` is null unless it carries something. */
export function errorEnvelope(code: string, message: string, details?: Record<string, unknown>): unknown {
  return { error: { code, message, details: details && Object.keys(details).length > 0 ? details : null } };
}

/** Writes an answer as aiohttp's `json_response`: Python's JSON, `application/json; charset=utf-8`. */
export function sendPyJson(
  res: http.ServerResponse,
  status: number,
  body: unknown,
  headers: http.OutgoingHttpHeaders = {},
): void {
  const text = pyJson(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

export function sendError(
  res: http.ServerResponse,
  status: number,
  code: string,
  message: string,
  details?: Record<string, unknown>,
  headers?: http.OutgoingHttpHeaders,
): void {
  sendPyJson(res, status, errorEnvelope(code, message, details), headers);
}

/** aiohttp's own plain-text answers: `404: Not Found`, `405: Method Not Allowed`. */
export function sendPlain(
  res: http.ServerResponse,
  status: number,
  text: string,
  headers: http.OutgoingHttpHeaders = {},
): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** What aiohttp answers when a handler raised (the proxy reads a JSON body that is not an object that way). */
export function sendServerError(res: http.ServerResponse): void {
  sendPlain(res, 500, '500 Internal Server Error\n\nServer got itself in trouble');
}

/** An empty answer (aiohttp's bare `web.Response(status=...)`). */
export function sendEmpty(res: http.ServerResponse, status: number): void {
  res.writeHead(status, status === 204 ? {} : { 'content-length': 0 });
  res.end();
}

/**
 * Whether Python's `uuid.UUID(text)` takes it: braces, `urn:uuid:` and hyphens anywhere are dropped, then 32
 * hex digits. The proxy answers 404 before anything else for a job id it does not take.
 */
export function isPythonUuid(text: string): boolean {
  const hex = text
    .replace(/urn:/g, '')
    .replace(/uuid:/g, '')
    .replace(/^\{+|\}+$/g, '')
    .replace(/-/g, '');
  return /^[0-9a-fA-F]{32}$/.test(hex);
}

/**
 * The content type Python's `mimetypes.guess_type` gives a file name on the proxy's Debian (its own table and
 * /etc/mime.types), for the common kinds; `application/octet-stream` for anything else.
 */
const GUESSED_TYPES = new Map<string, string>([
  ['.png', 'image/png'],
  ['.jpg', 'image/jpeg'],
  ['.jpeg', 'image/jpeg'],
  ['.webp', 'image/webp'],
  ['.gif', 'image/gif'],
  ['.bmp', 'image/bmp'],
  ['.tif', 'image/tiff'],
  ['.tiff', 'image/tiff'],
  ['.svg', 'image/svg+xml'],
  ['.mp4', 'video/mp4'],
  ['.webm', 'video/webm'],
  ['.mov', 'video/quicktime'],
  ['.mkv', 'video/x-matroska'],
  ['.wav', 'audio/x-wav'],
  ['.mp3', 'audio/mpeg'],
  ['.flac', 'audio/flac'],
  ['.ogg', 'audio/ogg'],
  ['.txt', 'text/plain'],
  ['.json', 'application/json'],
  ['.html', 'text/html'],
  ['.htm', 'text/html'],
  ['.js', 'text/javascript'],
  ['.css', 'text/css'],
]);

export function guessContentType(filename: string): string {
  const dot = filename.lastIndexOf('.');
  if (dot <= filename.lastIndexOf('/')) return 'application/octet-stream';
  return GUESSED_TYPES.get(filename.slice(dot).toLowerCase()) ?? 'application/octet-stream';
}

/** One request as a v2 route handler gets it. */
export interface V2Request {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  /** The route's `{id}` / `{hash}`, percent-decoded as aiohttp's match_info. */
  param: string;
  /** `http://<Host>`: the proxy builds every link it answers from the request's Host. */
  base: string;
  /** The whole body, or undefined past `limit` bytes (read no further). */
  body(limit: number): Promise<Buffer | undefined>;
}
