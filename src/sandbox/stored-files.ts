/**
 * The files the generation stand-in stores and serves: an upload's bytes as they arrive (kept in memory up to a
 * limit, then written to disk or only counted; always hashed), a stored file answered as a download (its bytes,
 * or a generated stream of its size), and a tiny image for outputs named but never stored: bytes, apart from
 * the routes that take and serve them. No Node-RED inside.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import type http from 'node:http';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { StoredFile } from './generation-jobs';
import type { PartSink } from './multipart';

const GENERATED_CHUNK = Buffer.alloc(1 << 20, 'graph-gen sandbox file ');

/** A minimal valid 1x1 PNG, served for outputs the event runner names but nobody stored. */
export const TINY_PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

function contentTypeOf(filename: string): string {
  const extension = path.extname(filename).toLowerCase();
  const types: Record<string, string> = {
    '.png': 'image/png',
    '.jpg': 'image/jpeg',
    '.jpeg': 'image/jpeg',
    '.webp': 'image/webp',
    '.gif': 'image/gif',
    '.mp4': 'video/mp4',
    '.webm': 'video/webm',
    '.wav': 'audio/wav',
    '.mp3': 'audio/mpeg',
    '.flac': 'audio/flac',
    '.txt': 'text/plain',
    '.json': 'application/json',
  };
  return types[extension] ?? 'application/octet-stream';
}

/** `size` bytes made on the fly, in large chunks, with backpressure. */
function generatedStream(size: number): Readable {
  let left = size;
  return new Readable({
    highWaterMark: GENERATED_CHUNK.length,
    read() {
      if (left <= 0) {
        this.push(null);
        return;
      }
      const length = Math.min(left, GENERATED_CHUNK.length);
      left -= length;
      this.push(length === GENERATED_CHUNK.length ? GENERATED_CHUNK : GENERATED_CHUNK.subarray(0, length));
    },
  });
}

function sizeOf(file: StoredFile): number {
  return 'content' in file ? file.content.length : file.size;
}

/** Answers with a stored file: its bytes, or a generated stream of its size. */
export function sendFile(res: http.ServerResponse, filename: string, file: StoredFile): void {
  res.writeHead(200, {
    'content-type': file.contentType ?? contentTypeOf(filename),
    'content-length': sizeOf(file),
    'content-disposition': `attachment; filename="${filename.replace(/["\\\r\n]/g, '_')}"`,
  });
  if ('content' in file) res.end(file.content);
  else generatedStream(file.size).pipe(res);
}

/** Where an upload's bytes go: kept in memory up to a limit, then to disk or nowhere; always hashed. */
export class UploadSink implements PartSink {
  readonly hash?: ReturnType<typeof createHash>;
  size = 0;
  private kept: Buffer[] = [];
  private file?: WriteStream;
  private filePath?: string;

  constructor(
    private readonly keepBytes: number,
    private readonly directory: string | undefined,
    hash: boolean,
  ) {
    if (hash) this.hash = createHash('sha256');
  }

  async write(chunk: Buffer): Promise<void> {
    this.hash?.update(chunk);
    this.size += chunk.length;
    if (this.size <= this.keepBytes) {
      this.kept.push(Buffer.from(chunk));
      return;
    }
    this.kept = [];
    if (!this.directory) return;
    if (!this.file) {
      mkdirSync(this.directory, { recursive: true });
      this.filePath = path.join(this.directory, `upload-${randomBytes(6).toString('hex')}`);
      this.file = createWriteStream(this.filePath);
    }
    if (!this.file.write(chunk))
      await new Promise<void>((resolve) => this.file?.once('drain', () => resolve()));
  }

  async end(): Promise<void> {
    if (this.file) await new Promise<void>((resolve) => this.file?.end(() => resolve()));
  }

  stored(contentType: string | undefined): StoredFile {
    return this.size <= this.keepBytes
      ? { content: Buffer.concat(this.kept), contentType }
      : { size: this.size, contentType };
  }
}
