/**
 * The multipart/form-data body of an upload: a file part is streamed from disk in large chunks, never read
 * whole, and the body's exact length is known before sending. Written out here rather than with form-data:
 * the body is a few header lines around the file's bytes, which go from the file's read stream to the socket
 * with nothing between (form-data passed each chunk through DelayedStream, CombinedStream and a PassThrough,
 * left the file open when a redeploy or an abort destroyed the body mid-way, and brought twenty packages). */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';

export type FormPart =
  | { name: string; value: string }
  | { name: string; filename: string; contentType?: string; content: Buffer }
  | { name: string; filename: string; contentType?: string; path: string; size: number };

export interface MultipartBody {
  contentType: string;
  length: number;
  /** A fresh pass over the body (a retried request needs a new one); each reads the file again. */
  open(): Readable;
}

/** Chunk size for reading a file part: fewer, larger chunks keep the upload at the speed of a bare request. */
const READ_CHUNK = 1 << 20;
/**
 * How far the body may run ahead of the socket: the next chunk is read from disk while the last one is
 * sent, and no more (the upload's memory stays a few MiB whatever the file's size).
 */
const READ_AHEAD = 2 * READ_CHUNK;

const LINE_BREAK = '\r\n';

/** Quotes in a header parameter as browsers do (HTML's form encoding): `"` and line breaks percent-encoded. */
function quoted(value: string): string {
  return value.replace(/"/g, '%22').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

/** The header lines that open a part, its boundary line first. */
function partHeader(boundary: string, part: FormPart): Buffer {
  let disposition = `form-data; name="${quoted(part.name)}"`;
  let type = '';
  if (!('value' in part)) {
    // The stored name only, never a directory (as form-data, and browsers, send it).
    disposition += `; filename="${quoted(path.basename(part.filename))}"`;
    type = `Content-Type: ${part.contentType ?? 'application/octet-stream'}${LINE_BREAK}`;
  }
  return Buffer.from(
    `--${boundary}${LINE_BREAK}Content-Disposition: ${disposition}${LINE_BREAK}${type}${LINE_BREAK}`,
  );
}

function contentLength(part: FormPart): number {
  if ('value' in part) return Buffer.byteLength(part.value);
  return 'content' in part ? part.content.length : part.size;
}

export function multipartBody(parts: FormPart[]): MultipartBody {
  // One boundary for every pass, so the headers computed once fit each retry's body.
  const boundary = `----graph-gen-${randomBytes(12).toString('hex')}`;
  const headers = parts.map((part) => partHeader(boundary, part));
  const lineBreak = Buffer.from(LINE_BREAK);
  const closing = Buffer.from(`--${boundary}--${LINE_BREAK}`);
  // Sized without opening the files: a file part counts by its known length (a file that changes size
  // meanwhile makes the request fail on its Content-Length, not send something else).
  const length =
    parts.reduce(
      (sum, part, index) => sum + headers[index].length + contentLength(part) + LINE_BREAK.length,
      0,
    ) + closing.length;

  async function* chunks(): AsyncGenerator<Buffer> {
    for (const [index, part] of parts.entries()) {
      yield headers[index];
      if ('value' in part) {
        if (part.value !== '') yield Buffer.from(part.value);
      } else if ('content' in part) yield part.content;
      // Destroyed with the body (an aborted or failed request), the loop closes the file.
      else yield* createReadStream(part.path, { highWaterMark: READ_CHUNK });
      yield lineBreak;
    }
    yield closing;
  }
  // A byte stream (not object mode): undici reads it with backpressure, and a file that fails to read
  // fails the request.
  const open = (): Readable => Readable.from(chunks(), { objectMode: false, highWaterMark: READ_AHEAD });
  return { contentType: `multipart/form-data; boundary=${boundary}`, length, open };
}
