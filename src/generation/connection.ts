/**
 * Everything one graph-gen-config node holds open: the REST client's keep-alive pool and the shared
 * WebSocket manager (opened on first use). No Node-RED inside; the config node creates one and closes it.
 */
import { randomUUID } from 'node:crypto';
import { HttpClient } from '../http/client';
import { GenerationRestClient } from './rest-client';
import { SocketManager } from './socket-manager';

export interface GenerationSettings {
  /** e.g. https://gen.example.com; REST paths /api/... are appended. */
  baseUrl: string;
  /** Sent as X-API-Key and as the socket's token; undefined = a self-hosted server. */
  apiKey?: string;
  /** Sent in extra_data under `partnerKeyField` on submits that need it. */
  partnerKey?: string;
  /** The field of extra_data that carries the partner key (the spec's name by default). */
  partnerKeyField: string;
}

export const DEFAULT_PARTNER_KEY_FIELD = 'api_key_service_org';

export class GenerationConnection {
  /** Sent as the socket's clientId and as client_id on submit: self-hosted servers route events by it. */
  readonly clientId = randomUUID();
  readonly http: HttpClient;
  /** The spec's REST calls (upload, submit, download, queue) on `http`. */
  readonly rest: GenerationRestClient;
  private socketManager?: SocketManager;

  constructor(readonly settings: GenerationSettings) {
    this.http = new HttpClient({
      baseUrl: settings.baseUrl,
      headers: settings.apiKey ? { 'x-api-key': settings.apiKey } : {},
      secrets: [settings.apiKey, settings.partnerKey],
      serviceName: 'the generation service',
    });
    this.rest = new GenerationRestClient(this.http);
  }

  /** The shared socket manager, created on first use. */
  sockets(): SocketManager {
    this.socketManager ??= new SocketManager({
      baseUrl: this.settings.baseUrl,
      apiKey: this.settings.apiKey,
      clientId: this.clientId,
    });
    return this.socketManager;
  }

  async close(): Promise<void> {
    await Promise.all([this.socketManager?.close(), this.http.close()]);
  }
}
