/**
 * A job's outputs: the `output` objects of its `executed` events merged per node, the flat list of file
 * references in them, and the REST fallbacks that give the outputs of a job whose events were missed.
 */
import type { HttpClient } from '../http/client';

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
  const merged = (outputs[nodeId] ??= {});
  for (const [key, value] of Object.entries(output as Record<string, unknown>)) {
    const existing = merged[key];
    if (Array.isArray(value) && Array.isArray(existing)) merged[key] = existing.concat(value);
    else merged[key] = Array.isArray(value) ? [...value] : value;
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

/** Keeps only objects keyed by node id whose values are objects: what `outputs` must look like. */
function asOutputs(value: unknown): JobOutputs | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const outputs: JobOutputs = {};
  for (const [nodeId, output] of Object.entries(value as Record<string, unknown>)) {
    if (output && typeof output === 'object' && !Array.isArray(output))
      outputs[nodeId] = output as Record<string, unknown>;
  }
  return outputs;
}

/** A history-style body: `{<id>: {outputs}}`, or the entry itself, or `{history: [...]}`. */
function outputsFromHistory(body: unknown, promptId: string): JobOutputs | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const record = body as Record<string, unknown>;
  const entry = (record[promptId] ?? record) as Record<string, unknown> | undefined;
  if (entry && typeof entry === 'object' && 'outputs' in entry) return asOutputs(entry.outputs);
  if (Array.isArray(record.history)) {
    const found = (record.history as Array<Record<string, unknown>>).find(
      (item) => item && (item.prompt_id === promptId || item.id === promptId),
    );
    if (found && 'outputs' in found) return asOutputs(found.outputs);
  }
  return undefined;
}

const OUTPUT_SOURCES: Array<{
  path: (id: string) => string;
  read: (body: unknown, id: string) => JobOutputs | undefined;
}> = [
  {
    path: (id) => `/api/jobs/${encodeURIComponent(id)}`,
    read: (body) => asOutputs((body as { outputs?: unknown } | undefined)?.outputs),
  },
  { path: (id) => `/api/history_v2/${encodeURIComponent(id)}`, read: outputsFromHistory },
  { path: (id) => `/api/history/${encodeURIComponent(id)}`, read: outputsFromHistory },
];

/**
 * The outputs of a finished job from whichever endpoint the server has: `/api/jobs/{id}`, then
 * `/api/history_v2/{id}`, then `/api/history/{id}`. Undefined when none of them has them.
 */
export async function fetchOutputs(
  http: HttpClient,
  promptId: string,
  log: (message: string) => void = () => undefined,
): Promise<JobOutputs | undefined> {
  for (const source of OUTPUT_SOURCES) {
    try {
      const { status, body } = await http.json<unknown>(source.path(promptId), {
        acceptStatus: [404, 405],
        action: 'reading the outputs of a job',
      });
      if (status >= 300) continue;
      const outputs = source.read(body, promptId);
      if (outputs) return outputs;
    } catch (error) {
      log(`reading outputs of ${promptId} failed: ${http.redact(String(error))}`);
    }
  }
  return undefined;
}
