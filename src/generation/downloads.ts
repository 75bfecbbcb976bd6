/**
 * Downloading output files: which references a message names, where a file may be saved, and saving or
 * buffering a download. No Node-RED inside.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { ServiceError, invalidInput } from '../http/errors';
import type { FileReference, GenerationRestClient, OpenFile } from './rest-client';

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
    return {
      filename: item.filename,
      subfolder: typeof item.subfolder === 'string' ? item.subfolder : '',
      type: typeof item.type === 'string' && item.type ? item.type : 'output',
    };
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

/** Downloads a file whole into memory (buffer mode). */
export async function downloadToBuffer(
  rest: GenerationRestClient,
  ref: FileReference,
  signal?: AbortSignal,
): Promise<BufferedFile> {
  const file = await rest.openFile(ref, signal);
  try {
    const payload = Buffer.from(await file.body.arrayBuffer());
    return { payload, contentType: file.contentType };
  } catch (error) {
    throw interrupted(ref, error);
  }
}

/** A write stream on `target`, open; `wx` refuses an existing file. */
async function openTarget(target: string, flags: 'w' | 'wx', ref: FileReference, directory: string) {
  const out = createWriteStream(target, { flags });
  try {
    await new Promise<void>((resolve, reject) => {
      out.once('open', () => resolve());
      out.once('error', reject);
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      throw invalidInput(
        `"${ref.filename}" already exists in ${directory}: it was not overwritten (see the overwrite setting)`,
      );
    }
    throw invalidInput(`"${ref.filename}" cannot be written to ${directory} (${code ?? String(error)})`);
  }
  return out;
}

/**
 * Streams a file into `directory` under the service's name. An existing file is kept unless `overwrite`
 * (refused before anything is requested); when overwriting, the old file is replaced only once the service
 * has answered with the file. A partial file is removed when the transfer fails.
 */
export async function downloadToDirectory(
  rest: GenerationRestClient,
  ref: FileReference,
  directory: string,
  overwrite: boolean,
  signal?: AbortSignal,
): Promise<{ path: string; contentType?: string; size: number }> {
  const target = targetPath(directory, ref.filename);
  await mkdir(path.dirname(target), { recursive: true });
  let out = overwrite ? undefined : await openTarget(target, 'wx', ref, directory);
  let file: OpenFile;
  try {
    file = await rest.openFile(ref, signal);
  } catch (error) {
    out?.destroy();
    if (out) await unlink(target).catch(() => undefined);
    throw error;
  }
  try {
    out ??= await openTarget(target, 'w', ref, directory);
  } catch (error) {
    await file.body.dump().catch(() => undefined);
    throw error;
  }
  try {
    await pipeline(file.body, out, { signal });
  } catch (error) {
    await unlink(target).catch(() => undefined);
    throw interrupted(ref, error);
  }
  return { path: target, contentType: file.contentType, size: out.bytesWritten };
}

function interrupted(ref: FileReference, error: unknown): ServiceError {
  if (error instanceof ServiceError) return error;
  const reason = (error as NodeJS.ErrnoException)?.code ?? (error as Error)?.message ?? String(error);
  return new ServiceError('network', `the download of "${ref.filename}" broke off (${reason}): try again`);
}
