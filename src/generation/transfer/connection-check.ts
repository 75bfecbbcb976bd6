/**
 * The config dialog's "test connection": one quick call to the service with the typed or stored credentials,
 * TLS settings and proxy, answered as a sentence a user can act on. No Node-RED inside.
 */
import { failedOnTheWay } from '../../http/client';
import { errorText } from '../../boundary/outside';
import { ServiceError } from '../../http/errors';
import { dialogClient, type DialogTarget } from '../dialog-client';

export interface ConnectionCheck {
  ok: boolean;
  /** unauthorized, network, ... or 'ok'. */
  code: string;
  message: string;
}

/** What to test: the address, how requests prove who sends them, TLS and proxy. */
export type CheckTarget = DialogTarget;

const CHECK_TIMEOUT_MS = 10_000;
/** A person pressed the button: one try, its answer at once. */
const NO_RETRY = { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 };

/** Lists the queue (falling back to object_info when a server has no queue route) and says what happened. */
export async function checkConnection(target: CheckTarget): Promise<ConnectionCheck> {
  let opened: ReturnType<typeof dialogClient>;
  try {
    opened = dialogClient(target, { retry: NO_RETRY, timeoutMs: CHECK_TIMEOUT_MS });
  } catch (error) {
    return { ok: false, code: 'invalid_input', message: (error as Error).message };
  }
  const { http: client, host, credential } = opened;
  try {
    const queue = await client.json('/api/queue', { acceptStatus: [404], action: 'listing the queue' });
    if (queue.status === 404) await client.json('/api/object_info', { action: 'reading node definitions' });
    return {
      ok: true,
      code: 'ok',
      message: credential.isSet
        ? `Connected: ${host} answered and accepted ${credential.name}.`
        : `Connected: ${host} answered (no API key set, so it is used as a self-hosted server).`,
    };
  } catch (error) {
    const serviceError =
      error instanceof ServiceError
        ? error
        : new ServiceError('network', client.cleanForReport(errorText(error)));
    const sentences: Partial<Record<string, string>> = {
      unauthorized: credential.refusedBy(host),
      network: failedOnTheWay(serviceError)
        ? `${capitalised(serviceError.message)}.`
        : `${host} could not be reached: check the address and that the service is running.`,
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
