/**
 * A bounded reader of Server-Sent Events (the HTML standard's "event stream" format) over a byte stream: an
 * undici body, or any async iterable of Buffers. It is how v2's `GET /api/v2/jobs/{id}/events` is read
 * (v2-event-streams.ts); it knows nothing of v2 and hands on each event's type and data as text, which the v2
 * reader parses (v2-stream-events.ts, through readJsonText).
 * What it reads: `event:` (the type; `message` when none), `data:` (lines joined by `\n`), `id:` and `retry:`
 * (read and ignored: v2 sends neither and our waits are our own), any other field (ignored), comments (`:` lines,
 * e.g. the proxy's `: keepalive`) and the blank line that dispatches an event. Lines end with CRLF, LF or CR; a
 * chunk may end anywhere, mid-line, between CR and LF, or inside a UTF-8 character: lines are cut on bytes (CR
 * and LF never occur inside a UTF-8 sequence) and decoded whole, so a split never changes what is read.
 * Bounded and linear: a line, or an event's data, past `maxEventBytes` makes the stream unreadable (nothing more
 * is read from it; a server that never ends a line is not buffered without bound). Each byte is looked at once:
 * the next CR and LF are found by indexOf and remembered, and a line split across chunks is copied once into
 * its pieces and joined once at its end (no re-scan of a growing buffer). Never throws on any bytes; only the
 * caller's own `onEvent` may. No Node-RED inside.
 */

/** One dispatched event. */
export interface SseEvent {
  /** The `event:` field; `message` when the event had none. */
  type: string;
  /** The `data:` lines joined by `\n`. */
  data: string;
  /**
   * The event's size on the wire: its lines (the comments among them and its blank line), each line end counted
   * as one byte (a CRLF too), so the size does not depend on where chunks were cut.
   */
  bytes: number;
}

export interface SseReaderOptions {
  /** The longest line, and the most data of one event, in bytes (default 16 MiB: a preview's base64 is big). */
  maxEventBytes?: number;
}

/** A preview of a few MB is base64 in one `data:` line: room for it, and a bound on a runaway line. */
export const DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

/** How a stream read by `readSse` ended. */
export type SseEnd = { kind: 'ended' } | { kind: 'unreadable'; reason: string };

export class SseReader {
  private readonly maxEventBytes: number;
  /** The pieces of a line that began in an earlier chunk (copies), and their bytes. */
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** The last chunk ended with CR: an LF that starts the next one ends no further line. */
  private afterCr = false;
  private firstLine = true;
  private eventType = '';
  private data: string[] = [];
  private hasData = false;
  private dataBytes = 0;
  /** Bytes read since the last dispatch (or blank line). */
  private eventBytes = 0;
  private refused?: string;

  constructor(
    private readonly onEvent: (event: SseEvent) => void,
    options: SseReaderOptions = {},
  ) {
    this.maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  }

  /** Why the stream is unreadable; undefined while it is read. */
  get refusal(): string | undefined {
    return this.refused;
  }

  /**
   * Reads one chunk, dispatching every event it completes. False once the stream is unreadable (past a bound):
   * then nothing more is read, and the caller ends the stream.
   */
  push(chunk: Uint8Array | string): boolean {
    if (this.refused !== undefined) return false;
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : toBuffer(chunk);
    let start = 0;
    if (this.afterCr && bytes.length > 0) {
      this.afterCr = false;
      if (bytes[0] === LF) start = 1;
    }
    // The next CR and LF at or after `start`, found once each and kept until passed (-1: none left).
    let nextCr = bytes.indexOf(CR, start);
    let nextLf = bytes.indexOf(LF, start);
    while (start < bytes.length) {
      if (nextCr !== -1 && nextCr < start) nextCr = bytes.indexOf(CR, start);
      if (nextLf !== -1 && nextLf < start) nextLf = bytes.indexOf(LF, start);
      const end = nextCr === -1 ? nextLf : nextLf === -1 ? nextCr : Math.min(nextCr, nextLf);
      if (end === -1) {
        // No line end in the rest of the chunk: kept (copied) for the line's end in a later chunk.
        const rest = bytes.length - start;
        if (this.pendingBytes + rest > this.maxEventBytes)
          return this.refuse(`a line longer than ${this.maxEventBytes} bytes`);
        this.pending.push(Buffer.from(bytes.subarray(start)));
        this.pendingBytes += rest;
        return true;
      }
      const lineBytes = this.pendingBytes + (end - start);
      if (lineBytes > this.maxEventBytes)
        return this.refuse(`a line longer than ${this.maxEventBytes} bytes`);
      let line: string;
      if (this.pending.length === 0) line = bytes.toString('utf8', start, end);
      else {
        this.pending.push(bytes.subarray(start, end));
        line = Buffer.concat(this.pending, lineBytes).toString('utf8');
        this.pending = [];
        this.pendingBytes = 0;
      }
      let lineEnd = 1;
      if (bytes[end] === CR) {
        if (end + 1 < bytes.length) {
          if (bytes[end + 1] === LF) lineEnd = 2;
        } else this.afterCr = true;
      }
      // A line end counts one byte, CRLF too: a CRLF cut between two chunks counts the same as one that is not.
      this.eventBytes += lineBytes + 1;
      start = end + lineEnd;
      if (!this.line(line, lineBytes)) return false;
    }
    return true;
  }

  /** One line, without its end, and its bytes. False when it made the stream unreadable. */
  private line(text: string, bytes: number): boolean {
    let line = text;
    if (this.firstLine) {
      this.firstLine = false;
      // A byte order mark at the start of the stream is not part of its first line.
      if (line.charCodeAt(0) === 0xfeff) line = line.slice(1);
    }
    if (line === '') {
      this.dispatch();
      return true;
    }
    if (line.charCodeAt(0) === 0x3a /* : */) return true;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20 /* space */) value = value.slice(1);
    if (field === 'data') {
      // Counted by its whole line (the field name too) and the `\n` that joins it: a bound, not a measure.
      this.dataBytes += bytes + 1;
      if (this.dataBytes > this.maxEventBytes)
        return this.refuse(`an event with more than ${this.maxEventBytes} bytes of data`);
      this.data.push(value);
      this.hasData = true;
    } else if (field === 'event') this.eventType = value;
    return true;
  }

  private dispatch(): void {
    const bytes = this.eventBytes;
    this.eventBytes = 0;
    const hasData = this.hasData;
    const type = this.eventType === '' ? 'message' : this.eventType;
    const data = hasData ? this.data.join('\n') : '';
    this.eventType = '';
    this.data = [];
    this.hasData = false;
    this.dataBytes = 0;
    // A blank line after no data dispatches nothing (the standard's rule): a comment's own blank line, say.
    if (hasData) this.onEvent({ type, data, bytes });
  }

  private refuse(reason: string): false {
    this.refused = reason;
    this.pending = [];
    this.pendingBytes = 0;
    this.data = [];
    return false;
  }
}

/**
 * Reads a whole byte stream, handing each event to `onEvent`; how it ended. An unreadable stream is left at
 * once (leaving the loop destroys a Node stream, which closes its connection). Never throws for the bytes; a
 * failure of the source itself (a connection that broke) is thrown as it came.
 */
export async function readSse(
  source: AsyncIterable<Uint8Array | string>,
  onEvent: (event: SseEvent) => void,
  options: SseReaderOptions = {},
): Promise<SseEnd> {
  const reader = new SseReader(onEvent, options);
  for await (const chunk of source) {
    if (!reader.push(chunk)) return { kind: 'unreadable', reason: reader.refusal ?? 'unreadable' };
  }
  return { kind: 'ended' };
}

function toBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}
