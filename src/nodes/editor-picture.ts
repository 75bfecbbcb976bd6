/**
 * The picture under a node in the editor: the "show the last image" setting of the await-job and download
 * nodes (off by default). The picture goes to the editor through Node-RED's comms, which delivers only to
 * the editor sessions Node-RED has let in (with `adminAuth` set, signed-in users allowed to read status), as
 * a retained message so an editor opened later sees it too; it is taken back when the node closes. Its
 * bytes go nowhere else: not into a msg, a log or a file. Each node shows its latest image: a newer one stops
 * the work on an older one, so a node works on at most one picture at a time. Bounds (what is read, what is
 * sent, how many pixels are scaled) live in src/generation/transfer/picture.ts.
 */
import { open } from 'node:fs/promises';
import type { Node, NodeAPI } from 'node-red';
import type { GenerationConnection } from '../generation/connection';
import { downloadToBuffer } from '../generation/transfer/downloads';
import {
  MAX_SOURCE_BYTES,
  imageTypeOf,
  pictureOf,
  type PictureOutcome,
} from '../generation/transfer/picture';
import type { FileReference } from '../generation/transfer/rest-client';
import { asServiceError } from './node-helpers';

/** The comms topic of a node's picture; the editor subscribes to `graph-gen/picture/#`. */
export const PICTURE_TOPIC = 'graph-gen/picture/';

/** Names of files the editor can show: what await-job fetches (the result lists video and audio too). */
const IMAGE_NAME = /\.(png|jpe?g|gif|webp)$/i;

export interface EditorPicture {
  /** Shows these bytes when they are an image; anything else leaves the last picture as it is. */
  showBytes(bytes: Buffer): void;
  /** Reads a file the node saved back from disk (bounded) and shows it when it is an image. */
  showFile(path: string): void;
  /** Fetches the last image file of a job's result through the connection (bounded) and shows it. */
  showLastImage(connection: GenerationConnection, files: FileReference[] | undefined): void;
  /** Stops the work under way and takes the picture out of the editor. */
  close(): void;
}

/** What a comms message of a picture topic carries (the editor's side reads exactly these). */
type PictureMessage =
  { type: string; data: string; width?: number; height?: number } | { refused: string } | { cleared: true };

/** The last image file among `files`, by name (the bytes are checked again once fetched). */
export function lastImageFile(files: FileReference[] | undefined): FileReference | undefined {
  return [...(files ?? [])].reverse().find((file) => IMAGE_NAME.test(file.filename));
}

/**
 * A saved file's bytes when it is an image no larger than MAX_SOURCE_BYTES (only its first bytes are read
 * to tell), a refusal when it is a larger image, and undefined when it is not an image.
 */
async function readImageFile(path: string): Promise<Buffer | PictureOutcome | undefined> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    const head = Buffer.alloc(Math.min(size, 16));
    await handle.read(head, 0, head.length, 0);
    if (!imageTypeOf(head)) return undefined;
    if (size > MAX_SOURCE_BYTES) return { refused: 'too-large' };
    const bytes = Buffer.alloc(size);
    let filled = 0;
    while (filled < size) {
      const { bytesRead } = await handle.read(bytes, filled, size - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return bytes.subarray(0, filled);
  } finally {
    await handle.close();
  }
}

/** The picture of a node whose setting is on; undefined when it is off, so nothing is ever published. */
export function editorPicture(RED: NodeAPI, node: Node, enabled: boolean): EditorPicture | undefined {
  if (!enabled) return undefined;
  const topic = PICTURE_TOPIC + node.id;
  let running: AbortController | undefined;
  let shown = false;
  let closed = false;

  function publish(outcome: PictureOutcome): void {
    const message: PictureMessage =
      'picture' in outcome
        ? {
            type: outcome.picture.type,
            data: outcome.picture.bytes.toString('base64'),
            width: outcome.picture.width,
            height: outcome.picture.height,
          }
        : { refused: outcome.refused };
    RED.comms.publish(topic, message, true);
    shown = true;
  }

  /** Runs the latest picture's work; an older one still running is stopped. Never throws. */
  function show(bytesOf: (signal: AbortSignal) => Promise<Buffer | PictureOutcome | undefined>): void {
    if (closed) return;
    running?.abort();
    const controller = new AbortController();
    running = controller;
    const { signal } = controller;
    void (async () => {
      try {
        const source = await bytesOf(signal);
        const outcome = Buffer.isBuffer(source) ? await pictureOf(source, signal) : source;
        // Not an image: the last picture stays.
        if (outcome && !signal.aborted) publish(outcome);
      } catch (error) {
        // Said without the bytes; the service's sentences never hold a key.
        if (!signal.aborted) node.debug(`no picture for the editor: ${asServiceError(error).message}`);
      } finally {
        if (running === controller) running = undefined;
      }
    })();
  }

  return {
    showBytes(bytes) {
      show(async () => bytes);
    },
    showFile(path) {
      show(() => readImageFile(path));
    },
    showLastImage(connection, files) {
      const file = lastImageFile(files);
      if (!file) return;
      show(async (signal) => {
        try {
          return (await downloadToBuffer(connection.dialect, file, MAX_SOURCE_BYTES, signal)).payload;
        } catch (error) {
          // downloadToBuffer refuses a file past its limit as invalid input; anything else is the service's.
          if (asServiceError(error).code === 'invalid_input' && !signal.aborted)
            return { refused: 'too-large' };
          throw error;
        }
      });
    },
    close() {
      closed = true;
      running?.abort();
      running = undefined;
      // Not retained: Node-RED drops the retained picture, and open editors take it away.
      if (shown) RED.comms.publish(topic, { cleared: true } satisfies PictureMessage, false);
    },
  };
}
