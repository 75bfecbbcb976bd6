/**
 * The v2 mode's one reader of what clients send (a submit's JSON body, a job list's query), checked in the
 * proxy's order and refused in its words (app.py `submit`, `_parse_submit_extras`, `list_jobs`), so the routes
 * (v2-service.ts) work with typed values only. The body is read with a bounded depth (readJsonText), so nothing
 * after it walks a hostile nesting.
 */
import { readJsonText } from '../boundary/outside';
import { isRecord } from '../boundary/json-values';
import { V2_STATUSES, type V2Status } from './v2-jobs';

/** A refusal as the proxy answers it: its envelope, or (`plain`) aiohttp's own 500 for a handler that raised. */
export type V2Refusal =
  | { plain?: false; status: number; code: string; message: string; details?: Record<string, unknown> }
  | { plain: true; status: 500 };

export type V2Read<T> = { ok: true; value: T } | { ok: false; refusal: V2Refusal };

export interface SubmitRequest {
  /** The API-format graph, as sent (core/ASSET references not yet resolved). */
  workflow: Record<string, unknown>;
  /** Only `api_key_comfy_org`, forwarded to the engine, never kept by the proxy; undefined when empty. */
  extraData?: Record<string, unknown>;
  metadata?: string;
  priority?: number;
}

const MAX_METADATA_BYTES = 1024;
const PRIORITY_BOUND = 1_000_000;
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
export const MAX_LIST_LIMIT = 100;
export const DEFAULT_LIST_LIMIT = 50;

function refuse<T>(status: number, code: string, message: string): V2Read<T> {
  return { ok: false, refusal: { status, code, message } };
}

/** Python's `dict.get`: an own property only, null when absent. */
function get(record: Record<string, unknown>, key: string): unknown {
  return Object.hasOwn(record, key) ? record[key] : null;
}

/** A submit's body (bytes, or undefined when it was larger than the proxy reads) as a typed request. */
export function readSubmitBody(raw: Buffer | undefined): V2Read<SubmitRequest> {
  const read = raw === undefined ? undefined : readJsonText(raw.toString('utf8'));
  if (!read?.ok) return refuse(400, 'invalid_request', 'Body must be JSON.');
  // The proxy calls `.get` on the body: JSON that is not an object makes its handler raise.
  if (!isRecord(read.value)) return { ok: false, refusal: { plain: true, status: 500 } };
  const body = read.value;
  if (get(body, 'webhook_url') !== null || get(body, 'inputs') !== null)
    return refuse(422, 'invalid_workflow', "'webhook_url' and 'inputs' are reserved and not accepted.");
  const workflow = get(body, 'workflow');
  if (!isRecord(workflow)) return refuse(422, 'invalid_workflow', "Missing 'workflow' (API-format graph).");
  if (Array.isArray(get(workflow, 'nodes')) && Object.hasOwn(workflow, 'links')) {
    return refuse(
      422,
      'workflow_format_ui',
      'This is a UI-export graph. Export the workflow in API format instead.',
    );
  }
  const request: SubmitRequest = { workflow };
  const metadata = get(body, 'metadata');
  if (metadata !== null) {
    if (typeof metadata !== 'string')
      return refuse(422, 'invalid_request', "'metadata' must be a string (opaque label).");
    if (Buffer.byteLength(metadata, 'utf8') > MAX_METADATA_BYTES)
      return refuse(422, 'invalid_request', `'metadata' exceeds ${MAX_METADATA_BYTES} UTF-8 bytes.`);
    request.metadata = metadata;
  }
  const priority = get(body, 'priority');
  if (priority !== null) {
    if (typeof priority !== 'number' || !Number.isInteger(priority))
      return refuse(422, 'invalid_request', "'priority' must be an integer (advisory).");
    if (priority < -PRIORITY_BOUND || priority > PRIORITY_BOUND)
      return refuse(
        422,
        'invalid_request',
        `'priority' must be between -${PRIORITY_BOUND} and ${PRIORITY_BOUND}.`,
      );
    request.priority = priority;
  }
  const extraData = get(body, 'extra_data');
  if (extraData !== null) {
    if (!isRecord(extraData) || Object.keys(extraData).some((key) => key !== 'api_key_comfy_org'))
      return refuse(400, 'invalid_request', "'extra_data' accepts only the 'api_key_comfy_org' field.");
    if (Object.hasOwn(extraData, 'api_key_comfy_org') && typeof extraData.api_key_comfy_org !== 'string')
      return refuse(400, 'invalid_request', "'extra_data.api_key_comfy_org' must be a string.");
    if (Object.keys(extraData).length > 0)
      request.extraData = { api_key_comfy_org: extraData.api_key_comfy_org };
  }
  return { ok: true, value: request };
}

/** An Idempotency-Key header: absent, or 1..255 characters (an empty one is malformed, not absent). */
export function readIdempotencyKey(header: string | string[] | undefined): V2Read<string | undefined> {
  if (header === undefined) return { ok: true, value: undefined };
  const key = Array.isArray(header) ? header[0] : header;
  if (key === '' || [...key].length > MAX_IDEMPOTENCY_KEY_LENGTH)
    return refuse(
      400,
      'invalid_request',
      `Idempotency-Key must be 1-${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`,
    );
  return { ok: true, value: key };
}

export interface ListQuery {
  limit: number;
  /** The statuses asked for; undefined = all. */
  statuses?: ReadonlySet<V2Status>;
}

/** `GET /api/v2/jobs?status=a,b&limit=N` as the proxy reads it (`limit` as Python's `int()` takes text). */
export function readListQuery(query: URLSearchParams): V2Read<ListQuery> {
  const limitText = query.get('limit') ?? String(DEFAULT_LIST_LIMIT);
  if (!/^\s*[+-]?\d+(?:_\d+)*\s*$/.test(limitText))
    return refuse(400, 'invalid_request', "'limit' must be an integer.");
  const limit = Number(limitText.replace(/_/g, '').trim());
  if (limit < 1 || limit > MAX_LIST_LIMIT)
    return refuse(400, 'invalid_request', `'limit' must be between 1 and ${MAX_LIST_LIMIT}.`);
  const statusText = query.get('status');
  if (!statusText) return { ok: true, value: { limit } };
  const asked = new Set(
    statusText
      .split(',')
      .map((word) => word.trim())
      .filter(Boolean),
  );
  const unknown = [...asked].filter((word) => !(V2_STATUSES as readonly string[]).includes(word)).sort();
  if (unknown.length > 0)
    return refuse(400, 'invalid_request', `Unknown status filter value(s): ${unknown.join(', ')}.`);
  return { ok: true, value: { limit, statuses: asked as Set<V2Status> } };
}
