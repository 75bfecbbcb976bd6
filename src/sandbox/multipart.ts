/**
 * A streaming multipart/form-data reader for the sandbox's upload routes: file parts go to a sink chunk by
 * chunk (never gathered whole), text fields are kept (bounded). Enough of RFC 7578 for real clients.
 */
import type { Readable } from 'node:stream';

export interface MultipartFile {
  field: string;
  filename: string;
  contentType?: string;
  size: number;
}

export interface PartSink {
  write(chunk: Buffer): void | Promise<void>;
  end(): void | Promise<void>;
}

export interface MultipartResult {
  fields: Record<string, string>;
  files: MultipartFile[];
}

const MAX_FIELD_BYTES = 1 << 20;
const MAX_HEADER_BYTES = 16 << 10;
const HEADER_END = Buffer.from('\r\n\r\n');

/** The boundary of a multipart content type, or undefined when it is not multipart/form-data. */
export function multipartBoundary(contentType: string | undefined): string | undefined {
  if (!contentType || !/^multipart\/form-data/i.test(contentType)) return undefined;
  const match = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return match?.[1] ?? match?.[2];
}

interface PartHeaders {
  field: string;
  filename?: string;
  contentType?: string;
}

function parsePartHeaders(text: string): PartHeaders {
  const headers: PartHeaders = { field: '' };
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-disposition') {
      headers.field = /\bname="([^"]*)"/i.exec(value)?.[1] ?? '';
      const filename = /\bfilename="([^"]*)"/i.exec(value)?.[1];
      if (filename !== undefined) headers.filename = filename;
    } else if (name === 'content-type') {
      headers.contentType = value;
    }
  }
  return headers;
}

/**
 * Reads a multipart body. `sinkFor` is asked once per file part for where its bytes go (undefined = drop).
 * Throws on a body that is not well formed.
 */
export async function readMultipart(
  body: Readable,
  boundary: string,
  sinkFor: (file: PartHeaders) => PartSink | undefined,
): Promise<MultipartResult> {
  // A leading CRLF lets the first delimiter be found like every later one.
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  const result: MultipartResult = { fields: {}, files: [] };
  let state = 'preamble' as 'preamble' | 'after-delimiter' | 'headers' | 'body' | 'done';
  let buffer: Buffer = Buffer.from('\r\n');
  let part: PartHeaders | undefined;
  let sink: PartSink | undefined;
  let fieldChunks: Buffer[] = [];
  let fieldBytes = 0;
  let fileRecord: MultipartFile | undefined;

  const emit = async (chunk: Buffer): Promise<void> => {
    if (chunk.length === 0 || !part) return;
    if (part.filename !== undefined) {
      if (fileRecord) fileRecord.size += chunk.length;
      if (sink) await sink.write(chunk);
    } else {
      fieldBytes += chunk.length;
      if (fieldBytes > MAX_FIELD_BYTES) throw new Error(`form field ${part.field} is too large`);
      fieldChunks.push(chunk);
    }
  };

  const endPart = async (): Promise<void> => {
    if (!part) return;
    if (part.filename !== undefined) {
      if (sink) await sink.end();
      if (fileRecord) result.files.push(fileRecord);
    } else {
      result.fields[part.field] = Buffer.concat(fieldChunks).toString('utf8');
    }
    part = undefined;
    sink = undefined;
    fileRecord = undefined;
    fieldChunks = [];
    fieldBytes = 0;
  };

  const process = async (): Promise<void> => {
    for (;;) {
      if (state === 'preamble' || state === 'body') {
        const at = buffer.indexOf(delimiter);
        if (at < 0) {
          // Keep only what could be the start of a delimiter split across chunks.
          const keep = Math.min(buffer.length, delimiter.length - 1);
          if (state === 'body') await emit(buffer.subarray(0, buffer.length - keep));
          buffer = buffer.subarray(buffer.length - keep);
          return;
        }
        if (state === 'body') {
          await emit(buffer.subarray(0, at));
          await endPart();
        }
        buffer = buffer.subarray(at + delimiter.length);
        state = 'after-delimiter';
      }
      if (state === 'after-delimiter') {
        if (buffer.length < 2) return;
        if (buffer[0] === 0x2d && buffer[1] === 0x2d) {
          state = 'done';
          return;
        }
        buffer = buffer.subarray(buffer[0] === 0x0d && buffer[1] === 0x0a ? 2 : 0);
        state = 'headers';
      }
      if (state === 'headers') {
        const end = buffer.indexOf(HEADER_END);
        if (end < 0) {
          if (buffer.length > MAX_HEADER_BYTES) throw new Error('multipart part headers are too large');
          return;
        }
        part = parsePartHeaders(buffer.subarray(0, end).toString('utf8'));
        buffer = buffer.subarray(end + HEADER_END.length);
        if (part.filename !== undefined) {
          fileRecord = {
            field: part.field,
            filename: part.filename,
            contentType: part.contentType,
            size: 0,
          };
          sink = sinkFor(part);
        }
        state = 'body';
      }
      if (state === 'done') return;
    }
  };

  for await (const chunk of body) {
    if (state === 'done') continue;
    buffer = buffer.length === 0 ? (chunk as Buffer) : Buffer.concat([buffer, chunk as Buffer]);
    await process();
  }
  if (state !== 'done') {
    if (sink) await sink.end();
    throw new Error('the multipart body ended before its closing boundary');
  }
  return result;
}
