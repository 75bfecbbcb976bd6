/**
 * The config dialog's "test connection": one quick call to the service with the typed or stored credentials,
 * TLS settings and proxy, answered as a sentence a user can act on. No Node-RED inside.
 */
import { failedOnTheWay } from '../../http/client';
import { errorText } from '../../boundary/outside';
import { ServiceError } from '../../http/errors';
import { dialogClient, type DialogTarget } from '../dialog-client';
import type { DialectName } from '../dialects/dialect';

export interface ConnectionCheck {
  ok: boolean;
  /** unauthorized, network, ... or 'ok'. */
  code: string;
  message: string;
}

/** What to test: the address, the dialect it is spoken to in, how requests prove who sends them, TLS, proxy. */
export type CheckTarget = DialogTarget & { dialect?: DialectName };

const CHECK_TIMEOUT_MS = 10_000;
/** Answers to the v2 health route of a server that has none. */
const NOT_THERE = [400, 401, 403, 404, 405, 406, 410, 501];
/** A person pressed the button: one try, its answer at once. */
const NO_RETRY = { attempts: 1, baseDelayMs: 0, maxDelayMs: 0 };

/**
 * Asks which dialect the server speaks (`GET /api/v2/health` answers without a key on a Comfy API v2 server),
 * then makes one call of the chosen dialect that needs the key: the list of jobs on v2; the queue on today's API
 * (falling back to object_info when a server has no queue route). Says what happened, and which dialect to
 * choose when the server speaks the other one.
 */
export async function checkConnection(target: CheckTarget): Promise<ConnectionCheck> {
  let opened: ReturnType<typeof dialogClient>;
  try {
    opened = dialogClient(target, { retry: NO_RETRY, timeoutMs: CHECK_TIMEOUT_MS });
  } catch (error) {
    return { ok: false, code: 'invalid_input', message: (error as Error).message };
  }
  const { http: client, host, credential } = opened;
  const accepted = credential.isSet ? ` and accepted ${credential.name}` : '';
  try {
    const health = await client
      .json('/api/v2/health', { acceptStatus: NOT_THERE, action: 'asking whether it speaks Comfy API v2' })
      .catch((error: unknown) => {
        if (error instanceof ServiceError && error.code !== 'network' && error.code !== 'server_error')
          throw error;
        return undefined;
      });
    const speaksV2 = health?.status === 200 && health.json;
    if (target.dialect === 'comfy-api-v2') {
      if (!speaksV2) {
        return {
          ok: false,
          code: 'invalid_input',
          message: `${host} does not speak Comfy API v2 (GET /api/v2/health did not answer): choose "ComfyUI API" as the dialect, or give the address of a Comfy API v2 server.`,
        };
      }
      await client.json('/api/v2/jobs', { query: { limit: 1 }, action: 'listing jobs' });
      return { ok: true, code: 'ok', message: `Connected: ${host} speaks Comfy API v2${accepted}.` };
    }
    const queue = await client.json('/api/queue', { acceptStatus: [404], action: 'listing the queue' });
    if (queue.status === 404 && speaksV2) {
      return {
        ok: false,
        code: 'invalid_input',
        message: `${host} speaks Comfy API v2, not ComfyUI's API: choose "Comfy API v2" as the dialect.`,
      };
    }
    if (queue.status === 404) await client.json('/api/object_info', { action: 'reading node definitions' });
    return {
      ok: true,
      code: 'ok',
      message: credential.isSet
        ? `Connected: ${host} answered${accepted}.`
        : `Connected: ${host} answered (no API key set, so it is used as a self-hosted server).`,
    };
  } catch (error) {
    const serviceError =
      error instanceof ServiceError
        ? error
        : new ServiceError('network', client.cleanForReport(errorText(error)));
    const sentences: Partial<Record<string, string>> = {
      unauthorized:
        target.dialect === 'comfy-api-v2' && credential.scheme !== 'bearer'
          ? `${host} speaks Comfy API v2, which takes a bearer token (Authorization: Bearer): choose "Bearer token" as the authentication and enter the server's token.`
          : credential.refusedBy(host),
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
