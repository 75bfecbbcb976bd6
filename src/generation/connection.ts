/**
 * Everything one graph-gen-config node holds open: the REST client's keep-alive pool (http/), the server's
 * dialect (dialects/: today's API or Comfy API v2, each with its own way to submit, look up, cancel and hear
 * jobs' events) and the jobs awaited through it (jobs/job-book.ts). No Node-RED inside; the config node creates
 * one and closes it.
 */
import { randomUUID } from 'node:crypto';
import { Credential, type AuthSettings } from '../http/auth';
import { HttpClient } from '../http/client';
import { invalidInput } from '../http/errors';
import { checkedProxy } from '../http/proxy';
import type { TransportSettings } from '../http/transport';
import { CancelRegistry, type CancelOutcome } from './jobs/cancels';
import { JobBook, type JobTimings } from './jobs/job-book';
import type { QueueRead } from './jobs/job-lookup';
import { RecentMap } from './jobs/recent-map';
import { createDialect, notOffered, offersOf } from './dialects';
import type { DialectName, JobEventSource, NodeDefinitionSource, ServerDialect } from './dialects/dialect';
import type { SubmitResult } from './transfer/rest-client';
import type { Workflow } from './workflows/workflow';

export type { CancelOutcome } from './jobs/cancels';

export interface GenerationSettings {
  /** e.g. https://gen.example.com; REST paths /api/... are appended. */
  baseUrl: string;
  /** How the server is spoken to: today's API (`comfyui`, the default) or Comfy API v2. */
  dialect?: DialectName;
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

export class GenerationConnection {
  /** Sent as the socket's clientId and as client_id on submit: self-hosted servers route events by it. */
  readonly clientId: string;
  readonly http: HttpClient;
  /** How this server is spoken to: every request about jobs and files goes through it. */
  readonly dialect: ServerDialect;
  /** Every cancel sent through this connection, for the jobs' lives. */
  readonly cancels = new CancelRegistry();
  /** The jobs awaited through this connection, one life each. */
  readonly jobs: JobBook;
  readonly limits: GenerationLimits;
  /** What every request and the socket's handshake carry. */
  readonly credential: Credential;
  /**
   * Jobs this connection submitted (their events come to its socket), each with the socket's connection when it
   * was sent (-1: the socket was not open).
   */
  private readonly submitted = new RecentMap<string, number>(4096);

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
    this.dialect = createDialect(settings.dialect ?? 'comfyui', {
      http: this.http,
      credential: this.credential,
      baseUrl: settings.baseUrl,
      clientId: this.clientId,
      partnerKeyField: settings.partnerKeyField,
      listBytes: this.limits.listBytes,
      keptEventBytes: this.limits.keptEventBytes,
      listRetryMs: settings.jobTimings?.listRetryMs,
      reportedRunning: (promptId) => this.jobs.lifeOf(promptId)?.state === 'running',
      submitting: (promptId) => {
        const events = this.sockets();
        this.submitted.set(promptId, events.isOpen ? events.epoch : -1);
      },
      askNow: (promptId) => this.jobs.checkNow(promptId),
    });
    this.jobs = new JobBook(
      {
        lookup: this.dialect.lookup,
        cancels: this.cancels,
        sockets: () => this.sockets(),
        heardAll: (promptId) => this.heardAll(promptId),
        log: (level, message) => this.sockets().log(level, message),
      },
      { ...this.dialect.jobTimings, ...settings.jobTimings },
    );
  }

  /** Submits a workflow (the dialect settles a submit whose answer was lost: never run twice, never lost). */
  async submit(
    prompt: Workflow,
    extraData?: Record<string, unknown>,
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    return this.dialect.submit(prompt, extraData, signal);
  }

  /** What a submit's extra_data carries when the partner key is to be sent: this server's own key, if it has one. */
  partnerExtra(send: boolean): Record<string, unknown> | undefined {
    const key = this.settings.partnerKey;
    return send && key ? { [this.settings.partnerKeyField]: key } : undefined;
  }

  /**
   * Whether every event of a job this connection submitted is here: it was sent while the socket was open, and
   * the socket has stayed open on that connection since (so its events, kept until its await came, are whole).
   */
  heardAll(promptId: string): boolean {
    const epoch = this.submitted.get(promptId);
    return epoch !== undefined && epoch >= 0 && this.sockets().heardAllSince?.(promptId, epoch) === true;
  }

  /** Whether this connection submitted the job. */
  submittedHere(promptId: string): boolean {
    return this.submitted.has(promptId);
  }

  /** Cancels jobs wherever they are, on the dialect's routes; every await hears of it. */
  async cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    const outcome = await this.dialect.cancel(promptIds, signal);
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
    const body = await this.dialect.interrupt(promptId, signal);
    if (promptId) this.cancels.note([promptId], 'unconfirmed');
    return body;
  }

  /** The jobs waiting and running (one read for all): unreadable is never an empty queue. */
  queue(signal?: AbortSignal): Promise<QueueRead> {
    return this.dialect.lookup.queue(signal);
  }

  /**
   * The server's node definitions, or a refusal in a sentence where its dialect offers none (Comfy API v2): a
   * UI-format workflow cannot be converted there, nor a workflow checked before it is sent.
   */
  definitions(): NodeDefinitionSource {
    if (this.dialect.definitions) return this.dialect.definitions;
    throw notOffered(this.dialect.name, 'nodeDefinitions');
  }

  /** The client saved workflows are read with, or a refusal in a sentence where the dialect keeps none. */
  savedWorkflowsClient(): HttpClient {
    if (offersOf(this.dialect.name).savedWorkflows) return this.http;
    throw notOffered(this.dialect.name, 'savedWorkflows');
  }

  /** Where jobs' events come from (the shared socket, or v2's event streams), created on first use. */
  sockets(): JobEventSource {
    return this.dialect.events();
  }

  async close(): Promise<void> {
    this.jobs.close();
    await Promise.all([this.dialect.close(), this.http.close()]);
  }
}
