/**
 * A job's outputs: the `output` objects of its `executed` events merged per node, and the flat list of file
 * references in them. (The REST routes that give the outputs of a job whose events were missed are in
 * job-status.ts.) Keyed by node ids the service sends, so keys are read as own properties and written with
 * `setOwn`: a node id such as `__proto__` is a key like any other and never reaches Object.prototype.
 */

import { titleOf, type WorkflowNode } from '../workflows/workflow';
import { ownValue, setOwn } from '../../boundary/outside';

export type JobOutputs = Record<string, Record<string, unknown>>;

export interface FileReference {
  filename: string;
  subfolder: string;
  type: string;
  /** The server's id of the file where it names files by id (Comfy API v2's assets): what downloads it. */
  asset_id?: string;
}

/** The longest asset id kept (v2's output ids are signed base64 text, often past 200 characters). */
export const MAX_ASSET_ID = 2048;

/** A file's asset id from outside: non-empty text within the bound, else none. */
export function assetIdOf(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' && value.length <= MAX_ASSET_ID ? value : undefined;
}

/**
 * Adds one `executed` output to a node's outputs. A node may report several times (batches, lists):
 * arrays are appended, not replaced; other fields take the latest value.
 */
export function mergeOutput(outputs: JobOutputs, nodeId: string, output: unknown): void {
  if (!isOutput(output)) return;
  let merged = Object.hasOwn(outputs, nodeId) ? outputs[nodeId] : undefined;
  if (!merged) setOwn(outputs, nodeId, (merged = {}));
  mergeFields(merged, output);
}

/**
 * A running job's outputs so far, by node id, in the order the nodes first reported. Not a JobOutputs until the
 * job ends (`outputsOfEntries`): an object keyed by node ids ("3", "75") keeps them as array indices, whose
 * element store takes 190-350 B per job where an array of one entry takes 120, and every running job holds its
 * outputs through the young collections into the old generation (10,000 at once in bench/many-jobs.js). An array
 * of [node id, output] while a job has at most ENTRIES_IN_ARRAY nodes' outputs (nearly every job), a Map past
 * that: a server may name any number of nodes, and looking each up in an array would cost their square.
 */
export type OutputEntries =
  Array<[nodeId: string, output: Record<string, unknown>]> | Map<string, Record<string, unknown>>;

const ENTRIES_IN_ARRAY = 8;

/** `mergeOutput` for a running job's entries; the entries, made at the first output. */
export function mergeEntryOutput(
  entries: OutputEntries | undefined,
  nodeId: string,
  output: unknown,
): OutputEntries | undefined {
  if (!isOutput(output)) return entries;
  const present = entries instanceof Map ? entries.get(nodeId) : entries?.find(([id]) => id === nodeId)?.[1];
  if (present) {
    mergeFields(present, output);
    return entries;
  }
  const merged: Record<string, unknown> = {};
  mergeFields(merged, output);
  // The first as a literal: an array of exactly one (pushing onto an empty one reserves 17).
  if (!entries) return [[nodeId, merged]];
  if (entries instanceof Map) return entries.set(nodeId, merged);
  if (entries.length < ENTRIES_IN_ARRAY) {
    entries.push([nodeId, merged]);
    return entries;
  }
  return new Map(entries).set(nodeId, merged);
}

/** The outputs of a job that ended: its entries as JobOutputs. */
export function outputsOfEntries(entries: OutputEntries | undefined): JobOutputs {
  const outputs: JobOutputs = {};
  for (const [nodeId, output] of entries ?? []) setOwn(outputs, nodeId, output);
  return outputs;
}

function isOutput(output: unknown): output is Record<string, unknown> {
  return !!output && typeof output === 'object' && !Array.isArray(output);
}

function mergeFields(merged: Record<string, unknown>, output: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(output)) {
    const existing = Object.hasOwn(merged, key) ? merged[key] : undefined;
    if (Array.isArray(value) && Array.isArray(existing)) {
      // Appended in place: every array of a merged record is its own copy (made below), and a new copy per
      // report would cost the square of a node's reports (a server may send any number).
      for (const item of value as unknown[]) existing.push(item);
    } else setOwn(merged, key, Array.isArray(value) ? [...value] : value);
  }
}

function isFileReference(value: unknown): value is FileReference {
  return (
    !!value &&
    typeof value === 'object' &&
    typeof (value as { filename?: unknown }).filename === 'string' &&
    (value as { filename: string }).filename !== ''
  );
}

/** Which files a result lists (await-job's "files from"): the node ids to take them from, and whether temp previews count. */
export interface FileChoice {
  /** Only files of type `output` (what SaveImage and the like keep), not temp previews. */
  savedOnly?: boolean;
  /** Only files of these nodes. */
  nodes?: ReadonlySet<string>;
}

/** Every file reference in the outputs (images, video, audio, gifs...), in node order, each once. */
export function filesOf(outputs: JobOutputs, choice: FileChoice = {}): FileReference[] {
  const files: FileReference[] = [];
  const seen = new Set<string>();
  for (const [nodeId, output] of Object.entries(outputs)) {
    if (choice.nodes && !choice.nodes.has(nodeId)) continue;
    for (const value of Object.values(output)) {
      if (!Array.isArray(value)) continue;
      for (const item of value) {
        if (!isFileReference(item)) continue;
        const ref: FileReference = {
          filename: item.filename,
          subfolder: typeof item.subfolder === 'string' ? item.subfolder : '',
          type: typeof item.type === 'string' ? item.type : 'output',
        };
        const assetId = assetIdOf(ownValue(item, 'asset_id'));
        if (assetId !== undefined) ref.asset_id = assetId;
        if (choice.savedOnly && ref.type !== 'output') continue;
        const key = `${ref.type}/${ref.subfolder}/${ref.filename}`;
        if (seen.has(key)) continue;
        seen.add(key);
        files.push(ref);
      }
    }
  }
  return files;
}

/**
 * The node ids that names given by a user stand for: a name that is a node id of the workflow is that node;
 * otherwise every node whose `_meta.title` it is; a name the workflow does not know (or no workflow at all)
 * is taken as an id, as the service reports outputs by id.
 */
export function nodeIdsNamed(names: readonly string[], workflow: unknown): Set<string> {
  const nodes: Record<string, unknown> =
    workflow && typeof workflow === 'object' && !Array.isArray(workflow)
      ? (workflow as Record<string, unknown>)
      : {};
  const titled = (id: string, name: string): boolean => {
    const node = nodes[id];
    return node !== null && typeof node === 'object' && titleOf(node as WorkflowNode) === name;
  };
  const ids = new Set<string>();
  for (const name of names) {
    if (Object.hasOwn(nodes, name)) {
      ids.add(name);
      continue;
    }
    const matching = Object.keys(nodes).filter((id) => titled(id, name));
    if (matching.length === 0) ids.add(name);
    for (const id of matching) ids.add(id);
  }
  return ids;
}
