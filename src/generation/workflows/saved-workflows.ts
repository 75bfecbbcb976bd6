/**
 * Workflows saved on the server from its own page. A ComfyUI-like server keeps them in its user data under
 * `workflows/`, in UI format; its page lists them with
 * `GET /api/userdata?dir=workflows&recurse=true&split=false&full_info=true` (sub-folders included, each file
 * with its size and time) and reads one with `GET /api/userdata/<"workflows/" + name, URL-encoded whole>`.
 * Measured on ComfyUI v0.8.0 and v0.33.0: a server where nothing was saved yet answers the list 404 (the
 * folder does not exist); a missing file is a 404 with an empty body; the list comes in the file system's
 * order; `modified` is in seconds on v0.8.0 and in milliseconds on v0.33.0; the server URL-decodes a name a
 * second time when it holds `%`, so a name with `%XX` in it would open another file. Names are checked before
 * they go into a path; everything read is bounded. No Node-RED inside.
 */
import type { HttpClient } from '../../http/client';
import { ServiceError, invalidInput } from '../../http/errors';
import { isUiWorkflow } from './ui-workflow';
import { looksLikeWorkflow } from './workflow';

/** The folder of the server's user data where its page saves workflows. */
const FOLDER = 'workflows';

export const SAVED_WORKFLOW_LIMITS = {
  /** The most names a list holds; the rest are counted as left out (sorted by name first). */
  listedNames: 2000,
  /** The longest name, its folders included: the page sets none; file systems stop at 255 bytes a part. */
  nameChars: 512,
  /** The largest list answer read (about 100 bytes a file). */
  listBytes: 4 * 1024 * 1024,
};

export interface SavedWorkflowEntry {
  /** Its path under `workflows/`, e.g. `portraits/studio light.json`: what names it to the node. */
  name: string;
  /** Bytes, when the server says. */
  size?: number;
  /** Last changed, in milliseconds since 1970, when the server says. */
  modified?: number;
}

export interface SavedWorkflowList {
  /** Sorted by name. */
  workflows: SavedWorkflowEntry[];
  /** How many more the server has past `SAVED_WORKFLOW_LIMITS.listedNames`. */
  leftOut: number;
}

/** Why a saved workflow's name cannot be used as it is, in a few words; undefined when it can. */
function nameProblem(name: string): string | undefined {
  if (name === '') return 'it is empty';
  if (name.length > SAVED_WORKFLOW_LIMITS.nameChars)
    return `it is longer than ${SAVED_WORKFLOW_LIMITS.nameChars} characters`;
  // eslint-disable-next-line no-control-regex -- control characters are what is looked for
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'it holds a control character';
  if (name.includes('\\')) return 'it holds a backslash (folders are separated by /)';
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name))
    return 'it is an absolute path (name it as it is under the workflows folder)';
  if (name.split('/').some((part) => part === '' || part === '.' || part === '..'))
    return 'it has an empty, "." or ".." folder in it';
  if (/%[0-9A-Fa-f]{2}/.test(name))
    return 'it holds "%" and two hex digits, which the server decodes a second time (it would open another file): rename it';
  return undefined;
}

/**
 * A saved workflow's name as it goes into a path: trimmed, `.json` added when it has no such ending (the page
 * saves every workflow with it), refused (invalid_input) when empty, too long, absolute, or with a `..`, `.`
 * or empty folder, a backslash, a control character or `%XX` in it. `where` names what held it ("The name
 * of the saved workflow set in this node").
 */
export function checkedWorkflowName(raw: unknown, where: string): string {
  if (typeof raw !== 'string') {
    throw invalidInput(`${where} must be text, e.g. "portrait.json"`);
  }
  const trimmed = raw.trim();
  const name = trimmed === '' || /\.json$/i.test(trimmed) ? trimmed : `${trimmed}.json`;
  const problem = nameProblem(name);
  if (problem) {
    throw invalidInput(`${where}, ${JSON.stringify(name.slice(0, 100))}, cannot be used: ${problem}`);
  }
  return name;
}

/** The route of one saved workflow, its whole path encoded as the server's page encodes it (`/` as `%2F`). */
export function savedWorkflowRoute(name: string): string {
  return `/api/userdata/${encodeURIComponent(`${FOLDER}/${name}`)}`;
}

/** Milliseconds since 1970 from a time in seconds (v0.8.0) or milliseconds (v0.33.0). */
function milliseconds(value: unknown): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined;
  // 1e11 seconds is the year 5138; 1e11 milliseconds is 1973.
  return Math.round(value < 1e11 ? value * 1000 : value);
}

const byName = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

/**
 * The saved workflows of a list answer (`full_info`: `[{path, size, modified}]`; plain: `[path]`): the `.json`
 * files whose names can be used, sorted by name, at most `SAVED_WORKFLOW_LIMITS.listedNames`. Anything
 * that is not a list is the server's failure, not an empty list.
 */
export function savedWorkflowsOf(body: unknown): SavedWorkflowList {
  if (!Array.isArray(body)) {
    throw new ServiceError(
      'server_error',
      'the generation service answered the list of saved workflows with something that is not a list: check the base address in the config node',
    );
  }
  const found: SavedWorkflowEntry[] = [];
  for (const item of body) {
    const record = item && typeof item === 'object' ? (item as Record<string, unknown>) : undefined;
    const name = typeof item === 'string' ? item : record?.path;
    if (typeof name !== 'string' || !/\.json$/i.test(name) || nameProblem(name)) continue;
    const entry: SavedWorkflowEntry = { name };
    const size = record?.size;
    if (typeof size === 'number' && Number.isFinite(size) && size >= 0) entry.size = size;
    const modified = milliseconds(record?.modified);
    if (modified !== undefined) entry.modified = modified;
    found.push(entry);
  }
  found.sort((a, b) => byName.compare(a.name, b.name) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const listed = found.slice(0, SAVED_WORKFLOW_LIMITS.listedNames);
  return { workflows: listed, leftOut: found.length - listed.length };
}

/** The workflows saved on the server, as its page lists them; none when nothing was saved yet (a 404). */
export async function listSavedWorkflows(http: HttpClient, signal?: AbortSignal): Promise<SavedWorkflowList> {
  const answer = await http.json<unknown>('/api/userdata', {
    query: { dir: FOLDER, recurse: 'true', split: 'false', full_info: 'true' },
    acceptStatus: [404],
    signal,
    action: 'listing the saved workflows',
    maxBytes: SAVED_WORKFLOW_LIMITS.listBytes,
  });
  if (answer.status === 404) return { workflows: [], leftOut: 0 };
  return savedWorkflowsOf(answer.body);
}

/**
 * One saved workflow, as it is on the server (UI format as the page saves it, or API format), read whole up
 * to `maxBytes`. `name` was checked (checkedWorkflowName). One that is gone is an invalid_request with
 * status 404 that says so; a file that is not a workflow is refused (invalid_input).
 */
export async function readSavedWorkflow(
  http: HttpClient,
  name: string,
  options: { signal?: AbortSignal; maxBytes?: number } = {},
): Promise<Record<string, unknown>> {
  const quoted = JSON.stringify(name);
  let answer;
  try {
    answer = await http.json<unknown>(savedWorkflowRoute(name), {
      acceptStatus: [404],
      signal: options.signal,
      maxBytes: options.maxBytes,
      action: `reading the saved workflow ${quoted}`,
    });
  } catch (error) {
    // A 2xx whose body is not JSON: the file is broken, the address is right.
    const status = error instanceof ServiceError ? error.cause.status : undefined;
    if (status !== undefined && status >= 200 && status < 300) {
      throw invalidInput(
        `The saved workflow ${quoted} on the generation service is not JSON: open it in the server's page and save it again`,
      );
    }
    throw error;
  }
  if (answer.status === 404) {
    throw new ServiceError(
      'invalid_request',
      `The saved workflow ${quoted} is not on the generation service (any more): it was renamed, moved or deleted there. Save it again under that name in the server's page, or pick another one in this node's dialog`,
      { status: 404 },
    );
  }
  const workflow = answer.body;
  if (!isUiWorkflow(workflow) && !looksLikeWorkflow(workflow)) {
    throw invalidInput(
      `The saved workflow ${quoted} on the generation service is not a workflow (neither the page's format, with nodes and links, nor API format): open it in the server's page and save it again`,
    );
  }
  return workflow as Record<string, unknown>;
}
