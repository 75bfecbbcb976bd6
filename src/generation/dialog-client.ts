/**
 * A client for the requests a config dialog makes to the server its typed (or stored) settings name: test
 * connection, the submit dialog's node definitions, saved workflows. The settings come from a person at an
 * editor, so they are checked here first and refused with a sentence. No Node-RED inside.
 */
import { Credential, type AuthSettings } from '../http/auth';
import { HttpClient } from '../http/client';
import { ServiceError } from '../http/errors';
import { checkedProxy } from '../http/proxy';
import type { RetryPolicy } from '../http/retry';
import type { TransportSettings } from '../http/transport';

/** The settings a dialog names a server by. */
export interface DialogTarget {
  baseUrl: string;
  /** The API key, when `auth` is absent (the API-key scheme). */
  apiKey?: string;
  /** How requests prove who sends them (absent: the API-key scheme with `apiKey`). */
  auth?: AuthSettings;
  /** TLS settings and proxy. */
  transport?: TransportSettings;
}

/** How long a person waits at a dialog for one request, retries included; past it they get a sentence. */
export const DIALOG_WAIT_MS = 30_000;

/**
 * The client (the caller closes it), the host to name in sentences, and the credential (for a refusal's
 * sentence). The key is sent as the config node sends it. By default one quick retry and `DIALOG_WAIT_MS`;
 * `limits` sets others. An address that is not http(s), a proxy or credential that cannot be used are refused
 * with a ServiceError `invalid_input`.
 */
export function dialogClient(
  target: DialogTarget,
  limits: { retry?: RetryPolicy; timeoutMs?: number } = {},
): { http: HttpClient; host: string; credential: Credential } {
  let address: URL;
  try {
    address = new URL(target.baseUrl.trim());
    if (address.protocol !== 'http:' && address.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new ServiceError(
      'invalid_input',
      'The base address is not an http(s) address, e.g. https://gen.example.com: set it in the config node.',
    );
  }
  let credential: Credential;
  try {
    checkedProxy(target.transport?.proxy);
    credential = Credential.from(target.auth ?? { scheme: 'apiKey', secret: target.apiKey });
  } catch (error) {
    throw new ServiceError('invalid_input', `The settings cannot be used: ${(error as Error).message}.`);
  }
  const timeoutMs = limits.timeoutMs ?? DIALOG_WAIT_MS;
  const http = new HttpClient({
    baseUrl: address.href,
    credential,
    transport: target.transport,
    serviceName: 'the generation service',
    retry: limits.retry ?? { attempts: 2, baseDelayMs: 200, maxDelayMs: 500 },
    timeoutMs,
    totalTimeoutMs: timeoutMs,
  });
  return { http, host: address.host, credential };
}
