/**
 * The generation sandbox's shared state: jobs and stored files. The REST routes (generation-service.ts)
 * create and read jobs; the event runner (generation-events.ts) moves them through their states and sends
 * their events over the WebSocket. They meet only here.
 */
import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';

export type JobState = 'pending' | 'in_progress' | 'completed' | 'failed' | 'cancelled';

export interface FileRef {
  filename: string;
  subfolder: string;
  type: string;
}

export interface SandboxJob {
  id: string;
  /** Queue position number, as self-hosted servers report it. */
  number: number;
  prompt: Record<string, unknown>;
  clientId?: string;
  extraData?: Record<string, unknown>;
  state: JobState;
  /** node id -> output object of its `executed` events, merged. */
  outputs: Record<string, Record<string, unknown>>;
  error?: { exception_type: string; exception_message: string; traceback: string[] };
  createdAt: number;
  /** When it started and ended running (ms), as the job list reports them. */
  startedAt?: number;
  endedAt?: number;
}

/** A stored file: real bytes, or `size` bytes made on the fly when served (for large transfers). */
export type StoredFile = { content: Buffer; contentType?: string } | { size: number; contentType?: string };

/** A preview as a proxy that declared `supports_preview_metadata` receives it. */
export interface EnginePreview {
  /** The node it came from; undefined for a preview without metadata (binary type 1). */
  nodeId?: string;
  imageType: 'jpeg' | 'png';
  image: Buffer;
}

export function fileKey(ref: FileRef): string {
  return `${ref.type}/${ref.subfolder}/${ref.filename}`;
}

export interface GenerationJobsOptions {
  /** The API key the service expects; undefined makes it a self-hosted server that checks none. */
  apiKey?: string;
}

/**
 * Emits 'submitted' (job), 'cancel' (job) and 'interrupt' (job) so the event runner can act on them. The event
 * runner in turn emits what a job does, for the v2 mode's event streams (v2-streams.ts), which listen in process
 * instead of over the WebSocket: 'job-event' (job, type, data) for each text event it sends of a job,
 * 'job-preview' (job, EnginePreview) for each preview, and 'ended' (job) once a run has stopped.
 */
export class GenerationJobs extends EventEmitter {
  readonly jobs = new Map<string, SandboxJob>();
  readonly files = new Map<string, StoredFile>();
  readonly apiKey?: string;
  private nextNumber = 0;

  constructor(options: GenerationJobsOptions = {}) {
    super();
    this.apiKey = options.apiKey;
  }

  get selfHosted(): boolean {
    return this.apiKey === undefined;
  }

  /** Queues a job under `id` (a client-chosen prompt_id) or a new UUID. */
  submit(
    prompt: Record<string, unknown>,
    clientId?: string,
    extraData?: Record<string, unknown>,
    id: string = randomUUID(),
  ): SandboxJob {
    const job: SandboxJob = {
      id,
      number: this.nextNumber++,
      prompt,
      clientId,
      extraData,
      state: 'pending',
      outputs: {},
      createdAt: Date.now(),
    };
    this.jobs.set(job.id, job);
    this.emit('submitted', job);
    return job;
  }

  /** Cancels a pending or running job; false when there is no such job or it has ended. */
  cancel(id: string): boolean {
    const job = this.jobs.get(id);
    if (!job || (job.state !== 'pending' && job.state !== 'in_progress')) return false;
    job.state = 'cancelled';
    this.emit('cancel', job);
    return true;
  }

  /**
   * Takes a pending job out of the queue and forgets it, as a self-hosted server's delete does (no event;
   * afterwards no route knows it). A running job is not touched. False when nothing was removed.
   */
  remove(id: string): boolean {
    const job = this.jobs.get(id);
    if (!job || job.state !== 'pending') return false;
    job.state = 'cancelled';
    this.emit('cancel', job);
    this.jobs.delete(id);
    return true;
  }

  /** Interrupts the running job: only `id` when given, and only if it is running. */
  interrupt(id?: string): SandboxJob | undefined {
    const job = id === undefined ? this.running()[0] : this.jobs.get(id);
    if (!job || job.state !== 'in_progress') return undefined;
    job.state = 'cancelled';
    this.emit('interrupt', job);
    return job;
  }

  running(): SandboxJob[] {
    return [...this.jobs.values()].filter((job) => job.state === 'in_progress');
  }

  pending(): SandboxJob[] {
    return [...this.jobs.values()].filter((job) => job.state === 'pending');
  }
}
