/**
 * What each job of a server got to, and which of its events were told: a job seen further on than it was last
 * seen is told the steps it passed since, in order, each once, among the events chosen and for the clients
 * chosen; what was told is remembered (job-event-memory.ts) across restarts. Both ways of watching tell through
 * it: a self-hosted server's lists (server-job-reader.ts) and the cloud's socket (job-events.ts). No Node-RED
 * inside.
 *
 * Which steps are told: a job met already past a step (a quick job that queued, ran and ended between two
 * looks) is told the steps it passed; the first look after a start (`fresh`) tells each job its latest step
 * only, so what ended while Node-RED was down is told once, its end; the very first look at a server (nothing
 * remembered yet, `begin`) tells nothing: what is there is remembered, and only what happens next is told.
 */
import { filesOf, type FileReference, type JobOutputs } from './job-outputs';
import { unknownFailure, type JobResult } from './job-life';
import type { ExecutionError } from './job-lookup';
import { JobEventMemory, STEP_RANK, type JobStep, type RememberedJob } from './job-event-memory';
import type { TerminalPhase } from './status-words';
import { errorText } from '../../boundary/outside';

export type JobEventTopic = 'queued' | 'started' | 'completed' | 'failed' | 'cancelled';

export const JOB_EVENT_TOPICS: readonly JobEventTopic[] = [
  'queued',
  'started',
  'completed',
  'failed',
  'cancelled',
];

/** `msg.payload`: for an end, await-job's result; for `queued` and `started`, the job and the step. */
export interface JobEventPayload {
  prompt_id: string;
  status: JobEventTopic;
  outputs?: JobOutputs;
  files?: FileReference[];
  error?: ExecutionError;
  outputs_incomplete?: true;
}

export interface JobEvent {
  topic: JobEventTopic;
  prompt_id: string;
  payload: JobEventPayload;
}

/** Where a look found a job. */
export type SeenPhase = 'pending' | 'running' | 'ended';

export const PHASE_RANK: Record<SeenPhase, number> = {
  pending: STEP_RANK.queued,
  running: STEP_RANK.started,
  ended: STEP_RANK.ended,
};

export const STEP_OF_PHASE: Record<SeenPhase, JobStep> = {
  pending: 'queued',
  running: 'started',
  ended: 'ended',
};

/** What a look knows of a job besides its phase. */
export interface SeenJob {
  createdAt?: number;
  /** It started running (for a job met ended: whether `started` is one of the steps it passed). */
  ran: boolean;
}

/** The result of an ended job as await-job gives it, from what REST said of it. */
export function resultOf(
  promptId: string,
  status: TerminalPhase,
  answer: { outputs?: JobOutputs; error?: ExecutionError },
): JobResult {
  const result: JobResult = { prompt_id: promptId, status };
  if (status === 'failed') result.error = answer.error ?? unknownFailure();
  if (status === 'completed') {
    result.outputs = answer.outputs ?? {};
    result.files = filesOf(result.outputs);
    if (!answer.outputs) result.outputs_incomplete = true;
  }
  return result;
}

export interface TellerOptions {
  /** The events to tell. */
  events: readonly JobEventTopic[];
  /** Every job, or only those another client submitted. */
  clients: 'all' | 'others';
  /** This config node's client id, and whether its connection submitted a job. */
  clientId: string;
  submittedHere(promptId: string): boolean;
  emit(event: JobEvent): void;
  log(level: 'debug' | 'warn', message: string): void;
}

export class JobEventTeller {
  /** No look of this run succeeded yet: the next tells each job its latest step only. */
  fresh = true;
  private readonly chosen: Set<JobEventTopic>;
  private full = false;
  closed = false;

  constructor(
    readonly memory: JobEventMemory,
    private readonly options: TellerOptions,
  ) {
    this.chosen = new Set(options.events);
  }

  get clientId(): string {
    return this.options.clientId;
  }

  /** The very first look at the server: what it holds is remembered, not told. */
  begin(seen: Iterable<[string, SeenJob & { phase: SeenPhase }]>, newest: number): void {
    for (const [id, job] of seen)
      this.remember(id, { step: STEP_OF_PHASE[job.phase], createdAt: job.createdAt });
    this.memory.setMark(newest);
    this.memory.forgetOld();
  }

  /** Whether this look finds the job further on than it was: a step to tell. */
  movedOn(promptId: string, phase: SeenPhase): boolean {
    const known = this.memory.get(promptId);
    return !known || STEP_RANK[known.step] < PHASE_RANK[phase];
  }

  /** A job got to waiting or running: the steps it passed since it was last seen, in order. */
  advance(
    id: string,
    step: 'queued' | 'started',
    job: SeenJob,
    own: boolean | undefined,
    fresh = this.fresh,
  ): void {
    const known = this.memory.get(id);
    const from = known ? STEP_RANK[known.step] : 0;
    const topics: JobEventTopic[] = [];
    if (from < STEP_RANK.queued && (!fresh || step === 'queued')) topics.push('queued');
    if (step === 'started' && from < STEP_RANK.started) topics.push('started');
    this.remember(id, { step, createdAt: job.createdAt ?? known?.createdAt, own });
    for (const topic of topics) this.tell(topic, id, own, { prompt_id: id, status: topic });
  }

  /** A job ended: the steps it passed unseen (unless `fresh`), then its end. */
  end(id: string, result: JobResult, job: SeenJob, own: boolean, fresh = this.fresh): void {
    const known = this.memory.get(id);
    if (known?.step === 'ended' || result.status === 'timeout') return;
    const from = known ? STEP_RANK[known.step] : 0;
    const topics: JobEventTopic[] = [];
    if (!fresh && from < STEP_RANK.queued) topics.push('queued');
    if (!fresh && job.ran && from < STEP_RANK.started) topics.push('started');
    this.remember(id, { step: 'ended', createdAt: job.createdAt ?? known?.createdAt, own });
    for (const topic of topics) this.tell(topic, id, own, { prompt_id: id, status: topic });
    // A copy: the job book keeps its results for later awaits, and a flow may change what it is sent.
    this.tell(result.status, id, own, { ...structuredClone(result), status: result.status });
  }

  /** A job whose end cannot be read any more: remembered as ended, told nothing. */
  giveUp(id: string): void {
    this.remember(id, { ...this.memory.get(id), step: 'ended' });
  }

  /** This config node's client submitted it (true), another (false); undefined: not known here. */
  ownerOf(id: string): boolean | undefined {
    const own = this.memory.get(id)?.own;
    if (own !== undefined) return own;
    return this.options.submittedHere(id) ? true : undefined;
  }

  /** Whether a job's submitter decides whether these steps are told: "only others", one of them chosen. */
  needsOwner(topics: JobEventTopic[]): boolean {
    return this.options.clients === 'others' && topics.some((topic) => this.chosen.has(topic));
  }

  private tell(topic: JobEventTopic, id: string, own: boolean | undefined, payload: JobEventPayload): void {
    if (this.closed || !this.chosen.has(topic)) return;
    if (this.options.clients === 'others' && own !== false) return;
    try {
      this.options.emit({ topic, prompt_id: id, payload });
    } catch (error) {
      this.options.log(
        'warn',
        `graph-gen job events: sending the ${topic} event of ${id} failed: ${errorText(error)}`,
      );
    }
  }

  private remember(id: string, job: RememberedJob): void {
    if (this.memory.remember(id, job) || this.full) return;
    this.full = true;
    this.options.log(
      'warn',
      'graph-gen job events: too many jobs wait or run to remember them all; later ones are not told',
    );
  }
}
