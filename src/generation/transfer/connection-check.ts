/**
 * The config dialog's "test connection": one quick call to the service with the typed or stored key,
 * answered as a sentence a user can act on. No Node-RED inside.
 */
import { HttpClient } from '../../http/client';
import { ServiceError } from '../../http/errors';

export interface ConnectionCheck {
  ok: boolean;
  /** unauthorized, network, ... or 'ok'. */
  code: string;
  message: string;
}

const CHECK_TIMEOUT_MS = 10_000;

/** Lists the queue (falling back to object_info when a server has no queue route) and says what happened. */
export async function checkConnection(baseUrl: string, apiKey: string | undefined): Promise<ConnectionCheck> {
  let address: URL;
  try {
    address = new URL(baseUrl);
    if (address.protocol !== 'http:' && address.protocol !== 'https:') throw new Error('not http');
  } catch {
    return {
      ok: false,
      code: 'invalid_input',
      message: 'The base address is not an http(s) address, e.g. https://gen.example.com.',
    };
  }
  const client = new HttpClient({
    baseUrl: address.href,
    headers: apiKey ? { 'x-api-key': apiKey } : {},
    secrets: [apiKey],
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
      message: apiKey
        ? `Connected: ${address.host} answered and accepted the API key.`
        : `Connected: ${address.host} answered (no API key set, so it is used as a self-hosted server).`,
    };
  } catch (error) {
    const serviceError =
      error instanceof ServiceError
        ? error
        : new ServiceError('network', client.cleanForReport(String(error)));
    const sentences: Partial<Record<string, string>> = {
      unauthorized: apiKey
        ? `${address.host} refused the API key: check the key.`
        : `${address.host} asks for an API key: enter one.`,
      network: `${address.host} could not be reached: check the address and that the service is running.`,
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
