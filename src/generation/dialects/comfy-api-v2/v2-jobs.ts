/**
 * Comfy API v2's jobs over REST: submit (`POST /api/v2/jobs`, with a single-use Idempotency-Key), cancel
 * (`POST /api/v2/jobs/{id}/cancel`) and the queue as the queue node shows it (the lookups the book asks are
 * v2-lookup.ts's). Every answer is read by
 * v2-answers.ts; this file only asks, and settles what an answer could not say.
 *
 * A submit whose answer was lost (the body left, no answer came; or the proxy's 503 `upstream_unreachable`,
 * after which it keeps the key claimed) is never sent again with its key: v2 keys are single-use, a second use
 * is refused (422) and says nothing of the first. The key is also in the job's `metadata`, so the job is looked
 * for in the list of our jobs; the workflow is sent anew, with a new key, only when two reads said it is not
 * there, and the submit fails in a sentence when that cannot be told. A list can say "not there" only when it
 * is whole, or reaches back past a job this client saw created before the submit left (the list is newest
 * first). No Node-RED inside.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HttpClient } from '../../../http/client';
import { mayHaveReached, outcomeUnknown } from '../../../http/client';
import { ServiceError } from '../../../http/errors';
import { setOwn } from '../../../boundary/outside';
import type { CancelOutcome } from '../../jobs/cancels';
import type { QueueState, SubmitResult } from '../../transfer/rest-client';
import { describeSubmitProblems, type Workflow } from '../../workflows/workflow';
import {
  cancelKindOfBody,
  queueStateOf,
  readV2Error,
  readV2Job,
  readV2JobList,
  todaysRefusalBody,
  type V2CancelKind,
  type V2Job,
} from './v2-answers';

/** The most jobs a v2 list gives in one answer (`limit` 1..100). */
/** The most jobs a v2 list gives in one answer (`limit` 1..100). */
export const V2_LIST_LIMIT = 100;
/** What this package writes before its key in a job's `metadata` (the whole is far below 1024 bytes). */
export const V2_METADATA_PREFIX = 'graph-gen:';

/**
 * A job's metadata as this package writes it: the prefix, the config node's client id (kept across restarts, so
 * the job-events node knows its own jobs after one) and the submit's key.
 */
export function metadataOf(key: string, clientId?: string): string {
  return clientId ? `${V2_METADATA_PREFIX}${clientId}:${key}` : `${V2_METADATA_PREFIX}${key}`;
}

/** Whether a job's metadata says the config node of `clientId` submitted it. */
export function submittedBy(metadata: string | undefined, clientId: string | undefined): boolean {
  return clientId !== undefined && metadata?.startsWith(`${V2_METADATA_PREFIX}${clientId}:`) === true;
}

export interface V2JobsOptions {
  /** The largest list answer read (each job carries its outputs). */
  listBytes?: number;
  /** The config node's client id, written into each job's metadata. */
  clientId?: string;
  /** A submit whose answer was lost is looked for after these waits (as connection.ts does for today's API). */
  lostAnswerWaitsMs?: readonly number[];
  /** Each of those looks is bounded in time. */
  lostAnswerAskMs?: number;
}

const LOST_ANSWER_WAITS_MS = [1_000, 2_000, 2_000];
const LOST_ANSWER_ASK_MS = 3_000;
/** The largest list answer read, unless the config node says otherwise. */
export const DEFAULT_LIST_BYTES = 64 * 1024 * 1024;

/** A job known to have been created before a submit left: a list that reaches it lists every newer job. */
interface Anchor {
  id: string;
  createdAt?: number;
}

type Look = { kind: 'found'; job: V2Job } | { kind: 'absent' } | { kind: 'cannot_tell' };

/** Submit, cancel and the queue node's list, on a v2 server. */
export class V2Jobs {
  private readonly listBytes: number;
  private readonly clientId?: string;
  private readonly waitsMs: readonly number[];
  private readonly askMs: number;
  /** The newest job this client saw created (a submit's answer). */
  private anchor?: Anchor;

  constructor(
    private readonly http: HttpClient,
    options: V2JobsOptions = {},
  ) {
    this.listBytes = options.listBytes ?? DEFAULT_LIST_BYTES;
    this.clientId = options.clientId;
    this.waitsMs = options.lostAnswerWaitsMs ?? LOST_ANSWER_WAITS_MS;
    this.askMs = options.lostAnswerAskMs ?? LOST_ANSWER_ASK_MS;
  }

  /**
   * Submits a workflow (API format) under a key of its own; the result's `prompt_id` is the job's id. A submit
   * whose answer was lost is found by its key, or sent anew with a new key once two reads said it is not there.
   */
  async submit(
    workflow: Workflow,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    for (let attempt = 0; ; attempt++) {
      const key = randomUUID();
      // Taken before the submit leaves: a job created later would be newer than it.
      const anchor = this.anchor;
      try {
        return await this.submitOnce(workflow, extraData, key, signal);
      } catch (error) {
        if (!outcomeUnknown(error, attempt, signal)) throw error;
        const found = await this.findSubmitted(key, anchor, error, signal);
        if (found) return found;
      }
    }
  }

  private async submitOnce(
    workflow: Workflow,
    extraData: Record<string, unknown> | undefined,
    key: string,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const payload: Record<string, unknown> = { workflow, metadata: metadataOf(key, this.clientId) };
    if (extraData && Object.keys(extraData).length > 0) payload.extra_data = extraData;
    const answer = await this.http.json<unknown>('/api/v2/jobs', {
      method: 'POST',
      json: payload,
      headers: { 'idempotency-key': key },
      idempotent: false,
      // A 422 is read here, whole: its body names the broken nodes and inputs, for the sentence.
      acceptStatus: [422],
      signal,
      action: 'submitting the workflow',
    });
    if (answer.status === 422) throw this.refusal(answer.body);
    const job = readV2Job(answer.body);
    if (!job.ok) {
      throw new ServiceError(
        'server_error',
        `the generation service accepted the workflow but its answer names no job (${job.reason})`,
        { status: answer.status, body: this.http.cleanForReport(answer.body) },
      );
    }
    this.saw(job.value);
    return { prompt_id: job.value.id, status: job.value.word };
  }

  /** A 422 as today's 400: the same sentence and `cause.body` shape (`error`, `node_errors`) for a Catch node. */
  private refusal(body: unknown): ServiceError {
    const todays = todaysRefusalBody(readV2Error(body));
    const problems = describeSubmitProblems(todays);
    return new ServiceError(
      'invalid_request',
      this.http.cleanForReport(
        problems
          ? `the generation service refused the workflow: ${problems}`
          : "the generation service refused submitting the workflow with HTTP 422: check the message's input",
      ),
      { status: 422, body: this.http.cleanForReport(todays) },
    );
  }

  /** Keeps the newest job seen created as the anchor of later looks. */
  private saw(job: V2Job): void {
    const current = this.anchor;
    if (current?.createdAt !== undefined && job.createdAt !== undefined && job.createdAt < current.createdAt)
      return;
    this.anchor = { id: job.id, createdAt: job.createdAt };
  }

  /**
   * After a submit whose answer was lost: its job, found by its key after a moment; undefined when two reads
   * said it is not there (then it is sent anew); a failure in a sentence when it cannot be told.
   */
  private async findSubmitted(
    key: string,
    anchor: Anchor | undefined,
    lost: ServiceError,
    signal?: AbortSignal,
  ): Promise<SubmitResult | undefined> {
    let absent = 0;
    for (const wait of this.waitsMs) {
      await sleep(wait, undefined, { signal });
      const bounded = AbortSignal.any([AbortSignal.timeout(this.askMs), ...(signal ? [signal] : [])]);
      const look = await this.lookFor(key, anchor, bounded).catch((error: unknown): Look => {
        if (signal?.aborted) throw error;
        return { kind: 'cannot_tell' };
      });
      if (look.kind === 'found') {
        this.saw(look.job);
        return { prompt_id: look.job.id, status: look.job.word };
      }
      if (look.kind === 'absent' && ++absent === 2) return undefined;
    }
    // It may be there: never sent anywhere else (a pool's failover).
    throw mayHaveReached(
      new ServiceError(
        'network',
        `${lost.message}; the server could not tell whether it took the workflow, so it was not sent again: list the jobs or check the queue before you submit it again`,
      ),
    );
  }

  /** One read of our latest jobs, looking for the one whose metadata holds the key. */
  private async lookFor(key: string, anchor: Anchor | undefined, signal: AbortSignal): Promise<Look> {
    const { body } = await this.http.json<unknown>('/api/v2/jobs', {
      query: { limit: V2_LIST_LIMIT },
      signal,
      action: 'looking for the job of a submit whose answer was lost',
      maxBytes: this.listBytes,
    });
    const list = readV2JobList(body);
    if (!list.ok) return { kind: 'cannot_tell' };
    const wanted = metadataOf(key, this.clientId);
    const job = list.value.jobs.find((each) => each.metadata === wanted);
    if (job) return { kind: 'found', job };
    // An entry left out might be the one.
    if (list.value.dropped) return { kind: 'cannot_tell' };
    const whole = !list.value.truncated && list.value.count < V2_LIST_LIMIT;
    const reachesAnchor =
      anchor !== undefined &&
      list.value.jobs.some(
        (each) =>
          each.id === anchor.id ||
          (anchor.createdAt !== undefined &&
            each.createdAt !== undefined &&
            each.createdAt < anchor.createdAt),
      );
    return whole || reachesAnchor ? { kind: 'absent' } : { kind: 'cannot_tell' };
  }

  /**
   * Cancels each job (`POST /api/v2/jobs/{id}/cancel`) and says what happened, from the Job it answers
   * (v2-answers.ts `cancelKindOfBody`): a 404 is a job the service does not know (not queued); a request that
   * failed is unconfirmed (its awaits ask the server); a refused token is raised.
   */
  async cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    const outcome: CancelOutcome = {
      body: undefined,
      removed: [],
      interrupted: [],
      notQueued: [],
      unconfirmed: [],
    };
    const answers: Record<string, unknown> = {};
    for (const id of promptIds) {
      let kind: V2CancelKind = 'unconfirmed';
      let body: unknown;
      try {
        const answer = await this.http.json<unknown>(`/api/v2/jobs/${encodeURIComponent(id)}/cancel`, {
          method: 'POST',
          // Cancelling twice is harmless: a job that ended answers its status and nothing changes.
          idempotent: true,
          acceptStatus: [404],
          signal,
          action: `cancelling job ${id}`,
        });
        body = answer.body;
        if (answer.status === 404) kind = answer.json ? 'notQueued' : 'unconfirmed';
        else kind = cancelKindOfBody(answer.body);
      } catch (error) {
        if (signal?.aborted) throw error;
        if (error instanceof ServiceError && error.code === 'unauthorized') throw error;
      }
      setOwn(answers, id, body);
      outcome[kind].push(id);
    }
    outcome.body = answers;
    return outcome;
  }

  /** The waiting and running jobs as the queue node shows them (v2-answers.ts `queueStateOf`). */
  async queueState(signal?: AbortSignal): Promise<QueueState> {
    const { body } = await this.http.json<unknown>('/api/v2/jobs', {
      query: { status: 'queued,running,canceling', limit: V2_LIST_LIMIT },
      signal,
      action: 'listing the queue',
      maxBytes: this.listBytes,
    });
    const list = readV2JobList(body);
    if (!list.ok) {
      throw new ServiceError(
        'server_error',
        `the generation service answered the queue list with something that is not a list of jobs (${list.reason}): check the base address in the config node`,
        { body: this.http.cleanForReport(body) },
      );
    }
    return queueStateOf(list.value, V2_LIST_LIMIT);
  }
}
