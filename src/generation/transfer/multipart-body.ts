/**
 * The multipart/form-data body of an upload, built with form-data: a file part is streamed from disk in
 * large chunks, never read whole, and the body's exact length is known before sending.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, type ReadStream } from 'node:fs';
import { PassThrough, type Readable } from 'node:stream';
import FormData from 'form-data';

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

/** Quotes in a header parameter as browsers do (HTML's form encoding): `"` and line breaks percent-encoded. */
function quoted(value: string): string {
  return value.replace(/"/g, '%22').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

export function multipartBody(parts: FormPart[]): MultipartBody {
  // One boundary for every pass, so the headers computed once fit each retry's body.
  const boundary = `----graph-gen-${randomBytes(12).toString('hex')}`;
  const build = (openFile: (path: string) => NodeJS.ReadableStream | Buffer): FormData => {
    const form = new FormData();
    form.setBoundary(boundary);
    for (const part of parts) {
      if ('value' in part) {
        form.append(quoted(part.name), part.value);
        continue;
      }
      const options = {
        filename: quoted(part.filename),
        contentType: part.contentType ?? 'application/octet-stream',
      };
      if ('content' in part) form.append(quoted(part.name), part.content, options);
      else form.append(quoted(part.name), openFile(part.path), { ...options, knownLength: part.size });
    }
    return form;
  };
  // Sized without opening the files: a file part counts by its known length.
  const length = build(() => Buffer.alloc(0)).getLengthSync();
  // form-data is a classic stream that starts on pipe(): piped into a Readable, undici reads it with
  // backpressure in large chunks, and a file that fails to read fails the request.
  const open = (): Readable => {
    const files: ReadStream[] = [];
    const form = build((path) => {
      const file = createReadStream(path, { highWaterMark: READ_CHUNK });
      files.push(file);
      return file;
    });
    const body = new PassThrough({ highWaterMark: READ_CHUNK });
    form.on('error', (error: Error) => body.destroy(error));
    // A request cut off (abort, redeploy, a server that stops reading) destroys the body; form-data would
    // leave the file it was reading open, so its descriptor is closed here.
    body.once('close', () => {
      for (const file of files) file.destroy();
    });
    return form.pipe(body);
  };
  return { contentType: `multipart/form-data; boundary=${boundary}`, length, open };
}
