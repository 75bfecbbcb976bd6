/**
 * Comfy API v2, the second dialect (`/api/v2/jobs`, event streams, assets; a self-hosted ComfyUI reaches it
 * through the official comfy-api-proxy). Composes the v2 jobs (v2-jobs.ts: submit with single-use keys,
 * lookups, cancel, the queue node's list), files (v2-files.ts: uploads by hash, downloads by asset id) and
 * event streams (v2-event-streams.ts) behind the ServerDialect interface, and the job-events node's reader of
 * every job (v2-job-watch.ts). v2 asks clients to poll first: its event source is never "open", so the job book
 * polls every job (one list read answers for all), and streams only add progress and an early "ask now". No
 * Node-RED inside.
 */
import { ServiceError } from '../../../http/errors';
import type { CancelOutcome } from '../../jobs/cancels';
import type { JobTimings } from '../../jobs/job-book';
import type {
  FileReference,
  OpenFile,
  QueueState,
  SubmitResult,
  UploadRequest,
  UploadResult,
} from '../../transfer/rest-client';
import type { Workflow } from '../../workflows/workflow';
import type { JobWatchParts } from '../../jobs/server-job-reader';
import type { DialectParts, ServerDialect } from '../dialect';
import { V2EventStreams } from './v2-event-streams';
import { V2Files } from './v2-files';
import { V2JobWatch } from './v2-job-watch';
import { V2Jobs } from './v2-jobs';
import { V2Lookup } from './v2-lookup';

/** The one `extra_data` key a v2 server takes: the partner (Comfy.org) key, whatever the config node calls it. */
const V2_PARTNER_KEY_FIELD = 'api_key_comfy_org';

export class ComfyApiV2Dialect implements ServerDialect {
  readonly name = 'comfy-api-v2' as const;
  readonly lookup: V2Lookup;
  /**
   * Polling is how v2 jobs are followed, so it starts sooner and stays closer than the book's socket-era
   * defaults (2 s growing to 10 s): a job that ends is seen within about 3 s; every check of the same second
   * shares one list read.
   */
  readonly jobTimings: Partial<JobTimings> = { pollInitialMs: 1_000, pollMaxMs: 3_000 };
  private readonly jobs: V2Jobs;
  private readonly files: V2Files;
  private streams?: V2EventStreams;

  constructor(private readonly parts: DialectParts) {
    this.lookup = new V2Lookup(parts.http, { listBytes: parts.listBytes });
    this.jobs = new V2Jobs(parts.http, { listBytes: parts.listBytes, clientId: parts.clientId });
    this.files = new V2Files(parts.http);
  }

  async submit(
    workflow: Workflow,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const result = await this.jobs.submit(
      workflow,
      partnerKeyOnly(extraData, this.parts.partnerKeyField),
      signal,
    );
    this.parts.submitting(result.prompt_id);
    return result;
  }

  cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    return this.jobs.cancel(promptIds, signal);
  }

  interrupt(): Promise<unknown> {
    return Promise.reject(
      new ServiceError(
        'invalid_input',
        'Comfy API v2 has no interrupt: cancel the job by its id instead (the queue node\'s "cancel" with msg.prompt_id)',
      ),
    );
  }

  queueState(signal?: AbortSignal): Promise<QueueState> {
    return this.jobs.queueState(signal);
  }

  upload(request: UploadRequest): Promise<UploadResult> {
    return this.files.upload(request);
  }

  openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile> {
    return this.files.openFile(ref, signal);
  }

  /** The job-events node's reader: the list of our jobs, polled (v2-job-watch.ts). */
  jobWatch(parts: JobWatchParts): V2JobWatch {
    return new V2JobWatch(
      {
        http: this.parts.http,
        lookup: this.lookup,
        listBytes: this.parts.listBytes,
        clientId: this.parts.clientId,
      },
      parts,
    );
  }

  /** The event streams, made on first use. */
  events(): V2EventStreams {
    this.streams ??= new V2EventStreams({
      http: this.parts.http,
      askNow: (promptId) => this.parts.askNow(promptId),
    });
    return this.streams;
  }

  async close(): Promise<void> {
    await this.streams?.close();
  }
}

/**
 * `extra_data` as a v2 server takes it: only the partner key, under v2's name (the proxy refuses any other key
 * with a 400). Other extra data of today's API has no place in v2.
 */
function partnerKeyOnly(
  extraData: Record<string, unknown> | undefined,
  field: string,
): Record<string, unknown> | undefined {
  if (!extraData || !Object.hasOwn(extraData, field)) return undefined;
  return { [V2_PARTNER_KEY_FIELD]: extraData[field] };
}
