/**
 * Today's API, the first dialect: ComfyUI, self-hosted or cloud (`/api/prompt`, `/api/jobs`, `/api/view`, the
 * shared `/ws` socket). It composes the REST client (transfer/rest-client.ts), the status routes (jobs/
 * job-lookup.ts), the socket (jobs/socket-manager.ts) and the cancel routes (jobs/cancels.ts) behind the
 * ServerDialect interface. No Node-RED inside.
 */
import { randomUUID } from 'node:crypto';
import { mayHaveReached, outcomeUnknown } from '../../../http/client';
import { ServiceError } from '../../../http/errors';
import { cancelJobs, type CancelOutcome } from '../../jobs/cancels';
import { JobLookup } from '../../jobs/job-lookup';
import { ServerJobReader, type JobWatchParts } from '../../jobs/server-job-reader';
import { ServerKnowledge } from '../../jobs/server-profile';
import { SocketManager } from '../../jobs/socket-manager';
import {
  GenerationRestClient,
  type FileReference,
  type OpenFile,
  type QueueState,
  type SubmitResult,
  type UploadRequest,
  type UploadResult,
} from '../../transfer/rest-client';
import type { Workflow } from '../../workflows/workflow';
import type { DialectParts, NodeDefinitionSource, ServerDialect } from '../dialect';

/**
 * A submit whose answer was lost is asked about after these waits (a server may still be handling it), each ask
 * bounded in time; it is sent again only once two asks said the server does not have it.
 */
const LOST_ANSWER_WAITS_MS = [1_000, 2_000, 2_000];
const LOST_ANSWER_ASK_MS = 3_000;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

export class ComfyUiDialect implements ServerDialect {
  readonly name = 'comfyui' as const;
  /** The spec's REST calls (upload, submit, download, queue). */
  readonly rest: GenerationRestClient;
  /** Job status, outputs and errors over REST, on the routes this server has. */
  readonly lookup: JobLookup;
  /** What the server is (its version), read once. */
  readonly server: ServerKnowledge;
  private socketManager?: SocketManager;

  constructor(private readonly parts: DialectParts) {
    this.rest = new GenerationRestClient(parts.http, parts.partnerKeyField, parts.listBytes);
    this.lookup = new JobLookup(parts.http, { listBytes: parts.listBytes, listRetryMs: parts.listRetryMs });
    this.server = new ServerKnowledge(parts.http);
  }

  /**
   * Submits a workflow under a job id of our own (a lower-case UUID: ComfyUI 0.25 and later require that form,
   * older ones take it). A submit whose answer was lost on the way (the connection broke after the body went)
   * is not lost nor run twice: the server is asked for the job by its id, and it is sent again only once the
   * server says it does not have it.
   */
  async submit(
    prompt: Workflow,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const promptId = randomUUID();
    this.parts.submitting(promptId);
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await this.rest.submit(prompt, this.parts.clientId, extraData, signal, promptId);
        if (result.prompt_id !== promptId) this.parts.submitting(result.prompt_id);
        // The same id as the one minted here: that string is kept, not the answer's copy of it (each of
        // thousands of awaited jobs keeps its id in several maps; one string serves them all).
        else result.prompt_id = promptId;
        return result;
      } catch (error) {
        // Only a request that may have reached the server: one that never left is not there.
        if (!outcomeUnknown(error, attempt, signal)) throw error;
        if (await this.hasJob(promptId, error, signal)) return { prompt_id: promptId };
      }
    }
  }

  /**
   * After a submit whose answer was lost: whether the server has the job. A moment is left for a server still
   * handling it, and the answer must be read: a job is sent again only when the server says it has none.
   */
  private async hasJob(promptId: string, lost: ServiceError, signal?: AbortSignal): Promise<boolean> {
    let unknown = 0;
    for (const wait of LOST_ANSWER_WAITS_MS) {
      await sleep(wait, signal);
      const bounded = AbortSignal.any([AbortSignal.timeout(LOST_ANSWER_ASK_MS), ...(signal ? [signal] : [])]);
      const answer = await this.lookup.status(promptId, bounded).catch((error: unknown) => {
        if (signal?.aborted) throw error;
        return undefined;
      });
      if (answer?.kind === 'phase') return true;
      if (answer?.kind === 'unknown' && ++unknown === 2) return false;
    }
    // It may be there: never sent anywhere else (a pool's failover).
    throw mayHaveReached(
      new ServiceError(
        'network',
        `${lost.message}; the server could not tell whether it has job ${promptId}, so it was not sent again: check the queue before you submit it again`,
      ),
    );
  }

  /** Cancels jobs wherever they are, on the routes the server has (jobs/cancels.ts). */
  cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    return cancelJobs(
      promptIds,
      {
        http: this.parts.http,
        lookup: this.lookup,
        rest: this.rest,
        cancelRoute: () => this.server.hasCancelRoute(signal),
        cancelRouteMissing: () => this.server.noCancelRoute(),
        targetedInterruptSafe: () => this.server.targetedInterrupts(signal),
        reportedRunning: (promptId) => this.parts.reportedRunning(promptId),
      },
      signal,
    );
  }

  interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown> {
    return this.rest.interrupt(promptId, signal);
  }

  queueState(signal?: AbortSignal): Promise<QueueState> {
    return this.rest.queue(signal);
  }

  upload(request: UploadRequest): Promise<UploadResult> {
    return this.rest.upload(request);
  }

  openFile(ref: FileReference, signal?: AbortSignal): Promise<OpenFile> {
    return this.rest.openFile(ref, signal);
  }

  /** The REST client caches `/api/object_info`. */
  get definitions(): NodeDefinitionSource {
    return this.rest;
  }

  /** The job-events node's reader: the queue, `/api/jobs` and the queue's owners (jobs/server-job-reader.ts). */
  jobWatch(parts: JobWatchParts): ServerJobReader {
    return new ServerJobReader(
      { http: this.parts.http, lookup: this.lookup, listBytes: this.parts.listBytes },
      parts,
    );
  }

  /** The shared socket manager, created on first use. */
  events(): SocketManager {
    // Asked once per await (and per event of a few): made once, and nothing else done on later calls.
    if (this.socketManager) return this.socketManager;
    const { http, credential, baseUrl, clientId } = this.parts;
    const base = http.url('/');
    this.socketManager = new SocketManager({
      baseUrl,
      token: credential.socketToken,
      headers: credential.headers,
      connectOptions: () => http.transport.socketOptions(base),
      credentialName: credential.name ?? 'a connection without credentials',
      // The HttpClient's: the credential's, the partner key, the proxy's password, the client key's passphrase.
      secrets: http.secretsForReports(),
      clientId,
      limits: { keptBytes: this.parts.keptEventBytes },
    });
    return this.socketManager;
  }

  async close(): Promise<void> {
    await this.socketManager?.close();
  }
}
