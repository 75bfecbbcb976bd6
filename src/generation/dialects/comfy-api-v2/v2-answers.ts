/**
 * The one reader of Comfy API v2 answers (`/api/v2/jobs`, `/api/v2/assets`): a Job, a list of jobs, an Asset,
 * an output item and the error envelope become typed values here, and nowhere else; and what the package's
 * job lives act on (a LookupAnswer, an EndedAnswer, a queue read) is made from them here, so every v2 status
 * word has one meaning. Built on boundary/outside.ts: own properties only, text through `textOf`, ids through
 * job-ids (at most 200 characters), every list and text bounded. "Could not read" is never "absent": a status
 * that is not a word is unreadable, never `unknown`; a job whose outputs could not all be read carries none
 * (its life reads them again, then ends with `outputs_incomplete`), never a part taken for the whole.
 * The HTTP status → error code mapping is http/errors.ts's `codeForStatus`, as for every service.
 * Past 400 lines: every v2 answer's shape and its meaning, read in one place. No Node-RED inside.
 */
import { isRecord } from '../../../boundary/json-values';
import { ownValue, readOk, readTime, textOf, unreadable, type Read } from '../../../boundary/outside';
import { dropOne, readJobId, type Dropped } from '../../jobs/job-ids';
import type { EndedAnswer, ExecutionError, LookupAnswer, QueueRead, Unreadable } from '../../jobs/job-lookup';
import { MAX_ASSET_ID, type JobOutputs } from '../../jobs/job-outputs';
import type { QueueState } from '../../transfer/rest-client';
import { outputsOf, type V2OutputItem } from './v2-outputs';

/** The status words of the v2 spec (2.0.0). */
export const V2_STATUSES = [
  'queued',
  'running',
  'canceling',
  'succeeded',
  'failed',
  'canceled',
  'expired',
] as const;
export type V2Status = (typeof V2_STATUSES)[number];
/** A Set, so a word from outside (`constructor`) is looked up, never a prototype's member. */
const KNOWN_STATUSES = new Set<string>(V2_STATUSES);

/** Bounds of what one answer may make this package keep. */
export const V2_LIMITS = {
  /** A status word kept for messages (v2's longest is 9 characters). */
  word: 100,
  /** An asset id: a v2 output's id is base64url JSON (job, file name, subfolder, type) and a signature. */
  assetId: MAX_ASSET_ID,
  /** A node id (ComfyUI's are short numbers). */
  nodeId: 200,
  /** A file's name or an asset's path. */
  name: 1024,
  /** An output kind, an error code, a content type, a class type. */
  shortText: 200,
  /** An error's message. */
  message: 10_000,
  /** A job's metadata (the spec allows 1024 UTF-8 bytes, at most 1024 characters). */
  metadata: 1024,
  /** Output items read of one job; more are left out (and the outputs are then not whole). */
  outputs: 10_000,
  /** Jobs read of one list; more are left out (and the list is then a page). */
  jobs: 1000,
} as const;

/** A failed job's error: `{code, message, node_id, class_type}` (traceback is always null on the proxy). */
export interface V2JobError {
  code: string;
  message: string;
  nodeId?: string;
  classType?: string;
}

/** One Job, read. */
export interface V2Job {
  id: string;
  /** The status word as the server wrote it (cut to V2_LIMITS.word), for messages. */
  word: string;
  /** The word when it is a v2 status word; undefined for a word this package does not know. */
  status?: V2Status;
  /** 1-based place among waiting jobs (queued only; the submit's 201 gives none). */
  queuePosition?: number;
  /** The output items read. */
  outputs: V2OutputItem[];
  /** Output items that could not be read, left out: `outputs` is then not the whole. */
  droppedOutputs?: Dropped;
  error?: V2JobError;
  metadata?: string;
  /** `created_at` in ms since the epoch, by the server's clock. */
  createdAt?: number;
}

/** A list of jobs (`GET /api/v2/jobs`), newest first. */
export interface V2JobList {
  jobs: V2Job[];
  /** Entries in the answer, read or not. */
  count: number;
  /** The server said it stopped looking before the limit, or it did not say (then it may have). */
  truncated: boolean;
  /** Entries that could not be read (or were past V2_LIMITS.jobs), left out. */
  dropped?: Dropped;
}

/** An Asset record (an upload's or from-hash's answer). */
export interface V2Asset {
  id: string;
  /** `blake3:<64 hex>`, when the server gave one in that form. */
  hash?: string;
  sizeBytes?: number;
  contentType?: string;
  /** Where the server keeps it: `input/<subfolder>/<name>` for an input. */
  filePath?: string;
  createdNew?: boolean;
}

/** The error envelope `{"error": {"code", "message", "details"}}`, read. */
export interface V2ErrorEnvelope {
  code: string;
  message?: string;
  details?: Record<string, unknown>;
  /** `details.node_errors` of a 422 invalid_workflow: ComfyUI's own, verbatim. */
  nodeErrors?: Record<string, unknown>;
}

/** A bounded, non-empty text of a record's own property; undefined when it is none or longer than `max`. */
function ownText(record: Record<string, unknown>, key: string, max: number): string | undefined {
  const value = ownValue(record, key);
  return typeof value === 'string' && value !== '' && value.length <= max ? value : undefined;
}

/** One output item `{id, node_id, name, type, content_type, ...}`; unreadable when a field it needs is not text. */
export function readV2OutputItem(value: unknown): Read<V2OutputItem> {
  if (!isRecord(value)) return unreadable('an output that is not an object');
  const id = ownText(value, 'id', V2_LIMITS.assetId);
  if (id === undefined) return unreadable('an output without an asset id');
  const name = ownText(value, 'name', V2_LIMITS.name);
  if (name === undefined) return unreadable('an output without a file name');
  // A node id may come as a number from a server that writes it so; text is what outputs are keyed by.
  const nodeId = textOf(ownValue(value, 'node_id'), V2_LIMITS.nodeId + 1);
  if (nodeId === undefined || nodeId === '' || nodeId.length > V2_LIMITS.nodeId)
    return unreadable('an output without a node id');
  const type = ownText(value, 'type', V2_LIMITS.shortText);
  if (type === undefined) return unreadable('an output without a kind');
  const item: V2OutputItem = { id, node_id: nodeId, name, type };
  const contentType = ownText(value, 'content_type', V2_LIMITS.shortText);
  if (contentType !== undefined) item.content_type = contentType;
  return readOk(item);
}

function readJobError(value: unknown): V2JobError | undefined {
  if (!isRecord(value)) return undefined;
  const message = ownValue(value, 'message');
  const error: V2JobError = {
    code: ownText(value, 'code', V2_LIMITS.shortText) ?? 'unknown',
    message: typeof message === 'string' ? message.slice(0, V2_LIMITS.message) : '',
  };
  const nodeId = textOf(ownValue(value, 'node_id'), V2_LIMITS.nodeId + 1);
  if (nodeId !== undefined && nodeId !== '' && nodeId.length <= V2_LIMITS.nodeId) error.nodeId = nodeId;
  const classType = ownText(value, 'class_type', V2_LIMITS.shortText);
  if (classType !== undefined) error.classType = classType;
  return error;
}

/** A 1-based queue position: a positive whole number; anything else (null, 0, "2", 1.5) is none. */
function positionOf(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 1 ? value : undefined;
}

/** A Job answer (`POST /jobs`'s 201, `GET /jobs/{id}`, a list's entry, a cancel's 200). Never throws. */
export function readV2Job(body: unknown): Read<V2Job> {
  if (!isRecord(body)) return unreadable('an answer that is not a job (an object)');
  const id = readJobId(ownValue(body, 'id'));
  if (!id.ok) return unreadable(`a job whose id cannot be read: ${id.reason}`);
  const given = ownValue(body, 'status');
  if (typeof given !== 'string') return unreadable(`job ${id.value} has a status that is not a word`);
  const word = given.length > V2_LIMITS.word ? given.slice(0, V2_LIMITS.word) : given;
  const job: V2Job = { id: id.value, word, outputs: [] };
  if (KNOWN_STATUSES.has(given)) job.status = given as V2Status;
  const position = positionOf(ownValue(body, 'queue_position'));
  if (position !== undefined) job.queuePosition = position;
  const outputs = ownValue(body, 'outputs');
  if (Array.isArray(outputs)) {
    for (const [index, value] of outputs.entries()) {
      if (index >= V2_LIMITS.outputs) {
        job.droppedOutputs = {
          count: (job.droppedOutputs?.count ?? 0) + outputs.length - index,
          reason: job.droppedOutputs?.reason ?? `more than ${V2_LIMITS.outputs} outputs`,
        };
        break;
      }
      const item = readV2OutputItem(value);
      if (item.ok) job.outputs.push(item.value);
      else job.droppedOutputs = dropOne(job.droppedOutputs, item.reason);
    }
  } else if (outputs !== undefined && outputs !== null) {
    job.droppedOutputs = { count: 1, reason: 'outputs that are not a list' };
  }
  const error = readJobError(ownValue(body, 'error'));
  if (error) job.error = error;
  const metadata = ownText(body, 'metadata', V2_LIMITS.metadata);
  if (metadata !== undefined) job.metadata = metadata;
  const createdAt = readTime(ownValue(body, 'created_at'));
  if (createdAt !== undefined) job.createdAt = createdAt;
  return readOk(job);
}

/** A list answer `{jobs: [Job, ...], truncated}`. Entries that cannot be read are left out and counted. */
export function readV2JobList(body: unknown): Read<V2JobList> {
  if (!isRecord(body)) return unreadable('an answer that is not a list of jobs (an object)');
  const entries = ownValue(body, 'jobs');
  if (!Array.isArray(entries)) return unreadable('an answer without a list of jobs');
  // Anything but `false` may leave jobs out: only a list that says it is whole is taken for whole.
  const list: V2JobList = {
    jobs: [],
    count: entries.length,
    truncated: ownValue(body, 'truncated') !== false,
  };
  for (const [index, entry] of entries.entries()) {
    if (index >= V2_LIMITS.jobs) {
      list.dropped = {
        count: (list.dropped?.count ?? 0) + entries.length - index,
        reason: list.dropped?.reason ?? `more than ${V2_LIMITS.jobs} jobs`,
      };
      break;
    }
    const job = readV2Job(entry);
    if (job.ok) list.jobs.push(job.value);
    else list.dropped = dropOne(list.dropped, job.reason);
  }
  return readOk(list);
}

const BLAKE3_HASH = /^blake3:[0-9a-f]{64}$/;

/** An Asset answer `{id, hash, size_bytes, content_type, file_path, created_new, ...}`. */
export function readV2Asset(body: unknown): Read<V2Asset> {
  if (!isRecord(body)) return unreadable('an answer that is not an asset (an object)');
  const id = ownText(body, 'id', V2_LIMITS.assetId);
  if (id === undefined) return unreadable('an asset without an id');
  const asset: V2Asset = { id };
  const hash = ownText(body, 'hash', 100)?.toLowerCase();
  if (hash !== undefined && BLAKE3_HASH.test(hash)) asset.hash = hash;
  const size = ownValue(body, 'size_bytes');
  if (typeof size === 'number' && Number.isSafeInteger(size) && size >= 0) asset.sizeBytes = size;
  const contentType = ownText(body, 'content_type', V2_LIMITS.shortText);
  if (contentType !== undefined) asset.contentType = contentType;
  const filePath = ownText(body, 'file_path', V2_LIMITS.name);
  if (filePath !== undefined) asset.filePath = filePath;
  const createdNew = ownValue(body, 'created_new');
  if (typeof createdNew === 'boolean') asset.createdNew = createdNew;
  return readOk(asset);
}

/** The error envelope of an answer; undefined for a body that is not one. */
export function readV2Error(body: unknown): V2ErrorEnvelope | undefined {
  const error = isRecord(body) ? ownValue(body, 'error') : undefined;
  if (!isRecord(error)) return undefined;
  const code = ownText(error, 'code', V2_LIMITS.shortText);
  if (code === undefined) return undefined;
  const envelope: V2ErrorEnvelope = { code };
  const message = ownText(error, 'message', V2_LIMITS.message);
  if (message !== undefined) envelope.message = message;
  const details = ownValue(error, 'details');
  if (isRecord(details)) {
    envelope.details = details;
    const nodeErrors = ownValue(details, 'node_errors');
    if (isRecord(nodeErrors)) envelope.nodeErrors = nodeErrors;
  }
  return envelope;
}

/**
 * A 422's envelope as today's API's 400 body (`{error: {type, message}, node_errors}`), so a Catch node sees a
 * refused workflow alike whichever dialect its config node speaks (workflow.ts's describeSubmitProblems reads it).
 */
export function todaysRefusalBody(envelope: V2ErrorEnvelope | undefined): Record<string, unknown> {
  const error: Record<string, unknown> = {
    type: envelope?.code ?? 'unknown',
    message: envelope?.message ?? '',
  };
  if (envelope?.details) error.details = envelope.details;
  const body: Record<string, unknown> = { error };
  if (envelope?.nodeErrors) body.node_errors = envelope.nodeErrors;
  return body;
}

/** A failed job's error as today's ExecutionError: its class type (else its code) and its message. */
export function executionErrorOf(error: V2JobError): ExecutionError {
  return {
    exception_type: error.classType ?? error.code,
    exception_message: error.message,
    traceback: [],
  };
}

/** The outputs of a job as today's outputs; undefined when some could not be read (not the whole). */
function wholeOutputs(job: V2Job): JobOutputs | undefined {
  return job.droppedOutputs ? undefined : outputsOf(job.outputs);
}

/**
 * What a Job says of the job, as the job lives read answers:
 * queued → pending; running, canceling → running; succeeded → completed; failed → failed (with its error);
 * canceled → cancelled; expired → unknown (ComfyUI forgot it: a cancelled waiting job, or a restart; the life
 * decides lost or cancelled-by-us); a word this package does not know → running (an unknown word never ends a
 * job, as on today's API). An ended job carries its outputs when every item could be read.
 */
export function lookupAnswerOf(job: V2Job): LookupAnswer {
  switch (job.status) {
    case 'queued':
      return { kind: 'phase', phase: 'pending', word: job.word };
    case 'running':
    case 'canceling':
    case undefined:
      return { kind: 'phase', phase: 'running', word: job.word };
    case 'expired':
      return { kind: 'unknown' };
    case 'succeeded':
    case 'canceled':
    case 'failed': {
      const phase =
        job.status === 'succeeded' ? 'completed' : job.status === 'failed' ? 'failed' : 'cancelled';
      const answer: LookupAnswer = { kind: 'phase', phase, word: job.word };
      const outputs = wholeOutputs(job);
      if (outputs) answer.outputs = outputs;
      if (phase === 'failed' && job.error) answer.error = executionErrorOf(job.error);
      return answer;
    }
  }
}

/**
 * What a Job says of an ended job's outputs and error: found (its outputs, and its error when failed), none
 * (expired: ComfyUI forgot it, outputs and all), or unreadable (some outputs could not be read, or the server
 * says it has not ended: the life asks again).
 */
export function endedAnswerOf(job: V2Job): EndedAnswer {
  if (job.status === 'expired') return { kind: 'none' };
  if (job.status !== 'succeeded' && job.status !== 'failed' && job.status !== 'canceled')
    return {
      kind: 'unreadable',
      reason: 'failed',
      message: `the service says job ${job.id} is ${job.word}, not ended`,
    };
  if (job.droppedOutputs)
    return {
      kind: 'unreadable',
      reason: 'failed',
      message: `${job.droppedOutputs.count} output(s) of job ${job.id} could not be read (${job.droppedOutputs.reason})`,
    };
  const answer: EndedAnswer = { kind: 'found', outputs: outputsOf(job.outputs) };
  if (job.status === 'failed' && job.error) answer.error = executionErrorOf(job.error);
  return answer;
}

/** A job answer that could not be read: nothing can be said (never "unknown"). */
export function unreadableJob(route: string, reason: string): Unreadable {
  return { kind: 'unreadable', reason: 'failed', message: `the service answered ${route} with ${reason}` };
}

/** The answer of `GET /api/v2/jobs/{id}` with a 200 body, read. */
export function answerOfJobBody(body: unknown): LookupAnswer {
  const job = readV2Job(body);
  return job.ok ? lookupAnswerOf(job.value) : unreadableJob('GET /api/v2/jobs/{id}', job.reason);
}

/** The ended answer of `GET /api/v2/jobs/{id}` with a 200 body, read. */
export function endedAnswerOfBody(body: unknown): EndedAnswer {
  const job = readV2Job(body);
  return job.ok ? endedAnswerOf(job.value) : unreadableJob('GET /api/v2/jobs/{id}', job.reason);
}

/**
 * A list of all our jobs (newest first, every status) as a queue read: running and canceling jobs run, queued
 * ones wait (`ahead` = the jobs running + queue_position - 1; a job without a position counts the queued jobs
 * listed after it, which are older), ended ones carry their answers in `ended` (expired: unknown). The list
 * names only the jobs sent through the v2 server, while `queue_position` counts every job waiting in ComfyUI:
 * a job waits only while one runs, so at least one runs ahead of a waiting job even when none of the listed
 * does (one of another program's, sent to ComfyUI itself). It is a page
 * (`partial`) when the list is full (`limit` entries), says it is truncated, left an entry out, or holds a word
 * this package does not know: a job it does not name may still wait or run, and is asked about on its own.
 */
export function queueReadOf(list: V2JobList, limit: number): QueueRead {
  const running = new Set<string>();
  const pending = new Set<string>();
  const ahead = new Map<string, number>();
  const ended = new Map<string, LookupAnswer>();
  const waiting: V2Job[] = [];
  let partial = list.truncated || list.count >= limit || list.dropped !== undefined;
  for (const job of list.jobs) {
    // The same id twice (a hostile list): the first, newest, entry stands.
    if (running.has(job.id) || pending.has(job.id) || ended.has(job.id)) continue;
    if (job.status === 'running' || job.status === 'canceling') running.add(job.id);
    else if (job.status === 'queued') {
      pending.add(job.id);
      waiting.push(job);
    } else if (job.status === undefined) partial = true;
    else ended.set(job.id, lookupAnswerOf(job));
  }
  let unplaced = waiting.filter((job) => job.queuePosition === undefined).length;
  const runningAhead = Math.max(running.size, 1);
  for (const job of waiting) {
    if (job.queuePosition !== undefined) ahead.set(job.id, runningAhead + job.queuePosition - 1);
    else ahead.set(job.id, runningAhead + --unplaced);
  }
  const read: QueueRead = { kind: 'read', running, pending, ahead, ended };
  if (list.dropped) read.dropped = list.dropped;
  if (partial) read.partial = true;
  return read;
}

/** A list answer's body as a queue read; unreadable when it is no list. */
export function queueReadOfBody(body: unknown, limit: number): QueueRead {
  const list = readV2JobList(body);
  return list.ok ? queueReadOf(list.value, limit) : unreadableJob('GET /api/v2/jobs', list.reason);
}

/**
 * A list of waiting and running jobs as the queue node shows the queue: `queue_running` and `queue_pending`
 * entries `{prompt_id, status, queue_position?}` (promptIdsOf reads their ids, as of today's entries), the
 * waiting ones in the order they run; `truncated: true` when the list may leave jobs out.
 */
export function queueStateOf(list: V2JobList, limit: number): QueueState {
  const running: unknown[] = [];
  const waiting: V2Job[] = [];
  for (const job of list.jobs) {
    if (job.status === 'running' || job.status === 'canceling')
      running.push({ prompt_id: job.id, status: job.word });
    else if (job.status === 'queued') waiting.push(job);
  }
  // Positioned jobs by their place; the others after them, oldest (last listed) first.
  const placed = waiting
    .filter((job) => job.queuePosition !== undefined)
    .sort((a, b) => (a.queuePosition as number) - (b.queuePosition as number));
  const unplaced = waiting.filter((job) => job.queuePosition === undefined).reverse();
  const state: QueueState = {
    queue_running: running,
    queue_pending: [...placed, ...unplaced].map((job) =>
      job.queuePosition === undefined
        ? { prompt_id: job.id, status: job.word }
        : { prompt_id: job.id, status: job.word, queue_position: job.queuePosition },
    ),
  };
  if (list.truncated || list.count >= limit || list.dropped) state.truncated = true;
  return state;
}

/** What a cancel's answer (the Job after `POST /jobs/{id}/cancel`) says was done to the job. */
export type V2CancelKind = 'removed' | 'interrupted' | 'notQueued' | 'unconfirmed';

/**
 * expired: a waiting job ComfyUI dropped (the proxy keeps no record of it) → removed; canceling (the interrupt
 * lands at the next node) or canceled → interrupted; succeeded or failed → it had ended (not queued); queued or
 * running (the cancel did not take yet), a word not known, or an answer not read → unconfirmed.
 */
export function cancelKindOfBody(body: unknown): V2CancelKind {
  const job = readV2Job(body);
  if (!job.ok) return 'unconfirmed';
  switch (job.value.status) {
    case 'expired':
      return 'removed';
    case 'canceling':
    case 'canceled':
      return 'interrupted';
    case 'succeeded':
    case 'failed':
      return 'notQueued';
    default:
      return 'unconfirmed';
  }
}
