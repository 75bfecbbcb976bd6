/**
 * What this package keeps under Node-RED's user directory, in `<userDir>/graph-gen/`: await-job nodes' kept
 * awaits (await-resume.ts), job-events nodes' memory of the jobs they told (graph-gen-job-events.ts), and each
 * config node's socket id, kept so that after a restart the socket comes back
 * under the same id: a self-hosted server sends a job's events only to the socket its submit named, so jobs
 * submitted before the restart still reach this Node-RED.
 *
 * A node's file is named by its id, and the name must be one node's only: `fileId` keeps an id as it is when it
 * is made of lower-case letters, digits, `.` and `-` (Node-RED's own ids: hex digits), and otherwise writes what
 * a name can hold of it (for people) followed by `~` and a hash of the whole id, so `a:b`, `a/b` and `a_b` get
 * three files, on case-blind file systems too. Releases before named every file `legacyFileId`: that file is
 * taken over (renamed) by the first node it could be the file of, so what it kept is resumed once.
 */
import { chmodSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createHash, randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import type { NodeAPI } from 'node-red';
import { PRIVATE_FILE_MODE, makePrivateFolderSync } from '../persist/private-files';
import { ownValue, readJsonText } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The folder this package keeps its state in: `<userDir>/graph-gen` (Node-RED's own default user dir). */
export function stateFolder(RED: NodeAPI): string {
  const userDir = (RED.settings as { userDir?: unknown }).userDir;
  return path.join(
    typeof userDir === 'string' && userDir ? userDir : path.join(os.homedir(), '.node-red'),
    'graph-gen',
  );
}

/**
 * The config node's socket id: the one kept from an earlier start, else a new one, kept. Read once when the
 * node starts (a few bytes). A folder that cannot be written gives a new id each start, as before.
 */
export function keptClientId(RED: NodeAPI, configId: string): string {
  const file = clientIdFile(RED, configId);
  try {
    // A few dozen bytes when this package wrote it: anything larger is not its.
    const text = readFileSync(file, 'utf8');
    const read = text.length <= 1000 ? readJsonText(text) : undefined;
    const kept = read?.ok && isRecord(read.value) ? ownValue(read.value, 'clientId') : undefined;
    if (typeof kept === 'string' && UUID.test(kept)) {
      narrowSync(file);
      return kept;
    }
  } catch {
    // none kept yet, or unreadable: a new one
  }
  const clientId = randomUUID();
  try {
    makePrivateFolderSync(path.dirname(file));
    writeFileSync(file, JSON.stringify({ clientId }), { mode: PRIVATE_FILE_MODE });
    chmodSync(file, PRIVATE_FILE_MODE);
  } catch {
    // kept for this start only
  }
  return clientId;
}

/** A file made by an earlier release with the umask's mode is made its owner's only; one we cannot change stays. */
function narrowSync(file: string): void {
  try {
    chmodSync(file, PRIVATE_FILE_MODE);
  } catch {
    // not ours to change (another user's, a file system without modes): read as it is
  }
}

/** The config node was removed from the flows: its kept id goes. */
export function forgetClientId(RED: NodeAPI, configId: string): void {
  rmSync(clientIdFile(RED, configId), { force: true });
}

function clientIdFile(RED: NodeAPI, configId: string): string {
  return nodeFile(RED, 'config-', configId, '.json');
}

/**
 * A node's file in the state folder: `<prefix><fileId(node id)><suffix>`. A file an earlier release kept for the
 * node under its old name, and none under the new one: renamed to the new one first.
 */
export function nodeFile(RED: NodeAPI, prefix: string, nodeId: string, suffix: string): string {
  const folder = stateFolder(RED);
  const file = path.join(folder, `${prefix}${fileId(nodeId)}${suffix}`);
  const legacy = path.join(folder, `${prefix}${legacyFileId(nodeId)}${suffix}`);
  if (legacy !== file && !existsSync(file)) {
    try {
      renameSync(legacy, file);
    } catch {
      // none under the old name (or another node took it first): nothing to take over
    }
  }
  return file;
}

/**
 * Ids kept as they are in a file name: Node-RED's own (16 hex digits; `8.6` hex digits before Node-RED 2), so
 * their files keep their names; distinct on case-blind file systems too.
 */
const PLAIN_ID = /^[a-z0-9][a-z0-9.-]{0,63}$/;
/** Characters of an id kept readable before the hash, when it is hashed. */
const READABLE_PART = 32;

/** A name part that is one node id's only (see the header) and that a file name can hold on any system. */
export function fileId(nodeId: string): string {
  if (PLAIN_ID.test(nodeId)) return nodeId;
  const readable = nodeId
    .slice(0, READABLE_PART)
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-');
  return `${readable}~${createHash('sha256').update(nodeId, 'utf8').digest('hex').slice(0, 32)}`;
}

/** The name part releases before this one gave an id: not one id's only (`a:b`, `a/b` and `a_b` shared it). */
function legacyFileId(nodeId: string): string {
  return nodeId.replace(/[^\w.-]/g, '_');
}

/**
 * The files (`nodeFile`) of nodes of `type` that are not in the flows any more (removed while Node-RED was
 * down) are removed. Called as such a node starts: a look at a few names in one folder.
 */
export function sweepNodeFiles(RED: NodeAPI, type: string, prefix: string, suffix: string): void {
  const present = new Set<string>();
  RED.nodes.eachNode((config) => {
    if (config.type !== type) return;
    present.add(fileId(config.id));
    // Not taken over yet (its node starts after this sweep): kept for it.
    present.add(legacyFileId(config.id));
  });
  const folder = stateFolder(RED);
  let names: string[];
  try {
    names = readdirSync(folder);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix) || !name.endsWith(suffix)) continue;
    if (present.has(name.slice(prefix.length, -suffix.length))) continue;
    try {
      rmSync(path.join(folder, name), { force: true });
    } catch {
      // left for the next start
    }
  }
}
