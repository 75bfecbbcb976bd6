/**
 * The modes of what this package keeps on disk: its files hold whole msgs (a header, a payload a user typed), so
 * they are the owner's only, like `~/.ssh`: files 0600, their folder 0700. A file or folder made by an earlier
 * release with the umask's modes (0644, 0755) is narrowed when it is next opened, not only when made. Failures
 * to narrow are the caller's to report (a file system without modes, a folder of another user). No Node-RED
 * inside.
 */
import { chmodSync, mkdirSync } from 'node:fs';
import { chmod } from 'node:fs/promises';

export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_FOLDER_MODE = 0o700;

/** Makes `folder` (and those above it that are missing) and narrows it to its owner. */
export function makePrivateFolderSync(folder: string): void {
  mkdirSync(folder, { recursive: true, mode: PRIVATE_FOLDER_MODE });
  chmodSync(folder, PRIVATE_FOLDER_MODE);
}

/** Narrows an existing file (or folder) to its owner; one that is not there is left so. */
export async function narrowIfPresent(file: string, mode: number): Promise<void> {
  await chmod(file, mode).catch((error: unknown) => {
    if ((error as { code?: unknown } | null)?.code !== 'ENOENT') throw error;
  });
}
