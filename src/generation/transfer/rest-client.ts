/**
 * The generation service's REST calls (spec endpoints 1-9) on a config node's HttpClient: node definitions
 * (cached), uploads streamed as multipart, submit, downloads that follow the service's redirect to a signed
 * address WITHOUT the key, and queue control. Past 400 lines: one method per spec endpoint, each with its own
 * refusals and error sentences. No Node-RED inside.
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { abortable } from '../../abortable';
import type { HttpClient, RawResponse } from '../../http/client';
import { addressRefusal, resolvesLocal } from '../../http/address-policy';
import { ServiceError, invalidInput, messageFromBody } from '../../http/errors';
import type { NodeTypeDefinition, Workflow } from '../workflows/workflow';
import { describeSubmitProblems } from '../workflows/workflow';
import { readQueueEntryId } from '../jobs/job-ids';
import { multipartBody, type FormPart } from './multipart-body';

import type { FileReference } from '../jobs/job-outputs';

export type { FileReference };

export interface UploadRequest {
  /** The file's bytes, or the path of a local file (streamed, never read whole). */
  source: Buffer | string;
  /** Stored name; defaults to the path's base name. */
  filename?: string;
  /** `input` (default) or `temp`. */
  type?: string;
  overwrite?: boolean;
  /** Mask mode: the image the mask belongs to. */
  originalRef?: unknown;
  mask?: boolean;
  signal?: AbortSignal;
}

export interface UploadResult {
  name: string;
  subfolder?: string;
  type?: string;
  [field: string]: unknown;
}

export interface SubmitResult {
  prompt_id: string;
  number?: number;
  node_errors?: Record<string, unknown>;
  [field: string]: unknown;
}

export interface QueueState {
  queue_running?: unknown[];
  queue_pending?: unknown[];
  [field: string]: unknown;
}

/**
 * An open download: the caller must consume or destroy `body`. A plain stream, so a dialect may hand on one
 * made of several answers (Comfy API v2 resumes a download that broke off with a Range request).
 */
export interface OpenFile {
  contentType?: string;
  contentLength?: number;
  body: Readable;
}

const REDIRECTS = [301, 302, 303, 307, 308];

const MAX_FOREIGN_REDIRECTS = 3;

function header(response: RawResponse, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

const IMAGE_TYPES: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
};

/** The content type of an image file by its name's extension; application/octet-stream for any other. */
function imageType(filename: string): string {
  return IMAGE_TYPES[path.extname(filename).toLowerCase()] ?? 'application/octet-stream';
}

/** The prompt id of a queue element, whatever its shape: `[number, id, ...]` or `{prompt_id}` / `{id}`. */
export function promptIdOfQueueElement(element: unknown): string | undefined {
  const read = readQueueEntryId(element);
  return read.ok ? read.value : undefined;
}

/** The prompt ids of a queue list (`queue_running` or `queue_pending`), in order; [] for anything else. */
export function promptIdsOf(list: unknown): string[] {
  return Array.isArray(list)
    ? list.map(promptIdOfQueueElement).filter((id): id is string => id !== undefined)
    : [];
}

/** extra_data fields that carry keys, whatever a deployment calls its partner key field. */
const KEY_FIELDS = ['api_key_comfy_org', 'api_key_service_org'];
const KEY_LIKE = /key|token|secret|password|auth/i;

/** A queue element without the keys its `extra_data` may hold (other clients' partner keys). */
function withoutKeys(element: unknown, keyField: string): unknown {
  const clean = (extra: unknown) => {
    if (!extra || typeof extra !== 'object' || Array.isArray(extra)) return extra;
    return Object.fromEntries(
      Object.entries(extra).filter(
        ([field]) => field !== keyField && !KEY_FIELDS.includes(field) && !KEY_LIKE.test(field),
      ),
    );
  };
  if (Array.isArray(element)) return element.map((item, index) => (index === 3 ? clean(item) : item));
  if (element && typeof element === 'object') {
    const record = { ...(element as Record<string, unknown>) };
    if ('extra_data' in record) record.extra_data = clean(record.extra_data);
    for (const field of Object.keys(record))
      if (field === keyField || KEY_FIELDS.includes(field) || KEY_LIKE.test(field)) delete record[field];
    return record;
  }
  return element;
}

/**
 * The multipart part of an upload's file (field `field`) and its stored name, for either dialect: a Buffer with
 * msg.filename, or a local file streamed (never read whole). Bad input is refused in a sentence before anything
 * is read or sent; `checkName` refuses a name its dialect cannot store.
 */
export async function uploadPartOf(
  request: Pick<UploadRequest, 'source' | 'filename'>,
  field: string,
  checkName: (name: string) => string = (name) => name,
): Promise<{ part: FormPart; filename: string }> {
  if (Buffer.isBuffer(request.source)) {
    if (request.source.length === 0)
      throw invalidInput('The file to upload is empty (msg.payload has no bytes)');
    if (!request.filename)
      throw invalidInput('msg.filename is needed to upload a Buffer: give the stored file name');
    const filename = checkName(request.filename);
    return {
      part: { name: field, filename, contentType: imageType(filename), content: request.source },
      filename,
    };
  }
  if (typeof request.source !== 'string' || request.source.trim() === '')
    throw invalidInput('msg.payload must be a Buffer (the file) or a string (a local file path) to upload');
  const file = request.source;
  const info = await stat(file).catch((error: NodeJS.ErrnoException) => {
    throw invalidInput(
      error.code === 'ENOENT'
        ? `The file to upload does not exist: ${file}`
        : `The file to upload cannot be read: ${file} (${error.code ?? error.message})`,
    );
  });
  if (info.isDirectory()) throw invalidInput(`The path to upload is a directory, not a file: ${file}`);
  if (!info.isFile()) throw invalidInput(`The path to upload is not a regular file: ${file}`);
  if (info.size === 0) throw invalidInput(`The file to upload is empty: ${file}`);
  const filename = checkName(request.filename || path.basename(file));
  return {
    part: { name: field, filename, contentType: imageType(filename), path: file, size: info.size },
    filename,
  };
}

export class GenerationRestClient {
  /** A class missing from the cached node definitions reads them again at most this often. */
  static definitionsRefreshMs = 60_000;

  private definitions?: Record<string, NodeTypeDefinition>;
  private definitionsLoading?: Promise<Record<string, NodeTypeDefinition>>;
  private definitionsReadAt = 0;

  /**
   * `partnerKeyField`: the extra_data field of partner keys, removed from queue entries; `listBytes`: the
   * largest queue list or node definitions read.
   */
  constructor(
    private readonly http: HttpClient,
    private readonly partnerKeyField = 'api_key_service_org',
    private readonly listBytes = 64 * 1024 * 1024,
  ) {}

  /**
   * GET /api/object_info, cached until `refresh` or a lookup misses. `{olderThanMs}` reads them again only
   * when the cached copy is at least that old: the editor's dialogs share this copy and bound how often they
   * make the server send it.
   */
  async nodeDefinitions(
    refresh: boolean | { olderThanMs: number } = false,
  ): Promise<Record<string, NodeTypeDefinition>> {
    const stale =
      refresh === true ||
      (typeof refresh === 'object' && Date.now() - this.definitionsReadAt >= refresh.olderThanMs);
    if (this.definitions && !stale) return this.definitions;
    this.definitionsLoading ??= this.http
      .json<Record<string, NodeTypeDefinition>>('/api/object_info', {
        action: 'reading the node definitions',
        // Every node type of the server, custom nodes included: megabytes on a real server.
        maxBytes: this.listBytes,
      })
      .then(({ body }) => {
        if (!body || typeof body !== 'object' || Array.isArray(body)) {
          throw new ServiceError(
            'server_error',
            'the generation service answered the node definitions with something that is not an object of nodes',
          );
        }
        this.definitions = body;
        this.definitionsReadAt = Date.now();
        return body;
      })
      .finally(() => {
        this.definitionsLoading = undefined;
      });
    return this.definitionsLoading;
  }

  /**
   * The definitions of the given node types. A type missing from the cache refreshes it (the service may
   * have gained nodes since it was read), at most once a minute: a workflow with a class the server lacks
   * must not download every definition again on each submit. Still missing = not in the answer. The signal
   * stops the wait, not the shared read.
   */
  async definitionsFor(
    classTypes: string[],
    signal?: AbortSignal,
  ): Promise<Record<string, NodeTypeDefinition>> {
    const cached = this.definitions !== undefined;
    let definitions = await abortable(this.nodeDefinitions(), signal);
    const missing = classTypes.some((type) => !Object.hasOwn(definitions, type));
    if (cached && missing && Date.now() - this.definitionsReadAt >= GenerationRestClient.definitionsRefreshMs)
      definitions = await abortable(this.nodeDefinitions(true), signal);
    return Object.fromEntries(
      classTypes.filter((type) => Object.hasOwn(definitions, type)).map((type) => [type, definitions[type]]),
    );
  }

  /** POST /api/upload/image or /api/upload/mask, the file streamed. Bad input is refused before sending. */
  async upload(request: UploadRequest): Promise<UploadResult> {
    const mask = request.mask === true || request.originalRef !== undefined;
    const { part: image, filename } = await uploadPartOf(request, 'image');
    const parts: FormPart[] = [image];
    if (mask) {
      const original = request.originalRef as Partial<FileReference> | undefined;
      if (
        !original ||
        typeof original !== 'object' ||
        typeof original.filename !== 'string' ||
        !original.filename
      ) {
        throw invalidInput(
          'msg.original_ref must name the image the mask belongs to: {filename, subfolder, type} with a filename',
        );
      }
      parts.push(
        { name: 'type', value: 'input' },
        { name: 'subfolder', value: 'clipspace' },
        {
          name: 'original_ref',
          value: JSON.stringify({
            filename: original.filename,
            subfolder: original.subfolder ?? '',
            type: original.type ?? 'input',
          }),
        },
      );
    } else {
      parts.push({ name: 'type', value: request.type || 'input' });
    }
    parts.push({ name: 'overwrite', value: request.overwrite === false ? 'false' : 'true' });

    const form = multipartBody(parts);
    const headers = { 'content-type': form.contentType, 'content-length': String(form.length) };
    // A function: each attempt needs a fresh body (undici destroys a stream whose connection failed).
    const body = () => form.open();
    const { body: result } = await this.http.json<UploadResult>(
      mask ? '/api/upload/mask' : '/api/upload/image',
      {
        method: 'POST',
        body,
        headers,
        signal: request.signal,
        action: `uploading "${filename}"`,
      },
    );
    if (!result || typeof result !== 'object' || typeof result.name !== 'string') {
      throw new ServiceError(
        'server_error',
        `the generation service answered the upload of "${filename}" without the stored name`,
        { body: this.http.cleanForReport(result) },
      );
    }
    return result;
  }

  /**
   * POST /api/prompt, under `promptId` when given (GenerationConnection.submit mints one). An answer with
   * `error` or non-empty `node_errors` is a failure naming the nodes.
   */
  async submit(
    prompt: Workflow,
    clientId: string,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
    promptId?: string,
  ): Promise<SubmitResult> {
    const payload: Record<string, unknown> = { prompt, client_id: clientId };
    if (promptId) payload.prompt_id = promptId;
    if (extraData && Object.keys(extraData).length > 0) payload.extra_data = extraData;
    // A 400 is read here, whole: its body names the broken nodes and inputs, for the sentence.
    const answer = await this.http.json<SubmitResult>('/api/prompt', {
      method: 'POST',
      json: payload,
      idempotent: false,
      signal,
      acceptStatus: [400],
      action: 'submitting the workflow',
    });
    const problems = describeSubmitProblems(answer.body);
    if (answer.status === 400) {
      const detail = messageFromBody(answer.body);
      throw new ServiceError(
        'invalid_request',
        this.http.cleanForReport(
          problems
            ? `the generation service refused the workflow: ${problems}`
            : `the generation service refused submitting the workflow with HTTP 400: check the message's input${detail ? ` (the service said: ${detail})` : ''}`,
        ),
        { status: 400, body: this.http.cleanForReport(answer.body) },
      );
    }
    if (problems) {
      throw new ServiceError(
        'invalid_request',
        this.http.cleanForReport(`the generation service refused the workflow: ${problems}`),
        {
          status: answer.status,
          body: this.http.cleanForReport(answer.body),
        },
      );
    }
    if (!answer.body || typeof answer.body.prompt_id !== 'string' || !answer.body.prompt_id) {
      throw new ServiceError(
        'server_error',
        'the generation service accepted the workflow but sent no prompt_id',
        {
          status: answer.status,
          body: this.http.cleanForReport(answer.body),
        },
      );
    }
    return answer.body;
  }

  /**
   * GET /api/view. A redirect is followed by hand to its address with no key and no cookies (the storage
   * host must never see the key); a 200 is the file itself (self-hosted servers).
   */
  async openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile> {
    const named = `"${ref.filename}"`;
    let response = await this.http.stream('/api/view', {
      query: { filename: ref.filename, subfolder: ref.subfolder ?? '', type: ref.type || 'output' },
      acceptStatus: REDIRECTS,
      signal,
      action: `downloading ${named}`,
    });
    let base = this.http.url('/api/view');
    let signed: string[] = [];
    for (let hops = 0; REDIRECTS.includes(response.status); hops++) {
      await response.body.dump();
      const location = header(response, 'location');
      if (!location || hops > MAX_FOREIGN_REDIRECTS) {
        throw new ServiceError(
          'server_error',
          `the generation service redirected the download of ${named} ${location ? 'too many times' : 'without an address'}`,
          { status: response.status },
        );
      }
      let target: URL;
      try {
        target = new URL(location, base);
      } catch {
        throw new ServiceError(
          'server_error',
          `the generation service redirected the download of ${named} to an address that cannot be read`,
          { status: response.status },
        );
      }
      await this.checkRedirect(target, base, named, response.status);
      base = target;
      // A storage host may echo the signature in its error body (S3's SignatureDoesNotMatch does).
      signed = [...target.searchParams.values()].filter((value) => value.length >= 8);
      response = await this.http.fetchForeign(target.href, signal);
    }
    if (response.status >= 400) {
      // Read bounded and cleaned whole (ServiceError cuts it afterwards): a signature that straddles a cut
      // would otherwise survive in part.
      const body = await this.http.errorBody(response.body, signed);
      const detail = messageFromBody(body);
      throw new ServiceError(
        response.status >= 500 ? 'server_error' : 'invalid_request',
        this.http.cleanForReport(
          `the storage host answered HTTP ${response.status} for ${named}${detail ? ` (${detail})` : ''}: the signed address may have expired; try the download again`,
          signed,
        ),
        { status: response.status, body },
      );
    }
    const length = Number(header(response, 'content-length'));
    const contentType = header(response, 'content-type');
    return {
      contentType: contentType === undefined ? undefined : this.http.removeSecrets(contentType),
      contentLength: Number.isFinite(length) ? length : undefined,
      body: response.body,
    };
  }

  /**
   * Refuses a download's redirect that the address rule (http/address-policy.ts) refuses: to another scheme
   * than http(s), from https to plain http, or to a local address other than the service's own origin (what it
   * answered would become a msg's payload or a saved file).
   */
  private async checkRedirect(target: URL, from: URL, named: string, status: number): Promise<void> {
    const rules = { ownOrigin: this.http.url('/').origin };
    const refusal = addressRefusal(target, from, rules);
    const local = refusal ? undefined : await resolvesLocal(target, rules);
    if (!refusal && !local) return;
    const where = `${target.protocol}//${target.host}`;
    const why =
      refusal === 'scheme'
        ? `to a ${target.protocol} address; only http and https are followed`
        : refusal === 'downgrade'
          ? `from https to plain http (${where}), which is refused: the file would travel unprotected`
          : `to ${where}${local ? `, whose name resolves to ${local}` : ''}, a local address (this machine, a private network or link-local), which is refused: if the service's storage is on your own network, add its origin to the GRAPH_GEN_TRUSTED_ORIGINS environment variable of Node-RED`;
    throw new ServiceError(
      'server_error',
      this.http.cleanForReport(`the generation service redirected the download of ${named} ${why}`),
      { status },
    );
  }

  /**
   * GET /api/queue: `{queue_running: [...], queue_pending: [...]}`, every entry without the keys its
   * `extra_data` may hold. Any other shape is the service's failure, not an empty queue.
   */
  async queue(signal?: AbortSignal): Promise<QueueState> {
    const { body } = await this.http.json<QueueState>('/api/queue', {
      signal,
      action: 'listing the queue',
      // Each entry carries its whole workflow: a long queue is tens of megabytes.
      maxBytes: this.listBytes,
    });
    const lists = ['queue_running', 'queue_pending'] as const;
    if (
      !body ||
      typeof body !== 'object' ||
      Array.isArray(body) ||
      !lists.some((list) => Array.isArray(body[list])) ||
      lists.some((list) => body[list] !== undefined && !Array.isArray(body[list]))
    ) {
      throw new ServiceError(
        'server_error',
        'the generation service answered the queue list with something that is not a queue (queue_running and queue_pending arrays): check the base address in the config node',
        { body: this.http.cleanForReport(body) },
      );
    }
    // The answer was already cleaned of this client's keys (HttpClient.json removes them); what is left are
    // other clients' keys in the entries' extra_data.
    const clean: QueueState = { ...body };
    for (const list of lists) {
      const entries = body[list];
      if (Array.isArray(entries))
        clean[list] = entries.map((entry) => withoutKeys(entry, this.partnerKeyField));
    }
    return clean;
  }

  /**
   * POST /api/queue {delete: ids}: takes the jobs out of the queue (a self-hosted server leaves a running
   * job alone; GenerationConnection.cancel interrupts it). Cancelling twice is harmless, so it may be retried.
   */
  async cancel(promptIds: string[], signal?: AbortSignal): Promise<unknown> {
    const { body } = await this.http.json('/api/queue', {
      method: 'POST',
      json: { delete: promptIds },
      idempotent: true,
      signal,
      action: `cancelling ${promptIds.length === 1 ? `job ${promptIds[0]}` : `${promptIds.length} jobs`}`,
    });
    return body;
  }

  /**
   * POST /api/interrupt: with a prompt id, `{prompt_id}` interrupts that job only if it is the one running;
   * without, whatever runs. Never repeated: a second interrupt could stop the next job.
   */
  async interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown> {
    const { body } = await this.http.json('/api/interrupt', {
      method: 'POST',
      ...(promptId ? { json: { prompt_id: promptId } } : {}),
      idempotent: false,
      signal,
      action: promptId ? `interrupting job ${promptId}` : 'interrupting the running job',
    });
    return body;
  }
}
