/**
 * A job's outputs: the `output` objects of its `executed` events merged per node, and the flat list of file
 * references in them. (The REST routes that give the outputs of a job whose events were missed are in
 * job-status.ts.) Keyed by node ids the service sends, so keys are read as own properties and written with
 * `setOwn`: a node id such as `__proto__` is a key like any other and never reaches Object.prototype.
 */

export type JobOutputs = Record<string, Record<string, unknown>>;

export interface FileReference {
  filename: string;
  subfolder: string;
  type: string;
}

/**
 * Adds one `executed` output to a node's outputs. A node may report several times (batches, lists):
 * arrays are appended, not replaced; other fields take the latest value.
 */
export function mergeOutput(outputs: JobOutputs, nodeId: string, output: unknown): void {
  if (!output || typeof output !== 'object' || Array.isArray(output)) return;
  let merged = Object.hasOwn(outputs, nodeId) ? outputs[nodeId] : undefined;
  if (!merged) setOwn(outputs, nodeId, (merged = {}));
  for (const [key, value] of Object.entries(output as Record<string, unknown>)) {
    const existing = Object.hasOwn(merged, key) ? merged[key] : undefined;
    if (Array.isArray(value) && Array.isArray(existing)) setOwn(merged, key, existing.concat(value));
    else setOwn(merged, key, Array.isArray(value) ? [...value] : value);
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

/** Every file reference in the outputs (images, video, audio, gifs...), in node order, each once. */
export function filesOf(outputs: JobOutputs): FileReference[] {
  const files: FileReference[] = [];
  const seen = new Set<string>();
  for (const output of Object.values(outputs)) {
    for (const value of Object.values(output)) {
      if (!Array.isArray(value)) continue;
      for (const item of value) {
        if (!isFileReference(item)) continue;
        const ref: FileReference = {
          filename: item.filename,
          subfolder: typeof item.subfolder === 'string' ? item.subfolder : '',
          type: typeof item.type === 'string' ? item.type : 'output',
        };
        const key = `${ref.type}/${ref.subfolder}/${ref.filename}`;
        if (seen.has(key)) continue;
        seen.add(key);
        files.push(ref);
      }
    }
  }
  return files;
}

/** Sets an own, enumerable property whatever its name (`obj[key] = value` with `__proto__` sets the prototype). */
export function setOwn<T>(target: Record<string, T>, key: string, value: T): void {
  if (key === '__proto__') {
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  } else target[key] = value;
}
