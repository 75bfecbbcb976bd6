/**
 * A server's dialect: how one kind of generation server is spoken to. Today's API (ComfyUI, cloud or
 * self-hosted: `/api/prompt`, `/ws`) and Comfy API v2 (`/api/v2/jobs`, event streams, assets) each implement
 * this interface in their own module; the connection and the nodes use only this, and the jobs (jobs/) only its
 * job lookup and events source (jobs/job-ports.ts). Nothing here knows which dialect it talks to, so no `if (v2)`
 * lives outside a dialect's own folder. No Node-RED inside.
 */
import type { Credential } from '../../http/auth';
import type { HttpClient } from '../../http/client';
import type { CancelOutcome } from '../jobs/cancels';
import type { JobTimings } from '../jobs/job-book';
import type { JobEventSource, JobLookupPort } from '../jobs/job-ports';
import type { JobWatchParts, JobWatchReader } from '../jobs/server-job-reader';
import type {
  FileReference,
  OpenFile,
  QueueState,
  SubmitResult,
  UploadRequest,
  UploadResult,
} from '../transfer/rest-client';
import type { NodeTypeDefinition, Workflow } from '../workflows/workflow';

export type { JobEventSource, JobLookupPort } from '../jobs/job-ports';

export type DialectName = 'comfyui' | 'comfy-api-v2';

/** Where node definitions come from (transfer/rest-client.ts's cache on today's API). */
export interface NodeDefinitionSource {
  nodeDefinitions(refresh?: boolean | { olderThanMs: number }): Promise<Record<string, NodeTypeDefinition>>;
  definitionsFor(classTypes: string[], signal?: AbortSignal): Promise<Record<string, NodeTypeDefinition>>;
}

/** One server's dialect: every request a config node makes of a generation server goes through one. */
export interface ServerDialect {
  readonly name: DialectName;
  readonly lookup: JobLookupPort;
  /** How often the book asks about jobs, where the dialect needs other than the book's defaults. */
  readonly jobTimings?: Partial<JobTimings>;
  /** The events source, created on first use. */
  events(): JobEventSource;
  /**
   * Submits a workflow (API format); the result's `prompt_id` is the job's id. A submit whose answer was lost
   * is settled by the dialect's own means: a job never runs twice and is never lost.
   */
  submit(
    workflow: Workflow,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<SubmitResult>;
  /** Cancels jobs wherever they are (waiting or running); what happened to each. */
  cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome>;
  /** Interrupts the running job (only `promptId` when given); refused in a sentence where there is none. */
  interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown>;
  /** The queue as the queue node shows it: `queue_running` and `queue_pending` entries. */
  queueState(signal?: AbortSignal): Promise<QueueState>;
  upload(request: UploadRequest): Promise<UploadResult>;
  /** Opens an output file for streaming (`ref` as a result's `files` name it). */
  openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile>;
  /** The server's node definitions (`/api/object_info`, cached); undefined where the dialect offers none (v2). */
  readonly definitions?: NodeDefinitionSource;
  /**
   * The job-events node's reader of every job of the server, whoever submitted it, on the dialect's own routes
   * (the contract: jobs/server-job-reader.ts's JobWatchReader); absent: today's routes (ServerJobReader).
   */
  jobWatch?(parts: JobWatchParts): JobWatchReader;
  close(): Promise<void>;
}

/** What a connection gives its dialect. */
export interface DialectParts {
  http: HttpClient;
  credential: Credential;
  baseUrl: string;
  /** The socket's id and submits' client_id (a config node keeps its own across restarts). */
  clientId: string;
  partnerKeyField: string;
  /** The largest list answer read. */
  listBytes: number;
  /** Events kept for jobs nobody awaits yet, all together. */
  keptEventBytes: number;
  listRetryMs?: number;
  /** Whether an await saw the job run (for a cancel on servers whose interrupt is not targeted). */
  reportedRunning(promptId: string): boolean;
  /** A job is about to be submitted under this id (its events may come before the answer). */
  submitting(promptId: string): void;
  /** Ask the server about this job now (an event said it ended, or its events stopped short). */
  askNow(promptId: string): void;
}
