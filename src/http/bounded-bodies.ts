/**
 * Request and answer bodies within bounds, for the client (client.ts): an answer read whole as text up to a limit
 * (TooLarge past it, the connection dropped), and a streamed request body handed to the connection in pieces the
 * request clock (request-clock.ts) counts as the socket takes them. Apart from the client because they know
 * bytes, not requests: no retry, no service, no error sentence here.
 */
import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { RequestClock } from './request-clock';

/** The answer was larger than the request allows: read no further. */
export class TooLarge extends Error {
  constructor(readonly limit: number) {
    super('answer too large');
  }
}

/** The largest piece of a request body handed to the connection at once (see `counted`). */
const BODY_PIECE = 64 * 1024;

/**
 * A request body that tells the clock of each piece as the connection takes it, and of its end. A source's
 * chunk may be the whole file (form-data hands a Buffer part over as one): it is handed on in pieces, each
 * only when the connection asks for more, so what is counted is what the socket took, not what waits in it.
 */
export function counted(body: Readable, clock: RequestClock): Readable {
  async function* pieces(): AsyncGenerator<Buffer> {
    // Leaving the loop early (the request was cut off) destroys the source, which closes what it reads.
    for await (const chunk of body as AsyncIterable<Buffer | string>) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      for (let offset = 0; offset < bytes.length; offset += BODY_PIECE) {
        const piece = bytes.subarray(offset, offset + BODY_PIECE);
        clock.moved(piece.length);
        yield piece;
      }
    }
    clock.handedOver();
  }
  return Readable.from(pieces(), { objectMode: false, highWaterMark: BODY_PIECE });
}

/** The bytes of a body handed over whole (a JSON text, a Buffer); 0 for anything else. */
export function bodySize(body: unknown): number {
  if (typeof body === 'string') return Buffer.byteLength(body);
  if (body instanceof Uint8Array) return body.length;
  return 0;
}

/** Reads a body as text, refusing (and dropping the connection) past `limit` bytes. */
export async function readText(body: Dispatcher.ResponseData['body'], limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      throw new TooLarge(limit);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, size).toString('utf8');
}

/** A limit in words: KiB or MiB. */
export function formatBytes(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${Math.round(bytes / 1024 / 1024)} MiB` : `${Math.round(bytes / 1024)} KiB`;
}
