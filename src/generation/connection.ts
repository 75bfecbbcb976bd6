/**
 * Everything one graph-gen-config node holds open, composed from the three parts of src/generation: the REST
 * client's keep-alive pool (transfer/), the shared WebSocket and the jobs awaited over it (jobs/), and what the
 * server is. No Node-RED inside; the config node creates one and closes it.
 */
import { randomUUID } from 'node:crypto';
import { Credential, type AuthSettings } from '../http/auth';
import { HttpClient, mayHaveReachedService } from '../http/client';
import { ServiceError, invalidInput } from '../http/errors';
import { checkedProxy } from '../http/proxy';
import type { TransportSettings } from '../http/transport';
import { CancelRegistry, cancelJobs, type CancelOutcome } from './jobs/cancels';
import { JobBook, type JobTimings } from './jobs/job-book';
import { JobLookup, type QueueRead } from './jobs/job-lookup';
import { RecentMap } from './jobs/recent-map';
import { ServerKnowledge } from './jobs/server-profile';
import { SocketManager } from './jobs/socket-manager';
import { GenerationRestClient, type SubmitResult } from './transfer/rest-client';
import type { Workflow } from './workflows/workflow';

export type { CancelOutcome } from './jobs/cancels';

export interface GenerationSettings {
  /** e.g. https://gen.example.com; REST paths /api/... are appended. */
  baseUrl: string;
  /** Sent as X-API-Key and as the socket's token; undefined = a self-hosted server. Used when `auth` is absent. */
  apiKey?: string;
  /**
   * How requests and the socket's handshake prove who sends them (http/auth.ts); absent: the API-key scheme
   * with `apiKey`, as before there was a choice. Only the API-key scheme makes a cloud service of it.
   */
  auth?: AuthSettings;
  /** TLS settings for the service's host and the proxy rule (http/transport.ts); absent: direct. */
  transport?: TransportSettings;
  /** Sent in extra_data under `partnerKeyField` on submits that need it. */
  partnerKey?: string;
  /** The field of extra_data that carries the partner key (the spec's name by default). */
  partnerKeyField: string;
  /** Bounds on what the service may make this connection hold or wait for (defaults: GENERATION_LIMITS). */
  limits?: Partial<GenerationLimits>;
  /**
   * The socket's id (a UUID); by default a new one. A config node keeps its own across restarts, so a
   * self-hosted server's events of jobs submitted before still reach it.
   */
  clientId?: string;
  /** When jobs are checked over REST (defaults: JobBook.defaultTimings); tests make them short. */
  jobTimings?: Partial<JobTimings> & { listRetryMs?: number };
}

/** What a misbehaving or overloaded service may cost: each is a config node setting. */
export interface GenerationLimits {
  /** The largest status, submit or upload answer read. */
  answerBytes: number;
  /** The largest queue list or node definitions read (each queue entry carries its whole workflow). */
  listBytes: number;
  /** How long a request with a JSON answer may take, body included. */
  requestTimeoutMs: number;
  /** Events kept on the socket for jobs nobody awaits yet, all together. */
  keptEventBytes: number;
}

export const GENERATION_LIMITS: GenerationLimits = {
  answerBytes: 8 * 1024 * 1024,
  listBytes: 64 * 1024 * 1024,
  requestTimeoutMs: 120_000,
  keptEventBytes: 64 * 1024 * 1024,
};

export const DEFAULT_PARTNER_KEY_FIELD = 'api_key_service_org';

/**
 * A submit whose answer was lost is asked about after these waits (a server may still be handling it), each ask
 * bounded in time; it is sent again only once two asks said the server does not have it.
 */
const LOST_ANSWER_WAITS_MS = [1_000, 2_000, 2_000];
const LOST_ANSWER_ASK_MS = 3_000;

/** The base address as typed, checked: an http(s) address, or a refusal that says how to write it. */
export function checkedBaseUrl(raw: string): string {
  const text = raw.trim();
  let address: URL | undefined;
  try {
    address = new URL(text);
  } catch {
    address = undefined;
  }
  if (!address || (address.protocol !== 'http:' && address.protocol !== 'https:')) {
    throw invalidInput(
      `the base address ${JSON.stringify(text.slice(0, 200))} of the graph-gen-config node is not an http(s) address: write it with its scheme, e.g. https://gen.example.com or http://127.0.0.1:8188`,
    );
  }
  return text;
}

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

export class GenerationConnection {
  /** Sent as the socket's clientId and as client_id on submit: self-hosted servers route events by it. */
  readonly clientId: string;
  readonly http: HttpClient;
  /** The spec's REST calls (upload, submit, download, queue) on `http`. */
  readonly rest: GenerationRestClient;
  /** Job status, outputs and errors over REST, on the routes this server has. */
  readonly lookup: JobLookup;
  /** What the server is (its version), read once. */
  readonly server: ServerKnowledge;
  /** Every cancel sent through this connection, for the jobs' lives. */
  readonly cancels = new CancelRegistry();
  /** The jobs awaited through this connection, one life each. */
  readonly jobs: JobBook;
  readonly limits: GenerationLimits;
  /** What every request and the socket's handshake carry. */
  readonly credential: Credential;
  /** Jobs this connection submitted (their events come to its socket). */
  private readonly submitted = new RecentMap<string, true>(4096);
  private socketManager?: SocketManager;

  /**
   * Refuses (invalid_input) a base address that is not http(s), authentication settings that cannot be sent,
   * and a proxy address that cannot be read.
   */
  constructor(readonly settings: GenerationSettings) {
    checkedBaseUrl(settings.baseUrl);
    this.clientId = settings.clientId ?? randomUUID();
    checkedProxy(settings.transport?.proxy);
    this.limits = { ...GENERATION_LIMITS, ...settings.limits };
    this.credential = Credential.from(settings.auth ?? { scheme: 'apiKey', secret: settings.apiKey });
    this.http = new HttpClient({
      maxJsonBytes: this.limits.answerBytes,
      totalTimeoutMs: this.limits.requestTimeoutMs,
      baseUrl: settings.baseUrl,
      credential: this.credential,
      transport: settings.transport,
      secrets: [settings.apiKey, settings.partnerKey],
      serviceName: 'the generation service',
    });
    this.rest = new GenerationRestClient(this.http, settings.partnerKeyField, this.limits.listBytes);
    this.lookup = new JobLookup(this.http, {
      listBytes: this.limits.listBytes,
      listRetryMs: settings.jobTimings?.listRetryMs,
    });
    this.server = new ServerKnowledge(this.http);
    this.jobs = new JobBook(
      {
        lookup: this.lookup,
        cancels: this.cancels,
        sockets: () => this.sockets(),
        log: (level, message) => this.sockets().log(level, message),
      },
      settings.jobTimings,
    );
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
    this.submitted.set(promptId, true);
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await this.rest.submit(prompt, this.clientId, extraData, signal, promptId);
        if (result.prompt_id !== promptId) this.submitted.set(result.prompt_id, true);
        return result;
      } catch (error) {
        // Only a request that may have reached the server: one that never left is not there.
        if (
          signal?.aborted ||
          !(error instanceof ServiceError) ||
          !mayHaveReachedService(error) ||
          attempt > 0
        )
          throw error;
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
    throw new ServiceError(
      'network',
      `${lost.message}; the server could not tell whether it has job ${promptId}, so it was not sent again: check the queue before you submit it again`,
    );
  }

  /** Whether this connection submitted the job. */
  submittedHere(promptId: string): boolean {
    return this.submitted.has(promptId);
  }

  /** Cancels jobs wherever they are, on the routes the server has (jobs/cancels.ts); every await hears of it. */
  async cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    const outcome = await cancelJobs(
      promptIds,
      {
        http: this.http,
        lookup: this.lookup,
        rest: this.rest,
        cancelRoute: () => this.server.hasCancelRoute(signal),
        cancelRouteMissing: () => this.server.noCancelRoute(),
        targetedInterruptSafe: () => this.server.targetedInterrupts(signal),
        reportedRunning: (promptId) => this.jobs.lifeOf(promptId)?.state === 'running',
      },
      signal,
    );
    this.cancels.note(outcome.removed, 'removed');
    this.cancels.note(outcome.interrupted, 'interrupted');
    this.cancels.note(outcome.unconfirmed, 'unconfirmed');
    for (const id of outcome.notQueued) this.cancels.note([id], 'ended');
    return outcome;
  }

  /**
   * Interrupts the running job: only `promptId` when given (and only if it is the one running). The server's
   * answer does not say whether it ran (a waiting job is left as it is), so its awaits ask the server.
   */
  async interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown> {
    const body = await this.rest.interrupt(promptId, signal);
    if (promptId) this.cancels.note([promptId], 'unconfirmed');
    return body;
  }

  /** The jobs waiting and running (JobLookup.queue): unreadable is never an empty queue. */
  queue(signal?: AbortSignal): Promise<QueueRead> {
    return this.lookup.queue(signal);
  }

  /** The shared socket manager, created on first use. */
  sockets(): SocketManager {
    const base = this.http.url('/');
    this.socketManager ??= new SocketManager({
      baseUrl: this.settings.baseUrl,
      token: this.credential.socketToken,
      headers: this.credential.headers,
      connectOptions: () => this.http.transport.socketOptions(base),
      credentialName: this.credential.name ?? 'a connection without credentials',
      // The HttpClient's: the credential's, the partner key, the proxy's password, the client key's passphrase.
      secrets: this.http.secretsForReports(),
      clientId: this.clientId,
      limits: { keptBytes: this.limits.keptEventBytes },
    });
    return this.socketManager;
  }

  async close(): Promise<void> {
    this.jobs.close();
    await Promise.all([this.socketManager?.close(), this.http.close()]);
  }
}
