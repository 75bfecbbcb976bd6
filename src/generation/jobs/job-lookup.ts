/**
 * Asking the service about jobs over REST, on whichever routes it has. Lookups only answer; they never decide
 * how a job ends (job-life.ts does). Every answer says what it knows:
 *
 * | answer       | means                                                                                  |
 * |--------------|----------------------------------------------------------------------------------------|
 * | `phase`      | the service placed the job: pending, running, or an end (with outputs/error if given)  |
 * | `unknown`    | the service answered, and none of its routes knows the job (deleted, or a restart)     |
 * | `unreadable` | nothing can be said: a request failed, was refused (401/403), rate-limited (429), or  |
 * |              | the server has no route that could tell                                                |
 *
 * "Could not read" is never "absent": `unknown` needs a definite answer from every route asked, and a queue that
 * was read. Routes: `/api/jobs/{id}`, `/api/job/{id}/status` (the spec, deprecated on cloud), `/api/history_v2/{id}` and
 * `/api/history/{id}` (self-hosted servers), and the queue (`/api/jobs?status=pending,in_progress` where the
 * server lists its active jobs, else `/api/queue`) to tell a job that waits from one the service has forgotten,
 * and to answer for many jobs at once. One JobLookup per config node remembers the routes its server lacks, so a
 * check costs one request, not three. Words are mapped by status-words. Every answer is read as untrusted: a
 * status that is not text is "could not read" (never a phase), text is taken only through `textOf`, ids only
 * through job-ids. Past 400 lines: every route's answer
 * shape, read in one place.
 */
import type { HttpClient } from '../../http/client';
import { ServiceError } from '../../http/errors';
import type { JobOutputs } from './job-outputs';
import { phaseOfStatus, isTerminal, type JobPhase } from './status-words';
import { isRecord } from '../../boundary/json-values';
import { errorText, ownValue, setOwn, textOf } from '../../boundary/outside';
import { dropOne, readJobId, readQueueEntryId, type Dropped } from './job-ids';

export interface ExecutionError {
  exception_type: string;
  exception_message: string;
  traceback: string[];
}

/**
 * Why nothing can be said. `refused`: 401/403; `rate_limited`: 429 (wait `retryAfterMs`); `unlisted`: the shared
 * read was a page that does not name the job (a v2 list of 100 active jobs): the next poll asks again, no request
 * of its own meanwhile.
 */
export interface Unreadable {
  kind: 'unreadable';
  reason: 'failed' | 'refused' | 'rate_limited' | 'no_route' | 'unlisted';
  /** A sentence for logs and, for `refused`, for the user (no secret in it). */
  message: string;
  status?: number;
  retryAfterMs?: number;
}

export type LookupAnswer =
  | {
      kind: 'phase';
      phase: JobPhase;
      /** The word the service used, for messages. */
      word?: string;
      error?: ExecutionError;
      /** The outputs, when the route that answered carries them (`/api/jobs/{id}` of an ended job). */
      outputs?: JobOutputs;
      /**
       * The `client_id` the job was submitted with, where the route names it (self-hosted servers: an ended
       * job's `/api/jobs/{id}` `workflow.extra_data`, history's `prompt[3]`; not for waiting or running jobs).
       */
      clientId?: string;
    }
  | { kind: 'unknown' }
  | Unreadable;

/**
 * The jobs a queue read found waiting and running, and for each waiting job how many jobs are ahead of it (the
 * running ones, then the waiting ones the server runs first: lower queue numbers); or why it could not be read.
 * `dropped`: entries whose id is not a job id (job-ids.ts), left out.
 */
export type QueueRead =
  | {
      kind: 'read';
      running: Set<string>;
      pending: Set<string>;
      ahead: Map<string, number>;
      dropped?: Dropped;
      /** Jobs the read found ended, with their answers (a v2 list carries ended jobs, outputs and all). */
      ended?: Map<string, LookupAnswer>;
      /** It lists only a page of the jobs (a v2 list holds 100): a job it does not name may still wait or run. */
      partial?: true;
    }
  | Unreadable;

/** A waiting job's place: its id and its queue number (ComfyUI's `priority`, the first item of a queue entry). */
interface Waiting {
  id: string;
  number: number;
}

/** The read, with each waiting job's count of jobs ahead of it (the running ones, then lower numbers). */
function readOf(running: Set<string>, waiting: Waiting[], dropped: Dropped | undefined): QueueRead {
  const ordered = [...waiting].sort((a, b) => a.number - b.number);
  const ahead = new Map<string, number>();
  ordered.forEach((job, index) => ahead.set(job.id, running.size + index));
  const read: QueueRead = { kind: 'read', running, pending: new Set(waiting.map((job) => job.id)), ahead };
  if (dropped) read.dropped = dropped;
  return read;
}

/** A queue entry's number (`[number, id, ...]`, or `{number}` / `{priority}`); its order in the list otherwise. */
function numberOf(element: unknown, index: number): number {
  const value = Array.isArray(element)
    ? element[0]
    : isRecord(element)
      ? (ownValue(element, 'number') ?? ownValue(element, 'priority'))
      : undefined;
  return typeof value === 'number' && Number.isFinite(value) ? value : index;
}

/** What an ended job's routes hold: its outputs and error, none (no route has the job), or unreadable. */
export type EndedAnswer =
  { kind: 'found'; outputs?: JobOutputs; error?: ExecutionError } | { kind: 'none' } | Unreadable;

export type StatusRoute = 'status' | 'jobs' | 'history_v2' | 'history' | 'queue' | 'jobs_list';

/** Where a queue read puts the job; undefined when the queue could not be read, or the read is a page without it. */
export function phaseInQueue(
  read: QueueRead,
  promptId: string,
): 'running' | 'pending' | 'absent' | undefined {
  if (read.kind !== 'read') return undefined;
  if (read.running.has(promptId)) return 'running';
  if (read.pending.has(promptId)) return 'pending';
  return read.partial ? undefined : 'absent';
}

export interface JobLookupOptions {
  /** The largest queue answer read (`/api/queue` lists every job with its whole workflow). */
  listBytes?: number;
  /** After an answer of the list of active jobs that cannot be trusted, the queue is read this long. */
  listRetryMs?: number;
}

/** The list of waiting and running jobs, as self-hosted servers serve it since ComfyUI 0.8. */
const ACTIVE_JOBS_PATH = '/api/jobs?status=pending,in_progress';
const ACTIVE_STATUSES = new Map<string, 'pending' | 'running'>([
  ['pending', 'pending'],
  ['in_progress', 'running'],
]);
/** The latest ended jobs, whose run times estimate a waiting job's wait. */
const RECENT_JOBS_PATH = '/api/jobs?status=completed&limit=20';

/**
 * The ids in a `/api/jobs` list answer (`{jobs: [{id, status, ...}], pagination: {has_more, ...}}`) when it is
 * the whole list of waiting and running jobs; undefined for anything else. A page of a longer list, or a list
 * holding other statuses (a server that ignored the filter), would make the jobs it leaves out look forgotten.
 * An entry whose id is no job id is left out (`dropped`): it names no job anyone could await.
 */
function activeIdsOf(body: unknown): QueueRead | undefined {
  if (!isRecord(body) || !Array.isArray(body.jobs) || !isRecord(body.pagination)) return undefined;
  if (body.pagination.has_more !== false) return undefined;
  const running = new Set<string>();
  const waiting: Waiting[] = [];
  let dropped: Dropped | undefined;
  for (const [index, job] of body.jobs.entries()) {
    if (!isRecord(job) || typeof job.status !== 'string') return undefined;
    const list = ACTIVE_STATUSES.get(job.status);
    if (!list) return undefined;
    const id = readJobId(job.id);
    if (!id.ok) dropped = dropOne(dropped, id.reason);
    else if (list === 'running') running.add(id.value);
    else waiting.push({ id: id.value, number: numberOf(job, -index) });
  }
  return readOf(running, waiting, dropped);
}

/** Lines of a traceback kept (a real one has tens); the rest are cut. */
const MAX_TRACEBACK_LINES = 200;
/** Characters of an exception's type kept. */
const MAX_EXCEPTION_TYPE = 200;

/**
 * The error fields of an `execution_error` event (or of a body that carries one). Only text is kept, bounded:
 * a traceback line that is not text (`{"toString": 1}`) is left out, never turned into text by its own means.
 */
export function executionError(data: unknown): ExecutionError {
  const record = isRecord(data) ? data : {};
  const traceback = ownValue(record, 'traceback');
  const lines: string[] = [];
  if (Array.isArray(traceback)) {
    for (const line of traceback.slice(0, MAX_TRACEBACK_LINES)) {
      const text = textOf(line);
      if (text !== undefined) lines.push(text);
    }
  } else {
    const text = typeof traceback === 'string' ? textOf(traceback) : undefined;
    if (text !== undefined) lines.push(text);
  }
  const type = ownValue(record, 'exception_type');
  const message = ownValue(record, 'exception_message');
  return {
    exception_type: (typeof type === 'string' && textOf(type, MAX_EXCEPTION_TYPE)) || 'unknown',
    exception_message: (typeof message === 'string' && textOf(message)) || '',
    traceback: lines,
  };
}

/**
 * What an execution's messages (`[[event, data], ...]`, as history's `status.messages` and `/api/jobs`'
 * `execution_status.messages` hold them) say: an `execution_interrupted` makes a job cancelled whatever its
 * status word (self-hosted servers before 0.9 call an interrupted job `failed`), an `execution_error` gives
 * the error.
 */
function readMessages(messages: unknown, phase: JobPhase): { phase: JobPhase; error?: ExecutionError } {
  let error: ExecutionError | undefined;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (!Array.isArray(message)) continue;
      if (message[0] === 'execution_error') error = executionError(message[1]);
      if (message[0] === 'execution_interrupted') phase = 'cancelled';
    }
  }
  return phase === 'cancelled' ? { phase } : { phase, error };
}

function errorFromBody(body: Record<string, unknown>): ExecutionError | undefined {
  const candidate = ownValue(body, 'execution_error') ?? ownValue(body, 'error');
  if (isRecord(candidate)) return executionError(candidate);
  if (typeof candidate === 'string')
    return { exception_type: 'unknown', exception_message: textOf(candidate) ?? '', traceback: [] };
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

type PhaseAnswer = Extract<LookupAnswer, { kind: 'phase' }>;

/** Characters of a status word kept for messages. */
const MAX_WORD = 100;

/** A status that is not text: nothing can be said from it (an unknown word is a phase; this is no word). */
function statusNotAWord(route: string): Unreadable {
  return {
    kind: 'unreadable',
    reason: 'failed',
    message: `the service answered ${route} with a status that is not a word`,
  };
}

/** The `client_id` of a submit's `extra_data`, when it is a plausible one (ids are compared, never shown). */
export function clientIdOf(extraData: unknown): string | undefined {
  const id = isRecord(extraData) ? extraData.client_id : undefined;
  return typeof id === 'string' && id.length > 0 && id.length <= 256 ? id : undefined;
}

/** A `/api/jobs/{id}` body: `{id, status, execution_error?, execution_status?, outputs?}`. */
function fromJobsBody(body: Record<string, unknown>): PhaseAnswer | Unreadable {
  const word = typeof body.status === 'string' ? textOf(body.status, MAX_WORD) : undefined;
  if (word === undefined) return statusNotAWord('/api/jobs/{id}');
  const status = isRecord(body.execution_status) ? body.execution_status : undefined;
  const read = readMessages(status?.messages, phaseOfStatus(word));
  const answer: PhaseAnswer = { kind: 'phase', phase: read.phase, word };
  if (answer.phase === 'failed') answer.error = errorFromBody(body) ?? read.error;
  if (isTerminal(answer.phase) && Object.hasOwn(body, 'outputs')) answer.outputs = asOutputs(body.outputs);
  const clientId = clientIdOf(isRecord(body.workflow) ? body.workflow.extra_data : undefined);
  if (clientId) answer.clientId = clientId;
  return answer;
}

/** The entry of a history-style body: `{<id>: entry}`, the entry itself, or `{history: [...]}`. */
function historyEntry(body: unknown, promptId: string): Record<string, unknown> | undefined {
  if (!isRecord(body)) return undefined;
  const keyed = ownValue(body, promptId);
  if (isRecord(keyed)) return keyed;
  if (Object.hasOwn(body, 'outputs') && Object.hasOwn(body, 'status')) return body;
  if (Array.isArray(body.history)) {
    return (body.history as unknown[]).find(
      (item): item is Record<string, unknown> =>
        isRecord(item) && (item.prompt_id === promptId || item.id === promptId),
    );
  }
  return undefined;
}

/**
 * A history entry `{status: {status_str, completed, messages}, outputs}`. An entry whose status is missing or
 * null is a completed job (ComfyUI records none when a run gave none); a status that is not a record with a
 * `status_str` word is no word at all: "could not read", never "completed".
 */
function fromHistoryEntry(entry: Record<string, unknown>): PhaseAnswer | Unreadable {
  const given = ownValue(entry, 'status') ?? null;
  if (given !== null && !isRecord(given)) return statusNotAWord('/api/history/{id}');
  const status = given ?? {};
  const statusStr = given === null ? 'completed' : ownValue(given, 'status_str');
  const word = typeof statusStr === 'string' ? textOf(statusStr, MAX_WORD) : undefined;
  if (word === undefined) return statusNotAWord('/api/history/{id}');
  const read = readMessages(status.messages, phaseOfStatus(word));
  const answer: PhaseAnswer = { kind: 'phase', phase: read.phase, word, error: read.error };
  if (isTerminal(answer.phase) && Object.hasOwn(entry, 'outputs')) answer.outputs = asOutputs(entry.outputs);
  const clientId = clientIdOf(Array.isArray(entry.prompt) ? (entry.prompt as unknown[])[3] : undefined);
  if (clientId) answer.clientId = clientId;
  return answer;
}

type RouteAnswer =
  | { kind: 'absent' }
  /** The route answered 404 with a JSON body: it does not know the job (or the server lacks it). */
  | { kind: 'missing' }
  | { kind: 'body'; body: unknown }
  | Unreadable;

/**
 * Whether an answer says the server lacks the route: a 405, or a 404 whose body is not JSON (a self-hosted
 * server's framework page `404: Not Found`; a route that exists answers its own 404 in JSON).
 */
export function lacksRoute(answer: { status: number; json: boolean }): boolean {
  return answer.status === 405 || (answer.status === 404 && !answer.json);
}

/** A failed request as an answer: refused, rate limited, or failed. */
export function unreadableOf(error: unknown): Unreadable {
  const message = errorText(error);
  if (error instanceof ServiceError) {
    const status = error.cause.status;
    if (error.code === 'unauthorized') return { kind: 'unreadable', reason: 'refused', message, status };
    if (error.code === 'rate_limited') {
      const retryAfterMs = (error as ServiceError & { retryAfterMs?: number }).retryAfterMs;
      return { kind: 'unreadable', reason: 'rate_limited', message, status, retryAfterMs };
    }
    return { kind: 'unreadable', reason: 'failed', message, status };
  }
  return { kind: 'unreadable', reason: 'failed', message };
}

/** The time from a start to an end when both are numbers (never a value's own conversion); NaN otherwise. */
function millisecondsBetween(start: unknown, end: unknown): number {
  return typeof start === 'number' && typeof end === 'number' ? end - start : NaN;
}

const NO_STATUS_ROUTE: Unreadable = {
  kind: 'unreadable',
  reason: 'no_route',
  message: 'the service has none of the routes that tell a job’s status',
};

export class JobLookup {
  private readonly absent = new Set<StatusRoute>();
  /** Until when the list of active jobs is not asked (after an answer that could not be trusted). */
  private listOffUntil = 0;
  private readonly listBytes: number;
  private readonly listRetryMs: number;

  constructor(
    private readonly http: HttpClient,
    options: JobLookupOptions = {},
  ) {
    this.listBytes = options.listBytes ?? 64 * 1024 * 1024;
    this.listRetryMs = options.listRetryMs ?? 5 * 60_000;
  }

  /** The routes this server was found to lack. */
  get absentRoutes(): StatusRoute[] {
    return [...this.absent];
  }

  /**
   * Where the job stands. Never rejects, but with the signal's reason when it aborts. `queue` gives the queue
   * read to use (a tracker shares one among many jobs); by default the queue is read here.
   */
  async status(
    promptId: string,
    signal?: AbortSignal,
    queue: () => Promise<QueueRead> = () => this.queue(signal),
  ): Promise<LookupAnswer> {
    const id = encodeURIComponent(promptId);
    const missing: StatusRoute[] = [];
    let trouble: Unreadable | undefined;
    const knew = (answer: PhaseAnswer): PhaseAnswer => {
      // A route that answered 404 for a job a later route knows is a route this server lacks.
      for (const route of missing) this.absent.add(route);
      return answer;
    };
    // `/api/jobs/{id}` first: it carries the outputs too, and cloud deprecates `/api/job/{id}/status` (comfy-cli
    // moved off it); the spec's route stays for a server that has only it.
    const jobs = await this.get('jobs', `/api/jobs/${id}`, signal);
    if (jobs.kind === 'body' && isRecord(jobs.body) && Object.hasOwn(jobs.body, 'status')) {
      const answer = fromJobsBody(jobs.body);
      if (answer.kind === 'phase') return knew(answer);
      trouble = answer;
    }
    if (jobs.kind === 'unreadable') {
      if (jobs.reason === 'refused') return jobs;
      trouble = jobs;
    }
    if (jobs.kind === 'missing') missing.push('jobs');

    const spec = await this.get('status', `/api/job/${id}/status`, signal);
    if (spec.kind === 'body' && isRecord(spec.body) && Object.hasOwn(spec.body, 'status')) {
      const given = spec.body.status;
      const word = typeof given === 'string' ? textOf(given, MAX_WORD) : undefined;
      if (word !== undefined) return knew({ kind: 'phase', phase: phaseOfStatus(word), word });
      // No word: another route may know the job; if none does, this could not be read.
      trouble ??= statusNotAWord('/api/job/{id}/status');
    }
    if (spec.kind === 'unreadable') {
      // Every route takes the same key: a refused one speaks for all.
      if (spec.reason === 'refused') return spec;
      trouble ??= spec;
    }
    if (spec.kind === 'missing') missing.push('status');

    const history = await this.get('history', `/api/history/${id}`, signal);
    const entry = history.kind === 'body' ? historyEntry(history.body, promptId) : undefined;
    const fromHistory = entry ? fromHistoryEntry(entry) : undefined;
    if (fromHistory?.kind === 'phase') return knew(fromHistory);
    trouble ??= fromHistory;
    if (history.kind === 'unreadable') return history.reason === 'refused' ? history : (trouble ?? history);
    // A route that could not be read might have known the job: nothing can be concluded from the others.
    if (trouble) return trouble;
    if (spec.kind === 'absent' && jobs.kind === 'absent' && history.kind === 'absent') return NO_STATUS_ROUTE;
    // History lists ended jobs only: the queue tells a waiting or running job from a forgotten one.
    const read = await queue();
    const queued = phaseInQueue(read, promptId);
    if (queued === undefined) return read as Unreadable;
    if (queued !== 'absent') return { kind: 'phase', phase: queued, word: queued };
    return { kind: 'unknown' };
  }

  /**
   * The jobs waiting and running, for every job of this config node in one request: from the list of active
   * jobs where the server has it (entries of about 120 bytes), else from `/api/queue` (each entry with its
   * whole workflow, tens of kilobytes on a real one). Unreadable when neither can be read: a queue that failed,
   * is larger than the limit, or is missing is never an empty queue.
   */
  async queue(signal?: AbortSignal): Promise<QueueRead> {
    const listed = await this.activeJobs(signal);
    if (listed && (listed.kind === 'read' || listed.reason === 'refused')) return listed;
    const queue = await this.get('queue', '/api/queue', signal, this.listBytes);
    if (queue.kind === 'unreadable') return queue;
    if (queue.kind !== 'body' || !isRecord(queue.body))
      return {
        kind: 'unreadable',
        reason: queue.kind === 'absent' ? 'no_route' : 'failed',
        message: 'the service has no queue to read',
      };
    // Any other answer is not an empty queue: it would make every awaited job look forgotten.
    const { queue_running: running, queue_pending: pending } = queue.body;
    if (!Array.isArray(running) && !Array.isArray(pending))
      return { kind: 'unreadable', reason: 'failed', message: 'the queue answer has no queue in it' };
    let dropped: Dropped | undefined;
    const waiting: Waiting[] = [];
    const runningIds = new Set<string>();
    for (const [list, into] of [
      [pending, 'pending'],
      [running, 'running'],
    ] as const) {
      if (!Array.isArray(list)) continue;
      for (const [index, element] of list.entries()) {
        const id = readQueueEntryId(element);
        if (!id.ok) dropped = dropOne(dropped, id.reason);
        else if (into === 'running') runningIds.add(id.value);
        else waiting.push({ id: id.value, number: numberOf(element, index) });
      }
    }
    return readOf(runningIds, waiting, dropped);
  }

  /**
   * How long a job runs here, by the median of the latest ended jobs' run times in the server's list
   * (`execution_start_time` to `execution_end_time`, ComfyUI 0.8 and later); undefined where the server gives no
   * list or no times. For an estimate of a waiting job's wait.
   */
  async runTimeMs(signal?: AbortSignal): Promise<number | undefined> {
    if (this.absent.has('jobs_list')) return undefined;
    let answer: { status: number; body: unknown };
    try {
      answer = await this.http.json<unknown>(RECENT_JOBS_PATH, {
        acceptStatus: [400, 404, 405],
        signal,
        action: 'reading recent run times',
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      return undefined;
    }
    const jobs = answer.status < 300 && isRecord(answer.body) ? answer.body.jobs : undefined;
    if (!Array.isArray(jobs)) return undefined;
    const times = jobs
      .map((job) =>
        isRecord(job) ? millisecondsBetween(job.execution_start_time, job.execution_end_time) : NaN,
      )
      .filter((ms) => Number.isFinite(ms) && ms >= 0)
      .sort((a, b) => a - b);
    return times.length > 0 ? times[Math.floor(times.length / 2)] : undefined;
  }

  /**
   * `GET /api/jobs?status=pending,in_progress`, or undefined when it is not to be asked. A server without the
   * list (older self-hosted servers, the cloud services we know: a 405 or a framework's 404 page) is remembered
   * for good. An answer that cannot be trusted (a 400 for the filter, a page, other statuses, another shape)
   * makes the queue be read for `listRetryMs`, then the list is asked again: one odd answer does not decide for
   * the connection's life. A failed request falls back for this read only.
   */
  private async activeJobs(signal?: AbortSignal): Promise<QueueRead | undefined> {
    if (this.absent.has('jobs_list') || Date.now() < this.listOffUntil) return undefined;
    let answer: { status: number; body: unknown; json: boolean };
    try {
      answer = await this.http.json<unknown>(ACTIVE_JOBS_PATH, {
        acceptStatus: [400, 404, 405],
        signal,
        action: 'listing the queue',
        maxBytes: this.listBytes,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      return unreadableOf(error);
    }
    if (lacksRoute(answer)) {
      this.absent.add('jobs_list');
      return undefined;
    }
    const read = answer.status < 300 ? activeIdsOf(answer.body) : undefined;
    if (!read) this.listOffUntil = Date.now() + this.listRetryMs;
    return read;
  }

  /**
   * The outputs and error of an ended job, from the first route that has it: `/api/jobs/{id}`, then
   * `/api/history_v2/{id}`, then `/api/history/{id}`. `none` when every route answered without it; unreadable
   * when none had it and one could not be read.
   */
  async ended(promptId: string, signal?: AbortSignal): Promise<EndedAnswer> {
    const id = encodeURIComponent(promptId);
    const sources: Array<[StatusRoute, string]> = [
      ['jobs', `/api/jobs/${id}`],
      ['history_v2', `/api/history_v2/${id}`],
      ['history', `/api/history/${id}`],
    ];
    let trouble: Unreadable | undefined;
    for (const [route, path] of sources) {
      const answer = await this.get(route, path, signal);
      if (answer.kind === 'unreadable') {
        trouble ??= answer;
        continue;
      }
      if (answer.kind !== 'body') continue;
      let found: PhaseAnswer | Unreadable | undefined;
      if (route === 'jobs') {
        if (isRecord(answer.body) && Object.hasOwn(answer.body, 'status')) found = fromJobsBody(answer.body);
      } else {
        const entry = historyEntry(answer.body, promptId);
        if (entry) found = fromHistoryEntry(entry);
      }
      if (found?.kind === 'unreadable') {
        trouble ??= found;
        continue;
      }
      if (found && (found.outputs || found.error))
        return { kind: 'found', outputs: found.outputs, error: found.error };
    }
    return trouble ?? { kind: 'none' };
  }

  /**
   * One route: `absent` when the server lacks it (a 405, or a 404 that is not JSON: a framework's page for a
   * route it does not have), remembered for the next check; `missing` for a JSON 404 (the job is not known
   * there); `unreadable` when the request failed; otherwise the body. Rejects only when `signal` aborts.
   */
  private async get(
    route: StatusRoute,
    path: string,
    signal?: AbortSignal,
    maxBytes?: number,
  ): Promise<RouteAnswer> {
    if (this.absent.has(route)) return { kind: 'absent' };
    let answer: { status: number; body: unknown; json: boolean };
    try {
      answer = await this.http.json<unknown>(path, {
        acceptStatus: [404, 405],
        signal,
        maxBytes,
        action: route === 'queue' ? 'listing the queue' : 'checking the status of a job',
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      return unreadableOf(error);
    }
    if (lacksRoute(answer)) {
      this.absent.add(route);
      return { kind: 'absent' };
    }
    if (answer.status === 404) return { kind: 'missing' };
    return { kind: 'body', body: answer.body };
  }
}
