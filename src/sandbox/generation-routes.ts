/**
 * What every route group of the generation stand-in shares (generation-service.ts mounts the groups: a job's
 * routes in generation-job-routes.ts, the queue's in generation-queue-routes.ts, the files' in
 * generation-file-routes.ts): the options it is set with, the uploads it took, and GenerationRoutes, the server's
 * route table behind the cloud's key check and the self-hosted CSRF guard, with the words and the version the
 * real servers answer in. Self-hosted servers serve every route under /api and without it; the cloud only under
 * /api. No Node-RED inside.
 */
import type http from 'node:http';
import type { GenerationJobs, SandboxJob } from './generation-jobs';
import type { NodeDefinition } from './node-definitions';
import type { RequestContext, SandboxServer } from './server';

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

/** The only prompt_id form ComfyUI 0.25 and later take from a client. */
export const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const RAW_WORDS: Record<SandboxJob['state'], string> = {
  pending: 'queued_waiting',
  in_progress: 'executing',
  completed: 'success',
  failed: 'error',
  cancelled: 'cancelled',
};

/** A route's answer. */
export type RouteHandler = (ctx: RequestContext) => void | Promise<void>;

/** What a route group is given. */
export interface GenerationRoutes {
  readonly server: SandboxServer;
  readonly jobs: GenerationJobs;
  /** Options as they are now: tests may change them between requests. */
  readonly options: GenerationServiceOptions;
  /** The node definitions served by object_info, which a prompt is validated against. */
  readonly definitions: Record<string, NodeDefinition>;
  /** Every upload received, in order. */
  readonly uploads: UploadRecord[];
  /** A route of the API (under /api; on a self-hosted server also without it), behind the key and CSRF checks. */
  route(method: string, pattern: string, handler: RouteHandler): void;
  /** The cloud's JSON 404. */
  notFound(ctx: RequestContext, what: string): void;
  /** A job's status in the spec's words, or in the raw words some deployments answer with. */
  statusWord(job: SandboxJob): string;
  /** The ComfyUI version it answers as: major * 1000 + minor. */
  version(): number;
  /** Whether that version is 0.`minor` or later. */
  since(minor: number): boolean;
  /** A job's status as a self-hosted server of that version words it. */
  selfHostedWord(job: SandboxJob): string;
  /** A request's JSON body; undefined for an empty one (throws on one that is not JSON). */
  readJson(ctx: RequestContext): Promise<unknown>;
}

/** The shared parts of the groups mounted on `server`. */
export function generationRoutes(
  server: SandboxServer,
  jobs: GenerationJobs,
  options: GenerationServiceOptions,
  definitions: Record<string, NodeDefinition>,
  uploads: UploadRecord[],
): GenerationRoutes {
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
  const readJson = async (ctx: RequestContext): Promise<unknown> => {
    const text = (await ctx.body()).toString('utf8');
    if (text.trim() === '') return undefined;
    return JSON.parse(text);
  };

  return {
    server,
    jobs,
    options,
    definitions,
    uploads,
    route,
    notFound,
    statusWord,
    version,
    since,
    selfHostedWord,
    readJson,
  };
}

/**
 * The extra_data a self-hosted server keeps with a job and shows in its queue, history and an ended job's
 * `workflow`: the submit's, with the submitter's client_id and the server's create_time, sensitive fields out.
 */
export function listedExtraData(job: SandboxJob): Record<string, unknown> {
  const extra: Record<string, unknown> = {
    ...job.extraData,
    client_id: job.clientId,
    create_time: job.createdAt,
  };
  for (const field of Object.keys(extra)) if (/key|token/i.test(field)) delete extra[field];
  return extra;
}

/** The ids of a job's output nodes, as a self-hosted server lists them in its queue and history. */
export function outputNodes(job: SandboxJob, definitions: Record<string, NodeDefinition>): string[] {
  return Object.entries(job.prompt)
    .filter(([, node]) => definitions[(node as { class_type?: string })?.class_type ?? '']?.output_node)
    .map(([id]) => id);
}
