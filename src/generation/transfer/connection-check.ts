/**
 * The config dialog's "test connection": one quick call to the service with the typed or stored credentials,
 * TLS settings and proxy, answered as a sentence a user can act on. No Node-RED inside.
 */
import { Credential, type AuthSettings } from '../../http/auth';
import { HttpClient, failedOnTheWay } from '../../http/client';
import { ServiceError } from '../../http/errors';
import { checkedProxy } from '../../http/proxy';
import type { TransportSettings } from '../../http/transport';

export interface ConnectionCheck {
  ok: boolean;
  /** unauthorized, network, ... or 'ok'. */
  code: string;
  message: string;
}

/** What to test: the address, how requests prove who sends them, TLS and proxy. */
export interface CheckTarget {
  baseUrl: string;
  /** The API key, when `auth` is absent (the API-key scheme). */
  apiKey?: string;
  auth?: AuthSettings;
  transport?: TransportSettings;
}

const CHECK_TIMEOUT_MS = 10_000;

/** Lists the queue (falling back to object_info when a server has no queue route) and says what happened. */
export async function checkConnection(target: CheckTarget): Promise<ConnectionCheck> {
  let address: URL;
  try {
    address = new URL(target.baseUrl);
    if (address.protocol !== 'http:' && address.protocol !== 'https:') throw new Error('not http');
  } catch {
    return {
      ok: false,
      code: 'invalid_input',
      message: 'The base address is not an http(s) address, e.g. https://gen.example.com.',
    };
  }
  let credential: Credential;
  try {
    checkedProxy(target.transport?.proxy);
    credential = Credential.from(target.auth ?? { scheme: 'apiKey', secret: target.apiKey });
  } catch (error) {
    return {
      ok: false,
      code: 'invalid_input',
      message: `The settings cannot be used: ${(error as Error).message}.`,
    };
  }
  const client = new HttpClient({
    baseUrl: address.href,
    credential,
    transport: target.transport,
    serviceName: 'the generation service',
    retry: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 },
    timeoutMs: CHECK_TIMEOUT_MS,
  });
  try {
    const queue = await client.json('/api/queue', { acceptStatus: [404], action: 'listing the queue' });
    if (queue.status === 404) await client.json('/api/object_info', { action: 'reading node definitions' });
    return {
      ok: true,
      code: 'ok',
      message: credential.isSet
        ? `Connected: ${address.host} answered and accepted ${credential.name}.`
        : `Connected: ${address.host} answered (no API key set, so it is used as a self-hosted server).`,
    };
  } catch (error) {
    const serviceError =
      error instanceof ServiceError
        ? error
        : new ServiceError('network', client.cleanForReport(String(error)));
    const sentences: Partial<Record<string, string>> = {
      unauthorized: credential.refusedBy(address.host),
      network: failedOnTheWay(serviceError)
        ? `${capitalised(serviceError.message)}.`
        : `${address.host} could not be reached: check the address and that the service is running.`,
    };
    return {
      ok: false,
      code: serviceError.code,
      message: sentences[serviceError.code] ?? `The service answered with an error: ${serviceError.message}`,
    };
  } finally {
    await client.close();
  }
}

function capitalised(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
