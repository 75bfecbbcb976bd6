/**
 * What this package keeps under Node-RED's user directory, in `<userDir>/graph-gen/`: await-job nodes' kept
 * awaits (await-resume.ts), job-events nodes' memory of the jobs they told (graph-gen-job-events.ts), and each
 * config node's socket id, kept so that after a restart the socket comes back
 * under the same id: a self-hosted server sends a job's events only to the socket its submit named, so jobs
 * submitted before the restart still reach this Node-RED.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import type { NodeAPI } from 'node-red';

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
    const kept = (JSON.parse(readFileSync(file, 'utf8')) as { clientId?: unknown }).clientId;
    if (typeof kept === 'string' && UUID.test(kept)) return kept;
  } catch {
    // none kept yet, or unreadable: a new one
  }
  const clientId = randomUUID();
  try {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify({ clientId }));
  } catch {
    // kept for this start only
  }
  return clientId;
}

/** The config node was removed from the flows: its kept id goes. */
export function forgetClientId(RED: NodeAPI, configId: string): void {
  rmSync(clientIdFile(RED, configId), { force: true });
}

function clientIdFile(RED: NodeAPI, configId: string): string {
  return nodeFile(RED, 'config-', configId, '.json');
}

/** A node's file in the state folder: `<prefix><node id><suffix>`, the id kept to characters a name can hold. */
export function nodeFile(RED: NodeAPI, prefix: string, nodeId: string, suffix: string): string {
  return path.join(stateFolder(RED), `${prefix}${fileId(nodeId)}${suffix}`);
}

function fileId(nodeId: string): string {
  return nodeId.replace(/[^\w.-]/g, '_');
}

/**
 * The files (`nodeFile`) of nodes of `type` that are not in the flows any more (removed while Node-RED was
 * down) are removed. Called as such a node starts: a look at a few names in one folder.
 */
export function sweepNodeFiles(RED: NodeAPI, type: string, prefix: string, suffix: string): void {
  const present = new Set<string>();
  RED.nodes.eachNode((config) => {
    if (config.type === type) present.add(fileId(config.id));
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
