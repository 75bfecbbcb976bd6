/**
 * Asking the service about a job over REST, on whichever routes it has: `/api/job/{id}/status` (the spec),
 * `/api/jobs/{id}`, `/api/history_v2/{id}` and `/api/history/{id}` (self-hosted servers), and the queue
 * (`/api/jobs?status=pending,in_progress` where the server lists its active jobs, else `/api/queue`) to tell a
 * job that waits from one the service has forgotten, and to answer for many jobs at once. One JobLookup per
 * config node remembers the routes its server lacks, so a check costs one request, not three. Words are mapped
 * by status-words.
 */
import type { HttpClient } from '../../http/client';
import { ServiceError } from '../../http/errors';
import { setOwn, type JobOutputs } from './job-outputs';
import { promptIdsOf } from '../transfer/rest-client';
import { phaseOfStatus, isTerminal, type JobPhase } from './status-words';

export interface ExecutionError {
  exception_type: string;
  exception_message: string;
  traceback: string[];
}

export interface StatusAnswer {
  /** `unknown`: the service answered, and none of its routes knows the job (deleted, or a restart). */
  phase: JobPhase | 'unknown';
  /** The word the service used, for messages. */
  word?: string;
  error?: ExecutionError;
  /** The outputs, when the route that answered carries them (`/api/jobs/{id}` of an ended job). */
  outputs?: JobOutputs;
}

export type StatusRoute = 'status' | 'jobs' | 'history_v2' | 'history' | 'queue' | 'jobs_list';

/** The jobs a queue read found waiting and running. */
export interface QueueIds {
  running: Set<string>;
  pending: Set<string>;
}

/** Where a queue read puts the job: `running`, `pending`, or undefined when it does not list it. */
export function phaseInQueue(ids: QueueIds | undefined, promptId: string): 'running' | 'pending' | undefined {
  if (ids?.running.has(promptId)) return 'running';
  if (ids?.pending.has(promptId)) return 'pending';
  return undefined;
}

/** The list of waiting and running jobs, as self-hosted servers serve it since ComfyUI 0.8. */
const ACTIVE_JOBS_PATH = '/api/jobs?status=pending,in_progress';
const ACTIVE_STATUSES: Record<string, keyof QueueIds> = { pending: 'pending', in_progress: 'running' };

/**
 * The ids in a `/api/jobs` list answer (`{jobs: [{id, status, ...}], pagination: {has_more, ...}}`) when it
 * is the whole list of waiting and running jobs; undefined for anything else. A page of a longer list, or a
 * list holding other statuses (a server that ignored the filter), would make the jobs it leaves out look
 * forgotten.
 */
function activeIdsOf(body: unknown): QueueIds | undefined {
  if (!isRecord(body) || !Array.isArray(body.jobs) || !isRecord(body.pagination)) return undefined;
  if (body.pagination.has_more !== false) return undefined;
  const ids: QueueIds = { running: new Set(), pending: new Set() };
  for (const job of body.jobs) {
    if (!isRecord(job) || typeof job.id !== 'string' || job.id === '' || typeof job.status !== 'string')
      return undefined;
    const list = Object.hasOwn(ACTIVE_STATUSES, job.status) ? ACTIVE_STATUSES[job.status] : undefined;
    if (!list) return undefined;
    ids[list].add(job.id);
  }
  return ids;
}

/** The error fields of an `execution_error` event (or of a body that carries one). */
export function executionError(data: unknown): ExecutionError {
  const record = (data && typeof data === 'object' ? data : {}) as Record<string, unknown>;
  const traceback = record.traceback;
  return {
    exception_type: typeof record.exception_type === 'string' ? record.exception_type : 'unknown',
    exception_message: typeof record.exception_message === 'string' ? record.exception_message : '',
    traceback: Array.isArray(traceback)
      ? traceback.map(String)
      : typeof traceback === 'string'
        ? [traceback]
        : [],
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return !!value && typeof value === 'object' && !Array.isArray(value);
}

/** An own property only: a prompt id of `__proto__` must not read Object.prototype. */
function own(record: Record<string, unknown>, key: string): unknown {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/**
 * What an execution's messages (`[[event, data], ...]`, as history's `status.messages` and `/api/jobs`'
 * `execution_status.messages` hold them) say: an `execution_interrupted` makes a job cancelled whatever its
 * status word (self-hosted servers call an interrupted job `failed`), an `execution_error` gives the error.
 */
function readMessages(messages: unknown, answer: StatusAnswer): StatusAnswer {
  if (!Array.isArray(messages)) return answer;
  for (const message of messages) {
    if (!Array.isArray(message)) continue;
    if (message[0] === 'execution_error') answer.error = executionError(message[1]);
    if (message[0] === 'execution_interrupted') answer.phase = 'cancelled';
  }
  if (answer.phase === 'cancelled') answer.error = undefined;
  return answer;
}

function errorFromBody(body: Record<string, unknown>): ExecutionError | undefined {
  const candidate = body.execution_error ?? body.error;
  if (isRecord(candidate)) return executionError(candidate);
  if (typeof candidate === 'string')
    return { exception_type: 'unknown', exception_message: candidate, traceback: [] };
  return undefined;
}

/** Keeps only objects keyed by node id whose values are objects: what `outputs` must look like. */
function asOutputs(value: unknown): JobOutputs | undefined {
  if (!isRecord(value)) return undefined;
  const outputs: JobOutputs = {};
  for (const [nodeId, output] of Object.entries(value)) {
    if (isRecord(output)) setOwn(outputs, nodeId, output);
  }
  return outputs;
}

/** A `/api/jobs/{id}` body: `{id, status, execution_error?, execution_status?, outputs?}`. */
function fromJobsBody(body: Record<string, unknown>): StatusAnswer {
  const word = String(body.status);
  const answer: StatusAnswer = { phase: phaseOfStatus(word), word };
  if (answer.phase === 'failed') answer.error = errorFromBody(body);
  const status = isRecord(body.execution_status) ? body.execution_status : undefined;
  readMessages(status?.messages, answer);
  if (isTerminal(answer.phase as JobPhase) && 'outputs' in body) answer.outputs = asOutputs(body.outputs);
  return answer;
}

/** The entry of a history-style body: `{<id>: entry}`, the entry itself, or `{history: [...]}`. */
function historyEntry(body: unknown, promptId: string): Record<string, unknown> | undefined {
  if (!isRecord(body)) return undefined;
  const keyed = own(body, promptId);
  if (isRecord(keyed)) return keyed;
  if ('outputs' in body && 'status' in body) return body;
  if (Array.isArray(body.history)) {
    return (body.history as unknown[]).find(
      (item): item is Record<string, unknown> =>
        isRecord(item) && (item.prompt_id === promptId || item.id === promptId),
    );
  }
  return undefined;
}

/** A history entry `{status: {status_str, completed, messages}, outputs}`. */
function fromHistoryEntry(entry: Record<string, unknown>): StatusAnswer {
  const status = isRecord(entry.status) ? entry.status : {};
  const word = typeof status.status_str === 'string' ? status.status_str : 'completed';
  const answer = readMessages(status.messages, { phase: phaseOfStatus(word), word });
  if (isTerminal(answer.phase as JobPhase) && 'outputs' in entry) answer.outputs = asOutputs(entry.outputs);
  return answer;
}

type RouteAnswer =
  | { kind: 'absent' }
  /** The route answered 404 with a JSON body: it does not know the job (or the server lacks it). */
  | { kind: 'missing' }
  | { kind: 'body'; body: unknown };

export class JobLookup {
  private readonly absent = new Set<StatusRoute>();

  /** `listBytes`: the largest queue answer read (`/api/queue` lists every job with its whole workflow). */
  constructor(
    private readonly http: HttpClient,
    private readonly listBytes = 64 * 1024 * 1024,
  ) {}

  /** The routes this server was found to lack. */
  get absentRoutes(): StatusRoute[] {
    return [...this.absent];
  }

  /**
   * Where the job stands. `unknown` when the service answered and no route knows the job; undefined when
   * the service has none of the routes. Network and service failures are raised.
   */
  async status(promptId: string, signal?: AbortSignal): Promise<StatusAnswer | undefined> {
    const id = encodeURIComponent(promptId);
    const missing: StatusRoute[] = [];
    const knew = (answer: StatusAnswer): StatusAnswer => {
      // A route that answered 404 for a job a later route knows is a route this server lacks.
      for (const route of missing) this.absent.add(route);
      return answer;
    };
    const spec = await this.get('status', `/api/job/${id}/status`, signal);
    if (spec.kind === 'body' && isRecord(spec.body) && 'status' in spec.body) {
      const word = String(spec.body.status);
      return { phase: phaseOfStatus(word), word };
    }
    if (spec.kind === 'missing') missing.push('status');

    const jobs = await this.get('jobs', `/api/jobs/${id}`, signal);
    if (jobs.kind === 'body' && isRecord(jobs.body) && 'status' in jobs.body)
      return knew(fromJobsBody(jobs.body));
    if (jobs.kind === 'missing') missing.push('jobs');

    const history = await this.get('history', `/api/history/${id}`, signal);
    const entry = history.kind === 'body' ? historyEntry(history.body, promptId) : undefined;
    if (entry) return knew(fromHistoryEntry(entry));

    if (spec.kind === 'absent' && jobs.kind === 'absent' && history.kind === 'absent') return undefined;
    // History lists ended jobs only: the queue tells a waiting or running job from a forgotten one.
    const queued = phaseInQueue(await this.queueIds(signal), promptId);
    if (queued) return { phase: queued, word: queued };
    return { phase: 'unknown' };
  }

  /**
   * The jobs waiting and running, for every job of this config node in one request: from the list of
   * active jobs where the server has it (entries of about 120 bytes), else from `/api/queue` (each entry
   * with its whole workflow, tens of kilobytes on a real one). Undefined when neither route is there.
   */
  async queueIds(signal?: AbortSignal): Promise<QueueIds | undefined> {
    const listed = await this.activeJobs(signal);
    if (listed) return listed;
    const queue = await this.get('queue', '/api/queue', signal, this.listBytes);
    if (queue.kind !== 'body' || !isRecord(queue.body)) return undefined;
    // Any other answer is not an empty queue: it would make every awaited job look forgotten.
    const { queue_running: running, queue_pending: pending } = queue.body;
    if (!Array.isArray(running) && !Array.isArray(pending)) return undefined;
    return {
      running: new Set(promptIdsOf(running)),
      pending: new Set(promptIdsOf(pending)),
    };
  }

  /**
   * `GET /api/jobs?status=pending,in_progress`. A server without that list (older self-hosted servers, the
   * cloud services we know), one that refuses the filter, or one that answers with a page or another shape
   * is remembered, and its queue is read from then on. A failed request falls back for this read only.
   */
  private async activeJobs(signal?: AbortSignal): Promise<QueueIds | undefined> {
    if (this.absent.has('jobs_list')) return undefined;
    let answer: { status: number; body: unknown };
    try {
      answer = await this.http.json<unknown>(ACTIVE_JOBS_PATH, {
        acceptStatus: [400, 404, 405],
        signal,
        action: 'listing the queue',
        maxBytes: this.listBytes,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      return undefined;
    }
    const ids = answer.status < 300 ? activeIdsOf(answer.body) : undefined;
    if (!ids) this.absent.add('jobs_list');
    return ids;
  }

  /** The execution error of a failed job, where the service tells it; undefined otherwise. */
  async executionError(promptId: string, signal?: AbortSignal): Promise<ExecutionError | undefined> {
    const id = encodeURIComponent(promptId);
    try {
      const jobs = await this.get('jobs', `/api/jobs/${id}`, signal);
      if (jobs.kind === 'body' && isRecord(jobs.body)) return fromJobsBody(jobs.body).error;
      const history = await this.get('history', `/api/history/${id}`, signal);
      const entry = history.kind === 'body' ? historyEntry(history.body, promptId) : undefined;
      return entry ? fromHistoryEntry(entry).error : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The outputs of an ended job from whichever route the server has: `/api/jobs/{id}`, then
   * `/api/history_v2/{id}`, then `/api/history/{id}`. Undefined when none of them has them.
   */
  async outputs(
    promptId: string,
    signal?: AbortSignal,
    log: (message: string) => void = () => undefined,
  ): Promise<JobOutputs | undefined> {
    const id = encodeURIComponent(promptId);
    const sources: Array<[StatusRoute, string]> = [
      ['jobs', `/api/jobs/${id}`],
      ['history_v2', `/api/history_v2/${id}`],
      ['history', `/api/history/${id}`],
    ];
    for (const [route, path] of sources) {
      try {
        const answer = await this.get(route, path, signal);
        if (answer.kind !== 'body') continue;
        const outputs =
          route === 'jobs'
            ? isRecord(answer.body)
              ? asOutputs(answer.body.outputs)
              : undefined
            : (() => {
                const entry = historyEntry(answer.body, promptId);
                return entry ? asOutputs(entry.outputs) : undefined;
              })();
        if (outputs) return outputs;
      } catch (error) {
        if (signal?.aborted) return undefined;
        log(`reading outputs of ${promptId} failed: ${this.http.cleanForReport(String(error))}`);
      }
    }
    return undefined;
  }

  /**
   * One route: `absent` when the server lacks it (a 405, or a 404 that is not JSON: a framework's page for
   * a route it does not have), remembered for the next check; `missing` for a JSON 404 (the job is not
   * known there); otherwise the body.
   */
  private async get(
    route: StatusRoute,
    path: string,
    signal?: AbortSignal,
    maxBytes?: number,
  ): Promise<RouteAnswer> {
    if (this.absent.has(route)) return { kind: 'absent' };
    const answer = await this.http.json<unknown>(path, {
      acceptStatus: [404, 405],
      signal,
      maxBytes,
      action: route === 'queue' ? 'listing the queue' : 'checking the status of a job',
    });
    if (answer.status === 405 || (answer.status === 404 && !answer.json)) {
      this.absent.add(route);
      return { kind: 'absent' };
    }
    if (answer.status === 404) return { kind: 'missing' };
    if (answer.status >= 300) {
      throw new ServiceError('server_error', `the generation service answered HTTP ${answer.status}`, {
        status: answer.status,
      });
    }
    return { kind: 'body', body: answer.body };
  }
}
