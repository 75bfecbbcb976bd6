/**
 * The v2 mode's jobs as the proxy sees them: its own record of each job it submitted (creation time, metadata,
 * priority, the workflow as run), its single-use Idempotency-Keys, and each job's status derived on every
 * read from the engine underneath, the way the proxy derives it from ComfyUI (app.py `_status_of`): an ended
 * run is in "history" (succeeded, failed, or canceled when interrupted), else the queue says running or queued
 * (1-based among the waiting), else a job the proxy knows is `expired`. Also the Job shape every route answers.
 */
import type { GenerationJobs, SandboxJob } from './generation-jobs';
import type { UploadRecord } from './generation-service';
import type { OutputIds } from './v2-output-ids';
import { MICROS_PER_DAY, PyFloat, guessContentType, nowMicros, pyIso } from './v2-wire';

/** The engine underneath, as the v2 mode reaches it (in process: the proxy's ComfyUI). */
export interface V2Upstream {
  /** Jobs, the queue and the files (inputs and outputs). */
  readonly jobs: GenerationJobs;
  /** The uploads the engine took, in order (the generation service's log). */
  readonly uploads: UploadRecord[];
  /** The address of today's API of the engine, which health names. */
  readonly url: string;
  /** False while the sandbox plays "ComfyUI unreachable". */
  readonly reachable: boolean;
}

export interface V2JobRecord {
  id: string;
  /** Microseconds since the epoch; unique and increasing, so the newest-first list has no ties. */
  createdMicros: number;
  /** The graph as it ran (core/ASSET references replaced). */
  workflow: Record<string, unknown>;
  metadata?: string;
  priority?: number;
}

export type V2Status = 'queued' | 'running' | 'canceling' | 'canceled' | 'succeeded' | 'failed' | 'expired';
export const V2_STATUSES: readonly V2Status[] = [
  'queued',
  'running',
  'succeeded',
  'canceling',
  'canceled',
  'failed',
  'expired',
];
const ENDED: ReadonlySet<string> = new Set(['succeeded', 'failed', 'canceled', 'expired']);

export function isEnded(status: string): boolean {
  return ENDED.has(status);
}

/** What the proxy's `_status_of` makes of a job; `unknown` is a job the engine does not have. */
export interface DerivedStatus {
  status: 'queued' | 'running' | 'canceled' | 'succeeded' | 'failed' | 'unknown';
  outputs: Array<Record<string, unknown>>;
  queuePosition?: number;
  progress?: Record<string, unknown>;
  error?: Record<string, unknown>;
}

/** The fixed progress of a running job when polled (live numbers are only on its event stream). */
export function zeroProgress(): Record<string, unknown> {
  return { value: new PyFloat(0), nodes_done: 0, nodes_total: 0 };
}

/** ComfyUI's output keys the proxy reports, and their v2 kinds (others, such as SaveText's `files`, are dropped). */
const OUTPUT_KINDS = new Map([
  ['images', 'image'],
  ['gifs', 'video'],
  ['audio', 'audio'],
  ['text', 'text'],
  ['latents', 'latent'],
]);

/** Claimed keys kept (FIFO), as the proxy's. */
const MAX_IDEMPOTENCY_KEYS = 10_000;

export class V2JobBook {
  readonly records = new Map<string, V2JobRecord>();
  private readonly keys = new Set<string>();
  /** The failing node of each failed job, as ComfyUI keeps it in history's `execution_error` message. */
  private readonly failures = new Map<string, { nodeId: unknown; classType: unknown }>();
  private lastMicros = 0;
  private readonly onEngineEvent = (job: SandboxJob, type: string, data: Record<string, unknown>) => {
    if (type === 'execution_error' && this.records.has(job.id))
      this.failures.set(job.id, { nodeId: data.node_id ?? null, classType: data.node_type ?? null });
  };

  constructor(
    private readonly upstream: V2Upstream,
    private readonly outputIds: OutputIds,
  ) {
    upstream.jobs.on('job-event', this.onEngineEvent);
  }

  remember(record: Omit<V2JobRecord, 'createdMicros'>): V2JobRecord {
    const micros = Math.max(nowMicros(), this.lastMicros + 1);
    this.lastMicros = micros;
    const full = { ...record, createdMicros: micros };
    this.records.set(full.id, full);
    return full;
  }

  /** Claims an Idempotency-Key; false when it was claimed before. */
  claim(key: string): boolean {
    if (this.keys.has(key)) return false;
    this.keys.add(key);
    if (this.keys.size > MAX_IDEMPOTENCY_KEYS) this.keys.delete(this.keys.values().next().value as string);
    return true;
  }

  release(key: string): void {
    this.keys.delete(key);
  }

  /** The engine's job as history, then the queue, would show it. */
  statusOf(id: string, base: string): DerivedStatus {
    const job = this.upstream.jobs.jobs.get(id);
    if (!job) return { status: 'unknown', outputs: [] };
    const ended = job.state === 'completed' || job.state === 'failed' || job.state === 'cancelled';
    if (ended && job.endedAt !== undefined) {
      const outputs = this.outputs(job, base);
      if (job.state === 'cancelled') return { status: 'canceled', outputs };
      if (job.state === 'completed') return { status: 'succeeded', outputs };
      return { status: 'failed', outputs, error: this.errorOf(job) };
    }
    // A run stops at its next step after an interrupt: until then ComfyUI's queue still lists it as running.
    if (job.state === 'in_progress' || (job.startedAt !== undefined && job.endedAt === undefined))
      return { status: 'running', outputs: [], progress: zeroProgress() };
    if (job.state === 'pending') {
      const position = this.upstream.jobs.pending().findIndex((waiting) => waiting.id === id);
      if (position >= 0) return { status: 'queued', outputs: [], queuePosition: position + 1 };
    }
    return { status: 'unknown', outputs: [] };
  }

  private errorOf(job: SandboxJob): Record<string, unknown> {
    const failure = this.failures.get(job.id);
    if (!job.error || !failure) {
      return {
        code: 'node_execution_error',
        message: 'execution failed',
        node_id: null,
        class_type: null,
        traceback: null,
      };
    }
    return {
      code: 'node_execution_error',
      message: job.error.exception_message,
      node_id: failure.nodeId,
      class_type: failure.classType,
      traceback: null,
    };
  }

  /** A job's outputs as the proxy lists them: one item per file, in the order history holds them. */
  private outputs(job: SandboxJob, base: string): Array<Record<string, unknown>> {
    const items: Array<Record<string, unknown>> = [];
    for (const [nodeId, output] of Object.entries(job.outputs)) {
      for (const [key, files] of Object.entries(output)) {
        const kind = OUTPUT_KINDS.get(key);
        if (!kind || !Array.isArray(files)) continue;
        for (const file of files as unknown[]) {
          if (!file || typeof file !== 'object') continue;
          const { filename, subfolder, type } = file as Record<string, unknown>;
          if (typeof filename !== 'string') continue;
          const id = this.outputIds.mint(job.id, {
            filename,
            subfolder: typeof subfolder === 'string' ? subfolder : '',
            type: typeof type === 'string' ? type : 'output',
          });
          items.push({
            node_id: nodeId,
            name: filename,
            type: kind,
            content_type: guessContentType(filename),
            size_bytes: 0,
            id,
            hash: null,
            url: `${base}/api/v2/assets/${id}/content`,
            url_expires_at: pyIso(nowMicros() + MICROS_PER_DAY),
            job_id: job.id,
          });
        }
      }
    }
    return items;
  }

  /** The Job shape (app.py `_job`): a job the engine forgot is `expired`. */
  jobJson(id: string, derived: DerivedStatus, base: string, status?: V2Status): Record<string, unknown> {
    const record = this.records.get(id);
    const created = record?.createdMicros ?? nowMicros();
    const body: Record<string, unknown> = {
      id,
      status: status ?? (derived.status === 'unknown' ? 'expired' : derived.status),
      created_at: pyIso(created),
      started_at: null,
      completed_at: null,
      expires_at: pyIso(created + MICROS_PER_DAY),
      queue_position: derived.queuePosition ?? null,
      progress: derived.progress ?? null,
      outputs: derived.outputs,
      error: derived.error ?? null,
      outputs_reused: false,
      urls: {
        self: `${base}/api/v2/jobs/${id}`,
        events: `${base}/api/v2/jobs/${id}/events`,
        cancel: `${base}/api/v2/jobs/${id}/cancel`,
      },
    };
    if (record?.metadata !== undefined) body.metadata = record.metadata;
    if (record?.priority !== undefined) body.priority = record.priority;
    return body;
  }

  /** The jobs the proxy recorded, newest first. */
  newestFirst(): V2JobRecord[] {
    return [...this.records.values()].sort((a, b) => b.createdMicros - a.createdMicros);
  }

  close(): void {
    this.upstream.jobs.off('job-event', this.onEngineEvent);
  }
}
