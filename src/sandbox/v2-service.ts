/**
 * The sandbox's "Comfy API v2" mode: the sandbox answers as comfy-api-proxy does in front of a ComfyUI (the
 * proxy's app.py, auth.py, middleware.py, and peers/comfy-v2/README.md, whose measurements win where the two
 * differ), with the sandbox's own job engine as that ComfyUI. Routes only under /api/v2 (anything else is
 * aiohttp's `404: Not Found`), in aiohttp's order (a known path asked with another method is 405), behind the
 * proxy's origin guard and optional bearer token. Jobs: v2-jobs.ts; event streams: v2-streams.ts; assets:
 * v2-assets.ts; what clients send: v2-requests.ts; how the proxy writes: v2-wire.ts.
 *
 * Fault injection in the sandbox's style: the server's FaultInjector applies to v2 routes as to any, and
 * `faults` here plays what only the proxy's situation has (ComfyUI unreachable, a job ComfyUI forgot, streams
 * that end early, a submit whose answer is lost). Counters: requests per route and per job, and streams.
 * Past 400 lines: the proxy's whole front (origin guard, token, aiohttp's routing) and its job routes, which
 * share the checks in one order.
 */
import { randomUUID, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { isIP } from 'node:net';
import type { GenerationJobs } from './generation-jobs';
import type { GenerationService } from './generation-service';
import { validatePrompt, type NodeDefinition } from './node-definitions';
import type { RequestContext, SandboxServer } from './server';
import { DEFAULT_MAX_UPLOAD_BYTES, V2Assets, type V2AssetRecord } from './v2-assets';
import { V2JobBook, type V2JobRecord, type V2Status, type V2Upstream } from './v2-jobs';
import { readIdempotencyKey, readListQuery, readSubmitBody, type V2Refusal } from './v2-requests';
import { V2Streams, type V2StreamCounts } from './v2-streams';
import {
  isPythonUuid,
  sendEmpty,
  sendError,
  sendPlain,
  sendPyJson,
  sendServerError,
  type V2Request,
} from './v2-wire';

export interface V2ServiceOptions {
  /** The bearer token every /api/v2 route but health needs; undefined = open (the proxy's default). */
  token?: string;
  /** Event streams open at once, all clients together (default 8, the proxy's). */
  maxStreams?: number;
  /** Period of the event streams' `: keepalive` comment (default 15 000 ms). */
  keepaliveMs?: number;
  /** Least time between two `progress` (or two `preview`) events of a stream (default 500 ms). */
  throttleMs?: number;
  /** Largest upload (default 100 MB, the proxy's); JSON bodies may be 1 MiB more. */
  maxUploadBytes?: number;
  /** Jobs the list looks at before it stops and says `truncated` (default 500, the proxy's). */
  listScanCap?: number;
}

/** What only the proxy's situation has, to be played on purpose. */
export interface V2Faults {
  /**
   * False: ComfyUI is unreachable. Job routes answer 503 `upstream_unreachable` ("Could not reach ComfyUI."; a
   * submit "... to submit the job." with its Idempotency-Key kept claimed; a cancel "... to cancel."), uploads
   * and downloads 500 `upstream_error`, open event streams end without a final status; health, the asset index
   * and records answer as before. True again: everything as before.
   */
  upstreamReachable: boolean;
  /** The engine forgets a job (as a ComfyUI restart): waiting or running it stops; it is `expired` from then. */
  forgetJob(jobId: string): boolean;
  /** Ends the open event streams (of one job, or all) now, without a final status; how many. */
  closeStreams(jobId?: string): number;
  /** The next `count` streams that see their job's run end send `status running` as their last event. */
  endStreamsStale(count?: number): void;
  /** The next `count` submits create their job, then the connection is destroyed before the answer. */
  loseSubmitAnswers(count?: number): void;
  /** Back to no fault. */
  clear(): void;
}

/** Requests per route (`GET /api/v2/jobs/{id}`, ...; `other` for no route) and per job, and the streams. */
export class V2Counters {
  readonly byRoute = new Map<string, number>();
  /** Requests to a job's own routes (status, events, cancel, workflow), by the job's id. */
  readonly byJob = new Map<string, number>();

  constructor(readonly streams: V2StreamCounts) {}

  route(name: string): number {
    return this.byRoute.get(name) ?? 0;
  }

  job(jobId: string): number {
    return this.byJob.get(jobId) ?? 0;
  }

  record(route: string, jobId?: string): void {
    this.byRoute.set(route, this.route(route) + 1);
    if (jobId !== undefined) this.byJob.set(jobId, this.job(jobId) + 1);
  }

  reset(): void {
    this.byRoute.clear();
    this.byJob.clear();
    this.streams.opened = 0;
    this.streams.refused = 0;
    this.streams.mostOpen = this.streams.open;
  }
}

export interface V2Service {
  readonly options: Readonly<Required<Omit<V2ServiceOptions, 'token'>>> & { token?: string };
  readonly faults: V2Faults;
  readonly counters: V2Counters;
  /** The jobs the proxy recorded, by id. */
  readonly jobs: ReadonlyMap<string, V2JobRecord>;
  /** The uploaded assets held now. */
  readonly assets: readonly V2AssetRecord[];
  close(): void;
}

/** The engine a v2 sandbox runs on: today's generation service and its jobs, at `url`. */
export interface V2Engine {
  jobs: GenerationJobs;
  generation: GenerationService;
  url: string;
}

type Handler = (r: V2Request) => void | Promise<void>;

interface V2Route {
  method: string;
  path: RegExp;
  name: string;
  handler: Handler;
  /** The route names a job by its `{id}`. */
  ofJob?: boolean;
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'];
const SEGMENT = '([^{}/]+)';

function decodeParam(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Python's urlsplit of an authority: host name (lower case, no brackets) and port. */
function authority(netloc: string): { hostname?: string; port?: string } {
  const hostPort = netloc.slice(netloc.lastIndexOf('@') + 1).toLowerCase();
  const bracket = /^\[([^\]]*)\](?::(.*))?$/.exec(hostPort);
  if (bracket) return { hostname: bracket[1], port: bracket[2] || undefined };
  const colon = hostPort.lastIndexOf(':');
  if (colon < 0) return { hostname: hostPort || undefined };
  return { hostname: hostPort.slice(0, colon) || undefined, port: hostPort.slice(colon + 1) || undefined };
}

function isLoopback(hostname: string | undefined): boolean {
  if (!hostname) return false;
  if (hostname === 'localhost') return true;
  if (isIP(hostname) === 4) return hostname.startsWith('127.');
  if (isIP(hostname) === 6) return hostname === '::1' || hostname === '0:0:0:0:0:0:0:1';
  return false;
}

/** The proxy's default-on origin guard (ComfyUI's): the reason it refuses a browser's cross-site request. */
export function originRefusal(headers: http.IncomingHttpHeaders): string | undefined {
  if (headers['sec-fetch-site'] === 'cross-site')
    return 'Cross-site request blocked (Sec-Fetch-Site: cross-site).';
  const host = headers.host;
  const origin = headers.origin;
  if (!host || !origin) return undefined;
  const originNetloc = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(origin)?.[1] ?? '';
  const originParts = authority(originNetloc);
  let originDomain = originNetloc.toLowerCase();
  let hostDomain = host.toLowerCase();
  const hostParts = authority(hostDomain);
  if (!isLoopback(hostParts.hostname)) return undefined;
  if (originParts.port === undefined) hostDomain = hostParts.hostname || hostDomain;
  if (hostParts.port === undefined) originDomain = originParts.hostname || originDomain;
  if (hostDomain && originDomain && hostDomain !== originDomain)
    return `Origin '${origin}' does not match request host '${host}'.`;
  return undefined;
}

function sendRefusal(res: http.ServerResponse, refusal: V2Refusal): void {
  if (refusal.plain) return sendServerError(res);
  sendError(res, refusal.status, refusal.code, refusal.message, refusal.details);
}

/**
 * The engine's control nodes (generation-events.ts: SandboxFail, SandboxSlow, SandboxHang, SandboxText,
 * SandboxPreview) as node definitions, so a v2 submit, which the engine validates, may use them: on today's
 * API tests put such jobs in directly, but v2 has only its submit route.
 */
export function sandboxControlNodes(): Record<string, NodeDefinition> {
  const control = (name: string, optional: Record<string, unknown>): NodeDefinition => ({
    input: { required: {}, optional },
    output: ['IMAGE'],
    output_name: ['IMAGE'],
    name,
    display_name: name,
    category: 'sandbox',
    output_node: false,
  });
  return {
    SandboxFail: control('SandboxFail', { exception_type: ['STRING'], message: ['STRING'] }),
    SandboxSlow: control('SandboxSlow', { ms: ['INT', { default: 100, min: 0 }] }),
    SandboxHang: control('SandboxHang', {}),
    SandboxText: control('SandboxText', { text: ['STRING'] }),
    SandboxPreview: control('SandboxPreview', { count: ['INT', { default: 1 }], kind: ['INT'] }),
  };
}

/** Mounts the v2 routes on `server` (which then answers nothing else) over `engine`. */
export function mountV2Service(
  server: SandboxServer,
  engine: V2Engine,
  given: V2ServiceOptions = {},
): V2Service {
  const options = {
    token: given.token,
    maxStreams: given.maxStreams ?? 8,
    keepaliveMs: given.keepaliveMs ?? 15_000,
    throttleMs: given.throttleMs ?? 500,
    maxUploadBytes: given.maxUploadBytes ?? DEFAULT_MAX_UPLOAD_BYTES,
    listScanCap: given.listScanCap ?? 500,
  };
  const jsonLimit = options.maxUploadBytes + (1 << 20);
  // The parts only read `reachable`; the faults below change it.
  const upstream: { -readonly [K in keyof V2Upstream]: V2Upstream[K] } = {
    jobs: engine.jobs,
    uploads: engine.generation.uploads,
    url: engine.url,
    reachable: true,
  };
  const assets = new V2Assets(upstream, options.maxUploadBytes);
  const book = new V2JobBook(upstream, assets.outputIds);
  const streams = new V2Streams(upstream, book, options);
  const counters = new V2Counters(streams.counts);
  let lostAnswers = 0;

  const known = (id: string) => book.records.has(id);
  const unreachable = (r: V2Request, message = 'Could not reach ComfyUI.') =>
    sendError(r.res, 503, 'upstream_unreachable', message);

  const submit = async (r: V2Request) => {
    const read = readSubmitBody(await r.body(jsonLimit));
    if (!read.ok) return sendRefusal(r.res, read.refusal);
    const request = read.value;
    const resolved = assets.resolveWorkflow(request.workflow);
    if (resolved.missing.length > 0) {
      return sendError(
        r.res,
        422,
        'missing_asset',
        `Unresolvable core/ASSET reference(s): ${resolved.missing.join(', ')}`,
        { missing_ids: resolved.missing },
      );
    }
    const workflow = resolved.workflow as Record<string, unknown>;
    const keyRead = readIdempotencyKey(r.req.headers['idempotency-key']);
    if (!keyRead.ok) return sendRefusal(r.res, keyRead.refusal);
    const key = keyRead.value;
    if (key !== undefined && !book.claim(key)) {
      return sendError(
        r.res,
        422,
        'idempotency_key_reuse',
        'This Idempotency-Key has already been used. Keys are single-use; poll or list your jobs instead of resubmitting with the same key.',
      );
    }
    // Unknown outcome: ComfyUI may hold the prompt, so the key stays claimed.
    if (!upstream.reachable) return unreachable(r, 'Could not reach ComfyUI to submit the job.');
    const problem = validatePrompt(
      workflow,
      engine.generation.definitions,
      engine.generation.options.serverVersion,
    );
    if (problem) {
      // ComfyUI refused it, so no job exists: the key may be used again.
      if (key !== undefined) book.release(key);
      return sendError(r.res, 422, 'invalid_workflow', problem.error.message, {
        node_errors: problem.node_errors,
      });
    }
    // The job id is ComfyUI's prompt_id and its client_id alike, as the proxy mints it.
    const id = randomUUID();
    engine.jobs.submit(workflow, id, request.extraData, id);
    book.remember({ id, workflow, metadata: request.metadata, priority: request.priority });
    if (lostAnswers > 0) {
      lostAnswers -= 1;
      r.req.socket.destroy();
      return;
    }
    sendPyJson(r.res, 201, book.jobJson(id, { status: 'queued', outputs: [] }, r.base));
  };

  const list = (r: V2Request) => {
    const read = readListQuery(r.url.searchParams);
    if (!read.ok) return sendRefusal(r.res, read.refusal);
    const { limit, statuses } = read.value;
    const records = book.newestFirst();
    const jobs: Array<Record<string, unknown>> = [];
    let scanned = 0;
    for (const record of records) {
      if (jobs.length >= limit || scanned >= options.listScanCap) break;
      scanned += 1;
      if (!upstream.reachable) return unreachable(r);
      const job = book.jobJson(record.id, book.statusOf(record.id, r.base), r.base);
      if (statuses && !statuses.has(job.status as V2Status)) continue;
      jobs.push(job);
    }
    // True when the scan cap stopped the walk before `limit` was met.
    sendPyJson(r.res, 200, { jobs, truncated: jobs.length < limit && scanned < records.length });
  };

  const getJob = (r: V2Request) => {
    if (!isPythonUuid(r.param)) return sendError(r.res, 404, 'not_found', `No job ${r.param}.`);
    if (!upstream.reachable) return unreachable(r);
    const derived = book.statusOf(r.param, r.base);
    if (derived.status === 'unknown' && !known(r.param))
      return sendError(r.res, 404, 'not_found', `No job ${r.param}.`);
    sendPyJson(r.res, 200, book.jobJson(r.param, derived, r.base));
  };

  const getWorkflow = (r: V2Request) => {
    if (!isPythonUuid(r.param)) return sendError(r.res, 404, 'not_found', `No job ${r.param}.`);
    const record = book.records.get(r.param);
    if (!record) return sendError(r.res, 404, 'not_found', `No recoverable workflow for job ${r.param}.`);
    sendPyJson(r.res, 200, { workflow: record.workflow, format: 'api' });
  };

  const cancel = (r: V2Request) => {
    const id = r.param;
    if (!isPythonUuid(id)) return sendError(r.res, 404, 'not_found', `No job ${id}.`);
    if (!known(id)) {
      if (!upstream.reachable) return unreachable(r);
      if (book.statusOf(id, r.base).status === 'unknown')
        return sendError(r.res, 404, 'not_found', `No job ${id}.`);
    }
    if (!upstream.reachable) return unreachable(r, 'Could not reach ComfyUI to cancel.');
    // ComfyUI's one-job cancel: a waiting job leaves the queue (no history: `expired`), a running one is
    // interrupted and stops at its next step.
    const job = engine.jobs.jobs.get(id);
    if (job?.state === 'pending') engine.jobs.remove(id);
    else if (job?.state === 'in_progress') engine.jobs.interrupt(id);
    const derived = book.statusOf(id, r.base);
    sendPyJson(
      r.res,
      200,
      book.jobJson(id, derived, r.base, derived.status === 'running' ? 'canceling' : undefined),
    );
  };

  const events = (r: V2Request) => {
    if (!isPythonUuid(r.param)) return sendError(r.res, 404, 'not_found', `No job ${r.param}.`);
    if (!upstream.reachable) return unreachable(r);
    if (book.statusOf(r.param, r.base).status === 'unknown' && !known(r.param))
      return sendError(r.res, 404, 'not_found', `No job ${r.param}.`);
    streams.serve(r, r.param);
  };

  // In the proxy's registration order: aiohttp answers the first route whose path and method both match.
  const routes: V2Route[] = [];
  const add = (methods: string[], path: string, handler: Handler, ofJob = false) => {
    const pattern = new RegExp(`^${path.replace(/\{[a-z]+\}/g, SEGMENT)}$`);
    for (const method of methods)
      routes.push({ method, path: pattern, name: `${method} ${path}`, handler, ofJob });
  };
  const GET = ['GET', 'HEAD'];
  add(GET, '/api/v2/health', (r) => sendPyJson(r.res, 200, { status: 'healthy', upstream: upstream.url }));
  add(['POST'], '/api/v2/jobs', submit);
  add(GET, '/api/v2/jobs', list);
  add(GET, '/api/v2/jobs/{id}', getJob, true);
  add(GET, '/api/v2/jobs/{id}/workflow', getWorkflow, true);
  add(['POST'], '/api/v2/jobs/{id}/cancel', cancel, true);
  add(GET, '/api/v2/jobs/{id}/events', events, true);
  add(['POST'], '/api/v2/assets', (r) => assets.upload(r));
  add(['POST'], '/api/v2/assets/from-hash', (r) => assets.fromHash(r, jsonLimit));
  add(['POST'], '/api/v2/assets/from-path', (r) => assets.fromPath(r));
  add(['HEAD'], '/api/v2/assets/by-hash/{hash}', (r) => assets.headByHash(r));
  add(GET, '/api/v2/assets/{id}', (r) => assets.get(r));
  add(GET, '/api/v2/assets/{id}/content', (r) => assets.content(r));
  add(['DELETE'], '/api/v2/assets/{id}', (r) => assets.delete(r));

  const tokenBytes = options.token === undefined ? undefined : Buffer.from(options.token, 'utf8');
  /** auth.py: a refusal's message, or undefined when the request may pass. */
  const authRefusal = (req: http.IncomingMessage, path: string): string | undefined => {
    if (!tokenBytes || path === '/api/v2/health' || !path.startsWith('/api/v2/')) return undefined;
    const header = req.headers.authorization ?? '';
    const space = header.indexOf(' ');
    const scheme = space < 0 ? header : header.slice(0, space);
    const presented = space < 0 ? '' : header.slice(space + 1);
    if (scheme.toLowerCase() !== 'bearer' || !presented) return 'Missing or malformed Authorization header.';
    const given = Buffer.from(presented, 'utf8');
    if (given.length !== tokenBytes.length || !timingSafeEqual(given, tokenBytes)) return 'Invalid token.';
    return undefined;
  };

  const dispatch = async (ctx: RequestContext) => {
    const { req, res, url } = ctx;
    const method = req.method ?? 'GET';
    const path = url.pathname;
    const refusedOrigin = originRefusal(req.headers);
    if (refusedOrigin) return sendError(res, 403, 'forbidden_origin', refusedOrigin);
    if (method === 'OPTIONS') return sendEmpty(res, 200);
    let route: V2Route | undefined;
    let param = '';
    const allowed = new Set<string>();
    for (const candidate of routes) {
      const match = candidate.path.exec(path);
      if (!match) continue;
      if (candidate.method !== method) {
        allowed.add(candidate.method);
        continue;
      }
      route = candidate;
      param = match[1] === undefined ? '' : decodeParam(match[1]);
      break;
    }
    counters.record(route?.name ?? 'other', route?.ofJob && known(param) ? param : undefined);
    const refusedAuth = authRefusal(req, path);
    if (refusedAuth) return sendError(res, 401, 'unauthorized', refusedAuth);
    if (!route) {
      if (allowed.size > 0)
        return sendPlain(res, 405, '405: Method Not Allowed', { allow: [...allowed].sort().join(',') });
      return sendPlain(res, 404, '404: Not Found');
    }
    await route.handler({
      req,
      res,
      url,
      param,
      base: `http://${req.headers.host ?? `127.0.0.1:${server.port}`}`,
      body: (limit) => readBody(req, limit),
    });
  };
  // Every path goes through the dispatcher: the origin guard and the 404s are the proxy's too.
  server.plainNotFound = true;
  for (const method of METHODS) server.route(method, /^\//, dispatch);

  const faults: V2Faults = {
    get upstreamReachable() {
      return upstream.reachable;
    },
    set upstreamReachable(reachable: boolean) {
      upstream.reachable = reachable;
      // As measured: a stream whose ComfyUI went away just ends after what it had.
      if (!reachable) streams.closeStreams();
    },
    forgetJob(jobId) {
      const job = engine.jobs.jobs.get(jobId);
      if (!job) return false;
      if (job.state === 'pending') engine.jobs.remove(jobId);
      else {
        if (job.state === 'in_progress') engine.jobs.interrupt(jobId);
        engine.jobs.jobs.delete(jobId);
      }
      return true;
    },
    closeStreams: (jobId) => streams.closeStreams(jobId),
    endStreamsStale: (count = 1) => streams.endStale(count),
    loseSubmitAnswers(count = 1) {
      lostAnswers += count;
    },
    clear() {
      upstream.reachable = true;
      lostAnswers = 0;
      streams.clearFaults();
    },
  };

  return {
    options,
    faults,
    counters,
    jobs: book.records,
    get assets() {
      return assets.records;
    },
    close() {
      streams.close();
      book.close();
    },
  };
}

/** A request's whole body, or undefined past `limit` bytes (the rest is read and dropped). */
function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) chunks.length = 0;
      else chunks.push(chunk);
    });
    req.on('end', () => resolve(size > limit ? undefined : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
