/**
 * Everything one graph-gen-config node holds open: the REST client's keep-alive pool and the shared
 * WebSocket manager (opened on first use). No Node-RED inside; the config node creates one and closes it.
 */
import { randomUUID } from 'node:crypto';
import { HttpClient } from '../http/client';
import { invalidInput } from '../http/errors';
import { CancelRegistry } from './jobs/cancels';
import { JobLookup, type QueueIds } from './jobs/job-status';
import { GenerationRestClient } from './transfer/rest-client';
import { SocketManager } from './jobs/socket-manager';

export interface GenerationSettings {
  /** e.g. https://gen.example.com; REST paths /api/... are appended. */
  baseUrl: string;
  /** Sent as X-API-Key and as the socket's token; undefined = a self-hosted server. */
  apiKey?: string;
  /** Sent in extra_data under `partnerKeyField` on submits that need it. */
  partnerKey?: string;
  /** The field of extra_data that carries the partner key (the spec's name by default). */
  partnerKeyField: string;
  /** Bounds on what the service may make this connection hold or wait for (defaults: GENERATION_LIMITS). */
  limits?: Partial<GenerationLimits>;
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

/** What a cancel did to each job it named. */
export interface CancelOutcome {
  /** The answer to `POST /api/queue {delete}` (empty on self-hosted servers). */
  body: unknown;
  /** Taken out of the queue: they will never run. */
  removed: string[];
  /** They were running and got the targeted interrupt: they end with `execution_interrupted`. */
  interrupted: string[];
  /** In no queue when cancelled: ended already, or unknown to the service. */
  notQueued: string[];
}

export class GenerationConnection {
  /** Sent as the socket's clientId and as client_id on submit: self-hosted servers route events by it. */
  readonly clientId = randomUUID();
  readonly http: HttpClient;
  /** The spec's REST calls (upload, submit, download, queue) on `http`. */
  readonly rest: GenerationRestClient;
  /** Job status, outputs and errors over REST, on the routes this server has. */
  readonly lookup: JobLookup;
  /** Every cancel sent through this connection, for the await-job nodes. */
  readonly cancels = new CancelRegistry();
  private socketManager?: SocketManager;
  readonly limits: GenerationLimits;

  /** Refuses (invalid_input) a base address that is not http(s). */
  constructor(readonly settings: GenerationSettings) {
    checkedBaseUrl(settings.baseUrl);
    this.limits = { ...GENERATION_LIMITS, ...settings.limits };
    this.http = new HttpClient({
      maxJsonBytes: this.limits.answerBytes,
      totalTimeoutMs: this.limits.requestTimeoutMs,
      baseUrl: settings.baseUrl,
      headers: settings.apiKey ? { 'x-api-key': settings.apiKey } : {},
      secrets: [settings.apiKey, settings.partnerKey],
      serviceName: 'the generation service',
    });
    this.rest = new GenerationRestClient(this.http, settings.partnerKeyField, this.limits.listBytes);
    this.lookup = new JobLookup(this.http, this.limits.listBytes);
  }

  /**
   * Cancels jobs wherever they are. `POST /api/queue {delete}` takes pending jobs out of the queue (a
   * self-hosted server leaves a running job alone and sends no event), so a job still running afterwards
   * also gets the targeted interrupt `POST /api/interrupt {prompt_id}`. The queue is read before and after
   * to say what happened to each job; every await-job of this connection hears of it.
   */
  async cancel(promptIds: string[], signal?: AbortSignal): Promise<CancelOutcome> {
    const before = await this.queueIds(signal);
    const body = await this.rest.cancel(promptIds, signal);
    const after = (await this.queueIds(signal)) ?? before;
    const interrupted = promptIds.filter((id) => after?.running.has(id));
    for (const id of interrupted) await this.rest.interrupt(id, signal);
    const queued = (id: string) => !before || before.running.has(id) || before.pending.has(id);
    const removed = promptIds.filter((id) => !interrupted.includes(id) && queued(id));
    const notQueued = promptIds.filter((id) => !interrupted.includes(id) && !queued(id));
    this.cancels.note(removed, 'removed');
    this.cancels.note(interrupted, 'interrupted');
    this.cancels.note(notQueued, 'requested');
    return { body, removed, interrupted, notQueued };
  }

  /** Interrupts the running job: only `promptId` when given (and only if it is the one running). */
  async interrupt(promptId?: string, signal?: AbortSignal): Promise<unknown> {
    const body = await this.rest.interrupt(promptId, signal);
    if (promptId) this.cancels.note([promptId], 'interrupted');
    return body;
  }

  /** The ids in the queue (JobLookup.queueIds), or undefined when it cannot be read (callers go on without it). */
  async queueIds(signal?: AbortSignal): Promise<QueueIds | undefined> {
    try {
      return await this.lookup.queueIds(signal);
    } catch (error) {
      if (signal?.aborted) throw error;
      return undefined;
    }
  }

  /** The shared socket manager, created on first use. */
  sockets(): SocketManager {
    this.socketManager ??= new SocketManager({
      baseUrl: this.settings.baseUrl,
      apiKey: this.settings.apiKey,
      secrets: [this.settings.partnerKey],
      clientId: this.clientId,
      limits: { keptBytes: this.limits.keptEventBytes },
    });
    return this.socketManager;
  }

  async close(): Promise<void> {
    await Promise.all([this.socketManager?.close(), this.http.close()]);
  }
}
