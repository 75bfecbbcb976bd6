/**
 * The generation service's REST stand-in and its storage host, behaving as real deployments do (spec and
 * FACTS.md): node definitions, streamed uploads, submit validated like a real server, status in spec or raw
 * words, jobs/history endpoints (each switchable off to test fallbacks), downloads that redirect to a signed
 * address on a separate storage server (cloud) or answer with the file (self-hosted), queue and interrupt,
 * and the user data where the server's page saves workflows (user-data.ts).
 * With no API key it is a self-hosted server: no key checked, every route also served without `/api`, answering
 * as the ComfyUI version it is set to (0.8.0 or 0.33.0 behaviours). Past 400 lines: one route per endpoint of
 * the real servers, each answering as they were measured to.
 */
import { createHmac, randomBytes } from 'node:crypto';
import path from 'node:path';
import type http from 'node:http';
import type { RequestContext, SandboxServer, SeenRequest } from './server';
import { SandboxServer as Server } from './server';
import {
  fileKey,
  type FileRef,
  type GenerationJobs,
  type SandboxJob,
  type StoredFile,
} from './generation-jobs';
import { trustOrigin } from '../http/address-policy';
import { multipartBoundary, readMultipart } from './multipart';
import { mountUserData, type UserData } from './user-data';
import { defaultNodeDefinitions, validatePrompt, type NodeDefinition } from './node-definitions';
import { TINY_PNG, UploadSink, sendFile } from './stored-files';

export { defaultNodeDefinitions, validatePrompt, type NodeDefinition } from './node-definitions';

export interface GenerationServiceOptions {
  /** Raw status words as some deployments answer them, instead of the spec's five. */
  statusWords?: 'spec' | 'raw';
  /** Serve GET /api/jobs/{id} (default true). */
  jobsEndpoint?: boolean;
  /**
   * Self-hosted only: serve the job list `GET /api/jobs?status=...` as ComfyUI 0.8 and later do (default
   * true; false: as older servers, which answer it 404).
   */
  jobsList?: boolean;
  /** Serve GET /api/history_v2/{id} (default true). */
  historyV2Endpoint?: boolean;
  /** Serve GET /api/history/{id} (default true). */
  historyEndpoint?: boolean;
  /** Shape of queue elements: self-hosted arrays `[number, id, prompt, extra, outputs]` or objects. */
  queueShape?: 'array' | 'object';
  /** Port of the storage host (default: any free one). */
  storagePort?: number;
  /** Where uploads larger than `keepUploadBytes` are written; undefined = their bytes are counted and dropped. */
  uploadDirectory?: string;
  /** Uploads up to this size are kept in memory and can be downloaded again (default 16 MiB). */
  keepUploadBytes?: number;
  /** Extra node definitions merged into object_info. */
  nodeDefinitions?: Record<string, NodeDefinition>;
  /** Hash uploads with SHA-256 for `uploads[].sha256` (default true; benchmarks turn it off). */
  hashUploads?: boolean;
  /** Lifetime of signed addresses in seconds (default 300). */
  signedAddressSeconds?: number;
  /**
   * Self-hosted only: the ComfyUI version it answers as (default "0.8.0"), with what differs between the two
   * measured ones: from 0.9 an interrupted or cancelled job is `cancelled` (before: `failed`); from 0.25 a
   * client's prompt_id must be a lower-case UUID; from 0.26 `POST /api/jobs/{id}/cancel` and
   * `POST /api/jobs/cancel`. `/api/system_stats` names it.
   */
  serverVersion?: string;
}

/** One upload as the sandbox received it: what a test or benchmark checks. */
export interface UploadRecord {
  route: 'image' | 'mask';
  name: string;
  subfolder: string;
  type: string;
  size: number;
  sha256: string;
  contentType?: string;
  fields: Record<string, string>;
  headers: http.IncomingHttpHeaders;
}

export interface GenerationService {
  /** The separate storage server that signed download addresses point at. */
  storageUrl: string;
  storage: SandboxServer;
  /** Options as they are now: tests may change them between requests (e.g. switch an endpoint off). */
  options: GenerationServiceOptions;
  /** Every upload received, in order. */
  uploads: UploadRecord[];
  /** The node definitions served by object_info (tests may add to them). */
  definitions: Record<string, NodeDefinition>;
  /** Requests the storage host saw that carried the API key, a cookie, or any X-API-Key header. */
  storageLeaks(): SeenRequest[];
  /** The server's user data (`workflows/<name>.json` are the workflows its page saved). */
  userData: UserData;
  /** Stores a file the service can serve (a generated stream of `size` bytes when `size` is given). */
  addFile(ref: FileRef, file: StoredFile): void;
  close(): Promise<void>;
}

const DEFAULT_KEEP_UPLOAD_BYTES = 16 << 20;

/** The only prompt_id form ComfyUI 0.25 and later take from a client. */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const RAW_WORDS: Record<SandboxJob['state'], string> = {
  pending: 'queued_waiting',
  in_progress: 'executing',
  completed: 'success',
  failed: 'error',
  cancelled: 'cancelled',
};

export async function mountGenerationService(
  server: SandboxServer,
  jobs: GenerationJobs,
  initialOptions: GenerationServiceOptions,
): Promise<GenerationService> {
  const options: GenerationServiceOptions = { ...initialOptions };
  const definitions = { ...defaultNodeDefinitions(), ...initialOptions.nodeDefinitions };
  const uploads: UploadRecord[] = [];
  const signingKey = randomBytes(32);
  const storage = new Server();
  await storage.listen(options.storagePort ?? 0);
  // The storage host plays a cloud's, on 127.0.0.1: trusted by the address rule of clients in this process
  // (a client in another process is told to name it in GRAPH_GEN_TRUSTED_ORIGINS).
  const distrustStorage = trustOrigin(storage.url);

  // Self-hosted servers serve every route under /api and without it; the cloud only under /api. Their
  // unknown routes answer aiohttp's text/plain "404: Not Found".
  server.plainNotFound = jobs.selfHosted;
  const api = (route: string): RegExp => new RegExp(`^${jobs.selfHosted ? '(?:/api)?' : '/api'}${route}$`);

  const authorised = (ctx: RequestContext): boolean => {
    if (jobs.selfHosted || ctx.req.headers['x-api-key'] === jobs.apiKey) return true;
    ctx.json(401, { code: 'unauthorized', message: 'Invalid or missing API key' });
    return false;
  };
  // Self-hosted servers refuse a POST whose Origin names another host than Host (their CSRF guard).
  const foreignOrigin = (ctx: RequestContext): boolean => {
    const origin = ctx.req.headers.origin;
    if (ctx.req.method !== 'POST' || !origin) return false;
    try {
      if (new URL(origin).host === ctx.req.headers.host) return false;
    } catch {
      // an unreadable Origin is foreign
    }
    ctx.res.writeHead(403, { 'content-length': 0 }).end();
    return true;
  };
  const route = (method: string, pattern: string, handler: (ctx: RequestContext) => void | Promise<void>) =>
    server.route(method, api(pattern), (ctx) =>
      authorised(ctx) && !foreignOrigin(ctx) ? handler(ctx) : undefined,
    );

  const notFound = (ctx: RequestContext, what: string) => ctx.json(404, { code: 'not_found', message: what });
  const statusWord = (job: SandboxJob) => (options.statusWords === 'raw' ? RAW_WORDS[job.state] : job.state);
  const version = () => {
    const [major, minor] = (options.serverVersion ?? '0.8.0').split('.').map(Number);
    return major * 1000 + minor;
  };
  const since = (minor: number) => version() >= minor;
  // Before ComfyUI 0.9 a self-hosted server had no word for an interrupted job: /api/jobs called it failed.
  const selfHostedWord = (job: SandboxJob) => (job.state === 'cancelled' && !since(9) ? 'failed' : job.state);
  const terminal = (job: SandboxJob) =>
    job.state === 'completed' || job.state === 'failed' || job.state === 'cancelled';
  const readJson = async (ctx: RequestContext): Promise<unknown> => {
    const text = (await ctx.body()).toString('utf8');
    if (text.trim() === '') return undefined;
    return JSON.parse(text);
  };

  const sign = (key: string, expires: number) =>
    createHmac('sha256', signingKey).update(`${key}\n${expires}`).digest('hex');

  route('GET', '/object_info', (ctx) => ctx.json(200, definitions));
  route('GET', '/object_info/([^/]+)', (ctx) => {
    const name = decodeURIComponent(ctx.params[0]);
    const definition = definitions[name];
    ctx.json(200, definition ? { [name]: definition } : {});
  });

  const upload = (kind: 'image' | 'mask') => async (ctx: RequestContext) => {
    const boundary = multipartBoundary(ctx.req.headers['content-type']);
    if (!boundary) {
      ctx.res.writeHead(400, { 'content-type': 'text/plain' }).end('Expected a multipart/form-data body');
      return;
    }
    let sink: UploadSink | undefined;
    let form;
    try {
      form = await readMultipart(ctx.req, boundary, (part) => {
        if (part.field !== 'image' || sink) return undefined;
        sink = new UploadSink(
          options.keepUploadBytes ?? DEFAULT_KEEP_UPLOAD_BYTES,
          options.uploadDirectory,
          options.hashUploads !== false,
        );
        return sink;
      });
    } catch (error) {
      ctx.res.writeHead(400, { 'content-type': 'text/plain' }).end(String(error));
      return;
    }
    const image = form.files.find((file) => file.field === 'image');
    if (!image || !sink) {
      // Self-hosted servers answer a missing file with a bare 400.
      ctx.res.writeHead(400).end();
      return;
    }
    const fields = form.fields;
    const type = fields.type || 'input';
    let subfolder = fields.subfolder ?? '';
    if (kind === 'mask') {
      let original: Partial<FileRef> | undefined;
      try {
        original = JSON.parse(fields.original_ref ?? '') as Partial<FileRef>;
      } catch {
        original = undefined;
      }
      if (!original?.filename) {
        ctx.res
          .writeHead(400, { 'content-type': 'text/plain' })
          .end('original_ref with a filename is required');
        return;
      }
      subfolder = fields.subfolder ?? 'clipspace';
    }
    if (subfolder.split(/[\\/]/).includes('..') || path.isAbsolute(subfolder)) {
      ctx.res.writeHead(400).end();
      return;
    }
    let name = path.basename(image.filename || 'image.png');
    if (fields.overwrite !== 'true' && fields.overwrite !== '1') {
      // As self-hosted servers do: an existing name gets a " (n)" suffix instead of being replaced.
      const extension = path.extname(name);
      const stem = name.slice(0, name.length - extension.length);
      for (let n = 1; jobs.files.has(fileKey({ filename: name, subfolder, type })); n++) {
        name = `${stem} (${n})${extension}`;
      }
    }
    jobs.files.set(fileKey({ filename: name, subfolder, type }), sink.stored(image.contentType));
    uploads.push({
      route: kind,
      name,
      subfolder,
      type,
      size: sink.size,
      sha256: sink.hash?.digest('hex') ?? '',
      contentType: image.contentType,
      fields,
      headers: ctx.req.headers,
    });
    ctx.json(200, { name, subfolder, type });
  };
  route('POST', '/upload/image', upload('image'));
  route('POST', '/upload/mask', upload('mask'));

  route('POST', '/prompt', async (ctx) => {
    let body: { prompt?: unknown; client_id?: unknown; extra_data?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      ctx.json(400, {
        error: { type: 'invalid_prompt', message: 'The body is not JSON', details: '' },
        node_errors: {},
      });
      return;
    }
    if (!body || typeof body !== 'object' || !('prompt' in body)) {
      ctx.json(400, {
        error: { type: 'no_prompt', message: 'No prompt provided', details: '' },
        node_errors: {},
      });
      return;
    }
    // As ComfyUI 0.33: the id is checked before the workflow.
    const asked = (body as { prompt_id?: unknown }).prompt_id;
    let promptId: string | undefined;
    if (asked !== undefined && asked !== null) {
      if (jobs.selfHosted && since(25) && (typeof asked !== 'string' || !CANONICAL_UUID.test(asked))) {
        ctx.json(400, {
          error: {
            type: 'invalid_prompt_id',
            message: 'prompt_id must be a valid UUID',
            details:
              'prompt_id must be a UUID string in canonical lowercase hyphenated form; omit it to let the server generate one',
            extra_info: {},
          },
          node_errors: {},
        });
        return;
      }
      // Older servers take any id, as text.
      promptId = String(asked);
    } else if (asked === null && jobs.selfHosted && !since(25)) promptId = 'None';
    const problem = validatePrompt(body.prompt, definitions, options.serverVersion);
    if (problem) {
      ctx.json(400, problem);
      return;
    }
    const extraData =
      body.extra_data && typeof body.extra_data === 'object'
        ? (body.extra_data as Record<string, unknown>)
        : undefined;
    const clientId = typeof body.client_id === 'string' ? body.client_id : undefined;
    const job = jobs.submit(body.prompt as Record<string, unknown>, clientId, extraData, promptId);
    ctx.json(200, { prompt_id: job.id, number: job.number, node_errors: {} });
  });

  // The extra_data a self-hosted server keeps with a job and shows in its queue, history and an ended job's
  // `workflow`: the submit's, with the submitter's client_id and the server's create_time, sensitive fields out.
  const listedExtraData = (job: SandboxJob): Record<string, unknown> => {
    const extra: Record<string, unknown> = {
      ...job.extraData,
      client_id: job.clientId,
      create_time: job.createdAt,
    };
    for (const field of Object.keys(extra)) if (/key|token/i.test(field)) delete extra[field];
    return extra;
  };

  route('GET', '/job/([^/]+)/status', (ctx) => {
    // Self-hosted servers have no status endpoint.
    if (jobs.selfHosted) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    if (!job) return notFound(ctx, 'job not found');
    ctx.json(200, { status: statusWord(job) });
  });

  route('GET', '/jobs/([^/]+)', (ctx) => {
    if (options.jobsEndpoint === false) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    if (!job) {
      if (jobs.selfHosted) return ctx.json(404, { error: 'Job not found' });
      return notFound(ctx, 'job not found');
    }
    if (!jobs.selfHosted) {
      return ctx.json(200, {
        id: job.id,
        status: statusWord(job),
        ...(terminal(job) ? { outputs: job.outputs } : {}),
        ...(job.error ? { execution_error: job.error } : {}),
      });
    }
    // As self-hosted servers answer: an interrupted job is `failed`, and only its messages say why.
    const ended = terminal(job);
    ctx.json(200, {
      id: job.id,
      status: selfHostedWord(job),
      priority: job.number,
      create_time: job.createdAt,
      outputs_count: ended ? countFiles(job.outputs) : 0,
      ...(job.error ? { execution_error: { prompt_id: job.id, ...job.error } } : {}),
      ...(ended
        ? {
            execution_start_time: job.startedAt ?? null,
            execution_end_time: job.endedAt ?? null,
            outputs: job.outputs,
            execution_status: executionStatus(job),
            workflow: { prompt: job.prompt, extra_data: listedExtraData(job) },
          }
        : {}),
    });
  });

  // As a self-hosted server lists jobs (ComfyUI v0.8.0, measured): every job, or those of the statuses
  // asked for, newest first, without workflows; an interrupted job is `failed`. Cloud services: no list.
  const listStatuses = () => [
    'pending',
    'in_progress',
    'completed',
    'failed',
    ...(since(9) ? ['cancelled'] : []),
  ];
  route('GET', '/jobs', (ctx) => {
    const LIST_STATUSES = listStatuses();
    if (!jobs.selfHosted || options.jobsList === false) return server.notFound(ctx);
    const query = ctx.url.searchParams;
    const asked = query.get('status');
    const wanted = asked
      ? asked
          .split(',')
          .map((word) => word.trim().toLowerCase())
          .filter(Boolean)
      : LIST_STATUSES;
    const invalid = wanted.filter((word) => !LIST_STATUSES.includes(word));
    if (invalid.length > 0) {
      return ctx.json(400, {
        error: `Invalid status value(s): ${invalid.join(', ')}. Valid values: ${LIST_STATUSES.join(', ')}`,
      });
    }
    let limit: number | undefined;
    if (query.has('limit')) {
      limit = Number(query.get('limit'));
      if (!Number.isInteger(limit) || limit <= 0)
        return ctx.json(400, { error: 'limit must be a positive integer' });
    }
    const offset = Math.max(0, Number.parseInt(query.get('offset') ?? '0', 10) || 0);
    const listed = [...jobs.jobs.values()]
      .filter((job) => wanted.includes(selfHostedWord(job)))
      .sort((a, b) => b.number - a.number);
    const page = listed.slice(offset, limit === undefined ? undefined : offset + limit);
    ctx.json(200, {
      jobs: page.map((job) => ({
        id: job.id,
        status: selfHostedWord(job),
        priority: job.number,
        create_time: job.createdAt,
        execution_start_time: job.startedAt ?? null,
        execution_end_time: job.endedAt ?? null,
        outputs_count: terminal(job) ? countFiles(job.outputs) : 0,
        ...(since(33) ? { previewable_outputs_count: 0 } : {}),
      })),
      pagination: {
        offset,
        limit: limit ?? null,
        total: listed.length,
        has_more: offset + page.length < listed.length,
      },
    });
  });

  const history = (enabled: () => boolean) => (ctx: RequestContext) => {
    if (!enabled()) return server.notFound(ctx);
    const job = jobs.jobs.get(decodeURIComponent(ctx.params[0]));
    // Self-hosted servers answer {} for a prompt that is unknown or not finished.
    if (!job || !terminal(job)) return ctx.json(200, {});
    ctx.json(200, {
      [job.id]: {
        prompt: [job.number, job.id, job.prompt, listedExtraData(job), outputNodes(job, definitions)],
        outputs: job.outputs,
        status: executionStatus(job),
      },
    });
  };
  route(
    'GET',
    '/history_v2/([^/]+)',
    history(() => options.historyV2Endpoint !== false),
  );
  route(
    'GET',
    '/history/([^/]+)',
    history(() => options.historyEndpoint !== false),
  );

  const findFile = (ref: FileRef): StoredFile | undefined => {
    const stored = jobs.files.get(fileKey(ref));
    if (stored) return stored;
    // Outputs the event runner reported but did not store: serve a tiny image so flows run end to end.
    for (const job of jobs.jobs.values()) {
      for (const output of Object.values(job.outputs)) {
        for (const list of Object.values(output)) {
          if (!Array.isArray(list)) continue;
          for (const item of list as Array<Partial<FileRef>>) {
            if (
              item?.filename === ref.filename &&
              (item.subfolder ?? '') === ref.subfolder &&
              (item.type ?? 'output') === ref.type
            )
              return { content: TINY_PNG, contentType: 'image/png' };
          }
        }
      }
    }
    return undefined;
  };

  route('GET', '/view', (ctx) => {
    const query = ctx.url.searchParams;
    const ref: FileRef = {
      filename: query.get('filename') ?? '',
      subfolder: query.get('subfolder') ?? '',
      type: query.get('type') || 'output',
    };
    if (!ref.filename) return ctx.json(400, { code: 'bad_request', message: 'filename is required' });
    const file = findFile(ref);
    if (!file) return notFound(ctx, `file ${ref.filename} not found`);
    if (jobs.selfHosted) return sendFile(ctx.res, ref.filename, file);
    const key = Buffer.from(JSON.stringify(ref)).toString('base64url');
    const expires = Math.floor(Date.now() / 1000) + (options.signedAddressSeconds ?? 300);
    const address = `${storage.url}/files/${key}?expires=${expires}&signature=${sign(key, expires)}`;
    // A session cookie as cloud gateways set: a client with a cookie jar would carry it to the storage host.
    ctx.res
      .writeHead(302, {
        location: address,
        'set-cookie': 'session=sandbox-session; Path=/',
        'content-length': 0,
      })
      .end();
  });

  // What a self-hosted server says of itself (the cloud stand-in names no version).
  route('GET', '/system_stats', (ctx) => {
    if (!jobs.selfHosted) return server.notFound(ctx);
    ctx.json(200, {
      system: {
        os: 'posix',
        python_version: '3.11.2',
        embedded_python: false,
        comfyui_version: options.serverVersion ?? '0.8.0',
        pytorch_version: '1.13.1',
        argv: ['main.py', '--cpu'],
      },
      devices: [],
    });
  });
  route('GET', '/features', (ctx) =>
    ctx.json(200, { supports_preview_metadata: true, max_upload_size: 104857600 }),
  );

  // ComfyUI 0.26 and later: one call dequeues a pending job or interrupts a running one.
  const cancelOne = (id: string): boolean => {
    const job = jobs.jobs.get(id);
    if (job?.state === 'pending') return jobs.remove(id);
    if (job?.state === 'in_progress') return jobs.interrupt(id) !== undefined;
    return false;
  };
  const methodNotAllowed = (ctx: RequestContext) =>
    ctx.text(405, '405: Method Not Allowed', { 'content-type': 'text/plain; charset=utf-8' });
  route('POST', '/jobs/cancel', async (ctx) => {
    if (!jobs.selfHosted || !since(26)) return methodNotAllowed(ctx);
    const body = (await readJson(ctx).catch(() => undefined)) as { job_ids?: unknown } | undefined;
    const ids = Array.isArray(body?.job_ids) ? body.job_ids : [];
    const invalid = ids.filter((id) => typeof id !== 'string' || !CANONICAL_UUID.test(id));
    if (invalid.length > 0)
      return ctx.json(400, { error: 'job_ids contains invalid id(s)', invalid_ids: invalid });
    ctx.json(200, { cancelled: ids.map((id) => cancelOne(id as string)).some(Boolean) });
  });
  route('POST', '/jobs/([^/]+)/cancel', (ctx) => {
    if (!jobs.selfHosted || !since(26)) return methodNotAllowed(ctx);
    ctx.json(200, { cancelled: cancelOne(decodeURIComponent(ctx.params[0])) });
  });

  const queueElement = (job: SandboxJob) => {
    const extra = listedExtraData(job);
    if (options.queueShape === 'object') {
      return { prompt_id: job.id, number: job.number, client_id: job.clientId, created_at: job.createdAt };
    }
    return [job.number, job.id, job.prompt, extra, outputNodes(job, definitions)];
  };
  route('GET', '/queue', (ctx) =>
    ctx.json(200, {
      queue_running: jobs.running().map(queueElement),
      queue_pending: jobs.pending().map(queueElement),
    }),
  );
  route('POST', '/queue', async (ctx) => {
    let body: { delete?: unknown; clear?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      return ctx.json(400, { code: 'bad_request', message: 'The body is not JSON' });
    }
    const ids = Array.isArray(body?.delete) ? body.delete.filter((id) => typeof id === 'string') : [];
    if (body?.clear === true) ids.push(...jobs.pending().map((job) => job.id));
    if (jobs.selfHosted) {
      // Self-hosted servers take pending jobs out of the queue and forget them, with no event; a running
      // job is not touched. They answer with an empty 200.
      for (const id of ids) jobs.remove(id);
      ctx.res.writeHead(200, { 'content-length': 0 }).end();
      return;
    }
    // The cloud stand-in cancels pending and running jobs and says which.
    ctx.json(200, { deleted: ids.filter((id) => jobs.cancel(id)) });
  });
  route('POST', '/interrupt', async (ctx) => {
    let body: { prompt_id?: unknown } | undefined;
    try {
      body = (await readJson(ctx)) as typeof body;
    } catch {
      body = undefined;
    }
    // With {prompt_id} only that job, and only if it is the one running; without, whatever runs.
    jobs.interrupt(typeof body?.prompt_id === 'string' ? body.prompt_id : undefined);
    ctx.res.writeHead(200, { 'content-length': 0 }).end();
  });

  const userData = mountUserData(route, version);

  storage.route('GET', /^\/files\/([^/]+)$/, (ctx) => {
    const seen = ctx.req.headers;
    if (seen['x-api-key'] !== undefined || seen.authorization !== undefined) {
      // As object stores do: a request with a second means of authentication is refused.
      return ctx.text(400, 'Only one authentication mechanism allowed');
    }
    const key = ctx.params[0];
    const expires = Number(ctx.url.searchParams.get('expires'));
    const signature = ctx.url.searchParams.get('signature') ?? '';
    if (!Number.isFinite(expires) || signature !== sign(key, expires))
      return ctx.text(403, 'Signature mismatch');
    if (expires < Date.now() / 1000) return ctx.text(403, 'Request has expired');
    const ref = JSON.parse(Buffer.from(key, 'base64url').toString('utf8')) as FileRef;
    const file = findFile(ref);
    if (!file) return ctx.text(404, 'NoSuchKey');
    sendFile(ctx.res, ref.filename, file);
  });

  return {
    storageUrl: storage.url,
    storage,
    options,
    uploads,
    definitions,
    userData,
    storageLeaks: () =>
      storage.counters.requests.filter((seen) => {
        if (seen.headers['x-api-key'] !== undefined || seen.headers.cookie !== undefined) return true;
        if (!jobs.apiKey) return false;
        const everything = `${seen.path}?${seen.query.toString()} ${JSON.stringify(seen.headers)}`;
        return everything.includes(jobs.apiKey) || everything.includes(encodeURIComponent(jobs.apiKey));
      }),
    addFile: (ref, file) => jobs.files.set(fileKey(ref), file),
    close: () => {
      distrustStorage();
      return storage.close();
    },
  };
}

function outputNodes(job: SandboxJob, definitions: Record<string, NodeDefinition>): string[] {
  return Object.entries(job.prompt)
    .filter(([, node]) => definitions[(node as { class_type?: string })?.class_type ?? '']?.output_node)
    .map(([id]) => id);
}

function countFiles(outputs: SandboxJob['outputs']): number {
  let count = 0;
  for (const output of Object.values(outputs))
    for (const list of Object.values(output)) if (Array.isArray(list)) count += list.length;
  return count;
}

/** An ended job's `status` as self-hosted servers keep it in history: `{status_str, completed, messages}`. */
function executionStatus(job: SandboxJob): Record<string, unknown> {
  const at = (data: Record<string, unknown> = {}) => ({
    prompt_id: job.id,
    timestamp: job.createdAt,
    ...data,
  });
  const messages: Array<[string, Record<string, unknown>]> = [['execution_start', at()]];
  if (job.state === 'completed') messages.push(['execution_success', at()]);
  else if (job.state === 'failed') messages.push(['execution_error', at(job.error)]);
  else messages.push(['execution_interrupted', at({ node_id: '', node_type: '', executed: [] })]);
  return {
    status_str: job.state === 'completed' ? 'success' : 'error',
    completed: job.state === 'completed',
    messages,
  };
}
