/**
 * Downloading output files: which references a message names, where a file may be saved, and saving or
 * buffering a download. No Node-RED inside.
 */
import { randomBytes } from 'node:crypto';
import { close, createWriteStream, open, type Stats } from 'node:fs';
import { link, lstat, mkdir, rename, unlink } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { errorText, ownValue, textOf } from '../../boundary/outside';
import { ServiceError, invalidInput } from '../../http/errors';
import { assetIdOf } from '../jobs/job-outputs';
import type { FileReference, OpenFile } from './rest-client';
import { MIB, sizeText } from './size-text';

/** What opens a job's output file for reading: the connection's dialect. */
export interface FileSource {
  openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile>;
}

function isReference(value: unknown): value is FileReference {
  return (
    value !== null &&
    typeof value === 'object' &&
    typeof (value as FileReference).filename === 'string' &&
    (value as FileReference).filename !== ''
  );
}

/** The file references of a payload: one reference, an array of them, or an await-job result (`files`). */
export function referencesOf(payload: unknown): FileReference[] {
  let list: unknown[];
  if (Array.isArray(payload)) list = payload;
  else if (payload && typeof payload === 'object' && Array.isArray((payload as { files?: unknown }).files))
    list = (payload as { files: unknown[] }).files;
  else if (isReference(payload)) list = [payload];
  else {
    throw invalidInput(
      'msg.payload must be a file reference {filename, subfolder, type}, an array of them, or an await-job result with files',
    );
  }
  return list.map((item, index) => {
    if (!isReference(item)) {
      throw invalidInput(`file reference ${index + 1} of msg.payload has no filename`);
    }
    const ref: FileReference = {
      filename: item.filename,
      subfolder: typeof item.subfolder === 'string' ? item.subfolder : '',
      type: typeof item.type === 'string' && item.type ? item.type : 'output',
    };
    // What a Comfy API v2 server downloads a file by: without it, an await's result could not be downloaded.
    const assetId = assetIdOf(ownValue(item, 'asset_id'));
    if (assetId !== undefined) ref.asset_id = assetId;
    return ref;
  });
}

/**
 * The path a file of this name gets in `directory`; refuses a name that would leave it (separators, `..`,
 * an absolute path, control characters).
 */
export function targetPath(directory: string, filename: string): string {
  if (
    filename === '' ||
    filename === '.' ||
    filename === '..' ||
    /[/\\]/.test(filename) ||
    path.isAbsolute(filename) ||
    hasControlCharacter(filename)
  ) {
    throw invalidInput(
      `the file name "${[...filename].map((c) => (hasControlCharacter(c) ? '?' : c)).join('')}" would leave the download directory: it was not saved`,
    );
  }
  const root = path.resolve(directory);
  const target = path.resolve(root, filename);
  if (path.dirname(target) !== root) {
    throw invalidInput(`the file name "${filename}" would leave the download directory: it was not saved`);
  }
  return target;
}

function hasControlCharacter(text: string): boolean {
  return [...text].some((character) => character.charCodeAt(0) < 0x20 || character.charCodeAt(0) === 0x7f);
}

export interface BufferedFile {
  payload: Buffer;
  contentType?: string;
}

/** The largest file buffer mode holds in memory unless the node says otherwise (file mode has no limit). */
export const DEFAULT_BUFFER_LIMIT = 512 * MIB;

function tooLargeForBuffer(ref: FileReference, maxBytes: number, size?: number): ServiceError {
  return invalidInput(
    `"${ref.filename}" is ${size === undefined ? 'larger than' : `${sizeText(size)}, more than`} the download node's buffer limit of ${sizeText(maxBytes)}: raise "Buffer limit" in the node, or save the file with file output`,
  );
}

/**
 * Downloads a file whole into memory (buffer mode), up to `maxBytes`: a larger Content-Length is refused
 * before a byte is read, and a body that grows past the limit is stopped. With a Content-Length the Buffer
 * is allocated once at that size and filled as the bytes arrive, so memory peaks at the file's size, not
 * twice it; without one (or with a wrong one) the chunks are joined at the end.
 */
export async function downloadToBuffer(
  rest: FileSource,
  ref: FileReference,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<BufferedFile> {
  const file = await rest.openFile(ref, signal);
  if (file.contentLength !== undefined && file.contentLength > maxBytes) {
    // Destroyed, not drained: reading what is announced is what the limit is there to prevent.
    file.body.destroy();
    throw tooLargeForBuffer(ref, maxBytes, file.contentLength);
  }
  try {
    return {
      payload: await readWhole(file.body, file.contentLength, maxBytes, ref),
      contentType: file.contentType,
    };
  } catch (error) {
    throw interrupted(ref, error);
  }
}

async function readWhole(
  body: OpenFile['body'],
  length: number | undefined,
  maxBytes: number,
  ref: FileReference,
): Promise<Buffer> {
  let whole = length !== undefined && length > 0 ? Buffer.allocUnsafe(length) : undefined;
  let filled = 0;
  let received = 0;
  const spill: Buffer[] = [];
  for await (const chunk of body as AsyncIterable<Buffer>) {
    received += chunk.length;
    if (received > maxBytes) {
      body.destroy();
      throw tooLargeForBuffer(ref, maxBytes);
    }
    if (whole && filled + chunk.length <= whole.length) {
      chunk.copy(whole, filled);
      filled += chunk.length;
    } else {
      // More than announced: keep what came, join at the end.
      if (whole) spill.push(whole.subarray(0, filled));
      whole = undefined;
      spill.push(chunk);
    }
  }
  if (whole) return filled === whole.length ? whole : whole.subarray(0, filled);
  return Buffer.concat(spill);
}

/**
 * How much of a download may wait for the disk. The socket delivers 64 KiB at a time: with the default
 * 16 KiB every chunk would stop the socket until the disk had it; with room for several, the socket keeps
 * reading while one write is under way, and the chunks that arrived meanwhile go out in one `writev`. Not
 * gathered longer on purpose: a chunk written soon after it arrived is still in the processor's cache, and
 * a whole 1 MiB gathered first, then written, made the kernel's copy to the disk cache ~10x slower.
 */
const WRITE_BEHIND = 1 << 20;

/** A file name for a sentence: a long one is shortened in the middle. */
function shownName(name: string): string {
  return name.length > 60 ? `${name.slice(0, 40)}…${name.slice(-12)}` : name;
}

function errorCode(error: unknown): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * Why a file cannot be saved, by the file system's error code, in a sentence that says what to fix. It is
 * `invalid_input`: where files go is the flow's choice, and trying again would not help.
 */
function cannotSave(ref: FileReference, directory: string, code: string | undefined): ServiceError {
  const name = `"${shownName(ref.filename)}"`;
  switch (code) {
    case 'ENOTDIR':
      return invalidInput(
        `${name} cannot be saved: ${directory} is not a directory (a file is in its place or in its path): choose another directory`,
      );
    case 'ENAMETOOLONG':
      return invalidInput(
        `${name} cannot be saved in ${directory}: the name is longer than its file system allows`,
      );
    case 'EISDIR':
      return invalidInput(
        `${name} cannot be saved in ${directory}: a directory of that name is there, and it is not replaced`,
      );
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return invalidInput(
        `${name} cannot be saved in ${directory}: Node-RED may not write there (${code}): choose another directory or let Node-RED write to it`,
      );
    default:
      return invalidInput(
        `${name} cannot be saved in ${directory} (${code ?? 'file system error'}): check the directory`,
      );
  }
}

/**
 * Opens a new file to write, `wx` so that it never takes over a file that is there. A plain descriptor, not
 * a FileHandle: the write stream then writes with callbacks, not a promise per write.
 */
function openNew(file: string): Promise<number> {
  return new Promise((resolve, reject) =>
    open(file, 'wx', (error, fd) => (error ? reject(error) : resolve(fd))),
  );
}

/**
 * A new file to write (see `openNew`). A missing directory is made (refused when it, or a part of its path,
 * is a file) and the file made again: a directory that is there costs no mkdir.
 */
async function createTemporary(file: string, ref: FileReference, directory: string): Promise<number> {
  try {
    return await openNew(file);
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw cannotSave(ref, directory, errorCode(error));
  }
  try {
    await mkdir(path.dirname(file), { recursive: true });
  } catch (error) {
    // mkdir says EEXIST when the directory itself is a file.
    const code = errorCode(error);
    throw cannotSave(ref, directory, code === 'EEXIST' ? 'ENOTDIR' : code);
  }
  try {
    return await openNew(file);
  } catch (error) {
    throw cannotSave(ref, directory, errorCode(error));
  }
}

/** Removes a temporary file that will not take the target's place, closing it first unless its stream did. */
async function discard(file: string, fd?: number): Promise<void> {
  if (fd !== undefined) await new Promise((resolve) => close(fd, resolve));
  await unlink(file).catch(() => undefined);
}

/**
 * Checks the target's place before anything is requested, and makes the temporary file beside it: both at
 * once, one wait for the disk rather than one after the other. The directory is made if missing (see
 * `createTemporary`), the name must fit the file system, a directory of that name is never replaced, and an
 * existing file only with `overwrite`; a refusal removes the temporary file again.
 */
async function prepareTarget(
  target: string,
  temporary: string,
  ref: FileReference,
  directory: string,
  overwrite: boolean,
): Promise<number> {
  const [made, seen] = await Promise.allSettled([createTemporary(temporary, ref, directory), lstat(target)]);
  const found: Stats | undefined = seen.status === 'fulfilled' ? seen.value : undefined;
  let refusal: unknown = found?.isDirectory()
    ? cannotSave(ref, directory, 'EISDIR')
    : found && !overwrite
      ? alreadyExists(ref, directory)
      : undefined;
  if (refusal === undefined && made.status === 'rejected') refusal = made.reason;
  if (refusal === undefined && seen.status === 'rejected' && errorCode(seen.reason) !== 'ENOENT')
    refusal = cannotSave(ref, directory, errorCode(seen.reason));
  if (refusal === undefined && made.status === 'fulfilled') return made.value;
  if (made.status === 'fulfilled') await discard(temporary, made.value);
  throw refusal;
}

function alreadyExists(ref: FileReference, directory: string): ServiceError {
  return invalidInput(
    `"${ref.filename}" already exists in ${directory}: it was not overwritten (see the overwrite setting)`,
  );
}

/** What is at `file`, if anything. */
async function lstatOrNothing(file: string): Promise<Stats | undefined> {
  return lstat(file).catch(() => undefined);
}

/**
 * Puts the finished temporary file at `target`. Overwriting is a rename, atomic: the target is the old file
 * or the new one, never a mix. Otherwise a hard link, which refuses a file that appeared meanwhile (a
 * rename where the file system has no links). A directory that took the name meanwhile is kept.
 */
async function place(
  temporary: string,
  target: string,
  overwrite: boolean,
  ref: FileReference,
  directory: string,
) {
  if (overwrite) {
    await rename(temporary, target);
    return;
  }
  try {
    await link(temporary, target);
  } catch (error) {
    const found = await lstatOrNothing(target);
    if (found?.isDirectory()) throw cannotSave(ref, directory, 'EISDIR');
    if (errorCode(error) === 'EEXIST' || found) throw alreadyExists(ref, directory);
    await rename(temporary, target);
    return;
  }
  await unlink(temporary);
}

/**
 * Streams a file into `directory` under the service's name. The target's place is checked, and the
 * temporary file made, before anything is requested (see `prepareTarget`); an existing file is kept unless
 * `overwrite`. The bytes go to a temporary file beside the target, which takes the target's place only once
 * the file is complete: a transfer that breaks off, or a redeploy that stops it, leaves the old file as it
 * was and no partial file; two downloads of one name never interleave.
 */
export async function downloadToDirectory(
  rest: FileSource,
  ref: FileReference,
  directory: string,
  overwrite: boolean,
  signal?: AbortSignal,
): Promise<{ path: string; contentType?: string; size: number }> {
  const target = targetPath(directory, ref.filename);
  const temporary = path.join(path.dirname(target), `.graph-gen-${randomBytes(8).toString('hex')}.part`);
  const fd = await prepareTarget(target, temporary, ref, directory, overwrite);
  let file: OpenFile;
  try {
    file = await rest.openFile(ref, signal);
  } catch (error) {
    await discard(temporary, fd);
    throw error;
  }
  // The stream closes the file once everything is written, or when it is destroyed (after a write under way).
  const out = createWriteStream(temporary, { fd, highWaterMark: WRITE_BEHIND });
  try {
    await pipeline(file.body, out, { signal });
  } catch (error) {
    // Removed once closed: a file still open cannot be removed on every system (Windows).
    out.destroy();
    if (!out.closed) await new Promise<void>((resolve) => out.once('close', () => resolve()));
    await discard(temporary);
    throw interrupted(ref, error);
  }
  try {
    await place(temporary, target, overwrite, ref, directory);
  } catch (error) {
    await unlink(temporary).catch(() => undefined);
    throw error instanceof ServiceError ? error : cannotSave(ref, directory, errorCode(error));
  }
  return { path: target, contentType: file.contentType, size: out.bytesWritten };
}

function interrupted(ref: FileReference, error: unknown): ServiceError {
  if (error instanceof ServiceError) return error;
  const reason = textOf((error as { code?: unknown } | null | undefined)?.code, 100) ?? errorText(error, 300);
  return new ServiceError('network', `the download of "${ref.filename}" broke off (${reason}): try again`);
}
