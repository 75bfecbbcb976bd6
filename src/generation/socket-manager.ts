/**
 * The one WebSocket of a config node, shared by every node that uses it. (Built by issue 4; this is the
 * interface the REST side relies on.)
 */
export interface SocketManagerOptions {
  /** The service's base address (http/https); the socket goes to the same host with ws/wss at /ws. */
  baseUrl: string;
  /** The API key, sent as `token`; undefined for a self-hosted server. */
  apiKey?: string;
  /** The UUID sent as `clientId` (and as `client_id` on submit), kept for the config node's life. */
  clientId: string;
}

export class SocketManager {
  constructor(readonly options: SocketManagerOptions) {}

  /** Opens the socket if needed and waits until it is open, at most `timeoutMs`; false if it is not. */
  async ready(_timeoutMs: number): Promise<boolean> {
    return false;
  }

  async close(): Promise<void> {}
}
